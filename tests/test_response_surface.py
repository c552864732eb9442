"""The update fraction rho (race.analysis.response) and the response surface of pilot score in rho,
with its leave-one-config-out regime check (race.analysis.regime_check), on hand-made ledgers and
synthetic surfaces whose optimum is known."""

import json
import math

import numpy as np
import pytest

from race.analysis.regime_check import regime_check
from race.analysis.response import (
    HIGH,
    LOW,
    argmax_rho,
    choose_model,
    fit_response_surface,
    fit_surfaces,
    phase_flops,
    planned_update_fraction,
    realized_update_fraction,
    rho_levels,
    update_fraction,
)
from race.core.specs import PhaseFlops
from race.run.grid import Cell
from race.store.pilots import row_flops
from race.store.records import PilotSummary, phase_flops_from

# ---------------------------------------------------------------- rho


def test_update_fraction_is_learning_over_charged_and_ignores_eval():
    # 6 / (3 + 6 + 1) = 0.6; eval (5e12) is counted but not charged
    ledger = PhaseFlops(rollout=3e12, learning=6e12, feedback=1e12, eval=5e12)
    assert update_fraction(ledger) == pytest.approx(0.6)
    assert update_fraction(phase_flops_from({"rollout": 3e12, "learning": 6e12,
                                             "feedback": 1e12})) == pytest.approx(0.6)
    assert math.isnan(update_fraction(PhaseFlops()))  # nothing charged: no rho
    with pytest.raises(ValueError, match="negative FLOPs"):
        update_fraction(PhaseFlops(rollout=-1.0, learning=1.0))
    with pytest.raises(ValueError, match=r"lacks the phase\(s\) \['feedback'\]"):
        phase_flops_from({"rollout": 1.0, "learning": 1.0})


def test_planned_rho_reads_the_cells_planned_steps_and_a_refused_cell_has_none():
    step = PhaseFlops(rollout=2.0e9, learning=5.5e9, feedback=0.5e9)
    cell = Cell(knobs=(), overrides=(), spec=None, steps=7, planned=step.scale(7), regime="")
    assert planned_update_fraction(cell) == pytest.approx(5.5 / 8.0)  # 0.6875 at any steps
    refused = Cell(knobs=(), overrides=(), spec=None, steps=0, planned=step.scale(0),
                   regime="", refused="one worst-case step costs more than its budget")
    assert math.isnan(planned_update_fraction(refused))


# A summary.json as race.pilot.state.pilot_summary writes it: ``flops`` in the charged
# convention, and every convention beside it. Executed FLOPs pad rollouts (x1.5) and
# learning (x1.2).
SUMMARY = PilotSummary.from_json({
    "status": "ok", "convention": "model", "total_flops": 8.0e9,
    "flops": {"rollout": 2.0e9, "learning": 5.0e9, "feedback": 1.0e9, "eval": 9.0e9},
    "flops_model": {"rollout": 2.0e9, "learning": 5.0e9, "feedback": 1.0e9, "eval": 9.0e9},
    "flops_executed": {"rollout": 3.0e9, "learning": 6.0e9, "feedback": 1.0e9, "eval": 1e10},
    "flops_measured": None,
})


def test_realized_rho_from_a_summary_per_convention():
    assert realized_update_fraction(SUMMARY) == pytest.approx(5 / 8)  # charged (model)
    assert realized_update_fraction(SUMMARY, "model") == pytest.approx(5 / 8)
    assert realized_update_fraction(SUMMARY, "executed") == pytest.approx(6 / 10)
    assert phase_flops(SUMMARY).eval == 9.0e9
    with pytest.raises(ValueError, match="no flops_measured"):
        realized_update_fraction(SUMMARY, "measured")


