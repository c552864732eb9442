"""A sweep's cells with their update fraction rho, and the response surfaces of the pilot
score in rho fitted to them: the pandas side of :mod:`race.analysis.response`.

- :func:`with_update_fractions`: every cell's ``rho_planned`` (from the plan's FLOPs by
  phase, as ``sweep.json`` records them) and ``rho_realized`` (from its ledger).
- :func:`response_surfaces`: one surface per (policy model, reward) on one target, fitted
  to the ok cells' realized rho and final score there.

Pure pandas: no IO (:mod:`race.analysis.load` reads), no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from race.analysis.response import (
    BOOT,
    LEVEL,
    ResponseSurface,
    fit_surfaces,
    update_fraction,
)
from race.store.pilots import row_flops
from race.store.records import phase_flops_from

# the group a surface is fitted to: a policy size and a reward system on one target
SURFACE_KEYS = ("model", "reward", "target")


def with_update_fractions(cells: pd.DataFrame,
                          planned: Iterable[Mapping[str, Any]] = ()) -> pd.DataFrame:
    """``cells`` with two more columns, each cell's update fraction rho = learning /
    (rollout + learning + feedback) FLOPs (:func:`race.analysis.response.update_fraction`).

    Args:
        cells: one row per cell with ``cell_id``, ``flops_<phase>`` (the charged
            convention, as ``pilots.csv``) and optionally ``continues``.
        planned: the plan's cells as ``sweep.json`` records them (``cell_id`` and
            ``planned_flops``: FLOPs by phase of the steps the pilot budget buys).

    Returns:
        A copy with ``rho_planned`` (nan: a cell the plan does not list, or a refused one
        that plans no step; a ladder rung that continues a listed cell has that cell's:
        only its budget differs, and rho is the share of one step) and ``rho_realized``
        (the ledger's; a continued rung's is its lineage's; nan: nothing charged).
    """
    if "cell_id" not in cells:  # no cell at all
        return cells.assign(rho_planned=pd.Series(dtype=float),
                            rho_realized=pd.Series(dtype=float))
    flops = {str(c["cell_id"]): c["planned_flops"] for c in planned
             if c.get("cell_id") and c.get("planned_flops")}
    below = (dict(zip(cells["cell_id"], cells["continues"].fillna("")))
             if "continues" in cells else {})

    def planned_rho(cell_id: str) -> float:
        seen = set()
        while cell_id not in flops and below.get(cell_id) and cell_id not in seen:
            seen.add(cell_id)
            cell_id = below[cell_id]
        return (update_fraction(phase_flops_from(flops[cell_id], "planned_flops"))
                if cell_id in flops else math.nan)

    out = cells.copy()
    out["rho_planned"] = [planned_rho(str(c)) for c in cells["cell_id"]]
    out["rho_realized"] = ([update_fraction(row_flops(row)) for row in cells.to_dict("records")]
                           if "flops_learning" in cells else math.nan)
    return out


def surface_points(ok: pd.DataFrame, evals: pd.DataFrame, *, target: str) -> list[dict]:
    """The points a surface is fitted to: one per ok cell with a finite realized rho and
    a final score on ``target`` (``final_<target>``), with its config, group keys and
    ``n``, the problems its last checkpoint on ``target`` was scored on (0: unknown)."""
    column = f"final_{target}"
    if column not in ok or "rho_realized" not in ok:
        return []
    last = (evals[evals["target"] == target].sort_values("checkpoint")
            .groupby("cell_id")["n"].last() if len(evals) else pd.Series(dtype=int))
    return [{"model": r["model"], "reward": r["reward"], "target": target,
             "config": str(r["config_id"]), "rho": float(r["rho_realized"]),
             "score": float(r[column]), "n": int(last.get(r["cell_id"], 0))}
            for _, r in ok.iterrows()
            if pd.notna(r["rho_realized"]) and pd.notna(r[column])]


def response_surfaces(ok: pd.DataFrame, evals: pd.DataFrame, *, target: str,
                      level: float = LEVEL, boot: int = BOOT
                      ) -> dict[tuple, ResponseSurface]:
    """One :class:`~race.analysis.response.ResponseSurface` per (model, reward, target)
    of the ok cells (seeds are a config's points; points weighted by 1 / binomial SE^2
    when every cell's problem count is known), keyed by those three values.

    Args:
        ok: the ranked ok cells, with ``rho_realized`` (:func:`with_update_fractions`).
        evals: ``load_results``'s checkpoint evals (each cell's last ``n`` on ``target``).
        target: the selection target.
        level, boot: the optimum's interval coverage and its bootstrap resamples.
    """
    points = surface_points(ok, evals, target=target)
    return fit_surfaces(points, keys=SURFACE_KEYS, level=level, boot=boot) if points else {}


def surface_records(surfaces: Mapping[tuple, ResponseSurface]) -> list[dict]:
    """``selection.json``'s ``response_surface``: one dict per group, its keys (``model``
    is the policy) beside the surface's own fields (``surface``, whose ``model`` is the
    fitted one)."""
    return [dict(zip(SURFACE_KEYS, key)) | {"recommendation": fit.recommendation(),
                                             "surface": fit.to_dict()}
            for key, fit in surfaces.items()]
