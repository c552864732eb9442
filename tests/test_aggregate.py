"""Ranking, frontier, curve fits and validation selection (race.analysis.aggregate) on
hand-made frames."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from race.analysis.aggregate import (
    check_consistent,
    compare_predictions,
    frontier,
    rank_regimes,
    same_flop_sizes,
    split_status,
)
from race.analysis.curves import (
    EXTRAPOLATION_ERROR,
    config_predictions,
    fit_cells,
    fit_curve,
    full_budget_interval,
    sigmoid,
)
from race.analysis.select import select_for_validation

PILOT = 1e12  # pilot budget, FLOPs
FULL = 1.6e13  # full budget, FLOPs (pilot = 1/16)
CHECKPOINTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def cell(cell_id, config_id, final_test, *, seed=0, status="ok", model="tiny-m",
         params=1_000_000, reward="rule", regime="search-heavy", task="arith", full=FULL,
         final_ood=None, steps=10, group_size=4, prompts_per_step=2, update_epochs=1):
    """One pilot row with the loader's columns."""
    return {"cell_id": cell_id, "config_id": config_id, "status": status,
            "error": None if status == "ok" else "CUDA OOM", "model": model, "params": params,
            "reward": reward, "task": task, "seed": seed, "group_size": group_size,
            "prompts_per_step": prompts_per_step, "max_new_tokens": 32,
            "update_epochs": update_epochs, "lr": 1e-4, "lora_rank": 8, "budget_flops": PILOT,
            "full_budget_flops": full, "total_flops": 0.99 * PILOT, "flops_rollout": 0.6 * PILOT,
            "flops_learning": 0.39 * PILOT, "flops_feedback": 0.0, "flops_eval": 0.1 * PILOT,
            "steps": steps, "regime": regime, "final_test": final_test,
            "final_ood": final_test if final_ood is None else final_ood}


def make_cells(*rows):
    return pd.DataFrame(list(rows))


def evals_from(curves, cells, target="test"):
    """Long-format evals from {cell_id: [accuracy at each checkpoint]}."""
    config = dict(zip(cells["cell_id"], cells["config_id"]))
    rows = []
    for cell_id, accs in curves.items():
        for frac, acc in zip(CHECKPOINTS, accs):
            rows.append({"cell_id": cell_id, "config_id": config[cell_id], "target": target,
                         "checkpoint": frac, "flops": frac * PILOT, "accuracy": acc,
                         "mean_reward": acc})
    return pd.DataFrame(rows)


def sigmoid_curve(R0, A, C_mid, B):
    return [float(sigmoid(f * PILOT, R0, A, C_mid, B)) if f > 0 else R0 for f in CHECKPOINTS]


def examples_for(cell_id, correct, target="test"):
    return pd.DataFrame({"cell_id": cell_id, "target": target,
                         "example": range(len(correct)), "correct": correct})


NO_EXAMPLES = pd.DataFrame(columns=["cell_id", "target", "example", "correct"])


# ---------------------------------------------------------------- ranking


def test_rank_orders_configs_with_intervals_around_the_mean():
    cells = make_cells(
        cell("a0", "A", 0.50, seed=0), cell("a1", "A", 0.60, seed=1), cell("a2", "A", 0.55, seed=2),
        cell("b0", "B", 0.30, seed=0), cell("b1", "B", 0.40, seed=1),
        cell("c0", "C", 0.70, seed=0, regime="learning-heavy"),
        cell("c1", "C", 0.72, seed=1, regime="learning-heavy"),
    )
    configs, regimes = rank_regimes(cells, NO_EXAMPLES, target="test")
    assert list(configs["config_id"]) == ["C", "A", "B"]
    assert list(configs["rank"]) == [1, 2, 3]
    assert configs.set_index("config_id").loc["A", "mean"] == pytest.approx(0.55)
    assert list(configs["n_seeds"]) == [2, 3, 2]
    assert (configs["interval_source"] == "seeds").all()
    assert ((configs["lo"] <= configs["mean"]) & (configs["mean"] <= configs["hi"])).all()
    assert (configs["hi"] > configs["lo"]).all()  # seeds disagree: a real interval
    # knobs travel with the config
    assert {"model", "reward", "group_size", "update_epochs", "regime"} <= set(configs.columns)
    # regimes: best config of each (model, reward, regime)
    assert list(regimes["regime"]) == ["learning-heavy", "search-heavy"]
    assert list(regimes["config_id"]) == ["C", "A"]
    assert list(regimes["n_configs"]) == [1, 2]
    assert list(regimes["rank"]) == [1, 2]


