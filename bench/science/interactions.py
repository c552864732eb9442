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

Both tests flatter or miss, so a third asks each condition once, on a fixed grid, with
every seed held out in turn: the *interaction* test (``interaction``). Only the configs of
``INTERACTION_GRID`` (G in {2, 4, 8, 16} x mu in {1, 2} at the grid's 8 prompts per step:
the grid both worlds run; world 1's mu 4 is left out) take part, on ``val``, from a world's
F bank alone. For a condition's two values a and b (size tiny-m vs tiny-l per reward at F;
reward rule vs prm-tiny-s per size at F; budget F/8 vs F per size and reward: 8 tests), each
seed s in turn is held out: the leaders La at a and Lb at b are the best seed-mean configs
on the other seeds; if La == Lb the rotation finds no change (I_s = 0), else I_s = [x(La) -
x(Lb)] at a - [x(La) - x(Lb)] at b on seed s alone, paired per problem within each side,
se_s^2 = se_a^2 + se_b^2 (the sides taken as independent; for budget they are two
checkpoints of one run). Over the k rotations: mean I, SE = max(sqrt(var(I_s) / k),
sqrt(sum se_s^2) / k) (the seed spread floored by the problem noise), 90% interval mean +-
1.645 SE. The condition *changes* the best allocation when the interval lies above 0: each
value's own leader does relatively better under its own value.

The null (``null_cells``): each size, reward and budget F/8, F/4, F/2, F split into a
pseudo-condition whose value A is every cell on the first half of the problems and B the
same cell on the second half with its seed relabelled to the next seed (so in a rotation A
and B are different runs on disjoint problems, and the true interaction is 0). The same
test runs on it; ``false_change_rate`` is the share of these tests found to change.

The default-grid rule (``default_grid_check``, frozen before world 2 runs): the default grid,
G in {2, 8} x mu in {1, 2} (conf/grid/default.yaml), loses nothing material: in each (size,
reward), its best config's seed-mean val at F is below the best config of the interaction
grid by less than 0.02, or the 90% interval of that gap (``paired``) includes 0.

Worlds (``WORLDS``): world 1 is bank v4 (``curve_bank_v4.json.gz``); world 2 is a second
testbed whose bank is ``curve_bank_w2.json.gz`` (printed as "no bank yet" and skipped while
it is missing). Everything above the interactions section is world 1's (or the ``--bank``
banks', then one world named "given"); the interactions section, the null and the
default-grid check are given for each world with a bank.

Usage: ``python bench/testbed.py [--bank bench/data/curve_bank_v4.json.gz --bank
bench/data/curve_bank_v4_4x.json.gz]`` (the default: both, the second where it exists;
``--bank`` may also name a bank's sweep folder, to read the cells finished so far).
Last line: ``worlds=... min_gain_se=... within_size_spread_se=... interactions_both=...
false_change_rate=... conditional_changes=... held_out_changes=...``: ``worlds`` counts
the worlds with a bank; ``min_gain_se`` and ``within_size_spread_se`` are the minimum over
them (and the banks read above); ``interactions_both`` counts the 8 interaction tests that
change the best allocation in every world with a bank (with one, in that world);
``false_change_rate`` is the null's, pooled over the worlds.
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
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.common import add_quick
from bench.science.bank import GRID_PROMPTS, cell_curves
from bench.science.worlds import WORLDS as ALL_WORLDS
from race.store.cell import cell_dirs

DEFAULT_BANK = Path(__file__).parents[1] / "data" / "curve_bank_v4.json.gz"
LARGER_BANK = Path(__file__).parents[1] / "data" / "curve_bank_v4_4x.json.gz"  # 4F, read if there
# prompts per step 4, 8, 16 at each size and reward's leading (G, mu) at F, read if there
PROMPTS_BANK = Path(__file__).parents[1] / "data" / "curve_bank_v4_prompts.json.gz"
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bank", type=Path, action="append",
                        help=f"a bank (repeat for several budgets; default {DEFAULT_BANK.name}"
                             f", with {LARGER_BANK.name} where it exists)")
    parser.add_argument("--prompts-bank", type=Path, default=None,
                        help=f"the prompts-per-step bank (a bank or sweep folder; default "
                             f"{PROMPTS_BANK.name} where it exists)")
    add_quick(parser, f"{DEFAULT_BANK.name} alone")
    args = parser.parse_args(argv)
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

    gains, spreads = _table_at_f(full, sizes, rewards)

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
    found = _interactions([("given", args.bank)] if args.bank else WORLDS)
    print(_last_line(found, gains, spreads, changed, held))



