"""A sweep's cells with their update fraction rho: the pandas side of
:mod:`race.analysis.response`.

- :func:`with_update_fractions`: every cell's ``rho_planned`` (from the plan's FLOPs by
  phase, as ``sweep.json`` records them) and ``rho_realized`` (from its ledger).

Pure pandas: no IO (:mod:`race.analysis.load` reads), no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from race.analysis.response import realized_update_fraction, update_fraction


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
        return update_fraction(flops[cell_id]) if cell_id in flops else math.nan

    out = cells.copy()
    out["rho_planned"] = [planned_rho(str(c)) for c in cells["cell_id"]]
    out["rho_realized"] = ([realized_update_fraction(row) for row in cells.to_dict("records")]
                           if "flops_learning" in cells else math.nan)
    return out
