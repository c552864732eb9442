"""A ladder sweep's figures: every config's curve through the rungs it ran
(``curves.png``) and the allocation frontier over every rung's checkpoints
(``frontier.png``), drawn from :func:`race.analysis.ladder_curves.ladder_points`.

FLOPs are on a log axis; the warm start (0 FLOPs) is drawn a little left of the first
checkpoint, at the tick labelled "start". A flat sweep's figures are
:mod:`race.report.plots`'.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from race.analysis.curves import sigmoid
from race.core.fmt import label as _label
from race.core.rungs import fmt_fraction
from race.report.plots import FONT, PANEL_IN, config_styles, pyplot, save

LINESTYLES = ("-", "--", ":", "-.")
START_GAP = 2.5  # the warm start sits this factor left of the first checkpoint


def start_x(points: pd.DataFrame) -> float:
    """Where the warm start (0 FLOPs) is drawn on the log axis."""
    positive = points.loc[points["flops"] > 0, "flops"]
    return float(positive.min()) / START_GAP if len(positive) else 1.0


def _xs(flops: pd.Series, x0: float) -> np.ndarray:
    return np.where(flops.to_numpy(float) > 0, flops.to_numpy(float), x0)


START_ROOM_IN = 0.4  # no decade label closer than this (inches) to "start"


def _mark_start(ax, x0: float) -> None:
    from matplotlib.ticker import LogFormatterSciNotation, NullFormatter

    class ClearOfStart(LogFormatterSciNotation):
        """Decade labels, blank where one would sit on "start"."""

        def __call__(self, x, pos=None):
            (near, _), (start, _) = ax.transData.transform([(x, 1), (x0, 1)])
            if abs(near - start) < START_ROOM_IN * ax.figure.dpi:
                return ""
            return super().__call__(x, pos)

    ax.xaxis.set_major_formatter(ClearOfStart())
    ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: room for "start"
    ax.axvline(x0 * math.sqrt(START_GAP), color="0.6", lw=0.8, ls=(0, (1, 3)))
    ax.text(x0, -0.02, "start", transform=ax.get_xaxis_transform(), ha="center",
            va="top", fontsize=9, color="0.25")


def _mark_rungs(ax, ladder: dict, *, labels: bool = True) -> None:
    """Each rung's budget: a dotted line, named on a top axis (``labels``)."""
    from matplotlib.ticker import NullLocator

    budgets = [r["budget_flops"] for r in ladder["rungs"]]
    for budget in budgets:
        ax.axvline(budget, color="0.55", ls=":", lw=0.9)
    if labels:
        top = ax.secondary_xaxis("top")
        top.set_xticks(budgets, labels=[f"rung {r['rung']}\n{fmt_fraction(r['fraction'])}"
                                        for r in ladder["rungs"]])
        top.xaxis.set_minor_locator(NullLocator())
        top.tick_params(labelsize=8, colors="0.3", length=3)


