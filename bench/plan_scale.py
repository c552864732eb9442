"""How fast ``race plan`` expands and solves a large grid on real model shapes.

A 400-cell grid: Qwen2.5 0.5B / 1.5B / 3B / 7B x G 2..32 x mu 1, 2 x rule / Qwen2.5-Math-
PRM-7B x 5 seeds at a 1e18 budget, planned as ``race plan`` does (no weights, no torch).
Side by side in one run, it also composes a subset of the same cells the old way (one
Hydra composition per cell) and reports the ratio. Median of ``--repeats`` runs.

Usage: ``python bench/plan_scale.py [--repeats 3] [--quick]``. Last line: ``cells_per_s=<x>``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import add_quick
from race.config import compose_config
from race.run.grid import grid_axes, plan_grid

GRID = ["budget=1e18", "model=qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b,qwen2.5-7b",
        "grid.group_size=2,4,8,16,32", "grid.update_epochs=1,2",
        "reward=rule,qwen2.5-math-prm-7b", "pilot.seed=0,1,2,3,4"]
OLD_WAY_CELLS = 20  # composed one Hydra call each, for the side-by-side ratio
QUICK_GRID = ["budget=1e18", "model=qwen2.5-0.5b,qwen2.5-1.5b", "grid.group_size=2,4",
              "grid.update_epochs=1,2", "reward=rule,qwen2.5-math-prm-7b"]  # 16 cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    add_quick(parser, "one repeat of a 16-cell grid")
    args = parser.parse_args()
    grid, old_way = (QUICK_GRID, 2) if args.quick else (GRID, OLD_WAY_CELLS)
    args.repeats = 1 if args.quick else args.repeats
    plan_grid(grid[:2], runnable=False)  # imports and caches warm, as in a second run
    rates, old_rates = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        plan = plan_grid(grid, runnable=False)
        rates.append(len(plan.cells) / (time.perf_counter() - start))
        _, fixed, axes = grid_axes(grid)
        cells = [c.overrides for c in plan.cells[:old_way]]
        start = time.perf_counter()
        for overrides in cells:
            compose_config(list(overrides))
        old_rates.append(len(cells) / (time.perf_counter() - start))
    rate, old = statistics.median(rates), statistics.median(old_rates)
    print(f"{len(plan.cells)} cells ({len(plan.runnable)} runnable), median of "
          f"{args.repeats}: {rate:.0f} cells/s planned (compose once, then each cell's "
          f"overrides); composing each cell with Hydra: {old:.1f} cells/s for composition "
          f"alone ({rate / old:.0f}x)")
    print(f"cells_per_s={rate:.1f}")


if __name__ == "__main__":
    main()