def test_rho_from_a_metrics_row_and_a_pilots_row():
    # a metrics row holds every convention: the caller names one, then reads it as phases
    row = {"kind": "step", "step": 3, "charged_flops": 4.0e9,
           "flops": {"model": {"rollout": 1.0e9, "learning": 2.5e9, "feedback": 0.5e9,
                               "eval": 0.0},
                     "executed": {"rollout": 1.5e9, "learning": 3.0e9, "feedback": 0.5e9,
                                  "eval": 0.0}}}
    assert update_fraction(phase_flops_from(row["flops"]["model"])) == pytest.approx(2.5 / 4)
    assert update_fraction(phase_flops_from(row["flops"]["executed"])) == \
        pytest.approx(3.0 / 5.0)
    pilots_row = {"cell_id": "abc", "convention": "model", "flops_rollout": 2.0e9,
                  "flops_learning": 5.0e9, "flops_feedback": 1.0e9, "flops_eval": 9.0e9}
    assert update_fraction(row_flops(pilots_row)) == pytest.approx(5 / 8)
    failed = {"cell_id": "abd", "flops_rollout": math.nan, "flops_learning": math.nan,
              "flops_feedback": math.nan}  # a cell that never started, in a DataFrame
    assert math.isnan(update_fraction(row_flops(failed)))


def test_planned_and_realized_rho_of_one_cell():
    # planned: 4 steps at the nominal 40 completion tokens; the pilot's completions ended
    # earlier, shrinking rollout (decode) more than learning (which also re-reads prompts)
    cell = Cell((), (), None, 4, PhaseFlops(rollout=4.0e9, learning=12.0e9), "")
    summary = PilotSummary.from_json({
        "status": "ok", "convention": "model",
        "flops": {"rollout": 1.8e9, "learning": 7.2e9, "feedback": 0.0, "eval": 3e9}})
    assert planned_update_fraction(cell) == pytest.approx(12 / 16)  # 0.75
    assert realized_update_fraction(summary) == pytest.approx(7.2 / 9.0)  # 0.80


# ---------------------------------------------------------------- surfaces

RHO = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
NAMES = [f"c{i}" for i in range(len(RHO))]
NOISE = [0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.001]  # seeds: +noise and -noise


def two_seeds(curve, noise=NOISE):
    """Seven configs on ``RHO``, two seeds each: curve(rho) + e and curve(rho) - e."""
    rho = RHO + RHO
    score = [curve(r) + e for r, e in zip(RHO, noise)] + [curve(r) - e
                                                          for r, e in zip(RHO, noise)]
    return rho, score, NAMES + NAMES


def peak(vertex):
    return lambda r: 0.5 - 2.0 * (r - vertex) ** 2


def test_interior_optimum_picks_quadratic_and_recommends_its_regime_with_an_interval():
    # the paper's rule-reward optimum, 0.72, inside 0.3-0.9 (threshold: midpoint 0.6)
    fit = fit_response_surface(*two_seeds(peak(0.72)), boot=300)
    assert fit.model == "quadratic"
    assert fit.loco["quadratic"] < fit.loco["log-linear"] < fit.loco["constant"]
    # seeds' noise cancels in the config means, so the fit is the parabola itself
    a, b, c = fit.coefficients
    assert (a, b, c) == pytest.approx((0.5 - 2 * 0.72 ** 2, 4 * 0.72, -2.0), abs=1e-9)
    assert fit.rho_opt == pytest.approx(0.72, abs=1e-9) and fit.score_opt == \
        pytest.approx(0.5)
    assert fit.edge == "" and fit.rho_range == (0.3, 0.9) and fit.threshold == 0.6
    lo, hi = fit.interval
    assert lo <= fit.rho_opt <= hi and 0.6 < lo and hi - lo < 0.05
    assert fit.stable and fit.regime == HIGH
    assert fit.line() == (
        f"high-update regime: rho* = 0.72 (90% interval {lo:.2f}-{hi:.2f}), above the "
        f"threshold 0.60 (the grid's rho midpoint); quadratic fit chosen by "
        f"leave-one-config-out error, 7 configs, rho 0.30-0.90")


