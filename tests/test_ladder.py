"""The successive-halving ladder (race.core.rungs) and its aggregation helpers
(race.analysis.aggregate.increments, ladder_selection) on hand-made numbers and frames."""

import math

import pandas as pd
import pandas.testing as pdt
import pytest
from scipy import stats

from race.analysis.aggregate import increments
from race.analysis.select import ladder_selection, warm_starts
from race.core.rungs import (
    DEFAULT_RUNGS,
    final_ranking,
    geometric_rungs,
    ladder_cost,
    next_rung_bound,
    plan_ladder,
    promote,
    rank_last_rung,
    rung_counts,
    trend_per_log_flops,
)

LN2 = math.log(2.0)
G = 1e9  # FLOPs unit of the synthetic curves


def line(flops):
    """Accuracy on a straight line in ln(FLOPs): 0.1 + 0.05 ln(f / 1e9)."""
    return [0.1 + 0.05 * math.log(f / G) for f in flops]


# ---------------------------------------------------------------- plan


def test_rung_counts_reduce_by_four_but_keep_one_config_per_size():
    # 16 -> ceil(16/4) = 4 -> ceil(4/4) = 1, raised to 2 for two sizes
    assert rung_counts(16, 3, 4, n_sizes=2) == (16, 4, 2)
    # one size: 16 -> 4 -> 1
    assert rung_counts(16, 3, 4, n_sizes=1) == (16, 4, 1)


def test_rung_counts_never_exceed_the_rung_before():
    # 3 configs, 5 sizes: max(ceil(3/4), 5) = 5 is capped at the 3 of the rung before
    assert rung_counts(3, 3, 4, n_sizes=5) == (3, 3, 3)
    for n in range(1, 40):
        for sizes in (1, 2, 3, 7):
            counts = rung_counts(n, 4, 4, n_sizes=sizes)
            assert counts[0] == n
            assert all(after <= before for before, after in zip(counts, counts[1:]))


def test_ladder_cost_pays_each_rung_only_its_increment():
    rungs, counts = (1 / 64, 1 / 16, 1 / 4), (16, 4, 2)
    # 16 * 1/64 + 4 * (1/16 - 1/64) + 2 * (1/4 - 1/16) = 0.25 + 0.1875 + 0.375
    assert ladder_cost(rungs, counts, seeds=1) == pytest.approx(0.8125)
    # two seeds per config: every cell twice
    assert ladder_cost(rungs, counts, seeds=2) == pytest.approx(2 * 0.8125)


def test_plan_ladder_for_a_small_grid_fits_unscaled():
    plan = plan_ladder(16, n_sizes=2)  # the default: halving over F/48 .. F/6
    assert plan.counts == (16, 8, 4, 2)
    assert plan.rungs == pytest.approx((1 / 48, 1 / 24, 1 / 12, 1 / 6))
    # 16/48 + 8 * (1/24 - 1/48) + 4 * (1/12 - 1/24) + 2 * (1/6 - 1/12) = 40/48
    assert plan.cost_share == pytest.approx(40 / 48)
    assert plan.scaled == 1.0
    assert plan.seeds == 1
    # quartering, one size: 16 * 1/64 + 4 * 3/64 + 1 * 12/64 = (16 + 12 + 12) / 64
    single = plan_ladder(16, n_sizes=1, rungs=(1 / 64, 1 / 16, 1 / 4), reduction=4)
    assert single.counts == (16, 4, 1)
    assert single.cost_share == pytest.approx(0.625)
    # ... two sizes keep one each at the last rung: 2 * 12/64 instead of 1 * 12/64
    assert plan_ladder(16, n_sizes=2, rungs=(1 / 64, 1 / 16, 1 / 4), reduction=4
                       ).counts == (16, 4, 2)
    # two seeds with room for them (share 2): every cell twice, still unscaled
    seeded = plan_ladder(16, seeds=2, n_sizes=2, share=2.0)
    assert seeded.cost_share == pytest.approx(2 * 40 / 48)
    assert seeded.scaled == 1.0
    assert seeded.seeds == 2


