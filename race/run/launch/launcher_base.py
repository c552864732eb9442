"""What every launcher shares: the :class:`Launcher` protocol and its registry
(:func:`launcher_for`), a task (spec and cell folder), the counts a progress line shows, a
watcher's interface, and the failed summary of a job that died without one.

The registry is this package's modules: each backend module (``inline``, ``local``,
``slurm``) sets ``LAUNCHER`` to its :class:`Launcher`, and :func:`launchers` finds them
with ``pkgutil`` (submitit's ``plugins.get_executors``: one lookup by name, no branch per
backend in any caller). A new launcher is its module here and its
``race/conf/launcher/<name>.yaml``, where config validation finds its name.

The results contract is the cell folder: each job writes its own summary; when a job
dies before it can, :func:`record_lost` writes a failed one for it.

submitit is imported inside the functions that need it (heavy: ``race plan`` never loads it).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from race.catalog import closest
from race.core.specs import RunSpec
from race.errors import NoSpace, UnknownName
from race.pilot.state import unfinished_summary
from race.store.cell import CellDir
from race.store.io import write_json

# PilotJob's status for a pilot stopped by a full disk (no summary was written)
NO_SPACE = "no_space"


@dataclass(frozen=True, slots=True)
class Task:
    """One pilot to launch: its frozen spec and its cell folder."""

    spec: RunSpec
    cell_dir: str

    @property
    def cell(self) -> CellDir:
        return CellDir(self.cell_dir)


def record_lost(task: Task, error: str) -> None:
    """Write a failed ``summary.json`` for a pilot that ended without writing one.

    Its FLOPs are what the pilot spent until it died, read from its newest saved state and
    the cumulative FLOPs of the last row of its ``metrics.jsonl``
    (:func:`race.pilot.state.unfinished_summary`), so the sweep's totals keep them.
    """
    cell = task.cell
    if cell.is_ok():  # none, or damaged: write a failed one
        return
    write_json(cell.spec, task.spec.to_dict())
    write_json(cell.summary, unfinished_summary(task.spec, task.cell_dir, error))


@dataclass(frozen=True, slots=True)
class JobEnd:
    """Why a job ended without a summary: ``message`` for the record; ``crashed``: it
    raised or died (True) rather than returning normally without writing one."""

    message: str
    crashed: bool


class AskedOnce:
    """A submitted job whose outcome, once it has ended, is fetched from submitit once.

    submitit waits up to 15 s for the result file on every ``result()`` of a job that died
    without one (a slow shared filesystem may still be writing it); :func:`raise_no_space`
    and :func:`job_error` each ask, and a local watcher asks at every poll."""

    def __init__(self, job):
        self.job = job
        self._outcome: tuple[bool, object] | None = None

    def __getattr__(self, name: str):
        return getattr(self.job, name)  # job_id, paths, done(), ...

    def result(self):
        if self._outcome is None:
            try:
                self._outcome = (True, self.job.result())
            except Exception as error:  # noqa: BLE001 -- kept, raised again each time
                self._outcome = (False, error)
        ok, value = self._outcome
        if ok:
            return value
        raise value


def raise_no_space(job) -> None:
    """Raise :class:`~race.errors.NoSpace` naming the file when a finished job returned
    the pilot's full-disk outcome (``race.run.launch.job.NO_SPACE``), before anything
    tries to write a summary for it on the same full disk (which would name that file)."""
    try:
        outcome = job.result() if job is not None and job.done() else None
    except Exception:  # a failed or killed job: job_error says why
        return
    if isinstance(outcome, dict) and outcome.get("status") == NO_SPACE:
        raise NoSpace(outcome.get("path") or "")


def job_error(job, task: Task | None) -> JobEnd:
    """Why a job ended without a summary: the exception, else the tail of its log."""
    import submitit

    log = getattr(getattr(job, "paths", None), "stderr", "")
    try:
        job.result()
    except submitit.core.utils.FailedJobError as error:  # raised in the job: its last line
        lines = [line for line in str(error).splitlines() if line.strip()]
        return JobEnd(f"job {job.job_id} failed: {lines[-1][:300] if lines else error!r}; "
                      f"log: {log}", crashed=True)
    except Exception as error:  # killed or crashed: no result at all
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else repr(error)
        return JobEnd(f"job {job.job_id} ended without a result ({first}); log: {log}",
                      crashed=True)
    where = str(task.cell.summary) if task else "a summary for every cell"
    return JobEnd(f"job {job.job_id} ended without writing {where}; log: {log}",
                  crashed=False)


@dataclass
class Counts:
    """What the progress display shows."""

    total: int
    done: int = 0
    failed: int = 0
    running: int = 0


@dataclass(frozen=True, slots=True)
class Ended:
    """A task that a watcher's poll saw end.

    ``submission``: its submitit job, asked why it ended when it left no summary; None
    only for a task that has a summary or is ``lost`` (a local slot worker runs many
    tasks, so no job is a task's own). ``lost``: what to record for a task that can never
    finish (its job is gone without a summary; :func:`record_lost`), None otherwise.
    """

    task: Task
    submission: Any = None
    lost: str | None = None


class Watcher(Protocol):
    """One launcher's view of its work, polled by :func:`as_completed`.

    ``pending`` is always the tasks not reported ended yet, in the order ``start`` got
    them. A watcher neither counts nor writes summaries: :func:`as_completed` does both.
    """

    def start(self, tasks: list[Task]) -> None:
        """Submit the work for ``tasks``."""

    def poll(self, pending: list[Task]) -> list[Ended]:
        """The tasks of ``pending`` that ended since the last poll, and those that never
        will (``Ended.lost``), in the order to report them."""

    def running(self, pending: list[Task]) -> int:
        """How many of ``pending`` are running, as of the last poll."""

    def stop(self) -> None:
        """Leave none of the work running; called when the loop is left early (Ctrl-C,
        ``kill``, a crash, the generator closed)."""


class Launcher(Protocol):
    """One backend, registered by setting ``LAUNCHER`` in its module of this package.

    Everything about a backend is here, so no caller branches on its name: its name (that
    of its ``race/conf/launcher/<name>.yaml``), the ``launcher.*`` keys it reads, its check of
    the request, its submitit executor, its watcher, the torch threads and GPUs each pilot
    gets.
    """

    # launcher=<name>: its race/conf/launcher/<name>.yaml
    name: str
    # the launcher.* keys it reads beyond the ones every launcher reads (SHARED_KEYS);
    # a new backend's own knobs are launcher.options.<key>
    keys: tuple[str, ...]
    # pilots run in the sweep's own process: no wait between polls, and SIGTERM keeps its
    # default (the pilot saves on it and the process ends)
    in_process: bool

    def check(self, cfg) -> None:
        """Refuse a request (``cfg``: the ``LauncherConfig``) this backend cannot serve,
        before anything is submitted: a :class:`~race.errors.UsageError` naming the key
        and the fix."""

    def executor(self, cfg, folder: Path) -> Any:
        """The submitit executor of ``cfg``, logging under ``folder``."""

    def watcher(self, cfg, executor, job) -> Watcher:
        """The :class:`Watcher` submitting ``job`` to ``executor`` (:meth:`executor`)."""

    def threads(self, cfg) -> int:
        """Torch threads per pilot when ``launcher.threads_per_pilot=0``."""



# the launcher.* keys every launcher reads (race.run.launch.job, race.run.cells, the plan)
SHARED_KEYS = ("name", "threads_per_pilot", "checkpoint_every", "poll_s", "gpu_mem_gb")


@functools.cache
def launchers() -> dict[str, Launcher]:
    """Every registered launcher by name: the ``LAUNCHER`` of each module of this package
    (found with ``pkgutil``; a new backend is a new module, no list to edit)."""
    found: dict[str, Launcher] = {}
    for module in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        launcher = getattr(importlib.import_module(f"{__package__}.{module.name}"),
                           "LAUNCHER", None)
        if launcher is not None:
            assert launcher.name not in found, f"two launchers named {launcher.name}"
            found[launcher.name] = launcher
    return dict(sorted(found.items()))


def launcher_for(name: str) -> Launcher:
    """The launcher registered as ``name``; a miss is an :class:`~race.errors.UnknownName`
    listing the valid names, with a "did you mean"."""
    registry = launchers()
    if name not in registry:
        match = closest(name, list(registry))
        hint = f"; did you mean launcher={match}?" if match else ""
        raise UnknownName(f"launcher={name}: no launcher of this name is registered (a "
                          f"module of race/run/launch/ setting LAUNCHER); valid names: "
                          f"{', '.join(registry)}{hint}", group="launcher", name=name)
    return registry[name]
