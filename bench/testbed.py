"""What the embedded testbed shows: does post-training move each size off its warm start,
do allocations differ, and does the best allocation change with the conditions?

Reads one or more curve banks (``bench/curve_bank.py`` exports one: the default grid's
configs run to a full budget with dense checkpoints, several seeds) and prints, per size
and reward system:

- the warm start (checkpoint 0, shared by every config of a size) and the best and worst
  config at F, each as the mean over seeds with its SE;
- per size and evaluation target, the warm start and the lowest, median and highest
  config at F (does a target discriminate, and does training move it);
- at each budget, the larger size's best config minus the smaller's, and the smallest
  G's best config minus the largest G's (the price of search), with 90% intervals;
- the best allocation (group size G and update epochs mu, with the reward system when it
  is not the condition) at each budget (checkpoints of the full-budget curves: a pilot's
  lr is constant, so a curve read at F/4 is the run a budget of F/4 buys), size, reward
  system and evaluation target, with a 90% interval on its lead over the runner-up.

F is the smallest bank's full budget; every checkpoint is a budget in units of F (a 4F
bank's checkpoint c is the budget 4c F). The warm start, best and worst config at F and the
last line's ``min_gain_se`` and ``within_size_spread_se`` are read from the F bank alone.
A budget is read from the smallest bank that reaches it, so the banks never mix: a config
run in both the F and the 4F bank is read from the F bank's cells up to F and from the 4F
bank's above F (2F, 3F, 4F). Only the configs with cells at a budget compare there (the 4F
bank of ``bench/curve_bank.py`` runs tiny-m's two best rule configs). When the banks span
more than one budget, a last section gives the best allocation at each budget from the
first checkpoint to the largest bank's full budget, on ``val``, with its SE, then each
config in two banks as both runs score it at F, where the budget axis changes banks.

Standard errors combine the seeds and the problems: a config's score is its seed mean on
the same ``n`` problems at every checkpoint; ``SE^2 = var(seed means) / seeds + var(per
problem) / n``. A gain over the warm start is paired on the problems (each problem's
seed-mean score at F minus its score at the start).

A condition *changes* the best allocation when two of its values each have a different
best allocation, and each leads the other's best by more than 1.645 SE of the difference
(90% intervals of the two leads exclude zero in opposite directions); across budgets,
both allocations need cells at both budgets.

That count flatters: each leader is the best of many configs (its lead over the runner-up
is biased up, the winner's curse), and a grid of 144 conditions offers hundreds of pairs
to find a change in. So the changes are found again with the last seed held out, and each
condition's strongest change there is retested once on the held-out seed (``held_out``):
``held_out_changes`` counts the conditions whose change holds on a seed that did not pick
it.

Usage: ``python bench/testbed.py [--bank bench/data/curve_bank_v4.json.gz --bank
bench/data/curve_bank_v4_4x.json.gz]`` (the default: both, the second where it exists;
``--bank`` may also name a bank's sweep folder, to read the cells finished so far).
Last line: ``min_gain_se=... within_size_spread_se=... conditional_changes=...
held_out_changes=...``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from bench.common import add_quick
from bench.curve_bank import GRID_PROMPTS, cell_curves
from race.store.cell import cell_dirs

DEFAULT_BANK = Path(__file__).parent / "data" / "curve_bank_v4.json.gz"
LARGER_BANK = Path(__file__).parent / "data" / "curve_bank_v4_4x.json.gz"  # 4F, read if there
# prompts per step 4, 8, 16 at each size and reward's leading (G, mu) at F, read if there
PROMPTS_BANK = Path(__file__).parent / "data" / "curve_bank_v4_prompts.json.gz"
Z90 = 1.645
SELECT = "val"  # the target configs are compared on; test and ood are reported beside it
DIMS = {"size": 0, "reward": 1, "target": 2, "budget": 3}  # index in a condition


def load(path: Path) -> list[dict]:
    """The bank's cells; or, for a sweep folder still running, its finished cells."""
    if path.is_dir():
        return [c for c in map(cell_curves, cell_dirs(path)) if c]
    with gzip.open(path, "rt") as f:
        return json.load(f)["cells"]


def missing_cells(path: Path) -> int:
    """How many cells of a partial bank's command were not ok when it was exported (0: a
    complete bank, or a sweep folder read as it stands)."""
    if path.is_dir():
        return 0
    with gzip.open(path, "rt") as f:
        return json.load(f).get("missing_cells", 0)


