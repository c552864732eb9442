"""Launchers: every pilot goes through submitit, to SLURM, to local processes, or inline.

- ``local``: ``launcher.slots`` worker processes on this machine, each running pilots one
  after another with ``cores // slots`` torch threads (imports paid once per slot); with
  ``launcher.gpus=[0,1,...]`` one worker per GPU, pinned with ``CUDA_VISIBLE_DEVICES``
  (submitit's ``visible_gpus``).
- ``slurm``: one job array; partition, GPUs, CPUs, memory, time limit, array
  parallelism and setup lines from the config. A pilot that reaches its time limit (or
  is preempted) is checkpointed by submitit's signal handler and requeued; the pilot
  resumes from its own last checkpoint (adapter, optimizer, ledger, RNG), so FLOPs are
  never counted twice.
- ``inline``: in this process, one after another (submitit's debug executor).

One loop polls them all: :func:`as_completed` yields each task as it ends, asking the
launcher's watcher (:class:`InlineWatcher`, :class:`LocalWatcher`, :class:`SlurmWatcher`)
only to start the work, which tasks ended since the last poll, how many run, and which can
never finish. Polling has a deadline: a job that leaves the scheduler without a result
(killed, node lost) is noticed within ``launcher.lost_after_s`` and recorded as a failed
cell instead of being waited on forever (submitit alone needs ``sacct`` for that).

The results contract is the cell folder: each job writes its own ``summary.json``; when a
job dies before it can, :func:`record_lost` writes a failed summary for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from race.core.specs import RunSpec
from race.errors import NoSpace, UsageError
from race.pilot.loop import unfinished_summary
from race.store import claims
from race.store import io as results


@dataclass(frozen=True, slots=True)
class Task:
    """One pilot to launch: its frozen spec and its cell folder."""

    spec: RunSpec
    cell_dir: str


class StopSignals:
    """A scheduler's signals turned into a request the pilot reads at its next step boundary.

    While active, submitit's preemption signal (``SIGUSR2`` unless
    ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise: SLURM sends it ``signal_delay_s`` before the
    time limit) and ``SIGTERM`` (``scancel``, or SLURM's preemption) only note that they
    arrived; called, the object answers whether one did. After the pilot has saved its
    state, :meth:`forward` acts on the signal (:func:`_deliver`): the warning goes to
    submitit's checkpoint-and-requeue handler (which calls :meth:`PilotJob.checkpoint` and
    requeues the job), SIGTERM ends the process.
    """

    def __init__(self):
        import signal

        name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
        self.preempt = getattr(signal, f"SIG{name}", signal.SIGUSR2)
        self.signals = (self.preempt, signal.SIGTERM)
        self.previous: dict = {}
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self.previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.received = self.received or signum

    def __call__(self) -> bool:
        return self.received is not None

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def forward(self) -> None:
        """Deliver the noted signal as if it arrived now (after the pilot's save)."""
        signum = self.received
        self.__exit__()
        _deliver(signum, self.preempt)


# Time-limit warnings a pilot noted but finished before it could act on (during its final
# evaluation): the slot worker delivers them before it starts its next pilot.
_UNANSWERED: list[tuple[int, int]] = []


def _deliver(signum: int, preempt: int) -> None:
    """Act on ``signum`` now that the pilot's state is saved.

    submitit's preemption signal (the time-limit warning) goes to its handler, which calls
    ``checkpoint`` and requeues the job. SIGTERM ends the process as it asks: it is how
    ``scancel`` cancels and how SLURM preempts, and a scheduler that preempts in requeue
    mode requeues the job itself, which then resumes from the saved step.
    """
    import signal

    handler = signal.getsignal(preempt)
    if signum == preempt and callable(handler):
        handler(signum, None)  # exits the process when it requeues
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# PilotJob's status for a pilot stopped by a full disk (no summary was written)
NO_SPACE = "no_space"


class PilotJob:
    """The picklable callable every launcher runs: one pilot, resumed if checkpointed.

    A time-limit warning or SIGTERM makes the pilot save its state at its next step
    boundary and stop. On the warning, submitit's handler then calls ``checkpoint`` (the
    ``submitit.helpers.Checkpointable`` protocol) and requeues the job; on SIGTERM the job
    ends (a preemption in requeue mode is requeued by SLURM; a cancelled cell resumes on
    the sweep's rerun). Either way the pilot resumes from that step: nothing done before
    the signal is redone.
    """

    def __init__(self, threads: int, checkpoint_every: int, keep_final_state: bool = False):
        self.threads = threads
        self.checkpoint_every = checkpoint_every
        self.keep_final_state = keep_final_state  # a ladder rung that a later one continues

    def __call__(self, spec: RunSpec, cell_dir: str) -> dict:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch starts its pool
            os.environ[var] = str(self.threads)
        import torch

        from race.pilot.loop import StopRequested, run_pilot

        torch.set_num_threads(self.threads)
        # the cell's run lock for the pilot's whole life: no other process runs it meanwhile
        with StopSignals() as stop, claims.cell_lock(cell_dir):
            try:
                summary = run_pilot(spec, Path(cell_dir), stop=stop,
                                    checkpoint_every=self.checkpoint_every,
                                    keep_final_state=self.keep_final_state)
            except StopRequested:
                stop.forward()  # under submitit: checkpoint() and requeue; exits
                raise
            except NoSpace as full:  # nothing torn, nothing recorded: the caller stops
                return {"status": NO_SPACE, "error": str(full), "path": full.path,
                        "steps": 0, "total_flops": 0.0}
        if stop.received == stop.preempt:  # too late for this pilot, not for its slot
            _UNANSWERED.append((stop.received, stop.preempt))
        elif stop.received is not None:  # SIGTERM during the final evaluation: end now
            _deliver(stop.received, stop.preempt)
        return {k: summary[k] for k in ("status", "error", "steps", "total_flops")}

    def checkpoint(self, spec: RunSpec, cell_dir: str):
        """Requeue the same call: the pilot's saved state carries its progress."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, spec, cell_dir)


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def slots(cfg) -> int:
    """Pilots that run at once under the local launcher (``slots=0``: one per core)."""
    return len(cfg.gpus) if cfg.gpus else (cfg.slots or cores())


def threads(cfg) -> int:
    """Torch threads per pilot: ``threads_per_pilot``, else the SLURM task's CPUs, else
    this machine's cores shared by the slots (one slot per GPU with ``gpus``)."""
    if cfg.threads_per_pilot:
        return cfg.threads_per_pilot
    if cfg.name == "slurm":
        return slurm_resources(cfg)[0]
    return max(1, cores() // slots(cfg))


# SLURM defaults per pilot when cpus_per_task / mem_gb are null: (CPUs, GB) without a GPU,
# and per GPU (data loading, tokenization and the checkpoint's host copy)
SLURM_CPU_DEFAULTS, SLURM_GPU_DEFAULTS = (1, 4), (8, 32)


def slurm_resources(cfg) -> tuple[int, int]:
    """(CPUs, host GB) each SLURM pilot asks for: the configured values, else defaults
    that scale with ``gpus_per_node``."""
    cpus, gb = (tuple(n * cfg.gpus_per_node for n in SLURM_GPU_DEFAULTS)
                if cfg.gpus_per_node else SLURM_CPU_DEFAULTS)
    return (cfg.cpus_per_task or cpus, cfg.mem_gb or gb)


def executor(cfg, folder: Path):
    """The submitit executor for ``cfg`` (a ``LauncherConfig``), logging under ``folder``."""
    import submitit

    if cfg.name == "inline":
        return submitit.DebugExecutor(folder)
    if cfg.name == "local":
        ex = submitit.LocalExecutor(folder, max_num_timeout=cfg.max_requeues)
        ex.update_parameters(timeout_min=cfg.timeout_min, signal_delay_s=cfg.signal_delay_s)
        return ex
    ex = submitit.AutoExecutor(folder, cluster="slurm", slurm_max_num_timeout=cfg.max_requeues)
    cpus, mem_gb = slurm_resources(cfg)
    params = dict(timeout_min=cfg.timeout_min, cpus_per_task=cpus,
                  mem_gb=mem_gb, slurm_array_parallelism=cfg.array_parallelism,
                  slurm_signal_delay_s=cfg.signal_delay_s, name="race-pilot")
    if cfg.partition:
        params["slurm_partition"] = cfg.partition
    if cfg.gpus_per_node:
        params["gpus_per_node"] = cfg.gpus_per_node
    if cfg.setup:
        params["slurm_setup"] = list(cfg.setup)
    if cfg.additional:
        params["slurm_additional_parameters"] = dict(cfg.additional)
    ex.update_parameters(**params)
    return ex


SINFO_FORMAT = "%P|%c|%m|%G"  # partition (default marked *), CPUs, memory MB, generic resources


def parse_sinfo(text: str) -> dict[str, tuple[int, int, int, bool]]:
    """``sinfo -h -o "%P|%c|%m|%G"`` as partition -> (CPUs, memory MB, GPUs, default),
    the largest node of each partition (a partition may list several node kinds; ``+``
    marks a minimum, e.g. ``64+``).
    """
    partitions: dict[str, tuple[int, int, int, bool]] = {}
    for line in text.split():
        name, cpus, mem, gres = line.split("|")
        default = name.endswith("*")
        name = name.rstrip("*")
        # gpu[:type]:count[(S:sockets)]: the count before any socket list
        gpus = sum(int(g.split("(")[0].split(":")[-1]) for g in gres.split(",")
                   if g.startswith("gpu"))
        node = (int(cpus.rstrip("+")), int(mem.rstrip("+")), gpus)
        seen = partitions.get(name)
        if seen is not None:
            node = tuple(max(a, b) for a, b in zip(node, seen[:3]))
            default = default or seen[3]
        partitions[name] = (*node, default)
    return partitions


def check_slurm(cfg) -> None:
    """Refuse, before anything is submitted, a partition or a request the cluster lacks.

    Raises ValueError naming the key and the fix (the CLI's exit code 2).
    """
    try:
        out = subprocess.run(["sinfo", "-h", "-o", SINFO_FORMAT], capture_output=True,
                             text=True, timeout=30)
    except FileNotFoundError:
        raise UsageError("launcher=slurm: `sinfo` is not on PATH; run on a SLURM login node, "
                         "bring up the localhost cluster (bash launchers/slurm-localhost.sh "
                         "up), or use launcher=local") from None
    if out.returncode != 0:
        raise UsageError(f"launcher=slurm: sinfo failed ({out.stderr.strip()}); check "
                         f"SLURM_CONF and that slurmctld is up")
    partitions = parse_sinfo(out.stdout)
    name = cfg.partition or next((n for n, p in partitions.items() if p[3]), "")
    if name not in partitions:
        raise UsageError(f"launcher.partition={cfg.partition!r}: no such SLURM partition; "
                         f"valid: {', '.join(sorted(partitions))}")
    cpus, mem_mb, gpus, _ = partitions[name]
    want_cpus, want_gb = slurm_resources(cfg)
    for key, asked, has, unit in (("cpus_per_task", want_cpus, cpus, "CPUs"),
                                  ("mem_gb", want_gb * 1024, mem_mb, "MB"),
                                  ("gpus_per_node", cfg.gpus_per_node, gpus, "GPUs")):
        if asked > has:
            shown = want_gb if key == "mem_gb" else asked
            raise UsageError(f"launcher.{key}={shown}: larger than a node of partition "
                             f"{name!r} ({has} {unit}); request at most that")


def record_lost(task: Task, error: str) -> None:
    """Write a failed ``summary.json`` for a pilot that ended without writing one.

    Its FLOPs are what the pilot spent until it died, read from its newest saved state and
    the cumulative FLOPs of the last row of its ``metrics.jsonl``
    (:func:`race.pilot.loop.unfinished_summary`), so the sweep's totals keep them.
    """
    summary_path = Path(task.cell_dir) / "summary.json"
    try:
        if results.read_json(summary_path).get("status") == "ok":
            return
    except (OSError, ValueError, AttributeError):  # none, or damaged: write a failed one
        pass
    results.write_json(Path(task.cell_dir) / "spec.json", task.spec.to_dict())
    results.write_json(summary_path, unfinished_summary(task.spec, task.cell_dir, error))


@dataclass(frozen=True, slots=True)
class JobEnd:
    """Why a job ended without a summary: ``message`` for the record; ``crashed``: it
    raised or died (True) rather than returning normally without writing one."""

    message: str
    crashed: bool


def _job_error(job, task: Task | None) -> JobEnd:
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
    where = f"{task.cell_dir}/summary.json" if task else "a summary for every cell"
    return JobEnd(f"job {job.job_id} ended without writing {where}; log: {log}",
                  crashed=False)


def parse_squeue(text: str) -> dict[str, str]:
    """``squeue -h -r -o "%i %t"`` output as ``{job id: state code}`` (R, PD, CG, ...)."""
    return {parts[0]: parts[1] for parts in (line.split() for line in text.splitlines())
            if len(parts) >= 2}


def _squeue() -> dict[str, str] | None:
    """This cluster's queue (:func:`parse_squeue`), or None when squeue does not answer."""
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %t"], capture_output=True,
                             text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return parse_squeue(out.stdout) if out.returncode == 0 else None


@contextmanager
def quiet_library_output(log_path: Path):
    """Send what libraries print during a launch to ``log_path`` instead of the terminal.

    submitit's logger (its INFO lines and "Bypassing sacct error" warnings), Python
    warnings, and the stderr of the commands submitit runs (``sacct``'s "Slurm accounting
    storage is disabled") go to the log; RACE's own lines, written to ``sys.stderr``,
    still reach the terminal.
    """
    import logging
    import warnings

    import submitit  # noqa: F401  (configures its logger on import: do it before the swap)

    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "a")  # closed in the finally below
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s (%(asctime)s) %(message)s"))
    submitit_log = logging.getLogger("submitit")
    saved_handlers, saved_propagate = submitit_log.handlers[:], submitit_log.propagate
    submitit_log.handlers, submitit_log.propagate = [handler], False
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    saved_stderr = sys.stderr
    os.dup2(log.fileno(), 2)  # child processes' stderr (sacct) -> the log
    sys.stderr = os.fdopen(os.dup(terminal_fd), "w", buffering=1)  # ours -> the terminal
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, category, filename, lineno, file=None, \
                line=None: log.write(warnings.formatwarning(message, category, filename,
                                                            lineno, line))
            yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = saved_stderr
        os.dup2(terminal_fd, 2)
        os.close(terminal_fd)
        submitit_log.handlers, submitit_log.propagate = saved_handlers, saved_propagate
        log.close()


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


def as_completed(watcher: Watcher, tasks: list[Task], *, counts: Counts, poll_s: float,
                 on_change: Callable[[Counts], None] | None = None
                 ) -> Iterator[tuple[Task, Any]]:
    """Start ``tasks`` with ``watcher`` and yield ``(task, submission)`` as each one ends,
    in the order its polls report them (submitit's ``helpers.as_completed``).

    Every yielded task has a ``summary.json``: its own, or one :func:`record_lost` wrote
    (for a task the watcher reports lost, or whose job ended without writing one).
    ``counts`` is updated in place: ``done`` or ``failed`` (the summary's status) as each
    task ends; ``running`` (the watcher's answer) after each poll, so a task is no longer
    counted running once it has ended. ``on_change(counts)`` is called once the work has
    started, after each ended task and after each poll; the loop then sleeps ``poll_s``
    seconds while tasks are pending. On leaving early (an exception, Ctrl-C, the generator
    closed) it calls ``watcher.stop()``.
    """
    pending = list(tasks)

    def notify() -> None:
        if on_change:
            on_change(counts)

    try:
        watcher.start(tasks)
        counts.running = watcher.running(pending)
        notify()
        while pending:
            ends = watcher.poll(pending)
            for end in ends:
                pending.remove(end.task)
            counts.running = watcher.running(pending)
            for end in ends:
                _count_end(end, counts)
                notify()
                yield end.task, end.submission
            counts.running = watcher.running(pending)
            notify()
            if pending:
                time.sleep(poll_s)
    except BaseException:  # Ctrl-C, kill or a crash: stop what the watcher started
        watcher.stop()
        raise


def _count_end(end: Ended, counts: Counts) -> None:
    """Give ``end.task`` a summary if it has none, then count it done (status ok) or
    failed."""
    if end.lost is not None:
        record_lost(end.task, end.lost)
    summary_path = Path(end.task.cell_dir) / "summary.json"
    if not summary_path.is_file():  # its job returned or died without writing one
        record_lost(end.task, _job_error(end.submission, end.task).message)
    try:
        ok = results.read_json(summary_path).get("status") == "ok"
    except (ValueError, AttributeError):  # damaged: counted failed, rerun next time
        ok = False
    counts.done += ok
    counts.failed += not ok


def launch(tasks: list[Task], cfg, folder: Path,
           on_change: Callable[[Counts], None] | None = None, job=None) -> Counts:
    """Run ``tasks`` through the launcher ``cfg``; return when every pilot has ended.

    Every task ends with a ``summary.json`` in its cell folder (written by the pilot, or
    by :func:`record_lost`). A failed pilot never stops the others. ``job`` is the
    picklable ``job(spec, cell_dir)`` each task runs (default: :class:`PilotJob`).
    ``on_change(counts)`` is called as :func:`as_completed` describes.
    """
    folder = Path(folder)
    counts = Counts(total=len(tasks))
    if not tasks:
        return counts
    job = job or PilotJob(threads(cfg), cfg.checkpoint_every)
    ex = executor(cfg, folder)
    inline = cfg.name == "inline"
    # an inline poll runs a pilot to its end: there is nothing to wait for between polls
    ends = as_completed(watcher_for(cfg, ex, job), tasks, counts=counts, on_change=on_change,
                        poll_s=0.0 if inline else cfg.poll_s)
    # SIGTERM unwinds like Ctrl-C, so the watcher stops local pilots; an inline run keeps
    # SIGTERM's default (its pilot saves on it, see StopSignals, and the process ends)
    with (nullcontext() if inline else _terminate_as_interrupt()), closing(ends):
        for _ in ends:  # counted and reported inside the generator
            pass
    return counts


def watcher_for(cfg, ex, job) -> Watcher:
    """The watcher of launcher ``cfg`` (a ``LauncherConfig``), submitting ``job`` to the
    submitit executor ``ex`` (:func:`executor`)."""
    if cfg.name == "inline":
        return InlineWatcher(ex, job)
    if cfg.name == "slurm":
        return SlurmWatcher(ex, job, lost_after_s=cfg.lost_after_s,
                            max_requeues=cfg.max_requeues)
    slot_ids = list(cfg.gpus) if cfg.gpus else list(range(slots(cfg)))
    return LocalWatcher(ex, job, slot_ids=slot_ids, pin_gpus=bool(cfg.gpus),
                        timeout_min=cfg.timeout_min)


@contextmanager
def _terminate_as_interrupt():
    """SIGTERM (``kill``, a job scheduler) unwinds like Ctrl-C, so local pilots stop too."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class InlineWatcher:
    """Pilots in this process, one after another (submitit's debug executor): each poll
    runs the next pending task to its end."""

    def __init__(self, executor, job):
        self.executor, self.job = executor, job

    def start(self, tasks: list[Task]) -> None:
        """Nothing runs ahead: each poll submits the task it runs."""

    def poll(self, pending: list[Task]) -> list[Ended]:
        task = pending[0]
        sub = self.executor.submit(self.job, task.spec, task.cell_dir)
        try:
            outcome = sub.result()
        except Exception as error:  # recorded, never stops the others
            if not (Path(task.cell_dir) / "summary.json").is_file():
                return [Ended(task, sub, lost=f"{type(error).__name__}: {error}")]
            return [Ended(task, sub)]
        if isinstance(outcome, dict) and outcome.get("status") == NO_SPACE:
            raise NoSpace(outcome["path"])  # a full disk ends the sweep
        return [Ended(task, sub)]

    def running(self, pending: list[Task]) -> int:
        """One while tasks are pending: the next starts as soon as the last has ended."""
        return min(1, len(pending))

    def stop(self) -> None:
        """Nothing to stop: a pilot in this process ends with it."""


class SlotWorker:
    """One local slot: runs pilots one after another in one process.

    The interpreter start and the torch/transformers/PEFT imports (~5 s on this CPU) are
    paid once per slot, not once per pilot, and so is a vLLM engine: the slot's pilots
    share it while their engine arguments agree, and the slot closes it at the end.
    Workers share the task list and claim cells with exclusive-create files, so a slot
    that finishes early takes the next cell. After a requeue (timeout) a worker first
    resumes the cells it had claimed.
    """

    def __init__(self, job, claims: str, slot: int, owner: dict | None = None):
        """``owner``: the sweep process (:func:`race.store.io.this_process`) this worker
        must not outlive."""
        self.job, self.claims, self.slot, self.owner = job, claims, slot, owner

    def claim(self, task: Task) -> bool:
        path = Path(self.claims) / task.spec.cell_id
        try:
            with open(path, "x") as f:
                f.write(str(self.slot))
            return True
        except FileExistsError:  # ours from before a requeue, and not finished: resume it
            mine = path.read_text().strip() == str(self.slot)
            return mine and not _finished_since(task, path.stat().st_mtime)

    def __call__(self, tasks: list[Task]) -> dict | None:
        """Run the claimable ``tasks`` one after another; a full disk stops the slot and
        is returned (``{"status": NO_SPACE, "path": ...}``) for the sweep to end on."""
        die_with_parent()
        if self.owner is not None:
            watch_owner(self.owner)
        try:
            for task in tasks:
                while _UNANSWERED:  # a warning the last pilot noted as it ended: requeue now
                    _deliver(*_UNANSWERED.pop())
                if not self.claim(task):
                    continue
                try:
                    outcome = self.job(task.spec, task.cell_dir)
                except claims.CellBusy:  # another process runs it: not ours to record
                    continue
                except Exception as error:  # recorded; the slot goes on with the next cell
                    record_lost(task, f"{type(error).__name__}: {error}")
                    continue
                if isinstance(outcome, dict) and outcome.get("status") == NO_SPACE:
                    return outcome  # stop: no later cell could write either
        finally:  # the vLLM engine its pilots shared (pilot.backend=vllm), if one is open
            if "race.pilot.rollout.vllm" in sys.modules:
                sys.modules["race.pilot.rollout.vllm"].close_engine()

    def checkpoint(self, tasks: list[Task]):
        import submitit

        return submitit.helpers.DelayedSubmission(self, tasks)


PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal this process gets when its parent dies


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (submitit's local controller)
    dies (``prctl(PR_SET_PDEATHSIG)``); a no-op where libc or prctl is missing."""
    import ctypes
    import ctypes.util
    import signal

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return


def watch_owner(owner: dict, every_s: float = 0.5) -> None:
    """End this process, and every process it started, once ``owner`` (the sweep that
    launched it) is gone: a sweep killed with ``kill -9`` cannot stop its pilots, so each
    slot worker stops itself (a daemon thread polls ``owner`` every ``every_s`` seconds).
    What the pilot spent after its last saved state is redone, and recorded as redone,
    by the sweep's rerun."""
    import threading

    def watch() -> None:
        while claims.owner_alive(owner):
            time.sleep(every_s)
        _kill_tree(os.getpid())

    threading.Thread(target=watch, name="race-owner-watch", daemon=True).start()


def _finished_since(task: Task, since: float) -> bool:
    """Whether the cell has a summary.json written at or after ``since`` (epoch seconds)."""
    path = Path(task.cell_dir) / "summary.json"
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _raise_no_space(worker) -> None:
    """Raise :class:`NoSpace` when a finished slot worker says a full disk stopped it."""
    try:
        outcome = worker.result()
    except Exception:  # crashed or without a result: LocalWatcher.poll reports it
        return
    if isinstance(outcome, dict) and outcome.get("status") == NO_SPACE:
        raise NoSpace(outcome["path"])


class LocalWatcher:
    """Slot workers on this machine (:class:`SlotWorker`), one per slot, sharing the tasks.

    A task has ended once its ``summary.json`` is written after the start (a worker
    records the failures it catches); it runs while a worker holds its claim. When every
    worker has ended, the pending tasks never will: they are lost, with the reason a
    worker gave. :meth:`stop` kills the workers' process trees.
    """

    def __init__(self, executor, job, *, slot_ids: list[int], pin_gpus: bool,
                 timeout_min: int):
        """``slot_ids``: one worker per id, at most one per task; with ``pin_gpus`` each
        id is the GPU its worker sees (``CUDA_VISIBLE_DEVICES``). ``timeout_min``: the
        time limit of one pilot."""
        self.executor, self.job = executor, job
        self.slot_ids, self.pin_gpus, self.timeout_min = slot_ids, pin_gpus, timeout_min
        self.workers: list = []
        self.claims = Path()  # the claim files' folder, made by start()
        self.start_epoch_s = 0.0  # time.time() at start(), less a second

    def start(self, tasks: list[Task]) -> None:
        import uuid

        self.claims = Path(self.executor.folder) / f"claims-{uuid.uuid4().hex[:8]}"
        self.claims.mkdir(parents=True)
        self.start_epoch_s = time.time() - 1.0  # file times are coarse on some filesystems
        # a worker runs many pilots: give it the time limit of all of them
        self.executor.update_parameters(timeout_min=self.timeout_min * len(tasks))
        for slot in self.slot_ids[:len(tasks)]:
            if self.pin_gpus:
                self.executor.update_parameters(visible_gpus=[slot], gpus_per_node=1)
            self.workers.append(self.executor.submit(
                SlotWorker(self.job, str(self.claims), slot, claims.this_process()), tasks))

    def poll(self, pending: list[Task]) -> list[Ended]:
        finished = [t for t in pending if _finished_since(t, self.start_epoch_s)]
        ends = [Ended(task) for task in finished]
        for worker in self.workers:  # a worker stopped by a full disk ends the sweep
            if worker.done():
                _raise_no_space(worker)
        if not all(w.done() for w in self.workers):
            return ends
        # every worker ended: what is left never finishes
        errors = [_job_error(w, None) for w in self.workers]
        why = next((e for e in errors if e.crashed), errors[0]).message
        return ends + [Ended(task, lost=why) for task in pending if task not in finished]

    def running(self, pending: list[Task]) -> int:
        return sum(1 for t in pending if (self.claims / t.spec.cell_id).exists())

    def stop(self) -> None:
        """Kill every worker's process tree: local pilots are our children."""
        for worker in self.workers:
            _kill_tree(int(worker.job_id))  # a local job's id is its controller's pid


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and its descendants (submitit's pilot processes ignore SIGTERM,
    which SLURM uses for preemption, and its local controller only forwards signals)."""
    import signal

    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):  # every thread's children
        try:
            children += (task / "children").read_text().split()
        except OSError:
            pass
    for child in children:
        _kill_tree(int(child))
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class SlurmWatcher:
    """One SLURM job array, one array task per task, watched through ``squeue``.

    A task has ended when submitit says its job is done. A job gone from the queue without
    a result (cancelled, out of requeues, node lost) for ``lost_after_s`` seconds is lost:
    submitit alone would need ``sacct`` to notice.
    """

    def __init__(self, executor, job, *, lost_after_s: float, max_requeues: int):
        """``max_requeues``: the executor's requeue limit, named in a lost job's error."""
        self.executor, self.job = executor, job
        self.lost_after_s, self.max_requeues = lost_after_s, max_requeues
        self.jobs: dict[str, Any] = {}  # cell folder -> its task's submitit job
        self.queue: dict[str, str] | None = {}  # the last squeue; None: it did not answer
        # cell folder -> time.monotonic() when its job was first seen gone from the queue
        self.missing_since_s: dict[str, float] = {}

    def start(self, tasks: list[Task]) -> None:
        subs = self.executor.map_array(self.job, [t.spec for t in tasks],
                                       [t.cell_dir for t in tasks])
        self.jobs = {t.cell_dir: sub for t, sub in zip(tasks, subs)}
        print(f"race sweep: submitted job array {subs[0].job_id.split('_')[0]} "
              f"({len(subs)} pilots) to SLURM", file=sys.stderr)

    def poll(self, pending: list[Task]) -> list[Ended]:
        self.queue = _squeue()
        ends = []
        for task in pending:
            sub = self.jobs[task.cell_dir]
            if sub.done():
                ends.append(Ended(task, sub))
                continue
            if self.queue is None or sub.job_id in self.queue:
                self.missing_since_s.pop(task.cell_dir, None)
                continue
            first_s = self.missing_since_s.setdefault(task.cell_dir, time.monotonic())
            if time.monotonic() - first_s >= self.lost_after_s:
                ends.append(Ended(task, sub, lost=(
                    f"job {sub.job_id} left the SLURM queue without a result (cancelled, "
                    f"timed out after {self.max_requeues} requeues, or its node failed); "
                    f"log: {sub.paths.stderr}")))
        return ends

    def running(self, pending: list[Task]) -> int:
        """Started and not ended (R, or CG: completing); all of them when squeue did not
        answer."""
        if self.queue is None:
            return len(pending)
        return sum(1 for t in pending
                   if self.queue.get(self.jobs[t.cell_dir].job_id) in ("R", "CG"))

    def stop(self) -> None:
        """Nothing: the jobs are SLURM's and run on, each writing its own summary
        (``scancel`` stops them)."""
