"""The update fraction rho and the pilot score's response surface in it.

rho = learning FLOPs / charged FLOPs (rollout + learning + feedback; eval is counted but
not charged, so it is left out). The source paper's protocol (arXiv 2607.13389, read from
secondary summaries) fits, per model size and reward system, a local response surface of
the pilot score in rho: a constant, a log-linear and a quadratic model, compared by
held-out error. It recommends a high- or a low-update regime, and falls back to the best
pilot cell when the fit is unstable or its optimum sits on the grid's edge. Its best rho
was about 0.72 for rule rewards and 0.45 for PRM rewards.

Here, one surface per group (size, reward, target), in three steps:

1. **Choice.** Each model's leave-one-config-out (LOCO) error: every config's points
   (its seeds) are predicted by the model fitted to the other configs' points; the error
   is the mean squared residual, weighted by 1/SE^2 when problem counts are given. The
   lowest error wins; ties go to the simpler model. A model that some fold cannot fit
   (too few distinct rho left, or rho <= 0 for the log) has error ``inf``.
2. **Optimum.** The chosen model's argmax over the observed rho range [min, max]. It
   sits on the grid's edge when it lies within ``RHO_TOL`` of the range's min or max: a
   log-linear fit always, a quadratic that is convex or whose vertex lies outside the
   range (or inside, but within the outermost level of the grid).
3. **Interval.** A percentile interval of the argmax over a bootstrap of configs (each
   resample draws configs with replacement, all points of a config together; the chosen
   model is refitted, not rechosen; the argmax is taken over the original range).

The regime threshold is the midpoint of the observed rho range unless one is given: the
recommendation says which half of the grid the user can choose from holds the optimum
(a fixed 0.5 would call every cell of a grid spanning 0.68-0.85 high-update). A fit is
stable unless (each a reason code): fewer than 3 levels of rho (``few-rho``: values more
than ``RHO_TOL`` apart, since seeds' realized rho and configs that differ only in G or
LoRA rank differ by less), the constant model is chosen over one that could be fitted
(``constant``), its optimum is on the edge (``edge``: the score still rises toward the
edge, so the best rho may lie beyond the grid), the interval spans both regimes
(``wide``), or fewer than half the resamples could be fitted (``bootstrap``). An
unstable fit recommends the best pilot cell (the config with the highest mean pilot
score) instead.

The fits' numerics live in :mod:`race.analysis.rho_fits`. Pure: numpy and the store's
records only; no IO, pandas or torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from race.analysis.rho_fits import (
    MODELS,
    RHO_TOL,
    argmax_rho,
    bootstrap_optimum,
    choose_model,
    fit_coefficients,
    loco_errors,
    point_weights,
    predict,
    rho_levels,
)
from race.core.specs import PhaseFlops
from race.store.records import PilotSummary, phase_flops_from

HIGH, LOW = "high-update", "low-update"
LEVEL = 0.9  # the optimum's interval
BOOT = 1000  # bootstrap resamples of configs


# ---------------------------------------------------------------- rho


def update_fraction(flops: PhaseFlops) -> float:
    """rho = learning / (rollout + learning + feedback), in [0, 1]; eval is ignored.

    Args:
        flops: FLOPs by phase in one convention (a mapping from a results file reads as
            one with :func:`race.store.records.phase_flops_from`; a ``pilots.csv`` row
            with :func:`race.store.pilots.row_flops`).

    Returns:
        rho; nan when nothing was charged (a refused or never-started cell) or a phase
        is nan (a pandas row of a failed cell).
    """
    if any(v < 0 for v in flops.as_tuple()):
        raise ValueError(f"negative FLOPs in {flops}: a ledger only accumulates; "
                         f"pass the cumulative FLOPs by phase")
    total = flops.total
    return flops.learning / total if total > 0 else math.nan


def planned_update_fraction(cell: Any) -> float:
    """rho as a plan solved it: a :class:`race.run.grid.Cell`'s ``planned`` FLOPs (its steps
    at nominal token counts, in the budget's convention). Realized rho differs when
    completions end before their nominal length (rollout and learning both shrink, by
    different amounts). A refused cell plans no steps: nan."""
    return update_fraction(cell.planned)


def phase_flops(summary: PilotSummary, convention: str | None = None) -> PhaseFlops:
    """A pilot's realized FLOPs by phase, from its summary.

    Args:
        summary: the cell's ``summary.json``; its ``flops`` are the charged convention
            (``summary.convention``), ``flops_model`` / ``flops_executed`` /
            ``flops_measured`` each formula's and the counter's.
        convention: ``model``, ``executed`` or ``measured``; None reads the charged one.
    """
    if convention is None or convention == summary.convention:
        return phase_flops_from(summary.flops, "flops")
    other = {"model": summary.flops_model, "executed": summary.flops_executed,
             "measured": summary.flops_measured}.get(convention)
    if not other:
        raise ValueError(f"convention={convention!r}: this summary has no "
                         f"flops_{convention} (measured FLOPs need accounting.measure"
                         f"=true); use convention=None for the charged "
                         f"{summary.convention!r}")
    return phase_flops_from(other, f"flops_{convention}")


def realized_update_fraction(summary: PilotSummary, convention: str | None = None) -> float:
    """rho as a pilot spent it (:func:`phase_flops` of its summary).

    A ladder rung that continues another reports its lineage's cumulative FLOPs, so its
    rho is the lineage's up to that rung."""
    return update_fraction(phase_flops(summary, convention))