def _at(cell: dict, target: str, fraction: float) -> dict | None:
    """The cell's evaluation of ``target`` at ``fraction`` of its budget (None if absent)."""
    for row in cell["evals"]:
        if row["target"] == target and abs(row["checkpoint"] - fraction) < 1e-9:
            return row
    return None


def score(cells: list[dict], target: str, fraction: float) -> dict | None:
    """Seed-mean accuracy of one config's ``cells`` at ``fraction``, with its SE and the
    per-problem seed means (None when a seed lacks that checkpoint)."""
    rows = [_at(c, target, fraction) for c in cells]
    if not rows or any(r is None or "correct" not in r for r in rows):
        return None
    per_seed = [[int(ch) for ch in r["correct"]] for r in rows]
    n = min(map(len, per_seed))
    problem = [sum(s[i] for s in per_seed) / len(per_seed) for i in range(n)]
    means = [sum(s[:n]) / n for s in per_seed]
    mean = sum(means) / len(means)
    seed_var = statistics.variance(means) if len(means) > 1 else 0.0
    problem_var = statistics.variance(problem) if n > 1 else 0.0
    return {"mean": mean, "se": math.sqrt(seed_var / len(means) + problem_var / n),
            "problem": problem, "seeds": len(means), "n": n}


def paired(a: dict, b: dict) -> tuple[float, float]:
    """``a - b`` on the same problems, and its SE (problems and seeds)."""
    n = min(a["n"], b["n"])
    diffs = [a["problem"][i] - b["problem"][i] for i in range(n)]
    mean = sum(diffs) / n
    problem_var = statistics.variance(diffs) / n
    # the seed part: each side's seed variance, already inside its own SE
    seed_var = max(0.0, a["se"] ** 2 - statistics.variance(a["problem"]) / a["n"]) + max(
        0.0, b["se"] ** 2 - statistics.variance(b["problem"]) / b["n"])
    return mean, math.sqrt(problem_var + seed_var)


def size_order(model: str) -> tuple[int, str]:
    """Sort key of policy sizes, smallest first (the tiny family by name, others after)."""
    tiny = {"tiny-s": 0, "tiny-m": 1, "tiny-l": 2}
    return tiny.get(model, 9), model


def allocation(cell: dict, with_reward: bool = True) -> str:
    """``G8 mu1`` (``G8 mu1 P16`` off the grid's 8 prompts per step), with the reward."""
    prompts = cell.get("prompts_per_step") or GRID_PROMPTS
    base = f"G{cell['group_size']} mu{cell['update_epochs']}" + (
        f" P{prompts}" if prompts != GRID_PROMPTS else "")
    return f"{base} {cell['reward']}" if with_reward else base


def configs(cells: list[dict]) -> dict[str, list[dict]]:
    by = defaultdict(list)
    for cell in cells:
        by[cell["config"]].append(cell)
    return by


def at_full_budget(cells: list[dict]) -> list[dict]:
    """A bank's cells run to its full budget (a sweep folder may hold shorter pilots)."""
    budget = max(c["budget_flops"] for c in cells)
    return [c for c in cells if c["budget_flops"] == budget]


def load_banks(paths: list[Path]) -> list[tuple[Path, list[dict]]]:
    """Each bank's full-budget cells, smallest full budget first. Exits when two banks
    hold the same cell, or give one allocation different runs (lr or warm start): the
    budgets of an allocation must be points on one kind of run."""
    loaded = [(p, load(p)) for p in paths]
    if empty := [str(p) for p, cells in loaded if not cells]:
        sys.exit(f"--bank {', '.join(empty)}: no ok cell yet; name a bank with cells")
    banks = sorted(((p, at_full_budget(cells)) for p, cells in loaded),
                   key=lambda b: b[1][0]["budget_flops"])
    seen, runs = {}, {}
    for path, cells in banks:
        for cell in cells:
            if cell["cell_id"] in seen:
                sys.exit(f"--bank {path}: cell {cell['cell_id']} is also in --bank "
                         f"{seen[cell['cell_id']]}; name each bank once")
            seen[cell["cell_id"]] = path
            key = (cell["model"], allocation(cell))
            run = (cell.get("lr"), json.dumps(cell.get("warmstart", {}), sort_keys=True))
            first, where = runs.setdefault(key, (run, path))
            if first != run and where != path:  # one bank may hold an lr axis
                sys.exit(f"--bank {path}: {' '.join(key)} has lr/warm start {run} here but "
                         f"{first} in --bank {where}; compare banks of one testbed")
    return banks