def test_plan_ladder_shrinks_every_rung_of_a_large_grid_by_one_factor():
    plan = plan_ladder(192, n_sizes=2, share=1.0)
    assert plan.counts == (192, 96, 48, 24)
    # as given: 192/48 + 96/48 + 48 * 2/48 + 24 * 4/48 = 4 + 2 + 2 + 2 = 10 full runs
    assert plan.scaled == pytest.approx(1 / 10)
    assert plan.cost_share == pytest.approx(1.0)
    assert plan.rungs == pytest.approx(tuple(r / 10 for r in DEFAULT_RUNGS))
    # the shrunk rungs cost exactly the share
    assert ladder_cost(plan.rungs, plan.counts, plan.seeds) == pytest.approx(1.0)


def test_plan_ladder_with_fill_places_the_first_rung_as_late_as_the_share_allows():
    rungs = geometric_rungs(3, 4)
    assert rungs == pytest.approx((1 / 64, 1 / 16, 1 / 4))
    assert geometric_rungs(2, 2) == pytest.approx((1 / 4, 1 / 2))
    # 8 configs of 2 sizes cost 8/64 + 2 * 3/64 + 2 * 12/64 = 38/64 as given; a share of
    # 3/4 grows them by (48/64) / (38/64); without fill they stay as given
    plan = plan_ladder(8, n_sizes=2, rungs=rungs, reduction=4, share=0.75, fill=True)
    assert plan.scaled == pytest.approx(48 / 38)
    assert plan.cost_share == pytest.approx(0.75)
    assert plan_ladder(8, n_sizes=2, rungs=rungs, reduction=4, share=0.75).scaled == 1.0
    # a share below their cost shrinks them, fill or not
    assert plan_ladder(8, n_sizes=2, rungs=rungs, reduction=4, share=0.5,
                       fill=True).scaled == pytest.approx(32 / 38)
    grown = plan_ladder(8, n_sizes=2, rungs=rungs, reduction=4, share=4.0, fill=True)
    assert grown.rungs[-1] == pytest.approx(1.0)  # never past F
    assert plan_ladder(8, n_sizes=2, rungs=rungs, reduction=4, share=4.0).scaled == 1.0


# ---------------------------------------------------------------- trend


def test_trend_is_the_exact_slope_of_a_line_in_log_flops():
    flops = [G, 2 * G, 4 * G, 8 * G]
    slope, se = trend_per_log_flops(flops, line(flops), [100] * 4)
    # accuracy = 0.1 + 0.05 ln(f/1e9): slope 0.05 per unit of ln(FLOPs)
    assert slope == pytest.approx(0.05)
    assert se > 0


def test_trend_standard_error_of_a_flat_curve():
    flops = [G, G * math.e, G * math.e ** 2]
    slope, se = trend_per_log_flops(flops, [0.5] * 3, [100] * 3)
    # var = 0.5 * 0.5 / 100 = 0.0025 -> w = 400 each; x - mean = -1, 0, 1
    # sxx = 400 * (1 + 0 + 1) = 800 -> se = sqrt(1 / 800)
    assert slope == pytest.approx(0.0)
    assert se == pytest.approx(math.sqrt(1 / 800))


def test_trend_needs_two_checkpoints_with_flops():
    # the flops == 0 checkpoint is ignored: one point left, no trend
    assert trend_per_log_flops([0.0, G], [0.0, 0.5], [100, 100]) == (0.0, 0.0)
    assert trend_per_log_flops([G], [0.5], [100]) == (0.0, 0.0)
    assert trend_per_log_flops([], [], []) == (0.0, 0.0)


def test_trend_ignores_the_zero_flops_checkpoint():
    flops = [G, 2 * G, 4 * G]
    # a 0.9 at flops 0 would pull any fit down; it is dropped, the line stays exact
    slope, _ = trend_per_log_flops([0.0, *flops], [0.9, *line(flops)], [100] * 4)
    assert slope == pytest.approx(0.05)


def test_trend_uses_only_the_last_checkpoints():
    flops = [G * 2 ** i for i in range(5)]
    # the first two checkpoints are far off the line, the last three on it
    accuracy = [0.9, 0.9, *line(flops[2:])]
    slope, _ = trend_per_log_flops(flops, accuracy, [100] * 5, last=3)
    assert slope == pytest.approx(0.05)
    # with all five the off-line points enter and the slope turns negative
    slope_all, _ = trend_per_log_flops(flops, accuracy, [100] * 5, last=5)
    assert slope_all < 0


