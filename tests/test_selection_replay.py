"""bench/selection_replay.py on a synthetic curve bank whose answer is known: a config
that leads at F/16 and collapses after it (visible by F/8), a steady one that is best at
F, a slow one. The flat 1/16 pilots pick the early leader; the guarded ladder does not.
The peers (bench/science/peers.py: Syne Tune's and Optuna's schedulers, top-k) replay the same
curves through the bank's Syne Tune blackbox (bench/science/blackbox.py). The replay is
leave-one-seed-out (a bank with an outlier seed: the truth when reading it is the other
seeds'), its SEs a two-way cluster bootstrap over read seeds and grids."""

import gzip
import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.science import blackbox, peers  # noqa: E402
from bench.science import selection as replay  # noqa: E402

BENCH = Path(__file__).parents[1] / "bench"

FULL = 1e12
CHECKPOINTS = sorted({k / 256 for k in range(1, 4)} | {1 / 64, 3 / 64}
                     | {k / 32 for k in range(1, 33)})


def steady(f):  # 0.30 at the start, +0.05 per doubling of compute from F/256: 0.70 at F
    return 0.30 if f == 0 else 0.30 + 0.05 * math.log2(f * 256)


def leader_then_collapse(f):  # 0.60 at F/16, then falls: 0.10 from F/4 on
    if f <= 1 / 16:
        return 0.30 + 0.3 * (f * 16)
    return max(0.10, 0.60 - 0.5 * (f - 1 / 16) / (3 / 16))


def slow(f):  # 0.30 -> 0.45
    return 0.30 + 0.15 * f


def cell(config, model, seed, curve, offset, update_epochs=1):
    evals = [{"checkpoint": f, "target": "val", "flops": f * FULL, "eval_flops": 1e6 * (i + 1),
              "accuracy": min(1.0, max(0.0, curve(f) + offset)), "n": 1000,
              "mean_reward": curve(f) + offset}
             for i, f in enumerate([0.0, *CHECKPOINTS])]
    steps = [{"step": i + 1, "flops": f * FULL, "entropy": 1.0, "truncation_rate": 0.0,
              "max_new_tokens": 40, "train_reward": 0.5} for i, f in enumerate(CHECKPOINTS)]
    return {"cell_id": f"{config}-{seed}", "config": config, "model": model, "reward": "rule",
            "group_size": 8, "update_epochs": update_epochs, "seed": seed, "budget_flops": FULL,
            "evals": evals, "steps": steps}


CURVES = {"steady": (steady, 1), "collapse": (leader_then_collapse, 2), "slow": (slow, 4)}


def every_draw(configs):
    """Every combination of the configs' seeds (config id -> seed read), in product order:
    replicates that read a different seed per config, for what reads draws alone."""
    ids = sorted(configs)
    return [dict(zip(ids, combo))
            for combo in itertools.product(*(sorted(configs[c]["curves"]) for c in ids))]


def write_bank(path, cells):
    with gzip.open(path, "wt") as f:
        json.dump({"command": "race sweep ...", "git_sha": "0" * 40, "versions": {},
                   "budget_flops": FULL, "started": 0, "finished": 0, "cells": cells}, f)
    return path


@pytest.fixture()
def bank(tmp_path):
    cells = []
    for model, shift in (("tiny-s", 0.0), ("tiny-m", 0.05)):
        for name, (curve, mu) in CURVES.items():  # the knob that tells them apart: mu
            for seed, noise in ((0, 0.004), (1, -0.004)):
                cells.append(cell(f"{model}-{name}", model, seed, curve, shift + noise, mu))
    return write_bank(tmp_path / "bank.json.gz", cells)