def budgets(cells: list[dict]) -> dict[float, tuple[float, float]]:
    """Every checkpoint after 0 as a budget in units of F, the smallest full budget among
    ``cells``: budget -> (the full budget of the cells read there, their checkpoint).
    A budget is read from the smallest bank that reaches it (see the module docstring)."""
    fulls = sorted({c["budget_flops"] for c in cells})
    views, reached = {}, 0.0
    for full in fulls:
        for f in sorted({r["checkpoint"] for c in cells if c["budget_flops"] == full
                         for r in c["evals"]}):
            budget = f * full / fulls[0]
            if budget > reached * (1 + 1e-9):
                views[budget] = (full, f)
        reached = full / fulls[0]
    return views


def ranked(cells: list[dict], where: tuple, views: dict) -> list[tuple[str, dict]]:
    """The allocations (name, score) of ``where = (size, reward, target, budget)`` with
    cells at that budget, best first. A cell's ``axis`` names it where one axis alone is
    compared (``P4``: the prompts-per-step bank, whose (G, mu) is fixed per size and
    reward), so that its best value can change with the size or reward too."""
    size, reward, target, budget = where
    full, f = views[budget]
    groups = configs([c for c in cells if c["model"] == size and c["reward"] == reward
                      and c["budget_flops"] == full])
    scored = [(g[0].get("axis") or allocation(g[0], with_reward=False), s)
              for g in groups.values()
              if (s := score(g, target, f)) is not None]
    return sorted(scored, key=lambda x: -x[1]["mean"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bank", type=Path, action="append",
                        help=f"a bank (repeat for several budgets; default {DEFAULT_BANK.name}"
                             f", with {LARGER_BANK.name} where it exists)")
    parser.add_argument("--prompts-bank", type=Path, default=None,
                        help=f"the prompts-per-step bank (a bank or sweep folder; default "
                             f"{PROMPTS_BANK.name} where it exists)")
    add_quick(parser, f"{DEFAULT_BANK.name} alone")
    args = parser.parse_args()
    paths = args.bank or [p for p in (DEFAULT_BANK, LARGER_BANK)
                          if p == DEFAULT_BANK or (p.exists() and not args.quick)]
    banks = load_banks(paths)
    full = banks[0][1]
    cells = [c for _, bank in banks for c in bank]
    views = budgets(cells)
    budget = full[0]["budget_flops"]
    sizes = sorted({c["model"] for c in full}, key=size_order)
    rewards = sorted({c["reward"] for c in full})
    targets = sorted({r["target"] for c in full for r in c["evals"]})
    seeds = sorted({c["seed"] for c in full})
    print(f"bank {banks[0][0].name}: {len(full)} cells, {len(configs(full))} configs, seeds "
          f"{seeds}, full budget F={budget:.3g} FLOPs; scores on {SELECT} unless named")
    for path, _ in banks:
        if left := missing_cells(path):
            print(f"PARTIAL: {path.name} lacks {left} cell(s) of its command (a bank still "
                  f"being built: python -m bench.testbed_bank status); read with care")
    for path, bank in banks[1:]:
        print(f"bank {path.name}: {len(bank)} cells, {len(configs(bank))} configs, seeds "
              f"{sorted({c['seed'] for c in bank})}, full budget "
              f"{bank[0]['budget_flops'] / budget:.3g}F={bank[0]['budget_flops']:.3g} FLOPs")

    print(f"\n{'size':<8}{'reward':<12}{'warm start':>16}{'best at F':>16}{'gain (SE)':>18}"
          f"{'worst at F':>16}  best / worst config")
    gains, spreads = {}, {}
    for size in sizes:
        mine = [c for c in full if c["model"] == size]
        start = score(mine[:1], SELECT, 0.0)
        by_size = []
        for reward in rewards:
            groups = configs([c for c in mine if c["reward"] == reward])
            scored = sorted(((s, cells) for cells in groups.values()
                             if (s := score(cells, SELECT, 1.0)) is not None),
                            key=lambda x: -x[0]["mean"])
            if not scored or start is None:
                continue
            by_size += scored
            (best, bcells), (worst, wcells) = scored[0], scored[-1]
            gain, gain_se = paired(best, start)
            print(f"{size:<8}{reward:<12}{start['mean']:>9.3f} ({start['se']:.3f})"
                  f"{best['mean']:>9.3f} ({best['se']:.3f}){gain:>+10.3f} ({gain_se:.3f})"
                  f"{worst['mean']:>9.3f} ({worst['se']:.3f})  {allocation(bcells[0])} / "
                  f"{allocation(wcells[0])}")
        if not by_size:
            continue
        by_size.sort(key=lambda x: -x[0]["mean"])
        gain, gain_se = paired(by_size[0][0], start)
        gains[size] = gain / gain_se
        spread, spread_se = paired(by_size[0][0], by_size[-1][0])
        spreads[size] = spread / spread_se

    _targets_at_f(full, sizes, targets)

    print("\nbest allocation by condition (lead over the runner-up, 90% interval):")
    conditions = [(size, reward, target, b) for size in sizes for reward in rewards
                  for target in targets for b in views]
    best = leaders(cells, conditions, views)
    for where, (name, top, runner, second) in best.items():
        lead, lead_se = paired(top, second)
        size, reward, target, b = where
        if target == SELECT or views[b][1] == 1.0:  # every target at each bank's full budget
            print(f"  {size:<7}{reward:<12}{target:<5}F x {b:<7.4g} {name:<10}{top['mean']:.3f}"
                  f"  lead over {runner}: {lead:+.3f} [{lead - Z90 * lead_se:+.3f}, "
                  f"{lead + Z90 * lead_se:+.3f}]")
    changes = [pairs[0] for pairs in find_changes(cells, views, best).values()]
    for dim, a, b, name_a, name_b in changes:
        print(f"  conditional on {dim}: {name_a} at {_label(a)} but {name_b} at {_label(b)} "
              f"(each leads the other, 90% intervals excluding 0)")
    if len(banks) > 1:
        _by_budget(cells, views, sizes, rewards)
    _sizes_by_budget(cells, views, sizes, rewards)
    _search_by_budget(cells, views, sizes, rewards)
    changed = sorted({c[0] for c in changes})
    print("\nper size, best config's gain over its warm start at F, in SE: "
          + ", ".join(f"{s} {z:.1f}" for s, z in gains.items()))
    print("per size, best vs worst config at F, in SE: "
          + ", ".join(f"{s} {z:.1f}" for s, z in spreads.items()))
    print(f"conditions that change the best allocation: {changed or 'none'}")
    held = held_out(cells, views, conditions)
    prompts = args.prompts_bank or (PROMPTS_BANK if PROMPTS_BANK.exists() and not args.bank
                                    and not args.quick else None)
    if prompts:
        _prompts(prompts, full)
    print(f"min_gain_se={min(gains.values(), default=0):.1f} "
          f"within_size_spread_se={min(spreads.values(), default=0):.1f} "
          f"conditional_changes={len(changed)} "
          f"held_out_changes={'n/a' if held is None else len(held)}")


def leaders(cells: list[dict], conditions: list[tuple], views: dict
            ) -> dict[tuple, tuple[str, dict, str, dict]]:
    """Each condition's best allocation and runner-up: where -> (name, score, runner's
    name, runner's score); a condition with fewer than two allocations has none."""
    best = {}
    for where in conditions:
        found = ranked(cells, where, views)
        if len(found) >= 2:
            best[where] = (*found[0], *found[1])
    return best


def find_changes(cells: list[dict], views: dict, best: dict) -> dict[str, list[tuple]]:
    """Per condition, the pairs of its values whose best allocations each lead the other
    (90% intervals excluding 0): dim -> [(dim, a, b, name_a, name_b), ...], the first
    found first; a condition without such a pair is left out."""
    changes = defaultdict(list)
    for dim, index in DIMS.items():
        for a, b in itertools.combinations(best, 2):
            if any(a[i] != b[i] for i in range(4) if i != index) or a[index] == b[index]:
                continue
            name_a, name_b = best[a][0], best[b][0]
            if name_a != name_b and _beats(cells, views, a, name_a, name_b) and _beats(
                    cells, views, b, name_b, name_a):
                changes[dim].append((dim, a, b, name_a, name_b))
    return changes


def held_out(cells: list[dict], views: dict, conditions: list[tuple]) -> list[str] | None:
    """The changes that hold on a seed that did not pick them (None: fewer than 2 seeds).

    Picking each condition's leader as the best of many configs flatters its lead (the
    winner's curse), and a grid of many conditions offers many pairs to find a change in.
    So the leaders and changes are found again on every seed but the last, and each
    condition's strongest change there (the pair whose weaker lead is largest, in SE) is
    tested once on the last seed alone: it holds when both leads' 90% intervals exclude
    0 there, their SE the last seed's problems plus the seed-to-seed variance the other
    seeds show (with one other seed, the problems alone). Prints one line per condition
    and returns those that hold."""
    seeds = sorted({c["seed"] for c in cells})
    if len(seeds) < 2:
        print("\nheld-out seed: the bank has one seed; no change can be retested")
        return None
    pick = [c for c in cells if c["seed"] != seeds[-1]]
    test = [c for c in cells if c["seed"] == seeds[-1]]
    print(f"\nheld-out seed: leaders and changes found on seeds {seeds[:-1]}, each "
          f"condition's strongest change retested on seed {seeds[-1]} alone (90% intervals):")
    holds = []
    for dim, pairs in find_changes(pick, views, leaders(pick, conditions, views)).items():
        _, a, b, name_a, name_b = max(pairs, key=lambda p: min(
            _lead_z(pick, views, p[1], p[3], p[4]), _lead_z(pick, views, p[2], p[4], p[3])))
        leads = [_lead(test, views, a, name_a, name_b, pick),
                 _lead(test, views, b, name_b, name_a, pick)]
        if None in leads:
            verdict = f"untested (no seed-{seeds[-1]} cell of both at both)"
        else:
            verdict = "holds" if all(lo > 0 for _, lo, _ in leads) else "does not hold"
            verdict += " (" + " and ".join(f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                                           for m, lo, hi in leads) + ")"
            if verdict.startswith("holds"):
                holds.append(dim)
        print(f"  {dim}: {name_a} at {_label(a)} but {name_b} at {_label(b)}: {verdict}")
    print(f"conditions whose change holds on the held-out seed: {holds or 'none'}")
    return holds


def _by_budget(cells: list[dict], views: dict, sizes: list[str], rewards: list[str]) -> None:
    """The best allocation on ``SELECT`` at every budget, per size and reward (a table),
    then, for each config in two banks, its two runs at F (paired on the same problems)."""
    columns = [(size, reward) for size in sizes for reward in rewards]
    print(f"\nbest allocation by budget ({SELECT} mean (SE), of the configs with cells "
          f"there):")
    print(f"  {'budget':<13}" + "".join(f"{s + ' ' + r:<27}" for s, r in columns).rstrip())
    for b in views:
        row = []
        for size, reward in columns:
            found = ranked(cells, (size, reward, SELECT, b), views)
            name, top = found[0] if found else ("-", None)
            row.append(f"{name} {top['mean']:.3f} ({top['se']:.3f}) of {len(found)}"
                       if top else name)
        print(f"  F x {b:<9.4g}" + "".join(f"{r:<27}" for r in row).rstrip())
    fulls = sorted({full for full, _ in views.values()})
    for full in fulls[1:]:
        # a larger bank's curve at F reruns the F bank's config (not read above): how far
        # the two runs of one config are apart where the budget axis changes banks
        at_f = {1.0: (full, fulls[0] / full)}
        for size, reward in columns:
            reruns = dict(ranked(cells, (size, reward, SELECT, 1.0), at_f))
            for name, first in ranked(cells, (size, reward, SELECT, 1.0), views):
                if name in reruns:
                    diff, se = paired(reruns[name], first)
                    print(f"  at F, {size} {reward} {name}: the {full / fulls[0]:.3g}F bank's "
                          f"run {reruns[name]['mean']:.3f}, the F bank's {first['mean']:.3f}, "
                          f"difference {diff:+.3f} (SE {se:.3f})")


def _prompts(path: Path, grid: list[dict]) -> None:
    """The prompts-per-step bank (its own runs, one machine): per size and reward, each
    value's ``SELECT`` score by budget, the best with its lead's 90% interval, the grid's
    8 against the F bank's run of the same config at F, and the conditions (budget, size,
    reward, target) that change the best prompts per step, retested on a held-out seed."""
    loaded = load(path)
    if not loaded:
        print(f"\nprompts per step: {path} has no ok cell yet")
        return
    cells = [c | {"axis": f"P{c.get('prompts_per_step') or GRID_PROMPTS}"}
             for c in at_full_budget(loaded)]
    views = budgets(cells)
    sizes = sorted({c["model"] for c in cells}, key=size_order)
    rewards = sorted({c["reward"] for c in cells})
    targets = sorted({r["target"] for c in cells for r in c["evals"]})
    print(f"\nprompts per step ({path.name}: {len(cells)} cells, seeds "
          f"{sorted({c['seed'] for c in cells})}; each size and reward's leading (G, mu) at "
          f"F), {SELECT} mean (SE) by budget; best, lead over the runner-up, 90% interval")
    if left := missing_cells(path):
        print(f"  PARTIAL: {path.name} lacks {left} cell(s) of the commands run so far (a "
              f"stage still being built: python -m bench.testbed_bank status); read with care")
    for size in sizes:
        for reward in rewards:
            mine = [c for c in cells if c["model"] == size and c["reward"] == reward]
            if not mine:
                continue
            print(f"  {size} {reward} {allocation(mine[0], with_reward=False).split(' P')[0]}")
            for b in views:
                found = ranked(cells, (size, reward, SELECT, b), views)
                if len(found) < 2:
                    continue
                (top, s1), (runner, s2) = found[:2]
                lead, se = paired(s1, s2)
                row = "  ".join(f"{n} {s['mean']:.3f} ({s['se']:.3f})"
                                for n, s in sorted(found, key=lambda x: int(x[0][1:])))
                print(f"    F x {b:<8.4g}{row}   best {top} {lead:+.3f} "
                      f"[{lead - Z90 * se:+.3f}, {lead + Z90 * se:+.3f}]")
            rerun = score([c for c in mine if c["axis"] == f"P{GRID_PROMPTS}"], SELECT, 1.0)
            (g, mu), p8 = (mine[0]["group_size"], mine[0]["update_epochs"]), GRID_PROMPTS
            first = [c for c in grid if (c["model"], c["reward"], c["group_size"],
                                         c["update_epochs"]) == (size, reward, g, mu)
                     and (c.get("prompts_per_step") or p8) == p8]
            first = score(first, SELECT, 1.0) if first else None
            if rerun and first:
                diff, se = paired(rerun, first)
                print(f"    P{GRID_PROMPTS} at F here {rerun['mean']:.3f}, in the F bank "
                      f"{first['mean']:.3f}: difference {diff:+.3f} (SE {se:.3f})")
    conditions = [(size, reward, target, b) for size in sizes for reward in rewards
                  for target in targets for b in views]
    best = leaders(cells, conditions, views)
    changes = [pairs[0] for pairs in find_changes(cells, views, best).values()]
    for dim, a, b, name_a, name_b in changes:
        print(f"  prompts per step conditional on {dim}: {name_a} at {_label(a)} but "
              f"{name_b} at {_label(b)} (each leads the other, 90% intervals excluding 0)")
    held = held_out(cells, views, conditions)
    print(f"prompts per step: conditions that change the best value: "
          f"{sorted({c[0] for c in changes}) or 'none'}; holding on the held-out seed: "
          f"{'n/a' if held is None else held or 'none'}")


def _targets_at_f(full: list[dict], sizes: list[str], targets: list[str]) -> None:
    """Per size and target, the warm start and the spread of its configs' seed means at
    F (both rewards): where a target discriminates, and whether training moves it."""
    print("\nevery target at F (seed means), per size: the warm start, then its configs' "
          "lowest / median / highest")
    for size in sizes:
        mine = [c for c in full if c["model"] == size]
        for target in targets:
            start = score(mine[:1], target, 0.0)
            ends = sorted(s["mean"] for cells in configs(mine).values()
                          if (s := score(cells, target, 1.0)) is not None)
            if start is None or not ends:
                continue
            print(f"  {size:<8}{target:<6}{start['mean']:>7.3f}   {ends[0]:.3f} / "
                  f"{statistics.median(ends):.3f} / {ends[-1]:.3f}  ({len(ends)} configs)")


def _sizes_by_budget(cells: list[dict], views: dict, sizes: list[str],
                     rewards: list[str]) -> None:
    """Same-FLOP size comparison: at each budget, each size's best config on ``SELECT``
    and the larger size's lead over the smaller's best, with its 90% interval (a smaller
    policy buys more steps for the same FLOPs: where do they win?)."""
    if len(sizes) < 2:
        return
    small, large = sizes[0], sizes[-1]
    print(f"\nsame-FLOP sizes on {SELECT}: {large}'s best config minus {small}'s, 90% "
          f"interval, and the size that wins (= where the interval holds 0)")
    print(f"  {'budget':<12}" + "".join(f"{r:<36}" for r in rewards).rstrip())
    for b in views:
        row = []
        for reward in rewards:
            tops = [ranked(cells, (size, reward, SELECT, b), views) for size in (small, large)]
            if not all(tops):
                row.append("-")
                continue
            lead, se = paired(tops[1][0][1], tops[0][0][1])
            wins = large if lead - Z90 * se > 0 else small if lead + Z90 * se < 0 else "="
            row.append(f"{lead:+.3f} [{lead - Z90 * se:+.3f}, {lead + Z90 * se:+.3f}] {wins}")
        print(f"  F x {b:<8.3g}" + "".join(f"{r:<36}" for r in row).rstrip())


def _search_by_budget(cells: list[dict], views: dict, sizes: list[str],
                      rewards: list[str]) -> None:
    """The price of search at each budget: per size and reward, the best config at the
    smallest G minus the best at the largest G on ``SELECT``, with its 90% interval (does
    the larger group pay off only with more budget?)."""
    columns = [(size, reward) for size in sizes for reward in rewards]
    groups = sorted({c["group_size"] for c in cells})
    if len(groups) < 2:
        return
    low, high = f"G{groups[0]}", f"G{groups[-1]}"
    print(f"\nsearch by budget on {SELECT}: the best {low} config minus the best {high} "
          f"config, 90% interval")
    print(f"  {'budget':<12}" + "".join(f"{s + ' ' + r:<24}" for s, r in columns).rstrip())
    for b in views:
        row = []
        for where in columns:
            found = ranked(cells, (*where, SELECT, b), views)
            best = {g: next((s for n, s in found if n.split()[0] == g), None)
                    for g in (low, high)}
            if None in best.values():
                row.append("-")
                continue
            lead, se = paired(best[low], best[high])
            row.append(f"{lead:+.3f} [{lead - Z90 * se:+.3f}, {lead + Z90 * se:+.3f}]")
        print(f"  F x {b:<8.3g}" + "".join(f"{r:<24}" for r in row).rstrip())


def _lead(cells: list[dict], views: dict, where: tuple, winner: str, loser: str,
          seeds_from: list[dict] | None = None) -> tuple[float, float, float] | None:
    """``winner - loser`` at ``where`` with its 90% interval (None: one has no cells).
    ``seeds_from``: other seeds' cells of the same configs, whose seed-to-seed variance
    joins the SE (cells of one seed cannot show their own)."""
    scores = dict(ranked(cells, where, views))
    if winner not in scores or loser not in scores:
        return None
    if seeds_from is not None:
        others = dict(ranked(seeds_from, where, views))
        scores = {name: _with_seed_variance(scores[name], others.get(name))
                  for name in (winner, loser)}
    lead, se = paired(scores[winner], scores[loser])
    return lead, lead - Z90 * se, lead + Z90 * se


def _with_seed_variance(one: dict, others: dict | None) -> dict:
    """A one-seed score whose SE adds the variance of a single seed's mean, estimated from
    the same config's other seeds (``score``: SE^2 = var(seed means) / seeds + problem
    part); unchanged when the others are one seed too, or absent."""
    if others is None or others["seeds"] < 2:
        return one
    per_seed = others["seeds"] * max(0.0, others["se"] ** 2 - statistics.variance(
        others["problem"]) / others["n"])
    return one | {"se": math.sqrt(one["se"] ** 2 + per_seed)}


def _lead_z(cells: list[dict], views: dict, where: tuple, winner: str, loser: str) -> float:
    """The lead in units of its SE."""
    lead, lo, _ = _lead(cells, views, where, winner, loser)
    return lead * Z90 / (lead - lo) if lead > lo else math.inf


def _beats(cells: list[dict], views: dict, where: tuple, winner: str, loser: str) -> bool:
    lead = _lead(cells, views, where, winner, loser)
    return lead is not None and lead[1] > 0


def _label(where: tuple) -> str:
    size, reward, target, f = where
    return f"{size}/{reward}/{target}/F x {f:.4g}"


if __name__ == "__main__":
    main()