# ---------------------------------------------------------------- next-rung bound


def test_bound_of_a_single_checkpoint_is_its_binomial_interval():
    bound = next_rung_bound([G], [0.3], [200], 4 * G, z=1.5)
    # no trend: predicted = 0.3; se = sqrt(0.3 * 0.7 / 200) = sqrt(0.00105)
    se = math.sqrt(0.3 * 0.7 / 200)
    assert bound["score"] == 0.3
    assert bound["se"] == pytest.approx(se)
    assert bound["predicted"] == pytest.approx(0.3)
    assert bound["predicted_se"] == pytest.approx(se)
    assert bound["lcb"] == pytest.approx(0.3 - 1.5 * se)


def test_bound_of_a_flat_curve_keeps_the_last_accuracy():
    flops = [G, 2 * G, 4 * G]
    bound = next_rung_bound(flops, [0.3] * 3, [200] * 3, 16 * G, z=1.0,
                            promote_by="trend")
    # se^2 = 0.3 * 0.7 / 200; every checkpoint weighs w = 1 / se^2
    se = math.sqrt(0.3 * 0.7 / 200)
    # x - mean = -ln2, 0, ln2 -> sxx = 2 ln2^2 / se^2; slope_se = se / (sqrt(2) ln2)
    # distance = ln(16 / 4) = 2 ln2 -> slope_se * distance = sqrt(2) se
    # predicted_se = sqrt(se^2 + 2 se^2) = sqrt(3) se
    assert bound["predicted"] == pytest.approx(0.3)
    assert bound["score"] == 0.3
    assert bound["se"] == pytest.approx(se)
    assert bound["predicted_se"] == pytest.approx(math.sqrt(3) * se)
    assert bound["lcb"] == pytest.approx(0.3 - math.sqrt(3) * se)


def test_bound_of_a_rising_curve_predicts_above_the_last_point():
    flops = [G, 2 * G, 4 * G]
    accuracy = line(flops)
    bound = next_rung_bound(flops, accuracy, [500] * 3, 16 * G, promote_by="trend")
    # last = 0.1 + 0.05 ln4; one rung on (4x): + 0.05 ln4 -> 0.1 + 0.05 ln16
    assert bound["score"] == pytest.approx(accuracy[-1])
    assert bound["predicted"] == pytest.approx(0.1 + 0.05 * math.log(16))
    assert bound["predicted"] > accuracy[-1]


def test_predictions_are_clipped_to_the_unit_interval():
    flops = [G, 2 * G, 4 * G]
    # +0.245 per doubling (~0.35 per ln): two more doublings would pass 1.4
    up = next_rung_bound(flops, [0.5, 0.745, 0.99], [100] * 3, 16 * G, promote_by="trend")
    assert up["predicted"] == 1.0
    # -0.145 per doubling from 0.3: two more would reach about -0.28
    down = next_rung_bound(flops, [0.3, 0.155, 0.01], [100] * 3, 16 * G, promote_by="trend")
    assert down["predicted"] == 0.0


def test_promote_by_last_reads_the_rung_end_alone():
    flops = [G, 2 * G, 4 * G]
    accuracy = line(flops)  # rising: the trend would predict 0.1 + 0.05 ln16
    bound = next_rung_bound(flops, accuracy, [500] * 3, 16 * G, z=2.0, promote_by="last")
    p = accuracy[-1]  # 0.1 + 0.05 ln4
    se = math.sqrt(p * (1 - p) / 500)
    assert bound["score"] == pytest.approx(p)
    assert bound["predicted"] == pytest.approx(p)
    assert bound["predicted_se"] == pytest.approx(se)
    assert bound["lcb"] == pytest.approx(p - 2.0 * se)


