"""What the pilots spent beside what was planned, and whether the cells a ranking
compares spent comparable compute (pure).

The plan is the sweep's before it ran (``ladder.json``'s ``cost_share``, or every
planned cell at ``pilot_fraction``); it differs from the spend where cells were refused
at planning (one worst-case step exceeds their budget), where a ladder's rungs ran
fewer configs than planned, and where cells stopped short of their budget (whole steps,
failures). Every time estimate reads one rate, :func:`training_rate`.
"""

from __future__ import annotations

import math

import pandas as pd

from race.analysis.aggregate import increments
from race.core.fmt import CHARGED_PHASES

# cells at one rung whose charged FLOPs differ by more than this share of the largest
# are not compared at matched compute
MATCHED_SPREAD = 0.1


def training_rate(flops: float, wall_s: dict[str, float]) -> float:
    """Charged FLOP/s of a pilot's training: its charged FLOPs over the wall seconds of
    its charged phases (rollout, learning, feedback), loading and eval left out: the
    one rate every time estimate reads (the leaderboard's and ``race validate``'s). NaN
    where nothing was measured."""
    seconds = sum(float(wall_s.get(p) or 0.0) for p in CHARGED_PHASES)
    return flops / seconds if seconds > 0 and flops > 0 else math.nan


def _first_fraction(ladder: dict | None, record: dict, cells: pd.DataFrame) -> float:
    if ladder is not None:
        return float(ladder["rungs"][0]["fraction"])
    if record.get("pilot_fraction"):
        return float(record["pilot_fraction"])
    full = float(cells["full_budget_flops"].dropna().iloc[0])
    return float(cells["budget_flops"].max()) / full


def pilot_spend(cells: pd.DataFrame, ladder: dict | None, record: dict) -> dict:
    """The sweep's pilot compute as spent and as planned, in shares of one full run.

    Args:
        cells: every rung's cells (``total_flops`` cumulative along a ladder's lineage).
        ladder: ``ladder.json`` or None (a flat sweep); record: ``sweep.json`` ({}).

    Returns:
        {"spent": charged FLOPs of every cell / F, "planned", "refused": cells refused at
        planning, "refused_share" (each at the first rung's budget), "refused_why",
        "shrunk_share" (rungs that ran fewer configs than planned), "unspent_share"
        (cells that stopped short), "rungs": per rung its cells' spend
        (:func:`rung_spends`)}.
    """
    full = float(record.get("budget_flops") or cells["full_budget_flops"].dropna().iloc[0])
    spent = float(increments(cells)["total_flops"].fillna(0).sum()) / full
    first = _first_fraction(ladder, record, cells)
    planned_cells = [c for c in record.get("cells", []) if c.get("refused")]
    refused, why = len(planned_cells), sorted({str(c["refused"]) for c in planned_cells})
    if ladder is not None:
        fractions = [float(r["fraction"]) for r in ladder["rungs"]]
        ran = sum(len(r["cells"]) * (f - (fractions[i - 1] if i else 0.0))
                  for i, (r, f) in enumerate(zip(ladder["rungs"], fractions)))
        planned = float(ladder.get("cost_share", math.nan))
    else:
        ran = len(cells) * first
        planned = (len(record["cells"]) * first if record.get("cells")
                   else ran)
    refused_share = refused * first
    return {"spent": spent, "planned": planned, "refused": refused,
            "refused_share": refused_share, "refused_why": why,
            "shrunk_share": max(0.0, planned - refused_share - ran),
            "unspent_share": ran - spent, "full": full,
            "rungs": rung_spends(cells, ladder)}


def rung_spends(cells: pd.DataFrame, ladder: dict | None) -> list[dict]:
    """Per rung (a flat sweep: one), the charged FLOPs each ranked cell had spent at its
    end (``spends``: cell_id -> FLOPs), its budget and ``matched``: whether they are
    within :data:`MATCHED_SPREAD` of each other (else the ranking there compares
    different compute)."""
    spent = dict(zip(cells["cell_id"], cells["total_flops"])) if len(cells) else {}
    ok = set(cells.loc[cells["status"] == "ok", "cell_id"]) if len(cells) else set()
    if ladder is None:
        groups = [(1, float(cells["budget_flops"].max()) if len(cells) else math.nan,
                   sorted(ok))]
    else:
        groups = [(int(r["rung"]), float(r["budget_flops"]),
                   [c for c in r["cells"] if c in ok]) for r in ladder["rungs"]]
    out = []
    for rung, budget, ids in groups:
        spends = {c: float(spent[c]) for c in ids if pd.notna(spent.get(c))}
        values = list(spends.values())
        matched = (not values or max(values) <= 0
                   or (max(values) - min(values)) <= MATCHED_SPREAD * max(values))
        out.append({"rung": rung, "budget_flops": budget, "spends": spends,
                    "matched": matched})
    return out