def curves(path: Path, points: pd.DataFrame, fits: pd.DataFrame, configs: pd.DataFrame,
           ladder: dict, target: str, full_flops: float, title: str,
           predicted: dict | None = None) -> None:
    """Each config's score on ``target`` against charged FLOPs, from its own warm
    start through its last rung (a line per seed; colour: size, shade: the config's
    first-rung rank; line style and marker: reward), the pick marked, the sigmoid
    through a lineage's rungs drawn to the full budget where one fits (its shape only),
    and ``predicted``: the pick's prediction at F the report prints, with its 90%
    interval (:mod:`race.analysis.forecast`)."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    styles = config_styles(configs)
    rewards = sorted(configs["reward"].unique())
    dash = {r: LINESTYLES[i % len(LINESTYLES)] for i, r in enumerate(rewards)}
    x0 = start_x(points)
    fitted = fits[fits["method"] == "sigmoid"] if len(fits) else fits
    with plt.rc_context(FONT):
        fig, ax = plt.subplots(figsize=(PANEL_IN[0], PANEL_IN[1] + 1.0))
        ax.set_xscale("log")
        order = points.sort_values(["pick", "last_rung"], kind="stable")  # the pick on top
        for (config, _), line in order.groupby(["config_id", "lineage"], sort=False):
            style, first = styles.get(config, {}), line.iloc[0]
            pick = bool(first["pick"])
            ax.plot(_xs(line["flops"], x0), line["accuracy"], ls=dash[first["reward"]],
                    marker=style.get("marker", "o"), color=style.get("color", "0.4"),
                    lw=2.6 if pick else 1.0 + 0.25 * int(first["last_rung"]),
                    ms=6 if pick else 3.5, alpha=1.0 if pick else 0.75, zorder=4 if pick else 2)
        for fit in fitted.itertuples(index=False):
            line = points[points["lineage"] == fit.lineage]
            x = np.logspace(math.log10(line["flops"][line["flops"] > 0].max()),
                            math.log10(full_flops), 60)
            color = styles.get(fit.config_id, {}).get("color", "0.4")
            ax.plot(x, sigmoid(x, fit.R0, fit.A, fit.C_mid, fit.B), ls=(0, (4, 2)), lw=1.2,
                    color=color, alpha=0.9)
        if predicted:  # what the report prints: calibrated persistence, 90% interval
            ax.errorbar([full_flops], [predicted["prediction"]],
                        yerr=[[predicted["prediction"] - predicted["lo"]],
                              [predicted["hi"] - predicted["prediction"]]],
                        color="gold", marker="D", ms=7, capsize=4, mec="black", mew=0.8,
                        ecolor="0.2", zorder=5)
        _mark_pick(ax, points, x0)
        _mark_rungs(ax, ladder)
        if len(fitted) or predicted:
            ax.axvline(full_flops, color="0.3", ls="-.", lw=0.9)
            ax.text(full_flops, 0.5, "full budget F", rotation=90, ha="right", va="center",
                    fontsize=8, color="0.3", transform=ax.get_xaxis_transform())
        _mark_start(ax, x0)
        ax.set_xlabel("charged FLOPs (cumulative along each config's rungs)", labelpad=14)
        ax.set_ylabel(f"accuracy on {target}")
        ax.set_title(f"Every config from its warm start through its last rung ({target})")
        ax.grid(True, which="major", alpha=0.3)
        first = configs.drop_duplicates("model")
        handles = [Line2D([], [], color=styles[c["config_id"]]["model_color"], lw=3,
                          label=c["model"]) for _, c in first.iterrows()]
        handles += [Line2D([], [], color="0.3", ls=dash[r], marker=styles[
            configs.loc[configs["reward"] == r, "config_id"].iloc[0]]["marker"], label=r)
                    for r in rewards]
        handles.append(Line2D([], [], color="gold", mec="black", marker="*", ms=13, ls="",
                              label="pick (its last rung)"))
        if len(fitted):
            handles.append(Line2D([], [], color="0.3", ls=(0, (4, 2)),
                                  label="sigmoid through the rungs (shape only)"))
        if predicted:
            handles.append(Line2D([], [], color="gold", mec="black", marker="D", ms=7,
                                  ls="", label="pick's prediction at F, 90% (persistence)"))
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.23),
                  ncol=3, frameon=False)
        fig.suptitle(title, fontsize=11)
        save(fig, path)


def _mark_pick(ax, points: pd.DataFrame, x0: float) -> None:
    pick = points[points["pick"] & (points["flops"] > 0)]
    if pick.empty:
        return
    last = pick.sort_values("flops").iloc[-1]
    ax.plot([last["flops"]], [last["accuracy"]], marker="*", ms=16, color="gold",
            mec="black", mew=0.8, ls="", zorder=6)
    ax.annotate(f"pick: {_label(last)}, {last['accuracy']:.3f}",
                (last["flops"], last["accuracy"]), xytext=(0.4, 0.96),
                textcoords="axes fraction", ha="center", va="top", fontsize=9,
                bbox={"fc": "white", "ec": "0.6", "alpha": 0.9, "pad": 2},
                arrowprops={"arrowstyle": "->", "color": "0.3", "lw": 0.8}, zorder=7)


def frontier(path: Path, fronts: dict, points: dict[str, pd.DataFrame], names: list[str],
             primary: str, ladder: dict, title: str) -> None:
    """Per target, the allocation frontier over every rung's checkpoints (per reward: the
    checkpoint with the best lower bound within each FLOP level, band: its interval),
    every checkpoint beside it, and the warm starts; a reward with a single checkpoint
    past its start is drawn as that point, and the panel says so."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    rewards = sorted({r for p in points.values() for r in p["reward"].unique()})
    colors = {r: f"C{i % 10}" for i, r in enumerate(rewards)}
    with plt.rc_context(FONT):
        fig, axes = plt.subplots(len(names), 1, squeeze=False, sharex=True,
                                 figsize=(PANEL_IN[0], PANEL_IN[1] * len(names)))
        x0 = start_x(pd.concat(points.values()))
        for ax, target in zip(axes[:, 0], names):
            ax.set_xscale("log")
            handles, scored = [], {}
            for reward in rewards:
                scored[reward] = _frontier_reward(ax, fronts[target], points[target],
                                                  reward, colors[reward])
                handles.append(Line2D([], [], color=colors[reward], lw=2.2,
                                      label=f"{reward} frontier"))
            _warm_starts(ax, points[target], x0)
            handles += [Line2D([], [], color="0.5", marker="o", ls="", alpha=0.5,
                               label="checkpoints (every rung)"),
                        Line2D([], [], color="0.3", marker="o", ls="", mfc="none",
                               label="warm start (0 FLOPs)")]
            note = _frontier_note(scored, points[target], target)
            if note:
                ax.text(0.98, 0.04, note, transform=ax.transAxes, fontsize=8.5,
                        va="bottom", ha="right",
                        bbox={"fc": "white", "ec": "0.7", "alpha": 0.9, "pad": 2})
            _mark_rungs(ax, ladder, labels=target == names[0])
            _mark_start(ax, x0)
            tag = " (primary)" if target == primary else ""
            ax.set_ylabel(f"accuracy on {target}")
            ax.set_title(f"Allocation frontier on {target}{tag}: best lower bound within "
                         "FLOPs", fontsize=10.5)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(handles=handles, loc="upper left", framealpha=0.9, fontsize=8.5)
        axes[-1, 0].set_xlabel("charged FLOPs (cumulative along each config's rungs)",
                               labelpad=14)
        fig.suptitle(title, fontsize=11)
        save(fig, path)


