"""Pilot checkpoints: a crashed or preempted pilot, rerun, continues from its last saved
state and ends exactly where an uninterrupted run ends (FLOPs, steps, metrics.jsonl)."""

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch", reason="pilots train with torch")

from conftest import Shaped  # noqa: E402  (tests/conftest.py)

from race.core.specs import RunSpec  # noqa: E402
from race.pilot.budget import worst_step_flops  # noqa: E402
from race.pilot.components import build_components  # noqa: E402
from race.pilot.loop import run_pilot  # noqa: E402
from race.pilot.state import load_state  # noqa: E402
from race.store import io as results  # noqa: E402

RULE = (("kind", "rule"), ("name", "rule"))
TASK = (("name", "arith"),)
# everything in a summary that must not depend on where a pilot was interrupted
DETERMINISTIC = ("status", "cell_id", "total_flops", "flops", "flops_model", "flops_executed",
                 "steps", "final_eval", "initial_eval")




def small_spec(worst_steps: float, **kw) -> RunSpec:
    knobs = dict(prompts_per_step=2, group_size=4, max_new_tokens=12, lr=1e-3, lora_rank=4,
                 lora_alpha=8, eval_examples=4) | kw
    spec = RunSpec("tiny-s", RULE, TASK, 0.0, **knobs)
    return dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * worst_steps)


def run(spec, path, policy, **kw):
    parts = build_components(spec, policy)
    parts.reward = Shaped(parts.reward)
    summary = run_pilot(spec, path, components=parts, **kw)
    assert summary["total_flops"] <= spec.budget_flops  # every pilot keeps to its budget
    return summary


def step_rows(path):
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "step"]


def crash_at(step: int):
    """A progress callback that fails the pilot right after ``step``."""

    def progress(row):
        if row["step"] == step:
            raise RuntimeError(f"node lost after step {row['step']}")

    return progress


def test_crash_then_rerun_equals_an_uninterrupted_run(tmp_path, policy):
    # two shuffled minibatches a step: the shuffle RNG and old log-probs both matter
    spec = small_spec(10, minibatch_size=4)
    whole = run(spec, tmp_path / "whole", policy, checkpoint_every=0)
    assert whole["status"] == "ok", whole["error"]
    assert whole["steps"] >= 9 and whole["resumed_from_step"] is None
    assert all(r["grad_norm"] > 0 for r in step_rows(tmp_path / "whole"))  # it learns

    cell = tmp_path / "cell"
    crashed = run(spec, cell, policy, checkpoint_every=3, progress=crash_at(7))
    assert crashed["status"] == "failed" and "node lost after step 7" in crashed["error"]
    assert crashed["steps"] == 7
    assert [p.name for p in (cell / "state").iterdir()] == ["step-000006"]  # older: pruned
    saved_s = results.read_json(cell / "state" / "step-000006" / "state.json")["ledger"]["wall_s"]

    resumed = run(spec, cell, policy, checkpoint_every=3)
    assert resumed["status"] == "ok", resumed["error"]
    assert resumed["resumed_from_step"] == 6
    assert {k: resumed[k] for k in DETERMINISTIC} == {k: whole[k] for k in DETERMINISTIC}
    assert (cell / "metrics.jsonl").read_bytes() == (tmp_path / "whole" / "metrics.jsonl"
                                                     ).read_bytes()
    # wall seconds carry over from the saved state; step 7's lost seconds are not in it
    assert all(resumed["wall_s"][k] >= saved_s[k] for k in saved_s)
    timing = [json.loads(line)["step"] for line in (cell / "timing.jsonl").read_text()
              .splitlines()]
    assert timing == list(range(1, whole["steps"] + 1))  # step 7 once, from the rerun
    assert not (cell / "state").exists()  # finished ok: the optimizer state is gone


def test_state_of_another_spec_is_ignored(tmp_path, policy):
    spec = small_spec(6)
    other = dataclasses.replace(spec, seed=spec.seed + 1)
    cell = tmp_path / "cell"
    crashed = run(other, cell, policy, checkpoint_every=2, progress=crash_at(3))
    assert crashed["status"] == "failed"
    assert load_state(cell / "state", other).steps == 2
    assert load_state(cell / "state", spec) is None

    fresh = run(spec, cell, policy, checkpoint_every=2)
    assert fresh["status"] == "ok", fresh["error"]
    assert fresh["resumed_from_step"] is None
    whole = run(spec, tmp_path / "whole", policy, checkpoint_every=0)
    assert {k: fresh[k] for k in DETERMINISTIC} == {k: whole[k] for k in DETERMINISTIC}
    assert (cell / "metrics.jsonl").read_bytes() == (tmp_path / "whole" / "metrics.jsonl"
                                                     ).read_bytes()
    assert not (cell / "state").exists()


