"""Can I trust a pilot? RACE's own fidelity on the embedded default grid.

Runs the embedded default grid (2 sizes x 2 search x 2 learning x 2 feedback) twice, with
every cell at >= 2 seeds:

1. as pilots: each cell at ``fraction x budget`` (what ``race sweep`` does);
2. exhaustively: each cell at the full ``budget`` (what the pilots are meant to predict).

Then it compares the pilots' ranking of the 16 allocations with the full-budget ranking:
Spearman and Kendall correlations for the pilots' observed scores, their extrapolated
(sigmoid fit) scores, and the guarded scores RACE's selection uses (the extrapolation
only where its interval is at most 0.3 wide); top-1 and top-3 regret (the best full-budget
score minus the best full-budget score among the pilot's top 1 / top 3), the full-budget seed
noise (the standard deviation of a config's score across seeds, averaged over configs,
divided by sqrt(seeds): the standard error of a config's mean), and the compute the pilot
grid spent as a share of the exhaustive full grid.

Both sweeps are ordinary ``race sweep`` folders under ``--out`` (a rerun resumes them).
Writes ``fidelity.csv`` and ``fidelity.png`` there (and copies the figure to
``bench/figures/`` for the README).

Usage: ``python bench/race_fidelity.py [--budget 2.8e11] [--fraction 0.25] [--seeds 2]
[--slots 2] [--quick]``. Last line: ``spearman=<x> kendall=<y> top1_regret=<z>
pilot_cost_share=<w>``
(for the observed pilot scores; the extrapolated ones are printed above it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bench.common import (
    FIGURES,
    QUICK_PILOT,
    add_quick,
    merged,
    quick_policy,
    scratch,
    use_scratch_cache,
)

KNOBS = ["model", "reward", "group_size", "update_epochs"]
MAX_WIDTH = 0.3  # select_for_validation's default max_width (race.analysis.select)


def sweep(out: Path, name: str, budget: float, fraction: float, seeds: int, slots: int,
          target: str, extra: tuple = ()) -> None:
    """One ``race sweep`` of the default grid, every cell a flat pilot at ``fraction`` of
    ``budget`` (the default ladder would shrink the pilots' budget below one step at this
    budget, and this compares fixed-fraction pilots with full runs)."""
    seed_axis = ",".join(str(s) for s in range(seeds))
    args = [sys.executable, "-m", "race.cli", "sweep", *merged(
        [f"budget={budget}", "selection.policy=flat", f"pilot.fraction={fraction}",
         f"pilot.seed={seed_axis}", f"launcher.slots={slots}", f"sweep.out_dir={out}",
         f"sweep.name={name}"], extra)]
    print(f"$ race sweep {' '.join(args[4:])}", flush=True)
    done = subprocess.run(args)
    if done.returncode not in (0, 1):
        raise SystemExit(f"sweep {name} failed to run (exit {done.returncode})")


def scores(folder: Path, target: str) -> tuple[pd.DataFrame, float]:
    """Per allocation: observed mean, extrapolated mean, per-seed values; total FLOPs."""
    from race.analysis import aggregate
    from race.analysis.curves import fit_cells
    from race.analysis.load import load_results

    cells, evals, _ = load_results(folder)
    ok, failed = aggregate.split_status(cells)
    if len(failed):
        print(f"{folder.name}: {len(failed)} failed cell(s) excluded: "
              f"{list(failed.cell_id)}", flush=True)
    fits = fit_cells(evals, ok, target=target)
    ok = ok.merge(fits[["cell_id", "prediction", "method", "lo", "hi"]], on="cell_id")
    ok["width"] = ok["hi"] - ok["lo"]
    grouped = ok.groupby(KNOBS)
    frame = pd.DataFrame({
        "observed": grouped[f"final_{target}"].mean(),
        "extrapolated": grouped["prediction"].mean(),
        "seed_sd": grouped[f"final_{target}"].std(ddof=1),
        "seeds": grouped["seed"].nunique(),
        "sigmoid_fits": grouped["method"].apply(lambda m: int((m == "sigmoid").sum())),
        "width": grouped["width"].mean(),
    }).reset_index()
    # what RACE's selection scores with: the extrapolation only where every seed's fit is a
    # sigmoid whose interval is at most MAX_WIDTH wide, else the observed pilot mean
    trusted = (frame["sigmoid_fits"] == frame["seeds"]) & (frame["width"] <= MAX_WIDTH)
    frame["guarded"] = frame["extrapolated"].where(trusted, frame["observed"])
    return frame, float(cells["total_flops"].fillna(0).sum())


def regret(full: pd.Series, pilot: pd.Series, k: int) -> float:
    """Best full-budget score minus the best full-budget score among the pilot's top k."""
    top = pilot.sort_values(ascending=False, kind="stable").index[:k]
    return float(full.max() - full.loc[top].max())


