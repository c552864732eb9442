"""bench/testbed.py on hand-made banks at two budgets, F and 4F: the 4F bank's budgets above
F join the budget axis, a swap of the best allocation across budgets counts only when the
90% intervals exclude zero, and a single bank's output is what it was before the 4F bank.

Every cell scores 20 problems, the same pattern on both seeds (so the seed variance is 0
and each SE is the problem part alone): ``first(k)`` is right on problems 0..k-1."""

import gzip
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bench.science import interactions as testbed

SCRIPT = Path(__file__).parents[1] / "bench" / "testbed.py"

F = 1e9
N = 20


def first(k: int) -> str:
    return "1" * k + "0" * (N - k)


def cell(full: float, group_size: int, seed: int, curve: dict[float, str]) -> dict:
    """One cell of model m, reward rule, mu 1, scored on val at each checkpoint of ``curve``."""
    return {"cell_id": f"{full:g}-{group_size}-{seed}", "config": f"{full:g}-{group_size}",
            "model": "m", "warmstart": {"flip": 0.6}, "lr": 3e-4, "reward": "rule",
            "group_size": group_size, "update_epochs": 1, "seed": seed, "budget_flops": full,
            "evals": [{"checkpoint": c, "target": "val", "correct": correct}
                      for c, correct in curve.items()],
            "steps": []}


def write_bank(path: Path, full: float, curves: dict[int, dict[float, str]]) -> Path:
    cells = [cell(full, g, seed, curve) for g, curve in curves.items() for seed in (0, 1)]
    with gzip.open(path, "wt") as f:
        json.dump({"budget_flops": full, "cells": cells}, f)
    return path


def f_bank(tmp_path: Path) -> Path:
    """At F, G8 (18 right) leads G4 (10 right); both start from 5 right."""
    return write_bank(tmp_path / "f.json.gz", F, {
        4: {0.0: first(5), 1.0: first(10)}, 8: {0.0: first(5), 1.0: first(18)}})


def four_f_bank(tmp_path: Path, g4_at_2f: int, g4_at_4f: int) -> Path:
    """At 2F and 4F (checkpoints 1/2 and 1), G4 has ``g4_at_2f`` and ``g4_at_4f`` right and
    G8 10. At its checkpoint 1/4 (= F) G4 leads G8 17 to 10: the opposite of the F bank,
    which the testbed reads at F instead."""
    return write_bank(tmp_path / "4f.json.gz", 4 * F, {
        4: {0.0: first(5), 0.25: first(17), 0.5: first(g4_at_2f), 1.0: first(g4_at_4f)},
        8: {0.0: first(5), 0.25: first(10), 0.5: first(10), 1.0: first(10)}})


def run(*banks: Path) -> list[str]:
    args = [a for bank in banks for a in ("--bank", str(bank))]
    out = subprocess.run([sys.executable, str(SCRIPT), *args], check=True,
                         capture_output=True, text=True)
    return out.stdout.splitlines()


def above_interactions(lines: list[str]) -> list[str]:
    """The lines above the interactions section (and the blank line before it): the output
    of the testbed before the interaction test was added, less its last line."""
    at = next(i for i, line in enumerate(lines)
              if line.startswith("interactions (leave-one-seed-out"))
    return lines[:at - 1]


# every world-1 bank here is f_bank (or one like it) on model m: the 8 interaction tests
# name tiny-m and tiny-l and go untested; the null runs at F on m rule, where G4 and G8 are
# both right on every problem of the first half (first(k), k >= 10), so the first half's
# leader is a tie broken by order (G4) and the second half's G8: a spurious change, as the
# halves of first(k) are not exchangeable (a real bank's problems are)
LAST = ("worlds=1 min_gain_se=5.9 within_size_spread_se=3.6 interactions_both=0 "
        "false_change_rate=1.00 ")


def test_a_larger_banks_checkpoints_are_budgets_in_units_of_f_read_above_f_only():
    cells = [cell(F, 4, 0, {0.0: "1", 0.5: "1", 1.0: "1"}),
             cell(4 * F, 4, 0, {0.0: "1", 0.125: "1", 0.25: "1", 0.5: "1", 1.0: "1"})]
    assert testbed.budgets(cells) == {0.5: (F, 0.5), 1.0: (F, 1.0), 2.0: (4 * F, 0.5),
                                      4.0: (4 * F, 1.0)}