def test_a_low_update_optimum_and_a_given_threshold():
    # the paper's PRM optimum, 0.45, below the midpoint 0.6
    fit = fit_response_surface(*two_seeds(peak(0.45)), boot=300)
    assert fit.regime == LOW and fit.rho_opt == pytest.approx(0.45, abs=1e-9)
    # against a fixed threshold of 0.4 the same optimum is high-update
    fixed = fit_response_surface(*two_seeds(peak(0.45)), boot=300, threshold=0.4)
    assert fixed.regime == HIGH and fixed.threshold_rule == "given"
    assert "(given)" in fixed.line()


def test_boundary_optimum_is_flagged_on_the_edge_and_falls_back_to_the_best_cell():
    # score rises all the way to the largest rho: the optimum may lie beyond the grid
    fit = fit_response_surface(*two_seeds(lambda r: 0.2 + 0.3 * r), boot=300)
    assert fit.rho_opt == 0.9 and fit.edge == "high"
    assert fit.reasons == ("edge",) and not fit.stable and fit.regime is None
    assert fit.best_config == "c6" and fit.best_score == pytest.approx(0.2 + 0.3 * 0.9)
    # what the report prints: the fallback, then why
    assert fit.line() == (
        "no stable fit: the best pilot cell is c6 (rho 0.90, pilot score 0.470; its "
        "optimum sits on the grid's high edge (rho 0.90 of 0.30-0.90): the best rho may "
        f"lie beyond the grid; {fit.model} fit chosen by leave-one-config-out error, "
        "7 configs, rho 0.30-0.90)")


def test_a_vertex_outside_the_grid_or_in_its_outermost_level_is_on_the_edge():
    fit = fit_response_surface(*two_seeds(peak(1.1)), boot=100)  # concave, peak beyond
    assert fit.model == "quadratic" and fit.rho_opt == 0.9 and fit.edge == "high"
    near = fit_response_surface(*two_seeds(peak(0.31)), boot=100)  # within RHO_TOL of 0.3
    assert near.model == "quadratic" and near.edge == "low" and "edge" in near.reasons


def test_flat_surface_picks_constant_and_falls_back_to_the_best_pilot_cell():
    fit = fit_response_surface(RHO + RHO, [0.4 + e for e in NOISE]
                               + [0.4 + e / 2 for e in NOISE], NAMES + NAMES)
    assert fit.model == "constant" and fit.rho_opt is None and fit.interval is None
    assert fit.coefficients == pytest.approx((0.4 + 0.75 * np.mean(NOISE),))
    assert fit.reasons == ("constant",)
    # c0 has the largest noise (+0.004, +0.002): mean 0.403
    assert fit.line() == (
        "no stable fit: the best pilot cell is c0 (rho 0.30, pilot score 0.403; the "
        "constant model fits best: the score does not move with rho; constant fit chosen "
        "by leave-one-config-out error, 7 configs, rho 0.30-0.90)")


def test_loco_error_of_the_constant_model_by_hand():
    # one point per config: the held-out prediction is the others' mean, so
    # y_i - mean_{-i} = n (y_i - mean) / (n - 1)
    score = [0.31, 0.35, 0.28, 0.40, 0.33]
    fit = fit_response_surface([0.2, 0.35, 0.5, 0.65, 0.8], score, list("abcde"), boot=50)
    n, y = len(score), np.asarray(score)
    assert fit.loco["constant"] == pytest.approx((n / (n - 1)) ** 2 * np.mean((y - y.mean())
                                                                               ** 2))


def test_log_linear_data_picks_log_linear():
    rho = list(np.geomspace(0.05, 0.9, 7))
    score = [0.45 + 0.05 * math.log(r) + e for r, e in zip(rho, NOISE)]
    score += [0.45 + 0.05 * math.log(r) - e for r, e in zip(rho, NOISE)]
    fit = fit_response_surface(rho + rho, score, NAMES + NAMES, boot=100)
    assert fit.model == "log-linear"
    assert fit.coefficients == pytest.approx((0.45, 0.05), abs=1e-9)  # noise cancels
    assert fit.loco["log-linear"] < fit.loco["quadratic"] < fit.loco["constant"]
    assert fit.edge == "high"  # a log-linear fit peaks at an end, always


