"""The testbed's allocations by budget, one figure per world: per size, reward system and
evaluation target, the best config of each search setting (group size G) at every
post-training budget, and which leads where (most leads are ties: the dots say which).

Reads the curve banks ``bench/testbed.py`` reads (the grid at the full budget F, and the
4F bank where it exists; each budget from the smallest bank that reaches it,
``testbed.budgets``). A panel is one (target, size, reward): one line per G, the seed
mean (band: one SE, seeds and problems, ``testbed.score``) of that G's best config at
each budget (its best mu and prompts per step there), the budget in units of F on a log
axis and the warm start at the left edge. The strip along each panel's top names the
leading allocation at each budget, in its G's colour; a filled dot where its lead over
the runner-up (any config) clears a 90% interval, an open one where it does not.
Reading the best of several configs at each budget favours noise a little (winner's
curse); the strip's intervals are the check.

Where the prompts-per-step bank exists (``testbed.PROMPTS_BANK``, or ``--prompts-bank``), a
second figure (``docs/testbed_prompts.png``) draws it the same way, one line per prompts
per step (P4, P8, P16) at each size and reward's fixed (G, mu).

World 1's banks (``bench/science/worlds.py``) draw ``docs/testbed_frontier.png``; world 2's F bank,
where it exists, ``docs/testbed_frontier_w2.png`` beside it, the same way.

Usage: ``python bench/testbed_figure.py [--bank PATH ...] [--out docs/testbed_frontier.png]
[--targets val,ood] [--prompts-bank PATH]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.common import add_quick, scratch  # noqa: E402
from bench.science.interactions import (  # noqa: E402
    DEFAULT_BANK,
    GRID_PROMPTS,
    LARGER_BANK,
    PROMPTS_BANK,
    Z90,
    at_full_budget,
    budgets,
    load,
    load_banks,
    paired,
    ranked,
    score,
    size_order,
)
from bench.science.worlds import WORLDS  # noqa: E402

OUT = Path(__file__).parents[1] / "docs" / "testbed_frontier.png"
PROMPTS_OUT = OUT.with_name("testbed_prompts.png")
START = 1 / 192  # where the warm start is drawn on the log axis (below F/96)


def by_group(found: list[tuple[str, dict]]) -> dict[int, tuple[str, dict]]:
    """G -> the best (allocation, score) of that G, from ``ranked``'s best-first list (P ->
    its score, on the prompts bank, whose names are ``P4`` ...)."""
    out: dict[int, tuple[str, dict]] = {}
    for name, got in found:
        out.setdefault(int(name.split()[0][1:]), (name, got))
    return out


def panel(ax, cells: list[dict], views: dict, where: tuple, colour, key: str = "G") -> None:
    size, reward, target = where
    start = score([c for c in cells if c["model"] == size][:1], target, 0.0)
    lines: dict[int, list[tuple[float, float, float]]] = {}
    strip = []
    for b in sorted(views):
        found = ranked(cells, (size, reward, target, b), views)
        for g, (_, got) in by_group(found).items():
            lines.setdefault(g, []).append((b, got["mean"], got["se"]))
        if len(found) >= 2:
            lead, se = paired(found[0][1], found[1][1])
            strip.append((b, found[0][0], lead - Z90 * se > 0))
    for g, points in sorted(lines.items()):
        if start is not None:
            points = [(START, start["mean"], start["se"])] + points
        x, y, se = zip(*points)
        ax.plot(x, y, "-", color=colour(g), lw=1.4, label=f"{key}{g}")
        ax.fill_between(x, [m - s for m, s in zip(y, se)], [m + s for m, s in zip(y, se)],
                        color=colour(g), alpha=0.15, lw=0)
    for b, name, clear in strip:
        g = int(name.split()[0][1:])
        ax.plot([b], [1.02], "o", color=colour(g), mfc=colour(g) if clear else "white",
                ms=5, transform=ax.get_xaxis_transform(), clip_on=False)
    changes = [s for i, s in enumerate(strip) if i == 0 or s[1] != strip[i - 1][1]]
    text = "\n".join(f"F x {b:.3g}: {name}" + ("" if clear else " (tie)")
                     for b, name, clear in changes[-4:])
    ax.text(0.02, 0.97, "leader from\n" + text, transform=ax.transAxes, va="top", fontsize=6.5)
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_xscale("log")
    mine = next(c for c in cells if c["model"] == size and c["reward"] == reward)
    fixed = "" if key == "G" else f" (G{mine['group_size']} mu{mine['update_epochs']})"
    ax.set_title(f"{size}, {reward}{fixed}: {target}", fontsize=9, pad=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bank", type=Path, action="append", default=None,
                        help=f"a bank (repeat for several budgets; default {DEFAULT_BANK.name}"
                             f", with {LARGER_BANK.name} where it exists)")
    parser.add_argument("--out", type=Path, default=None, help=f"the figure (default {OUT})")
    parser.add_argument("--targets", default="val,ood", help="panel rows (default val,ood)")
    parser.add_argument("--prompts-bank", type=Path, default=None,
                        help=f"the prompts-per-step bank (default {PROMPTS_BANK.name} where "
                             f"it exists), drawn into {PROMPTS_OUT.name} beside --out")
    add_quick(parser, "the figure into a temp folder unless --out")
    args = parser.parse_args()
    args.out = args.out or (scratch("testbed-figure") / OUT.name if args.quick else OUT)
    paths = args.bank or [DEFAULT_BANK] + ([LARGER_BANK] if LARGER_BANK.exists() else [])
    cells = [c for _, bank in load_banks(paths) for c in bank]
    name = "given banks" if args.bank else "World 1 (warm-start seed 0)"
    draw(cells, args.targets.split(","), args.out, "G",
         f"{name}: each G's best config by budget")
    second = WORLDS[2]
    if not args.bank and not args.quick and second.f_bank.exists():
        draw([c for _, bank in load_banks([second.f_bank]) for c in bank],
             args.targets.split(","), args.out.with_name(f"{OUT.stem}_w2.png"), "G",
             f"World 2 (warm-start seed {second.warmstart_seed}): each G's best config by "
             f"budget")
    prompts = args.prompts_bank or (PROMPTS_BANK if PROMPTS_BANK.exists() and not args.bank
                                    and not args.quick else None)
    if prompts:
        cells = [c | {"axis": f"P{c.get('prompts_per_step') or GRID_PROMPTS}"}
                 for c in at_full_budget(load(prompts))]
        draw(cells, args.targets.split(","), args.out.with_name(PROMPTS_OUT.name), "P",
             "Prompts per step at each size and reward's leading (G, mu) at F, by budget")


def draw(cells: list[dict], wanted: list[str], out: Path, key: str, title: str) -> None:
    """One panel per (target, size, reward), a line per value of ``key`` (G: each G's
    best config; P: each prompts per step), into ``out``."""
    views = budgets(cells)
    sizes = sorted({c["model"] for c in cells}, key=size_order)
    rewards = sorted({c["reward"] for c in cells}, key=lambda r: (r != "rule", r))
    have = {r["target"] for c in cells for r in c["evals"]}
    targets = [t for t in wanted if t in have]
    columns = [(s, r) for s in sizes for r in rewards]
    fig, axes = plt.subplots(len(targets), len(columns), figsize=(3.6 * len(columns),
                             3.1 * len(targets)), sharex=True, squeeze=False)
    groups = sorted({c["group_size"] if key == "G" else c["prompts_per_step"] for c in cells})
    palette = plt.get_cmap("viridis")
    colour = {g: palette(i / max(1, len(groups) - 1) * 0.9) for i, g in enumerate(groups)}.get
    for row, target in enumerate(targets):
        for col, (size, reward) in enumerate(columns):
            panel(axes[row][col], cells, views, (size, reward, target), colour, key)
        axes[row][0].set_ylabel(f"greedy {target} accuracy\n(seed mean +- 1 SE)")
    for ax in axes[-1]:
        ax.set_xlabel("budget (units of F; warm start at left)")
    axes[0][-1].legend(fontsize=7, loc="lower right", title="best config of" if key == "G"
                       else "prompts per step", title_fontsize=7)
    seeds = max(len({c["seed"] for c in cells if c["config"] == k})
                for k in {c["config"] for c in cells})
    fig.suptitle(f"{title} ({len({c['config'] for c in cells})} configs, {seeds} seed(s) "
                 f"at most)\n"
                 f"dots: the leader; filled where its lead's 90% interval clears the "
                 f"runner-up, open where it is a tie", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
