"""Pilot curves extrapolated to the full budget: the ScaleRL sigmoid fitted to each
pilot's checkpoint curve, with a fallback to its last value when a fit cannot say where
the curve goes (pure: numpy, scipy, pandas).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit

from race.analysis.aggregate import split_status, target_evals

_LN10 = math.log(10.0)


_FLAT = 1e-6  # accuracy span below which a curve has no trend to extrapolate


_FALLBACK_HALF_WIDTH = 0.05  # binomial-ish floor on a fallback interval's half-width


# The 90% interval of a sigmoid's prediction at the full budget F: the 5th and 95th
# percentiles of its error (the score a run reaches at F minus the prediction) per decade of
# extrapolation (log10 of F over the FLOPs of the last point fitted). The sigmoid's own
# interval (its parameters' uncertainty) held the score at F for 48% of the curve banks'
# one-seed ladders. This band is calibrated on every cell of the testbed's world 1 (the
# four banks run before world 2, 225 fitted cells), frozen before world 2's bank ran, and
# checked there (bench/prediction_coverage.py, docs/reports.md).
EXTRAPOLATION_ERROR = (-0.531, 0.264)  # accuracy per decade of FLOPs: 5th, 95th percentile


def _logistic(lc, r0, A, m, B):
    # The sigmoid in log10 space (m = log10 C_mid): 1 / (1 + (C_mid/C)**B) = expit(...).
    return r0 + (A - r0) * expit(B * _LN10 * (lc - m))


def sigmoid(C, R0: float, A: float, C_mid: float, B: float):
    """ScaleRL curve ``R0 + (A - R0) / (1 + (C_mid / C)**B)``.

    C and C_mid in FLOPs (C scalar or array, C = 0 gives R0); R0 accuracy at zero compute;
    A asymptote; B steepness (> 0).
    """
    with np.errstate(divide="ignore"):
        out = _logistic(np.log10(np.asarray(C, dtype=float)), R0, A, math.log10(C_mid), B)
    return out if np.ndim(out) else float(out)


@dataclass(frozen=True, slots=True)
class FitResult:
    """A pilot curve extrapolated to the full budget (accuracies in [0, 1])."""

    method: str  # "sigmoid", or "last": fallback to the last observed accuracy
    params: dict | None  # {"R0", "A", "C_mid" (FLOPs), "B"} for a sigmoid, else None
    r2: float  # on the points with FLOPs > 0; nan for "last"
    rmse: float  # residual RMS; for "last", RMS distance of the points from the last one
    prediction: float  # accuracy at predict_at FLOPs
    lo: float  # ~90 % interval of the prediction
    hi: float
    n_points: int  # observed points with FLOPs > 0
    reason: str = ""  # why the fallback was used ("" for a sigmoid)
    last_flops: float = math.nan  # FLOPs of the last observed point: where it extrapolates from


def _fallback(x: np.ndarray, y: np.ndarray, n_points: int, reason: str) -> FitResult:
    if len(y) == 0:
        return FitResult("last", None, math.nan, math.nan, math.nan, math.nan, math.nan, 0,
                         reason)
    last = float(y[-1])
    ref = y[x > 0] if (x > 0).any() else y
    spread = float(np.sqrt(np.mean((ref - last) ** 2)))
    half = max(spread, _FALLBACK_HALF_WIDTH)
    return FitResult("last", None, math.nan, spread, last, max(0.0, last - half),
                     min(1.0, last + half), n_points, reason, float(x[-1]))


def fit_curve(flops, accuracy, *, predict_at: float, r0: float | None = None,
              seed: int = 0) -> FitResult:
    """Fit the ScaleRL sigmoid to one pilot curve and extrapolate it to ``predict_at``.

    R0 is the accuracy at flops == 0 (checkpoint 0) if observed, else ``r0``. A, log10 C_mid
    and B are fitted by ``scipy.optimize.curve_fit`` on the points with flops > 0: A in
    [0, 1] (A < R0 allowed), B in (0, 10], C_mid in [min_flops / 100, predict_at * 100].
    Interval: 5-95 % of predictions under 500 seeded multivariate-normal parameter draws,
    widened by the rmse, clipped to [0, 1]: the parameters' uncertainty only, far too
    narrow for a score at F (:func:`full_budget_interval` gives that one). Falls back to
    "last" (last accuracy +- max(spread, 0.05)) with < 3 points, unknown R0, a flat
    curve, a failed fit, a non-finite covariance, or R^2 < 0.

    Args:
        flops, accuracy: observed points (FLOPs; accuracy in [0, 1]).
        predict_at: FLOPs to extrapolate to (> 0), e.g. the full budget.
        r0: accuracy at zero compute when no point has flops == 0.
        seed: seed of the parameter draws.
    """
    if not predict_at > 0:
        raise ValueError(f"predict_at={predict_at}: must be > 0 FLOPs (the full budget)")
    x, y = np.asarray(flops, dtype=float), np.asarray(accuracy, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    order = np.argsort(x[keep], kind="stable")
    x, y = x[keep][order], y[keep][order]
    if len(y) == 0:
        return _fallback(x, y, 0, "no observations")
    if (x == 0).any():
        r0 = float(y[x == 0].mean())
    xp, yp = x[x > 0], y[x > 0]
    n = len(xp)
    if n < 3:
        return _fallback(x, y, n, f"{n} point(s) with FLOPs > 0; a sigmoid fit needs >= 3")
    if r0 is None:
        return _fallback(x, y, n, "no accuracy at 0 FLOPs and no r0 given: R0 unknown")
    if np.ptp(yp) < _FLAT:
        return _fallback(x, y, n, f"flat curve (accuracy spans < {_FLAT:g}): no trend")

    lx = np.log10(xp)
    lower = np.array([0.0, lx.min() - 2.0, 1e-3])
    upper = np.array([1.0, max(math.log10(predict_at) + 2.0, lx.min() - 1.0), 10.0])

    def model(lc, A, m, B):
        return _logistic(lc, r0, A, m, B)

    best, error = _best_fit(model, lx, yp, r0, lower, upper)
    if best is None:
        return _fallback(x, y, n, f"curve_fit failed: {error}")
    cost, popt, pcov = best
    if not np.all(np.isfinite(pcov)):
        return _fallback(x, y, n, f"covariance not finite ({n} points for 3 parameters)")
    rmse = math.sqrt(cost / n)
    ss_tot = float(np.sum((yp - yp.mean()) ** 2))
    r2 = 1.0 - cost / ss_tot
    if r2 < 0:
        return _fallback(x, y, n, f"sigmoid fit worse than a constant (R^2 {r2:.2f})")

    at = math.log10(predict_at)
    prediction = float(model(at, *popt))
    rng = np.random.default_rng(seed)
    draws = rng.multivariate_normal(popt, pcov, size=500, method="eigh", check_valid="ignore")
    draws = np.clip(draws, lower, upper)
    preds = model(at, draws[:, 0], draws[:, 1], draws[:, 2])
    lo, hi = np.percentile(preds, [5, 95])
    lo = max(0.0, min(float(lo), prediction) - rmse)
    hi = min(1.0, max(float(hi), prediction) + rmse)
    params = {"R0": float(r0), "A": float(popt[0]), "C_mid": float(10 ** popt[1]),
              "B": float(popt[2])}
    return FitResult("sigmoid", params, r2, rmse, prediction, lo, hi, n, "", float(xp[-1]))


def full_budget_interval(fit: FitResult, predict_at: float) -> tuple[float, float]:
    """The 90% interval of ``fit``'s prediction at ``predict_at`` FLOPs (the full budget
    it was fitted to predict at):
    for a sigmoid, ``prediction + EXTRAPOLATION_ERROR x decades`` where ``decades =
    log10(predict_at / fit.last_flops)`` (0 at or below the last point), clipped to
    [0, 1]; a fallback's own interval (it predicts no change, and its method says so)."""
    if fit.method != "sigmoid":
        return fit.lo, fit.hi
    decades = max(0.0, math.log10(predict_at / fit.last_flops))
    low, high = EXTRAPOLATION_ERROR
    return (max(0.0, fit.prediction + low * decades),
            min(1.0, fit.prediction + high * decades))


