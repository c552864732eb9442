"""What a report must not claim: a recommendation where nothing learned, a winner picked
by order from a tie at zero, two intervals for one read, the plan as the spend, an
allocation "change" that is only a config id's budget (hand-made ladder folders)."""

import math

import pandas as pd
import pytest

from race.analysis.headline import ties
from race.analysis.sweep_analysis import analyse_sweep
from race.core.stats import binomial_se, normal_interval
from race.errors import UsageError
from race.report.budgets import write_budget_report
from race.report.write import write_report
from race.run.full_runs import plan_validation
from race.store import io as results

FULL = 4.8e12  # full-run budget F, FLOPs
RUNGS = (1 / 48, 1 / 24, 1 / 12)


def budget(rung):
    return FULL * RUNGS[rung - 1]


def eval_row(acc, n, target, rung, flops):
    hits = round(acc * n)
    return {"kind": "eval", "target": target, "checkpoint": 0.0 if rung == 0 else 1.0,
            "accuracy": acc, "mean_reward": 0.0, "correct": [1] * hits + [0] * (n - hits),
            "flops": {"model": {"rollout": 0.3 * flops, "learning": 0.7 * flops,
                                "feedback": 0.0, "eval": 1e9}}}


def write_cell(sweep, name, knobs, scores, rung, *, n, reward_paid, last):
    """One rung's cell of config ``name``: it spends exactly its rung's budget (cumulative
    along its lineage), scores ``scores[rung]`` on val (``scores[0]``: the warm start),
    and its train reward is 0 at every step unless ``reward_paid``."""
    model, reward = knobs
    cell = f"{name}-r{rung}"
    folder = sweep / "cells" / cell
    results.write_json(folder / "spec.json", {
        "cell_id": cell, "model": model, "config_id": name if rung == 1 else f"{name}@{rung}",
        "seed": 0, "prompts_per_step": 8, "group_size": 4, "max_new_tokens": 40,
        "update_epochs": 1, "minibatch_size": 0, "lr": 3e-4, "lora_rank": 16,
        "kl_coef": 0.0, "temperature": 1.0, "backend": "hf", "convention": "model",
        "budget_flops": budget(rung), "select_target": "val",
        "eval_targets": ["val", "test"], "score_start": rung == 1,
        "continues": f"{name}-r{rung - 1}" if rung > 1 else "", "task": {"name": "arith"},
        "reward": {"name": reward, "kind": "rule" if reward == "rule" else "prm"}})
    before = budget(rung - 1) if rung > 1 else 0.0
    rows = [eval_row(scores[0], n, t, 0, 0.0) for t in ("val", "test")]
    for step in range(1, 5):
        rows.append({"kind": "step", "step": 4 * (rung - 1) + step,
                     "charged_flops": before + (budget(rung) - before) * step / 4,
                     "train_reward": 0.1 * step if reward_paid else 0.0,
                     "truncation_rate": 0.0, "max_new_tokens": 40})
    rows += [eval_row(scores[r], n, "val", r, budget(r)) for r in range(1, rung + 1)]
    if last:
        rows.append(eval_row(scores[rung], n, "test", rung, budget(rung)))
    results.write_jsonl(folder / "metrics.jsonl", rows)
    total = budget(rung)
    results.write_json(folder / "summary.json", {
        "cell_id": cell, "status": "ok", "error": None, "budget_flops": total,
        "convention": "model", "steps": 4 * rung, "total_flops": total, "device": "cpu",
        "flops": {"rollout": 0.3 * total, "learning": 0.7 * total, "feedback": 0.0,
                  "eval": 1e9},
        "wall_s": {"load": 30.0, "rollout": 3.0, "learning": 7.0, "feedback": 0.0,
                   "eval": 20.0},
        "final_eval": {"val": {"accuracy": scores[rung], "mean_reward": 0.0},
                       "test": {"accuracy": scores[rung] if last else scores[0],
                                "mean_reward": 0.0}},
        "initial_eval": {t: {"accuracy": scores[0], "mean_reward": 0.0}
                         for t in ("val", "test")}})