def test_choice_breaks_ties_toward_the_simpler_model():
    assert choose_model({"constant": 1.0, "log-linear": 1.0, "quadratic": 0.5}) == "quadratic"
    assert choose_model({"constant": 0.5, "log-linear": 0.5, "quadratic": 0.5}) == "constant"
    assert choose_model({"constant": math.inf, "log-linear": math.inf,
                         "quadratic": math.inf}) == "constant"
    assert argmax_rho("quadratic", (0.0, 1.44, -1.0), 0.3, 0.9) == pytest.approx(0.72)
    assert argmax_rho("quadratic", (0.0, -1.0, 1.0), 0.3, 0.9) == 0.9  # convex: an end


def test_an_interval_across_the_threshold_is_unstable():
    # the optimum sits on the midpoint 0.6 itself: its interval spans both regimes
    big = [0.02, -0.015, 0.01, -0.02, 0.015, -0.01, 0.005]
    fit = fit_response_surface(*two_seeds(peak(0.6), big), boot=300)
    lo, hi = fit.interval
    assert fit.model == "quadratic" and lo <= 0.6 < hi
    assert fit.reasons == ("wide",) and fit.regime is None
    assert f"its optimum's interval {lo:.2f}-{hi:.2f} spans both regimes" in fit.line()


def test_the_default_grids_two_rho_levels_cannot_carry_a_surface():
    # race plan's default grid (tiny-m, rule): G moves rho by < 0.01, mu by 0.16
    fit = fit_response_surface([0.677, 0.677, 0.839, 0.842], [0.30, 0.31, 0.33, 0.325],
                               ["G4 mu1", "G8 mu1", "G4 mu2", "G8 mu2"], boot=100)
    assert rho_levels([0.677, 0.677, 0.839, 0.842]) == 2 and fit.n_rho == 2
    assert fit.loco["quadratic"] == math.inf  # no fold keeps 3 levels
    assert fit.reasons[0] == "few-rho" and fit.regime is None
    assert fit.line().startswith("no stable fit: the best pilot cell is G4 mu2 (rho 0.84, "
                                 "pilot score 0.330; 2 level(s) of rho more than 0.02 apart")


def test_a_surface_no_moving_model_can_fit_is_few_rho_not_constant():
    # two configs: leaving one out leaves one level, so only the constant could be fitted;
    # it was not chosen over anything, so its reason would mislead
    fit = fit_response_surface([0.68, 0.84], [0.30, 0.35], ["G4 mu1", "G4 mu2"], boot=50)
    assert fit.model == "constant" and fit.loco["log-linear"] == math.inf
    assert fit.reasons == ("few-rho",)
    assert fit.recommendation() == ("no stable fit (few-rho): the best pilot cell is G4 mu2 "
                                    "(rho 0.84, pilot score 0.350)")


def test_the_recommendation_is_the_regime_with_its_interval_or_the_fallback_with_codes():
    fit = fit_response_surface(*two_seeds(peak(0.72)), boot=300)
    lo, hi = fit.interval
    assert fit.recommendation() == (f"high-update (rho* 0.72, 90% interval {lo:.2f}-{hi:.2f}; "
                                    f"threshold 0.60)")
    edge = fit_response_surface(*two_seeds(peak(1.1)), boot=100)
    assert edge.recommendation() == (f"no stable fit (edge): the best pilot cell is c6 (rho "
                                     f"0.90, pilot score {edge.best_score:.3f})")
    assert edge.to_dict()["recommendation"] == edge.recommendation()


def test_binomial_weights_make_the_constant_a_weighted_mean():
    score, n = [0.2, 0.5, 0.3], [1000, 100, 400]
    fit = fit_response_surface([0.3, 0.6, 0.9], score, list("abc"), n_problems=n, boot=50)
    w = [k / (p * (1 - p)) for p, k in zip(score, n)]  # 1 / SE^2
    assert fit.model == "constant"
    assert fit.coefficients[0] == pytest.approx(np.dot(w, score) / sum(w))


