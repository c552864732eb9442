"""``race validate``: the configs a report selected, run at the full budget from the warm
start through the same launch helper as the sweep (after saying what they will cost),
then compared with what the pilots read and what their curves predicted at the full
budget.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from race.analysis.aggregate import compare_predictions
from race.core.fmt import fmt_flops
from race.core.specs import RunSpec
from race.errors import DamagedResult, UsageError
from race.run.cells import launch_cells
from race.store.cell import CellDir, cell_dirs
from race.store.claims import this_process
from race.store.io import REPORT_FIX, SWEEP_JSON_FIX, read_json, read_result, write_json
from race.store.sweep_files import SELECTION_JSON, SweepDir

COMMAND = "race validate"  # what its messages are headed by


def full_budget_spec(spec_dict: dict, full_budget_flops: float, select_examples: int = 0):
    """The pilot's :class:`RunSpec` again, at the full budget from the warm start (a new
    cell id; a ladder rung's continuation and its shared eval plan are dropped: it scores
    its own warm start and every target at each checkpoint), scoring its selection target
    on at least ``select_examples`` problems (pilots score few: their eval is in their
    budget)."""
    spec = RunSpec.from_dict(spec_dict)
    return replace(spec, budget_flops=float(full_budget_flops), continues="",
                   score_start=True, report_from_flops=0.0,
                   select_examples=max(spec.select_examples, select_examples))


def _cell_spec(cell: CellDir) -> dict:
    """A selected cell's spec.json, or DamagedResult naming it (missing or damaged)."""
    path = cell.spec
    fix = (f"rerun the same race sweep command (the cell runs again), then `race report "
           f"{cell.path.parent.parent}`")
    if not path.is_file():
        raise DamagedResult(str(path), f"missing ({SELECTION_JSON} selects this cell)", fix)
    return read_result(path, fix)


def run_validation(sweep_dir: Path, cfg, top_k: int | None = None) -> dict:
    """Run the selected cells of ``selection.json`` at the full budget; compare.

    The runs go to ``<sweep>/validate/cells/<cell_id>/`` through the configured launcher,
    with the same resume rule as sweeps (cells with an ok summary are not rerun).
    Before they start, one line on stderr says what they cost (:func:`validation_cost`).
    Returns ``aggregate.compare_predictions``'s dict on the pilots' reads, its rows and
    coverage made over to the prediction at the full budget (:func:`at_full_budget`),
    plus ``target``, ``failed`` and ``budget_flops``.
    """
    sweep = SweepDir(sweep_dir)
    selection = read_result(sweep.selection, REPORT_FIX)
    record = read_result(sweep.record, SWEEP_JSON_FIX)
    if not isinstance(selection.get("selected"), list) or "target" not in selection:
        raise DamagedResult(str(sweep.selection), "lacks its selected cells or target",
                            REPORT_FIX)
    chosen = selection["selected"][:top_k] if top_k else selection["selected"]
    if not chosen:
        raise UsageError(f"{sweep_dir}/{SELECTION_JSON}: selects no cells; run `race report "
                         f"{sweep_dir}` after a sweep with ok cells")
    full = record["budget_flops"]
    out_dir = sweep.validate
    specs, config_of = [], {}
    for choice in chosen:
        for cell_id in choice["cell_ids"]:
            spec = full_budget_spec(_cell_spec(CellDir.of(sweep_dir, cell_id)), full,
                                    cfg.validate.select_examples)
            config_of[spec.cell_id] = choice["config_id"]
            specs.append(spec)
    write_json(out_dir / "validate.json", {
        "budget_flops": full, "target": selection["target"], "cells": config_of,
        "selected": [c["config_id"] for c in chosen], "started": time.time()})
    todo = [s for s in specs if not CellDir.of(out_dir, s.cell_id).is_ok()]
    print(f"{COMMAND}: {validation_cost(todo, pilot_rates(sweep_dir), len(specs))}",
          file=sys.stderr, flush=True)
    launch_cells(out_dir, specs, cfg.launcher, this_process(), log="validate.log",
                 command=COMMAND)
    target = selection["target"]
    realized: dict[str, list[float]] = {}
    failed = []
    for cell_id, config_id in config_of.items():
        summary = read_json(CellDir.of(out_dir, cell_id).summary)
        if summary["status"] != "ok":
            failed.append({"cell_id": cell_id, "error": summary["error"]})
            continue
        realized.setdefault(config_id, []).append(summary["final_eval"][target]["accuracy"])
    means = {k: sum(v) / len(v) for k, v in realized.items()}
    comparison = at_full_budget(compare_predictions(chosen, means),
                                selection.get("predicted_at_full", {}))
    comparison |= {"target": target, "failed": failed, "budget_flops": full}
    write_json(out_dir / "comparison.json", comparison)
    return comparison