def test_budgets_above_f_appear_and_a_swap_with_separate_intervals_counts(tmp_path):
    # the 4F bank named first: the testbed orders banks by budget
    lines = run(four_f_bank(tmp_path, g4_at_2f=14, g4_at_4f=18), f_bank(tmp_path))
    assert lines[:2] == [
        "bank f.json.gz: 4 cells, 2 configs, seeds [0, 1], full budget F=1e+09 FLOPs; "
        "scores on val unless named",
        "bank 4f.json.gz: 4 cells, 2 configs, seeds [0, 1], full budget 4F=4e+09 FLOPs"]
    # G8 - G4 at F: 8 problems of 20 differ by 1, so the lead is 0.4 and its SE
    # sqrt(var(diffs) / 20), var(diffs) = (8 * 0.6^2 + 12 * 0.4^2) / 19; the same at 4F,
    # swapped; at 2F 4 problems differ: lead 0.2, var(diffs) = (4 * 0.8^2 + 16 * 0.2^2) / 19
    se = math.sqrt((8 * 0.6**2 + 12 * 0.4**2) / 19 / N)
    assert (round(0.4 - 1.645 * se, 3), round(0.4 + 1.645 * se, 3)) == (0.215, 0.585)
    se = math.sqrt((4 * 0.8**2 + 16 * 0.2**2) / 19 / N)
    assert (round(0.2 - 1.645 * se, 3), round(0.2 + 1.645 * se, 3)) == (0.049, 0.351)
    assert [line for line in lines if " F x " in line and "lead over" in line] == [
        "  m      rule        val  F x 1       G8 mu1    0.900  lead over G4 mu1: +0.400 "
        "[+0.215, +0.585]",
        "  m      rule        val  F x 2       G4 mu1    0.700  lead over G8 mu1: +0.200 "
        "[+0.049, +0.351]",
        "  m      rule        val  F x 4       G4 mu1    0.900  lead over G8 mu1: +0.400 "
        "[+0.215, +0.585]"]
    assert ("  conditional on budget: G8 mu1 at m/rule/val/F x 1 but G4 mu1 at "
            "m/rule/val/F x 2 (each leads the other, 90% intervals excluding 0)") in lines
    # the best at each budget, with its SE: sqrt(0.9 * 0.1 * 20 / 19 / 20) for 18 of 20;
    # at F the F bank's G8, not the 4F bank's G4 at its checkpoint 1/4
    table = lines[lines.index("best allocation by budget (val mean (SE), of the configs with "
                              "cells there):") + 1:]
    assert table[:4] == ["  budget       m rule",
                         "  F x 1        G8 mu1 0.900 (0.069) of 2",
                         "  F x 2        G4 mu1 0.700 (0.105) of 2",
                         "  F x 4        G4 mu1 0.900 (0.069) of 2"]
    # where the banks meet, each config's two runs at F: G8 18 -> 10 right (8 problems
    # differ, SE as above), G4 10 -> 17 (7 differ: var(diffs) = (7*.65^2 + 13*.35^2) / 19)
    assert table[4:6] == [
        "  at F, m rule G8 mu1: the 4F bank's run 0.500, the F bank's 0.900, difference "
        "-0.400 (SE 0.112)",
        "  at F, m rule G4 mu1: the 4F bank's run 0.850, the F bank's 0.500, difference "
        "+0.350 (SE 0.109)"]
    # seed 1 repeats seed 0, so the change found on seed 0 holds on seed 1; of its two
    # pairs (F with 2F, F with 4F) the stronger is retested: F with 4F, both leads 0.4
    assert above_interactions(lines)[-3:] == [
        "held-out seed: leaders and changes found on seeds [0], each condition's strongest "
        "change retested on seed 1 alone (90% intervals):",
        "  budget: G8 mu1 at m/rule/val/F x 1 but G4 mu1 at m/rule/val/F x 4: holds "
        "(+0.400 [+0.215, +0.585] and +0.400 [+0.215, +0.585])",
        "conditions whose change holds on the held-out seed: ['budget']"]
    assert lines[-1] == LAST + "conditional_changes=1 held_out_changes=1"
    assert "conditions that change the best allocation: ['budget']" in lines