def test_promote_by_last_and_trend_order_two_crossing_curves_differently():
    # rung ends at F/48, F/24: `steep` reads 0.40 -> 0.50, `level` 0.52 -> 0.52; the trend
    # carries `steep` to 2 * 0.50 - 0.40 = 0.60 at the next rung (4 G, one doubling on)
    flops = [G, 2 * G]
    steep = {m: next_rung_bound(flops, [0.40, 0.50], [10_000] * 2, 4 * G, z=0.0,
                                promote_by=m) for m in ("last", "trend")}
    level = {m: next_rung_bound(flops, [0.52, 0.52], [10_000] * 2, 4 * G, z=0.0,
                                promote_by=m) for m in ("last", "trend")}
    assert steep["trend"]["lcb"] == pytest.approx(0.60)
    assert steep["trend"]["lcb"] > level["trend"]["lcb"]
    assert steep["last"]["lcb"] == pytest.approx(0.50)
    assert steep["last"]["lcb"] < level["last"]["lcb"]


def test_promote_by_an_unknown_rule_names_the_rules():
    with pytest.raises(ValueError, match="promote_by='mean': one of last, trend"):
        next_rung_bound([G], [0.3], [200], 4 * G, promote_by="mean")


def test_zero_z_makes_the_bound_the_prediction():
    flops = [G, 2 * G, 4 * G]
    bound = next_rung_bound(flops, line(flops), [100] * 3, 16 * G, z=0.0)
    assert bound["lcb"] == bound["predicted"]


# ---------------------------------------------------------------- promotion


def cand(config, model, lcb, guard=None):
    return {"config": config, "model": model, "lcb": lcb, "guard": guard}


def by_config(ranked):
    return {c["config"]: c for c in ranked}


def test_promote_takes_the_top_lcb_of_one_size():
    candidates = [cand("c", "s", 0.7), cand("a", "s", 0.9), cand("d", "s", 0.6),
                  cand("b", "s", 0.8)]
    ranked = promote(candidates, 2)
    # ranked by lcb: a 0.9, b 0.8, c 0.7, d 0.6; the first two continue
    assert [c["config"] for c in ranked] == ["a", "b", "c", "d"]
    assert [c["promoted"] for c in ranked] == [True, True, False, False]
    assert [c["why"] for c in ranked] == ["top lcb", "top lcb", "below the cut", "below the cut"]


def test_promote_keeps_the_best_of_a_size_missing_from_the_top():
    candidates = [cand("a", "s", 0.9), cand("b", "s", 0.8), cand("c", "s", 0.7),
                  cand("d", "m", 0.6), cand("e", "m", 0.5), cand("g", "s", 0.99, "collapse")]
    ranked = promote(candidates, 2)
    seen = by_config(ranked)
    # top 2 by lcb: a, b (both size s); size m's best, d, replaces b (the lowest of s)
    assert seen["a"]["promoted"] and seen["a"]["why"] == "top lcb"
    assert seen["d"]["promoted"] and seen["d"]["why"] == "best of its size"
    assert not seen["b"]["promoted"] and seen["b"]["why"] == "below the cut"
    assert not seen["c"]["promoted"] and not seen["e"]["promoted"]
    # the count stays 2
    assert sum(c["promoted"] for c in ranked) == 2
    # the guarded g has the highest lcb but is never promoted, and ranks last
    assert not seen["g"]["promoted"]
    assert seen["g"]["why"].startswith("guard fired")
    assert seen["g"]["why"] == "guard fired: collapse"
    assert ranked[-1]["config"] == "g"
    # every candidate exactly once
    assert sorted(c["config"] for c in ranked) == sorted(c["config"] for c in candidates)


def test_promote_skips_a_size_with_only_guarded_configs():
    candidates = [cand("a", "s", 0.5), cand("b", "s", 0.4), cand("c", "s", 0.3),
                  cand("x", "l", 0.95, "reward hacking"), cand("y", "l", 0.9, "no learning")]
    ranked = promote(candidates, 2)
    seen = by_config(ranked)
    # size l has no unguarded config: the two continue from size s alone
    assert [c for c, v in seen.items() if v["promoted"]] == ["a", "b"]
    assert not any(v["promoted"] for v in ranked if v["model"] == "l")
    assert seen["x"]["why"] == "guard fired: reward hacking"
    assert seen["y"]["why"] == "guard fired: no learning"
    assert len(ranked) == len(candidates)
    assert sorted(c["config"] for c in ranked) == sorted(c["config"] for c in candidates)


