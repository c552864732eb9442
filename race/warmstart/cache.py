"""The model cache the tiny family is built and installed into: ``$RACE_CACHE_DIR``.

One reading of the variable (:func:`cache_dir`: a ``~`` in it expanded as a shell would,
so that a sweep and the pilots it launches agree on one folder), and one check of it
before anything is written (:func:`check_cache_writable`): a file, a link to nothing, or
a file above it where the folder should be; a folder that cannot be written; a full
disk. Each is a UsageError naming ``RACE_CACHE_DIR``, the path and the fix, as is any
later write into the cache that fails for those reasons (:func:`cache_writes`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from race.errors import UsageError

# what the write check writes (and syncs) into the cache: a disk too full for it is full
PROBE_BYTES = 64 * 1024
# the fix every refusal of the cache ends with
_FIX = "e.g. RACE_CACHE_DIR=/tmp/race-cache race sweep ..."


def cache_dir() -> Path:
    """Where built policies live: ``$RACE_CACHE_DIR`` or ``~/.cache/race``. A ``~`` in it
    is expanded as a shell would (``RACE_CACHE_DIR='~/cache'``, quoted, reaches RACE
    unexpanded); an empty value is the default."""
    value = os.environ.get("RACE_CACHE_DIR") or str(Path.home() / ".cache" / "race")
    return Path(os.path.expanduser(value))


def not_a_folder(path: Path) -> Path | None:
    """The first of the folders above ``path``, and ``path`` itself, that is there but is
    no folder (a file, or a link to nothing); None when none is."""
    for step in (*reversed(Path(path).parents), Path(path)):
        if step.is_symlink() and not step.exists() or step.exists() and not step.is_dir():
            return step
    return None


@contextlib.contextmanager
def cache_writes(folder: Path):
    """A cache that cannot be written (no permission, a read-only or full disk, a file
    where a folder goes) is the cache's problem, not the results': its fix is
    ``RACE_CACHE_DIR`` (``sweep.out_dir`` cannot help), a UsageError naming the path."""
    try:
        yield
    except OSError as error:
        blocking = not_a_folder(folder) if error.errno in (errno.EEXIST, errno.ENOTDIR) \
            else None
        if blocking is not None:  # e.g. policies/ is a file
            raise UsageError(f"RACE_CACHE_DIR: {blocking} is not a folder, so the model "
                             f"cache {folder} cannot be written; remove it (rm -r "
                             f"{blocking}) or set RACE_CACHE_DIR to another folder, "
                             f"{_FIX}") from None
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UsageError(f"RACE_CACHE_DIR: no space left for the model cache {folder} "
                             f"({error.strerror}); free space there or set RACE_CACHE_DIR "
                             f"to a folder on a disk with room, {_FIX}") from None
        if error.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise
        raise UsageError(f"RACE_CACHE_DIR: cannot write the model cache {folder} "
                         f"({error.strerror}); set RACE_CACHE_DIR to a writable folder, "
                         f"{_FIX}") from None


def check_cache_writable() -> None:
    """Refuse, before a sweep writes anything, a model cache it could not build into: a
    file (or a link to nothing) where the folder or one above it should be, a folder it
    cannot write, a disk too full for :data:`PROBE_BYTES`."""
    folder = cache_dir()
    blocking = not_a_folder(folder)
    if blocking is not None:
        what = "a link to nothing" if blocking.is_symlink() and not blocking.exists() \
            else "a file"
        raise UsageError(f"RACE_CACHE_DIR: the model cache {folder} cannot be a folder "
                         f"there ({blocking} is {what}); set RACE_CACHE_DIR to a folder, "
                         f"{_FIX}")
    with cache_writes(folder):
        folder.mkdir(parents=True, exist_ok=True)
        write_probe(folder)


def write_probe(folder: Path) -> None:
    """Write :data:`PROBE_BYTES` into a temporary file under ``folder`` and sync it (a
    full disk raises ``ENOSPC`` here, not halfway through an install)."""
    with tempfile.TemporaryFile(dir=folder) as probe:
        probe.write(b"\0" * PROBE_BYTES)
        probe.flush()
        os.fsync(probe.fileno())