def _table_at_f(full: list[dict], sizes: list[str], rewards: list[str], echo=print
                ) -> tuple[dict[str, float], dict[str, float]]:
    """Per size and reward, the warm start and the best and worst config at F (printed
    through ``echo``); returns per size the best config's gain over its warm start and the
    best-minus-worst spread, each in units of its SE."""
    echo(f"\n{'size':<8}{'reward':<12}{'warm start':>16}{'best at F':>16}{'gain (SE)':>18}"
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
            echo(f"{size:<8}{reward:<12}{start['mean']:>9.3f} ({start['se']:.3f})"
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
    return gains, spreads


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


# --- interactions: does a condition change the best allocation? -------------------------

# the grid both worlds run at F: G x mu at the grid's prompts per step (world 1's mu 4 is
# left out, so that the two worlds test the same configs)
INTERACTION_GRID = frozenset((g, mu, GRID_PROMPTS) for g in (2, 4, 8, 16) for mu in (1, 2))
DEFAULT_GRID_YAML = Path(__file__).resolve().parents[2] / "conf" / "grid" / "default.yaml"
DEFAULT_TOLERANCE = 0.02  # a default grid's loss below this is not material (val accuracy)
NULL_BUDGETS = (0.125, 0.25, 0.5, 1.0)
# (name, banks): a world is one warm-start draw (bench/science/worlds.py); its interaction tests
# read its F bank alone
WORLDS = [(w.name, [w.f_bank]) for w in ALL_WORLDS.values()]
W2_BANK = ALL_WORLDS[2].f_bank
W2_HINT = "python -m bench.testbed_bank --world 2 run"


@dataclass(frozen=True)
class Rotation:
    """One leave-one-seed-out rotation: the leaders at a and b found on the other seeds,
    and ``value`` = I_s on ``seed`` alone with its problem-level ``se`` (0 and 0 for the
    same leader; None when the held-out seed lacks a leader's cell)."""

    seed: int
    lead_a: str | None
    lead_b: str | None
    value: float | None
    se: float

    @property
    def z(self) -> float:
        return self.value / self.se if self.value and self.se > 0 else 0.0


@dataclass(frozen=True)
class Interaction:
    """A condition's interaction test: the rotations, their mean, SE, 90% interval and the
    verdict (``changes``, ``no change``, ``reversed``, ``same leader`` or ``untested``)."""

    dim: str
    a: tuple
    b: tuple
    rotations: tuple[Rotation, ...]
    mean: float
    se: float
    lo: float
    hi: float
    verdict: str


def grid_cells(cells: list[dict], grid: frozenset = INTERACTION_GRID) -> list[dict]:
    """The cells of ``grid``'s (group size, update epochs, prompts per step) configs."""
    return [c for c in cells if (c["group_size"], c["update_epochs"],
                                 c.get("prompts_per_step") or GRID_PROMPTS) in grid]


def _rotation(cells: list[dict], seed: int, a: tuple, b: tuple, views: dict) -> Rotation:
    """Leaders at ``a`` and ``b`` on every seed but ``seed``; on ``seed`` alone, I_s =
    [x(La) - x(Lb)] at a - [x(La) - x(Lb)] at b, each side paired on its problems
    (se_a^2 = var(diffs) / n), the sides independent: se_s^2 = se_a^2 + se_b^2."""
    others = [c for c in cells if c["seed"] != seed]
    tops = [ranked(others, where, views) for where in (a, b)]
    if not all(tops):
        return Rotation(seed, None, None, None, 0.0)
    lead_a, lead_b = tops[0][0][0], tops[1][0][0]
    if lead_a == lead_b:
        return Rotation(seed, lead_a, lead_b, 0.0, 0.0)
    mine = [c for c in cells if c["seed"] == seed]
    sides = [dict(ranked(mine, where, views)) for where in (a, b)]
    if any(name not in side for side in sides for name in (lead_a, lead_b)):
        return Rotation(seed, lead_a, lead_b, None, 0.0)
    (d_a, se_a), (d_b, se_b) = (paired(side[lead_a], side[lead_b]) for side in sides)
    return Rotation(seed, lead_a, lead_b, d_a - d_b, math.hypot(se_a, se_b))


def interaction(cells: list[dict], dim: str, a: tuple, b: tuple, views: dict) -> Interaction:
    """Does ``dim`` (``a`` and ``b``: two conditions (size, reward, target, budget) that
    differ in it alone) change the best allocation among ``INTERACTION_GRID``'s configs?

    Leave one seed out: for each seed s, the leaders La at a and Lb at b are the best
    seed-mean configs on the other seeds (``ranked``); if La == Lb the rotation finds no
    change and its I_s is 0; else I_s = [x(La) - x(Lb)] at a - [x(La) - x(Lb)] at b on
    seed s alone, paired per problem within each side (``_rotation``). So the leaders are
    picked on seeds that do not score them (no winner's curse). Over the k rotations: mean
    I, SE = max(sqrt(var(I_s) / k), sqrt(sum se_s^2) / k) (the seed-level spread, floored
    by the problem noise), 90% interval mean +- 1.645 SE. ``changes`` when the interval
    lies above 0: each value's own leader does relatively better under its own value."""
    if dim not in DIMS or any(a[i] != b[i] for i in range(4) if i != DIMS[dim]):
        raise ValueError(f"interaction(dim={dim!r}): a={a} and b={b} must differ in "
                         f"{sorted(DIMS)}'s {dim!r} alone; pass two such conditions")
    cells = grid_cells(cells)
    seeds = sorted({c["seed"] for c in cells})
    rotations = tuple(_rotation(cells, s, a, b, views) for s in seeds
                      if len(seeds) > 1 and a[3] in views and b[3] in views)
    values = [r.value for r in rotations if r.value is not None]
    k = len(values)
    if not k:
        return Interaction(dim, a, b, rotations, math.nan, math.nan, math.nan, math.nan,
                           "untested")
    mean = sum(values) / k
    spread = math.sqrt(statistics.variance(values) / k) if k > 1 else 0.0
    noise = math.sqrt(sum(r.se ** 2 for r in rotations if r.value is not None)) / k
    se = max(spread, noise)
    lo, hi = mean - Z90 * se, mean + Z90 * se
    if all(r.lead_a == r.lead_b for r in rotations if r.value is not None):
        verdict = "same leader"
    else:
        verdict = "changes" if lo > 0 else "reversed" if hi < 0 else "no change"
    return Interaction(dim, a, b, rotations, mean, se, lo, hi, verdict)


def interaction_tests(cells: list[dict]) -> list[tuple[str, Interaction]]:
    """The 8 interaction tests of a world on ``SELECT``, from its F bank's ``cells``:
    size (tiny-m vs tiny-l) per reward at F; reward (rule vs prm-tiny-s) per size at F;
    budget (F/8 vs F: checkpoints 0.125 and 1) per size and reward. (label, result)."""
    views = budgets(cells)
    sizes, rewards = ("tiny-m", "tiny-l"), ("rule", "prm-tiny-s")
    tests = [("size", (sizes[0], r, SELECT, 1.0), (sizes[1], r, SELECT, 1.0),
              f"size {'|'.join(sizes)} at {r}, F") for r in rewards]
    tests += [("reward", (s, rewards[0], SELECT, 1.0), (s, rewards[1], SELECT, 1.0),
               f"reward {'|'.join(rewards)} at {s}, F") for s in sizes]
    tests += [("budget", (s, r, SELECT, 0.125), (s, r, SELECT, 1.0),
               f"budget F/8|F at {s} {r}") for s in sizes for r in rewards]
    return [(label, interaction(cells, dim, a, b, views)) for dim, a, b, label in tests]


def _half(row: dict, second: bool) -> dict:
    """An eval row scored on the first half of its problems [0, n/2) or the second
    [n/2, n), its accuracy recomputed."""
    if "correct" not in row:
        return row
    half = len(row["correct"]) // 2
    part = row["correct"][half:] if second else row["correct"][:half]
    return row | {"correct": part, "accuracy": part.count("1") / len(part)}


def null_cells(cells: list[dict]) -> list[dict]:
    """Cells of a pseudo-condition with no true interaction, as two values of the reward
    (``<reward>|A`` and ``<reward>|B``): A is each cell on problems [0, n/2), its seed as
    it is; B the same cell on problems [n/2, n), its seed relabelled to the next (seeds
    sorted, the last to the first). In a rotation, A's and B's held-out runs are then
    different runs scored on disjoint problems, as two real conditions' are."""
    seeds = sorted({c["seed"] for c in cells})
    after = {s: seeds[(i + 1) % len(seeds)] for i, s in enumerate(seeds)}
    return [c | {"reward": f"{c['reward']}|{side}", "seed": seed,
                 "evals": [_half(r, second) for r in c["evals"]]}
            for c in cells
            for side, seed, second in (("A", c["seed"], False), ("B", after[c["seed"]], True))]


def null_interactions(cells: list[dict]) -> list[tuple[str, Interaction]]:
    """The interaction test on ``null_cells`` (true interaction 0) for each size and reward
    and each budget of ``NULL_BUDGETS`` that the bank has: (label, result). The false
    change rate is the share of them whose verdict is ``changes`` (``false_changes``)."""
    null = null_cells(grid_cells(cells))
    views = budgets(null)
    pairs = sorted({(c["model"], c["reward"]) for c in cells},
                   key=lambda p: (size_order(p[0]), p[1]))
    return [(f"null {size} {reward} F x {b:g}",
             interaction(null, "reward", (size, f"{reward}|A", SELECT, b),
                         (size, f"{reward}|B", SELECT, b), views))
            for size, reward in pairs for b in NULL_BUDGETS if b in views]


def false_changes(results: list[tuple[str, Interaction]]) -> tuple[int, int]:
    """(tests whose interval lies above 0, tests run) among ``results``."""
    tested = [r for _, r in results if r.verdict != "untested"]
    return sum(r.verdict == "changes" for r in tested), len(tested)


def default_grid(path: Path = DEFAULT_GRID_YAML) -> frozenset:
    """The default grid's (G, mu, prompts per step), read from ``conf/grid/default.yaml``'s
    ``axes`` (its prompts per step is RunSpec's default, the grid's 8)."""
    axes = yaml.safe_load(path.read_text())["axes"]
    return frozenset((g, mu, GRID_PROMPTS) for g in axes["grid.group_size"]
                     for mu in axes["grid.update_epochs"])


def default_grid_rows(cells: list[dict], grid: frozenset | None = None) -> list[dict]:
    """Per size and reward, the best config of ``INTERACTION_GRID`` and of the default
    grid on ``SELECT`` at F (seed means), the gap between them with its 90% interval
    (``paired``: problems and seeds) and whether the rule of ``default_grid_check`` holds."""
    grid = default_grid() if grid is None else grid
    mine = grid_cells(cells)
    views = budgets(mine)
    names = {f"G{g} mu{mu}" for g, mu, _ in grid}
    rows = []
    for size, reward in sorted({(c["model"], c["reward"]) for c in mine},
                               key=lambda p: (size_order(p[0]), p[1])):
        found = ranked(mine, (size, reward, SELECT, 1.0), views)
        default = next(((n, s) for n, s in found if n in names), None)
        if not found or default is None:
            continue
        gap, se = paired(found[0][1], default[1])
        lo, hi = gap - Z90 * se, gap + Z90 * se
        rows.append({"size": size, "reward": reward, "best": found[0][0],
                     "best_mean": found[0][1]["mean"], "default": default[0],
                     "default_mean": default[1]["mean"], "gap": gap, "lo": lo, "hi": hi,
                     "holds": gap < DEFAULT_TOLERANCE or lo <= 0 <= hi})
    return rows


def default_grid_check(cells: list[dict], grid: frozenset | None = None) -> bool:
    """The rule, frozen before world 2 runs: the default grid, G in {2, 8} x mu in {1, 2}
    (conf/grid/default.yaml), loses nothing material: in each (size, reward), its best
    config's seed-mean val at F is below the best config of INTERACTION_GRID by less than
    0.02, or the 90% interval of that gap (paired, problems and seeds: ``paired``)
    includes 0. Prints one line per size and reward; True when it holds in every one (and
    there is at least one)."""
    rows = default_grid_rows(cells, grid)
    for r in rows:
        print(f"    {r['size']:<7}{r['reward']:<12}best {r['best']:<8}{r['best_mean']:.3f}  "
              f"default's best {r['default']:<8}{r['default_mean']:.3f}  gap {r['gap']:+.3f} "
              f"[{r['lo']:+.3f}, {r['hi']:+.3f}]  {'holds' if r['holds'] else 'FAILS'}")
    return bool(rows) and all(r["holds"] for r in rows)


def _print_interaction(label: str, result: Interaction) -> None:
    if result.verdict == "untested":
        print(f"  {label:<36}untested (no leader or no held-out cell)")
        return
    print(f"  {label:<36}{result.mean:+.3f} [{result.lo:+.3f}, {result.hi:+.3f}]  "
          f"{result.verdict}")
    print("      " + "; ".join(
        f"seed {r.seed}: " + ("untested" if r.value is None and r.lead_a is None else
                              f"same leader {r.lead_a}" if r.lead_a == r.lead_b else
                              f"{r.lead_a}|{r.lead_b} untested" if r.value is None else
                              f"{r.lead_a}|{r.lead_b} {r.value:+.3f} (z {r.z:.1f})")
        for r in result.rotations))


def _interactions(worlds: list[tuple[str, list[Path]]]) -> dict:
    """The interaction section for every world with a bank: its 8 tests, the null's false
    change rate, the default-grid check. Returns, per world with a bank, its F bank's cells
    and the tests' results (``{"cells": ..., "tests": ..., "null": ...}``)."""
    print(f"\ninteractions (leave-one-seed-out, 90% intervals): on {SELECT}, configs G2-G16 "
          f"x mu1-2 at P{GRID_PROMPTS}; I = [La - Lb] at a - [La - Lb] at b on the held-out "
          f"seed, La and Lb picked on the others; > 0: each value's own leader does better "
          f"under it")
    found = {}
    for name, paths in worlds:
        if not all(p.exists() for p in paths):
            print(f"{name}: no bank yet ({W2_HINT})" if name == "world 2" else
                  f"{name}: no bank yet ({', '.join(str(p) for p in paths)} missing)")
            continue
        cells = load_banks(paths)[0][1]
        mine = grid_cells(cells)
        print(f"{name} ({paths[0].name}: {len(mine)} cells of the interaction grid, seeds "
              f"{sorted({c['seed'] for c in mine})}):")
        tests = interaction_tests(cells)
        for label, result in tests:
            _print_interaction(label, result)
        found[name] = {"cells": cells, "tests": tests, "null": null_interactions(cells)}
    print("\nnull (problems halved, the second half's seeds rotated: no true interaction): "
          "tests whose interval lies above 0")
    for name, world in found.items():
        false, of = false_changes(world["null"])
        print(f"  {name}: {false} of {of}")
    print(f"\ndefault grid check (G x mu of {DEFAULT_GRID_YAML.name}: its best config within "
          f"{DEFAULT_TOLERANCE} of the interaction grid's best at F, or the gap's 90% "
          f"interval holds 0)")
    for name, world in found.items():
        print(f"  {name}:")
        world["default_holds"] = default_grid_check(world["cells"])
        verdict = "loses nothing material" if world["default_holds"] else "LOSES somewhere"
        print(f"  {name}: the default grid {verdict}")
    return found


def _last_line(found: dict, gains: dict, spreads: dict, changed: list, held: list | None
               ) -> str:
    """The summary line. ``min_gain_se`` and ``within_size_spread_se``: the minimum over
    the worlds with a bank (and the banks read above); ``interactions_both``: the tests
    whose verdict is ``changes`` in every world with a bank; ``false_change_rate``: the
    null's, pooled over those worlds."""
    gain_z, spread_z = list(gains.values()), list(spreads.values())
    for world in found.values():
        cells = world["cells"]
        more = _table_at_f(cells, sorted({c["model"] for c in cells}, key=size_order),
                           sorted({c["reward"] for c in cells}), echo=lambda *_: None)
        gain_z += more[0].values()
        spread_z += more[1].values()
    labels = [label for label, _ in next(iter(found.values()))["tests"]] if found else []
    both = sum(all(dict(world["tests"])[label].verdict == "changes"
                   for world in found.values()) for label in labels)
    counts = [false_changes(world["null"]) for world in found.values()]
    tests = sum(of for _, of in counts)
    rate = f"{sum(f for f, _ in counts) / tests:.2f}" if tests else "n/a"
    return (f"worlds={len(found)} min_gain_se={min(gains.values(), default=0):.1f} "
            f"within_size_spread_se={min(spreads.values(), default=0):.1f} "
            f"interactions_both={both} false_change_rate={rate} "
            f"conditional_changes={len(changed)} "
            f"held_out_changes={'n/a' if held is None else len(held)}")


if __name__ == "__main__":
    main()