def test_a_swap_whose_intervals_overlap_does_not_count(tmp_path):
    # above F, G4 is best but leads by 1 problem of 20: 0.05, SE sqrt(0.05 / 20) = 0.05
    lines = run(f_bank(tmp_path), four_f_bank(tmp_path, g4_at_2f=11, g4_at_4f=11))
    assert [line for line in lines if "lead over G" in line][1:] == [
        f"  m      rule        val  F x {b:<7} G4 mu1    0.550  lead over G8 mu1: +0.050 "
        "[-0.032, +0.132]" for b in (2, 4)]
    assert above_interactions(lines)[-4:] == [
        "conditions that change the best allocation: none",
        "",
        "held-out seed: leaders and changes found on seeds [0], each condition's strongest "
        "change retested on seed 1 alone (90% intervals):",
        "conditions whose change holds on the held-out seed: none"]
    assert lines[-1].endswith("conditional_changes=0 held_out_changes=0")


def test_a_single_bank_prints_what_it_printed_before_and_its_lines_stay_with_a_second(
        tmp_path):
    alone = run(f_bank(tmp_path))
    assert above_interactions(alone) + alone[-1:] == [
        "bank f.json.gz: 4 cells, 2 configs, seeds [0, 1], full budget F=1e+09 FLOPs; "
        "scores on val unless named",
        "",
        "size    reward            warm start       best at F         gain (SE)      worst at F"
        "  best / worst config",
        "m       rule            0.250 (0.099)    0.900 (0.069)    +0.650 (0.109)    0.500 "
        "(0.115)  G8 mu1 rule / G4 mu1 rule",
        "",
        "every target at F (seed means), per size: the warm start, then its configs' "
        "lowest / median / highest",
        "  m       val     0.250   0.500 / 0.700 / 0.900  (2 configs)",
        "",
        "best allocation by condition (lead over the runner-up, 90% interval):",
        "  m      rule        val  F x 1       G8 mu1    0.900  lead over G4 mu1: +0.400 "
        "[+0.215, +0.585]",
        "",
        "search by budget on val: the best G4 config minus the best G8 config, 90% interval",
        "  budget      m rule",
        "  F x 1       -0.400 [-0.585, -0.215]",
        "",
        "per size, best config's gain over its warm start at F, in SE: m 5.9",
        "per size, best vs worst config at F, in SE: m 3.6",
        "conditions that change the best allocation: none",
        "",
        "held-out seed: leaders and changes found on seeds [0], each condition's strongest "
        "change retested on seed 1 alone (90% intervals):",
        "conditions whose change holds on the held-out seed: none",
        LAST + "conditional_changes=0 held_out_changes=0"]
    both = iter(run(f_bank(tmp_path), four_f_bank(tmp_path, 11, 11)))
    assert all(line in both for line in alone)  # in order, among the added lines


def test_a_change_the_held_out_seed_does_not_repeat_is_found_but_does_not_hold(tmp_path):
    """Seeds 0 and 1 swap the best allocation between F/2 and F (G8 then G4, 18 of 20 right
    against 10); seed 2 has G4 and G8 level at both (14 each). The pooled seeds still find
    the swap; on the held-out seed 2 both leads are 0 (each config right on 14 problems, 6
    of them different), and their SE adds the seed-to-seed variance seeds 0 and 1 show
    (none here: they agree), so the change does not hold."""
    swap = {4: {0.0: first(5), 0.5: first(10), 1.0: first(18)},
            8: {0.0: first(5), 0.5: first(18), 1.0: first(10)}}
    cells = [cell(F, g, seed, curve) for g, curve in swap.items() for seed in (0, 1)]
    last = "0" * 6 + "1" * 14
    cells += [cell(F, 4, 2, {0.0: first(5), 0.5: first(14), 1.0: first(14)}),
              cell(F, 8, 2, {0.0: first(5), 0.5: last, 1.0: last})]
    path = tmp_path / "bank.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"budget_flops": F, "cells": cells}, f)
    lines = run(path)
    assert "conditions that change the best allocation: ['budget']" in lines
    assert above_interactions(lines)[-3:] == [
        "held-out seed: leaders and changes found on seeds [0, 1], each condition's "
        "strongest change retested on seed 2 alone (90% intervals):",
        "  budget: G8 mu1 at m/rule/val/F x 0.5 but G4 mu1 at m/rule/val/F x 1: does not "
        "hold (+0.000 [-0.292, +0.292] and +0.000 [-0.292, +0.292])",
        "conditions whose change holds on the held-out seed: none"]
    assert lines[-1].endswith("conditional_changes=1 held_out_changes=0")


