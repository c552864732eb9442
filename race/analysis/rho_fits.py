"""The three response-surface models of the pilot score in rho (constant, log-linear,
quadratic) and the numerics :mod:`race.analysis.response` builds its surface from: weighted
least squares, leave-one-config-out errors, the model choice, the argmax over the observed
range, the 1/SE^2 weights and the bootstrap of configs (the protocol is in that module's
docstring).

Pure: numpy only; no IO, pandas or torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from race.core.stats import binomial_se

MODELS = ("constant", "log-linear", "quadratic")  # simplest first: ties go to the simpler
_MIN_RHO = {"constant": 1, "log-linear": 2, "quadratic": 3}  # rho levels a fit needs
# rho values closer than this are one level of the grid: seeds' realized rho differ
# slightly, and so do configs that change little but rho (G, LoRA rank: ~0.01 per 4x rank)
RHO_TOL = 0.02


def design(model: str, rho: np.ndarray) -> np.ndarray:
    """[points, params]: 1 | 1, ln rho | 1, rho, rho^2."""
    ones = np.ones_like(rho)
    if model == "constant":
        return ones[:, None]
    if model == "log-linear":
        return np.column_stack([ones, np.log(rho)])
    return np.column_stack([ones, rho, rho * rho])


def rho_levels(rho: Sequence[float] | np.ndarray, tol: float = RHO_TOL) -> int:
    """Distinct levels of rho: sorted values split wherever two neighbours differ by more
    than ``tol``."""
    values = np.sort(np.asarray(rho, dtype=float))
    return int(len(values) > 0) + int(np.sum(np.diff(values) > tol))


def fittable(model: str, rho: np.ndarray, tol: float) -> bool:
    if model == "log-linear" and np.any(rho <= 0):
        return False
    return rho_levels(rho, tol) >= _MIN_RHO[model]


def fit_coefficients(model: str, rho: np.ndarray, score: np.ndarray,
                     weight: np.ndarray) -> np.ndarray:
    """Weighted least squares coefficients of ``model``."""
    root = np.sqrt(weight)
    coef, *_ = np.linalg.lstsq(design(model, rho) * root[:, None], score * root, rcond=None)
    return coef


def predict(model: str, coefficients: Sequence[float], rho: float | np.ndarray):
    """The fitted score at ``rho``."""
    rho = np.asarray(rho, dtype=float)
    value = design(model, np.atleast_1d(rho)) @ np.asarray(coefficients, dtype=float)
    return float(value[0]) if rho.ndim == 0 else value


def loco_errors(rho: np.ndarray, score: np.ndarray, configs: np.ndarray,
                weight: np.ndarray, tol: float = RHO_TOL) -> dict[str, float]:
    """Each model's leave-one-config-out error: sum w (y - y_hat)^2 / sum w, where y_hat
    of a point comes from the model fitted to the other configs' points (inf when some
    fold has fewer rho levels, ``tol`` apart, than the model needs)."""
    errors = {}
    for model in MODELS:
        if model == "log-linear" and np.any(rho <= 0):
            errors[model] = math.inf
            continue
        squared = 0.0
        for config in np.unique(configs):
            out = configs == config
            if not fittable(model, rho[~out], tol):
                squared = math.inf
                break
            coef = fit_coefficients(model, rho[~out], score[~out], weight[~out])
            squared += float(np.sum(weight[out] * (score[out] - predict(model, coef,
                                                                        rho[out])) ** 2))
        errors[model] = squared / float(np.sum(weight))
    return errors


def choose_model(errors: Mapping[str, float]) -> str:
    """The model with the lowest LOCO error (ties, within 1e-12 relative: the simpler;
    none finite: constant)."""
    finite = {m: e for m, e in errors.items() if math.isfinite(e)}
    if not finite:
        return "constant"
    best = min(finite.values())
    return next(m for m in MODELS if m in finite and finite[m] <= best * (1 + 1e-12) + 1e-300)


def argmax_rho(model: str, coefficients: Sequence[float], lo: float, hi: float) -> float | None:
    """Where the fit peaks on [lo, hi]: an end, or a concave quadratic's vertex inside
    (None for the constant model, which has no optimum)."""
    if model == "constant":
        return None
    candidates = [lo, hi]
    if model == "quadratic":
        _, b, c = coefficients
        if c < 0 and lo < -b / (2 * c) < hi:
            candidates.append(-b / (2 * c))
    values = [predict(model, coefficients, r) for r in candidates]
    return float(candidates[int(np.argmax(values))])


def point_weights(score: np.ndarray, n_problems: int | Sequence[int] | None) -> np.ndarray:
    """1 / binomial SE^2 per point (race.core.stats.binomial_se, floored at 1/n), or ones."""
    if n_problems is None:
        return np.ones_like(score)
    counts = np.broadcast_to(np.asarray(n_problems, dtype=int), score.shape)
    if np.any(counts <= 0):
        raise ValueError(f"n_problems={n_problems!r}: every score needs >= 1 problem")
    return np.array([binomial_se(s, int(n)) ** -2 for s, n in zip(score, counts)])


def bootstrap_optimum(model: str, rho: np.ndarray, score: np.ndarray, configs: np.ndarray,
               weight: np.ndarray, lo: float, hi: float, *, level: float, boot: int,
               seed: int, tol: float) -> tuple[tuple[float, float] | None, float]:
    """The percentile interval of the argmax over config resamples, and the share of
    resamples that could be fitted."""
    names = np.unique(configs)
    members = [np.flatnonzero(configs == c) for c in names]
    rng = np.random.default_rng(seed)
    optima = []
    for _ in range(boot):
        rows = np.concatenate([members[i] for i in rng.integers(len(names), size=len(names))])
        if fittable(model, rho[rows], tol):
            coef = fit_coefficients(model, rho[rows], score[rows], weight[rows])
            optima.append(argmax_rho(model, coef, lo, hi))
    fitted = len(optima) / boot if boot else 0.0
    if not optima:
        return None, fitted
    low, high = np.quantile(optima, [(1 - level) / 2, (1 + level) / 2])
    return (float(low), float(high)), fitted
