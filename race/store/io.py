"""Atomic reads and writes of results files: a write goes to a temp file beside its path,
is synced, then renamed over it, so a reader (or a crash) never sees half a file.

A full disk is :class:`~race.errors.NoSpace` naming the file; a damaged results file is
:class:`~race.errors.DamagedResult` naming it and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from race.errors import DamagedResult, NoSpace, UsageError
from race.store.umask import file_mode, share_like_umask


def no_space(error: BaseException, path: Path) -> NoSpace | None:
    """``error`` as :class:`~race.errors.NoSpace` when it says the disk is full (its own
    file named, else ``path``), else None."""
    if isinstance(error, NoSpace):
        return error
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpace(str(error.filename or path))
    return None


@contextlib.contextmanager
def _no_space_named(path: Path):
    """Turn a full disk (``ENOSPC``, or ``EDQUOT``: over quota) into :class:`NoSpace`
    naming ``path``; other errors pass unchanged."""
    try:
        yield
    except OSError as error:
        full = no_space(error, path)
        if full is not None:
            raise NoSpace(str(path)) from error
        raise


def _atomic(path: Path, write: Callable[[Any], None], mode: str = "w") -> None:
    """Call ``write(file)`` on a temp file beside ``path``, sync it, rename it to ``path``.

    The file gets the umask's mode (:func:`file_mode`). On any failure (a full disk
    included: :class:`~race.errors.NoSpace`) the temp file is removed and ``path`` keeps
    its old content, whole.
    """
    path = Path(path)
    with _no_space_named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, mode) as f:
                write(f)
                f.flush()
                os.fchmod(f.fileno(), file_mode())
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _atomic_write(path: Path, text: str) -> None:
    _atomic(path, lambda f: f.write(text))


def write_folder(path: Path, fill: Callable[[Path], None]) -> None:
    """Create the folder ``path`` whole or not at all.

    ``fill(tmp)`` writes into a hidden temp folder beside ``path``; its files are synced,
    then the folder is renamed to ``path``. A crash midway leaves only the hidden folder,
    which readers skip. An existing ``path`` is replaced (moved aside first: a rename
    cannot replace a non-empty folder).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        with _no_space_named(path):
            fill(tmp)
            share_like_umask(tmp)  # mkdtemp's 0700, whatever the umask
            for file in tmp.rglob("*"):
                if file.is_file():
                    with open(file, "rb") as f:
                        os.fsync(f.fileno())
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    _atomic_write(Path(path), json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as JSON lines, atomically (the whole file each time)."""
    _atomic_write(Path(path), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def append_jsonl(path: Path, row: dict) -> None:
    """Append one row, whole or not at all: readers see whole lines only.

    The line goes out in one ``write`` on an ``O_APPEND`` descriptor. A write that
    stops short (a full disk) is undone by truncating the file back to its old length,
    and raises :class:`~race.errors.NoSpace`, so no torn line is ever left behind.
    """
    path = Path(path)
    data = (json.dumps(row, sort_keys=True) + "\n").encode()
    with _no_space_named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
            except OSError:
                os.ftruncate(fd, start)
                raise
            if written != len(data):  # short write: the disk filled midway
                os.ftruncate(fd, start)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        finally:
            os.close(fd)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


SWEEP_JSON_FIX = ("rerun the same race sweep command to rewrite it (finished cells are "
                  "kept)")
REPORT_FIX = "rerun `race report` on the sweep folder to rewrite it"


def read_result(path: Path, fix: str, *, kind: type = dict) -> Any:
    """A JSON results file the sweep wrote, or :class:`~race.errors.DamagedResult`
    naming the file and ``fix`` when it is not valid JSON of type ``kind`` (a truncated,
    edited or ``null`` file); a missing file raises FileNotFoundError."""
    path = Path(path)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except (ValueError, UnicodeDecodeError) as error:
        raise DamagedResult(str(path), f"not valid JSON ({type(error).__name__})",
                            fix) from None
    if not isinstance(value, kind):
        shown = json.dumps(value)
        raise DamagedResult(str(path), f"holds {shown[:40]}, not a JSON "
                            f"{'object' if kind is dict else kind.__name__}", fix)
    return value


def read_jsonl(path: Path, *, skip_corrupt: bool = False) -> list[dict]:
    """Rows of a JSON-lines file; a corrupt line is reported with its file and line.

    ``skip_corrupt=True`` keeps the whole lines instead (a job killed mid-write leaves a
    torn last line).
    """
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if skip_corrupt:
                continue
            raise UsageError(f"{path}:{number}: corrupt JSON line ({error.msg}); delete the "
                             f"cell folder to rerun it") from None
    return rows


def write_csv(path: Path, frame) -> None:
    """Write a pandas DataFrame as CSV, atomically."""
    _atomic_write(Path(path), frame.to_csv(index=False))


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (markdown, LaTeX, ...) atomically."""
    _atomic_write(Path(path), text)


def save_figure(fig, path: Path, **savefig_kwargs) -> None:
    """Save a matplotlib figure atomically: a temp file in the same folder, then rename.

    The format follows ``path``'s suffix (the temp file's own name does not end in it).
    """
    fmt = Path(path).suffix.lstrip(".") or "png"
    _atomic(path, lambda f: fig.savefig(f, format=fmt, **savefig_kwargs), mode="wb")