def compare(pilot: pd.DataFrame, full: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    both = pilot.merge(full, on=KNOBS, suffixes=("_pilot", "_full"))
    realized = both["observed_full"]
    out = {}
    for basis in ("observed", "extrapolated", "guarded"):
        predicted = both[f"{basis}_pilot"]
        out[basis] = {
            "spearman": float(stats.spearmanr(predicted, realized).statistic),
            "kendall": float(stats.kendalltau(predicted, realized).statistic),
            "top1_regret": regret(realized, predicted, 1),
            "top3_regret": regret(realized, predicted, 3),
        }
    se = both["seed_sd_full"] / np.sqrt(both["seeds_full"])
    out["seed_noise"] = float(se.mean())
    return both, out


def plot(both: pd.DataFrame, summary: dict, path: Path, target: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    markers = {r: m for r, m in zip(sorted(both.reward.unique()), "os^D")}
    colors = {m: c for m, c in zip(sorted(both.model.unique()), ("tab:blue", "tab:orange",
                                                                  "tab:green"))}
    for ax, basis in zip(axes, ("observed", "extrapolated")):
        for _, row in both.iterrows():
            ax.scatter(row[f"{basis}_pilot"], row["observed_full"],
                       marker=markers[row.reward], color=colors[row.model], s=45,
                       edgecolor="black", linewidth=0.5)
            ax.annotate(f"G{row.group_size} mu{row.update_epochs}",
                        (row[f"{basis}_pilot"], row["observed_full"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points", alpha=0.7)
        s = summary[basis]
        ax.set_title(f"pilot {basis} vs full budget: Spearman {s['spearman']:.2f}, "
                     f"Kendall {s['kendall']:.2f}", fontsize=10)
        ax.set_xlabel(f"pilot score on {target} ({basis}; mean over seeds)")
        ax.set_ylabel(f"full-budget accuracy on {target}")
        ax.grid(alpha=0.3)
    handles = ([plt.Line2D([], [], marker="o", ls="", color=c, label=m)
                for m, c in colors.items()]
               + [plt.Line2D([], [], marker=mk, ls="", color="gray", label=r)
                  for r, mk in markers.items()])
    fig.legend(handles=handles, fontsize=9, loc="lower center", ncol=len(handles),
               frameon=False)
    fig.suptitle(f"RACE fidelity: pilots at {summary['fraction']:g} x budget vs every cell "
                 f"at the full budget ({summary['budget']:.2g} FLOPs); pilot cost "
                 f"{summary['pilot_cost_share']:.0%} of the exhaustive grid", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=2.8e11,
                        help="full-run budget, FLOPs (each exhaustive cell spends it)")
    parser.add_argument("--fraction", type=float, default=0.25, help="pilot.fraction")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2, help="launcher.slots")
    parser.add_argument("--target", default="test")
    parser.add_argument("--out", type=Path, default=Path("results/fidelity"))
    add_quick(parser, "one tiny-s config of a 4-step warm start, 2 seeds, 2-step full runs")
    args = parser.parse_args()
    if args.seeds < 2:
        raise SystemExit("--seeds must be >= 2 (seed noise needs two)")
    extra = ()
    if args.quick:
        use_scratch_cache()
        args.out, args.budget, args.fraction = scratch("fidelity"), 8e8, 0.5
        extra = (*QUICK_PILOT, f"model.hf_id={quick_policy()}", f"budget={args.budget}",
                 "launcher=inline")
    sweep(args.out, "pilot", args.budget, args.fraction, args.seeds, args.slots, args.target,
          extra)
    sweep(args.out, "full", args.budget, 1.0, args.seeds, args.slots, args.target, extra)
    pilot, pilot_flops = scores(args.out / "pilot", args.target)
    full, full_flops = scores(args.out / "full", args.target)
    both, summary = compare(pilot, full)
    summary |= {"pilot_cost_share": pilot_flops / full_flops, "budget": args.budget,
                "fraction": args.fraction}
    both.sort_values("observed_full", ascending=False).to_csv(args.out / "fidelity.csv",
                                                             index=False)
    columns = KNOBS + ["observed_pilot", "extrapolated_pilot", "guarded_pilot",
                       "sigmoid_fits_pilot", "observed_full", "seed_sd_full"]
    print(both.sort_values("observed_full", ascending=False)[columns]
          .to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for basis in ("observed", "extrapolated", "guarded"):
        s = summary[basis]
        print(f"{basis:>12}: spearman {s['spearman']:.3f}  kendall {s['kendall']:.3f}  "
              f"top1_regret {s['top1_regret']:.3f}  top3_regret {s['top3_regret']:.3f}")
    print(f"full-budget seed noise (standard error of a config's mean): "
          f"{summary['seed_noise']:.3f}; pilot FLOPs {pilot_flops:.3g} = "
          f"{summary['pilot_cost_share']:.1%} of the exhaustive grid's {full_flops:.3g}")
    figure = args.out / "fidelity.png"
    plot(both, summary, figure, args.target)
    if not args.quick:
        FIGURES.mkdir(exist_ok=True)
        shutil.copy(figure, FIGURES / "race_fidelity.png")
    s = summary["observed"]
    print(f"spearman={s['spearman']:.3f} kendall={s['kendall']:.3f} "
          f"top1_regret={s['top1_regret']:.3f} "
          f"pilot_cost_share={summary['pilot_cost_share']:.3f}")


if __name__ == "__main__":
    main()
