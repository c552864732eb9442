"""The curve bank as ``bench/selection_replay.py`` reads it: each cell's ``val`` curve
(``Curve``: read on a pilot's problems, guarded as a sweep's guards read it), the configs
with their truth at F (over all seeds, and per read seed over the other seeds:
``judged``), the leave-one-seed-out replicates, the tuning and held-out halves, and the
best configs' order by window of the budget."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import zlib
from pathlib import Path

import numpy as np

from bench.science import blackbox
from bench.science.bank import GRID_PROMPTS
from race.analysis.curves import fit_curve
from race.core import guards
from race.core.rungs import fmt_fraction

# the truth a pick is scored against (selection_replay.py --truth): each config's val at F
# averaged over the seeds the policy did not read (leave-one-seed-out), or over all of
# them, the read seed included (flattering: the policy's own noise counts as signal)
LOSO, ALL_SEEDS = "leave-one-seed-out", "all-seeds"
TARGET = "val"
FLAT = 1 / 16
SIGMOID_MAX_WIDTH = 0.3
# windows of the budget in which the best configs' order is shown (up to F/6: a pilot's)
ORDER_BUDGETS = (1 / 32, 1 / 16, 1 / 6, 1 / 3, 1 / 2, 1.0)


class Curve:
    """One cell of the bank on the selection target, readable up to a budget.

    ``accuracy``/``n``: on every problem the bank scored (the truth at F, the warm start a
    pick is held against); ``read``/``read_n``: on the first ``read_problems`` of them
    (``blackbox.first_problems``), what a pilot scoring that many reads.
    """

    def __init__(self, cell: dict, full: float, read_problems: int | None = None):
        rows = sorted((r for r in cell["evals"] if r["target"] == TARGET),
                      key=lambda r: (r["flops"], r["checkpoint"]))
        self.full = full
        self.fraction = np.array([r["checkpoint"] for r in rows])
        self.flops = np.array([r["flops"] for r in rows])
        self.accuracy = np.array([r["accuracy"] for r in rows])
        self.n = np.array([r["n"] for r in rows])
        seen = [blackbox.first_problems(r, read_problems) for r in rows]
        self.read = np.array([a for a, _ in seen])
        self.read_n = np.array([n for _, n in seen])
        self.reward = np.array([r["mean_reward"] for r in rows])
        self.eval_flops = np.array([r["eval_flops"] for r in rows])
        self.steps = cell["steps"]
        self._guards: dict = {}
        self._scores: dict = {}
        all_rows = [r for r in cell["evals"]]
        problems = sum(r["n"] for r in all_rows)
        self.eval_flops_per_problem = (max(r["eval_flops"] for r in all_rows) / problems
                                       if problems else 0.0)

    def upto(self, fraction: float) -> np.ndarray:
        """Checkpoints at or below ``fraction`` of F (a pilot of that budget saw them)."""
        return self.fraction <= fraction + 1e-9

    def at(self, fraction: float) -> float:
        return float(self.read[self.upto(fraction)][-1])

    def at_rungs(self, reads: tuple[float, ...]) -> np.ndarray:
        """The warm start and the checkpoints at the rung ends ``reads``: what a ladder's
        pilots score at the default ``selection.rung_checkpoints=[1.0]``."""
        return np.isin(self.fraction, (0.0, *reads))

    def guard(self, fraction: float, t: guards.GuardThresholds,
              reads: tuple[float, ...] | None = None) -> str | None:
        if (fraction, t, reads) not in self._guards:
            self._guards[fraction, t, reads] = self._guard(fraction, t, reads)
        return self._guards[fraction, t, reads]

    def flat_score(self, sigmoid: bool) -> float:
        """A flat 1/16 pilot's score: its last value, or (``sigmoid``) the fitted
        sigmoid at F when its interval is at most ``SIGMOID_MAX_WIDTH`` wide."""
        if sigmoid not in self._scores:
            score = self.at(FLAT)
            if sigmoid:
                keep = self.upto(FLAT)
                fit = fit_curve(self.flops[keep], self.read[keep], predict_at=self.full)
                if fit.method == "sigmoid" and fit.hi - fit.lo <= SIGMOID_MAX_WIDTH:
                    score = fit.prediction
            self._scores[sigmoid] = score
        return self._scores[sigmoid]

    def _guard(self, fraction: float, t: guards.GuardThresholds,
               reads: tuple[float, ...] | None) -> str | None:
        keep = self.upto(fraction) if reads is None else self.at_rungs(reads)
        steps = [s for s in self.steps if s["flops"] <= fraction * self.full * (1 + 1e-9)]
        caps = [s["max_new_tokens"] for s in steps]
        entropy, truncated = (guards.at_full_cap([s[key] for s in steps], caps)
                              for key in ("entropy", "truncation_rate"))
        fired = [v for v in guards.check_cell(
            self.read[keep].tolist(), self.reward[keep].tolist(),
            self.read_n[keep].astype(int).tolist(), entropy, truncated, t) if v.fired]
        return "; ".join(f"{v.guard}: {v.evidence}" for v in fired) or None


def load_bank(path: Path, read_problems: int | None = None) -> tuple[dict, dict[str, dict]]:
    """The bank and its configs: config id -> knobs, seeds' curves (read by the policies
    on their first ``read_problems`` ``val`` problems; None: all), ``by_seed`` (seed ->
    its val at F, test at F, warm-start val: on every problem) and the truth over all
    seeds (``truth_over``; a replicate's own truth is ``judged``).

    A bank whose cells ran at several prompts per step (the v4 bank's later stage) is
    replayed at the grid's own (``GRID_PROMPTS``): the other cells are a probe of the
    leaders, not configs a sweep of the grid would choose among; ``bank["left_out"]``
    counts them."""
    with gzip.open(path, "rt") as f:
        bank = json.load(f)
    full = bank["budget_flops"]
    on_grid = [c for c in bank["cells"]
               if (c.get("prompts_per_step") or GRID_PROMPTS) == GRID_PROMPTS]
    bank |= {"cells": on_grid, "left_out": len(bank["cells"]) - len(on_grid)}
    configs: dict[str, dict] = {}
    for cell in bank["cells"]:
        config = configs.setdefault(cell["config"], {
            "config": cell["config"], "model": cell["model"], "reward": cell["reward"],
            "group_size": cell["group_size"], "update_epochs": cell["update_epochs"],
            "label": f"{cell['model']}/{cell['reward']} G{cell['group_size']} "
                     f"mu{cell['update_epochs']}", "curves": {}})
        curve = config["curves"][cell["seed"]] = Curve(cell, full, read_problems)
        tests = [r["accuracy"] for r in cell["evals"]
                 if r["target"] == "test" and r["checkpoint"] == 1.0]
        # per seed: val at F on every problem, test at F, the warm start's val
        config.setdefault("by_seed", {})[cell["seed"]] = (
            float(curve.accuracy[-1]), tests[-1] if tests else math.nan,
            float(curve.accuracy[0]))
    for config in configs.values():
        config |= truth_over(config, sorted(config["by_seed"]))
    return bank, configs


def truth_over(config: dict, seeds: list) -> dict:
    """``config``'s truth over ``seeds``: ``truth`` (mean ``val`` at F, every problem),
    ``truth_se`` (their SE, 0 for one seed), ``truth_test`` (mean ``test`` at F over the
    seeds that scored it, nan if none) and ``start`` (mean warm-start ``val``)."""
    finals, tests, starts = (np.array([config["by_seed"][s][k] for s in seeds])
                             for k in range(3))
    tests = tests[~np.isnan(tests)]
    return {"truth": float(np.mean(finals)),
            "truth_se": float(np.std(finals, ddof=1) / math.sqrt(len(finals)))
            if len(finals) > 1 else 0.0,
            "truth_test": float(np.mean(tests)) if len(tests) else math.nan,
            "start": float(np.mean(starts))}


def judged(configs: dict, draw: dict, truth: str = LOSO) -> dict:
    """The configs replicate ``draw`` sweeps (config id -> the seed its curve is read
    from), each with the truth its pick is scored against: with ``LOSO``, over the
    config's seeds other than the one read (``truth_over``; the read seed's noise is then
    no part of the truth); with ``ALL_SEEDS``, over all of them."""
    if truth == ALL_SEEDS:
        return {c: configs[c] for c in draw}
    out = {}
    for c, seed in draw.items():
        others = [s for s in sorted(configs[c]["by_seed"]) if s != seed]
        if not others:
            raise ValueError(f"config {c} has no seed but {seed}: leave-one-seed-out needs "
                             "2 or more seeds a config; replay with --truth all-seeds")
        out[c] = configs[c] | truth_over(configs[c], others)
    return out


def common_seeds(configs: dict) -> list:
    """The seeds every config ran: those a leave-one-seed-out replicate can read."""
    return sorted(set.intersection(*(set(c["curves"]) for c in configs.values())))


def subgrids(configs: dict) -> list[list[str]] | None:
    """The default-shaped grids inside a wider bank: every pair of its G values x every
    pair of its mu values, with all of its sizes and rewards (the default sweep's shape:
    two values on each allocation axis). An axis with two values or fewer is kept whole.
    None when that leaves one grid, the bank itself (the v3 bank: G 4, 8 x mu 1, 2)."""
    def pairs(key):
        values = sorted({c[key] for c in configs.values()})
        return list(itertools.combinations(values, 2)) if len(values) > 2 else [tuple(values)]
    grids = [sorted(c for c in configs if configs[c]["group_size"] in gs
                    and configs[c]["update_epochs"] in mus)
             for gs in pairs("group_size") for mus in pairs("update_epochs")]
    return grids if len(grids) > 1 else None


def loso_replicates(configs: dict, grids: list[list[str]] | None = None) -> list[dict]:
    """The leave-one-seed-out replicates: one per (read seed, grid), seed-major: every
    config of the grid read from that seed (a sweep run on one seed), its truth the other
    seeds' (``judged``). The seeds are those every config ran (``common_seeds``); without
    ``grids`` (``subgrids``), the one grid is the whole bank."""
    grids = grids or [sorted(configs)]
    return [{c: seed for c in grid} for seed in common_seeds(configs) for grid in grids]


def eval_flops_per_problem(configs, draw) -> float:
    """The replicate's eval FLOPs per problem: the mean over configs of each curve's
    measured eval FLOPs over the problems it scored."""
    return float(np.mean([c["curves"][draw[cid]].eval_flops_per_problem
                          for cid, c in configs.items()]))


def order_by_budget(configs: dict, budgets=ORDER_BUDGETS, top: int = 4) -> list[dict]:
    """The ``top`` configs at F and what a pilot could see of their order before F: per
    window of the budget (between one of ``budgets`` and the one before it; F itself
    left out, whose ``val`` is scored on more problems), each config's ``val`` averaged
    over its checkpoints in the window and over its seeds.

    Returns one row per config, best at F first: ``label``, ``truth`` and ``windows``
    (one mean per budget, nan where the bank has no checkpoint in the window).
    """
    rows = []
    for config in sorted(configs.values(), key=lambda c: -c["truth"])[:top]:
        windows = []
        for lo, hi in budget_windows(budgets):
            means = []
            for curve in config["curves"].values():
                keep = (curve.fraction > lo + 1e-9) & curve.upto(min(hi, 1 - 1e-6))
                if keep.any():
                    means.append(curve.accuracy[keep].mean())
            windows.append(float(np.mean(means)) if means else math.nan)
        rows.append({"label": config["label"], "truth": config["truth"], "windows": windows})
    return rows


def budget_windows(budgets) -> list[tuple[float, float]]:
    """The windows ``(lo, hi]`` between each of ``budgets`` and the one before it (from 0)."""
    return list(zip((0.0, *budgets), budgets))


def fmt_window(lo: float, hi: float) -> str:
    """A window of the budget, ``(F/32,F/16]`` (``(F/2,F)``: F itself left out)."""
    def name(f):
        return "0" if f == 0 else "F" if f == 1 else fmt_fraction(f).replace(" ", "")
    return f"({name(lo)},{name(hi)}" + (")" if hi == 1 else "]")


def bank_full(configs: dict) -> float:
    return next(iter(next(iter(configs.values()))["curves"].values())).full


def halves(configs: dict) -> tuple[dict, dict]:
    """The tuning half and the held-out half. By group size when the bank has an even
    number of them (tuned on the larger half of the G values: in the v3 bank G8, whose
    configs ran first; in the v4 bank G 8, 16), else the configs in the order of a hash of
    their ids, alternating."""
    group_sizes = sorted({c["group_size"] for c in configs.values()})
    if len(group_sizes) % 2 == 0:
        larger = group_sizes[len(group_sizes) // 2:]
        tune = [c for c in configs if configs[c]["group_size"] in larger]
        held = [c for c in configs if configs[c]["group_size"] not in larger]
    else:
        order = sorted(configs, key=lambda c: zlib.crc32(c.encode()))
        tune, held = order[0::2], order[1::2]
    return {c: configs[c] for c in tune}, {c: configs[c] for c in held}

