"""``RACE_CACHE_DIR`` itself (issue 62, item 4): a file, a path under a file, a link to
nothing, a folder that cannot be written or a full disk is, for ``race sweep`` and ``race
pilot`` alike, exit 2 and one line naming ``RACE_CACHE_DIR``, the path and the fix, before
``sweep.json`` or any cell is written; a ``~`` in it is expanded as a shell would.

Root ignores file modes and no test mounts a disk: "cannot be written" and "full" are the
write check (or the install) raising what such a disk raises."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import race_in_process  # tests/conftest.py

from race.warmstart import cache, shipped

B = ["model=tiny-s", "reward=rule", "grid.group_size=4", "grid.update_epochs=1", "budget=1e12",
     "selection.policy=flat", "pilot.select_examples=64", "pilot.eval_examples=16"]


def _a_file(tmp: Path) -> tuple[Path, Path]:
    (tmp / "cachefile").write_text("not a folder")
    return tmp / "cachefile", tmp / "cachefile"


def _under_a_file(tmp: Path) -> tuple[Path, Path]:
    (tmp / "cachefile").write_text("not a folder")
    return tmp / "cachefile" / "cache", tmp / "cachefile"


def _dangling_link(tmp: Path) -> tuple[Path, Path]:
    (tmp / "link").symlink_to(tmp / "gone")
    return tmp / "link", tmp / "link"


PLACES = {"a-file": _a_file, "under-a-file": _under_a_file, "dangling-link": _dangling_link}


def _refused(tmp_path: Path, needles: list[str]) -> None:
    """``race sweep B`` and ``race pilot B``: exit 2, one line holding ``needles``, nothing
    written under the results folder."""
    results = tmp_path / "results"
    for command, out in (("sweep", f"sweep.out_dir={results}"),
                         ("pilot", f"pilot.out_dir={results}")):
        done = race_in_process([command, *B, out], tmp_path)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"race {command}: RACE_CACHE_DIR"), lines[0]
        for needle in needles:
            assert needle in lines[0], lines[0]
        assert not results.exists()  # no sweep.json, no cell


@pytest.mark.parametrize("place", PLACES.values(), ids=PLACES.keys())
def test_a_cache_that_cannot_be_a_folder_is_one_line(tmp_path, monkeypatch, place):
    value, blocking = place(tmp_path)
    monkeypatch.setenv("RACE_CACHE_DIR", str(value))
    _refused(tmp_path, [str(value), str(blocking), "set RACE_CACHE_DIR to a folder"])


@pytest.mark.parametrize("code, needle", [
    (errno.EACCES, "set RACE_CACHE_DIR to a writable folder"),
    (errno.EROFS, "set RACE_CACHE_DIR to a writable folder"),
    (errno.ENOSPC, "no space left for the model cache"),
    (errno.EDQUOT, "no space left for the model cache"),
], ids=["unwritable", "read-only", "full", "over-quota"])
def test_a_cache_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, code, needle):
    folder = tmp_path / "cache"
    monkeypatch.setenv("RACE_CACHE_DIR", str(folder))

    def refused(where):
        raise OSError(code, os.strerror(code))  # no filename: as a full disk's write()

    monkeypatch.setattr(cache, "write_probe", refused)
    # the cache's path, never the working directory ("no space left on .")
    _refused(tmp_path, [needle, str(folder)])


def test_a_disk_that_fills_during_the_install_is_one_line(tmp_path, monkeypatch):
    """The write check passed, the shipped warm start does not fit: still before any
    sweep.json, naming the cache."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("RACE_CACHE_DIR", str(folder))

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shipped, "_extract", full)
    _refused(tmp_path, ["no space left for the model cache", str(folder / "policies")])


def test_a_tilde_is_expanded_as_a_shell_would(tmp_path, monkeypatch):
    """``RACE_CACHE_DIR='~/race-tilde-cache'`` (quoted: the shell leaves it) is the folder
    under ``$HOME``, in this process and in any it starts, and the warm start installs
    there, not into ``./~``."""
    from race.config import compose_config
    from race.run.cells import check_warm_starts as check_warm_start
    from race.run.pilot_command import pilot_spec

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RACE_CACHE_DIR", "~/race-tilde-cache")
    monkeypatch.chdir(tmp_path)
    expanded = tmp_path / "home" / "race-tilde-cache"
    assert cache.cache_dir() == expanded
    child = subprocess.run([sys.executable, "-c", "from race.warmstart.cache import "
                            "cache_dir; print(cache_dir())"], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ))
    assert child.stdout.strip() == str(expanded), child.stderr
    check_warm_start([pilot_spec(compose_config(B))])
    assert (expanded / "policies").is_dir() and not (tmp_path / "~").exists()


def test_an_empty_value_is_the_default_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RACE_CACHE_DIR", "")
    assert cache.cache_dir() == tmp_path / ".cache" / "race"