def test_rank_is_deterministic_given_seed():
    cells = make_cells(*(cell(f"a{s}", "A", 0.4 + 0.05 * s, seed=s) for s in range(4)))
    first, _ = rank_regimes(cells, NO_EXAMPLES, target="test")
    again, _ = rank_regimes(cells.iloc[::-1], NO_EXAMPLES, target="test")
    pd.testing.assert_frame_equal(first, again)


def test_ties_share_the_min_rank():
    cells = make_cells(
        cell("a0", "A", 0.1 + 0.2, seed=0),  # 0.30000000000000004: a float-noise tie
        cell("b0", "B", 0.3, seed=0),
        cell("c0", "C", 0.9, seed=0),
        cell("d0", "D", 0.1, seed=0),
    )
    configs, _ = rank_regimes(cells, NO_EXAMPLES, target="test")
    assert list(configs["config_id"]) == ["C", "A", "B", "D"]
    assert list(configs["rank"]) == [1, 2, 2, 4]


def test_single_seed_bootstraps_over_prompts():
    cells = make_cells(cell("a0", "A", 0.5))
    examples = pd.concat([examples_for("a0", [1, 0] * 20),
                          examples_for("a0", [1] * 40, target="ood")])
    configs, _ = rank_regimes(cells, examples, target="test", level=0.9)
    row = configs.iloc[0]
    assert row["interval_source"] == "prompts"
    assert row["n_seeds"] == 1
    # 40 Bernoulli(0.5) flags: a 90 % interval of about +- 1.645 * 0.079
    assert row["lo"] < 0.5 < row["hi"]
    assert 0.15 < row["hi"] - row["lo"] < 0.4


def test_failed_cells_are_excluded():
    cells = make_cells(
        cell("a0", "A", 0.5, seed=0), cell("a1", "A", math.nan, seed=1, status="failed"),
        cell("b0", "B", math.nan, seed=0, status="failed"), cell("c0", "C", 0.2),
    )
    configs, _ = rank_regimes(cells, NO_EXAMPLES, target="test")
    assert list(configs["config_id"]) == ["A", "C"]
    assert configs.set_index("config_id").loc["A", "n_seeds"] == 1
    ok, failed = split_status(cells)
    assert list(ok["cell_id"]) == ["a0", "c0"]
    assert list(failed["cell_id"]) == ["a1", "b0"]


def test_rank_names_the_available_targets_on_a_typo():
    cells = make_cells(cell("a0", "A", 0.5))
    with pytest.raises(KeyError, match=r"available targets: \['ood', 'test'\]"):
        rank_regimes(cells, NO_EXAMPLES, target="tset")


# ---------------------------------------------------------------- frontier


def test_frontier_keeps_the_best_lower_bound_per_reward_with_its_interval():
    cells = make_cells(
        cell("r1", "R1", 0.3), cell("r2", "R2", 0.5),
        cell("p1", "P1", 0.6, reward="prm-tiny"), cell("p2", "P2", 0.65, reward="prm-tiny"),
        cell("x1", "X1", 0.99, status="failed"),  # failed: must not reach the frontier
    )
    evals = evals_from({"r1": [0.1, 0.4, 0.45, 0.35, 0.3],  # peaks then declines
                        "r2": [0.1, 0.2, 0.3, 0.4, 0.5],
                        "p1": [0.1, 0.3, 0.5, 0.55, 0.6],
                        "p2": [0.1, 0.1, 0.1, 0.1, 0.65],
                        "x1": [0.9, 0.99, 0.99, 0.99, 0.99]}, cells).assign(n=1000)
    evals.loc[(evals["cell_id"] == "p2") & (evals["checkpoint"] == 1.0), "n"] = 20
    front = frontier(evals, cells, target="test", level=0.9)
    assert list(front.columns) == ["reward", "flops", "accuracy", "lo", "hi", "cell_id",
                                   "config_id"]
    rule = front[front["reward"] == "rule"]
    assert list(rule["flops"]) == [f * PILOT for f in CHECKPOINTS]
    # on 1,000 problems a higher accuracy has the higher lower bound: r1 leads until r2's 0.5
    assert list(rule["accuracy"]) == [0.1, 0.4, 0.45, 0.45, 0.5]
    assert list(rule["cell_id"]) == ["r1", "r1", "r1", "r1", "r2"]
    z = 1.6448536269514722  # the 95th percentile of the normal: a 90% interval
    se = math.sqrt(0.5 * 0.5 / 1000)
    assert rule["lo"].iloc[-1] == pytest.approx(0.5 - z * se)
    assert rule["hi"].iloc[-1] == pytest.approx(0.5 + z * se)
    for _, group in front.groupby("reward"):
        assert np.all(np.diff(group["lo"].to_numpy()) >= 0)  # the bound never falls
        assert np.all(np.diff(group["flops"].to_numpy()) > 0)
    # p2's 0.65 rests on 20 problems: lower bound 0.65 - z sqrt(0.2275 / 20) = 0.475, below
    # p1's 0.6 on 1,000 (0.6 - z sqrt(0.24 / 1000) = 0.575): the frontier stays with p1
    last = front[front["reward"] == "prm-tiny"].iloc[-1]
    assert (last["cell_id"], last["accuracy"]) == ("p1", 0.6)
    assert "x1" not in set(front["cell_id"])


