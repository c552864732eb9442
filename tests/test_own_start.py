"""Each cell judged against its own start (issue 62, item 1): a config's gain is read
against checkpoint 0 of the cells with the same warm start and evaluation conditions
(race.core.specs.baseline_key), never a mean over cells evaluated at another generation
cap or task knob. On hand-made flat sweep folders (no model runs), as
`race sweep B grid.max_new_tokens=12,40` writes them."""

import json
import math

import pandas as pd
import pytest

from race.analysis.select import warm_starts
from race.analysis.sweep_analysis import analyse_sweep
from race.core.stats import binomial_se
from race.report.write import write_report
from race.store import io as results

VAL = 64  # pilot.select_examples
PILOT = 6.25e10  # 0.0625 x budget=1e12


def _eval(checkpoint, hits, flops):
    return {"kind": "eval", "target": "val", "checkpoint": checkpoint,
            "accuracy": hits / VAL, "mean_reward": hits / VAL,
            "correct": [1] * hits + [0] * (VAL - hits),
            "flops": {"model": {"rollout": 0.3 * flops, "learning": 0.7 * flops,
                                "feedback": 0.0, "eval": 1e8}}}


def _cell(sweep, config, cap, hits, *, lr=3e-4, digits=1):
    """One ok cell of config ``config`` at ``grid.max_new_tokens=cap``: its val hits at
    checkpoints 0, 0.5 and 1 (``hits``), its train reward rising."""
    folder = sweep / "cells" / f"{config}-s0"
    results.write_json(folder / "spec.json", {
        "cell_id": f"{config}-s0", "config_id": config, "model": "tiny-s", "seed": 0,
        "prompts_per_step": 8, "group_size": 4, "max_new_tokens": cap, "update_epochs": 1,
        "minibatch_size": 0, "lr": lr, "lora_rank": 16, "kl_coef": 0.0, "temperature": 1.0,
        "backend": "hf", "convention": "model", "budget_flops": PILOT, "select_target": "val",
        "eval_targets": ["val"], "select_examples": VAL, "eval_examples": 16,
        "task": {"name": "arith", "digits": digits}, "reward": {"name": "rule", "kind": "rule"}})
    spent = 0.97 * PILOT
    rows = [_eval(0.0, hits[0], 0.0)]
    for step, at in ((1, 0.5), (2, 1.0)):
        rows += [{"kind": "step", "step": step, "charged_flops": at * spent,
                  "train_reward": 0.1 * step, "truncation_rate": 0.0, "max_new_tokens": cap},
                 _eval(at, hits[step], at * spent)]
    results.write_jsonl(folder / "metrics.jsonl", rows)
    results.write_json(folder / "summary.json", {
        "cell_id": f"{config}-s0", "status": "ok", "error": None, "budget_flops": PILOT,
        "convention": "model", "steps": 2, "total_flops": spent, "device": "cpu",
        "flops": {"rollout": 0.3 * spent, "learning": 0.7 * spent, "feedback": 0.0,
                  "eval": 1e8},
        "wall_s": {"rollout": 1.0, "learning": 2.0, "feedback": 0.0, "eval": 1.0},
        "final_eval": {"val": {"accuracy": hits[-1] / VAL, "mean_reward": 0.0}},
        "initial_eval": {"val": {"accuracy": hits[0] / VAL, "mean_reward": 0.0}}})


def _sweep(root, cells):
    sweep = root / "s"
    results.write_json(sweep / "sweep.json", {
        "budget_flops": 1e12, "pilot_fraction": 0.0625, "task": "arith",
        "config": {"regime": {"feedback_heavy": 0.15, "learning_heavy": 0.8,
                              "search_heavy": 0.4}}})
    for config, cap, hits, more in cells:
        _cell(sweep, config, cap, hits, **more)
    return sweep


def test_a_cell_whose_own_val_fell_reports_no_gain_beside_another_cap(tmp_path):
    """The issue's sweep: at cap 12 every completion is cut (val 0 throughout); at cap 40
    val went 25/64 -> 23/64. The mean of the two starts (0.195) made the cap-40 cell
    "+0.164 (SE 0.078) vs its warm start, above it"; against its own start it fell."""
    sweep = _sweep(tmp_path, [("c12", 12, (0, 0, 0), {}), ("c40", 40, (25, 24, 23), {})])
    write_report(sweep, n_boot=50)
    board = (sweep / "leaderboard.md").read_text()
    assert "above it" not in board and "+0.164" not in board
    selection = json.loads((sweep / "selection.json").read_text())
    assert selection["pick"] is None  # nothing learned: no pick
    assert selection["pick_reason"].startswith("nothing learned at these budgets")
    assert selection["warm_starts"]["c40"]["accuracy"] == pytest.approx(25 / VAL)
    result = analyse_sweep(sweep, n_boot=50)
    assert result.starts["c12"]["accuracy"] == 0.0
    assert result.starts["c40"]["baseline"] != result.starts["c12"]["baseline"]
    assert {s["label"] for s in result.starts.values()} == {
        "tiny-s (max_new_tokens=12)", "tiny-s (max_new_tokens=40)"}
    learned = result.learning.configs.set_index("config")
    assert not learned.loc["c40", "learned"]
    assert "vs warm start 0.391" in learned.loc["c40", "evidence"]


def test_configs_of_one_start_share_it_and_the_gain_is_over_their_own(tmp_path):
    """Two learning rates at cap 40 share one baseline (the mean of their checkpoint 0);
    the cap-12 cell's start is no part of it."""
    sweep = _sweep(tmp_path, [("c12", 12, (0, 0, 0), {}), ("c40", 40, (25, 24, 23), {}),
                              ("c40-lr", 40, (25, 33, 40), {"lr": 1e-3})])
    result = analyse_sweep(sweep, n_boot=50)
    assert result.starts["c40"] == result.starts["c40-lr"]
    pick = result.pick
    assert pick["config_id"] == "c40-lr"
    start_se = binomial_se(25 / VAL, VAL)
    assert pick["gain"] == pytest.approx((40 - 25) / VAL)
    assert pick["gain_se"] == pytest.approx(math.hypot(pick["se"], start_se))
    learned = result.learning.configs.set_index("config")["learned"]
    assert learned.to_dict() == {"c12": False, "c40": False, "c40-lr": True}


def test_another_task_knob_is_another_baseline(tmp_path):
    """Cells of task.digits=1 and task.digits=2 at one cap never share a start."""
    sweep = _sweep(tmp_path, [("d1", 40, (25, 24, 23), {}),
                              ("d2", 40, (5, 6, 7), {"digits": 2})])
    starts = analyse_sweep(sweep, n_boot=50).starts
    assert (starts["d1"]["accuracy"], starts["d2"]["accuracy"]) == (25 / VAL, 5 / VAL)
    assert starts["d1"]["label"] == f"tiny-s (start {starts['d1']['baseline']})"


def test_frames_without_a_baseline_key_group_by_model():
    cells = pd.DataFrame({"cell_id": ["a", "b"], "config_id": ["A", "B"], "reward": "rule",
                          "status": "ok", "model": ["tiny-m", "tiny-m"]})
    evals = pd.DataFrame({"cell_id": ["a", "b"], "target": "val", "checkpoint": 0.0,
                          "accuracy": [0.2, 0.4], "n": 100, "flops": 0.0})
    starts = warm_starts(evals, cells, target="val")
    assert starts["A"] == starts["B"]
    assert starts["A"]["accuracy"] == pytest.approx(0.3) and starts["A"]["label"] == "tiny-m"
