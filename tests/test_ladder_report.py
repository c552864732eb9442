"""A ladder sweep's report: the figure data through every rung (race.analysis.ladder_curves),
the answer first in leaderboard.md and the summary (race.analysis.headline,
race.report.answer), the figures, on a hand-made three-rung ladder folder."""

import math

import pandas as pd
import pytest

from race.analysis.curves import fit_curve, full_budget_interval
from race.analysis.headline import difference
from race.analysis.ladder_curves import ladder_points, lineage_fits, lineages
from race.analysis.load import load_results
from race.analysis.sweep_analysis import analyse_sweep
from race.report.write import write_report
from race.store import io as results

FULL = 4.8e12  # full-run budget F, FLOPs
RUNGS = (1 / 48, 1 / 24, 1 / 12)  # the rungs' shares of F
N = 200  # problems per evaluation
# config -> (model, reward, G, mu, warm start on val, accuracy gained per rung on val)
CONFIGS = {"A": ("tiny-m", "rule", 4, 1, 0.40, (0.06, 0.12, 0.16)),
           "B": ("tiny-m", "prm-tiny-s", 4, 1, 0.40, (0.05, 0.08)),
           "C": ("tiny-s", "rule", 4, 1, 0.30, (0.04, 0.06, 0.07)),
           "D": ("tiny-s", "rule", 2, 4, 0.30, (0.01,))}
LADDER = (("A", "B", "C", "D"), ("A", "B", "C"), ("A", "C"))  # the configs of each rung
REPORTED = {"test": 0.05, "ood": -0.25}  # the other targets: val's score plus this


def budget(rung):
    return FULL * RUNGS[rung - 1]


def spent(rung):
    """Charged FLOPs at a rung's end (a little under its budget: whole steps)."""
    return 0.97 * budget(rung)


def cell_id(config, rung):
    return f"{config}-r{rung}"


def accuracy(config, rung, target="val"):
    start, gains = CONFIGS[config][4], CONFIGS[config][5]
    value = start + (gains[rung - 1] if rung else 0.0)
    return round(value + (REPORTED[target] if target != "val" else 0.0), 3)


def eval_row(config, rung, target, snapshot):
    acc = accuracy(config, rung, target)
    hits = round(acc * N)
    # the eval's own ledger snapshot: what the pilot had charged when it scored
    phases = {"rollout": 0.3 * snapshot, "learning": 0.7 * snapshot, "feedback": 0.0}
    return {"kind": "eval", "target": target, "checkpoint": 0.0 if rung == 0 else 1.0,
            "accuracy": acc, "mean_reward": acc, "correct": [1] * hits + [0] * (N - hits),
            "flops": {"model": phases | {"eval": 1e9}}}