def test_same_flop_sizes_per_model():
    cells = make_cells(
        cell("s0", "S", 0.3, model="small", params=1_000, steps=20, group_size=8),
        cell("s1", "S2", 0.5, model="small", params=1_000, steps=10, group_size=8),
        cell("l0", "L", 0.6, model="large", params=9_000, steps=4, update_epochs=2),
        cell("x0", "X", 0.9, model="large", params=9_000, status="failed"),
    )
    sizes = same_flop_sizes(cells)
    assert list(sizes["model"]) == ["small", "large"]
    small, large = sizes.iloc[0], sizes.iloc[1]
    assert small["steps"] == 15 and small["rollouts"] == 15 * 2 * 8
    assert large["updates"] == 8 and large["n_cells"] == 1
    assert large["flops_per_step"] == pytest.approx(0.99 * PILOT / 4)
    assert small["best_test"] == 0.5 and large["best_test"] == 0.6
    assert "best_ood" in sizes.columns


# ---------------------------------------------------------------- curve fits


def test_sigmoid_matches_its_closed_form():
    assert sigmoid(3e11, 0.1, 0.6, 3e11, 1.2) == pytest.approx(0.35)  # midpoint: halfway
    assert sigmoid(0.0, 0.1, 0.6, 3e11, 1.2) == pytest.approx(0.1)
    assert sigmoid(6e11, 0.1, 0.6, 3e11, 2.0) == pytest.approx(0.1 + 0.5 / (1 + 0.25))


def test_fit_recovers_known_sigmoid_parameters():
    truth = {"R0": 0.1, "A": 0.6, "C_mid": 3e11, "B": 1.2}
    flops = np.array(CHECKPOINTS) * PILOT
    accuracy = sigmoid(flops, **truth)
    fit = fit_curve(flops, accuracy, predict_at=FULL)
    assert fit.method == "sigmoid" and fit.reason == ""
    assert fit.n_points == 4
    assert fit.params["A"] == pytest.approx(truth["A"], abs=1e-4)
    assert fit.params["B"] == pytest.approx(truth["B"], rel=1e-3)
    assert fit.params["C_mid"] == pytest.approx(truth["C_mid"], rel=1e-3)
    assert fit.prediction == pytest.approx(sigmoid(FULL, **truth), abs=1e-4)
    assert fit.r2 > 0.999
    assert fit.lo <= fit.prediction <= fit.hi


def test_fit_allows_a_decreasing_curve_and_is_deterministic():
    truth = {"R0": 0.5, "A": 0.2, "C_mid": 4e11, "B": 1.5}
    flops = np.array(CHECKPOINTS) * PILOT
    noise = np.array([0.0, 0.004, -0.003, 0.002, -0.004])
    accuracy = sigmoid(flops, **truth) + noise
    fit = fit_curve(flops, accuracy, predict_at=FULL)
    assert fit.method == "sigmoid"
    assert fit.params["A"] < fit.params["R0"] == 0.5
    assert fit.prediction == pytest.approx(sigmoid(FULL, **truth), abs=0.05)
    assert 0 <= fit.lo <= fit.prediction <= fit.hi <= 1
    assert fit_curve(flops, accuracy, predict_at=FULL) == fit