def test_promote_gives_a_size_clearly_behind_the_leader_no_place():
    # size m's best (d) could reach 0.75 at most, below the leader a's lower bound 0.9
    candidates = [cand("a", "s", 0.9) | {"ucb": 0.98}, cand("b", "s", 0.8) | {"ucb": 0.9},
                  cand("d", "m", 0.6) | {"ucb": 0.75}, cand("e", "m", 0.5) | {"ucb": 0.7}]
    seen = by_config(promote(candidates, 2))
    assert [c for c, v in seen.items() if v["promoted"]] == ["a", "b"]
    assert seen["d"]["why"] == "below the cut, its size behind the leader"
    assert seen["b"]["why"] == "top lcb"
    # keep_sizes="all" keeps one of every size, as before
    kept = by_config(promote(candidates, 2, keep_sizes="all"))
    assert [c for c, v in kept.items() if v["promoted"]] == ["a", "d"]
    assert kept["d"]["why"] == "best of its size"


def test_promote_keeps_a_size_whose_upper_bound_reaches_the_leader():
    candidates = [cand("a", "s", 0.9) | {"ucb": 0.98}, cand("b", "s", 0.8) | {"ucb": 0.9},
                  cand("d", "m", 0.6) | {"ucb": 0.91}]
    seen = by_config(promote(candidates, 2))
    assert [c for c, v in seen.items() if v["promoted"]] == ["a", "d"]
    assert seen["d"]["why"] == "best of its size"
    with pytest.raises(ValueError, match="keep_sizes='some'"):
        promote(candidates, 2, keep_sizes="some")


# ---------------------------------------------------------------- increments


def rung_cells(continues_b="A"):
    return pd.DataFrame([
        {"cell_id": "A", "continues": "", "total_flops": 10.0, "flops_rollout": 4.0,
         "flops_learning": 6.0, "redone_flops": 1.0},
        {"cell_id": "B", "continues": continues_b, "total_flops": 40.0, "flops_rollout": 15.0,
         "flops_learning": 25.0, "redone_flops": 1.0},
    ])


def test_increments_subtract_the_continued_cell():
    cells = rung_cells()
    out = increments(cells).set_index("cell_id")
    # B: 40 - 10 = 30 total, 15 - 4 = 11 rollout, 25 - 6 = 19 learning, 1 - 1 = 0 redone
    assert out.loc["B", "total_flops"] == 30
    assert out.loc["B", "flops_rollout"] == 11
    assert out.loc["B", "flops_learning"] == 19
    assert out.loc["B", "redone_flops"] == 0
    # A continues nothing: as it was
    assert out.loc["A", "total_flops"] == 10
    assert out.loc["A", "flops_rollout"] == 4
    assert out.loc["A", "flops_learning"] == 6
    assert out.loc["A", "redone_flops"] == 1
    # the input is left as it was
    assert cells.loc[1, "total_flops"] == 40


def test_increments_without_continuations_change_nothing():
    flat = rung_cells(continues_b="")
    pdt.assert_frame_equal(increments(flat), rung_cells(continues_b=""))
    no_column = rung_cells().drop(columns="continues")
    pdt.assert_frame_equal(increments(no_column), rung_cells().drop(columns="continues"))


def scored(config, model, score, guard=None, promoted=None):
    out = {"config": config, "model": model, "score": score, "guard": guard}
    return out if promoted is None else out | {"promoted": promoted}


def test_the_last_rung_ranks_unguarded_by_score_then_guarded():
    ranked = rank_last_rung([scored("a", "s", 0.5, guard="drawdown"), scored("b", "s", 0.3),
                             scored("c", "m", 0.4), scored("d", "m", 0.9, guard="hacking")])
    assert [c["config"] for c in ranked] == ["c", "b", "d", "a"]


def test_final_ranking_reads_each_config_at_the_highest_rung_it_reached():
    rung1 = [scored("a", "s", 0.40, promoted=True), scored("b", "s", 0.45, promoted=False),
             scored("c", "s", 0.10, promoted=False)]
    rung2 = [scored("a", "s", 0.38)]
    ranked = final_ranking([rung1, rung2])
    # within one size the continued config comes first, though b scored higher lower down
    assert [c["config"] for c in ranked] == ["a", "b", "c"]
    assert [c["rung"] for c in ranked] == [2, 1, 1]
    assert ranked[0]["score"] == 0.38  # read where it last ran


