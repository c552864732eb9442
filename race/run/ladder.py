"""The ladder (``selection.policy=ladder``) as it runs: every config to the first rung,
then rung by rung the promoted configs' cells continued from their final states.

The climb itself is :func:`race.core.climb.climb`, the engine the curve-bank replay
(``bench/selection_replay.py``) runs too; what to promote is decided in
:mod:`race.analysis.select` (the candidates) and :mod:`race.core.rungs` (the rule). This
module is the engine's live source: it launches the rung's cells and records the rungs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from race.analysis.select import rung_candidates
from race.core.climb import climb
from race.core.specs import pilot_flops
from race.errors import UsageError
from race.run.cells import launch_cells
from race.run.grid import Plan
from race.store.cell import CellDir
from race.store.io import read_json, write_json
from race.store.sweep_files import SweepDir


class LiveSweep:
    """A sweep's cells as the ladder's source of curves (a
    :class:`race.core.climb.CurveSource`): a rung launches (or resumes) the cells of the
    configs still in, continued from the final states of their ok cells at the rung
    below, and reads their rows (:func:`race.analysis.select.rung_candidates`).

    ``total`` sums the launches (``skipped``, ``ran``, ``wall_s``, ``by_other``,
    ``launched``) and lists every rung's cells (``cells``: the command's own);
    :meth:`record` writes ``ladder.json`` after each rung.
    """

    def __init__(self, plan: Plan, cfg, sweep_dir: Path, me: dict):
        self.plan, self.cfg, self.sweep_dir, self.me = plan, cfg, sweep_dir, me
        self.specs = [c.spec for c in plan.runnable]
        self.first = list(self.specs)  # rung 1's: what a replicate starts afresh from
        self.config_of = {s.cell_id: s.config_id for s in self.specs}  # its rung-1 id
        self.rungs: list[dict] = []
        self.total = {"skipped": 0, "ran": 0, "wall_s": 0.0, "by_other": {}, "launched": [],
                      "cells": []}

    def configs(self) -> list[str]:
        """The plan's configs, in the order of their first cells."""
        return list(dict.fromkeys(self.config_of[s.cell_id] for s in self.specs))

    def run_rung(self, index: int, configs: Sequence[str]) -> list[dict] | None:
        ladder, full = self.plan.ladder, self.plan.budget_flops
        if index > 0:  # the configs' ok cells, continued from their final states
            keep = set(configs)
            specs = [replace(s, budget_flops=pilot_flops(full, ladder.rungs[index]),
                             continues=s.cell_id)
                     for s in self.specs if self.config_of[s.cell_id] in keep
                     and CellDir.of(self.sweep_dir, s.cell_id).is_ok()]
            self.config_of |= {s.cell_id: self.config_of[s.continues] for s in specs}
            if not specs:
                return None
            check_continued_states(self.sweep_dir, specs, index)
            self.specs = specs
        last = index == len(ladder.rungs) - 1
        if last and ladder.replicates > 1:
            extra = self.replicates(configs)
            self.config_of |= {s.cell_id: c for s, c in extra.items()}
            self.specs = self.specs + list(extra)
        self.total["cells"] += [s.cell_id for s in self.specs]
        label = f"rung {index + 1}/{len(ladder.rungs)} ({ladder.rungs[index]:.3g} F)"
        outcome = launch_cells(self.sweep_dir, self.specs, self.cfg.launcher, self.me,
                               label=label, keep_final_state=not last)
        for key in ("skipped", "ran", "wall_s"):
            self.total[key] += outcome[key]
        self.total["by_other"] |= outcome["by_other"]
        self.total["launched"] += outcome["launched"]
        selection = self.cfg.selection
        next_flops = pilot_flops(full, ladder.rungs[index + 1]) if not last else None
        return rung_candidates(self.sweep_dir, self.specs, self.config_of, next_flops,
                               z=selection.z, thresholds=selection.guards.thresholds(),
                               promote_by=selection.promote_by)

    def replicates(self, configs: Sequence[str]) -> dict:
        """``selection.replicates``: per config of the last rung, ``replicates - 1`` fresh
        cells of its rung-1 spec on the next unused seeds, run to the last rung's budget
        (their warm start is scored by the config's first cell). Returns {spec: config}."""
        full, ladder = self.plan.budget_flops, self.plan.ladder
        top = max(s.seed for s in self.first)
        out = {}
        for config in configs:
            base = next(s for s in self.first if self.config_of[s.cell_id] == config)
            for j in range(1, ladder.replicates):
                spec = replace(base, seed=top + j, continues=None, score_start=False,
                               budget_flops=pilot_flops(full, ladder.rungs[-1]))
                out[spec] = config
        return out

    def record(self, index: int, ranked: list[dict]) -> None:
        """Rung ``index``'s ranked candidates into ``ladder.json`` (every rung so far)."""
        ladder, selection = self.plan.ladder, self.cfg.selection
        fraction = ladder.rungs[index]
        last = index == len(ladder.rungs) - 1
        self.rungs.append({"rung": index + 1, "fraction": fraction,
                           "budget_flops": pilot_flops(self.plan.budget_flops, fraction),
                           "cells": {s.cell_id: self.config_of[s.cell_id] for s in self.specs},
                           "candidates": ranked,
                           "promote": ladder.counts[index + 1] if not last else 0})
        write_json(SweepDir(self.sweep_dir).ladder, {
            "rungs": self.rungs, "planned_counts": list(ladder.counts),
            "cost_share": ladder.cost_share, "scaled": ladder.scaled,
            "reduction": selection.reduction, "z": selection.z,
            "promote_by": selection.promote_by,
            "keep_sizes": selection.keep_sizes})


