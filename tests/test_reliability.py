"""Whether a sweep's pilots can rank its configs (race.core.reliability, the verdict in
race.analysis.reliability and the report's first lines), and the frozen calibration."""

import math

import numpy as np
import pandas as pd
import pytest

from race.analysis.forecast import PERSISTENCE, config_forecasts, predict, shift_at
from race.analysis.sweep_analysis import analyse_sweep
from race.core import reliability as rel
from race.report.write import write_report
from race.store import io as results

FULL = 4.8e12
RUNGS = (1 / 48, 1 / 24, 1 / 12)
PROBLEMS = 200


def test_problem_reliability_is_high_for_separated_configs_and_low_for_identical_ones():
    rng = np.random.default_rng(0)
    sizes = ["tiny-m"] * 16
    same = rng.random((16, PROBLEMS)) < 0.5  # one true accuracy: problem noise only
    apart = rng.random((16, PROBLEMS)) < np.linspace(0.2, 0.8, 16)[:, None]
    # on 40 draws of 16 identical configs: median 0.01, 95th percentile 0.44
    assert rel.problem_reliability(same, sizes) < rel.THRESHOLDS.cannot
    assert rel.problem_reliability(apart, sizes) > 0.9
    # within size: two sizes far apart, identical configs inside each, rank nothing
    two = np.concatenate([rng.random((4, PROBLEMS)) < 0.2, rng.random((4, PROBLEMS)) < 0.8])
    assert rel.problem_reliability(two, ["a"] * 4 + ["b"] * 4) < rel.THRESHOLDS.cannot
    assert math.isnan(rel.problem_reliability(same[:2], sizes[:2]))  # too few to compare
    # one config a size: the configs are compared across sizes
    assert rel.problem_reliability(apart[[0, 8, 15]], ["a", "b", "c"]) > 0.9


def test_spearman_brown_prophecy_and_the_verdicts_thresholds():
    # 0.5 on 200 problems: (0.84 / 0.16) / (0.5 / 0.5) = 5.25 times the problems
    assert rel.problems_needed(0.5, 200, 0.84) == 1050
    assert rel.problems_needed(0.9, 200, 0.84) == 200
    assert rel.problems_needed(0.0, 200, 0.84) is None
    t = rel.THRESHOLDS
    assert rel.verdict(t.can, t.agreement) == "can rank"
    assert rel.verdict(t.can - 1e-3, t.agreement) == "weakly"
    assert rel.verdict(t.cannot - 1e-3) == "cannot"
    assert rel.verdict(t.can - 1e-3, t.agreement - 1e-3) == "cannot"
    assert rel.verdict(0.95, t.agreement - 1e-3) == "weakly"
    assert rel.verdict(math.nan) == "weakly"


def test_the_frozen_thresholds_and_forecast_table_are_the_calibrated_ones():
    """Frozen before world 3 (bench/reliability.py, bench/prediction_coverage.py print the
    calibration on worlds 1-2): a change here is a change to a frozen value."""
    assert (rel.THRESHOLDS.can, rel.THRESHOLDS.cannot, rel.THRESHOLDS.agreement,
            rel.THRESHOLDS.target) == (0.84, 0.70, 0.30, 0.84)
    assert PERSISTENCE[0.166667] == (-0.0818, +0.0750, +0.1701)
    assert len(PERSISTENCE) == 12 and PERSISTENCE[1.0] == (0.0, 0.0, 0.0)


def test_persistence_interpolates_in_log_budget_and_clips():
    assert shift_at(1 / 6) == pytest.approx(PERSISTENCE[0.166667], abs=1e-4)
    mid = shift_at(math.sqrt(0.125 * 0.166667))  # halfway in log budget
    assert mid[1] == pytest.approx((PERSISTENCE[0.125][1] + PERSISTENCE[0.166667][1]) / 2)
    assert shift_at(1e-4) == PERSISTENCE[0.010417] and shift_at(2.0) == (0.0, 0.0, 0.0)
    assert predict(0.95, 0.0625)[2] == 1.0 and predict(0.02, 0.166667)[1] == 0.0
    reads = pd.DataFrame({"config_id": ["A", "A"], "flops": [FULL / 6] * 2,
                          "accuracy": [0.40, 0.50]})
    out = config_forecasts(reads, FULL)["A"]
    assert out["prediction"] == pytest.approx(0.45 + 0.0750)
    assert out["lo"] == pytest.approx(0.45 - 0.0818) and out["seeds"] == 2