def test_final_ranking_lets_a_size_whose_last_rung_config_was_guarded_compete_lower():
    # the ladder kept one config per size; size m's fell at the last rung (drawdown), and
    # size s's weak last-rung config must not win by default over m's stopped configs
    rung1 = [scored("m1", "m", 0.89, promoted=True), scored("m2", "m", 0.88, promoted=False),
             scored("m3", "m", 0.87, promoted=False), scored("s1", "s", 0.28, promoted=True),
             scored("s2", "s", 0.25, promoted=False)]
    rung2 = [scored("s1", "s", 0.29), scored("m1", "m", 0.80, guard="drawdown")]
    ranked = final_ranking([rung1, rung2])
    assert [c["config"] for c in ranked] == ["m2", "m3", "s1", "s2", "m1"]
    assert [c["rung"] for c in ranked] == [1, 1, 2, 1, 2]


def test_final_ranking_merges_sizes_by_score_at_the_same_rung():
    last = [scored("m1", "m", 0.60), scored("s1", "s", 0.70)]
    lower = [scored("m1", "m", 0.5, promoted=True), scored("s1", "s", 0.5, promoted=True),
             scored("m2", "m", 0.65, promoted=False), scored("s2", "s", 0.4, promoted=False)]
    ranked = final_ranking([lower, last])
    # s1 (0.70) beats m1 (0.60) at the last rung; each size's stopped config follows its
    # own last-rung config (m2 after m1 although m2 scored 0.65 at the rung below)
    assert [c["config"] for c in ranked] == ["s1", "m1", "m2", "s2"]


def test_final_ranking_compares_sizes_read_at_different_rungs_at_the_rung_both_reached():
    # m1 went on and fell at the last rung; its size's best is m2, stopped at rung 1 with
    # 0.50. s1 rose to 0.55 on 4x the compute, but scored 0.45 at rung 1, where m2 ran
    rung1 = [scored("m2", "m", 0.50, promoted=False), scored("m1", "m", 0.48, promoted=True),
             scored("s1", "s", 0.45, promoted=True), scored("s2", "s", 0.40, promoted=False)]
    rung2 = [scored("s1", "s", 0.55), scored("m1", "m", 0.30, guard="drawdown")]
    ranked = final_ranking([rung1, rung2])
    assert [c["config"] for c in ranked] == ["m2", "s1", "s2", "m1"]
    assert ranked[1]["score"] == 0.55  # still read at its own highest rung


def test_final_ranking_keeps_a_promoted_config_whose_cells_failed_above():
    rung1 = [scored("a", "s", 0.5, promoted=True), scored("b", "s", 0.4, promoted=False)]
    rung2 = []  # a's continued cells failed: nothing read at rung 2
    ranked = final_ranking([rung1, rung2])
    assert [(c["config"], c["rung"]) for c in ranked] == [("a", 1), ("b", 1)]


# ---------------------------------------------------------------- ladder selection


def ladder_cand(config, score, se, *, guard=None, promoted=None, model="tiny-s"):
    out = {"config": config, "cell_ids": [f"{config}-s0"], "model": model, "reward": "rule",
           "group_size": 4, "update_epochs": 1, "score": score, "se": se,
           "predicted": score, "predicted_se": se, "lcb": score - se, "guard": guard}
    if promoted is not None:
        out |= {"promoted": promoted,
                "why": "top lcb" if promoted else
                       f"guard fired: {guard}" if guard else "below the cut"}
    return out


def make_ladder():
    """Two rungs as sweep.run_ladder writes them: c1, c6, c2 continue to F/16."""
    full = 1.6e15
    rung1 = [ladder_cand("c1", 0.40, 0.05, promoted=True),
             ladder_cand("c6", 0.38, 0.05, promoted=True),
             ladder_cand("c2", 0.36, 0.05, promoted=True),
             ladder_cand("c3", 0.30, 0.04, promoted=False),
             ladder_cand("c4", 0.02, 0.02, promoted=False),
             ladder_cand("c5", 0.50, 0.05, guard="collapse", promoted=False)]
    # last rung: unguarded by score, then guarded (no promoted/why keys)
    rung2 = [ladder_cand("c6", 0.98, 0.05, model="tiny-m"), ladder_cand("c1", 0.60, 0.05),
             ladder_cand("c2", 0.70, 0.05, guard="reward hacking")]
    return {"rungs": [
        {"rung": 1, "fraction": 1 / 64, "budget_flops": full / 64,
         "cells": {f"c{i}-s0": f"c{i}" for i in range(1, 7)}, "candidates": rung1,
         "promote": 3},
        {"rung": 2, "fraction": 1 / 16, "budget_flops": full / 16,
         "cells": {"c1-s0": "c1", "c6-s0": "c6", "c2-s0": "c2"}, "candidates": rung2,
         "promote": 0}]}


