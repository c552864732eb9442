"""bench/curve_bank.py: a sweep folder's ok cells exported as a curve bank, and the runs
of earlier commands into the same folder kept when a later command adds cells."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

from race.store import io as results

SCRIPT = Path(__file__).parents[1] / "bench" / "curve_bank.py"


def write_cell(sweep: Path, cell_id: str, group_size: int) -> dict:
    cell = sweep / "cells" / cell_id
    cell.mkdir(parents=True)
    results.write_json(cell / "spec.json", {
        "cell_id": cell_id, "config_id": f"c{group_size}", "model": "tiny-s",
        "reward": {"name": "rule"}, "group_size": group_size, "update_epochs": 1,
        "seed": 0, "budget_flops": 1e9, "convention": "model"})
    results.write_json(cell / "summary.json", {"status": "ok"})
    spent = {"model": {"rollout": 1.0, "learning": 2.0, "feedback": 0.0, "eval": 5.0}}
    results.write_jsonl(cell / "metrics.jsonl", [
        {"kind": "step", "step": 1, "flops": spent, "entropy": 0.5, "truncation_rate": 0.0,
         "max_new_tokens": 40, "train_reward": 0.25},
        {"kind": "eval", "checkpoint": 1.0, "target": "val", "flops": spent,
         "accuracy": 0.5, "correct": [1, 0], "mean_reward": 0.5}])
    return {"cell_id": cell_id}


def export(sweep: Path, argv: list[str], cells: list[dict], out: Path, *extra: str) -> dict:
    results.write_json(sweep / "sweep.json", {
        "argv": argv, "git_sha": "abc", "versions": {}, "budget_flops": 1e9, "started": 1.0,
        "finished": 2.0, "cells": cells})
    subprocess.run([sys.executable, str(SCRIPT), str(sweep), "--out", str(out), *extra],
                   check=True, capture_output=True, text=True)
    with gzip.open(out, "rt") as f:
        return json.load(f)


def test_a_second_command_into_the_same_folder_keeps_the_first_ones_run(tmp_path):
    sweep = tmp_path / "bank"
    first = export(sweep, ["race", "sweep", "grid.group_size=8"],
                   [write_cell(sweep, "a8", 8)], tmp_path / "first.json.gz")
    assert [r["command"] for r in first["runs"]] == ["race sweep grid.group_size=8"]
    assert first["cells"][0]["evals"][0]["flops"] == 3.0  # charged: eval left out
    second = export(sweep, ["race", "sweep", "grid.group_size=4"],
                    [write_cell(sweep, "a4", 4)], tmp_path / "second.json.gz",
                    "--previous", str(tmp_path / "first.json.gz"))
    assert [(r["command"], r["cells"]) for r in second["runs"]] == [
        ("race sweep grid.group_size=8", ["a8"]), ("race sweep grid.group_size=4", ["a4"])]
    assert sorted(c["cell_id"] for c in second["cells"]) == ["a4", "a8"]
    assert second["command"] == "race sweep grid.group_size=4"


def test_a_cell_of_the_last_command_not_ok_yet_refuses_the_export(tmp_path):
    sweep = tmp_path / "bank"
    cells = [write_cell(sweep, "a8", 8), write_cell(sweep, "b8", 8)]
    results.write_json(sweep / "cells" / "b8" / "summary.json", {"status": "failed"})
    write_cell(sweep, "c8", 8)  # an earlier command's cell, still running: no summary yet
    (sweep / "cells" / "c8" / "summary.json").unlink()
    results.write_json(sweep / "sweep.json", {
        "argv": ["race", "sweep"], "git_sha": "abc", "versions": {}, "budget_flops": 1e9,
        "started": 1.0, "finished": 2.0, "cells": cells})
    out = subprocess.run([sys.executable, str(SCRIPT), str(sweep), "--out",
                          str(tmp_path / "bank.json.gz")], capture_output=True, text=True)
    assert out.returncode == 1 and "1 cell(s) of its last command not ok yet" in out.stderr
    assert not (tmp_path / "bank.json.gz").exists()


def test_an_earlier_banks_cells_join_a_fresh_folders_and_a_folders_cell_replaces_its_own(
        tmp_path):
    first = export(tmp_path / "one", ["race", "sweep", "pilot.seed=0"],
                   [write_cell(tmp_path / "one", "s0", 8), write_cell(tmp_path / "one", "s1", 8)],
                   tmp_path / "first.json.gz")
    fresh = tmp_path / "two"  # a later command into a new folder: seed 2, and s1 rerun
    write_cell(fresh, "s1", 8)
    results.write_jsonl(fresh / "cells" / "s1" / "metrics.jsonl", [
        {"kind": "eval", "checkpoint": 1.0, "target": "val", "flops": {}, "accuracy": 0.75,
         "correct": [1, 1, 1, 0], "mean_reward": 0.75}])
    merged = export(fresh, ["race", "sweep", "pilot.seed=1,2"],
                    [{"cell_id": "s1"}, write_cell(fresh, "s2", 8)],
                    tmp_path / "merged.json.gz", "--previous", str(tmp_path / "first.json.gz"))
    by_id = {c["cell_id"]: c for c in merged["cells"]}
    assert sorted(by_id) == ["s0", "s1", "s2"]
    assert by_id["s0"] == next(c for c in first["cells"] if c["cell_id"] == "s0")
    assert by_id["s1"]["evals"][0]["accuracy"] == 0.75  # the folder's own run wins
    assert [r["cells"] for r in merged["runs"]] == [["s0", "s1"], ["s1", "s2"]]


def test_an_earlier_bank_from_other_code_is_refused_and_nothing_is_written(tmp_path):
    export(tmp_path / "one", ["race", "sweep"], [write_cell(tmp_path / "one", "s0", 8)],
           tmp_path / "first.json.gz")
    sweep = tmp_path / "two"
    results.write_json(sweep / "sweep.json", {
        "argv": ["race", "sweep"], "git_sha": "def", "versions": {}, "budget_flops": 1e9,
        "started": 1.0, "finished": 2.0, "cells": [write_cell(sweep, "s2", 8)]})
    out = subprocess.run([sys.executable, str(SCRIPT), str(sweep), "--out",
                          str(tmp_path / "merged.json.gz"), "--previous",
                          str(tmp_path / "first.json.gz")], capture_output=True, text=True)
    assert out.returncode == 1
    assert "git_sha differs (abc in the earlier bank, def here)" in out.stderr
    assert not (tmp_path / "merged.json.gz").exists()


def test_an_earlier_bank_at_another_budget_is_refused_and_the_message_names_its_own_file(
        tmp_path):
    export(tmp_path / "one", ["race", "sweep"], [write_cell(tmp_path / "one", "s0", 8)],
           tmp_path / "first.json.gz")
    sweep = tmp_path / "four"
    results.write_json(sweep / "sweep.json", {
        "argv": ["race", "sweep", "budget=4e9"], "git_sha": "abc", "versions": {},
        "budget_flops": 4e9, "started": 1.0, "finished": 2.0,
        "cells": [write_cell(sweep, "s4", 8)]})
    out = subprocess.run([sys.executable, str(SCRIPT), str(sweep), "--out",
                          str(tmp_path / "merged.json.gz"), "--previous",
                          str(tmp_path / "first.json.gz")], capture_output=True, text=True)
    assert out.returncode == 1
    assert ("budget_flops differs (1000000000.0 in the earlier bank, 4000000000.0 here); "
            "export this folder without --previous (a bank at another budget is its own "
            "file: bench/testbed.py reads several, --bank each)") in out.stderr
    assert not (tmp_path / "merged.json.gz").exists()
