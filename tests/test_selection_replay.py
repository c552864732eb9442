"""bench/selection_replay.py on a synthetic curve bank whose answer is known: a config
that leads at F/16 and collapses after it (visible by F/8), a steady one that is best at
F, a slow one. The flat 1/16 pilots pick the early leader; the guarded ladder does not."""

import gzip
import importlib.util
import json
import math
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "selection_replay", Path(__file__).parents[1] / "bench" / "selection_replay.py")
replay = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(replay)

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


def cell(config, model, seed, curve, offset):
    evals = [{"checkpoint": f, "target": "val", "flops": f * FULL, "eval_flops": 1e6 * (i + 1),
              "accuracy": min(1.0, max(0.0, curve(f) + offset)), "n": 1000,
              "mean_reward": curve(f) + offset}
             for i, f in enumerate([0.0, *CHECKPOINTS])]
    steps = [{"step": i + 1, "flops": f * FULL, "entropy": 1.0, "truncation_rate": 0.0,
              "max_new_tokens": 40, "train_reward": 0.5} for i, f in enumerate(CHECKPOINTS)]
    return {"cell_id": f"{config}-{seed}", "config": config, "model": model, "reward": "rule",
            "group_size": 8, "update_epochs": 1, "seed": seed, "budget_flops": FULL,
            "evals": evals, "steps": steps}


@pytest.fixture()
def bank(tmp_path):
    cells = []
    for model, shift in (("tiny-s", 0.0), ("tiny-m", 0.05)):
        for name, curve in (("steady", steady), ("collapse", leader_then_collapse),
                            ("slow", slow)):
            for seed, noise in ((0, 0.004), (1, -0.004)):
                cells.append(cell(f"{model}-{name}", model, seed, curve, shift + noise))
    path = tmp_path / "bank.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"command": "race sweep ...", "git_sha": "0" * 40, "versions": {},
                   "budget_flops": FULL, "started": 0, "finished": 0, "cells": cells}, f)
    return path


def test_replay_scores_policies_against_the_full_budget_truth(bank):
    _, configs = replay.load_bank(bank)
    assert configs["tiny-m-steady"]["truth"] == pytest.approx(0.75)  # 0.70 + 0.05 shift
    assert configs["tiny-m-collapse"]["truth"] < configs["tiny-m-collapse"]["start"]
    draws = replay.replicates(configs)
    assert len(draws) == 2 ** 6  # every config's seed drawn independently: all combinations
    assert {tuple(sorted(d.values())) for d in draws} >= {(0,) * 6, (1,) * 6}
    sampled = replay.replicates(configs, most=10)  # more combinations: a sample
    assert len(sampled) == 10 and all(set(d) == set(configs) for d in sampled)
    assert sampled == replay.replicates(configs, most=10)  # seeded
    uneven = {c: v | {"curves": {0: v["curves"][0]}} if c == "tiny-s-slow" else v
              for c, v in configs.items()}  # one config with one seed: its seed is fixed
    assert len(replay.replicates(uneven)) == 2 ** 5
    assert all(d["tiny-s-slow"] == 0 for d in replay.replicates(uneven, most=4))
    rows = {name: replay.score_policy(name, configs, draws, boot=50)
            for name in replay.POLICIES}
    assert rows["oracle"]["top1_regret"] == 0 and rows["oracle"]["kendall"] == 1.0
    # flat 1/16 pilots read 0.65 for tiny-m-collapse at F/16 (0.60 + shift): its pick
    assert set(rows["flat"]["picks"]) == {"tiny-m-collapse"}
    assert rows["flat"]["catastrophes"] == 1.0
    assert rows["flat"]["top1_regret"] == pytest.approx(0.75 - 0.15)
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
    draws = replay.replicates(configs)
    tuned = replay.tune_guards(configs, draws)
    assert tuned.floor in (0.02, 0.03, 0.05) and tuned.z in (1.0, 2.0, 3.0)
    row = replay.score_policy("ladder+guards", configs, draws, boot=1, thresholds=tuned)
    assert row["top1_regret"] == 0


def test_the_ladder_geometry_is_tuned_on_one_half_and_the_halves_split_by_group_size(bank):
    _, configs = replay.load_bank(bank)
    draws = replay.replicates(configs)
    chosen, rows = replay.tune_ladder(configs, draws)
    assert len(rows) == len(replay.GEOMETRIES) and chosen["fill"]
    best = min(r["top1_regret"] for r in rows)
    assert any(r["kw"] is chosen and r["top1_regret"] == best for r in rows)
    # every geometry is planned at the flat grid's compute, its first rung as late as that
    # allows (read at the bank's checkpoints at or below the rungs: never above it)
    assert all(r["pilot_cost_share"] <= len(configs) / 16 + 1e-9 for r in rows)
    # one group size: halves alternate in a hash order; two: split by group size
    tune, held = replay.halves(configs)
    assert len(tune) == len(held) == 3 and not set(tune) & set(held)
    mixed = {c: v | {"group_size": 4 if i % 2 else 8} for i, (c, v) in enumerate(configs.items())}
    tune, held = replay.halves(mixed)
    assert {v["group_size"] for v in tune.values()} == {8}
    assert {v["group_size"] for v in held.values()} == {4}


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
    draws = replay.replicates(configs)  # 2 seeds ^ 6 configs = 64 one-seed sweeps
    picks = [replay.random_policy(configs, draw)[0][0] for draw in draws]
    assert sorted(replay.random_policy(configs, draws[0])[0]) == sorted(configs)
    fair = len(draws) / len(configs)
    assert all(0.4 * fair <= picks.count(c) <= 1.8 * fair for c in configs), picks