CONFIGS = pd.DataFrame({"config_id": [f"c{i}" for i in range(1, 7)],
                        "regime": ["search-heavy", "learning-heavy", "balanced",
                                   "search-heavy", "balanced", "learning-heavy"]})


def test_ladder_selection_orders_last_rung_then_stopped_then_guarded():
    picks = ladder_selection(make_ladder(), CONFIGS, k=10, level=0.9)
    # last rung unguarded (c6, c1), stopped at rung 1 (c3, c4), guarded (c2, c5)
    assert [p["config_id"] for p in picks] == ["c6", "c1", "c3", "c4", "c2", "c5"]
    assert [p["why"] for p in picks] == ["ladder pick", "last rung",
                                         "stopped at rung 1 (F/64)", "stopped at rung 1 (F/64)",
                                         "guarded", "guarded"]
    seen = {p["config_id"]: p for p in picks}
    assert seen["c6"]["rank"] == 1
    assert seen["c6"]["rung"] == 2 and seen["c3"]["rung"] == 1
    assert seen["c6"]["basis_used"] == "observed at rung 2 (F/16)"
    assert seen["c3"]["basis_used"] == "observed at rung 1 (F/64)"
    assert seen["c2"]["guard"] == "reward hacking" and seen["c5"]["guard"] == "collapse"
    assert seen["c1"]["regime"] == "search-heavy"
    assert seen["c6"]["regime"] == "learning-heavy"
    assert seen["c6"]["model"] == "tiny-m"
    assert seen["c3"]["cell_ids"] == ["c3-s0"]


def test_ladder_selection_intervals_are_normal_at_the_level():
    picks = ladder_selection(make_ladder(), CONFIGS, k=10, level=0.9)
    seen = {p["config_id"]: p for p in picks}
    z = stats.norm.ppf(0.95)  # level 0.9, two-sided: z ~ 1.645
    # c1 at rung 2: 0.60 -+ 1.645 * 0.05 = 0.518 .. 0.682
    assert seen["c1"]["score"] == 0.60 and seen["c1"]["se"] == 0.05
    assert seen["c1"]["lo"] == pytest.approx(0.60 - z * 0.05)
    assert seen["c1"]["hi"] == pytest.approx(0.60 + z * 0.05)
    assert seen["c1"]["interval_width"] == pytest.approx(2 * z * 0.05)
    # c3 stopped at rung 1: its rung-1 score, 0.30 -+ 1.645 * 0.04
    assert seen["c3"]["lo"] == pytest.approx(0.30 - z * 0.04)
    assert seen["c3"]["hi"] == pytest.approx(0.30 + z * 0.04)
    # c6: 0.98 + 0.082 > 1 is clipped to 1; c4: 0.02 - 0.033 < 0 is clipped to 0
    assert seen["c6"]["hi"] == 1.0
    assert seen["c6"]["lo"] == pytest.approx(0.98 - z * 0.05)
    assert seen["c4"]["lo"] == 0.0
    assert seen["c4"]["hi"] == pytest.approx(0.02 + z * 0.02)


