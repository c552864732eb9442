"""Cross-process claims: which race process runs a cell now, so that none runs twice.

Two locks, both ``fcntl.flock`` (the kernel drops them when a process ends, however it
ends):

- ``<sweep>/claims/<cell_id>``: the sweep process that claimed the cell (pid, host, start
  time, command line), taken under ``<sweep>/claims/.lock``;
- ``<cell>/.running``: held by the process that runs the cell's pilot, for its whole life.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from race.store.cell import CellDir
from race.store.io import read_json, write_json

CLAIMS = "claims"  # <sweep>/claims/<cell_id>: which race process is running the cell


def this_process() -> dict:
    """Who claims a cell: this process's pid, host and start time, and its command line."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
            "started_ticks": _start_ticks(os.getpid()), "argv": " ".join(sys.argv)[:300]}


def _start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (Linux), which tells a live owner
    from a later process that reuses its pid; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the name


def owner_alive(owner: dict) -> bool:
    """Whether a claim's owner still runs (a process on another host is assumed to)."""
    if owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    started = owner.get("started_ticks")
    return started is None or _start_ticks(int(owner["pid"])) in (None, started)


@contextlib.contextmanager
def claims_lock(sweep_dir: Path):
    """An exclusive lock over a sweep's claims (``fcntl.flock`` on a lock file)."""
    folder = Path(sweep_dir) / CLAIMS
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def cell_lock(cell_dir: Path):
    """Hold the cell's run lock (``fcntl.flock`` on ``<cell>/.running``) while a pilot
    runs; the file records who holds it (:func:`this_process`).

    The kernel drops the lock when the process ends however it ends (``kill -9``
    included), so a lock that is held means a pilot is running this cell now, whichever
    sweep started it: :func:`claim_cells` never takes such a cell over. Raises
    :class:`CellBusy` when another process holds it.
    """
    path = CellDir(cell_dir).lock
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CellBusy(str(cell_dir), _lock_holder(path)) from None
        try:
            try:  # who holds it, for messages; the lock itself is what counts
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(this_process()))
                handle.flush()
            except OSError:
                pass
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class CellBusy(RuntimeError):
    """A cell another live process is running (its pilot holds :func:`cell_lock`)."""

    def __init__(self, cell_dir: str, holder: dict):
        self.cell_dir, self.holder = cell_dir, holder
        super().__init__(f"{cell_dir}: another process runs this cell now "
                         f"(pid {holder.get('pid')} on {holder.get('host')})")

    def __reduce__(self):
        return (CellBusy, (self.cell_dir, self.holder))


def _lock_holder(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def running_pilot(cell_dir: Path) -> dict | None:
    """Who runs the cell's pilot now (its :func:`cell_lock` is held), else None."""
    path = CellDir(cell_dir).lock
    if not path.is_file():
        return None
    with open(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _lock_holder(path) or {"pid": None, "host": None}
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def cell_holder(sweep_dir: Path, cell_id: str, me: dict) -> dict | None:
    """The live process other than ``me`` that holds a cell of a sweep: the sweep that
    claimed it, else a pilot still running it (a killed sweep's orphan), else None."""
    owner = claim_owner(sweep_dir, cell_id)
    if owner and not _same(owner, me) and owner_alive(owner):
        return owner
    return running_pilot(CellDir.of(sweep_dir, cell_id).path)


def claim_cells(sweep_dir: Path, cell_ids: list[str], me: dict
                ) -> tuple[list[str], dict[str, dict]]:
    """Claim ``cell_ids`` for the process ``me`` (:func:`this_process`).

    Returns the cells now claimed by ``me`` and, for the others, the live process that
    holds each: another sweep's live claim, or a pilot still running the cell (its
    :func:`cell_lock`: a killed sweep's pilot that has not ended yet). A claim whose owner
    is gone and whose cell no pilot runs is taken over. Claims are taken under one lock,
    so two processes never both get a cell.
    """
    mine, held = [], {}
    with claims_lock(sweep_dir):
        for cell_id in cell_ids:
            holder = cell_holder(sweep_dir, cell_id, me)
            if holder is not None:
                held[cell_id] = holder
                continue
            write_json(Path(sweep_dir) / CLAIMS / cell_id, me)
            mine.append(cell_id)
    return mine, held


def claim_owner(sweep_dir: Path, cell_id: str) -> dict | None:
    """Who holds ``cell_id`` of a sweep (None: nobody)."""
    try:
        return read_json(Path(sweep_dir) / CLAIMS / cell_id)
    except (OSError, ValueError):
        return None


def _same(owner: dict, me: dict) -> bool:
    return (owner.get("pid"), owner.get("host")) == (me["pid"], me["host"])


def release_claims(sweep_dir: Path, cell_ids: list[str], me: dict) -> None:
    """Drop the claims ``me`` holds among ``cell_ids``."""
    with claims_lock(sweep_dir) as folder:
        for cell_id in cell_ids:
            path = folder / cell_id
            try:
                if _same(read_json(path), me):
                    path.unlink()
            except (OSError, ValueError):
                continue
