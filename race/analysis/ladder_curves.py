"""What a ladder's figures draw: every config's score against charged FLOPs through
every rung it ran, from its own warm start, and the curve fits where a lineage has
points enough (pure pandas).

A ladder's rung continues the cell of the rung below from its saved state, so a config's
seed is one lineage of cells (``continues`` links them) whose charged FLOPs accumulate.
:func:`ladder_points` lays each lineage's checkpoints end to end;
:func:`race.analysis.aggregate.frontier` on every rung's cells gives the envelope.
"""

from __future__ import annotations

import math

import pandas as pd

from race.analysis.aggregate import target_evals
from race.analysis.curves import fit_curve, full_budget_interval

POINT_COLUMNS = ["config_id", "lineage", "cell_id", "rung", "fraction", "target", "flops",
                 "accuracy", "n", "model", "reward", "group_size", "update_epochs", "seed",
                 "last_rung", "pick"]


def lineages(cells: pd.DataFrame) -> dict[str, str]:
    """cell_id -> the first cell of its lineage (a ladder rung ``continues`` the cell of
    the rung below; a cell that continues none is its own first)."""
    below = dict(zip(cells["cell_id"], cells["continues"].fillna("")
                     if "continues" in cells else [""] * len(cells)))
    out = {}
    for cell in below:
        first, seen = cell, {cell}
        while below.get(first) and below[first] not in seen:
            first = below[first]
            seen.add(first)
        out[cell] = first
    return out


def ladder_points(ladder: dict, cells: pd.DataFrame, evals: pd.DataFrame, *, target: str,
                  pick: str | None = None) -> pd.DataFrame:
    """Every checkpoint each ladder config reached on ``target``, rung by rung.

    Args:
        ladder: ``ladder.json`` (``rungs``, each with ``candidates``: ``config``,
            ``cell_ids``, ``model``, ``reward``, ``group_size``, ``update_epochs``).
        cells: every rung's cells (``cell_id``, ``status``, ``continues``, ``seed``, ...).
        evals: every rung's checkpoint evals (``load_results``: FLOPs charged when each
            was scored, cumulative along a lineage; the warm start at 0 FLOPs).
        target: the evaluation target.
        pick: the selected config (its rows get ``pick`` True).

    Returns:
        One row per (lineage, FLOPs level): ``config_id`` (the ladder's config),
        ``lineage`` (its seed's first cell), ``cell_id`` (the first cell that scored
        it), ``rung`` (0: the warm start; else the rung whose budget it was scored
        within), ``fraction`` (that rung's share of the full budget; 0 for the start),
        ``flops``, ``accuracy``, ``n`` (problems), the config's knobs, ``seed``,
        ``last_rung`` (the highest rung the config ran) and ``pick``; sorted by config,
        lineage and FLOPs.
    """
    if not len(evals) or target not in set(evals["target"]):
        return pd.DataFrame(columns=POINT_COLUMNS)
    first_of = lineages(cells)
    seed_of = dict(zip(cells["cell_id"], cells["seed"] if "seed" in cells else 0))
    budgets = [(r["rung"], r["fraction"], r["budget_flops"]) for r in ladder["rungs"]]
    ev = target_evals(evals, cells, target)
    rows = []
    for rung in ladder["rungs"]:
        for cand in rung["candidates"]:
            last = max(r["rung"] for r in ladder["rungs"]
                       if any(c["config"] == cand["config"] for c in r["candidates"]))
            for cell_id in cand["cell_ids"]:
                for point in ev[ev["cell_id"] == cell_id].itertuples(index=False):
                    number, fraction = _rung_of(float(point.flops), budgets)
                    rows.append({
                        "config_id": cand["config"], "lineage": first_of.get(cell_id, cell_id),
                        "cell_id": cell_id, "rung": number, "fraction": fraction,
                        "target": target, "flops": float(point.flops),
                        "accuracy": float(point.accuracy),
                        "n": int(point.n) if "n" in ev and not math.isnan(point.n) else 0,
                        "model": cand["model"], "reward": cand["reward"],
                        "group_size": cand.get("group_size"),
                        "update_epochs": cand.get("update_epochs"),
                        "seed": seed_of.get(cell_id, 0), "last_rung": last,
                        "pick": cand["config"] == pick})
    frame = pd.DataFrame(rows, columns=POINT_COLUMNS)
    # a continued cell repeats its lineage's checkpoints: keep each level once, from the
    # lowest rung's cell that scored it
    frame = frame.sort_values(["config_id", "lineage", "flops", "rung"], kind="stable")
    return frame.drop_duplicates(["lineage", "flops"]).reset_index(drop=True)


def _rung_of(flops: float, budgets: list[tuple[int, float, float]]) -> tuple[int, float]:
    """(rung number, its fraction) of a checkpoint scored at ``flops`` charged: the first
    rung whose budget holds it; (0, 0.0) for the warm start."""
    if flops <= 0:
        return 0, 0.0
    for number, fraction, budget in budgets:
        if flops <= budget * (1 + 1e-9):
            return number, fraction
    return budgets[-1][0], budgets[-1][1]


def lineage_fits(points: pd.DataFrame, *, predict_at: float) -> pd.DataFrame:
    """The ScaleRL sigmoid of each lineage's curve (:func:`race.analysis.curves.fit_curve`:
    it needs its warm start and 3 checkpoints past it), extrapolated to ``predict_at``
    FLOPs. One row per lineage: config_id, lineage, method ("sigmoid" or "last"), the
    fit's R0, A, C_mid, B (nan for "last"), prediction, lo and hi (the fit's own interval),
    full_lo and full_hi (the prediction's calibrated 90% interval,
    :func:`race.analysis.curves.full_budget_interval`), last_flops (the last point's
    FLOPs), n_points, reason."""
    rows = []
    for (config, lineage), curve in points.groupby(["config_id", "lineage"], sort=True):
        fit = fit_curve(curve["flops"], curve["accuracy"], predict_at=predict_at)
        params = fit.params or {}
        full_lo, full_hi = full_budget_interval(fit, predict_at)
        rows.append({"config_id": config, "lineage": lineage, "method": fit.method,
                     **{k: params.get(k, math.nan) for k in ("R0", "A", "C_mid", "B")},
                     "prediction": fit.prediction, "lo": fit.lo, "hi": fit.hi,
                     "full_lo": full_lo, "full_hi": full_hi, "last_flops": fit.last_flops,
                     "n_points": fit.n_points, "reason": fit.reason})
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


FIT_COLUMNS = ["config_id", "lineage", "method", "R0", "A", "C_mid", "B", "prediction", "lo",
               "hi", "full_lo", "full_hi", "last_flops", "n_points", "reason"]