def _cell(sweep, name, model, rung, vectors):
    """One rung's cell of config ``name`` with per-problem val scores ``vectors[r]`` at
    each rung end r <= ``rung`` (``vectors[0]``: the warm start)."""
    cell = f"{name}-r{rung}"
    folder = sweep / "cells" / cell
    budget = FULL * RUNGS[rung - 1]
    results.write_json(folder / "spec.json", {
        "cell_id": cell, "model": model, "config_id": name if rung == 1 else f"{name}@{rung}",
        "seed": 0, "prompts_per_step": 8, "group_size": 4, "max_new_tokens": 40,
        "update_epochs": 1, "minibatch_size": 0, "lr": 3e-4, "lora_rank": 16,
        "kl_coef": 0.0, "temperature": 1.0, "backend": "hf", "convention": "model",
        "budget_flops": budget, "select_target": "val", "eval_targets": ["val"],
        "score_start": rung == 1, "continues": f"{name}-r{rung - 1}" if rung > 1 else "",
        "task": {"name": "arith"}, "reward": {"name": "rule", "kind": "rule"}})

    def row(r):
        v = [int(x) for x in vectors[r]]
        return {"kind": "eval", "target": "val", "checkpoint": 0.0 if r == 0 else 1.0,
                "accuracy": sum(v) / len(v), "mean_reward": 0.0, "correct": v,
                "flops": {"model": {"rollout": 0.3 * FULL * RUNGS[r - 1] if r else 0.0,
                                    "learning": 0.7 * FULL * RUNGS[r - 1] if r else 0.0,
                                    "feedback": 0.0, "eval": 1e9}}}

    before = FULL * RUNGS[rung - 2] if rung > 1 else 0.0
    rows = [row(0)] + [{"kind": "step", "step": 4 * (rung - 1) + s,
                        "charged_flops": before + (budget - before) * s / 4,
                        "train_reward": 0.1 * s, "truncation_rate": 0.0,
                        "max_new_tokens": 40} for s in range(1, 5)]
    rows += [row(r) for r in range(1, rung + 1)]
    results.write_jsonl(folder / "metrics.jsonl", rows)
    acc = rows[-1]["accuracy"]
    results.write_json(folder / "summary.json", {
        "cell_id": cell, "status": "ok", "error": None, "budget_flops": budget,
        "convention": "model", "steps": 4 * rung, "total_flops": budget, "device": "cpu",
        "flops": {"rollout": 0.3 * budget, "learning": 0.7 * budget, "feedback": 0.0,
                  "eval": 1e9},
        "wall_s": {"load": 1.0, "rollout": 3.0, "learning": 7.0, "feedback": 0.0,
                   "eval": 2.0},
        "final_eval": {"val": {"accuracy": acc, "mean_reward": 0.0}},
        "initial_eval": {"val": {"accuracy": rows[0]["accuracy"], "mean_reward": 0.0}}})


