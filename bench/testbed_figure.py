"""The testbed's allocation frontier as a figure: held-out ``val`` accuracy against the
post-training budget, one line per allocation config, one panel per policy size.

Reads the curve banks ``bench/testbed.py`` reads (the default grid at the full budget F,
and the larger 4F bank where it exists) and draws, per config, the seed mean with a band
of one SE (seeds and problems, ``testbed.score``) at every checkpoint, the budget in
units of F on a log axis; the warm start sits at the left edge. Each budget is read from
the smallest bank that reaches it (``testbed.budgets``), so the 4F bank extends the
curves of its configs to the right of F. A colour is one (G, mu); solid lines are the
rule reward, dashed the tiny PRM; the best and worst config of each size at F are
labelled.

Usage: ``python bench/testbed_figure.py [--bank PATH ...] [--out docs/testbed_frontier.png]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.common import add_quick, scratch  # noqa: E402
from bench.testbed import (  # noqa: E402
    DEFAULT_BANK,
    LARGER_BANK,
    SELECT,
    allocation,
    budgets,
    configs,
    load_banks,
    score,
)

OUT = Path(__file__).parents[1] / "docs" / "testbed_frontier.png"
START = 1 / 192  # where the warm start is drawn on the log axis (below F/96)


def curve(cells: list[dict], views: dict) -> list[tuple[float, float, float]]:
    """(budget in F, mean, SE) of one config, the warm start at ``START``."""
    smallest = min(full for full, _ in views.values())
    reads = [(START, smallest, 0.0)] + [(b, full, f) for b, (full, f) in sorted(views.items())]
    points = []
    for budget, full, fraction in reads:
        mine = [c for c in cells if c["budget_flops"] == full]
        got = score(mine, SELECT, fraction) if mine else None
        if got is not None:
            points.append((budget, got["mean"], got["se"]))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=Path, action="append", default=None)
    parser.add_argument("--out", type=Path, default=None, help=f"the figure (default {OUT})")
    add_quick(parser, "the figure into a temp folder unless --out")
    args = parser.parse_args()
    args.out = args.out or (scratch("testbed-figure") / OUT.name if args.quick else OUT)
    paths = args.bank or [DEFAULT_BANK] + ([LARGER_BANK] if LARGER_BANK.exists() else [])
    cells = [c for _, bank in load_banks(paths) for c in bank]
    views = budgets(cells)
    sizes = sorted({c["model"] for c in cells}, key=lambda m: ("s", "m", "l").index(m[-1])
                   if m.startswith("tiny-") else 9)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.2 * len(sizes), 4.0), sharey=True,
                             squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, size in zip(axes[0], sizes):
        groups: dict[str, list[dict]] = {}  # by allocation: a config's F and 4F runs
        for members in configs([c for c in cells if c["model"] == size]).values():
            groups.setdefault(allocation(members[0]), []).extend(members)
        drawn = []
        shapes = sorted({allocation(m[0], with_reward=False) for m in groups.values()})
        for _, members in sorted(groups.items(), key=lambda kv: allocation(kv[1][0])):
            index = shapes.index(allocation(members[0], with_reward=False))  # colour: G, mu
            points = curve(members, views)
            if not points:
                continue
            x, y, se = zip(*points)
            style = "-" if members[0]["reward"] == "rule" else "--"
            label = allocation(members[0])
            ax.plot(x, y, style, color=colours(index % 10), lw=1.4, label=label)
            ax.fill_between(x, [m - s for m, s in zip(y, se)], [m + s for m, s in zip(y, se)],
                            color=colours(index % 10), alpha=0.15, lw=0)
            at_f = next((p for p in points if abs(p[0] - 1.0) < 1e-9), None)
            if at_f is not None:
                drawn.append((at_f[1], label))
        ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
        if any(c["budget_flops"] > min(full for full, _ in views.values())
               for m in groups.values() for c in m):
            ax.text(1.1, 0.45, "right of F:\nthe 4F bank's\nruns",
                    transform=ax.get_xaxis_transform(), fontsize=7, color="0.35")
        ax.set_xscale("log")
        seeds = max(len({c["seed"] for c in m}) for m in groups.values())
        ax.set_title(f"{size}: {len(groups)} configs, {seeds} seeds")
        ax.set_xlabel("post-training budget (units of F; warm start at the left)")
        if drawn:
            best, worst = max(drawn), min(drawn)
            ax.text(0.02, 0.97, f"best at F: {best[1]} {best[0]:.3f}\n"
                                f"worst at F: {worst[1]} {worst[0]:.3f}",
                    transform=ax.transAxes, va="top", fontsize=8)
        ax.legend(fontsize=6.5, loc="lower right", ncol=1)
    axes[0][0].set_ylabel(f"greedy {SELECT} accuracy (seed mean +- 1 SE)")
    fig.suptitle("The embedded testbed: accuracy by allocation and budget "
                 "(solid: rule reward, dashed: tiny PRM)", fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