def test_fit_falls_back_with_two_points():
    fit = fit_curve([0, 0.5 * PILOT, PILOT], [0.1, 0.3, 0.4], predict_at=FULL)
    assert fit.method == "last" and fit.params is None
    assert "2 point" in fit.reason
    assert fit.prediction == 0.4
    assert fit.lo <= 0.35 and fit.hi >= 0.45  # at least +- 0.05
    assert math.isnan(fit.r2)


def test_fit_falls_back_on_a_flat_curve():
    flops = np.array(CHECKPOINTS) * PILOT
    fit = fit_curve(flops, [0.3] * 5, predict_at=FULL)
    assert fit.method == "last"
    assert "flat" in fit.reason
    assert (fit.lo, fit.prediction, fit.hi) == pytest.approx((0.25, 0.3, 0.35))


def test_fit_falls_back_without_r0():
    fit = fit_curve([0.25 * PILOT, 0.5 * PILOT, PILOT], [0.2, 0.3, 0.35], predict_at=FULL)
    assert fit.method == "last" and "R0" in fit.reason


def test_the_interval_at_the_full_budget_grows_with_the_decades_extrapolated():
    truth = {"R0": 0.1, "A": 0.6, "C_mid": 3e11, "B": 1.2}
    flops = np.array(CHECKPOINTS) * PILOT
    fit = fit_curve(flops, sigmoid(flops, **truth), predict_at=FULL)
    assert fit.last_flops == flops[-1]
    low, high = EXTRAPOLATION_ERROR  # accuracy per decade of FLOPs past the last point
    decades = math.log10(FULL / flops[-1])
    lo, hi = full_budget_interval(fit, FULL)
    assert (lo, hi) == pytest.approx((max(0.0, fit.prediction + low * decades),
                                      min(1.0, fit.prediction + high * decades)))
    assert lo <= fit.prediction <= hi
    far = fit_curve(flops, sigmoid(flops, **truth), predict_at=10 * FULL)
    lo, hi = full_budget_interval(far, 10 * FULL)  # a decade further: a decade wider
    assert (lo, hi) == pytest.approx((max(0.0, far.prediction + low * (decades + 1)),
                                      min(1.0, far.prediction + high * (decades + 1))))
    near = fit_curve(flops, sigmoid(flops, **truth), predict_at=flops[-1])
    assert full_budget_interval(near, flops[-1]) == pytest.approx((near.prediction,) * 2)


def test_a_fallback_keeps_its_own_interval_and_makes_no_config_prediction():
    fit = fit_curve([0, 0.5 * PILOT, PILOT], [0.1, 0.3, 0.4], predict_at=FULL)
    assert fit.last_flops == PILOT
    assert full_budget_interval(fit, FULL) == (fit.lo, fit.hi)
    fits = pd.DataFrame([
        {"config_id": "A", "method": "sigmoid", "prediction": 0.5, "full_lo": 0.4,
         "full_hi": 0.8},
        {"config_id": "A", "method": "sigmoid", "prediction": 0.7, "full_lo": 0.6,
         "full_hi": 1.0},
        {"config_id": "A", "method": "last", "prediction": 0.1, "full_lo": 0.0,
         "full_hi": 0.2},
        {"config_id": "B", "method": "last", "prediction": 0.3, "full_lo": 0.2,
         "full_hi": 0.4}])
    # the mean of the sigmoid seeds; a config whose every fit fell back predicts nothing
    assert config_predictions(fits) == {"A": {"prediction": pytest.approx(0.6),
                                              "lo": pytest.approx(0.5),
                                              "hi": pytest.approx(0.9), "fits": 2,
                                              "seeds": 3}}
    assert config_predictions(None) == {} == config_predictions(fits.iloc[:0])


def test_fit_cells_one_row_per_ok_cell():
    cells = make_cells(cell("a0", "A", 0.5), cell("b0", "B", 0.3),
                       cell("x0", "X", math.nan, status="failed"))
    evals = evals_from({"a0": sigmoid_curve(0.1, 0.6, 3e11, 1.2),
                        "b0": [0.1, 0.2, 0.3, 0.3, 0.3]}, cells)
    evals = evals[~((evals["cell_id"] == "b0") & (evals["checkpoint"].isin([0.25, 0.5])))]
    fits = fit_cells(evals, cells, target="test")
    assert list(fits["cell_id"]) == ["a0", "b0"]
    assert {"cell_id", "config_id", "method", "r2", "rmse", "prediction", "lo", "hi",
            "n_points", "reason", "observed", "predict_at"} <= set(fits.columns)
    a, b = fits.iloc[0], fits.iloc[1]
    assert a["method"] == "sigmoid" and a["predict_at"] == FULL and a["observed"] == 0.5
    assert b["method"] == "last" and b["n_points"] == 2 and b["prediction"] == 0.3


