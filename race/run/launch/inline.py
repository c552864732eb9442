"""The inline launcher: pilots in this very process, one after another (submitit's debug
executor), for debugging: a breakpoint in a pilot stops the sweep there.

submitit is imported inside the functions that need it (heavy: ``race plan`` never loads it).
"""

from __future__ import annotations

from pathlib import Path

from race.errors import NoSpace
from race.run.launch.launcher_base import NO_SPACE, Ended, Task, Watcher
from race.run.launch.local import local_threads


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
            if not task.cell.has_summary():
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


class InlineLauncher:
    """``launcher=inline`` (:class:`~race.run.launch.launcher_base.Launcher`)."""

    name = "inline"
    keys = ("slots", "gpus")  # torch threads as one local slot's (local_threads)
    in_process = True

    def check(self, cfg) -> None:
        """Nothing to ask of this machine beyond what the plan checked."""

    def executor(self, cfg, folder: Path):
        import submitit

        return submitit.DebugExecutor(folder)

    def watcher(self, cfg, executor, job) -> Watcher:
        return InlineWatcher(executor, job)

    def threads(self, cfg) -> int:
        """As one local slot: this machine's cores shared by ``launcher.slots``."""
        return local_threads(cfg)



LAUNCHER = InlineLauncher()