def config_predictions(fits: pd.DataFrame | None) -> dict[str, dict]:
    """Each config's prediction at the full budget from its sigmoid fits (a flat sweep's
    :func:`fit_cells`, a ladder's :func:`race.analysis.ladder_curves.lineage_fits`): the
    seeds' mean ``prediction``, ``lo`` and ``hi`` (:func:`full_budget_interval`) over the
    fits that are sigmoids, ``fits`` (how many) of ``seeds``. A config whose every fit fell
    back has none: no prediction is made for it."""
    if fits is None or fits.empty:
        return {}
    out = {}
    for config, group in fits.groupby("config_id", sort=True):
        sigmoids = group[group["method"] == "sigmoid"]
        if sigmoids.empty:
            continue
        out[str(config)] = {"prediction": float(sigmoids["prediction"].mean()),
                            "lo": float(sigmoids["full_lo"].mean()),
                            "hi": float(sigmoids["full_hi"].mean()),
                            "fits": len(sigmoids), "seeds": len(group)}
    return out


def _best_fit(model, lx: np.ndarray, yp: np.ndarray, r0: float, lower: np.ndarray,
              upper: np.ndarray) -> tuple[tuple | None, str]:
    """The least-squares fit of ``model`` (A, log10 C_mid, B; R0 fixed at ``r0``) to the
    points ``(lx, yp)`` within the bounds, best of three starts: ``((cost, popt, pcov),
    "")``, or ``(None, the last error)`` when every start failed."""

    def jac(lc, A, m, B):  # analytic: 3x fewer evaluations than finite differences
        s = expit(B * _LN10 * (lc - m))
        ds = (A - r0) * s * (1 - s) * _LN10
        return np.stack([s, -B * ds, (lc - m) * ds], axis=1)

    best, error = None, ""
    # Three fixed starts (log10 C_mid, B): the loss is not convex in (C_mid, B). On 150
    # random noisy sigmoids these reached the best of six starts every time.
    for m0, b0 in ((lx.mean(), 0.5), (lx.mean(), 3.0), (lx.max(), 3.0)):
        p0 = np.clip([yp[-1], m0, b0], lower + 1e-6, upper - 1e-6)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, pcov = curve_fit(model, lx, yp, p0=p0, bounds=(lower, upper), jac=jac,
                                       max_nfev=200)
        except (RuntimeError, ValueError) as exc:
            error = str(exc).splitlines()[0]
            continue
        cost = float(np.sum((model(lx, *popt) - yp) ** 2))
        if best is None or cost < best[0] - 1e-15:
            best = (cost, popt, pcov)
    return best, error