def test_bad_points_are_refused_with_their_config():
    with pytest.raises(ValueError, match=r"config\(s\) \['b'\]: rho must lie in \[0, 1\]"):
        fit_response_surface([0.3, float("nan")], [0.2, 0.3], ["a", "b"])
    with pytest.raises(ValueError, match="2, 1 and 2 points"):
        fit_response_surface([0.3, 0.4], [0.2], ["a", "b"])


def test_surfaces_per_group_and_json_ready():
    points = []
    for reward, vertex in (("rule", 0.72), ("prm", 0.45)):
        rho, score, configs = two_seeds(peak(vertex))
        points += [{"model": "tiny-m", "reward": reward, "target": "val", "config": c,
                    "rho": r, "score": s, "n": 1000} for r, s, c in zip(rho, score, configs)]
    surfaces = fit_surfaces(points, boot=100)
    assert list(surfaces) == [("tiny-m", "prm", "val"), ("tiny-m", "rule", "val")]
    assert surfaces[("tiny-m", "rule", "val")].regime == HIGH
    assert surfaces[("tiny-m", "prm", "val")].regime == LOW
    record = json.loads(json.dumps(surfaces[("tiny-m", "rule", "val")].to_dict(),
                                   allow_nan=False))
    assert record["regime"] == HIGH and record["stable"] and record["line"].startswith(HIGH)


# ---------------------------------------------------------------- the bank check

BANK_RHO = dict(zip(NAMES, RHO))


def test_regime_check_counts_folds_whose_regime_holds_the_best_config():
    pilot = {c: [peak(0.72)(r) + e, peak(0.72)(r) - e] for c, r, e in zip(NAMES, RHO, NOISE)}
    truth = {c: peak(0.78)(r) for c, r in BANK_RHO.items()}  # best at F: c5, rho 0.8
    check = regime_check(BANK_RHO, pilot, truth, boot=100)
    assert check.best == "c5" and check.best_rho == 0.8
    assert [f.regime for f in check.folds] == [HIGH] * 7 and check.full_hit
    assert check.rate == 1.0 and check.regime_rate == 1.0 and math.isnan(check.fallback_rate)
    # thresholds: 0.65 without c0 (range 0.4-0.9), 0.55 without c6, else 0.6. Configs above
    # them: 3 of 6 in five folds; 2 of 6 leaving out c4 or c5 (0.6 is not above 0.6)
    assert [f.threshold for f in check.folds] == pytest.approx([0.65] + [0.6] * 5 + [0.55])
    assert check.mean_share == pytest.approx((5 * 3 / 6 + 2 * 2 / 6) / 7)
    # the truth's best in the low half: every regime misses
    truth_low = {c: peak(0.4)(r) for c, r in BANK_RHO.items()}
    missed = regime_check(BANK_RHO, pilot, truth_low, boot=100)
    assert missed.best == "c1" and missed.rate == 0.0 and not missed.full_hit


def test_regime_check_on_a_flat_bank_scores_the_fallback_pick():
    pilot = {c: [0.4 + e, 0.4 + e / 2] for c, e in zip(NAMES, NOISE)}  # best pilot: c0
    truth = {c: 0.5 - abs(r - 0.3) for c, r in BANK_RHO.items()}  # best at F: c0 too
    check = regime_check(BANK_RHO, pilot, truth, boot=50)
    assert check.n_regime == 0 and [f.pick for f in check.folds][:2] == ["c4", "c0"]
    # every fold but the one leaving out c0 picks c0
    assert check.rate == pytest.approx(6 / 7) and check.fallback_rate == pytest.approx(6 / 7)
    assert check.mean_share == pytest.approx(1 / 6) and check.full_hit
    assert check.line().startswith("regime check: the recommendation holds the bank's best "
                                   "config at F (c0, rho 0.30) in 6 of 7 leave-one-config-out")
    json.dumps(check.to_dict(), allow_nan=False)


def test_regime_check_names_configs_missing_from_an_input():
    with pytest.raises(ValueError, match=r"missing from one of them: \['c9'\]"):
        regime_check({"c0": 0.3, "c9": 0.5}, {"c0": 0.4}, {"c0": 0.5, "c9": 0.6})
