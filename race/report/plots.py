"""The report's figures: allocation frontier, pilot curves with their fits, phase shares.

Matplotlib is imported inside the drawing functions, on the Agg backend, so ``race
--help`` stays fast and no display is needed. Figures are written atomically through
``race.store.io.save_figure``; FLOPs are on log axes, fonts legible at README size.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from race.analysis.curves import sigmoid
from race.core.fmt import CHARGED_PHASES, PHASE_NAMES, fmt_flops
from race.core.fmt import int_text as _int
from race.core.fmt import label as _label
from race.core.fmt import num as _num
from race.store import io as results

PHASE_COLORS = {"rollout": "#4C72B0", "learning": "#DD8452", "feedback": "#55A868"}
DPI = 150
PANEL_IN = (7.0, 4.0)  # width, height of one panel, inches
MAX_CONFIG_LEGEND = 16  # above this, curves.png's legend names models and rewards only
FONT = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
        "xtick.labelsize": 9, "ytick.labelsize": 9}
_MODEL_CMAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys", "YlOrBr", "PuRd")
_REWARD_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    plt = pyplot()
    fig.tight_layout()
    results.save_figure(fig, path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def frontier(path: Path, fronts: dict, evals: pd.DataFrame, ok: pd.DataFrame,
                   names: list[str], primary: str, title: str) -> None:
    plt = pyplot()
    from matplotlib.lines import Line2D

    rewards = sorted(ok["reward"].unique())
    colors = {r: f"C{i % 10}" for i, r in enumerate(rewards)}
    with plt.rc_context(FONT):
        fig, axes = plt.subplots(len(names), 1, squeeze=False, sharex=True,
                                 figsize=(PANEL_IN[0], PANEL_IN[1] * len(names)))
        for ax, target in zip(axes[:, 0], names):
            ev = evals[(evals["target"] == target) & (evals["flops"] > 0)
                       & evals["cell_id"].isin(ok["cell_id"])]
            ev = ev.drop(columns=[c for c in ("reward",) if c in ev]).merge(
                ok[["cell_id", "reward"]], on="cell_id")
            front = fronts[target]
            handles = []
            for reward in rewards:
                points = ev[ev["reward"] == reward]
                ax.scatter(points["flops"], points["accuracy"], s=22, alpha=0.35,
                           color=colors[reward], linewidths=0)
                line = front[(front["reward"] == reward) & (front["flops"] > 0)]
                if len(line):
                    ax.step(line["flops"], line["accuracy"], where="post",
                            color=colors[reward], lw=2.2)
                    ax.fill_between(line["flops"], line["lo"], line["hi"], step="post",
                                    color=colors[reward], alpha=0.15, linewidth=0)
                n = int((ok["reward"] == reward).sum())
                handles.append(Line2D([], [], color=colors[reward], lw=2.2,
                                      label=f"{reward} frontier ({n} cells)"))
            handles.append(Line2D([], [], color="0.5", marker="o", ls="", alpha=0.4,
                                  label="checkpoints (every cell)"))
            ax.set_xscale("log")
            ax.set_ylabel(f"accuracy on {target}")
            tag = " (primary)" if target == primary else ""
            ax.set_title(f"Allocation frontier on {target}{tag}: best lower bound within "
                         f"FLOPs (band: its interval)")
            ax.grid(True, which="major", alpha=0.35)
            ax.grid(True, which="minor", alpha=0.12)
            ax.legend(handles=handles, loc="best", framealpha=0.85)
        axes[-1, 0].set_xlabel("pilot FLOPs (charged)")
        fig.suptitle(title, fontsize=11)
        save(fig, path)


def config_styles(configs: pd.DataFrame) -> dict[str, dict]:
    """config_id -> color (a shade of its model's color family) and marker (by reward)."""
    plt = pyplot()
    models = sorted(configs["model"].unique())
    rewards = sorted(configs["reward"].unique())
    styles = {}
    for i, model in enumerate(models):
        cmap = plt.get_cmap(_MODEL_CMAPS[i % len(_MODEL_CMAPS)])
        ids = configs.loc[configs["model"] == model, "config_id"].tolist()
        for j, config_id in enumerate(ids):
            shade = 0.75 if len(ids) == 1 else 0.95 - 0.5 * j / (len(ids) - 1)  # best darkest
            reward = configs.loc[configs["config_id"] == config_id, "reward"].iloc[0]
            styles[config_id] = {
                "color": cmap(shade),
                "marker": _REWARD_MARKERS[rewards.index(reward) % len(_REWARD_MARKERS)],
                "model_color": cmap(0.75)}
    return styles


def curves(path: Path, configs: pd.DataFrame, fits: pd.DataFrame, evals: pd.DataFrame,
                 ok: pd.DataFrame, target: str, title: str) -> None:
    plt = pyplot()
    from matplotlib.lines import Line2D

    styles = config_styles(configs)
    ev = evals[(evals["target"] == target) & (evals["flops"] > 0)]
    full = float(ok["full_budget_flops"].iloc[0])
    pilot = float(ok["budget_flops"].max())
    n_configs = len(configs)
    by_config = n_configs <= MAX_CONFIG_LEGEND
    n_legend = n_configs + 2 if by_config else (
        configs["model"].nunique() + configs["reward"].nunique() + 2)
    legend_rows = math.ceil(n_legend / 2)
    with plt.rc_context(FONT):
        fig, ax = plt.subplots(figsize=(PANEL_IN[0], PANEL_IN[1] + 0.22 * legend_rows))
        lowest = ev["flops"].min() if len(ev) else pilot / 10
        # Predictions of different configs sit at one x: spread them by a few % in log x.
        spread = min(0.02 + 0.01 * n_configs, 0.15)  # decades
        offsets = np.linspace(-spread, spread, n_configs) if n_configs > 1 else [0.0]
        for offset, (_, config) in zip(offsets, configs.iterrows()):
            style = styles[config["config_id"]]
            for _, fit in fits[fits["config_id"] == config["config_id"]].iterrows():
                curve = ev[ev["cell_id"] == fit["cell_id"]].sort_values("flops")
                ax.plot(curve["flops"], curve["accuracy"], ls="", marker=style["marker"],
                        color=style["color"], ms=5, alpha=0.85)
                if fit["method"] == "sigmoid":
                    x = np.logspace(math.log10(lowest) - 0.1, math.log10(fit["predict_at"]), 200)
                    y = sigmoid(x, fit["R0"], fit["A"], fit["C_mid"], fit["B"])
                    ax.plot(x, y, ls="--", lw=1.3, color=style["color"], alpha=0.8)
                elif len(curve):  # fallback: flat at the last observed accuracy
                    ax.plot([curve["flops"].iloc[-1], fit["predict_at"]],
                            [fit["prediction"]] * 2, ls=":", lw=1.3, color=style["color"])
            pred = _num(config.get("prediction"))
            if not math.isnan(pred):
                lo = _num(config.get("prediction_lo"))
                hi = _num(config.get("prediction_hi"))
                err = None if math.isnan(lo) else [[max(pred - lo, 0)], [max(hi - pred, 0)]]
                ax.errorbar([full * 10 ** offset], [pred], yerr=err, marker=style["marker"],
                            color=style["color"], ms=7, capsize=3, lw=1.5, mec="black",
                            mew=0.6)
        for x, text in ((pilot, "pilot budget"), (full, "full budget")):
            ax.axvline(x, color="0.4", ls=":", lw=1)
            ax.text(x, 0.97, text, rotation=90, va="top", ha="center", fontsize=9,
                    color="0.3", transform=ax.get_xaxis_transform(),
                    bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1.5})
        ax.set_xscale("log")
        ax.set_xlabel("FLOPs (charged; pilot observed, then extrapolated)")
        ax.set_ylabel(f"accuracy on {target}")
        ax.set_title(f"Pilot curves and sigmoid fits to {fmt_flops(full)} FLOPs ({target})")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        if by_config:
            handles = [Line2D([], [], color=styles[c["config_id"]]["color"], ls="--",
                              marker=styles[c["config_id"]]["marker"], label=_label(c))
                       for _, c in configs.iterrows()]
        else:
            first = configs.drop_duplicates("model")
            handles = [Line2D([], [], color=styles[c["config_id"]]["model_color"], lw=3,
                              label=c["model"]) for _, c in first.iterrows()]
            handles += [Line2D([], [], color="0.3", ls="", label=r,
                               marker=_REWARD_MARKERS[i % len(_REWARD_MARKERS)])
                        for i, r in enumerate(sorted(configs["reward"].unique()))]
        handles += [Line2D([], [], color="0.3", ls="--", label="sigmoid fit (dotted: fallback)"),
                    Line2D([], [], color="0.3", marker="o", mec="black", ls="-",
                           label="predicted at full budget [lo, hi]")]
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
                  frameon=False)
        fig.suptitle(title, fontsize=11)
        save(fig, path)