def check_continued_states(sweep_dir: Path, specs: list, index: int) -> None:
    """Before rung ``index`` launches: every cell of it still to run continues a final
    state that reads (:meth:`race.store.cell.CellDir.state_problem`), else UsageError
    naming the damaged cell folder to remove (a pilot would fail on it, and so would
    every rerun)."""
    _refuse_damaged(sweep_dir, {s.continues for s in specs
                                if not CellDir.of(sweep_dir, s.cell_id).is_ok()})


def check_recorded_states(sweep_dir: Path) -> None:
    """Before a rerun writes anything: each cell ``ladder.json`` records above the first
    rung that is not ok (failed, unfinished, its folder deleted) will continue its
    config's ok cell a rung below, whose final state must read; else UsageError naming
    the damaged cell folder to remove (:func:`check_continued_states` checks the rungs
    this rerun promotes anew as they launch)."""
    try:
        rungs = read_json(SweepDir(sweep_dir).ladder)["rungs"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no ladder yet, or a damaged ladder.json (rewritten rung by rung)
    parents = set()
    for below, rung in zip(rungs, rungs[1:]):
        cell_of = {config: cell_id for cell_id, config in below["cells"].items()}
        parents |= {cell_of[config] for cell_id, config in rung["cells"].items()
                    if config in cell_of and not CellDir.of(sweep_dir, cell_id).is_ok()}
    _refuse_damaged(sweep_dir, {p for p in parents if CellDir.of(sweep_dir, p).is_ok()})


def _refuse_damaged(sweep_dir: Path, parents: set[str]) -> None:
    """UsageError naming every cell of ``parents`` whose final state cannot be read."""
    damaged = {}
    for cell_id in sorted(parents):
        below = CellDir.of(sweep_dir, cell_id)
        if problem := below.state_problem():
            damaged[below.path] = problem
    if damaged:
        where = "; ".join(f"{path.name}: {problem}" for path, problem in damaged.items())
        folders = " ".join(str(path) for path in damaged)
        raise UsageError(f"{folders}: the final state of {len(damaged)} ladder cell(s) that "
                         f"the rung above continues cannot be read ({where}); remove the "
                         f"damaged cell folder(s) so that their rung reruns, then rerun the "
                         f"same command (finished cells are kept)")


def run_ladder(plan: Plan, cfg, sweep_dir: Path, me: dict) -> dict:
    """Run ``plan``'s ladder: every cell at the first rung; after each rung, promote
    configs by the lower confidence bound of their score (``selection.promote_by``: the
    rung's end, or the next rung's prediction; :func:`race.core.rungs.promote`, guards
    and ``selection.keep_sizes`` respected) and continue their cells from their final
    states (:func:`race.core.climb.climb` over a :class:`LiveSweep`). Writes
    ``ladder.json`` after every rung; returns what the launches did.

    A rerun recomputes the same promotions from the same results and runs only what is
    not done (every rung resumes like a flat sweep).
    """
    source = LiveSweep(plan, cfg, sweep_dir, me)
    climb(source, plan.ladder, source.configs(), keep_sizes=cfg.selection.keep_sizes,
          on_rung=source.record)
    return source.total
