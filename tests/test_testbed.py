"""bench/testbed.py on hand-made banks at two budgets, F and 4F: the 4F bank's budgets above
F join the budget axis, a swap of the best allocation across budgets counts only when the
90% intervals exclude zero, and a single bank's output is what it was before the 4F bank.

Every cell scores 20 problems, the same pattern on both seeds (so the seed variance is 0
and each SE is the problem part alone): ``first(k)`` is right on problems 0..k-1."""

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

from bench import testbed

SCRIPT = Path(testbed.__file__)

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
    assert lines[-4:] == [
        "held-out seed: leaders and changes found on seeds [0], each condition's strongest "
        "change retested on seed 1 alone (90% intervals):",
        "  budget: G8 mu1 at m/rule/val/F x 1 but G4 mu1 at m/rule/val/F x 4: holds "
        "(+0.400 [+0.215, +0.585] and +0.400 [+0.215, +0.585])",
        "conditions whose change holds on the held-out seed: ['budget']",
        "min_gain_se=5.9 within_size_spread_se=3.6 conditional_changes=1 held_out_changes=1"]
    assert "conditions that change the best allocation: ['budget']" in lines


def test_a_swap_whose_intervals_overlap_does_not_count(tmp_path):
    # above F, G4 is best but leads by 1 problem of 20: 0.05, SE sqrt(0.05 / 20) = 0.05
    lines = run(f_bank(tmp_path), four_f_bank(tmp_path, g4_at_2f=11, g4_at_4f=11))
    assert [line for line in lines if "lead over G" in line][1:] == [
        f"  m      rule        val  F x {b:<7} G4 mu1    0.550  lead over G8 mu1: +0.050 "
        "[-0.032, +0.132]" for b in (2, 4)]
    assert lines[-5:-1] == [
        "conditions that change the best allocation: none",
        "",
        "held-out seed: leaders and changes found on seeds [0], each condition's strongest "
        "change retested on seed 1 alone (90% intervals):",
        "conditions whose change holds on the held-out seed: none"]
    assert lines[-1].endswith("conditional_changes=0 held_out_changes=0")


def test_a_single_bank_prints_what_it_printed_before_and_its_lines_stay_with_a_second(
        tmp_path):
    alone = run(f_bank(tmp_path))
    assert alone == [
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
        "min_gain_se=5.9 within_size_spread_se=3.6 conditional_changes=0 "
        "held_out_changes=0"]
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
    assert lines[-4:-1] == [
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
    assert out[-2] == ("prompts per step: conditions that change the best value: ['budget']; "
                       "holding on the held-out seed: ['budget']")