def phases(path: Path, cells: pd.DataFrame, order: list[str], ranks: dict,
                 title: str) -> None:
    plt = pyplot()
    from matplotlib.ticker import PercentFormatter

    rank_of = {cid: i for i, cid in enumerate(order)}
    shown = cells[cells["total_flops"].fillna(0) > 0].assign(
        _order=lambda d: d["cell_id"].map(rank_of).fillna(len(order)))
    shown = shown.sort_values(["_order", "cell_id"], kind="stable")
    labels = [(f"#{ranks[c['config_id']]} " if c["config_id"] in ranks else "")
              + f"{_label(c)} s{_int(c.get('seed'))}"
              + ("" if c["status"] == "ok" else f" ({c['status']})")
              for _, c in shown.iterrows()]
    y = np.arange(len(shown))
    with plt.rc_context(FONT):
        fig, ax = plt.subplots(figsize=(PANEL_IN[0], max(3.0, 0.3 * len(shown) + 2.0)))
        left = np.zeros(len(shown))
        total = shown["total_flops"].to_numpy(float)
        for phase in CHARGED_PHASES:
            column = f"flops_{phase}"
            values = shown[column].fillna(0).to_numpy(float) if column in shown else 0 * left
            share = values / total
            ax.barh(y, share, left=left, color=PHASE_COLORS[phase], label=PHASE_NAMES[phase],
                    height=0.7)
            for yi, (x0, s) in enumerate(zip(left, share)):
                if s >= 0.08:
                    ax.text(x0 + s / 2, yi, f"{s:.0%}", ha="center", va="center",
                            color="white", fontsize=9)
            left += share
        ax.set_yticks(y, labels)
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel("share of the cell's charged pilot FLOPs")
        ax.set_ylim(len(shown) - 0.5, -0.5)  # best first, no empty margins
        ax.set_title(f"{title}: FLOP split by phase\n(cells in rank order, best first)",
                     pad=26)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
        save(fig, path)