def test_checkpoint_every_zero_writes_no_state(tmp_path, policy):
    spec = small_spec(6)
    seen = []

    def progress(row):
        seen.append((tmp_path / "state").exists())
        if row["step"] == 3:
            raise RuntimeError("stop")

    summary = run(spec, tmp_path, policy, checkpoint_every=0, progress=progress)
    assert summary["status"] == "failed"  # a failed pilot would keep a state it had saved
    assert seen == [False, False, False] and not (tmp_path / "state").exists()


def test_negative_checkpoint_every_is_refused(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every=-1"):
        run_pilot(small_spec(6), tmp_path, checkpoint_every=-1)


def test_unreadable_state_names_the_folder_to_delete(tmp_path):
    spec = small_spec(6)
    folder = tmp_path / "state" / "step-000003"
    folder.mkdir(parents=True)
    (folder / "state.json").write_text("{not json")
    with pytest.raises(ValueError, match="delete .*state to rerun the cell"):
        load_state(tmp_path / "state", spec)


def test_write_folder_is_all_or_nothing(tmp_path):
    target = tmp_path / "state" / "step-000001"

    def fill(text):
        def write(folder):
            (folder / "a.txt").write_text(text)
            if text == "broken":
                raise OSError("disk full")
        return write

    results.write_folder(target, fill("first"))
    results.write_folder(target, fill("second"))  # replaces the whole folder
    assert (target / "a.txt").read_text() == "second"
    with pytest.raises(OSError, match="disk full"):
        results.write_folder(target, fill("broken"))
    assert (target / "a.txt").read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["step-000001"]  # no temp folders


def test_a_ladder_rung_continues_the_rung_below_without_charging_a_flop_twice(tmp_path,
                                                                             policy):
    """A promoted cell resumes the final state of its rung: its steps, ledger and metrics
    rows carry over, and its FLOPs grow only by the steps it adds."""
    cells = tmp_path / "cells"
    low = small_spec(4, checkpoints=(0.5, 1.0))
    below = run(low, cells / low.cell_id, policy, checkpoint_every=0, keep_final_state=True)
    assert below["status"] == "ok" and below["steps"] >= 3
    assert load_state(cells / low.cell_id / "state", low).steps == below["steps"]  # kept
    high = dataclasses.replace(low, budget_flops=low.budget_flops * 4, continues=low.cell_id)
    assert high.lineage_id == low.lineage_id and high.cell_id != low.cell_id
    above = run(high, cells / high.cell_id, policy, checkpoint_every=0)
    assert above["status"] == "ok"
    assert above["continued_from"] == {"cell_id": low.cell_id, "steps": below["steps"]}
    assert above["resumed_from_step"] is None and above["redone_flops"] == 0
    # the rung below's rows are the first rows of the rung above, unchanged
    rows_below = (cells / low.cell_id / "metrics.jsonl").read_text().splitlines()
    rows_above = (cells / high.cell_id / "metrics.jsonl").read_text().splitlines()
    assert rows_above[:len(rows_below)] == rows_below
    new = [json.loads(r) for r in rows_above[len(rows_below):]]
    new_steps = [r for r in new if r["kind"] == "step"]
    assert [r["step"] for r in new_steps] == list(range(below["steps"] + 1, above["steps"] + 1))
    # the ledger: what the rung above adds is exactly the sum of its own steps' costs
    charged = [below["total_flops"]] + [r["charged_flops"] for r in new_steps]
    added = [b - a for a, b in zip(charged, charged[1:])]
    assert all(x > 0 for x in added)  # every step adds its cost once, nothing is reset
    assert above["total_flops"] == pytest.approx(below["total_flops"] + sum(added))
    assert below["total_flops"] < above["total_flops"] <= high.budget_flops
    # no eval repeated at the rung below's end: the first new eval is at 0.5 x 4 budgets
    evals = [r for r in new if r["kind"] == "eval"]
    assert {r["checkpoint"] for r in evals} == {0.5, 1.0}
    assert evals[0]["flops"]["model"]["rollout"] > below["flops"]["rollout"]


def test_a_rung_without_the_final_state_below_it_is_refused(tmp_path, policy):
    from race.errors import UsageError

    cells = tmp_path / "cells"
    low = small_spec(2, checkpoints=(1.0,))
    run(low, cells / low.cell_id, policy, checkpoint_every=0)  # not kept: a flat pilot
    high = dataclasses.replace(low, budget_flops=low.budget_flops * 2, continues=low.cell_id)
    with pytest.raises(UsageError, match=f"continues {low.cell_id}, which has no final state"):
        run_pilot(high, cells / high.cell_id)
    other = dataclasses.replace(high, lr=5e-3)  # another lineage: refused before anything runs
    with pytest.raises(UsageError, match="another cell"):
        run_pilot(other, cells / other.cell_id)