def write_cell(sweep, config, rung):
    """One rung's cell: a rung above the first continues the rung below and repeats its
    lineage's eval rows, some after its own steps (as pilots write them)."""
    model, reward, group, mu, _, _ = CONFIGS[config]
    folder = sweep / "cells" / cell_id(config, rung)
    last = rung == len(RUNGS)
    results.write_json(folder / "spec.json", {
        # the ladder names a config by its first rung's config_id
        "cell_id": cell_id(config, rung), "model": model,
        "config_id": config if rung == 1 else f"{config}@{rung}",
        "seed": 0, "prompts_per_step": 8, "group_size": group, "max_new_tokens": 40,
        "update_epochs": mu, "minibatch_size": 0, "lr": 3e-4, "lora_rank": 16,
        "kl_coef": 0.0, "temperature": 1.0, "backend": "hf", "convention": "model",
        "budget_flops": budget(rung), "select_target": "val",
        "eval_targets": ["val", "test", "ood"], "score_start": rung == 1,
        "continues": cell_id(config, rung - 1) if rung > 1 else "",
        "task": {"name": "arith"}, "reward": {"name": reward,
                                             "kind": "rule" if reward == "rule" else "prm"}})
    rows = [eval_row(config, 0, t, 0.0) for t in ("val", "test", "ood")]
    for below in range(1, rung):
        rows.append(eval_row(config, below, "val", spent(below)))
    start = spent(rung - 1) if rung > 1 else 0.0
    for step in range(1, 5):
        rows.append({"kind": "step", "step": step,
                     "charged_flops": start + (spent(rung) - start) * step / 4})
    if rung > 1:  # repeated after its own steps: dated by its snapshot, not the last step
        rows.append(eval_row(config, rung - 1, "val", spent(rung - 1)))
    rows.append(eval_row(config, rung, "val", spent(rung)))
    if last:  # the reported targets are scored at the last rung only
        rows += [eval_row(config, rung, t, spent(rung)) for t in ("test", "ood")]
    results.write_jsonl(folder / "metrics.jsonl", rows)
    total = spent(rung)
    finals = {t: {"accuracy": accuracy(config, rung if (last or t == "val") else 0, t),
                  "mean_reward": 0.0} for t in ("val", "test", "ood")}
    results.write_json(folder / "summary.json", {
        "cell_id": cell_id(config, rung), "status": "ok", "error": None,
        "budget_flops": budget(rung), "convention": "model", "steps": 4 * rung,
        "total_flops": total, "device": "cpu",
        "flops": {"rollout": 0.3 * total, "learning": 0.7 * total, "feedback": 0.0,
                  "eval": 1e9},
        "wall_s": {"rollout": 3.0, "learning": 7.0, "feedback": 0.0, "eval": 1.0},
        "final_eval": finals,
        "initial_eval": {t: {"accuracy": accuracy(config, 0, t), "mean_reward": 0.0}
                         for t in ("val", "test", "ood")}})


