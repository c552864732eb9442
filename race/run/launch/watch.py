"""The one launch loop: every pilot goes through submitit, through the launcher its
config names (``launcher=local``, ``slurm``, ``inline``, or any other module of this
package that registers one: :func:`~race.run.launch.launcher_base.launcher_for`).

One loop polls them all: :func:`as_completed` yields each task as it ends, asking the
launcher's watcher (``InlineWatcher``, ``LocalWatcher``, ``SlurmWatcher``) only to start
the work, which tasks ended since the last poll, how many run, and which can
never finish. Polling has a deadline: a job that leaves the scheduler without a result
(killed, node lost) is noticed within ``launcher.lost_after_s`` and recorded as a failed
cell instead of being waited on forever (submitit alone needs ``sacct`` for that).

One module per backend, each a :class:`~race.run.launch.launcher_base.Launcher` that the
registry finds by name (:mod:`~race.run.launch.inline`, :mod:`~race.run.launch.local`,
:mod:`~race.run.launch.slurm`: executor, watcher, check), the job they all run
(:mod:`~race.run.launch.job`) and what they share (:mod:`~race.run.launch.launcher_base`);
this module holds the one loop. submitit is imported inside the functions that build
executors, so that ``race plan`` never loads it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from race.run.launch.job import PilotJob, threads
from race.run.launch.launcher_base import (
    Counts,
    Ended,
    Task,
    Watcher,
    job_error,
    launcher_for,
    raise_no_space,
    record_lost,
)


@contextmanager
def quiet_library_output(log_path: Path):
    """Send what libraries print during a launch to ``log_path`` instead of the terminal.

    submitit's logger (its INFO lines and "Bypassing sacct error" warnings), Python
    warnings, and the stderr of the commands submitit runs (``sacct``'s "Slurm accounting
    storage is disabled") go to the log; RACE's own lines, written to ``sys.stderr``,
    still reach the terminal.
    """
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
    cell = end.task.cell
    if not cell.has_summary():  # its job returned or died without writing one
        raise_no_space(end.submission)  # a full disk: not the cell's failure, nothing to add
        record_lost(end.task, job_error(end.submission, end.task).message)
    ok = cell.is_ok()  # damaged: counted failed, rerun next time
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
    backend = launcher_for(cfg.name)
    job = job or PilotJob(threads(cfg), cfg.checkpoint_every)
    watcher = backend.watcher(cfg, backend.executor(cfg, folder), job)
    here = backend.in_process
    # a poll in this process runs a pilot to its end: there is nothing to wait for
    ends = as_completed(watcher, tasks, counts=counts, on_change=on_change,
                        poll_s=0.0 if here else cfg.poll_s)
    # SIGTERM unwinds like Ctrl-C, so the watcher stops local pilots; a run in this process
    # keeps SIGTERM's default (its pilot saves on it, see StopSignals, and the process ends)
    with (nullcontext() if here else _terminate_as_interrupt()), closing(ends):
        for _ in ends:  # counted and reported inside the generator
            pass
    return counts


@contextmanager
def _terminate_as_interrupt():
    """SIGTERM (``kill``, a job scheduler) unwinds like Ctrl-C, so local pilots stop too."""
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
