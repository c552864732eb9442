"""The ladder (``selection.policy=ladder``) as it runs: every config to the first rung,
then rung by rung the promoted configs' cells continued from their final states.

What to promote is decided in :mod:`race.analysis.select` (the candidates) and
:mod:`race.core.ladder` (the rule); this module launches and records.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from race.analysis.select import rung_candidates
from race.core.ladder import promote, rank_last_rung
from race.core.specs import pilot_flops
from race.run.cells import launch_cells
from race.run.grid import Plan
from race.store.cell import CellDir
from race.store.io import write_json
from race.store.sweep import SweepDir


def run_ladder(plan: Plan, cfg, sweep_dir: Path, me: dict) -> dict:
    """Run ``plan``'s ladder: every cell at the first rung; after each rung, promote
    configs by the lower confidence bound of their score (``selection.promote_by``: the
    rung's end, or the next rung's prediction; :func:`race.core.ladder.promote`, guards
    and ``selection.keep_sizes`` respected) and continue
    their cells from their final states. Writes ``ladder.json`` after every rung.

    A rerun recomputes the same promotions from the same results and runs only what is
    not done (every rung resumes like a flat sweep).
    """
    ladder, selection = plan.ladder, cfg.selection
    full = plan.budget_flops
    specs = [c.spec for c in plan.runnable]
    config_of = {s.cell_id: s.config_id for s in specs}  # the config: its rung-1 id
    rungs, total = [], {"skipped": 0, "ran": 0, "wall_s": 0.0, "by_other": {},
                        "launched": []}
    for index, fraction in enumerate(ladder.rungs):
        last = index == len(ladder.rungs) - 1
        label = f"rung {index + 1}/{len(ladder.rungs)} ({fraction:.3g} F)"
        outcome = launch_cells(sweep_dir, specs, cfg.launcher, me, label=label,
                               keep_final_state=not last)
        for key in ("skipped", "ran", "wall_s"):
            total[key] += outcome[key]
        total["by_other"] |= outcome["by_other"]
        total["launched"] += outcome["launched"]
        next_flops = pilot_flops(full, ladder.rungs[index + 1]) if not last else None
        candidates = rung_candidates(sweep_dir, specs, config_of, next_flops,
                                     z=selection.z, thresholds=selection.guards.thresholds(),
                                     promote_by=selection.promote_by)
        count = ladder.counts[index + 1] if not last else 0
        ranked = (promote(candidates, count, keep_sizes=selection.keep_sizes) if not last
                  else rank_last_rung(candidates))
        rungs.append({"rung": index + 1, "fraction": fraction,
                      "budget_flops": pilot_flops(full, fraction),
                      "cells": {s.cell_id: config_of[s.cell_id] for s in specs},
                      "candidates": ranked, "promote": count})
        write_json(SweepDir(sweep_dir).ladder, {
            "rungs": rungs, "planned_counts": list(ladder.counts),
            "cost_share": ladder.cost_share, "scaled": ladder.scaled,
            "reduction": selection.reduction, "z": selection.z,
            "promote_by": selection.promote_by,
            "keep_sizes": selection.keep_sizes})
        if last:
            break
        promoted = {c["config"] for c in ranked if c["promoted"]}
        specs = [replace(s, budget_flops=pilot_flops(full, ladder.rungs[index + 1]),
                         continues=s.cell_id)
                 for s in specs if config_of[s.cell_id] in promoted
                 and CellDir.of(sweep_dir, s.cell_id).is_ok()]
        config_of |= {s.cell_id: config_of[s.continues] for s in specs}
        if not specs:
            break
    return total