def test_replay_scores_policies_against_the_full_budget_truth(bank):
    _, configs = replay.load_bank(bank)
    assert configs["tiny-m-steady"]["truth"] == pytest.approx(0.75)  # 0.70 + 0.05 shift
    assert configs["tiny-m-collapse"]["truth"] < configs["tiny-m-collapse"]["start"]
    draws = replay.loso_replicates(configs)
    # one per read seed, every config read from it (the bank is one grid)
    assert draws == [dict.fromkeys(sorted(configs), 0), dict.fromkeys(sorted(configs), 1)]
    rows = {name: replay.score_policy(name, configs, draws, boot=50)
            for name in replay.OWN_POLICIES}  # the peers: below
    assert rows["oracle"]["top1_regret"] == 0 and rows["oracle"]["kendall"] == 1.0
    # flat 1/16 pilots read 0.65 for tiny-m-collapse at F/16 (0.60 + shift): its pick
    assert set(rows["flat"]["picks"]) == {"tiny-m-collapse"}
    assert rows["flat"]["catastrophes"] == 1.0
    # judged on the other seed (both configs its offset): 0.75 - 0.15, reading either seed
    assert rows["flat"]["regrets"] == pytest.approx([0.75 - 0.15] * 2)
    # the guarded ladder, shrunk to the flat grid's compute (its last rung read at
    # F/8), sees the drawdown there and picks the steady config
    guarded = rows["ladder+guards"]
    assert set(guarded["picks"]) == {"tiny-m-steady"}
    assert guarded["top1_regret"] == 0 and guarded["catastrophes"] == 0
    # costs: 6 configs x 1/16 flat. The default rungs F/48, F/24, F/12, F/6 (6 -> 3 -> 2
    # -> 2 configs) would cost 21/48; shrunk by 6/7 to flat's 0.375 they are F/56, F/28,
    # F/14, F/7, read at the bank's checkpoints at or below them: 1/64, 1/32, 1/16, 1/8
    assert rows["flat"]["pilot_cost_share"] == pytest.approx(6 / 16)
    unguarded = rows["ladder"]
    assert unguarded["pilot_cost_share"] == pytest.approx(
        6 / 64 + 3 * (1 / 32 - 1 / 64) + 2 * (1 / 16 - 1 / 32) + 2 * (1 / 8 - 1 / 16))
    assert unguarded["pilot_cost_share"] <= rows["flat"]["pilot_cost_share"]
    assert guarded["pilot_cost_share"] <= unguarded["pilot_cost_share"]
    assert guarded["with_eval"] > guarded["pilot_cost_share"]


def test_guard_thresholds_are_tuned_on_the_half_they_are_given(bank):
    _, configs = replay.load_bank(bank)
    draws = replay.loso_replicates(configs)
    tuned = replay.tune_guards(configs, draws)
    assert tuned.floor in (0.02, 0.03, 0.05) and tuned.z in (1.0, 2.0, 3.0)
    row = replay.score_policy("ladder+guards", configs, draws, boot=1, thresholds=tuned)
    assert row["top1_regret"] == 0


def test_the_ladder_geometry_is_tuned_on_one_half_and_the_halves_split_by_group_size(bank):
    _, configs = replay.load_bank(bank)
    draws = replay.loso_replicates(configs)
    chosen, rows = replay.tune_ladder(configs, draws)
    # every geometry with each promotion score, the earlier rule (trend) first
    assert len(rows) == len(replay.GEOMETRIES) * 2 and chosen["fill"]
    assert [r["promote_by"] for r in rows[:2]] == ["trend", "last"]
    scored = [r for r in rows if r["replayable"]]
    best = min(r["top1_regret"] for r in scored)
    assert any(r["kw"] is chosen and r["top1_regret"] == best for r in scored)
    # every geometry is planned at the flat grid's compute, its first rung as late as that
    # allows (read at the bank's checkpoints at or below the rungs: never above it)
    assert all(r["pilot_cost_share"] <= len(configs) / 16 + 1e-9 for r in scored)
    # four rungs of quartering at 6/16 start at F/352, below the bank's first checkpoint
    # (F/256): listed, not scored (it would read the warm start, where ids decide)
    early = [r for r in rows if (r["n_rungs"], r["reduction"]) == (4, 4)]
    assert early and all(not r["replayable"] and "top1_regret" not in r for r in early)
    assert all(r["first"] < 1 / 256 for r in early)
    # one group size: halves alternate in a hash order; two: split by group size
    tune, held = replay.halves(configs)
    assert len(tune) == len(held) == 3 and not set(tune) & set(held)
    mixed = {c: v | {"group_size": 4 if i % 2 else 8} for i, (c, v) in enumerate(configs.items())}
    tune, held = replay.halves(mixed)
    assert {v["group_size"] for v in tune.values()} == {8}
    assert {v["group_size"] for v in held.values()} == {4}


def test_a_ladder_is_replayable_only_where_each_rung_reads_a_checkpoint_of_its_own(bank):
    _, configs = replay.load_bank(bank)
    assert replay.bank_reads(configs, [1 / 300, 1 / 64]) == [0.0, 1 / 64]
    assert not replay.replayable(replay.bank_reads(configs, [1 / 300, 1 / 64]))
    assert not replay.replayable(replay.bank_reads(configs, [1 / 60, 1 / 50]))  # both 1/64
    assert replay.replayable(replay.bank_reads(configs, [1 / 64, 1 / 16]))
    draw = replay.loso_replicates(configs)[0]
    with pytest.raises(ValueError, match="below the bank's first checkpoint"):
        replay.ladder(configs, draw, rungs=(1 / 300, 1 / 64), reduction=2, share=1.0)


