"""`race sweep` through the local and inline launchers: results contract, reruns that run
only unfinished cells, and a failed cell that never stops the others."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import race_in_process  # tests/conftest.py

from bench.common import select_best_cell  # a flat pick where the stand-in learns nothing

pytest.importorskip("torch", reason="pilots train with torch")
pytest.importorskip("submitit", reason="launchers go through submitit")


# A tiny pilot's knobs (each cell spends ~15 steps on 1.25e9 FLOPs).
SMALL = ["model=tiny-s", "reward=rule", "grid.prompts_per_step=2", "grid.group_size=2",
         "grid.max_new_tokens=12", "grid.update_epochs=1", "grid.lora_rank=4",
         "pilot.eval_examples=4", "pilot.eval_targets=[test]", "budget=2e10",
         "selection.policy=flat"]




def sweep_args(tmp_path, policy, *extra) -> list[str]:
    """``race sweep`` of SMALL into ``tmp_path/s`` (``extra``: more overrides)."""
    args = ["sweep", *SMALL, f"sweep.out_dir={tmp_path}", "sweep.name=s",
            "launcher.poll_s=0.2", *extra]
    if not any(a.startswith("model.hf_id=") for a in extra):
        args.append(f"model.hf_id={policy}")
    return args


def sweep(tmp_path, policy, *extra):
    """:func:`sweep_args` as its own process (the local launcher's pilots are its children)."""
    return subprocess.run([sys.executable, "-m", "race.cli", *sweep_args(tmp_path, policy,
                                                                         *extra)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)


def inline(tmp_path, policy, *extra):
    """:func:`sweep_args` with launcher=inline, in this process (conftest.race_in_process)."""
    return race_in_process(sweep_args(tmp_path, policy, "launcher=inline", *extra), tmp_path)


def test_local_sweep_failure_recorded_and_rerun_runs_only_unfinished(tmp_path, policy,
                                                                     broken_policy):
    broken = broken_policy  # that cell fails
    axis = f"model.hf_id={policy},{broken}"
    out = sweep(tmp_path, policy, axis, "launcher.slots=2")
    assert out.returncode == 1, out.stderr  # a cell failed: non-zero, after writing all
    folder = tmp_path / "s"
    frame = pd.read_csv(folder / "pilots.csv")
    assert len(frame) == 2
    ok = frame[frame.status == "ok"].iloc[0]
    failed = frame[frame.status != "ok"].iloc[0]
    assert ok.steps >= 1 and ok.total_flops <= ok.budget_flops
    assert failed.status == "failed" and str(broken) in failed.error
    record = json.loads((folder / "sweep.json").read_text())
    assert {c["cell_id"] for c in record["cells"]} == set(frame.cell_id)
    assert record["git_sha"] and "torch" in record["versions"]
    assert "1 ok, 1 failed" in out.stdout and f"failed {failed.cell_id}" in out.stderr
    ok_summary = folder / "cells" / ok.cell_id / "summary.json"
    before = ok_summary.stat().st_mtime_ns
    again = sweep(tmp_path, policy, axis, "launcher.slots=2")
    assert again.returncode == 1
    assert "1 cell(s) already ok" in again.stderr  # only the failed cell ran again
    assert ok_summary.stat().st_mtime_ns == before


def test_inline_launcher_runs_in_process(tmp_path, policy):
    out = inline(tmp_path, policy)
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(tmp_path / "s" / "pilots.csv")
    assert list(frame.status) == ["ok"]
    summary = json.loads(next(Path(tmp_path, "s", "cells").glob("*/summary.json")).read_text())
    assert summary["final_eval"]["test"]["checkpoint"] == 1.0
    # rho = learning / charged FLOPs: planned from sweep.json's plan, realized from the ledger
    planned = json.loads((tmp_path / "s" / "sweep.json").read_text())["cells"][0]
    planned, spent = planned["planned_flops"], summary["flops"]
    assert frame.rho_planned[0] == pytest.approx(planned["learning"] / (
        planned["rollout"] + planned["learning"] + planned["feedback"]))
    assert frame.rho_realized[0] == pytest.approx(spent["learning"] / (
        spent["rollout"] + spent["learning"] + spent["feedback"]))
    assert 0 < frame.rho_realized[0] < 1


def test_race_pilot_multirun_through_hydra_submitit_launcher(tmp_path, policy):
    """Hydra users keep their own multirun: `race pilot -m ... hydra/launcher=submitit_local`."""
    knobs = [o for o in SMALL if not o.startswith("grid.group_size=")]
    args = ["pilot", "-m", *knobs, f"model.hf_id={policy}", "grid.group_size=2,4",
            f"pilot.out_dir={tmp_path / 'out'}", "hydra/launcher=submitit_local"]
    env = dict(os.environ, OMP_NUM_THREADS="1")  # two pilots share this machine's cores
    out = subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "Submitit 'local' sweep output dir" in out.stdout + out.stderr
    summaries = [json.loads(p.read_text())
                 for p in (tmp_path / "out" / "cells").glob("*/summary.json")]
    assert sorted(s["status"] for s in summaries) == ["ok", "ok"]
    specs = [json.loads(p.read_text()) for p in (tmp_path / "out" / "cells").glob("*/spec.json")]
    assert sorted(s["group_size"] for s in specs) == [2, 4]
    assert (tmp_path / "multirun").is_dir()  # Hydra's own sweep folder


def test_sweep_reports_then_validate_compares_predicted_with_realized(tmp_path, policy):
    knobs = [o for o in SMALL if not o.startswith(("budget=", "grid.group_size="))]
    out = race_in_process(
        ["sweep", *knobs, "budget=2.5e9", "pilot.fraction=0.5", "grid.group_size=2,4",
         f"model.hf_id={policy}", "launcher=inline", f"sweep.out_dir={tmp_path}",
         "sweep.name=s"], tmp_path)
    assert out.returncode == 0, out.stderr
    folder = tmp_path / "s"
    for name in ("leaderboard.md", "leaderboard.csv", "compute_card.md", "frontier.png",
                 "curves.png", "phases.png", "selection.json"):
        assert (folder / name).is_file(), name
    # the stand-in learns nothing: the report says so and selects none
    assert "nothing learned at these budgets" in out.stdout
    assert json.loads((folder / "selection.json").read_text())["selected"] == []
    first = select_best_cell(folder)
    out = race_in_process(["validate", folder, "validate.top_k=1", "launcher=inline"],
                          tmp_path)
    assert out.returncode == 0, out.stderr
    # its cost first, at the rate the sweep's own pilots ran at; its lines its own name
    cost = next(line for line in out.stderr.splitlines() if "full-budget run" in line)
    assert cost.startswith("race validate: 1 full-budget run(s) of 2.50e+9 FLOPs each")
    assert " one after another at the FLOP/s this sweep's pilots ran at (tiny-s " in cost
    assert "race sweep:" not in out.stderr and "[sweep]" not in out.stderr
    comparison = json.loads((folder / "validate" / "comparison.json").read_text())
    assert comparison["n"] == 1 and comparison["rows"][0]["config_id"] == first["config_id"]
    row = comparison["rows"][0]  # the pilot's own read, and its curve's prediction at F
    assert row["pilot_read"] == first["score"] and "predicted" in row
    assert comparison["top1_regret"] == 0.0  # one validated config is its own best
    assert "rank correlations need >= 3" in comparison["note"]
    full = [json.loads(p.read_text())
            for p in (folder / "validate" / "cells").glob("*/summary.json")]
    assert len(full) == 1 and full[0]["budget_flops"] == 2.5e9  # the full budget
    assert full[0]["total_flops"] <= 2.5e9 and full[0]["status"] == "ok"
    assert "Validation: predicted vs realized" in (folder / "leaderboard.md").read_text()
    assert "Validation: predicted vs realized" in out.stdout


def test_two_identical_sweeps_started_together_run_each_cell_once(tmp_path, policy):
    """Cells are claimed across processes: the second `race sweep` of one folder waits
    for what the first runs instead of running it again, and says so."""
    import time

    small = [a for a in SMALL if not a.startswith(("grid.group_size=", "budget="))]
    args = [sys.executable, "-m", "race.cli", "sweep", *small, f"model.hf_id={policy}",
            "grid.group_size=2,4", f"sweep.out_dir={tmp_path}", "sweep.name=s",
            "launcher.poll_s=0.2", "launcher.slots=2", "budget=1e10"]
    procs = []
    for _ in range(2):
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=tmp_path))
        time.sleep(1.0)
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    record = json.loads((tmp_path / "s" / "sweep.json").read_text())
    runs = record["runs"]
    assert len(runs) == 2 and {r["pid"] for r in runs} == {p.pid for p in procs}
    cells = {c["cell_id"] for c in record["cells"]}
    launched = [set(r["launched"]) for r in runs]
    assert launched[0] | launched[1] == cells and not launched[0] & launched[1]
    waiter = next(r for r in runs if r["by_other"])  # one process ran both, one waited
    runner = next(r for r in runs if r is not waiter)
    assert set(waiter["by_other"]) == cells == set(runner["launched"])
    assert {o["pid"] for o in waiter["by_other"].values()} == {runner["pid"]}
    err = outs[[p.pid for p in procs].index(waiter["pid"])][1]
    assert "were run by another process" in err and f"pid {runner['pid']}" in err
    for cell in cells:  # one pilot per cell: one run's rows, no second writer
        summary = json.loads((tmp_path / "s" / "cells" / cell / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["resumed_from_step"] is None
        rows = [json.loads(line) for line in
                (tmp_path / "s" / "cells" / cell / "metrics.jsonl").read_text().splitlines()]
        steps = [r["step"] for r in rows if r["kind"] == "step"]
        assert steps == list(range(1, summary["steps"] + 1))
    assert not list((tmp_path / "s" / "claims").glob("[!.]*"))  # claims released


def test_claims_are_held_by_live_owners_and_taken_over_from_dead_ones(tmp_path):
    from race.store import claims
    from race.store import io as results

    me = claims.this_process()
    parent = me | {"pid": os.getppid(), "started_ticks": claims._start_ticks(os.getppid())}
    gone = me | {"pid": 2**22 + 1}  # above Linux's pid_max default: no such process
    reused = me | {"started_ticks": 1}  # our pid, but a different process's start time
    results.write_json(tmp_path / "claims" / "a", parent)
    results.write_json(tmp_path / "claims" / "b", gone)
    results.write_json(tmp_path / "claims" / "c", reused | {"pid": os.getppid()})
    mine, held = claims.claim_cells(tmp_path, ["a", "b", "c", "d"], me)
    assert mine == ["b", "c", "d"] and held == {"a": parent}
    assert claims.claim_owner(tmp_path, "b") == me
    claims.release_claims(tmp_path, ["a", "b", "c", "d"], me)
    assert claims.claim_owner(tmp_path, "a") == parent  # another's claim stays
    assert all(claims.claim_owner(tmp_path, c) is None for c in "bcd")


def test_a_budget_list_runs_one_ladder_per_budget_and_reports_where_the_pick_changes(
        tmp_path, policy):
    small = [a for a in SMALL if not a.startswith(("budget=", "selection.policy=",
                                                   "grid.group_size="))]
    out = race_in_process(
        ["sweep", *small, f"model.hf_id={policy}", "grid.group_size=2,4", "budget=3e10,6e10",
         "launcher=inline", f"sweep.out_dir={tmp_path}", "sweep.name=b"], tmp_path)
    assert out.returncode == 0, out.stderr
    parent = tmp_path / "b"
    for folder in ("budget-3e10", "budget-6e10"):  # one ladder (sweep folder) per budget
        ladder = json.loads((parent / folder / "ladder.json").read_text())
        rungs = ladder["rungs"]
        assert len(rungs[0]["candidates"]) == 2 and ladder["planned_counts"] == [2, 1, 1, 1]
        for low, high in zip(rungs, rungs[1:]):  # a rung holds what the one below promoted
            assert ({c["config"] for c in high["candidates"]}
                    == {c["config"] for c in low["candidates"] if c["promoted"]})
        leaderboard = (parent / folder / "leaderboard.md").read_text()
        assert "## Ladder (successive halving)" in leaderboard
        # promotions read each rung's end (selection.promote_by=last, the default)
        assert ladder["promote_by"] == "last" and "score at the rung's end" in leaderboard
        for cand in (c for rung in rungs[:-1] for c in rung["candidates"]):
            assert cand["predicted"] == pytest.approx(cand["score"])
            assert cand["lcb"] == pytest.approx(cand["score"] - ladder["z"] * cand["se"])
        record = json.loads((parent / folder / "sweep.json").read_text())
        assert record["budget_flops"] == float(folder.split("-")[1])
    table = pd.read_csv(parent / "budgets.csv")
    assert sorted(set(table["budget_flops"])) == [3e10, 6e10]
    text = (parent / "budgets.md").read_text()
    assert "## Target: test (selection)" in text and "vs the budget below" in text
    picked = table["config"] != "-"
    # a budget where nothing learned (the stand-in, in a few steps) has no pick and says why
    assert table.loc[~picked, "guard"].str.startswith("nothing learned").all()
    scored = table[picked]
    assert (scored["lo"] <= scored["score"]).all() and (scored["score"] <= scored["hi"]).all()
    if picked.all():  # "changes" by the allocation's knobs, not the ids
        changed = table["allocation"].iloc[0] != table["allocation"].iloc[1]
        assert ("**changes**" in text) == changed
    assert "RACE budgets:" in out.stdout
    # race validate runs the ladder's pick afresh at the full budget and compares
    folder = parent / "budget-3e10"
    selection = json.loads((folder / "selection.json").read_text())
    # the pick is read against its own warm start (checkpoint 0 of the first rung, of the
    # cells with its warm start and evaluation conditions)
    starts = selection["warm_starts"]
    assert {s["model"] for s in starts.values()} == {"tiny-s"}
    assert {s["n"] for s in starts.values()} == {4}
    if selection["selected"]:
        pick = selection["selected"][0]
        start = starts[pick["config_id"]]
        assert pick["gain"] == pytest.approx(pick["score"] - start["accuracy"])
    else:
        pick = select_best_cell(folder)  # nothing learned: none selected
    assert "Warm start on `test`" in (folder / "leaderboard.md").read_text()
    out = race_in_process(["validate", folder, "validate.top_k=1", "launcher=inline"],
                          tmp_path)
    assert out.returncode == 0, out.stderr
    comparison = json.loads((folder / "validate" / "comparison.json").read_text())
    assert [r["config_id"] for r in comparison["rows"]] == [pick["config_id"]]
    assert comparison["rows"][0]["pilot_read"] == pytest.approx(pick["score"])
    [validated] = (folder / "validate" / "cells").iterdir()
    spec = json.loads((validated / "spec.json").read_text())
    assert spec["budget_flops"] == 3e10 and spec["continues"] == ""  # from the warm start


def _pilot_processes(marker: str) -> list[int]:
    """Live processes started for a sweep under ``marker`` (submitit's local controller
    and the slot workers running the pilots name the sweep's folder on their command
    line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="ignore")
        except OSError:
            continue
        if marker in command and "submitit" in command:
            found.append(int(proc.name))
    return found


def test_kill_9_of_a_sweep_leaves_no_pilot_running_and_the_rerun_records_the_redone(
        tmp_path, policy):
    """`kill -9` cannot be caught, so each slot worker watches its sweep and ends with it
    (and dies with submitit's controller): no orphan keeps computing outside any ledger.
    The rerun redoes what the killed pilots had spent and records it as redone."""
    import signal
    import time

    from race.store import io as results

    small = [a for a in SMALL if not a.startswith("budget=")]
    args = ["sweep", *small, f"model.hf_id={policy}", "budget=2e11", "grid.lr=5e-5,1e-4",
            "launcher.slots=2", "launcher.checkpoint_every=0", "launcher.poll_s=0.2",
            f"sweep.out_dir={tmp_path}", "sweep.name=k"]
    proc = subprocess.Popen([sys.executable, "-m", "race.cli", *args], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cells = tmp_path / "k" / "cells"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # until both pilots have spent FLOPs
        files = [results.read_jsonl(p, skip_corrupt=True) for p in cells.glob("*/metrics.jsonl")]
        if len(files) == 2 and all(any("flops" in r for r in rows) for rows in files):
            break
        assert proc.poll() is None, "the sweep ended before it could be killed"
        time.sleep(0.1)
    assert _pilot_processes(str(tmp_path)), "no pilot process was found running"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20  # the workers poll their sweep every 0.5 s
    while _pilot_processes(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pilot_processes(str(tmp_path)) == []
    assert not list(cells.glob("*/summary.json"))  # both were killed mid-run
    again = subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                           text=True, timeout=600, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    for path in cells.glob("*/summary.json"):
        summary = json.loads(path.read_text())
        assert summary["status"] == "ok"
        assert summary["redone_flops"] > 0  # what the killed pilot spent, spent again
        rows = [json.loads(line) for line in (path.parent / "metrics.jsonl").read_text()
                .splitlines()]
        steps = [r["step"] for r in rows if r["kind"] == "step"]
        assert steps == list(range(1, summary["steps"] + 1))  # one writer: no doubled rows


def test_a_ladder_whose_every_pilot_fails_exits_1_with_pilots_csv_and_the_failures(
        tmp_path, broken_policy):
    ladder = [a for a in SMALL if not a.startswith(("selection.policy=", "budget="))]
    args = ["sweep", *ladder, f"model.hf_id={broken_policy}", "budget=2e11",
            "grid.lr=5e-5,1e-4", "launcher=inline", f"sweep.out_dir={tmp_path}",
            "sweep.name=s"]
    for _ in range(2):  # and the rerun, the same way
        out = race_in_process(args, tmp_path)
        assert out.returncode == 1, out.stderr
        assert "Traceback" not in out.stderr
        frame = pd.read_csv(tmp_path / "s" / "pilots.csv")
        assert len(frame) == 2 and set(frame.status) == {"failed"}
        board = (tmp_path / "s" / "leaderboard.md").read_text()
        assert "No ok cell to rank: 2 of 2 cell(s)" in board
        for _, row in frame.iterrows():
            assert row.cell_id in board and "could not load the policy" in row.error
        assert board.count("could not load the policy") == 2
        assert (tmp_path / "s" / "ladder.json").is_file()


class _DiskFillsUp:
    """``os`` as race.store.io sees it, on a disk that fills after ``room`` more writes
    (appends and synced atomic writes): every later one fails with ENOSPC."""

    def __init__(self, room: float):
        self.room, self.calls = room, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def _spend(self):
        import errno

        self.calls += 1
        if self.calls > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, fd, data):
        self._spend()
        return os.write(fd, data)

    def fsync(self, fd):
        self._spend()
        return os.fsync(fd)


def test_a_full_disk_ends_the_sweep_with_one_line_files_whole_and_the_rerun_resumes(
        tmp_path, policy, monkeypatch, capsys):
    """An injected ENOSPC midway (race.store.io' writes) ends the sweep with one line; every
    JSON and JSON-lines file left parses; the rerun, with space again, finishes with the
    FLOPs of a sweep that never stopped."""
    from race import cli
    from race.store import io as results

    args = ["sweep", *SMALL, f"model.hf_id={policy}", "launcher=inline",
            "launcher.checkpoint_every=3"]

    def run(name: str, disk) -> int:
        monkeypatch.setattr(results, "os", disk)
        try:
            return cli.main([*args, f"sweep.out_dir={tmp_path}", f"sweep.name={name}"])
        finally:
            monkeypatch.setattr(results, "os", os)

    counted = _DiskFillsUp(float("inf"))
    assert run("whole", counted) == 0
    whole = json.loads(next((tmp_path / "whole" / "cells").glob("*/summary.json")).read_text())
    capsys.readouterr()
    assert run("full", _DiskFillsUp(counted.calls // 2)) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()
             and not line.startswith(("race sweep: grid", "race sweep: 1 pilot", "[sweep]",
                                      "race sweep: warning: grid.max_new_tokens"))]
    assert len(lines) == 1, lines
    assert lines[0].startswith("race sweep: no space left on ") and lines[0].endswith(
        "; free space and rerun: finished cells are kept")
    folder = tmp_path / "full"
    for path in folder.rglob("*"):
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                json.loads(line)
    assert not [p for p in folder.rglob(".*") if p.name not in (".lock", ".running")]
    assert not list(folder.glob("cells/*/summary.json"))  # the cell is not finished
    assert run("full", _DiskFillsUp(float("inf"))) == 0  # space freed: the rerun resumes
    resumed = json.loads(next((folder / "cells").glob("*/summary.json")).read_text())
    assert resumed["status"] == "ok" and resumed["resumed_from_step"] is not None
    assert resumed["total_flops"] == whole["total_flops"]
    assert resumed["flops"] == whole["flops"] and resumed["steps"] == whole["steps"]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 400 KiB tmpfs (filled by a two-cell sweep midway), unmounted afterwards; skips
    where mounting is not permitted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({out.stderr.strip()[:80]}; needs root or "
                    f"CAP_SYS_ADMIN); the injected-ENOSPC test covers the full-disk path")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_local_pilots_on_a_small_tmpfs_end_the_sweep_with_one_line_and_resume(
        tmp_path, policy, small_tmpfs):
    small = [a for a in SMALL if not a.startswith("budget=")]
    args = ["sweep", *small, f"model.hf_id={policy}", "budget=2e10", "grid.lr=5e-5,1e-4",
            "launcher.slots=2", "launcher.checkpoint_every=3", "launcher.poll_s=0.2"]

    def run(out_dir: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "race.cli", *args,
                               f"sweep.out_dir={out_dir}", "sweep.name=s"],
                              capture_output=True, text=True, timeout=600, cwd=tmp_path)

    full = run(small_tmpfs)
    assert full.returncode == 2, full.stderr
    assert "Traceback" not in full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith(f"race sweep: no space left on {small_tmpfs}") and last.endswith(
        "; free space and rerun: finished cells are kept"), full.stderr
    for path in (small_tmpfs / "s").rglob("*"):
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            [json.loads(line) for line in path.read_text().splitlines()]
    subprocess.run(["mount", "-o", "remount,size=20m", str(small_tmpfs)], check=True)
    assert run(small_tmpfs).returncode == 0  # space freed: the rerun resumes
    whole = run(tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr

    def flops(root: Path) -> dict:
        return {p.parent.name: (json.loads(p.read_text())["total_flops"],
                                json.loads(p.read_text())["steps"])
                for p in (root / "s" / "cells").glob("*/summary.json")}

    assert flops(small_tmpfs) == flops(tmp_path / "whole") and len(flops(small_tmpfs)) == 2


def test_a_read_only_results_folder_is_one_line_naming_it(tmp_path):
    mount = tmp_path / "ro"
    mount.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mount)],
                         capture_output=True, text=True)
    if out.returncode != 0:  # root ignores file modes: only a read-only mount tests this
        pytest.skip(f"cannot mount a read-only tmpfs here ({out.stderr.strip()[:80]}; needs "
                    f"root or CAP_SYS_ADMIN)")
    try:
        out = subprocess.run([sys.executable, "-m", "race.cli", "sweep", *SMALL,
                              f"sweep.out_dir={mount}/results"], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        # the model cache on the read-only disk: the fix is RACE_CACHE_DIR, not sweep.out_dir
        cache = subprocess.run([sys.executable, "-m", "race.cli", "sweep", *SMALL,
                                f"sweep.out_dir={tmp_path}/results"], capture_output=True,
                               text=True, timeout=300, cwd=tmp_path,
                               env=dict(os.environ, RACE_CACHE_DIR=f"{mount}/cache"))
        # race report of a sweep on a read-only disk: sweep.out_dir is not what it reads
        report = subprocess.run([sys.executable, "-m", "race.cli", "report", str(mount)],
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    assert cache.returncode == 2, cache.stderr
    assert cache.stderr.strip().splitlines()[-1].startswith(
        f"race sweep: RACE_CACHE_DIR: cannot write the model cache {mount}/cache")
    assert "set RACE_CACHE_DIR to a writable folder" in cache.stderr
    assert not (tmp_path / "results").exists()
    assert report.returncode == 2 and "Traceback" not in report.stderr, report.stderr
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"race sweep: cannot write {mount}/results (Read-only file system); make it "
        f"writable, or write the results elsewhere with sweep.out_dir=<folder>")


def test_a_reused_sweep_name_with_another_plan_is_refused_and_the_same_plan_resumes(
        tmp_path, policy):
    """sweep.name=s at 2e10, then at 4e10: refused with one line naming what differs, the
    folder untouched; the first command again resumes (nothing reruns); sweep.extend=true
    adds the second plan's cell on purpose, and sweep.json then lists both."""
    first = inline(tmp_path, policy)
    assert first.returncode == 0, first.stderr[-2000:]
    record = (tmp_path / "s" / "sweep.json").read_text()
    other = subprocess.run([sys.executable, "-m", "race.cli", "sweep", *[
        "budget=4e10" if a.startswith("budget=") else a for a in SMALL], "launcher=inline",
        f"model.hf_id={policy}", f"sweep.out_dir={tmp_path}", "sweep.name=s"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert other.returncode == 2, other.stderr
    lines = [line for line in other.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in other.stderr
    assert lines[0].startswith("race sweep: sweep.name=s: ")
    assert "holds another plan's sweep (budget 2e+10 there, 4e+10 here)" in lines[0]
    assert "give another sweep.name, or pass sweep.extend=true" in lines[0]
    knob = inline(tmp_path, policy, "grid.lr=2e-3")
    assert knob.returncode == 2 and "(grid.lr=2e-3 here)" in knob.stderr, knob.stderr
    assert (tmp_path / "s" / "sweep.json").read_text() == record  # nothing written
    assert len(list((tmp_path / "s" / "cells").iterdir())) == 1
    again = inline(tmp_path, policy)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "(1 already done before this run)" in again.stdout
    extended = inline(tmp_path, policy, "grid.lr=2e-3", "sweep.extend=true")
    assert extended.returncode == 0, extended.stderr[-2000:]
    cells = json.loads((tmp_path / "s" / "sweep.json").read_text())["cells"]
    assert len({c["cell_id"] for c in cells}) == 2
    assert len(list((tmp_path / "s" / "cells").iterdir())) == 2
    # the extension's cell left unfinished (a stop): the first command, part of the
    # extended plan, answers for its own cell, and names the other without running it
    added = next(c for c in cells if c["cell_id"] != json.loads(record)["cells"][0]["cell_id"])
    (tmp_path / "s" / "cells" / added["cell_id"] / "summary.json").unlink()
    resumed = inline(tmp_path, policy)  # part of the extended plan
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert len(json.loads((tmp_path / "s" / "sweep.json").read_text())["cells"]) == 2
    assert (f"1 cell(s) of {tmp_path / 's'} outside this command are not ok "
            f"({added['cell_id']} missing): this command does not run them" in resumed.stderr)
    assert f"failed {added['cell_id']}" not in resumed.stderr
    # the closing line counts cells by status: the unfinished one is missing, not failed
    assert "\n1 ok, 0 failed, 1 missing (1 already done before this run)" in resumed.stdout
    assert not (tmp_path / "s" / "cells" / added["cell_id"] / "summary.json").exists()


def test_report_during_a_running_pilot_says_running_not_missing(tmp_path, policy):
    from race.store import claims

    out = inline(tmp_path, policy, "grid.lr=1e-3,2e-3")
    assert out.returncode == 0, out.stderr[-2000:]
    cell = sorted((tmp_path / "s" / "cells").iterdir())[0]
    (cell / "summary.json").unlink()
    with claims.cell_lock(cell):  # as a pilot holds it for its whole life
        report = subprocess.run([sys.executable, "-m", "race.cli", "report",
                                 str(tmp_path / "s")], capture_output=True, text=True,
                                timeout=300, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "cells: 1 ok, 0 failed, 0 missing, 1 running" in report.stdout
    assert "running now (pid" in (tmp_path / "s" / "leaderboard.md").read_text()


def test_a_disk_that_fills_at_the_summary_names_the_summary(tmp_path, policy, monkeypatch,
                                                          capsys):
    import errno
    import tempfile

    from race import cli
    from race.store import io as results

    real = tempfile.mkstemp

    def mkstemp(*args, prefix="", **kwargs):
        if prefix.startswith(".summary.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(results.tempfile, "mkstemp", mkstemp)
    code = cli.main(["sweep", *SMALL, f"model.hf_id={policy}", "launcher=inline",
                     f"sweep.out_dir={tmp_path}", "sweep.name=s"])
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("race sweep: no space left on ") and "summary.json" in last, last


def test_a_concurrent_extension_keeps_both_commands_cells_in_sweep_json(tmp_path):
    """Two sweeps extend one folder at once: the one that finishes last writes sweep.json
    from a record read before the other added its cells; they stay listed."""
    from race.run import sweep as run_sweep_module

    first = {"budget_flops": 1e12, "cells": [{"cell_id": "a"}]}
    run_sweep_module._write_record(tmp_path, dict(first))  # A starts
    second = {"budget_flops": 1e12, "cells": run_sweep_module._extended_cells(
        tmp_path, [{"cell_id": "b"}])}
    run_sweep_module._write_record(tmp_path, second, {"pid": 2})  # B starts and ends
    mine = dict(first)
    run_sweep_module._write_record(tmp_path, mine, {"pid": 1})  # A ends
    record = json.loads((tmp_path / "sweep.json").read_text())
    assert [c["cell_id"] for c in record["cells"]] == ["a", "b"]
    assert [c["cell_id"] for c in mine["cells"]] == ["a", "b"]
    assert [r["pid"] for r in record["runs"]] == [2, 1]


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_damaged_ladder_state_names_the_cell_folder_to_remove_and_the_fix_works(
        tmp_path, policy):
    """The learner.pt a ladder's top rung continues emptied and the top rung's cell
    removed: the rerun exits 2 before writing anything, naming the rung-below folder; a
    learner.pt that is a zip but no torch file gets past that check, and the top rung's
    pilot failure is this command's (exit 1, its error naming the folder to remove);
    removed, the rerun completes."""
    import shutil
    import zipfile

    small = [a for a in SMALL if not a.startswith(("budget=", "selection.policy=",
                                                   "grid.group_size="))]
    args = ["sweep", *small, f"model.hf_id={policy}", "grid.group_size=2,4", "budget=3e10",
            "launcher=inline", f"sweep.out_dir={tmp_path}", "sweep.name=l"]

    def run(own_process: bool = False):
        """The sweep, in this process; ``own_process`` where its whole stderr is checked."""
        if own_process:
            return subprocess.run([sys.executable, "-m", "race.cli", *args],
                                  capture_output=True, text=True, timeout=900, cwd=tmp_path)
        return race_in_process(args, tmp_path)

    assert run().returncode == 0
    folder = tmp_path / "l"
    rungs = json.loads((folder / "ladder.json").read_text())["rungs"]
    assert len(rungs) >= 2  # (a guard may end the climb before the last rung)
    [fourth] = rungs[-1]["cells"]  # the top rung's cell, and the one it continues
    third = next(c for c, config in rungs[-2]["cells"].items()
                 if config == rungs[-1]["cells"][fourth])
    [learner] = (folder / "cells" / third / "state").glob("step-*/learner.pt")
    learner.write_bytes(b"")
    shutil.rmtree(folder / "cells" / fourth)
    before = _files(folder)
    out = run(own_process=True)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"race sweep: {folder / 'cells' / third}: "
                                                   f"the final state of 1 ladder cell(s)")
    assert "learner.pt does not read (BadZipFile" in lines[0]
    assert "remove the damaged cell folder(s) so that their rung reruns" in lines[0]
    assert _files(folder) == before  # nothing written
    with zipfile.ZipFile(learner, "w") as junk:  # a zip, but not what torch.save writes
        junk.writestr("junk", b"not a tensor")
    out = run()
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"failed {fourth}: " in out.stderr and "outside this command" not in out.stderr
    assert f"remove the damaged cell folder {folder / 'cells' / third} so that its rung " \
        f"reruns" in out.stderr
    shutil.rmtree(folder / "cells" / third)  # the fix
    out = run()
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((folder / "cells" / fourth / "summary.json").read_text())["status"] == "ok"
    report = race_in_process(["report", folder], tmp_path)
    assert report.returncode == 0, report.stderr
