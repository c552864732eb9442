"""The local launcher: slot workers on this machine, sharing the tasks (one per core, or
one per GPU pinned with ``CUDA_VISIBLE_DEVICES``), and the process plumbing that keeps no
pilot running after its sweep is gone.

submitit is imported inside the functions that need it (heavy: ``race plan`` never loads it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

from race.run.launch.job import cores, deliver
from race.run.launch.launcher_base import (
    NO_SPACE,
    AskedOnce,
    Ended,
    Task,
    Watcher,
    job_error,
    raise_no_space,
    record_lost,
)
from race.store.claims import CellBusy, owner_alive, this_process


class SlotWorker:
    """One local slot: runs pilots one after another in one process.

    The interpreter start and the torch/transformers/PEFT imports are paid once per slot,
    not once per pilot, and so is a vLLM engine: the slot's pilots
    share it while their engine arguments agree, and the slot closes it at the end.
    Workers share the task list and claim cells with exclusive-create files, so a slot
    that finishes early takes the next cell. After a requeue (timeout) a worker first
    resumes the cells it had claimed.
    """

    def __init__(self, job, claims: str, slot: int, owner: dict | None = None):
        """``owner``: the sweep process (:func:`race.store.claims.this_process`) this worker
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
            return mine and not task.cell.summary_since(path.stat().st_mtime)

    def __call__(self, tasks: list[Task]) -> dict | None:
        """Run the claimable ``tasks`` one after another; a full disk stops the slot and
        is returned (``{"status": NO_SPACE, "path": ...}``) for the sweep to end on."""
        die_with_parent()
        if self.owner is not None:
            watch_owner(self.owner)
        try:
            for task in tasks:
                noted = getattr(self.job, "unanswered", [])
                while noted:  # a warning the last pilot noted as it ended: requeue now
                    deliver(*noted.pop())
                if not self.claim(task):
                    continue
                try:
                    outcome = self.job(task.spec, task.cell_dir)
                except CellBusy:  # another process runs it: not ours to record
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
    def watch() -> None:
        while owner_alive(owner):
            time.sleep(every_s)
        _kill_tree(os.getpid())

    threading.Thread(target=watch, name="race-owner-watch", daemon=True).start()


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
        self.claims = Path(self.executor.folder) / f"claims-{uuid.uuid4().hex[:8]}"
        self.claims.mkdir(parents=True)
        self.start_epoch_s = time.time() - 1.0  # file times are coarse on some filesystems
        # a worker runs many pilots: give it the time limit of all of them
        self.executor.update_parameters(timeout_min=self.timeout_min * len(tasks))
        for slot in self.slot_ids[:len(tasks)]:
            if self.pin_gpus:
                self.executor.update_parameters(visible_gpus=[slot], gpus_per_node=1)
            self.workers.append(AskedOnce(self.executor.submit(
                SlotWorker(self.job, str(self.claims), slot, this_process()), tasks)))

    def poll(self, pending: list[Task]) -> list[Ended]:
        finished = [t for t in pending if t.cell.summary_since(self.start_epoch_s)]
        ends = [Ended(task) for task in finished]
        for worker in self.workers:  # a worker stopped by a full disk ends the sweep
            raise_no_space(worker)
        if not all(w.done() for w in self.workers):
            return ends
        # every worker ended: what is left never finishes
        errors = [job_error(w, None) for w in self.workers]
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


def slots(cfg) -> int:
    """Pilots that run at once under the local launcher (``slots=0``: one per core)."""
    return len(cfg.gpus) if cfg.gpus else (cfg.slots or cores())


def local_threads(cfg) -> int:
    """Torch threads per pilot: this machine's cores shared by the slots (one slot per GPU
    with ``launcher.gpus``), at least one."""
    return max(1, cores() // slots(cfg))


class LocalLauncher:
    """``launcher=local`` (:class:`~race.run.launch.launcher_base.Launcher`)."""

    name = "local"
    keys = ("slots", "gpus", "timeout_min", "signal_delay_s", "max_requeues")
    in_process = False

    def check(self, cfg) -> None:
        """Nothing beyond the plan's checks (``launcher.gpus`` against this machine's GPUs
        is one: :func:`race.config.check_gpus`)."""

    def executor(self, cfg, folder: Path):
        import submitit

        ex = submitit.LocalExecutor(folder, max_num_timeout=cfg.max_requeues)
        ex.update_parameters(timeout_min=cfg.timeout_min, signal_delay_s=cfg.signal_delay_s)
        return ex

    def watcher(self, cfg, executor, job) -> Watcher:
        slot_ids = list(cfg.gpus) if cfg.gpus else list(range(slots(cfg)))
        return LocalWatcher(executor, job, slot_ids=slot_ids, pin_gpus=bool(cfg.gpus),
                            timeout_min=cfg.timeout_min)

    def threads(self, cfg) -> int:
        return local_threads(cfg)



LAUNCHER = LocalLauncher()