def fit_cells(evals: pd.DataFrame, cells: pd.DataFrame, *, target: str) -> pd.DataFrame:
    """Fit every ok pilot's checkpoint curve on ``target`` and extrapolate to its full budget.

    Returns:
        One row per ok cell, by cell_id: cell_id, config_id, the ``FitResult`` fields
        (params flattened to R0, A, C_mid, B; nan for a fallback), full_lo and full_hi
        (:func:`full_budget_interval`), observed (final accuracy), predict_at (the
        cell's full_budget_flops, FLOPs).
    """
    ev = target_evals(evals, cells, target)
    ok, _ = split_status(cells)
    final = f"final_{target}"
    rows = []
    for cell in ok.sort_values("cell_id").itertuples(index=False):
        curve = ev[ev["cell_id"] == cell.cell_id].sort_values("flops")
        fit = fit_curve(curve["flops"], curve["accuracy"],
                        predict_at=float(cell.full_budget_flops))
        observed = getattr(cell, final) if final in ok else \
            (curve["accuracy"].iloc[-1] if len(curve) else math.nan)
        row = {k: v for k, v in asdict(fit).items() if k != "params"}
        full_lo, full_hi = full_budget_interval(fit, float(cell.full_budget_flops))
        rows.append({"cell_id": cell.cell_id, "config_id": cell.config_id, **row,
                     "full_lo": full_lo, "full_hi": full_hi,
                     "observed": float(observed), "predict_at": float(cell.full_budget_flops),
                     **{k: (fit.params or {}).get(k, math.nan) for k in ("R0", "A", "C_mid", "B")}})
    return pd.DataFrame(rows)