def make_ladder(root, configs, ladder, *, n, refused=0, reward_paid=False, planned=None):
    """A ladder folder: ``configs`` name -> ((model, reward), val score per rung from the
    warm start), ``ladder`` the configs of each rung (the last's scored on test too);
    ``refused`` more cells refused at planning (in sweep.json, never run)."""
    sweep = root / "arith-4.8e12-ladder"
    cells = [{"cell_id": f"{c}-r1", "refused": ""} for c in ladder[0]]
    cells += [{"cell_id": None, "refused": "one worst-case step (6.1e+10 FLOPs) exceeds "
                                           "the pilot budget"} for _ in range(refused)]
    results.write_json(sweep / "sweep.json", {"budget_flops": FULL,
                                              "pilot_fraction": RUNGS[0], "task": "arith",
                                              "cells": cells})
    rungs = []
    for number, names in enumerate(ladder, 1):
        last = number == len(ladder)
        above = ladder[number] if not last else ()
        candidates = []
        for name in sorted(names, key=lambda c: (-configs[c][1][number], c)):
            knobs, scores = configs[name]
            write_cell(sweep, name, knobs, scores, number, n=n, reward_paid=reward_paid,
                       last=last)
            se = binomial_se(scores[number], n)
            candidates.append({
                "config": name, "cell_ids": [f"{name}-r{number}"], "model": knobs[0],
                "reward": knobs[1], "group_size": 4, "update_epochs": 1,
                "score": scores[number], "se": se, "predicted": scores[number],
                "predicted_se": se, "lcb": scores[number] - se, "ucb": scores[number] + se,
                "guard": None, "promoted": name in above,
                "why": "top lcb" if name in above else "below the cut"})
        rungs.append({"rung": number, "fraction": RUNGS[number - 1],
                      "budget_flops": budget(number),
                      "cells": [f"{c}-r{number}" for c in names], "candidates": candidates})
    fractions = [0.0, *RUNGS]
    counts = planned or [len(r) for r in ladder]
    share = sum(k * (fractions[i + 1] - fractions[i]) for i, k in enumerate(counts))
    results.write_json(sweep / "ladder.json", {
        "rungs": rungs, "planned_counts": counts, "cost_share": share, "reduction": 2,
        "z": 1.0, "promote_by": "last", "keep_sizes": "close", "scaled": 1.0})
    return sweep


ZERO = {"A": (("tiny-m", "rule"), (0.0, 0.0, 0.0, 0.0)),
        "B": (("tiny-m", "prm-tiny-s"), (0.0, 0.0, 0.0, 0.0))}


@pytest.fixture(scope="module")
def zero(tmp_path_factory):
    """Nothing learned: 16 problems a read, every read 0.000, train reward 0 everywhere;
    2 of 4 planned configs refused, so the ladder ran 2 -> 2 -> 1 of 4 -> 2 -> 1."""
    sweep = make_ladder(tmp_path_factory.mktemp("zero"), ZERO, (("A", "B"), ("A", "B"),
                                                                 ("A",)),
                        n=16, refused=2, planned=[4, 2, 1])
    return sweep, write_report(sweep, n_boot=50)


def test_a_sweep_where_nothing_learned_opens_with_it_and_recommends_nothing(zero):
    sweep, report = zero
    text = (sweep / "leaderboard.md").read_text()
    opening = "\n".join(text.splitlines()[:12])
    assert opening.splitlines()[2].startswith("**Nothing learned at these budgets.**")
    assert "reward never paid: train reward 0 at every step" in opening
    assert "No validation runs" in opening and "Pick:" not in text
    assert "Best allocation by condition" not in text
    summary = report["summary"].splitlines()
    assert summary[1].startswith("nothing learned at these budgets")
    assert any(line.startswith("no validation runs: nothing learned") for line in summary)
    assert not any(line.startswith("selected for validation") for line in summary)
    selection = results.read_json(sweep / "selection.json")
    assert selection["pick"] is None and selection["selected"] == []
    assert selection["pick_reason"].startswith("nothing learned at these budgets: reward "
                                               "never paid")
    assert report["selected"] == []
    # the guard section says it too, config by config
    guards = text[text.index("## Guards against late failure"):]
    assert "no learning: `A`" in guards and "no learning: `B`" in guards
    with pytest.raises(UsageError, match=r"selects no config \(nothing learned"):
        plan_validation(sweep, None)


def test_one_read_has_one_interval_and_it_says_what_it_covers(zero):
    sweep, _ = zero
    text = (sweep / "leaderboard.md").read_text()
    # 0 of 16: SE floored at 1/16, the interval the ladder's rungs read, in every table
    lo, hi = normal_interval(0.0, 1 / 16, 0.9)
    shown = f"0.000 [{lo:.2f}, {hi:.2f}]"
    assert shown == "0.000 [0.00, 0.10]"
    table = text[text.index("#### Allocation configs"):text.index("#### Regimes")]
    assert table.count(shown) == 2 and "[0.00, 0.00]" not in text
    assert "| 1 | `A`" in table and "| 1 | `B`" in table  # a tie shares its rank
    assert "problems only" in table
    assert "seed variance was not measured (one seed per config)" in text
    assert "1.2x too narrow" in text and "docs/reports.md#seed-variance" in text
    assert results.read_json(sweep / "selection.json")["intervals_cover"] == \
        "problems only (one seed)"


def test_the_leaderboard_gives_compute_as_spent_and_planned_and_why_they_differ(zero):
    sweep, _ = zero
    text = (sweep / "leaderboard.md").read_text()
    planned = 4 * RUNGS[0] + 2 * (RUNGS[1] - RUNGS[0]) + (RUNGS[2] - RUNGS[1])
    spent = 2 * RUNGS[0] + 2 * (RUNGS[1] - RUNGS[0]) + (RUNGS[2] - RUNGS[1])
    refused = 2 * RUNGS[0]  # 2 cells at the first rung's budget
    assert planned - spent == pytest.approx(refused)
    line = next(line for line in text.splitlines() if line.startswith("Pilot compute:"))
    assert line.startswith(f"Pilot compute: {spent:.1%} of one full run as spent (charged "
                           f"FLOPs of every cell), {planned:.1%} as planned.")
    assert f"2 cell(s) refused at planning, {refused:.1%} of the plan" in line
    assert "as planned." in line and "rungs ran fewer" not in line and "short" not in line
    assert "as planned.\n" not in text.replace(line, "")  # the plan alone is said nowhere
    card = (sweep / "compute_card.md").read_text()
    assert "5 cells (5 ok, 0 failed, 0 missing, by their summaries" in card
    assert "2 more refused at planning" in card


