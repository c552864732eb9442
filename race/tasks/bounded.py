"""A hard wall-clock bound on pure work that cannot be interrupted in a thread.

sympy's evaluation cannot be stopped from another thread, and math-verify's own timeouts
use ``signal.alarm``, which works only in the main thread (a pilot grades in worker
threads). So the verifier hands its sympy work to one child process, started on first use,
and waits at most ``timeout_s`` for each answer: a child that outlives it is killed and
the next request starts a fresh one. The child is a plain ``python -c`` process reading
JSON lines on stdin and writing JSON lines on stdout (not ``multiprocessing``: that would
re-import the caller's ``__main__`` and refuses to start from a daemonic process).

Where no child can be started, :meth:`BoundedWorker.call` says so and the caller does the
work in-process.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the folder that holds the ``race`` package, so that the child imports this same source
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class Unavailable(Exception):
    """No child process could be started here: do the work in-process."""


class TimedOut(Exception):
    """The child did not answer within the bound; it was killed."""


class BoundedWorker:
    """One child process running ``serve_call`` (``"module:function"``, which reads
    requests from stdin), called one request at a time (a lock: safe from any thread).

    Args:
        serve_call: the function the child runs, e.g. ``"race.tasks.verify:serve"``;
            it writes ``"ready"`` once it has imported what it needs.
        startup_s: how long the child may take to start (imports included), seconds.
    """

    def __init__(self, serve_call: str, *, startup_s: float = 120.0) -> None:
        self._serve_call = serve_call
        self._startup_s = startup_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._broken = False
        atexit.register(self.stop)

    def call(self, request: Any, *, timeout_s: float) -> Any:
        """The child's answer to ``request`` (JSON both ways).

        Raises:
            TimedOut: no answer within ``timeout_s`` seconds (the child was killed).
            Unavailable: no child can run here (the caller works in-process).
        """
        with self._lock:
            process = self._started()
            try:
                process.stdin.write((json.dumps(request) + "\n").encode())
                process.stdin.flush()
                line = self._read_line(process, timeout_s)
            except (OSError, ValueError):  # the child died mid-request: start afresh next time
                self._stop_locked()
                raise TimedOut("the grading process exited") from None
            if line is None:
                self._stop_locked()
                raise TimedOut(f"no answer within {timeout_s:g} s")
            return json.loads(line)

    def stop(self) -> None:
        """Kill the child (if any); the next call starts a new one."""
        with self._lock:
            self._stop_locked()

    def _started(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        if self._broken:
            raise Unavailable("the grading process could not start here")
        module, function = self._serve_call.split(":")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", f"from {module} import {function}; {function}()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=env, start_new_session=True)
        except OSError:
            self._broken = True
            raise Unavailable("the grading process could not start here") from None
        if self._read_line(process, self._startup_s) != "ready":
            _kill(process)
            self._broken = True
            raise Unavailable("the grading process did not start")
        self._process = process
        return process

    @staticmethod
    def _read_line(process: subprocess.Popen, timeout_s: float) -> str | None:
        """One line from the child, or None when none comes within ``timeout_s``."""
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        if not ready:
            return None
        line = process.stdout.readline()
        if not line:  # EOF: the child exited
            return None
        return line.decode().strip()

    def _stop_locked(self) -> None:
        if self._process is not None:
            _kill(self._process)
            self._process = None


def _kill(process: subprocess.Popen) -> None:
    try:
        process.kill()
        process.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for pipe in (process.stdin, process.stdout):
        try:
            pipe.close()
        except OSError:
            pass


def serve_lines(handle: Callable[[Any], Any], warm_up: Callable[[], None] = lambda: None
                ) -> None:
    """The child's loop: ``warm_up()``, say ``ready``, then answer each JSON request line
    with ``handle(request)`` as a JSON line, until stdin closes (the parent is gone)."""
    warm_up()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        out.write(json.dumps(handle(json.loads(line))) + "\n")
        out.flush()