# ---------------------------------------------------------------- the surface


def regime_of(rho: float, threshold: float) -> str:
    """``high-update`` above the threshold, ``low-update`` at or below it."""
    return HIGH if rho > threshold else LOW


@dataclass(frozen=True, slots=True)
class ResponseSurface:
    """The pilot score's response surface in rho for one group, and what it recommends.

    Attributes:
        model: the chosen model (``MODELS``).
        coefficients: its coefficients fitted to every point: (a,) | (a, b) of
            a + b ln rho | (a, b, c) of a + b rho + c rho^2.
        loco: each model's leave-one-config-out error (squared score units; inf: cannot
            be fitted in some fold).
        rho_range: (min, max) rho observed.
        n_configs, n_points, n_rho: configs, points and rho levels fitted (values more
            than ``rho_tol`` apart, :func:`rho_levels`).
        rho_opt: the fit's argmax over ``rho_range`` (None: constant).
        score_opt: the fitted score there (None: constant).
        edge: ``low`` or ``high`` when ``rho_opt`` lies within ``rho_tol`` of that end
            of the range, else "".
        interval: the ``level`` bootstrap interval of ``rho_opt`` (None: none).
        level: the interval's coverage.
        threshold: the rho that separates the regimes.
        threshold_rule: ``midpoint`` (of ``rho_range``) or ``given``.
        rho_tol: the rho difference below which two values are one level.
        reasons: why the fit is unstable (codes, see the module docstring); () if stable.
        best_config, best_rho, best_score: the best pilot cell: the config with the
            highest mean pilot score, its mean rho and that score (the fallback).
    """

    model: str
    coefficients: tuple[float, ...]
    loco: dict[str, float]
    rho_range: tuple[float, float]
    n_configs: int
    n_points: int
    n_rho: int
    rho_opt: float | None
    score_opt: float | None
    edge: str
    interval: tuple[float, float] | None
    level: float
    threshold: float
    threshold_rule: str
    rho_tol: float
    reasons: tuple[str, ...]
    best_config: str
    best_rho: float
    best_score: float

    @property
    def stable(self) -> bool:
        return not self.reasons

    @property
    def regime(self) -> str | None:
        """The recommended regime (None: unstable, the best pilot cell stands instead)."""
        return regime_of(self.rho_opt, self.threshold) if self.stable else None

    def why(self) -> str:
        """The reasons for instability, in words."""
        lo, hi = self.rho_range
        words = {
            "few-rho": (f"{self.n_rho} level(s) of rho more than {self.rho_tol:g} apart, a "
                        f"surface needs 3"),
            "constant": "the constant model fits best: the score does not move with rho",
            "edge": (f"its optimum sits on the grid's {self.edge} edge (rho {self.rho_opt:.2f} "
                     f"of {lo:.2f}-{hi:.2f}): the best rho may lie beyond the grid"
                     if self.rho_opt is not None else ""),
            "wide": (f"its optimum's interval {_span(self.interval)} spans both regimes "
                     f"(threshold {self.threshold:.2f})" if self.interval else ""),
            "bootstrap": "most bootstrap resamples of configs could not be fitted",
        }
        return "; ".join(words[r] for r in self.reasons)

    def line(self) -> str:
        """The one line a report prints."""
        rule = "the grid's rho midpoint" if self.threshold_rule == "midpoint" else "given"
        fit = (f"{self.model} fit chosen by leave-one-config-out error, {self.n_configs} "
               f"configs, rho {self.rho_range[0]:.2f}-{self.rho_range[1]:.2f}")
        if self.stable:
            side = "above" if self.regime == HIGH else "at or below"
            return (f"{self.regime} regime: rho* = {self.rho_opt:.2f} "
                    f"({self.level:.0%} interval {_span(self.interval)}), {side} the "
                    f"threshold {self.threshold:.2f} ({rule}); {fit}")
        return (f"no stable fit: the best pilot cell is {self.best_config} "
                f"(rho {self.best_rho:.2f}, pilot score {self.best_score:.3f}; {self.why()}; "
                f"{fit})")

    def recommendation(self) -> str:
        """What to do, short: the regime and its optimum, or the fallback and why (codes)."""
        if self.stable:
            return (f"{self.regime} (rho* {self.rho_opt:.2f}, {self.level:.0%} interval "
                    f"{_span(self.interval)}; threshold {self.threshold:.2f})")
        return (f"no stable fit ({', '.join(self.reasons)}): the best pilot cell is "
                f"{self.best_config} (rho {self.best_rho:.2f}, pilot score "
                f"{self.best_score:.3f})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (inf as None), for ``selection.json`` and the leaderboard."""
        return {"model": self.model, "coefficients": list(self.coefficients),
                "loco": {m: (e if math.isfinite(e) else None) for m, e in self.loco.items()},
                "rho_range": list(self.rho_range), "n_configs": self.n_configs,
                "n_points": self.n_points, "n_rho": self.n_rho, "rho_opt": self.rho_opt,
                "score_opt": self.score_opt, "edge": self.edge,
                "interval": list(self.interval) if self.interval else None,
                "level": self.level, "threshold": self.threshold,
                "threshold_rule": self.threshold_rule, "rho_tol": self.rho_tol,
                "stable": self.stable,
                "reasons": list(self.reasons), "regime": self.regime,
                "best_config": self.best_config, "best_rho": self.best_rho,
                "best_score": self.best_score, "line": self.line(),
                "recommendation": self.recommendation()}


def _span(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"


def fit_response_surface(rho: Sequence[float], score: Sequence[float],
                         configs: Sequence[str], *,
                         n_problems: int | Sequence[int] | None = None,
                         threshold: float | None = None, level: float = LEVEL,
                         boot: int = BOOT, seed: int = 0,
                         rho_tol: float = RHO_TOL) -> ResponseSurface:
    """Fit one group's surface of pilot score in rho, and decide what it recommends.

    Args:
        rho: [points] update fraction of each point (planned or realized).
        score: [points] pilot score (an accuracy in [0, 1] when ``n_problems`` is given).
        configs: [points] the config of each point; a config's points (seeds) are left
            out together.
        n_problems: problems each score was measured on (one for all, or per point):
            points are weighted by 1 / binomial SE^2. None: equal weights.
        threshold: the rho separating low- from high-update (None: the midpoint of the
            observed range).
        level: coverage of the optimum's bootstrap interval.
        boot: bootstrap resamples of configs.
        seed: the bootstrap's random seed.
        rho_tol: rho values closer than this are one level (:func:`rho_levels`); an
            optimum within it of the range's min or max is on the edge.
    """
    rho_a, score_a = np.asarray(rho, dtype=float), np.asarray(score, dtype=float)
    config_a = np.asarray([str(c) for c in configs])
    if not (len(rho_a) == len(score_a) == len(config_a)) or not len(rho_a):
        raise ValueError(f"rho, score and configs: {len(rho_a)}, {len(score_a)} and "
                         f"{len(config_a)} points; give one of each per point, at least one")
    bad = sorted({str(c) for c, r, s in zip(config_a, rho_a, score_a)
                  if not (math.isfinite(r) and math.isfinite(s) and 0 <= r <= 1)})
    if bad:
        raise ValueError(f"config(s) {bad}: rho must lie in [0, 1] and scores be finite; "
                         f"leave failed cells out of the fit")
    weight = point_weights(score_a, n_problems)
    lo, hi = float(rho_a.min()), float(rho_a.max())
    rule = "midpoint" if threshold is None else "given"
    threshold = (lo + hi) / 2 if threshold is None else float(threshold)
    names = np.unique(config_a)
    means = {c: (float(score_a[config_a == c].mean()), float(rho_a[config_a == c].mean()))
             for c in names}
    best = max(names, key=lambda c: means[c][0])  # first name wins a tie (sorted order)
    n_rho = rho_levels(rho_a, rho_tol)

    loco = loco_errors(rho_a, score_a, config_a, weight, rho_tol)
    model = choose_model(loco)
    # every fold fitted it: so do all points
    coef = fit_coefficients(model, rho_a, score_a, weight)
    rho_opt = argmax_rho(model, coef, lo, hi)
    edge = "" if rho_opt is None else _edge(rho_opt, lo, hi, rho_tol)
    interval, fitted = (None, 1.0) if rho_opt is None else bootstrap_optimum(
        model, rho_a, score_a, config_a, weight, lo, hi, level=level, boot=boot, seed=seed,
        tol=rho_tol)

    reasons = []
    if n_rho < 3:
        reasons.append("few-rho")
    if model == "constant" and any(map(math.isfinite, (loco[m] for m in MODELS[1:]))):
        reasons.append("constant")  # it beat a model that could move (else: few-rho)
    if edge:
        reasons.append("edge")
    if fitted < 0.5:
        reasons.append("bootstrap")
    elif interval and regime_of(interval[0], threshold) != regime_of(interval[1], threshold):
        reasons.append("wide")
    return ResponseSurface(
        model=model, coefficients=tuple(float(c) for c in coef), loco=loco,
        rho_range=(lo, hi), n_configs=len(names), n_points=len(rho_a), n_rho=n_rho,
        rho_opt=rho_opt, score_opt=None if rho_opt is None else predict(model, coef, rho_opt),
        edge=edge, interval=interval, level=level, threshold=threshold,
        threshold_rule=rule, rho_tol=rho_tol, reasons=tuple(reasons),
        best_config=str(best), best_rho=means[best][1], best_score=means[best][0])


def _edge(rho_opt: float, lo: float, hi: float, tol: float) -> str:
    """``low`` / ``high`` when the optimum lies within ``tol`` of that end of the range
    (the nearer end when both), else ""."""
    near_lo, near_hi = rho_opt - lo <= tol, hi - rho_opt <= tol
    if near_lo and (not near_hi or rho_opt - lo <= hi - rho_opt):
        return "low"
    return "high" if near_hi else ""


def fit_surfaces(points: Iterable[Mapping[str, Any]], *,
                 keys: Sequence[str] = ("model", "reward", "target"),
                 **options) -> dict[tuple, ResponseSurface]:
    """One surface per group of ``points`` (mappings with ``config``, ``rho``, ``score``
    and optionally ``n``, the problems scored, plus the group ``keys``), keyed by the
    group's values; ``options`` go to :func:`fit_response_surface`."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for point in points:
        groups.setdefault(tuple(point[k] for k in keys), []).append(point)
    surfaces = {}
    for key, rows in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        counts = [r["n"] for r in rows] if all(r.get("n") for r in rows) else None
        surfaces[key] = fit_response_surface([r["rho"] for r in rows],
                                             [r["score"] for r in rows],
                                             [r["config"] for r in rows],
                                             n_problems=counts, **options)
    return surfaces