def _ladder(root, truth: dict[str, list[float]], seed: int = 0):
    """A 3-rung ladder of tiny-m configs (8 -> 4 -> 2), each read on 200 problems drawn
    at its true accuracy per rung (``truth[name]``: the warm start's, then each rung's)."""
    rng = np.random.default_rng(seed)
    draws = {n: [rng.random(PROBLEMS) < p for p in ps] for n, ps in truth.items()}
    draws = {n: [draws[n][0] if r == 0 else v for r, v in enumerate(vs)]
             for n, vs in draws.items()}
    start = rng.random(PROBLEMS) < 0.30  # one warm start for the size
    for n in draws:
        draws[n][0] = start
    sweep = root / "arith-4.8e12-ladder"
    results.write_json(sweep / "sweep.json", {"budget_flops": FULL, "pilot_fraction": RUNGS[0],
                                              "task": "arith",
                                              "cells": [{"cell_id": f"{n}-r1", "refused": ""}
                                                        for n in truth]})
    alive, rungs = sorted(truth), []
    for number in (1, 2, 3):
        scores = {n: draws[n][number].mean() for n in alive}
        order = sorted(alive, key=lambda n: (-scores[n], n))
        keep = order[: len(order) // 2] if number < 3 else []
        candidates = []
        for n in order:
            _cell(sweep, n, "tiny-m", number, draws[n])
            se = math.sqrt(max(scores[n] * (1 - scores[n]), 1 / PROBLEMS) / PROBLEMS)
            candidates.append({"config": n, "cell_ids": [f"{n}-r{number}"], "model": "tiny-m",
                               "reward": "rule", "group_size": 4, "update_epochs": 1,
                               "score": scores[n], "se": se, "predicted": scores[n],
                               "predicted_se": se, "lcb": scores[n] - se,
                               "ucb": scores[n] + se, "guard": None,
                               "promoted": n in keep,
                               "why": "top lcb" if n in keep else "below the cut"})
        rungs.append({"rung": number, "fraction": RUNGS[number - 1],
                      "budget_flops": FULL * RUNGS[number - 1],
                      "cells": [f"{n}-r{number}" for n in order], "candidates": candidates})
        alive = keep
    results.write_json(sweep / "ladder.json", {
        "rungs": rungs, "planned_counts": [8, 4, 2], "cost_share": 8 / 48 + 4 / 48 + 2 / 24,
        "reduction": 2, "z": 1.0, "promote_by": "last", "keep_sizes": "close",
        "scaled": 1.0})
    return sweep


NAMES = [f"c{i}" for i in range(8)]


def test_configs_that_differ_less_than_problem_noise_cannot_rank(tmp_path):
    """Identical configs under different ids: the report says the pilots cannot rank,
    calls the pick provisional, names no clear lead and says what would help."""
    sweep = _ladder(tmp_path, {n: [0.30, 0.50, 0.50, 0.50] for n in NAMES})
    out = write_report(sweep, n_boot=20)
    lines = out["summary"].splitlines()
    assert lines[1].startswith("ranking reliability: the pilots cannot rank these configs")
    assert lines[2].startswith("the pick is provisional; reliable with: ")
    assert "selection.replicates=2" in lines[2]
    assert "pilot.select_examples=" in lines[2] or "more problems cannot help" in lines[2]
    assert lines[3].startswith("provisional pick: ")
    assert not any(" clear at 90%" in line and "not clear" not in line for line in lines)
    text = (sweep / "leaderboard.md").read_text()
    assert "**Ranking reliability: the pilots cannot rank" in text.splitlines()[2]
    assert "**Provisional pick: " in text and "**Pick: " not in text
    selection = results.read_json(sweep / "selection.json")
    assert selection["reliability"]["verdict"] == "cannot"
    assert selection["pick_provisional"] is True and selection["reliability"]["remedies"]
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert set(board["ranking_verdict"]) == {"cannot"}


def test_well_separated_configs_can_rank(tmp_path):
    spread = np.linspace(0.35, 0.85, 8)
    sweep = _ladder(tmp_path, {n: [0.30, p, p + 0.02, p + 0.04]
                               for n, p in zip(NAMES, spread)})
    result = analyse_sweep(sweep, n_boot=20)
    assert result.reliability["verdict"] == "can rank"
    assert result.reliability["reliability"] > 0.9 and result.reliability["agreement"] > 0.9
    assert result.reliability["remedies"] == []
    out = write_report(sweep, n_boot=20)
    lines = out["summary"].splitlines()
    assert lines[1].startswith("ranking reliability: the pilots can rank these configs")
    assert lines[2].startswith("pick: c7 ")
    selection = results.read_json(sweep / "selection.json")
    assert selection["reliability"]["verdict"] == "can rank"
    assert selection["pick_provisional"] is False
    # the pick's prediction at F is the persistence model's, read at its last rung
    assert "Predicted there: " in (sweep / "leaderboard.md").read_text()
    assert selection["predicted_at_full"]["c7"]["model"] == "calibrated persistence"


def test_the_calibration_script_reads_world_2_in_process():
    """bench/reliability.py as an entry point over world 2's committed bank: the frozen
    verdict calls most of its replicates ``cannot`` (13 of 18 at the freeze)."""
    from bench.science import reliability as calibration

    out = calibration.main(["--world", "2"])
    assert len(out["rows"][2]) == 18
    assert out["summary"]["cannot_share_w2"] == pytest.approx(13 / 18)
