"""race.store.io' writers: the umask's file modes, JSONL appends that are whole lines or
nothing on a full disk, damaged files named with their fix, and the cell run lock."""

import errno
import json
import os
import stat
import subprocess
import sys

import pytest

from race.errors import DamagedResult, NoSpace
from race.store import claims
from race.store import io as results


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask, file_mode, folder_mode", [(0o022, 0o644, 0o755),
                                                           (0o077, 0o600, 0o700),
                                                           (0o002, 0o664, 0o775)])
def test_atomic_files_and_folders_take_the_umask_mode(tmp_path, umask, file_mode,
                                                      folder_mode):
    old = os.umask(umask)
    try:
        results.write_json(tmp_path / "summary.json", {"status": "ok"})
        results.write_folder(tmp_path / "state", lambda d: (d / "x.json").write_text("{}"))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "summary.json") == file_mode
    assert _mode(tmp_path / "state") == folder_mode
    assert _mode(tmp_path / "state" / "x.json") == file_mode


def test_stat_of_a_results_file_is_644_under_umask_022(tmp_path):
    out = subprocess.run(["sh", "-c", f"umask 022 && {sys.executable} -c \"from race.store "
                          f"import io; io.write_text('{tmp_path}/leaderboard.md', 'x')\" "
                          f"&& stat -c %a {tmp_path}/leaderboard.md"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "644", out.stderr


class _FullDisk:
    """``os`` as race.store.io sees it, with writes that stop short as on a full disk."""

    def __init__(self, allowed_bytes: int):
        self.allowed = allowed_bytes

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if self.allowed <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = os.write(fd, data[:self.allowed])
        self.allowed -= written
        return written


@pytest.mark.parametrize("allowed", [0, 7])
def test_an_append_on_a_full_disk_leaves_whole_lines_and_names_the_file(tmp_path,
                                                                       monkeypatch, allowed):
    path = tmp_path / "metrics.jsonl"
    results.append_jsonl(path, {"step": 1})
    before = path.read_bytes()
    monkeypatch.setattr(results, "os", _FullDisk(allowed))  # a short write, or none
    with pytest.raises(NoSpace) as error:
        results.append_jsonl(path, {"step": 2, "text": "x" * 100})
    assert str(error.value) == (f"no space left on {path}; free space and rerun: finished "
                                f"cells are kept")
    assert path.read_bytes() == before  # the torn line was undone
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"step": 1}]


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    results.write_json(path, {"status": "ok"})

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results.os, "fsync", full)
    with pytest.raises(NoSpace, match="no space left on .*summary.json"):
        results.write_json(path, {"status": "failed"})
    monkeypatch.undo()
    assert results.read_json(path) == {"status": "ok"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temp file


@pytest.mark.parametrize("text, problem", [("{", "not valid JSON"), ("null", "holds null"),
                                           ("[1]", "holds [1], not a JSON object"),
                                           (b"\xff\xfe", "not valid JSON")])
def test_read_result_names_a_damaged_file_and_the_fix(tmp_path, text, problem):
    path = tmp_path / "summary.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DamagedResult) as error:
        results.read_result(path, "delete the cell folder and rerun")
    assert str(error.value).startswith(f"{path}: {problem}")
    assert str(error.value).endswith("; delete the cell folder and rerun")
    assert error.value.path == str(path)


def test_a_running_pilot_holds_its_cell_against_every_claim(tmp_path):
    """A cell whose run lock is held (a pilot still running, e.g. of a sweep killed with
    kill -9) is never claimed, whoever owned its claim; once it ends, it is."""
    sweep = tmp_path / "sweep"
    cell = sweep / "cells" / "c1"
    dead = {"pid": 2 ** 22 + 7, "host": claims.this_process()["host"], "since": 0.0,
            "started_ticks": None, "argv": "race sweep (killed)"}
    results.write_json(sweep / claims.CLAIMS / "c1", dead)  # its sweep is gone
    me = claims.this_process() | {"pid": os.getpid() + 1}  # a rerun, another process
    with claims.cell_lock(cell):
        assert claims.running_pilot(cell)["pid"] == os.getpid()
        mine, held = claims.claim_cells(sweep, ["c1"], me)
        assert mine == [] and held["c1"]["pid"] == os.getpid()
        with pytest.raises(claims.CellBusy):
            with claims.cell_lock(cell):
                pass
    assert claims.running_pilot(cell) is None
    mine, held = claims.claim_cells(sweep, ["c1"], me)
    assert mine == ["c1"] and held == {}