def candidate(config, rung, promoted):
    model, reward, group, mu, _, _ = CONFIGS[config]
    score = accuracy(config, rung)
    se = math.sqrt(score * (1 - score) / N)
    return {"config": config, "cell_ids": [cell_id(config, rung)], "model": model,
            "reward": reward, "group_size": group, "update_epochs": mu, "score": score,
            "se": se, "predicted": score, "predicted_se": se, "lcb": score - se,
            "ucb": score + se, "guard": None, "promoted": promoted,
            "why": "top lcb" if promoted else "below the cut"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("ladder") / "arith-4.8e12-ladder"
    results.write_json(sweep / "sweep.json", {
        "budget_flops": FULL, "pilot_fraction": RUNGS[0], "task": "arith",
        "config": {"regime": {"feedback_heavy": 0.15, "learning_heavy": 0.8,
                              "search_heavy": 0.4}}})
    rungs = []
    for number, configs in enumerate(LADDER, 1):
        above = LADDER[number] if number < len(LADDER) else ()
        for config in configs:
            write_cell(sweep, config, number)
        ranked = sorted(configs, key=lambda c: -accuracy(c, number))
        rungs.append({"rung": number, "fraction": RUNGS[number - 1],
                      "budget_flops": budget(number),
                      "cells": [cell_id(c, number) for c in configs],
                      "candidates": [candidate(c, number, c in above) for c in ranked]})
    results.write_json(sweep / "ladder.json", {"rungs": rungs, "reduction": 2, "z": 1.0,
                                               "promote_by": "last", "keep_sizes": "close",
                                               "cost_share": 0.2, "scaled": 1.0})
    return sweep


@pytest.fixture(scope="module")
def report(sweep):
    return write_report(sweep, n_boot=50)


# ---------------------------------------------------------------- figure data


def synthetic_frames():
    """A two-rung ladder as frames: config P (two seeds) ran both rungs, Q the first."""
    cells = pd.DataFrame([
        {"cell_id": "p0", "seed": 0, "continues": "", "status": "ok", "config_id": "P",
         "reward": "rule"},
        {"cell_id": "p1", "seed": 1, "continues": "", "status": "ok", "config_id": "P",
         "reward": "rule"},
        {"cell_id": "q0", "seed": 0, "continues": "", "status": "ok", "config_id": "Q",
         "reward": "rule"},
        {"cell_id": "p0b", "seed": 0, "continues": "p0", "status": "ok", "config_id": "P2",
         "reward": "rule"},
        {"cell_id": "p1b", "seed": 1, "continues": "p1", "status": "ok", "config_id": "P2",
         "reward": "rule"}])
    rows = []
    for cell, points in {"p0": [(0, 0.3), (40, 0.4), (90, 0.45)],
                         "p1": [(0, 0.3), (95, 0.46)],
                         "q0": [(0, 0.3), (100, 0.35)],
                         # a continued cell repeats its lineage's points
                         "p0b": [(0, 0.3), (90, 0.45), (150, 0.5), (190, 0.55)],
                         "p1b": [(0, 0.3), (95, 0.46), (195, 0.57)]}.items():
        rows += [{"cell_id": cell, "target": "val", "flops": f, "accuracy": a, "n": 100,
                  "checkpoint": 0.0 if f == 0 else 1.0} for f, a in points]
    cand = {"model": "tiny-m", "reward": "rule", "group_size": 4, "update_epochs": 1}
    ladder = {"rungs": [
        {"rung": 1, "fraction": 0.1, "budget_flops": 100.0, "candidates": [
            cand | {"config": "P", "cell_ids": ["p0", "p1"]},
            cand | {"config": "Q", "cell_ids": ["q0"]}]},
        {"rung": 2, "fraction": 0.2, "budget_flops": 200.0, "candidates": [
            cand | {"config": "P", "cell_ids": ["p0b", "p1b"]}]}]}
    return ladder, cells, pd.DataFrame(rows)


def test_ladder_points_lay_every_rung_end_to_end_from_the_warm_start():
    ladder, cells, evals = synthetic_frames()
    points = ladder_points(ladder, cells, evals, target="val", pick="P")
    assert lineages(cells) == {"p0": "p0", "p1": "p1", "q0": "q0", "p0b": "p0",
                               "p1b": "p1"}
    by_lineage = {k: g.sort_values("flops") for k, g in points.groupby("lineage")}
    # every checkpoint of every rung, once, each lineage from its warm start at 0 FLOPs
    assert list(by_lineage["p0"]["flops"]) == [0, 40, 90, 150, 190]
    assert list(by_lineage["p0"]["rung"]) == [0, 1, 1, 2, 2]
    assert list(by_lineage["p1"]["flops"]) == [0, 95, 195]
    assert list(by_lineage["q0"]["flops"]) == [0, 100]
    assert list(by_lineage["p0"]["cell_id"]) == ["p0", "p0", "p0", "p0b", "p0b"]
    assert set(points.loc[points["config_id"] == "P", "last_rung"]) == {2}
    assert set(points.loc[points["config_id"] == "Q", "last_rung"]) == {1}
    assert points["pick"].tolist() == (points["config_id"] == "P").tolist()
    assert list(by_lineage["p0"]["fraction"]) == [0.0, 0.1, 0.1, 0.2, 0.2]
    # a lineage with its start and 3 checkpoints past it gets a sigmoid; one point cannot
    fits = lineage_fits(points, predict_at=1000.0).set_index("lineage")
    assert fits.loc["q0", "method"] == "last" and fits.loc["q0", "n_points"] == 1
    assert fits.loc["p0", "n_points"] == 4
    # its prediction at F carries the calibrated interval, extrapolated from its last point
    p0 = fits.loc["p0"]
    assert p0["method"] == "sigmoid" and p0["last_flops"] == 190
    assert (p0["full_lo"], p0["full_hi"]) == full_budget_interval(
        fit_curve(by_lineage["p0"]["flops"], by_lineage["p0"]["accuracy"], predict_at=1000.0),
        1000.0)
    assert p0["full_lo"] <= p0["prediction"] <= p0["full_hi"]


def test_the_sweeps_figure_data_covers_every_rungs_checkpoints(sweep):
    result = analyse_sweep(sweep, n_boot=50)
    cells, evals, _ = load_results(sweep)
    points = result.points["val"]
    checkpoints = evals[(evals["target"] == "val") & (evals["flops"] > 0)]
    have = set(zip(points["lineage"], points["flops"]))
    first = lineages(cells)
    for row in checkpoints.itertuples():  # every checkpoint of every cell of every rung
        assert (first[row.cell_id], row.flops) in have, row
    for config in CONFIGS:  # its warm start, then one point at each rung it ran
        mine = points[points["config_id"] == config].sort_values("flops")
        reached = sum(config in configs for configs in LADDER)
        assert list(mine["rung"]) == list(range(reached + 1)), config
        assert mine["flops"].tolist() == pytest.approx(
            [0.0, *(spent(r) for r in range(1, reached + 1))])
        assert mine["accuracy"].tolist() == [accuracy(config, r) for r in mine["rung"]]
    assert points.loc[points["pick"], "config_id"].unique().tolist() == ["A"]
    # the reported targets: the warm start and the last rung, where they were scored
    assert sorted(result.points["ood"]["rung"].unique()) == [0, 3]
    # the frontier spans every rung
    assert result.fronts["val"]["flops"].max() == pytest.approx(spent(3))


def test_a_repeated_lineage_row_is_dated_by_its_own_snapshot(sweep):
    _, evals, _ = load_results(sweep)
    mine = evals[(evals["cell_id"] == "A-r3") & (evals["target"] == "val")]
    assert sorted(mine["flops"]) == pytest.approx([0.0, spent(1), spent(2), spent(3)])
    assert not mine.duplicated(["flops"]).any()


# ---------------------------------------------------------------- the answer first


def test_leaderboard_opens_with_the_answer_then_the_ladder_then_the_tables(sweep, report):
    text = (sweep / "leaderboard.md").read_text()
    head = "\n".join(text.splitlines()[:25])
    assert head.startswith("# Leaderboard: arith-4.8e12-ladder")
    assert "**Pick: `A`, tiny-m/rule G4 mu1**" in head
    assert "`val` 0.560 [" in head and "observed at rung 3" in head
    assert "+0.160 (SE" in head and "vs its warm start, above it" in head
    assert "Runner-up: `B`, tiny-m/prm-tiny-s G4 mu1" in head and "at 90%" in head
    assert "At the full budget (4.80e+12 FLOPs) the pick buys" in head
    for row in ("| size | tiny-m | `A`", "| size | tiny-s | `C`", "| reward | prm-tiny-s | `B`",
                "| target | val | `A`", "| target | test | `A`", "| budget | "):
        assert row in head, row
    assert text.index("## Ladder") < text.index("## What the full budget buys")
    assert text.index("## What the full budget buys") < text.index("## Rankings per target")
    # no fit at the first rung: one sentence says why, once; no column, no footnotes
    assert text.count("No column predicts the full budget") == 1
    assert "predicted at" not in text and "fallback" not in text


def test_the_runner_up_lead_is_read_where_both_ran(sweep, report):
    result = analyse_sweep(sweep, n_boot=50)
    runner = result.runner_up
    # B (the pick's size, stopped at rung 2) ranks above C (the other size at rung 3):
    # the ladder compares configs read at different rungs where both ran
    a, b = accuracy("A", 2), accuracy("B", 2)
    se_a, se_b = (math.sqrt(p * (1 - p) / N) for p in (a, b))
    assert runner["config_id"] == "B" and runner["compared_at"].startswith("rung 2")
    assert runner["diff"] == pytest.approx(a - b)
    assert runner["diff_se"] == pytest.approx(math.hypot(se_a, se_b))
    assert runner["clear"] == (a - b - 1.6449 * math.hypot(se_a, se_b) > 0)
    assert difference(0.5, 0.1, 0.45, 0.1, 1.0, "x")["clear"] is False
    budget_rows = result.findings[result.findings["by"] == "budget"]
    assert list(budget_rows["config_id"]) == ["A", "A", "A"]


def test_summary_opens_with_the_reliability_then_the_pick_and_the_figures_are_written(report):
    lines = report["summary"].splitlines()
    assert lines[1].startswith("ranking reliability: the pilots can rank these configs")
    assert lines[2].startswith("pick: A tiny-m/rule G4 mu1")
    assert lines[3].startswith("runner-up: B")
    assert any(line.startswith("best by size: ") for line in lines[:8])
    import matplotlib.image as mpimg

    for key in ("curves_png", "frontier_png", "sizes_png"):
        image = mpimg.imread(report["paths"][key])
        assert image.shape[0] > 300 and image.shape[1] > 300, key


def test_the_picks_prediction_at_f_is_its_last_read_plus_the_calibrated_shift(sweep, report):
    """The pick's warm start and 3 rung ends are 3 points past 0 for 3 parameters: the
    sigmoid falls back, but the reported prediction is calibrated persistence
    (race.analysis.forecast), read at the pick's highest rung, and race validate gets it."""
    from race.analysis.forecast import predict

    result = analyse_sweep(sweep, n_boot=50)
    fits = result.lineage_fits.set_index("config_id")
    assert fits.loc["A", "method"] == "last" and "3 points" in fits.loc["A", "reason"]
    assert fits.loc["A", "last_flops"] == spent(3)
    mine = result.predictions["A"]
    expected = predict(accuracy("A", 3), spent(3) / FULL)
    assert (mine["prediction"], mine["lo"], mine["hi"]) == pytest.approx(expected)
    assert "sigmoid through its rungs" not in (sweep / "leaderboard.md").read_text()
    assert results.read_json(sweep / "selection.json")["predicted_at_full"]["A"][
        "model"] == "calibrated persistence"


def test_best_by_target_reads_the_by_condition_table_and_never_a_warm_start(sweep, report):
    result = analyse_sweep(sweep, n_boot=50)
    text = (sweep / "leaderboard.md").read_text()
    best = text[text.index("## Best allocation by target"):].splitlines()[2]
    rows = result.findings[result.findings["by"] == "target"]
    assert list(rows["value"]) == ["val", "ood", "test"]
    for row in rows.itertuples():  # the line says what the table's target rows say
        assert f"{row.value} -> {row.config_id} ({row.score:.3f} at {row.read_at}, n={N})" \
            in best, best
        assert f"| target | {row.value} | `{row.config_id}` |" in text
    # the reported targets are scored at the last rung only: read there, not at rung 1,
    # where every config of a size holds the same warm start (A and B: tiny-m's 0.450 on test)
    for target in ("test", "ood"):
        assert f"{target} -> A ({accuracy('A', 3, target):.3f} at rung 3 (F/12)" in best
        assert f"({accuracy('A', 0, target):.3f} at" not in best
        assert target in result.unranked and target not in result.ranked
        section = text[text.index(f"### Target: {target}, n={N} problems per read"):]
        assert section.split("\n\n")[1].startswith(f"Not ranked: no config was scored on "
                                                   f"`{target}` past its warm start")
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert set(board["target"]) == {"val"}  # only rung 1's trained reads are ranked
    assert result.by_target["test"] == result.by_target["ood"] == "A"


@pytest.mark.parametrize("x0", [1.1e10, 9e9])
def test_no_decade_label_sits_on_the_warm_starts_start_label(x0):
    from race.report.ladder_plots import START_ROOM_IN, _mark_start
    from race.report.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.set_xscale("log")
    ax.plot([x0, 1e11, 3.5e12], [0.1, 0.3, 0.6])
    _mark_start(ax, x0)
    fig.canvas.draw()
    shown = [t for t in ax.get_xticklabels() if t.get_text()
             and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
    start = ax.transData.transform((x0, 1))[0]
    gaps = [abs(ax.transData.transform((t.get_position()[0], 1))[0] - start) for t in shown]
    plt.close(fig)
    assert len(shown) >= 2  # the other decades keep their labels
    assert min(gaps) >= START_ROOM_IN * fig.dpi