def _warm_starts(ax, points: pd.DataFrame, x0: float) -> None:
    """Each distinct warm start (0 FLOPs), hollow, named by its size: the same policy for
    every reward; one size scored under other conditions (another generation cap) is
    another point, never their mean."""
    starts = points.loc[points["flops"] == 0, ["model", "accuracy"]]
    starts = starts.assign(accuracy=starts["accuracy"].round(3)).drop_duplicates()
    ax.scatter([x0] * len(starts), starts["accuracy"].to_numpy(), s=34, facecolors="none",
               edgecolors="0.25", linewidths=1.2, zorder=3)
    names: dict[float, list[str]] = {}
    for model, accuracy in zip(starts["model"], starts["accuracy"]):  # level: one label
        names.setdefault(float(accuracy), []).append(str(model))
    for accuracy, models in names.items():
        ax.annotate(", ".join(models), (x0, accuracy), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8, color="0.25")


def _frontier_note(scored: dict[str, int], points: pd.DataFrame, target: str) -> str:
    """What a panel cannot draw: rewards scored at one rung (points, no line) or none."""
    lines = []
    for reward, rungs in scored.items():
        if rungs == 1:
            rung = int(points.loc[(points["reward"] == reward) & (points["flops"] > 0),
                                  "rung"].iloc[0])
            lines.append(f"{reward}: scored on {target} at rung {rung} only: "
                         "points, no frontier")
        elif rungs == 0:
            lines.append(f"{reward}: not scored on {target} past its warm start")
    return "\n".join(lines)


def _frontier_reward(ax, front: pd.DataFrame, points: pd.DataFrame, reward: str,
                     color: str) -> int:
    """One reward's checkpoints and frontier on a panel; returns how many
    rungs scored it past the start (0 or 1: no line is drawn, only its points)."""
    mine = points[points["reward"] == reward]
    later = mine[mine["flops"] > 0]
    rungs = later["rung"].nunique()
    line = front[(front["reward"] == reward) & (front["flops"] > 0)]
    if rungs <= 1:  # one rung's checkpoints: points with their intervals, no frontier
        if len(line):
            ax.errorbar(line["flops"], line["accuracy"],
                        yerr=[line["accuracy"] - line["lo"], line["hi"] - line["accuracy"]],
                        color=color, marker="o", ms=5, capsize=3, lw=1.4, ls="")
        return rungs
    ax.scatter(later["flops"], later["accuracy"], s=18, alpha=0.4, color=color,
               linewidths=0)
    ax.step(line["flops"], line["accuracy"], where="post", color=color, lw=2.2)
    ax.fill_between(line["flops"], line["lo"], line["hi"], step="post", color=color,
                    alpha=0.13, linewidth=0)
    return rungs