def pilot_rates(sweep_dir: Path) -> dict[str, float]:
    """Policy size -> the FLOP/s the sweep's own pilots of that size ran at: their charged
    FLOPs over their wall seconds (every phase of ``summary.json``'s ``wall_s``: loading
    and eval included, as a full run pays them), over the ok cells that continue no other
    (a continued rung's FLOPs accumulate along its lineage)."""
    flops: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for path in cell_dirs(sweep_dir):
        cell = CellDir(path)
        if not cell.is_ok():
            continue
        try:
            spec, summary = read_json(cell.spec), read_json(cell.summary)
        except (ValueError, OSError):  # a damaged cell measures nothing (the report says so)
            continue
        if spec.get("continues"):
            continue
        wall = sum(float(v) for v in (summary.get("wall_s") or {}).values())
        if wall > 0 and summary.get("total_flops"):
            flops[spec["model"]] = flops.get(spec["model"], 0.0) + summary["total_flops"]
            seconds[spec["model"]] = seconds.get(spec["model"], 0.0) + wall
    return {model: flops[model] / seconds[model] for model in flops}


def validation_cost(specs: list, rates: dict[str, float], planned: int | None = None) -> str:
    """What the full-budget runs of ``specs`` cost, before they start: runs, FLOPs, and
    hours one after another at the FLOP/s each size's pilots ran at (``rates``,
    :func:`pilot_rates`; unknown for a size without a measured pilot). ``planned``: the
    runs selected, where some are already done."""
    done = "" if planned is None or planned == len(specs) else \
        f" ({planned - len(specs)} of {planned} already ok)"
    if not specs:
        return f"no full-budget run left to do{done}"
    total = sum(s.budget_flops for s in specs)
    budgets = sorted({s.budget_flops for s in specs})
    each = f" of {fmt_flops(budgets[0])} FLOPs each" if len(budgets) == 1 else ""
    text = (f"{len(specs)} full-budget run(s){each}{done}, {fmt_flops(total)} FLOPs in all")
    sizes = sorted({s.model for s in specs})
    unknown = [m for m in sizes if not rates.get(m, 0) > 0]
    if unknown:
        return (f"{text}; hours unknown: no ok pilot of {', '.join(unknown)} with a "
                f"measured wall time in this sweep")
    seconds = sum(s.budget_flops / rates[s.model] for s in specs)
    measured = ", ".join(f"{m} {fmt_flops(rates[m])}" for m in sizes)
    return (f"{text}; about {_duration(seconds)} one after another at the FLOP/s this "
            f"sweep's pilots ran at ({measured} FLOP/s; a launcher that runs several at "
            f"once takes less)")


def _duration(seconds: float) -> str:
    """``2.9 h``; ``25 min`` or ``40 s`` under an hour."""
    if seconds >= 3600:
        return f"{seconds / 3600:.2g} h"
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def at_full_budget(comparison: dict, predicted: dict[str, dict]) -> dict:
    """``compare_predictions``'s rows (read from the pilots' scores) with both readings:
    ``pilot_read``, ``pilot_lo``, ``pilot_hi`` (the pilot's own score: what selection
    ranked), and ``predicted``, ``lo``, ``hi`` (its curve's prediction at the full budget,
    ``selection.json``'s ``predicted_at_full``; None where no sigmoid fitted); ``inside``
    and ``coverage`` then say whether the realized score lies inside the prediction's
    interval. Rank correlations and regret stay on the pilot reads."""
    rows = []
    for row in comparison.get("rows", []):
        mine = predicted.get(row["config_id"]) or {}
        lo, hi = mine.get("lo"), mine.get("hi")
        inside = None if lo is None or hi is None else bool(lo <= row["realized"] <= hi)
        rows.append({"config_id": row["config_id"], "pilot_read": row["predicted"],
                     "pilot_lo": row["lo"], "pilot_hi": row["hi"],
                     "predicted": mine.get("prediction"), "lo": lo, "hi": hi,
                     "realized": row["realized"], "inside": inside})
    flags = [r["inside"] for r in rows if r["inside"] is not None]
    return comparison | {"rows": rows,
                         "coverage": sum(flags) / len(flags) if flags else None}
