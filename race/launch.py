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

Polling has a deadline: a job that leaves the scheduler without a result (killed, node
lost) is noticed within ``launcher.lost_after_s`` and recorded as a failed cell instead
of being waited on forever (submitit alone needs ``sacct`` for that).

The results contract is the cell folder: each job writes its own ``summary.json``; when a
job dies before it can, :func:`record_lost` writes a failed summary for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from race import results
from race.errors import UsageError
from race.pilot import unfinished_summary
from race.specs import RunSpec


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

        from race.pilot import StopRequested, run_pilot

        torch.set_num_threads(self.threads)
        with StopSignals() as stop:
            try:
                summary = run_pilot(spec, Path(cell_dir), stop=stop,
                                    checkpoint_every=self.checkpoint_every,
                                    keep_final_state=self.keep_final_state)
            except StopRequested:
                stop.forward()  # under submitit: checkpoint() and requeue; exits
                raise
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
    if cfg.threads_per_pilot:
        return cfg.threads_per_pilot
    if cfg.name == "slurm":
        return cfg.cpus_per_task
    return max(1, cores() // (1 if cfg.gpus else slots(cfg)))


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
    params = dict(timeout_min=cfg.timeout_min, cpus_per_task=cfg.cpus_per_task,
                  mem_gb=cfg.mem_gb, slurm_array_parallelism=cfg.array_parallelism,
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
    for key, asked, has, unit in (("cpus_per_task", cfg.cpus_per_task, cpus, "CPUs"),
                                  ("mem_gb", cfg.mem_gb * 1024, mem_mb, "MB"),
                                  ("gpus_per_node", cfg.gpus_per_node, gpus, "GPUs")):
        if asked > has:
            shown = cfg.mem_gb if key == "mem_gb" else asked
            raise UsageError(f"launcher.{key}={shown}: larger than a node of partition "
                             f"{name!r} ({has} {unit}); request at most that")


def record_lost(task: Task, error: str) -> None:
    """Write a failed ``summary.json`` for a pilot that ended without writing one.

    Its FLOPs are what the pilot spent until it died, read from its newest saved state and
    the cumulative FLOPs of the last row of its ``metrics.jsonl``
    (:func:`race.pilot.unfinished_summary`), so the sweep's totals keep them.
    """
    summary_path = Path(task.cell_dir) / "summary.json"
    if summary_path.is_file() and results.read_json(summary_path).get("status") == "ok":
        return
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


def launch(tasks: list[Task], cfg, folder: Path,
           on_change: Callable[[Counts], None] | None = None, job=None) -> Counts:
    """Run ``tasks`` through the launcher ``cfg``; return when every pilot has ended.

    Every task ends with a ``summary.json`` in its cell folder (written by the pilot, or
    by :func:`record_lost`). A failed pilot never stops the others. ``job`` is the
    picklable ``job(spec, cell_dir)`` each task runs (default: :class:`PilotJob`).
    """
    folder = Path(folder)
    counts = Counts(total=len(tasks))
    if not tasks:
        return counts
    job = job or PilotJob(threads(cfg), cfg.checkpoint_every)
    ex = executor(cfg, folder)

    def finished(task: Task, sub) -> None:
        summary_path = Path(task.cell_dir) / "summary.json"
        if not summary_path.is_file():
            record_lost(task, _job_error(sub, task).message)  # (local workers record theirs)
        ok = results.read_json(summary_path).get("status") == "ok"
        counts.done += ok
        counts.failed += not ok
        if on_change:
            on_change(counts)

    if cfg.name == "inline":
        for task in tasks:
            sub = ex.submit(job, task.spec, task.cell_dir)
            counts.running = 1
            if on_change:
                on_change(counts)
            try:
                sub.result()
            except Exception as error:  # recorded, never stops the others
                if not (Path(task.cell_dir) / "summary.json").is_file():
                    record_lost(task, f"{type(error).__name__}: {error}")
            counts.running = 0
            finished(task, sub)
        return counts
    with _terminate_as_interrupt():
        if cfg.name == "slurm":
            _poll_slurm(ex, job, tasks, cfg, counts, finished, on_change)
        else:
            _poll_local(ex, job, tasks, cfg, counts, finished, on_change)
    return counts


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


class SlotWorker:
    """One local slot: runs pilots one after another in one process.

    The interpreter start and the torch/transformers/PEFT imports (~5 s on this CPU) are
    paid once per slot, not once per pilot. Workers share the task list and claim cells
    with exclusive-create files, so a slot that finishes early takes the next cell. After a
    requeue (timeout) a worker first resumes the cells it had claimed.
    """

    def __init__(self, job, claims: str, slot: int):
        self.job, self.claims, self.slot = job, claims, slot

    def claim(self, task: Task) -> bool:
        path = Path(self.claims) / task.spec.cell_id
        try:
            with open(path, "x") as f:
                f.write(str(self.slot))
            return True
        except FileExistsError:  # ours from before a requeue, and not finished: resume it
            mine = path.read_text().strip() == str(self.slot)
            return mine and not _finished_since(task, path.stat().st_mtime)

    def __call__(self, tasks: list[Task]) -> None:
        for task in tasks:
            while _UNANSWERED:  # a warning the last pilot noted as it finished: requeue now
                _deliver(*_UNANSWERED.pop())
            if not self.claim(task):
                continue
            try:
                self.job(task.spec, task.cell_dir)
            except Exception as error:  # recorded; the slot goes on with the next cell
                record_lost(task, f"{type(error).__name__}: {error}")

    def checkpoint(self, tasks: list[Task]):
        import submitit

        return submitit.helpers.DelayedSubmission(self, tasks)


def _finished_since(task: Task, since: float) -> bool:
    """Whether the cell has a summary.json written at or after ``since`` (epoch seconds)."""
    path = Path(task.cell_dir) / "summary.json"
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _poll_local(ex, job, tasks, cfg, counts, finished, on_change) -> None:
    import uuid

    claims = Path(ex.folder) / f"claims-{uuid.uuid4().hex[:8]}"
    claims.mkdir(parents=True)
    started = time.time() - 1.0  # file times are coarse on some filesystems
    # a worker runs many pilots: give it the time limit of all of them
    ex.update_parameters(timeout_min=cfg.timeout_min * len(tasks))
    workers = []
    for slot in (list(cfg.gpus) if cfg.gpus else range(slots(cfg)))[:len(tasks)]:
        if cfg.gpus:
            ex.update_parameters(visible_gpus=[slot], gpus_per_node=1)
        workers.append(ex.submit(SlotWorker(job, str(claims), slot), tasks))
    pending = list(tasks)
    try:
        while pending:
            done = [t for t in pending if _finished_since(t, started)]
            for task in done:
                pending.remove(task)
            counts.running = sum(1 for t in pending if (claims / t.spec.cell_id).exists())
            for task in done:
                finished(task, None)
            alive = [w for w in workers if not w.done()]
            if not alive:  # every worker ended: what is left never finished
                ends = [_job_error(w, None) for w in workers]
                why = next((e for e in ends if e.crashed), ends[0]).message
                for task in list(pending):
                    pending.remove(task)
                    record_lost(task, why)
                    finished(task, None)
                break
            counts.running = sum(1 for t in pending if (claims / t.spec.cell_id).exists())
            if on_change:
                on_change(counts)
            time.sleep(cfg.poll_s)
    except BaseException:  # Ctrl-C, kill or a crash: local pilots are our children
        for worker in workers:
            _kill_tree(int(worker.job_id))  # a local job's id is its controller's pid
        raise
    counts.running = 0


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and its descendants (submitit's pilot processes ignore SIGTERM,
    which SLURM uses for preemption, and its local controller only forwards signals)."""
    import signal

    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        _kill_tree(int(child))
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _poll_slurm(ex, job, tasks, cfg, counts, finished, on_change) -> None:
    subs = ex.map_array(job, [t.spec for t in tasks], [t.cell_dir for t in tasks])
    pending = dict(zip(subs, tasks))
    missing_since: dict = {}
    print(f"race sweep: submitted job array {subs[0].job_id.split('_')[0]} "
          f"({len(subs)} pilots) to SLURM", file=sys.stderr)

    def running(queue: dict[str, str] | None) -> int:  # started, not yet finished
        if queue is None:
            return len(pending)
        return sum(1 for sub in pending if queue.get(sub.job_id) in ("R", "CG"))

    while pending:
        queue = _squeue()
        for sub in list(pending):
            if sub.done():
                task = pending.pop(sub)
                counts.running = running(queue)
                finished(task, sub)
                continue
            if queue is None or sub.job_id in queue:
                missing_since.pop(sub, None)
                continue
            # Gone from the queue without a result: killed, out of requeues, node lost.
            first = missing_since.setdefault(sub, time.monotonic())
            if time.monotonic() - first >= cfg.lost_after_s:
                task = pending.pop(sub)
                record_lost(task, f"job {sub.job_id} left the SLURM queue without a result "
                                  f"(cancelled, timed out after {cfg.max_requeues} requeues, "
                                  f"or its node failed); log: {sub.paths.stderr}")
                counts.running = running(queue)
                finished(task, sub)
        counts.running = running(queue)
        if on_change:
            on_change(counts)
        if pending:
            time.sleep(cfg.poll_s)