# ---------------------------------------------------------------- selection


def _sweep():
    """Three configs x two seeds; A and B share a regime, C has its own."""
    cells = make_cells(
        cell("a0", "A", 0.50, seed=0), cell("a1", "A", 0.52, seed=1),
        cell("b0", "B", 0.45, seed=0), cell("b1", "B", 0.47, seed=1),
        cell("c0", "C", 0.30, seed=0, reward="prm-tiny", regime="feedback-heavy"),
        cell("c1", "C", 0.32, seed=1, reward="prm-tiny", regime="feedback-heavy"),
    )
    curves = {"a0": sigmoid_curve(0.1, 0.55, 2e11, 1.5), "a1": sigmoid_curve(0.1, 0.57, 2e11, 1.5),
              "b0": sigmoid_curve(0.1, 0.6, 4e11, 1.0), "b1": sigmoid_curve(0.1, 0.62, 4e11, 1.0),
              "c0": sigmoid_curve(0.1, 0.5, 8e11, 1.0), "c1": sigmoid_curve(0.1, 0.52, 8e11, 1.0)}
    evals = evals_from(curves, cells)
    configs, _ = rank_regimes(cells, NO_EXAMPLES, target="test")
    return cells, evals, configs, fit_cells(evals, cells, target="test")


def test_selection_prefers_distinct_regimes():
    _, _, configs, fits = _sweep()
    assert (fits["method"] == "sigmoid").all()
    two = select_for_validation(configs, fits, k=2)
    regimes = {(s["model"], s["reward"], s["regime"]) for s in two}
    assert len(regimes) == 2  # one per regime even though B outscores C
    assert "C" in [s["config_id"] for s in two]
    three = select_for_validation(configs, fits, k=3)
    assert [s["config_id"] for s in three][:2] == [s["config_id"] for s in two]
    assert "fills a slot" in three[2]["reason"]
    for s in three:
        assert s["basis_used"] == "extrapolated"
        assert "extrapolated to 1.6e+13 FLOPs" in s["reason"]
        assert s["lo"] <= s["score"] <= s["hi"]
        assert s["interval_width"] == pytest.approx(s["hi"] - s["lo"])
        assert len(s["cell_ids"]) == 2
    assert "distinct regime tiny-m/rule/search-heavy" in two[0]["reason"]
    json.dumps(three, allow_nan=False)  # plain Python values only


def test_selection_scores_are_extrapolated_means():
    _, _, configs, fits = _sweep()
    selection = select_for_validation(configs, fits, k=1)
    best = selection[0]
    expected = fits[fits["config_id"] == best["config_id"]]["prediction"].mean()
    assert best["score"] == pytest.approx(expected)
    assert best["score"] == max(fits.groupby("config_id")["prediction"].mean())


def test_selection_uses_observed_mean_when_a_fit_falls_back():
    cells, evals, configs, _ = _sweep()
    evals = evals[~((evals["cell_id"] == "a1") & (evals["checkpoint"].isin([0.25, 0.5])))]
    fits = fit_cells(evals, cells, target="test")
    selection = {s["config_id"]: s for s in select_for_validation(configs, fits, k=3)}
    a = selection["A"]
    assert a["basis_used"] == "observed"
    assert a["score"] == pytest.approx(0.51)
    assert "observed pilot mean" in a["reason"] and "a1" in a["reason"]
    assert selection["B"]["basis_used"] == "extrapolated"
    observed = select_for_validation(configs, fits, k=3, basis="observed")
    assert all(s["basis_used"] == "observed" for s in observed)
    assert [s["config_id"] for s in observed] == ["A", "C", "B"]


def test_selection_does_not_trust_a_fit_whose_interval_is_too_wide():
    _, _, configs, fits = _sweep()
    wide = fits.copy()
    wide.loc[wide["config_id"] == "A", ["lo", "hi"]] = [0.0, 0.98]  # says nothing
    wide.loc[wide["config_id"] == "A", "prediction"] = 0.95  # but would rank first
    selection = {s["config_id"]: s for s in select_for_validation(configs, wide, k=3)}
    assert selection["A"]["basis_used"] == "observed"
    assert "fit too uncertain to extrapolate" in selection["A"]["reason"]
    assert selection["A"]["score"] == pytest.approx(0.51)  # the observed pilot mean
    assert selection["B"]["basis_used"] == "extrapolated"


