"""What the embedded testbed shows: does post-training move each size off its warm start,
do allocations differ, and does the best allocation change with the conditions?

Reads a curve bank (``bench/curve_bank.py`` exports one: the default grid's configs run
to the full budget F with dense checkpoints, several seeds) and prints, per size and
reward system:

- the warm start (checkpoint 0, shared by every config of a size) and the best and worst
  config at F, each as the mean over seeds with its SE;
- the best allocation (group size G and update epochs mu, with the reward system when it
  is not the condition) at each budget (checkpoints of the full-budget curves: a pilot's
  lr is constant, so a curve read at F/4 is the run a budget of F/4 buys), size, reward
  system and evaluation target, with a 90% interval on its lead over the runner-up.

Standard errors combine the seeds and the problems: a config's score is its seed mean on
the same ``n`` problems at every checkpoint; ``SE^2 = var(seed means) / seeds + var(per
problem) / n``. A gain over the warm start is paired on the problems (each problem's
seed-mean score at F minus its score at the start).

A condition *changes* the best allocation when two of its values each have a different
best allocation, and each leads the other's best by more than 1.645 SE of the difference
(90% intervals of the two leads exclude zero in opposite directions).

Usage: ``python bench/testbed.py [--bank bench/data/curve_bank_v3.json.gz]`` (``--bank``
may also name a bank's sweep folder, to read the cells finished so far).
Last line: ``min_gain_se=... within_size_spread_se=... conditional_changes=...``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

DEFAULT_BANK = Path(__file__).parent / "data" / "curve_bank_v3.json.gz"
Z90 = 1.645
SELECT = "val"  # the target configs are compared on; test and ood are reported beside it


def load(path: Path) -> list[dict]:
    """The bank's cells; or, for a sweep folder still running, its finished cells."""
    if path.is_dir():
        import sys

        sys.path.insert(0, str(Path(__file__).parent))
        from curve_bank import cell_curves

        from race.store.cell import cell_dirs

        return [c for c in map(cell_curves, cell_dirs(path)) if c]
    with gzip.open(path, "rt") as f:
        return json.load(f)["cells"]


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


def allocation(cell: dict, with_reward: bool = True) -> str:
    base = f"G{cell['group_size']} mu{cell['update_epochs']}"
    return f"{base} {cell['reward']}" if with_reward else base


def configs(cells: list[dict]) -> dict[str, list[dict]]:
    by = defaultdict(list)
    for cell in cells:
        by[cell["config"]].append(cell)
    return by


def best_of(groups: dict[str, list[dict]], target: str, fraction: float,
            name) -> tuple[str, dict, str, dict] | None:
    """The best and runner-up allocation (name, score) among ``groups`` of configs."""
    scored = [(name(cells[0]), s) for cells in groups.values()
              if (s := score(cells, target, fraction)) is not None]
    if len(scored) < 2:
        return None
    scored.sort(key=lambda x: -x[1]["mean"])
    return scored[0][0], scored[0][1], scored[1][0], scored[1][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=Path, default=DEFAULT_BANK)
    args = parser.parse_args()
    cells = load(args.bank)
    budget = max(c["budget_flops"] for c in cells)
    full = [c for c in cells if c["budget_flops"] == budget]
    sizes = sorted({c["model"] for c in full})
    rewards = sorted({c["reward"] for c in full})
    targets = sorted({r["target"] for c in full for r in c["evals"]})
    fractions = sorted({r["checkpoint"] for c in full for r in c["evals"]} - {0.0})
    seeds = sorted({c["seed"] for c in full})
    print(f"bank {args.bank.name}: {len(full)} cells, {len(configs(full))} configs, seeds "
          f"{seeds}, full budget F={budget:.3g} FLOPs; scores on {SELECT} unless named")

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

    print("\nbest allocation by condition (lead over the runner-up, 90% interval):")
    best = {}
    conditions = [(size, reward, target, f) for size in sizes for reward in rewards
                  for target in targets for f in fractions]
    for size, reward, target, f in conditions:
        groups = configs([c for c in full if c["model"] == size and c["reward"] == reward])
        found = best_of(groups, target, f, lambda c: allocation(c, with_reward=False))
        if found is None:
            continue
        name, top, runner, second = found
        lead, lead_se = paired(top, second)
        best[(size, reward, target, f)] = (name, top)
        if target == SELECT or f == 1.0:
            print(f"  {size:<7}{reward:<12}{target:<5}F x {f:<7.4g} {name:<10}{top['mean']:.3f}"
                  f"  lead over {runner}: {lead:+.3f} [{lead - Z90 * lead_se:+.3f}, "
                  f"{lead + Z90 * lead_se:+.3f}]")

    changes = []
    dims = {"size": 0, "reward": 1, "target": 2, "budget": 3}
    for dim, index in dims.items():
        for a, b in itertools.combinations(best, 2):
            if any(a[i] != b[i] for i in range(4) if i != index) or a[index] == b[index]:
                continue
            (name_a, _), (name_b, _) = best[a], best[b]
            if name_a == name_b:
                continue
            if _beats(full, a, name_a, name_b) and _beats(full, b, name_b, name_a):
                changes.append((dim, a, b, name_a, name_b))
                break
    for dim, a, b, name_a, name_b in changes:
        print(f"  conditional on {dim}: {name_a} at {_label(a)} but {name_b} at {_label(b)} "
              f"(each leads the other, 90% intervals excluding 0)")
    changed = sorted({c[0] for c in changes})
    print("\nper size, best config's gain over its warm start at F, in SE: "
          + ", ".join(f"{s} {z:.1f}" for s, z in gains.items()))
    print("per size, best vs worst config at F, in SE: "
          + ", ".join(f"{s} {z:.1f}" for s, z in spreads.items()))
    print(f"conditions that change the best allocation: {changed or 'none'}")
    print(f"min_gain_se={min(gains.values(), default=0):.1f} "
          f"within_size_spread_se={min(spreads.values(), default=0):.1f} "
          f"conditional_changes={len(changed)}")


def _beats(cells: list[dict], where: tuple, winner: str, loser: str) -> bool:
    size, reward, target, f = where
    mine = [c for c in cells if c["model"] == size and c["reward"] == reward]
    groups = configs(mine)
    scores = {allocation(g[0], with_reward=False): s for g in groups.values()
              if (s := score(g, target, f)) is not None}
    if winner not in scores or loser not in scores:
        return False
    lead, se = paired(scores[winner], scores[loser])
    return lead - Z90 * se > 0


def _label(where: tuple) -> str:
    size, reward, target, f = where
    return f"{size}/{reward}/{target}/F x {f:.4g}"


if __name__ == "__main__":
    main()
