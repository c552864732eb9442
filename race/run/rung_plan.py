"""A grid's ladder as ``race plan`` plans it: its rungs, shrunk until its charged and eval
compute fit ``selection.pilot_budget`` (:func:`race.core.climb.fit_to_eval`), and its
cells' eval spent where decisions are made. :mod:`race.run.grid` calls these while it
solves the cells; the curve-bank replay plans its ladders with the same core functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from race.core.climb import fit_to_eval, ladder_eval_cost
from race.core.rungs import LadderPlan, plan_ladder
from race.core.specs import pilot_flops, start_key
from race.pilot.budget import checkpoints_after, reports_at


def grid_ladder(base, axes: Mapping[str, list[str]], *,
                share: float | None = None) -> LadderPlan | None:
    """The ladder of a grid under ``selection.policy=ladder`` (None: flat), costing at
    most ``share`` full runs (default ``selection.share``).

    Configs are the grid's cells with the seeds folded together; the plan keeps room for
    a config of every size on the ``model`` axis at each rung (whether a size uses it is
    decided at each promotion, ``selection.keep_sizes``).
    """
    selection = base.selection
    if selection.policy != "ladder":
        return None
    seeds = len(axes.get("pilot.seed", [None]))
    configs = 1
    for key, values in axes.items():
        configs *= 1 if key == "pilot.seed" else len(values)
    return plan_ladder(configs, seeds=seeds, n_sizes=len(axes.get("model", [None])),
                       rungs=selection.rungs, reduction=selection.reduction,
                       share=selection.share if share is None else share,
                       replicates=selection.replicates)


def ladder_eval_plan(cells: list, ladder: LadderPlan, budget: float) -> list:
    """A ladder's cells with their eval spent where decisions are made: below the last
    rung only the selection target is scored (``spec.report_from_flops`` is the last
    rung's budget), and each warm start once, by the first cell of its
    :func:`race.core.specs.start_key` group (the others read its rows)."""
    last = pilot_flops(budget, ladder.rungs[-1])
    seen, out = set(), []
    for cell in cells:
        if cell.spec is None:
            out.append(cell)
            continue
        key = start_key(cell.spec.to_dict())
        first = key not in seen and not cell.refused
        seen |= {key} if first else set()
        out.append(replace(cell, spec=replace(cell.spec, report_from_flops=last,
                                              score_start=first)))
    return out


def ladder_eval_flops(cells: list, ladder: LadderPlan, budget: float) -> float:
    """The planned eval FLOPs of a ladder over ``cells`` (runnable, ``ladder_eval_plan``'s)
    (:func:`race.core.climb.ladder_eval_cost`).

    Like the ladder's charged compute, it counts ``counts[i] x seeds`` cells at rung
    ``i``, each at the cells' mean cost: a continued cell evaluates only its checkpoints
    above the rung below (:func:`race.pilot.budget.checkpoints_after`, as the pilot), on
    the selection target alone below ``spec.report_from_flops``; the warm start is scored
    once per cell whose ``spec.score_start`` holds.
    """
    starts = sum(c.eval_each_flops for c in cells if c.spec.score_start)
    costs, below = [], 0.0
    for rung in ladder.rungs:
        rung_flops, start = rung * budget, below * budget
        costs.append(sum(sum(c.eval_each_flops if reports_at(c.spec, point * rung_flops)
                             else c.eval_select_flops
                             for point in checkpoints_after(c.spec.checkpoints, rung_flops,
                                                            start))
                         for c in cells) / len(cells))
        below = rung
    return ladder_eval_cost(ladder.counts, costs, seeds=ladder.seeds, start_cost=starts,
                            replicates=ladder.replicates)


def fit_ladder_to_eval(ladder: LadderPlan, cells: list, base, axes,
                       budget: float) -> LadderPlan:
    """The ladder with its rungs shrunk until its charged FLOPs and its planned eval
    FLOPs together fit ``selection.pilot_budget`` full runs
    (:func:`race.core.climb.fit_to_eval`; ``ladder`` itself when they fit already, or when
    the eval alone exceeds it: :func:`race.report.plan.eval_budget_warning` says so)."""
    runnable = [c for c in cells if not c.refused]
    if not runnable:
        return ladder
    selection = base.selection
    return fit_to_eval(ladder, ladder_eval_flops(runnable, ladder, budget) / budget,
                       selection.pilot_budget,
                       lambda room: grid_ladder(base, axes, share=min(selection.share, room)))
