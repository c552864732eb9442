"""The job side of every launcher: :class:`PilotJob`, the picklable callable that runs
one pilot in its worker, turning a scheduler's signals into a save at the next step
boundary; and how many torch threads each pilot gets (its launcher's share).

torch and submitit are imported inside the methods: torch after the thread variables are
set, submitit only on a requeue.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from race.core.specs import RunSpec
from race.errors import NoSpace
from race.integrations.trackers import pilot_feed
from race.pilot.loop import run_pilot
from race.pilot.state import StopRequested
from race.run.launch.launcher_base import NO_SPACE, launcher_for
from race.store import claims


class StopSignals:
    """A scheduler's signals turned into a request the pilot reads at its next step boundary.

    While active, submitit's preemption signal (``SIGUSR2`` unless
    ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise: SLURM sends it ``signal_delay_s`` before the
    time limit) and ``SIGTERM`` (``scancel``, or SLURM's preemption) only note that they
    arrived; called, the object answers whether one did. After the pilot has saved its
    state, :meth:`forward` acts on the signal (:func:`deliver`): the warning goes to
    submitit's checkpoint-and-requeue handler (which calls :meth:`PilotJob.checkpoint` and
    requeues the job), SIGTERM ends the process.
    """

    def __init__(self):
        name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
        self.preempt = getattr(signal, f"SIG{name}", signal.SIGUSR2)
        self.signals = (self.preempt, signal.SIGTERM)
        self.previous: dict = {}
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self.previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.received = self.received or signum

    def __call__(self) -> bool:
        return self.received is not None

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def forward(self) -> None:
        """Deliver the noted signal as if it arrived now (after the pilot's save)."""
        signum = self.received
        self.__exit__()
        deliver(signum, self.preempt)


def deliver(signum: int, preempt: int) -> None:
    """Act on ``signum`` now that the pilot's state is saved.

    submitit's preemption signal (the time-limit warning) goes to its handler, which calls
    ``checkpoint`` and requeues the job. SIGTERM ends the process as it asks: it is how
    ``scancel`` cancels and how SLURM preempts, and a scheduler that preempts in requeue
    mode requeues the job itself, which then resumes from the saved step.
    """
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
        # time-limit warnings a pilot noted but finished before it could act on (during its
        # final evaluation), as (signal, preemption signal): the slot worker delivers them
        # before it starts its next pilot
        self.unanswered: list[tuple[int, int]] = []

    def __call__(self, spec: RunSpec, cell_dir: str) -> dict:
        use_threads(self.threads)
        # the cell's run lock for the pilot's whole life: no other process runs it meanwhile
        with StopSignals() as stop, claims.cell_lock(cell_dir):
            feed = pilot_feed(spec, Path(cell_dir))  # report.tracker (None: none)
            try:
                summary = run_pilot(spec, Path(cell_dir), stop=stop,
                                    checkpoint_every=self.checkpoint_every,
                                    keep_final_state=self.keep_final_state, log=feed)
            except StopRequested:
                if feed:
                    feed.finish()  # before the signal, which may end the process
                stop.forward()  # under submitit: checkpoint() and requeue; exits
                raise
            except NoSpace as full:  # nothing torn, nothing recorded: the caller stops
                return {"status": NO_SPACE, "error": str(full), "path": full.path,
                        "steps": 0, "total_flops": 0.0}
            finally:
                if feed:
                    feed.finish()
        if stop.received == stop.preempt:  # too late for this pilot, not for its slot
            self.unanswered.append((stop.received, stop.preempt))
        elif stop.received is not None:  # SIGTERM during the final evaluation: end now
            deliver(stop.received, stop.preempt)
        return {k: summary[k] for k in ("status", "error", "steps", "total_flops")}

    def checkpoint(self, spec: RunSpec, cell_dir: str):
        """Requeue the same call: the pilot's saved state carries its progress."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, spec, cell_dir)


def use_threads(n: int) -> None:
    """Run torch (and the BLAS under it) on ``n`` threads in this process: what a pilot of
    every launcher does first, and ``race pilot``."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch starts its pool
        os.environ[var] = str(n)
    import torch  # after the thread variables: torch reads them once, on import

    torch.set_num_threads(n)


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def threads(cfg) -> int:
    """Torch threads per pilot: ``launcher.threads_per_pilot``, else what the launcher
    gives each pilot (:meth:`~race.run.launch.launcher_base.Launcher.threads`: the SLURM
    task's CPUs, or this machine's cores shared by the local slots)."""
    return cfg.threads_per_pilot or launcher_for(cfg.name).threads(cfg)