def test_cells_a_rung_compares_at_different_compute_show_their_spend(tmp_path):
    sweep = make_ladder(tmp_path, ZERO, (("A", "B"),), n=16)
    summary = results.read_json(sweep / "cells" / "B-r1" / "summary.json")
    results.write_json(sweep / "cells" / "B-r1" / "summary.json",
                       summary | {"total_flops": 0.43 * budget(1)})
    write_report(sweep, n_boot=20)
    text = (sweep / "leaderboard.md").read_text()
    assert "spent different compute (`A-r1` 1.00e+11, `B-r1` 4.30e+10 of 1.00e+11" in text
    assert "cannot match them" in text


MIXED = {"A": (("tiny-m", "rule"), (0.30, 0.45, 0.55)),  # learns, clearly
         "B": (("tiny-s", "rule"), (0.0, 0.0, 0.0)),
         "C": (("tiny-s", "prm-tiny-s"), (0.0, 0.0, 0.0))}


def test_a_tie_at_zero_names_no_winner(tmp_path):
    sweep = make_ladder(tmp_path, MIXED, (("A", "B", "C"), ("A",)), n=200,
                        reward_paid=True)
    report = write_report(sweep, n_boot=20)
    text = (sweep / "leaderboard.md").read_text()
    assert "**Pick: `A`" in text  # A learned: the pick stands
    assert "| size | tiny-s | tie of `B`, `C` (no winner) | - |" in text
    assert "tiny-s 0.000 [0.00, 0.01] (tie of B, C (no winner))" in report["summary"]
    result = analyse_sweep(sweep, n_boot=20)
    assert not result.learning.nothing
    assert set(result.learning.configs.query("not learned")["config"]) == {"B", "C"}
    # a target read on one config past its warm start (test: the last rung's A) cannot
    # say the targets agree
    assert result.by_target["agree"] is False
    assert result.by_target["message"].startswith(
        "the targets cannot be compared: only one config was scored past its warm start "
        "on test")
    assert ties("a", [("a", 0.0, 0.0), ("b", 0.0, 0.0), ("c", 0.3, 0.2)]) == ["a", "b"]
    assert ties("c", [("a", 0.0, 0.0), ("c", 0.3, 0.2)]) == []
    assert ties("a", [("a", 0.02, 0.0), ("b", 0.0, 0.0)]) == ["a", "b"]  # both hold 0


def test_the_headline_and_the_tables_give_one_read_one_interval(tmp_path):
    sweep = make_ladder(tmp_path, MIXED, (("A", "B", "C"),), n=200, reward_paid=True)
    write_report(sweep, n_boot=20)
    text = (sweep / "leaderboard.md").read_text()
    lo, hi = normal_interval(0.45, binomial_se(0.45, 200), 0.9)
    shown = f"0.450 [{lo:.2f}, {hi:.2f}]"
    head = text[:text.index("## Ladder")]
    pick = next(line for line in head.splitlines()
                if line.startswith(("**Pick: `A`", "**Provisional pick: `A`")))
    assert shown in pick
    assert f"| budget | F/48 (1.00e+11) | `A` | tiny-m/rule G4 mu1 | {shown} |" in head
    assert f"| target | val | `A` | tiny-m/rule G4 mu1 | {shown} |" in head
    table = text[text.index("#### Allocation configs"):]
    row = next(line for line in table.splitlines() if line.startswith("| 1 | `A`"))
    assert shown in row


def test_the_budgets_report_says_changes_only_where_the_knobs_change(tmp_path):
    """Config ids carry the pilot budget: the same allocation at two budgets is "same"."""
    folders = {}
    for budget_flops, best in ((1e12, "A"), (2e12, "A"), (4e12, "B")):
        scores = {"A": (0.3, 0.5 if best == "A" else 0.35),
                  "B": (0.3, 0.5 if best == "B" else 0.35)}
        configs = {f"{c}-{budget_flops:.0e}": (MIXED[c][0], s) for c, s in scores.items()}
        sweep = make_ladder(tmp_path / f"b{budget_flops:.0e}", configs,
                            (tuple(configs),), n=200, reward_paid=True)
        write_report(sweep, n_boot=20)
        folders[budget_flops] = sweep
    summary = write_budget_report(tmp_path, folders)
    lines = [line for line in summary.splitlines() if line.startswith("  val @")]
    assert [line.rsplit("(", 1)[1] for line in lines] == ["-)", "same)", "**changes**)"]
    frame = pd.read_csv(tmp_path / "budgets.csv")
    assert frame["config"].nunique() == 3  # three ids, two allocations
    assert math.isclose(frame["score"].iloc[0], 0.5)