# ---------------------------------------------------------------- validation


def _selection(scores, width=0.1):
    return [{"config_id": c, "score": s, "lo": s - width, "hi": s + width} for c, s in scores]


def test_compare_predictions_perfect_order():
    selection = _selection([("A", 0.6), ("B", 0.5), ("C", 0.4)])
    result = compare_predictions(selection, {"A": 0.62, "B": 0.51, "C": 0.2})
    assert result["kendall_tau"] == pytest.approx(1.0)
    assert result["spearman"] == pytest.approx(1.0)
    assert result["top1_regret"] == 0.0
    assert result["coverage"] == pytest.approx(2 / 3)  # C realized below its interval
    assert [r["inside"] for r in result["rows"]] == [True, True, False]


def test_compare_predictions_reversed_order():
    selection = _selection([("A", 0.6), ("B", 0.5), ("C", 0.4)])
    result = compare_predictions(selection, {"A": 0.3, "B": 0.4, "C": 0.5, "Z": 0.9})
    assert result["kendall_tau"] == pytest.approx(-1.0)
    assert result["spearman"] == pytest.approx(-1.0)
    assert result["top1_regret"] == pytest.approx(0.2)
    assert result["unmatched"] == ["Z"]


def test_compare_predictions_needs_three_for_correlations():
    frame = pd.DataFrame({"config_id": ["A", "B"], "mean": [0.6, 0.5],
                          "lo": [0.5, 0.4], "hi": [0.7, 0.6]})
    result = compare_predictions(frame, {"A": 0.4, "B": 0.55})
    assert result["kendall_tau"] is None and result["spearman"] is None
    assert ">= 3" in result["note"]
    assert result["top1_regret"] == pytest.approx(0.15)
    assert result["n"] == 2


def test_check_consistent_rejects_mixed_tasks_and_budgets():
    mixed = make_cells(cell("a0", "A", 0.5, task="arith"), cell("a1", "A", 0.5, task="arith"),
                       cell("b0", "B", 0.5, task="gsm8k"))
    # the message names the folders to remove: the smaller group's
    with pytest.raises(ValueError, match=r"^results mix task=arith \(2 cells\) and task=gsm8k "
                                         r"\(1 cell\): aggregate one sweep at a time, split "
                                         r"the folder by task, or remove cells/b0 to keep "
                                         r"task=arith$"):
        check_consistent(mixed)
    budgets = make_cells(cell("a0", "A", 0.5), cell("b0", "B", 0.5, full=3.2e15))
    with pytest.raises(ValueError, match=r"full_budget_flops=1.6e\+13 \(1 cell\) and "
                                         r"full_budget_flops=3.2e\+15 \(1 cell\)"):
        check_consistent(budgets)
    assert check_consistent(make_cells(cell("a0", "A", 0.5), cell("b0", "B", 0.4))) is None


def test_each_config_carries_its_standard_error():
    import math

    import pandas as pd

    from race.analysis import aggregate

    cells = pd.DataFrame([
        {"cell_id": "a0", "config_id": "a", "seed": 0, "status": "ok", "model": "tiny-m",
         "reward": "rule", "regime": "balanced", "final_test": 0.3},
        {"cell_id": "a1", "config_id": "a", "seed": 1, "status": "ok", "model": "tiny-m",
         "reward": "rule", "regime": "balanced", "final_test": 0.5},
        {"cell_id": "b0", "config_id": "b", "seed": 0, "status": "ok", "model": "tiny-s",
         "reward": "rule", "regime": "balanced", "final_test": 0.3}])
    examples = pd.DataFrame([{"cell_id": "b0", "target": "test", "example": i,
                              "correct": int(i < 30)} for i in range(100)])
    configs, _ = aggregate.rank_regimes(cells, examples, target="test")
    se = dict(zip(configs["config_id"], configs["se"]))
    assert se["a"] == pytest.approx(0.1)  # std(0.3, 0.5) / sqrt(2 seeds)
    assert se["b"] == pytest.approx(math.sqrt(0.3 * 0.7 / 100))  # one seed: binomial
