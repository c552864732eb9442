"""``race validate``: the configs a report selected, run at the full budget from the warm
start through the same launch helper as the sweep, then compared with what the pilots
predicted.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from race.analysis.aggregate import compare_predictions
from race.core.specs import RunSpec
from race.errors import DamagedResult, UsageError
from race.run.cells import launch_cells
from race.store.cell import CellDir
from race.store.claims import this_process
from race.store.io import REPORT_FIX, SWEEP_JSON_FIX, read_json, read_result, write_json
from race.store.sweep_files import SELECTION_JSON, SweepDir


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
    Returns ``aggregate.compare_predictions``'s dict plus ``target`` and ``failed``.
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
    launch_cells(out_dir, specs, cfg.launcher, this_process(), log="validate.log")
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
    comparison = compare_predictions(chosen, means)
    comparison |= {"target": target, "failed": failed, "budget_flops": full}
    write_json(out_dir / "comparison.json", comparison)
    return comparison