def test_the_best_configs_order_is_shown_by_window_of_the_budget_before_f(bank):
    _, configs = replay.load_bank(bank)
    rows = replay.order_by_budget(configs, budgets=(1 / 16, 1 / 2, 1.0), top=3)
    assert [r["label"].split()[0] for r in rows] == [
        "tiny-m/rule", "tiny-s/rule", "tiny-m/rule"]  # steady (0.75), steady (0.70), slow
    assert [r["truth"] for r in rows] == pytest.approx([0.75, 0.70, 0.50])
    inside = [f for f in CHECKPOINTS if 1 / 16 < f <= 1 / 2]
    # the seeds' offsets cancel; shift 0.05 for tiny-m
    assert rows[0]["windows"][1] == pytest.approx(
        sum(steady(f) for f in inside) / len(inside) + 0.05)
    before_f = [f for f in CHECKPOINTS if 1 / 2 < f < 1]  # F itself is left out
    assert rows[0]["windows"][2] == pytest.approx(
        sum(steady(f) for f in before_f) / len(before_f) + 0.05)
    assert replay.fmt_window(1 / 32, 1 / 16) == "(F/32,F/16]"
    assert replay.fmt_window(1 / 2, 1.0) == "(F/2,F)"


def test_the_random_policy_picks_each_config_about_equally_often(bank):
    _, configs = replay.load_bank(bank)
    draws = every_draw(configs)  # 2 seeds ^ 6 configs = 64 draws
    picks = [replay.random_policy(configs, draw)[0][0] for draw in draws]
    assert sorted(replay.random_policy(configs, draws[0])[0]) == sorted(configs)
    fair = len(draws) / len(configs)
    assert all(0.4 * fair <= picks.count(c) <= 1.8 * fair for c in configs), picks


def test_policies_read_the_first_problems_a_pilot_scores_and_the_truth_reads_all():
    # 4 problems per checkpoint; a pilot scoring 2 scores the first 2 of the same draw
    rows = [{"checkpoint": f, "target": "val", "flops": f * FULL, "eval_flops": 1e6,
             "accuracy": a, "n": 4, "mean_reward": a, "correct": c}
            for f, a, c in ((0.0, 0.5, "0011"), (1 / 16, 0.5, "1001"), (1.0, 0.75, "1101"))]
    cell = {"evals": rows, "steps": []}
    curve = replay.Curve(cell, FULL, read_problems=2)
    assert curve.read.tolist() == [0.0, 0.5, 1.0] and curve.read_n.tolist() == [2, 2, 2]
    assert curve.accuracy.tolist() == [0.5, 0.5, 0.75] and curve.n.tolist() == [4, 4, 4]
    assert curve.at(1 / 16) == 0.5 and curve.at(1.0) == 1.0
    whole = replay.Curve(cell, FULL)  # no read_problems: every problem
    assert whole.read.tolist() == whole.accuracy.tolist()
    assert blackbox.first_problems(rows[2], 3) == (2 / 3, 3)
    assert blackbox.first_problems(rows[2], 8) == (0.75, 4)  # fewer than asked: all
    assert blackbox.first_problems(rows[2] | {"correct": None}, 2) == (0.75, 4)


# ------------------------------------------------------------------ the peers


@pytest.fixture()
def bench_extra():
    for module in ("syne_tune", "optuna"):
        pytest.importorskip(module, reason="the peers need the bench extra: "
                                           "pip install 'race-rl[bench]' (make test installs it)")


