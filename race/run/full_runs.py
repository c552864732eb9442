"""``race validate``: the configs a report selected, run at the full budget from the warm
start through the same launch helper as the sweep (after saying what they will cost),
then compared with what the pilots read and what their curves predicted at the full
budget.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from race.analysis.aggregate import compare_predictions
from race.analysis.spend import training_rate
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


# above this many hours (one run after another) race validate asks before it starts
CONFIRM_ABOVE_H = 1.0


@dataclass(frozen=True)
class ValidationPlan:
    """What ``race validate`` will run: the ``chosen`` selection entries, every run's
    ``specs`` (``todo``: those not yet ok), ``config_of`` (cell -> config), the full
    budget, the selection target, and its cost: ``cost`` (one line, runs, FLOPs and
    hours, :func:`validation_cost`) and ``hours`` (NaN: not measurable)."""

    chosen: list
    specs: list
    todo: list
    config_of: dict
    full_flops: float
    target: str
    predicted: dict
    cost: str
    hours: float

    def needs_confirmation(self, confirm: bool = True) -> bool:
        """Whether to ask before starting: more than :data:`CONFIRM_ABOVE_H` hours left
        to run (or hours unknown), unless ``validate.confirm=false``."""
        if not confirm or not self.todo:
            return False
        return math.isnan(self.hours) or self.hours > CONFIRM_ABOVE_H


def plan_validation(sweep_dir: Path, cfg, top_k: int | None = None) -> ValidationPlan:
    """The full-budget runs of ``selection.json``'s choices and what they cost, before
    anything starts. Raises UsageError where the report selected nothing (its
    ``pick_reason``, e.g. nothing learned)."""
    sweep = SweepDir(sweep_dir)
    selection = read_result(sweep.selection, REPORT_FIX)
    record = read_result(sweep.record, SWEEP_JSON_FIX)
    if not isinstance(selection.get("selected"), list) or "target" not in selection:
        raise DamagedResult(str(sweep.selection), "lacks its selected cells or target",
                            REPORT_FIX)
    chosen = selection["selected"][:top_k] if top_k else selection["selected"]
    if not chosen:
        why = selection.get("pick_reason") or "no ok cell to select"
        raise UsageError(f"{sweep_dir}/{SELECTION_JSON}: selects no config ({why}); "
                         f"nothing to validate: fix the sweep, rerun it, then `race report "
                         f"{sweep_dir}`")
    full = record["budget_flops"]
    specs, config_of = [], {}
    for choice in chosen:
        for cell_id in choice["cell_ids"]:
            spec = full_budget_spec(_cell_spec(CellDir.of(sweep_dir, cell_id)), full,
                                    cfg.validate.select_examples)
            config_of[spec.cell_id] = choice["config_id"]
            specs.append(spec)
    todo = [s for s in specs if not CellDir.of(sweep.validate, s.cell_id).is_ok()]
    rates = pilot_rates(sweep_dir)
    return ValidationPlan(chosen, specs, todo, config_of, full, selection["target"],
                          selection.get("predicted_at_full", {}),
                          validation_cost(todo, rates, len(specs)),
                          validation_hours(todo, rates))


def run_validation(sweep_dir: Path, cfg, top_k: int | None = None,
                   plan: ValidationPlan | None = None) -> dict:
    """Run the selected cells of ``selection.json`` at the full budget; compare.

    The runs go to ``<sweep>/validate/cells/<cell_id>/`` through the configured launcher,
    with the same resume rule as sweeps (cells with an ok summary are not rerun).
    ``plan``: :func:`plan_validation`'s (the CLI states its cost and asks first); without
    one, it is planned here and its cost printed on stderr before the runs start.
    Returns ``aggregate.compare_predictions``'s dict on the pilots' reads, its rows and
    coverage made over to the prediction at the full budget (:func:`at_full_budget`),
    plus ``target``, ``failed`` and ``budget_flops``.
    """
    if plan is None:
        plan = plan_validation(sweep_dir, cfg, top_k)
        print(f"{COMMAND}: {plan.cost}", file=sys.stderr, flush=True)
    out_dir = SweepDir(sweep_dir).validate
    write_json(out_dir / "validate.json", {
        "budget_flops": plan.full_flops, "target": plan.target, "cells": plan.config_of,
        "selected": [c["config_id"] for c in plan.chosen], "started": time.time()})
    launch_cells(out_dir, plan.specs, cfg.launcher, this_process(), log="validate.log",
                 command=COMMAND)
    realized: dict[str, list[float]] = {}
    failed = []
    for cell_id, config_id in plan.config_of.items():
        summary = read_json(CellDir.of(out_dir, cell_id).summary)
        if summary["status"] != "ok":
            failed.append({"cell_id": cell_id, "error": summary["error"]})
            continue
        realized.setdefault(config_id, []).append(
            summary["final_eval"][plan.target]["accuracy"])
    means = {k: sum(v) / len(v) for k, v in realized.items()}
    comparison = at_full_budget(compare_predictions(plan.chosen, means), plan.predicted)
    comparison |= {"target": plan.target, "failed": failed, "budget_flops": plan.full_flops}
    write_json(out_dir / "comparison.json", comparison)
    return comparison


def pilot_rates(sweep_dir: Path) -> dict[str, float]:
    """Policy size -> the FLOP/s the sweep's own pilots of that size trained at: their
    charged FLOPs over the wall seconds of their charged phases (rollout, learning,
    feedback; loading and eval left out), :func:`race.analysis.spend.training_rate`, the
    rate the leaderboard's estimate reads too; over the ok cells that continue no other
    (a continued rung's FLOPs accumulate along its lineage)."""
    flops: dict[str, float] = {}
    walls: dict[str, dict[str, float]] = {}
    for path in cell_dirs(sweep_dir):
        cell = CellDir(path)
        if not cell.is_ok():
            continue
        try:
            spec, summary = read_json(cell.spec), read_json(cell.summary)
        except (ValueError, OSError):  # a damaged cell measures nothing (the report says so)
            continue
        if spec.get("continues") or not summary.get("total_flops"):
            continue
        model = spec["model"]
        flops[model] = flops.get(model, 0.0) + float(summary["total_flops"])
        mine = walls.setdefault(model, {})
        for phase, seconds in (summary.get("wall_s") or {}).items():
            mine[phase] = mine.get(phase, 0.0) + float(seconds or 0.0)
    rates = {model: training_rate(flops[model], walls[model]) for model in flops}
    return {model: rate for model, rate in rates.items() if rate > 0}


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
    seconds = validation_hours(specs, rates) * 3600
    measured = ", ".join(f"{m} {fmt_flops(rates[m])}" for m in sizes)
    return (f"{text}; about {_duration(seconds)} one after another at the FLOP/s this "
            f"sweep's pilots ran at ({measured} FLOP/s while training: loading and eval "
            f"left out; a launcher that runs several at once takes less)")


def validation_hours(specs: list, rates: dict[str, float]) -> float:
    """Hours the runs of ``specs`` take one after another at ``rates``
    (:func:`pilot_rates`); NaN where a size has no measured rate; 0 for none."""
    if any(not rates.get(s.model, 0) > 0 for s in specs):
        return math.nan
    return sum(s.budget_flops / rates[s.model] for s in specs) / 3600


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
