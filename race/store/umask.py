"""File modes as the umask gives them, for files RACE writes through temp files.

``tempfile.mkstemp`` creates files 0600 and ``mkdtemp`` folders 0700 whatever the umask,
and some writers (safetensors) do the same; a results folder or ``RACE_CACHE_DIR`` shared
by a team on a cluster would then be unreadable to the others. The atomic writers in
:mod:`race.store.io` and the model cache set these modes before their rename.

Pure module: the standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path


def _umask() -> int:
    """This process's umask: from ``/proc/self/status`` (Linux), else by setting it and
    restoring it (which another thread creating a file meanwhile could see)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (0644 under 022)."""
    return 0o666 & ~_umask()


def folder_mode() -> int:
    """The mode ``mkdir()`` gives a new folder under this process's umask (0755 under 022)."""
    return 0o777 & ~_umask()


def share_like_umask(folder: Path) -> None:
    """Give ``folder`` and every file and folder under it the modes the umask gives new
    ones (:func:`file_mode`, :func:`folder_mode`): temp folders and some writers (e.g.
    safetensors) create them private, whatever the umask."""
    folder = Path(folder)
    folder.chmod(folder_mode())
    for path in folder.rglob("*"):
        path.chmod(folder_mode() if path.is_dir() else file_mode())