def read_bank(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_the_blackbox_reads_val_on_the_first_problems_when_asked(bank, bench_extra):
    raw = read_bank(bank)
    for c in raw["cells"]:  # 1,000 problems: the first 200 all right, the rest all wrong
        for r in c["evals"]:
            r["correct"] = "1" * 200 + "0" * 800
    names = list(blackbox.OBJECTIVES)
    values = blackbox.bank_blackbox(raw, val_problems=200).blackbox.objectives_evaluations
    assert (values[..., names.index("val_accuracy")] == 1.0).all()
    assert (values[..., names.index("val_problems")] == 200).all()
    whole = blackbox.bank_blackbox(raw).blackbox.objectives_evaluations
    assert (whole[..., names.index("val_problems")] == 1000).all()
    assert (whole[..., names.index("val_eval_flops")]
            == 5 * values[..., names.index("val_eval_flops")]).all()


def test_the_bank_round_trips_through_a_syne_tune_blackbox(bank, tmp_path, bench_extra):
    raw = read_bank(bank)
    exported = blackbox.bank_blackbox(raw)
    blackbox.save(exported, tmp_path / "bb")
    loaded = blackbox.load(tmp_path / "bb")  # Syne Tune's serialize / deserialize
    ids = sorted({c["config"] for c in raw["cells"]})
    assert loaded.config_ids == exported.config_ids == tuple(ids)
    assert loaded.seeds == (0, 1) and loaded.units == 256 and loaded.full_flops == FULL
    bb = loaded.blackbox
    assert bb.fidelity_values.tolist() == [round(f * 256) for f in CHECKPOINTS]
    assert set(bb.configuration_space) == set(blackbox.AXES)
    for cid, knobs in zip(ids, bb.hyperparameters.to_dict("records")):
        model, name = cid.split("-", 2)[:2], cid.split("-", 2)[2]
        assert knobs == {"model": "-".join(model), "reward": "rule", "group_size": 8,
                         "update_epochs": CURVES[name][1]}
    # through Syne Tune's own query: tiny-m-steady, seed 1 (offset 0.05 - 0.004), at F/8
    knobs = bb.hyperparameters.iloc[ids.index("tiny-m-steady")].to_dict()
    got = bb.objective_function(knobs, fidelity={"resource": 32}, seed=1)
    assert got["val_accuracy"] == pytest.approx(steady(1 / 8) + 0.046, abs=1e-6)
    assert got["val_problems"] == 1000 and got["charged_flops"] == pytest.approx(FULL / 8)
    assert math.isnan(got["test_accuracy"])  # the synthetic bank scores val only
    # a replicate's one-seed cut: each config from its own seed
    draw = {c: i % 2 for i, c in enumerate(ids)}
    one = blackbox.one_seed(exported, draw)
    values = one.blackbox.objectives_evaluations[:, 0, :, 0]
    for row, cid in enumerate(one.config_ids):
        seed = exported.seeds.index(draw[cid])
        assert values[row].tolist() == exported.blackbox.objectives_evaluations[
            exported.config_ids.index(cid), seed, :, 0].tolist()


def test_each_peer_spends_at_most_the_ladders_budget_and_picks_a_bank_config(bank, bench_extra):
    _, configs = replay.load_bank(bank)
    exported = blackbox.bank_blackbox(read_bank(bank))
    draws = every_draw(configs)[:6]
    for draw in draws:
        budget, first = replay.matched_budget(configs, draw)
        assert first == 1 / 64  # the shrunk ladder's first rung, read at F/64
        for name in peers.PEERS:
            ranking, charged, pilots, spent = replay.POLICIES[name](configs, draw,
                                                                    exported=exported)
            assert charged + spent <= budget + 1e-9, name
            assert sorted(ranking) == sorted(configs) and pilots == {}
    rows = {name: replay.score_policy(name, configs, draws, boot=20, exported=exported)
            for name in [*peers.PEERS, "oracle", "ladder+guards"]}
    assert rows["oracle"]["top1_regret"] == 0
    for name in peers.PEERS:
        assert set(rows[name]["picks"]) <= set(configs)
        assert rows[name]["with_eval"] <= rows["ladder+guards"]["with_eval"] + 1e-9
    # a budget that runs out mid-run is spent to the end, no further
    curves = peers.curves(blackbox.one_seed(exported, draws[0]), 1e3)
    run = peers.replay("asha", curves, budget=0.2, seed=0, first_rung=1 / 64)
    assert run.charged + run.eval == pytest.approx(0.2)
    assert all(f / 256 <= 0.2 for _, f in run.reads)


def test_spreading_replicates_over_processes_changes_no_number(bank, bench_extra, monkeypatch):
    from bench.science import replay_policies

    _, configs = replay.load_bank(bank)
    exported = blackbox.bank_blackbox(read_bank(bank))
    draws = every_draw(configs)[::5][:12]
    names = ["asha", "pasha", "random", "ladder+guards"]
    one = {n: replay.score_policy(n, configs, draws, boot=20, exported=exported)
           for n in names}
    monkeypatch.setattr(replay_policies, "JOBS", 2)
    two = {n: replay.score_policy(n, configs, draws, boot=20, exported=exported)
           for n in names}
    for n in names:
        assert two[n]["rankings"] == one[n]["rankings"], n
        assert two[n]["regrets"] == one[n]["regrets"], n
        assert two[n]["with_eval"] == one[n]["with_eval"], n


def test_top_k_keeps_as_many_as_the_budget_pays_for(bank, bench_extra):
    _, configs = replay.load_bank(bank)
    exported = blackbox.bank_blackbox(read_bank(bank))
    draw = replay.loso_replicates(configs)[0]
    curves = peers.curves(blackbox.one_seed(exported, draw), 1e3)  # eval: 1e-9 F a problem
    # all six to F/16 (collapse leads there: 0.65 and 0.60, then tiny-m steady 0.55), then
    # three on to F: room for exactly three long runs
    budget = 6 / 16 + 3 * 15 / 16 + 0.01
    run = peers.replay("top-k", curves, budget=budget, seed=0, first_rung=1 / 64,
                       knobs={"short": 1 / 16, "long": 1.0})
    assert sum(1 for _, r in run.reads if r == 256) == 3
    assert run.ranking[0] == "tiny-m-steady" and run.charged + run.eval <= budget
    two = peers.replay("top-k", curves, budget=budget - 15 / 16, seed=0, first_rung=1 / 64,
                       knobs={"short": 1 / 16, "long": 1.0})
    assert two.ranking[0] == "tiny-m-collapse"  # the steady config was not kept


def test_the_asha_replay_reads_what_syne_tunes_simulator_reads(bank, bench_extra):
    _, configs = replay.load_bank(bank)
    exported = blackbox.bank_blackbox(read_bank(bank))
    draw = every_draw(configs)[5]
    one = blackbox.one_seed(exported, draw)
    curves = peers.curves(one, 1e6)
    rows = peers.grid_order(curves, 3)
    state = peers.np.random.get_state()
    try:
        peers.np.random.seed(3)
        driver = peers.asha(curves, rows, 3, grace=1, reduction=3, max_t=256)
        ours = peers.simulate(driver, curves, 2.0, workers=1)
        peers.np.random.seed(3)
        # to where ours ends, its grid done (Syne Tune's searcher would go on to repeats)
        theirs = peers.simulator_asha(one, curves, until=ours.wall + 1e-3, seed=3, poll=1e-4)
    finally:
        peers.np.random.set_state(state)
    assert ours.wall < 2.0 and len({c for c, _ in ours.reads}) == len(configs)
    assert len(ours.reads) > 20 and ours.reads == theirs


def test_the_replay_prints_every_row_and_the_summary_last(bank, bench_extra):
    out = subprocess.run([sys.executable, str(BENCH / "selection_replay.py"), "--bank",
                          str(bank), "--boot", "5"],
                         capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert any(line.startswith("replay: leave-one-seed-out:") for line in lines)
    for name in ["asha", "hyperband", "pasha", "optuna-sh", "optuna-hyperband", "top-k",
                 "random", "oracle", "flat", "flat+sigmoid", "ladder", "ladder+guards"]:
        rows = [line for line in lines if re.match(rf"{re.escape(name)} +\d", line)]
        assert len(rows) == 2, name  # the all-config table and the held-out one
    for name in peers.PEERS:  # a verdict per peer, on all configs and held out
        verdicts = [line for line in lines if re.match(
            rf"  {re.escape(name)} +[-+]\d\.\d+ \(se \d\.\d+\)  (ties|above|below) "
            rf"ladder\+guards$", line)]
        assert len(verdicts) == 2, name
    assert re.fullmatch(r"default selection\.policy=ladder: (stays|a peer is below).*",
                        lines[-5]), lines[-5]
    number = r"-?\d+\.\d+"
    assert re.fullmatch(
        rf"worlds=1 replay=leave-one-seed-out policy=ladder\+guards top1_regret={number} "
        rf"se={number} within_size_kendall={number} catastrophes={number} "
        rf"pilot_cost_share={number} cost_with_eval={number} best_peer=(asha|hyperband|"
        rf"pasha|optuna-sh|optuna-hyperband|top-k) best_peer_regret={number} "
        rf"asha_diff_given=[-+]\d\.\d+ asha_diff_se_given={number}", lines[-2]), lines[-2]
    assert lines[-3].startswith("held-out: policy=ladder+guards ")
    assert re.fullmatch(rf"worlds=1 regret_ladder_given={number} regret_random_given={number} "
                        rf"cannot_rank_share_given={number}", lines[-1]), lines[-1]
    assert any(re.match(r"  (can rank|weakly|cannot) +\d+ of \d+ \(\d+%\)", line)
               for line in lines)


@pytest.fixture()
def outlier_bank(tmp_path):
    """Three seeds; on seed 0 the slow config is an outlier, far above its other seeds
    and above the steady config, the best on seeds 1 and 2."""
    offsets = {"steady": (0.0, 0.0, 0.0), "slow": (0.40, 0.0, 0.0),
               "collapse": (0.0, 0.0, 0.0)}
    cells = [cell(f"tiny-s-{name}", "tiny-s", seed, curve, offsets[name][seed], mu)
             for name, (curve, mu) in CURVES.items() for seed in range(3)]
    return write_bank(tmp_path / "outlier.json.gz", cells)


def test_the_truth_leaves_out_the_seed_the_policy_read(outlier_bank):
    _, configs = replay.load_bank(outlier_bank)
    slow = configs["tiny-s-slow"]
    assert slow["truth"] == pytest.approx((0.85 + 0.45 + 0.45) / 3)  # all seeds
    draws = replay.loso_replicates(configs)
    assert [set(d.values()) for d in draws] == [{0}, {1}, {2}] and replay.common_seeds(
        configs) == [0, 1, 2]
    # reading seed 0, the truth is the mean of seeds 1 and 2: the outlier is left out
    seen = replay.judged(configs, draws[0])
    assert seen["tiny-s-slow"]["truth"] == pytest.approx(0.45)
    assert seen["tiny-s-slow"]["truth_se"] == pytest.approx(0.0)
    assert seen["tiny-s-steady"]["truth"] == pytest.approx(0.70)
    # reading seed 1: the mean of seeds 0 and 2
    assert replay.judged(configs, draws[1])["tiny-s-slow"]["truth"] == pytest.approx(0.65)
    # the flattering mode keeps every seed in the truth
    flattering = replay.judged(configs, draws[0], replay.ALL_SEEDS)
    assert flattering["tiny-s-slow"]["truth"] == pytest.approx(slow["truth"])
    # flat pilots read seed 0's outlier (0.71 at F/16, above collapse's 0.60): its pick
    # costs 0.70 - 0.45 judged on seeds 1-2, only 0.70 - 0.583 with seed 0 in the truth
    loso = replay.score_policy("flat", configs, draws[:1], boot=5)
    every = replay.score_policy("flat", configs, draws[:1], boot=5, truth=replay.ALL_SEEDS)
    assert loso["picks"] == every["picks"] == ["tiny-s-slow"]
    assert loso["regrets"] == pytest.approx([0.25])
    assert every["regrets"] == pytest.approx([0.70 - (0.85 + 0.45 + 0.45) / 3])
    one_seed = {c: v | {"by_seed": {0: v["by_seed"][0]}} for c, v in configs.items()}
    with pytest.raises(ValueError, match="leave-one-seed-out needs 2 or more seeds"):
        replay.judged(one_seed, draws[0])


def test_a_policy_that_picks_the_truths_best_has_no_regret(outlier_bank):
    _, configs = replay.load_bank(outlier_bank)
    draws = replay.loso_replicates(configs)
    oracle = replay.score_policy("oracle", configs, draws, boot=5)
    # the best differs with the seed read: on seed 0 the truth (seeds 1, 2) ranks steady
    # first, as it does reading seed 1 or 2 (0.70 against slow's 0.65)
    assert oracle["regrets"] == [0.0, 0.0, 0.0]
    assert oracle["picks"] == ["tiny-s-steady"] * 3


def test_the_cluster_bootstrap_counts_seeds_and_grids_as_samples():
    # all variation across seeds: the mean of 2 resampled seeds is 0, 1/2 or 1 with
    # probability 1/4, 1/2, 1/4: SD sqrt(1/8); resampling the 3 grids changes nothing
    by_seed = replay.np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert replay.cluster_bootstrap_se(by_seed, 4000) == pytest.approx(math.sqrt(1 / 8),
                                                                       rel=0.05)
    # a Monte Carlo SE over the 6 replicates would call it sqrt(0.3 / 6) = 0.22, the seeds
    # as many as the replicates; here they are 2
    assert replay.cluster_bootstrap_se(by_seed.T, 4000) == pytest.approx(
        math.sqrt(1 / 8), rel=0.05)  # the same spread across grids
    # additive: the resampled means of seeds and of grids are independent, so the
    # variance is var(a) / S + var(b) / G (population variances): 2/9 + 1/32
    additive = replay.np.add.outer([0.0, 1.0, 2.0], [0.0, 0.5])
    assert replay.cluster_bootstrap_se(additive, 4000) == pytest.approx(
        math.sqrt(2 / 9 + 1 / 32), rel=0.05)
    assert replay.cluster_bootstrap_se(replay.np.full((3, 4), 0.2), 50) == pytest.approx(0)
    # a stack shares its draws: the paired difference of a shifted copy has SE 0, and the
    # same seed gives the same SEs
    stack = replay.np.array([additive, additive + 0.1])
    se = replay.cluster_bootstrap_se(stack, 200)
    assert se[0] == pytest.approx(se[1]) == pytest.approx(replay.cluster_bootstrap_se(
        additive, 200))
    assert replay.cluster_bootstrap_se(stack[1] - stack[0], 200) == pytest.approx(0, abs=1e-12)


def test_each_peer_ties_or_is_above_or_below_the_ladder_by_its_paired_90_percent_interval():
    from bench.science.replay_tables import default_verdict, verdict, verdict_lines, with_cluster_se
    draws = [{"a": s, "b": s} for s in (0, 1)]  # 2 seeds x 1 grid
    rows = [{"policy": "ladder+guards", "regrets": [0.10, 0.12]},
            {"policy": "asha", "regrets": [0.30, 0.32]},  # +0.2 on both seeds: above
            {"policy": "pasha", "regrets": [0.0, 0.24]},  # -0.1, +0.12: ties
            {"policy": "top-k", "regrets": [0.05, 0.07]}]  # -0.05 on both: below
    rows = with_cluster_se(rows, draws, 500)
    got = {r["policy"]: r for r in rows}
    assert got["asha"]["diff"] == pytest.approx(0.2) and got["asha"]["diff_se"] < 1e-9
    assert got["ladder+guards"]["diff"] == 0 and got["ladder+guards"]["diff_se"] == 0
    # regrets 0.10, 0.12 on 2 seeds: SD of the resampled mean 0.01 / sqrt(2)
    assert got["ladder+guards"]["se"] == pytest.approx(0.01 / math.sqrt(2), rel=0.1)
    assert [verdict(got[p]) for p in ("asha", "pasha", "top-k")] == ["above", "ties", "below"]
    lines = verdict_lines(rows, "world 1").splitlines()
    assert lines[1:] == ["  asha              +0.2000 (se 0.0000)  above ladder+guards",
                         f"  pasha             +0.0100 (se {got['pasha']['diff_se']:.4f})  "
                         "ties ladder+guards",
                         "  top-k             -0.0500 (se 0.0000)  below ladder+guards"]
    assert default_verdict(rows) == (
        "a peer is below ladder+guards (top-k; ties: pasha; above: asha): reconsider it")
    assert default_verdict(rows[:3]) == (
        "stays: no peer below ladder+guards (ties: pasha; above: asha)")
    assert default_verdict(None) == "no replay"


def test_cells_off_the_grids_prompts_per_step_are_left_out_of_the_replay(bank, tmp_path):
    record = read_bank(bank)
    probe = cell("tiny-m-steady-p16", "tiny-m", 0, steady, 0.3) | {"prompts_per_step": 16}
    record["cells"] += [probe, dict(record["cells"][0], prompts_per_step=8)]
    record["cells"].pop(0)  # the same cell back, its knob now written out: still on grid
    wider = tmp_path / "wider.json.gz"
    with gzip.open(wider, "wt") as f:
        json.dump(record, f)
    loaded, configs = replay.load_bank(wider)
    assert loaded["left_out"] == 1 and "tiny-m-steady-p16" not in configs
    assert set(configs) == set(replay.load_bank(bank)[1])  # every grid config, no other


def test_each_policys_row_carries_its_se_and_its_paired_difference_with_the_ladder():
    from bench.science.replay_tables import table
    configs = {"a": {"label": "tiny-m/rule G2 mu1"}}
    row = {"policy": "pasha", "top1_regret": 0.05, "se": 0.0289, "diff": -0.0123,
           "diff_se": 0.0051, "test_regret": 0.06, "kendall": 0.3, "kendall_ci": (0.1, 0.5),
           "spearman": 0.4, "spearman_ci": (0.2, 0.6), "catastrophes": 0.0,
           "pilot_cost_share": 0.7, "with_eval": 0.8, "picks": ["a"] * 4}
    header, line = table([row], configs).splitlines()
    assert header.split()[:6] == ["policy", "regret", "se", "-", "l+g", "se"]
    assert line.split()[:5] == ["pasha", "0.0500", "0.0289", "-0.0123", "0.0051"]


def test_the_bootstrap_from_counts_equals_ranking_each_resample(bank):
    _, configs = replay.load_bank(bank)
    draws = every_draw(configs)[::8]
    rankings = [replay.POLICIES[p](configs, d)[0] for p in ("flat", "random") for d in draws]
    rng = replay.np.random.default_rng(1)
    ids = list(configs)
    counts = replay.np.zeros((60, len(ids)))
    for row in counts:
        drawn = rng.integers(0, len(ids), len(ids))
        replay.np.add.at(row, drawn, 1)
        sample = {f"{ids[i]}#{j}": configs[ids[i]] for j, i in enumerate(drawn)}
        got = replay.within_size_counts(configs, rankings, row[None])
        for key, method in (("kendall", replay.kendall), ("spearman", replay.spearman)):
            values = []
            for ranking in rankings:
                order = {c: i for i, c in enumerate(ranking)}
                resampled = sorted(sample, key=lambda k: order[k.split("#")[0]])
                value = replay._within_size(sample, resampled, method)
                if value is not None:
                    values.append(value)
            if values:
                assert got[key][0] == pytest.approx(sum(values) / len(values), abs=1e-12)
            else:  # every size of the resample has fewer than 3 configs, or one truth
                assert math.isnan(got[key][0])


def test_the_regime_check_scores_the_surface_against_the_ladders_pick_rate(bank):
    _, configs = replay.load_bank(bank)
    row = replay.score_policy("ladder+guards", configs, replay.loso_replicates(configs),
                              boot=10)
    lines = replay.regime_section(configs, FULL, row).splitlines()
    assert len(lines) == 3  # a header, then one line per (size, reward)
    tiny_m = next(line for line in lines if line.startswith("  tiny-m/rule"))
    # mu 1, 2, 4 are three rho levels; leaving one out leaves two (few-rho): every fold
    # falls back to its best pilot cell at F/16, which is the collapsing config unless it
    # is the one left out, so only that fold holds the best config at F (the steady one)
    assert "(3 configs, rho G8 mu2 0.85, G8 mu4 0.91, G8 mu1 0.69)" in tiny_m
    assert "best config at F (tiny-m/rule G8 mu1, rho 0.69) in 1 of 3" in tiny_m
    assert "the best pilot cell in 3 (1 hit)" in tiny_m and "every config: miss" in tiny_m
    # the guarded ladder ranks the steady config first in its group in every replicate
    assert tiny_m.endswith("ladder+guards pick rate 1.00")


def test_a_wide_bank_is_replayed_as_default_shaped_grids_each_judged_on_its_own_best():
    # G 2, 4, 8 x mu 1, 2 x one size and reward: 3 pairs of G x the one pair of mu
    configs = {f"G{g}mu{mu}": {"model": "m", "reward": "rule", "group_size": g,
                               "update_epochs": mu, "truth": g / 10 + mu / 100,
                               "truth_test": 0.5, "truth_se": 0.01, "start": 0.0,
                               "curves": {0: None, 1: None},
                               "by_seed": dict.fromkeys((0, 1), (g / 10 + mu / 100, 0.5, 0.0))}
               for g in (2, 4, 8) for mu in (1, 2)}
    grids = replay.subgrids(configs)
    assert [sorted({configs[c]["group_size"] for c in g}) for g in grids] == [
        [2, 4], [2, 8], [4, 8]]
    assert all(len(g) == 4 for g in grids)
    draws = replay.loso_replicates(configs, grids)  # seed-major: seed 0's 3 grids, seed 1's
    assert [sorted(d) for d in draws] == [sorted(grids[i % 3]) for i in range(6)]
    assert [set(d.values()) for d in draws] == [{0}] * 3 + [{1}] * 3
    assert replay.cell_matrix(range(6), draws).tolist() == [[0, 1, 2], [3, 4, 5]]
    # the oracle picks each grid's own best: regret 0, though G8 (the bank's best) is
    # missing from the first grid
    oracle = replay.score_policy("oracle", configs, draws, boot=10)
    assert oracle["top1_regret"] == 0 and oracle["picks"][0] == "G4mu2"
    # a random pick's regret is its grid's best minus its grid's mean: for the G pairs
    # {2,4}: 0.42 - 0.315 = 0.105, {2,8}: 0.82 - 0.515 = 0.305, {4,8}: 0.82 - 0.615 =
    # 0.205; replicates 0..5 take grids 0,1,2,0,1,2
    random_row = replay.score_policy("random", configs, draws, boot=10)
    expected = [0.105, 0.305, 0.205] * 2
    assert random_row["regrets"] == pytest.approx(expected)
    assert replay.subgrids({c: configs[c] for c in ("G2mu1", "G2mu2", "G4mu1", "G4mu2")}) \
        is None  # two values on each axis: the bank is one default-shaped grid


def test_replicates_are_compared_at_the_defaults_compute_and_judged_on_the_unread_seed(
        tmp_path, capsys):
    """selection.replicates=2 against the default: the replicated ladder spends at most
    what the default spends (rungs on the bank's checkpoints), and both are judged by the
    seed neither read; a bank of two seeds cannot be."""
    cells = [cell(f"tiny-m-{name}", "tiny-m", seed, curve, 0.01 * seed, mu)
             for name, (curve, mu) in CURVES.items() for seed in (0, 1, 2)]
    _, configs = replay.load_bank(write_bank(tmp_path / "three.json.gz", cells))
    result = replay.replicates_section("given", configs, None, boot=50)
    out = capsys.readouterr().out
    costs = [float(line.split("cost with eval ")[1]) for line in out.splitlines()
             if "cost with eval" in line]
    assert len(costs) == 2 and costs[1] <= costs[0] + 1e-9
    assert result["verdict"] in ("ties the default", "below the default", "above the default")
    two = [c for c in cells if c["seed"] < 2]
    _, configs = replay.load_bank(write_bank(tmp_path / "two.json.gz", two))
    assert replay.replicates_section("given", configs, None, boot=50) is None
    assert "needs 3 seeds" in capsys.readouterr().out