def test_the_held_out_lead_adds_the_seed_variance_of_the_other_seeds():
    """One seed's score gains the per-seed variance of its config's other seeds: two seeds
    at 0.5 and 0.7 on 20 problems have var(seed means) = 0.02, a single seed's mean 0.02."""
    seeds = [cell(F, 4, s, {1.0: first(k)}) for s, k in ((0, 10), (1, 14))]
    others = testbed.score(seeds, "val", 1.0)
    one = testbed.score([cell(F, 4, 2, {1.0: first(12)})], "val", 1.0)
    widened = testbed._with_seed_variance(one, others)
    assert math.isclose(widened["se"] ** 2, one["se"] ** 2 + 0.02)
    assert testbed._with_seed_variance(one, one) == one  # one seed shows no seed variance


def test_the_prompts_bank_names_each_value_and_finds_where_the_best_one_changes(tmp_path):
    """P4 leads at F/2 (16 right against 10 and 8) and P16 at F (18 against 10 and 12):
    the table names each value, the change by budget counts and holds on seed 1 (which
    repeats seed 0), and the grid's 8 here is set against the F bank's run of G4 mu1."""
    curves = {4: {0.5: first(16), 1.0: first(10)}, 8: {0.5: first(10), 1.0: first(12)},
              16: {0.5: first(8), 1.0: first(18)}}
    cells = [cell(F, 4, seed, curve) | {"cell_id": f"p{p}-{seed}", "config": f"p{p}",
                                        "prompts_per_step": p}
             for p, curve in curves.items() for seed in (0, 1)]
    with gzip.open(tmp_path / "p.json.gz", "wt") as f:
        json.dump({"budget_flops": F, "cells": cells}, f)
    # the figure script draws it beside the grid's figure
    figure = subprocess.run([sys.executable, str(SCRIPT.with_name("testbed_figure.py")),
                             "--bank", str(f_bank(tmp_path)), "--prompts-bank",
                             str(tmp_path / "p.json.gz"), "--out", str(tmp_path / "g.png")],
                            check=True, capture_output=True, text=True).stdout
    assert figure.splitlines() == [f"wrote {tmp_path / 'g.png'}",
                                   f"wrote {tmp_path / 'testbed_prompts.png'}"]
    assert (tmp_path / "testbed_prompts.png").stat().st_size > 0
    out = subprocess.run([sys.executable, str(SCRIPT), "--bank", str(f_bank(tmp_path)),
                          "--prompts-bank", str(tmp_path / "p.json.gz")], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    at = out.index("  m rule G4 mu1")
    assert out[at + 1].startswith("    F x 0.5     P4 0.800 (0.092)  P8 0.500 (0.115)  "
                                  "P16 0.400 (0.112)   best P4 +0.300 [")
    assert out[at + 2].startswith("    F x 1       P4 0.500 (0.115)  P8 0.600 (0.112)  "
                                  "P16 0.900 (0.069)   best P16 +0.300 [")
    # the F bank's G4 mu1 reads 10 of 20 at F, the rerun of P8 here 12
    assert out[at + 3] == ("    P8 at F here 0.600, in the F bank 0.500: difference +0.100 "
                           "(SE 0.069)")
    assert ("  prompts per step conditional on budget: P4 at m/rule/val/F x 0.5 but P16 at "
            "m/rule/val/F x 1 (each leads the other, 90% intervals excluding 0)") in out
    assert above_interactions(out)[-1] == (
        "prompts per step: conditions that change the best value: ['budget']; holding on the "
        "held-out seed: ['budget']")


# --- the interaction test, its null and the default-grid check, on hand-made F banks -----

def grid_cell(model: str, g: int, mu: int, seed: int, correct: str | dict[float, str],
              reward: str = "rule") -> dict:
    """A cell of the interaction grid (P8), scored on val at F (or at each checkpoint of a
    ``{checkpoint: correct}`` curve)."""
    curve = correct if isinstance(correct, dict) else {1.0: correct}
    return {"cell_id": f"{model}-{reward}-{g}-{mu}-{seed}", "config": f"{model}-{reward}-{g}-{mu}",
            "model": model, "reward": reward, "group_size": g, "update_epochs": mu,
            "prompts_per_step": 8, "seed": seed, "budget_flops": F,
            "evals": [{"checkpoint": c, "target": "val", "correct": x,
                       "accuracy": x.count("1") / len(x)} for c, x in curve.items()]}


def right(k: int, n: int = 40) -> str:
    return "1" * k + "0" * (n - k)


def planted(seeds=(0, 1, 2)) -> list[dict]:
    """G2 mu1 right on 36 of 40 problems at tiny-m and 16 at tiny-l, G4 mu1 the reverse, on
    every seed; G8 mu1 right on 10 at both."""
    scores = {(2, 1): (36, 16), (4, 1): (16, 36), (8, 1): (10, 10)}
    return [grid_cell(model, g, mu, seed, right(ks[i]))
            for (g, mu), ks in scores.items() for i, model in enumerate(("tiny-m", "tiny-l"))
            for seed in seeds]


SIZE = ("size", ("tiny-m", "rule", "val", 1.0), ("tiny-l", "rule", "val", 1.0))


def test_a_planted_interaction_is_found_with_its_interval_above_zero():
    cells = planted()
    result = testbed.interaction(cells, *SIZE, testbed.budgets(cells))
    # each rotation: G2 mu1 leads at tiny-m, G4 mu1 at tiny-l; on the held-out seed
    # G2 - G4 is +0.5 at tiny-m and -0.5 at tiny-l, so I_s = 1.0; each side's diffs are 1
    # on 20 problems and 0 on 20: var = 0.25 * 40 / 39, se_side^2 = var / 40
    assert [(r.seed, r.lead_a, r.lead_b, r.value) for r in result.rotations] == [
        (s, "G2 mu1", "G4 mu1", 1.0) for s in (0, 1, 2)]
    se_s = math.sqrt(2 * 0.25 / 39)
    assert math.isclose(result.rotations[0].se, se_s)
    # the seeds agree (spread 0), so the SE is the problem floor sqrt(3 se_s^2) / 3
    assert math.isclose(result.se, se_s / math.sqrt(3))
    assert result.mean == 1.0 and result.lo > 0 and result.verdict == "changes"
    labels = dict(testbed.interaction_tests(cells))
    assert labels["size tiny-m|tiny-l at rule, F"].verdict == "changes"
    assert labels["reward rule|prm-tiny-s at tiny-m, F"].verdict == "untested"


def test_no_planted_effect_gives_an_interval_that_holds_zero():
    """Four configs right on each of 100 problems with probability 0.6, independently per
    size and seed (RNG seed 0): the leaders differ by noise alone."""
    rng = random.Random(0)
    cells = [grid_cell(model, g, 1, seed, "".join(
                 "1" if rng.random() < 0.6 else "0" for _ in range(100)))
             for model in ("tiny-m", "tiny-l") for g in (2, 4, 8, 16) for seed in (0, 1, 2)]
    result = testbed.interaction(cells, *SIZE, testbed.budgets(cells))
    assert len(result.rotations) == 3
    assert result.lo <= 0 <= result.hi and result.verdict in ("no change", "same leader")


def test_the_interaction_test_needs_two_conditions_that_differ_in_its_dimension_alone():
    with pytest.raises(ValueError, match="'size' alone"):
        testbed.interaction([], "size", ("tiny-m", "rule", "val", 1.0),
                            ("tiny-l", "prm-tiny-s", "val", 1.0), {})


def test_the_null_halves_the_problems_and_rotates_the_second_halfs_seeds():
    cells = [grid_cell("m", 2, 1, seed, {0.5: "1100", 1.0: "1110"}) for seed in (0, 1, 2)]
    null = testbed.null_cells(cells)
    a = [c for c in null if c["reward"] == "rule|A"]
    b = [c for c in null if c["reward"] == "rule|B"]
    assert [c["seed"] for c in a] == [0, 1, 2] and [c["seed"] for c in b] == [1, 2, 0]
    assert [(r["correct"], r["accuracy"]) for r in a[0]["evals"]] == [("11", 1.0), ("11", 1.0)]
    assert [(r["correct"], r["accuracy"]) for r in b[0]["evals"]] == [("00", 0.0), ("10", 0.5)]
    assert cells[0]["evals"][0]["correct"] == "1100"  # the bank's cells are left as they are


def test_the_null_on_a_bank_without_interaction_finds_no_change():
    """Every config right on the same 24 of 40 problems (their order shuffled, so the two
    halves are alike) on every seed but for one problem flipped per config: the halves'
    leaders differ by noise alone, and no null test changes."""
    rng = random.Random(0)
    base = list(right(24))
    rng.shuffle(base)
    cells = []
    for g, seed in ((g, s) for g in (2, 4, 8, 16) for s in (0, 1, 2)):
        flip = list(base)
        i = rng.randrange(40)
        flip[i] = "1" if flip[i] == "0" else "0"
        cells.append(grid_cell("tiny-m", g, 1, seed, "".join(flip)))
    results = testbed.null_interactions(cells)
    assert [label for label, _ in results] == ["null tiny-m rule F x 1"]
    assert testbed.false_changes(results) == (0, 1)


def test_the_default_grid_is_read_from_its_yaml_and_lies_in_the_interaction_grid():
    assert testbed.default_grid() == {(2, 1, 8), (2, 2, 8), (8, 1, 8), (8, 2, 8)}
    assert testbed.default_grid() <= testbed.INTERACTION_GRID


def default_bank(best: tuple[int, int]) -> list[dict]:
    """``best`` right on 36 of 40 problems on every seed; G2 mu1, G8 mu2 and G4 mu1 on 20."""
    configs = {(2, 1), (8, 2), (4, 1), best}
    return [grid_cell("tiny-m", g, mu, seed, right(36 if (g, mu) == best else 20))
            for g, mu in sorted(configs) for seed in (0, 1, 2)]


def test_the_default_grid_check_fails_when_a_config_off_it_is_far_ahead(capsys):
    assert not testbed.default_grid_check(default_bank(best=(16, 1)))
    (row,) = testbed.default_grid_rows(default_bank(best=(16, 1)))
    assert (row["best"], row["default"], row["gap"]) == ("G16 mu1", "G2 mu1", 0.4)
    assert row["lo"] > 0 and not row["holds"]
    assert capsys.readouterr().out.rstrip().endswith("FAILS")


def test_the_default_grid_check_holds_when_the_defaults_best_is_the_best():
    assert testbed.default_grid_check(default_bank(best=(8, 2)))
    (row,) = testbed.default_grid_rows(default_bank(best=(8, 2)))
    assert (row["best"], row["default"], row["gap"], row["holds"]) == (
        "G8 mu2", "G8 mu2", 0.0, True)


def test_worlds_each_run_the_tests_and_a_missing_bank_is_skipped(tmp_path, capsys):
    """Two worlds with the planted bank: the size test at rule changes in both; a world
    whose bank is missing is named and left out of the count."""
    paths = []
    for name in ("one", "two"):
        paths.append(tmp_path / f"{name}.json.gz")
        with gzip.open(paths[-1], "wt") as f:
            json.dump({"budget_flops": F, "cells": planted()}, f)
    found = testbed._interactions([("world 1", paths[:1]), ("world 2", paths[1:]),
                                   ("world 3", [tmp_path / "none.json.gz"])])
    out = capsys.readouterr().out.splitlines()
    assert "world 3: no bank yet (" + str(tmp_path / "none.json.gz") + " missing)" in out
    assert testbed._last_line(found, {}, {}, [], None).startswith(
        "worlds=2 min_gain_se=")
    assert "interactions_both=1 " in testbed._last_line(found, {}, {}, [], None)
    testbed._interactions([("world 2", [tmp_path / "none.json.gz"])])
    assert ("world 2: no bank yet (python -m bench.testbed_bank --world 2 run)"
            in capsys.readouterr().out.splitlines())