def test_ladder_selection_says_whether_each_pick_beats_its_warm_start():
    # each config's own warm start: tiny-s's at 0.30 (SE 0.01): c1 (0.60) is clearly above
    # it; tiny-m's at 0.99: c6 (0.98, SE 0.05) is within noise of it
    starts = {f"c{i}": {"accuracy": 0.30, "n": 2100, "se": 0.01} for i in range(1, 6)}
    starts["c6"] = {"accuracy": 0.99, "n": 1000, "se": 0.01}
    picks = {p["config_id"]: p for p in ladder_selection(make_ladder(), CONFIGS, k=10,
                                                         starts=starts)}
    assert picks["c1"]["gain"] == pytest.approx(0.30)
    assert picks["c1"]["gain_se"] == pytest.approx(math.hypot(0.05, 0.01))
    assert picks["c1"]["gain_text"].endswith("vs its warm start, above it")
    assert picks["c6"]["gain"] == pytest.approx(-0.01)
    assert picks["c6"]["gain_text"].endswith("no clear gain from post-training")
    assert "vs its warm start" in picks["c6"]["reason"]
    # a config that fell clearly below its warm start is said to be worse for post-training
    starts["c1"] = starts["c1"] | {"accuracy": 0.80}
    worse = ladder_selection(make_ladder(), CONFIGS, k=10, starts=starts)
    assert next(p for p in worse if p["config_id"] == "c1")["gain_text"].endswith(
        "below it: post-training made it worse")
    # without starts (a sweep whose pilots never scored checkpoint 0) nothing is claimed
    assert "gain" not in ladder_selection(make_ladder(), CONFIGS, k=1)[0]


def test_warm_starts_reads_checkpoint_0_on_the_most_problems_per_baseline():
    # a, b and old share a baseline (one warm start, the same conditions), c has its own
    cells = pd.DataFrame({"cell_id": ["a", "b", "c", "old"], "config_id": ["A", "B", "C", "O"],
                          "reward": "rule", "status": "ok", "baseline_key": ["m", "m", "s", "m"],
                          "model": ["tiny-m", "tiny-m", "tiny-s", "tiny-m"]})
    evals = pd.DataFrame({
        "cell_id": ["a", "a", "b", "c", "old", "a"], "target": "val",
        "checkpoint": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        "accuracy": [0.90, 0.95, 0.90, 0.30, 0.70, 0.5],
        "n": [1000, 1000, 1000, 1000, 128, 128], "flops": 0.0})
    evals.loc[5, "target"] = "test"  # another target is not read
    starts = warm_starts(evals, cells, target="val")
    # tiny-m's: a and b on 1,000 problems (the 128-problem row of an older cell is not
    # read), by config, the old cell's too
    assert starts["A"] == {"accuracy": 0.90, "n": 1000,
                           "se": pytest.approx(math.sqrt(0.9 * 0.1 / 1000)),
                           "model": "tiny-m", "baseline": "m", "label": "tiny-m"}
    assert starts["A"] == starts["B"] == starts["O"]
    assert starts["C"]["accuracy"] == 0.30
    assert warm_starts(evals, cells, target="ood") == {}


def test_ladder_selection_k_truncates():
    picks = ladder_selection(make_ladder(), CONFIGS, k=3)
    # the first three of c6, c1, c3, c4, c2, c5
    assert [p["config_id"] for p in picks] == ["c6", "c1", "c3"]
    assert [p["config_id"] for p in ladder_selection(make_ladder(), CONFIGS, k=1)] == ["c6"]


def test_guarded_candidates_are_ranked_by_their_bound_after_the_rest():
    from race.core.rungs import promote

    candidates = [{"config": "low", "model": "s", "lcb": 0.1, "guard": "drawdown"},
                  {"config": "high", "model": "s", "lcb": 0.8, "guard": "drawdown"},
                  {"config": "clean", "model": "s", "lcb": 0.05, "guard": None}]
    ranked = promote(candidates, 1)
    assert [c["config"] for c in ranked] == ["clean", "high", "low"]
    assert [c["promoted"] for c in ranked] == [True, False, False]


def test_ladder_selection_picks_a_stopped_config_when_its_size_fell_at_the_last_rung():
    ladder = make_ladder()
    # c6, the only tiny-m config at the last rung, falls; tiny-m's c7 was stopped at rung 1
    ladder["rungs"][0]["candidates"].append(ladder_cand("c7", 0.90, 0.02, model="tiny-m",
                                                        promoted=False))
    ladder["rungs"][1]["candidates"][0] = ladder_cand("c6", 0.80, 0.05, model="tiny-m",
                                                      guard="drawdown")
    picks = ladder_selection(ladder, CONFIGS, k=3)
    assert [p["config_id"] for p in picks] == ["c7", "c1", "c3"]
    assert picks[0]["why"] == "ladder pick"
    assert picks[0]["basis_used"] == "observed at rung 1 (F/64)"
    assert picks[1]["why"] == "last rung"
