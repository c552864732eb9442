"""Pure pandas aggregation of pilots: rank regimes, frontier, curve fits, selection.

No IO, torch or plotting (``race.store.io`` loads, ``race.report.write`` draws). Accuracies are
fractions in [0, 1]; FLOPs are model FLOPs; random draws come from seeded Generators.
"""

from __future__ import annotations

import math
import warnings
import zlib
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit

from race.core import guards
from race.core.ladder import binomial_se, final_ranking, fmt_fraction
from race.errors import UnknownName, UsageError

# Knob columns copied from a config's first seed (they are shared by its seeds).
CONFIG_COLUMNS = ("model", "params", "reward", "task", "group_size", "prompts_per_step",
         "max_new_tokens", "update_epochs", "lr", "lora_rank", "budget_flops",
         "full_budget_flops")
REGIME_KEYS = ["model", "reward", "regime"]
_LN10 = math.log(10.0)
_FLAT = 1e-6  # accuracy span below which a curve has no trend to extrapolate
_FALLBACK_HALF_WIDTH = 0.05  # binomial-ish floor on a fallback interval's half-width


def split_status(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split pilots into (ok, failed); any status other than "ok" counts as failed."""
    ok = cells["status"] == "ok"
    return cells[ok].reset_index(drop=True), cells[~ok].reset_index(drop=True)


def check_consistent(cells: pd.DataFrame) -> None:
    """Raise ValueError when the pilots mix tasks or full budgets (two sweeps in one folder)."""
    for column, fix in (("task", "split the folder by task"),
                        ("full_budget_flops", "split the folder by budget")):
        if column not in cells:
            continue
        values = sorted(cells[column].dropna().unique())
        if len(values) > 1:  # FLOPs print as 3.2e+15 (STYLE.md)
            shown = [f"{column}={float(v):.3g}" if column.endswith("_flops") else
                     f"{column}={v}" for v in values]
            mixed = ", ".join(shown[:-1]) + " and " + shown[-1]
            raise UsageError(f"results mix {mixed}: aggregate one sweep at a time, or {fix}")


def increments(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` with each ladder rung's FLOPs reduced to what it added.

    A cell that ``continues`` another (a ladder rung resuming the rung below) reports
    the lineage's cumulative FLOPs; summing cells would count the rung below twice. Here
    its ``flops_*``, ``total_flops`` and ``redone_flops`` lose the continued cell's.
    """
    if "continues" not in cells or not cells["continues"].fillna("").astype(bool).any():
        return cells
    columns = [c for c in cells.columns
               if c.startswith("flops_") or c in ("total_flops", "redone_flops")]
    cumulative = cells.set_index("cell_id")[columns].fillna(0.0)
    out = cells.copy()
    for index, below in out["continues"].fillna("").items():
        if below and below in cumulative.index:
            out.loc[index, columns] = (out.loc[index, columns].fillna(0.0)
                                       - cumulative.loc[below, columns])
    return out


def warm_starts(evals: pd.DataFrame, cells: pd.DataFrame, *, target: str) -> dict[str, dict]:
    """Each policy size's accuracy on ``target`` before any update (checkpoint 0 of its
    cells: the warm start every config of that size shares), scored on the most problems
    any of its cells used (pilots score the selection target at the start on as many
    problems as at the end). ``{model: {"accuracy", "n", "se"}}``; sizes never evaluated
    at the start are left out."""
    if not len(evals) or target not in set(evals["target"]):
        return {}
    ev = _target_evals(evals, cells, target)
    ev = ev[ev["checkpoint"] == 0.0].merge(cells[["cell_id", "model"]], on="cell_id")
    out = {}
    for model, rows in ev.groupby("model"):
        rows = rows[rows["n"] == rows["n"].max()]
        accuracy, n = float(rows["accuracy"].mean()), int(rows["n"].iloc[0])
        if n > 0:
            out[str(model)] = {"accuracy": accuracy, "n": n, "se": binomial_se(accuracy, n)}
    return out


def ladder_selection(ladder: dict, configs: pd.DataFrame, *, k: int = 3,
                     level: float = 0.9, starts: dict[str, dict] | None = None) -> list[dict]:
    """The ladder's choices for full-budget validation, best first.

    :func:`race.core.ladder.final_ranking` of the rungs: unguarded configs first; within a
    policy size the higher rung first; sizes merged by the observed score (seeds
    averaged) at the rung where each config was read. Intervals are normal at ``level``
    from the score's standard error (binomial over the rung's problems, pooled over
    seeds).

    Args:
        ladder: ``ladder.json`` (rungs, each with its ranked ``candidates``).
        configs: ``rank_regimes``'s configs on the first rung (for each config's regime).
        starts: :func:`warm_starts`; each choice then carries its ``gain`` over its size's
            warm start, with ``gain_se`` (the two standard errors combined) and a verdict
            at ``level`` in its reason.
    """
    z = float(stats.norm.ppf(0.5 + level / 2))
    regime = dict(zip(configs["config_id"], configs["regime"])) if len(configs) else {}
    rungs = ladder["rungs"]
    chosen = []
    for rank, cand in enumerate(final_ranking([r["candidates"] for r in rungs])[:k], 1):
        rung = rungs[cand["rung"] - 1]
        where = f"rung {rung['rung']} ({fmt_fraction(rung['fraction'])})"
        guard = cand.get("guard")
        if guard:
            why = "guarded"
        elif rank == 1:
            why = "ladder pick"
        else:
            why = "last rung" if rung is rungs[-1] else f"stopped at {where}"
        score, se = float(cand["score"]), float(cand["se"])
        start, gain = (starts or {}).get(cand["model"]), {}
        if start is not None:
            diff, diff_se = score - start["accuracy"], math.hypot(se, start["se"])
            gain = {"start": start["accuracy"], "gain": diff, "gain_se": diff_se,
                    "gain_text": gain_text(diff, diff_se, z)}
        chosen.append(gain | {
            "config_id": cand["config"], "cell_ids": list(cand["cell_ids"]),
            "score": score, "lo": max(0.0, score - z * se),
            "hi": min(1.0, score + z * se), "se": se, "rung": rung["rung"],
            "basis_used": f"observed at {where}", "interval_width": 2 * z * se,
            "regime": regime.get(cand["config"]), "model": cand["model"],
            "reward": cand["reward"], "guard": guard, "why": why, "rank": rank,
            "reason": f"{why}: {score:.3f} +- {se:.3f} (SE) on the selection target at "
                      f"{where}" + (f"; guard fired: {guard}" if guard else "")
                      + (f"; {gain['gain_text']}" if gain else "")})
    return [{key: _plain(val) for key, val in c.items()} for c in chosen]


def gain_text(gain: float, se: float, z: float) -> str:
    """A score's gain over its warm start, and whether it is clear of noise at ``z`` SE."""
    verdict = ("above it" if gain - z * se > 0 else
               "below it: post-training made it worse" if gain + z * se < 0 else
               "no clear gain from post-training")
    return f"{gain:+.3f} (SE {se:.3f}) vs its warm start, {verdict}"


def targets(cells: pd.DataFrame) -> list[str]:
    """Evaluation targets present as ``final_<target>`` accuracy columns, sorted.

    ``final_<target>_reward`` columns (mean reward, beside the accuracy) are not targets.
    """
    return sorted(c[len("final_"):] for c in cells.columns
                  if c.startswith("final_") and not c.endswith("_reward"))


def _final_column(cells: pd.DataFrame, target: str) -> str:
    column = f"final_{target}"
    if column not in cells:
        raise UnknownName(f"target={target!r}: no column {column!r} in the pilots; "
                       f"available targets: {targets(cells)}")
    return column


def _rng(seed: int, key: str) -> np.random.Generator:
    # One stream per config: adding a config leaves the others' intervals unchanged.
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def _bootstrap_mean(values: np.ndarray, rng: np.random.Generator, n_boot: int,
                    level: float) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``."""
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    means = values[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _rank(mean: pd.Series) -> pd.Series:
    # Round first so float noise does not break exact ties; a missing mean ranks last.
    return mean.round(12).rank(ascending=False, method="min", na_option="bottom").astype(int)


def _mode(series: pd.Series):
    counts = series.value_counts()  # ties: alphabetical first, deterministic
    return sorted(counts[counts == counts.max()].index)[0] if len(counts) else None


def rank_regimes(cells: pd.DataFrame, examples: pd.DataFrame, *, target: str,
                 metric: str = "final", n_boot: int = 1000, seed: int = 0,
                 level: float = 0.9) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rank allocation configs (seeds pooled) and allocation regimes on one target.

    Args:
        cells: one row per pilot; failed pilots are ignored.
        examples: final-checkpoint correctness (cell_id, target, example, correct), used
            for the interval of a config with a single seed.
        target: evaluation target, e.g. "test" (column ``final_<target>``).
        metric: only "final" (final-checkpoint accuracy).
        n_boot, seed, level: bootstrap resamples, generator seed, interval coverage.

    Returns:
        (configs, regimes). configs: one row per config_id: knobs, ``regime`` (most common
        among seeds), ``target``, ``n_seeds``, ``mean`` accuracy, its standard error
        ``se`` (seeds' spread / sqrt(seeds), or binomial over one seed's problems),
        percentile-bootstrap ``lo``/``hi`` with ``interval_source`` "seeds" (>= 2 seeds),
        "prompts" (one seed: over its examples) or "none" (no examples), ``rank`` (1 =
        best, ties share the min rank); sorted by rank then config_id. regimes: per
        (model, reward, regime), its best config's config_id, mean, lo, hi, n_seeds,
        interval_source; n_configs, rank.
    """
    if metric != "final":
        raise ValueError(f"metric={metric!r}: unknown; use metric='final'")
    if not 0 < level < 1 or n_boot < 1:
        raise ValueError(f"level={level}, n_boot={n_boot}: need 0 < level < 1 and n_boot >= 1")
    column = _final_column(cells, target)
    ok, failed = split_status(cells)
    if ok.empty:
        raise UsageError(f"no pilot has status ok ({len(failed)} failed): nothing to rank; "
                         "see the failed pilots' `error` column")
    ex = examples[examples["target"] == target] if len(examples) else \
        pd.DataFrame(columns=["cell_id", "correct"])
    rows = []
    for config_id, group in ok.groupby("config_id", sort=True):
        group = group.sort_values("seed")
        values = group[column].dropna().to_numpy(dtype=float)
        row = {"config_id": config_id}
        row.update({k: group[k].iloc[0] for k in CONFIG_COLUMNS if k in group})
        row.update(regime=_mode(group["regime"]), target=target, n_seeds=len(values),
                   mean=float(values.mean()) if len(values) else math.nan)
        flags = ex.loc[ex["cell_id"] == group["cell_id"].iloc[0], "correct"].to_numpy(float)
        sample, source = ((values, "seeds") if len(values) >= 2 else
                          (flags, "prompts") if len(flags) and len(values) else (None, "none"))
        lo = hi = se = math.nan
        if sample is not None:  # the point estimate stays inside its own interval
            lo, hi = _bootstrap_mean(sample, _rng(seed, str(config_id)), n_boot, level)
            lo, hi = min(lo, row["mean"]), max(hi, row["mean"])
            # over seeds: their spread / sqrt(seeds); one seed: binomial over its problems
            se = (float(sample.std(ddof=1) / math.sqrt(len(sample))) if source == "seeds"
                  else guards.standard_error(row["mean"], len(sample)))
        row.update(lo=lo, hi=hi, se=se, interval_source=source)
        rows.append(row)
    configs = pd.DataFrame(rows)
    configs["rank"] = _rank(configs["mean"])
    configs = configs.sort_values(["rank", "config_id"], kind="stable").reset_index(drop=True)

    n_configs = configs.groupby(REGIME_KEYS, dropna=False)["config_id"].transform("size")
    regimes = configs.assign(n_configs=n_configs).groupby(REGIME_KEYS, dropna=False).head(1)[
        [*REGIME_KEYS, "config_id", "n_configs", "n_seeds", "mean", "lo", "hi",
         "interval_source"]]  # head(1): configs is sorted best first
    regimes = regimes.assign(rank=_rank(regimes["mean"]))
    regimes = regimes.sort_values(["rank", *REGIME_KEYS], kind="stable").reset_index(drop=True)
    return configs, regimes


def _target_evals(evals: pd.DataFrame, cells: pd.DataFrame, target: str) -> pd.DataFrame:
    ok, _ = split_status(cells)
    if target not in set(evals["target"]):
        raise UnknownName(f"target={target!r}: not in the checkpoint evals; available targets: "
                       f"{sorted(evals['target'].unique())}")
    ev = evals[(evals["target"] == target) & evals["cell_id"].isin(ok["cell_id"])
               & evals["accuracy"].notna()]
    ev = ev.drop(columns=[c for c in ("reward", "config_id") if c in ev])
    return ev.merge(ok[["cell_id", "config_id", "reward"]], on="cell_id", how="left")


def frontier(evals: pd.DataFrame, cells: pd.DataFrame, *, target: str,
             level: float = 0.9) -> pd.DataFrame:
    """Allocation frontier per reward system: the best accuracy reachable within each FLOP
    level, with its interval.

    The running maximum of noisy checkpoints is biased upward (the winner's curse), so the
    frontier at a level is the checkpoint (at or below it) with the highest *lower* bound
    of a ``level`` normal interval (binomial over its ``n`` problems), drawn as that
    checkpoint's accuracy and interval.

    Returns:
        Columns reward, flops (FLOPs), accuracy, lo, hi, cell_id, config_id: one row per
        FLOP level in a reward's checkpoint evals (sorted).
    """
    z = float(stats.norm.ppf(0.5 + level / 2))
    ev = _target_evals(evals, cells, target)
    n = ev["n"].clip(lower=1) if "n" in ev else pd.Series(1, index=ev.index)
    p = ev["accuracy"].clip(0, 1)
    se = np.sqrt(np.maximum(p * (1 - p), 1 / n) / n)
    ev = ev.assign(lo=(p - z * se).clip(lower=0), hi=(p + z * se).clip(upper=1))
    rows = []
    for reward, group in ev.groupby("reward", sort=True):
        group = group.sort_values(["flops", "lo", "cell_id"], ascending=[True, False, True],
                                  kind="stable")
        best = None
        for flops, at in group.groupby("flops", sort=True):
            top = at.iloc[0]
            if best is None or top["lo"] > best["lo"]:
                best = top
            rows.append({"reward": reward, "flops": float(flops),
                         "accuracy": float(best["accuracy"]), "lo": float(best["lo"]),
                         "hi": float(best["hi"]), "cell_id": best["cell_id"],
                         "config_id": best["config_id"]})
    return pd.DataFrame(rows, columns=["reward", "flops", "accuracy", "lo", "hi", "cell_id",
                                       "config_id"])


def same_flop_sizes(cells: pd.DataFrame) -> pd.DataFrame:
    """What each policy size buys at the same pilot budget (means over its ok cells).

    Returns:
        One row per model, sorted by params: model, params, n_cells, steps, rollouts
        (steps * prompts_per_step * group_size completions), updates (steps *
        update_epochs), total_flops, flops_per_step (FLOPs), and ``best_<target>``: the
        best final accuracy per ``final_<target>`` column.
    """
    ok, _ = split_status(cells)
    ok = ok.assign(rollouts=ok["steps"] * ok["prompts_per_step"] * ok["group_size"],
                   updates=ok["steps"] * ok["update_epochs"],
                   flops_per_step=ok["total_flops"] / ok["steps"].where(ok["steps"] > 0))
    means = ("steps", "rollouts", "updates", "total_flops", "flops_per_step")
    out = ok.groupby(["model", "params"], as_index=False).agg(
        n_cells=("cell_id", "count"), **{c: (c, "mean") for c in means},
        **{f"best_{t}": (f"final_{t}", "max") for t in targets(ok)})
    return out.sort_values(["params", "model"], kind="stable").reset_index(drop=True)


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


def _fallback(x: np.ndarray, y: np.ndarray, n_points: int, reason: str) -> FitResult:
    if len(y) == 0:
        return FitResult("last", None, math.nan, math.nan, math.nan, math.nan, math.nan, 0,
                         reason)
    last = float(y[-1])
    ref = y[x > 0] if (x > 0).any() else y
    spread = float(np.sqrt(np.mean((ref - last) ** 2)))
    half = max(spread, _FALLBACK_HALF_WIDTH)
    return FitResult("last", None, math.nan, spread, last, max(0.0, last - half),
                     min(1.0, last + half), n_points, reason)


def fit_curve(flops, accuracy, *, predict_at: float, r0: float | None = None,
              seed: int = 0) -> FitResult:
    """Fit the ScaleRL sigmoid to one pilot curve and extrapolate it to ``predict_at``.

    R0 is the accuracy at flops == 0 (checkpoint 0) if observed, else ``r0``. A, log10 C_mid
    and B are fitted by ``scipy.optimize.curve_fit`` on the points with flops > 0: A in
    [0, 1] (A < R0 allowed), B in (0, 10], C_mid in [min_flops / 100, predict_at * 100].
    Interval: 5-95 % of predictions under 500 seeded multivariate-normal parameter draws,
    widened by the rmse, clipped to [0, 1]. Falls back to "last" (last accuracy +-
    max(spread, 0.05)) with < 3 points, unknown R0, a flat curve, a failed fit, a
    non-finite covariance, or R^2 < 0.

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
    return FitResult("sigmoid", params, r2, rmse, prediction, lo, hi, n)


def fit_cells(evals: pd.DataFrame, cells: pd.DataFrame, *, target: str) -> pd.DataFrame:
    """Fit every ok pilot's checkpoint curve on ``target`` and extrapolate to its full budget.

    Returns:
        One row per ok cell, by cell_id: cell_id, config_id, the ``FitResult`` fields
        (params flattened to R0, A, C_mid, B; nan for a fallback), observed (final
        accuracy), predict_at (the cell's full_budget_flops, FLOPs).
    """
    ev = _target_evals(evals, cells, target)
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
        rows.append({"cell_id": cell.cell_id, "config_id": cell.config_id, **row,
                     "observed": float(observed), "predict_at": float(cell.full_budget_flops),
                     **{k: (fit.params or {}).get(k, math.nan) for k in ("R0", "A", "C_mid", "B")}})
    return pd.DataFrame(rows)


def _plain(value):
    """A JSON-safe Python scalar: numpy numbers to int/float, nan to None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def guard_cells(evals: pd.DataFrame, examples: pd.DataFrame, steps: pd.DataFrame, *,
                target: str, thresholds: guards.GuardThresholds | None = None
                ) -> pd.DataFrame:
    """Every guard (:mod:`race.core.guards`) on every cell's curve on ``target``.

    Args:
        evals: ``load_results``'s checkpoint evals (accuracy and proxy ``mean_reward``).
        examples: ``load_results``'s per-problem rows (how many problems a checkpoint has).
        steps: ``load_results(..., with_steps=True)``'s step rows (entropy, truncation
            rate and cap per step).

    Returns:
        One row per (cell_id, config_id, guard): ``fired`` and ``evidence``.
    """
    rows = []
    curves = evals[evals["target"] == target].sort_values(["cell_id", "flops", "checkpoint"])
    problems = (examples[examples["target"] == target].groupby("cell_id").size()
                if len(examples) else pd.Series(dtype=int))
    for cell_id, curve in curves.groupby("cell_id", sort=True):
        # problems per checkpoint (the final one may be larger: the selection target's)
        counts = (curve["n"].astype(int).tolist() if "n" in curve and (curve["n"] > 0).all()
                  else int(problems.get(cell_id, 0)))
        cell_steps = steps[steps["cell_id"] == cell_id].sort_values("step")
        caps = cell_steps.get("max_new_tokens", pd.Series(dtype=float)).tolist()
        entropy, truncated = (guards.at_full_cap(
            cell_steps.get(key, pd.Series(dtype=float)).tolist(), caps)
            for key in ("entropy", "truncation_rate"))
        verdicts = guards.check_cell(
            curve["accuracy"].tolist(), curve["mean_reward"].tolist(), counts,
            entropy, truncated, thresholds or guards.DEFAULT)
        rows += [{"cell_id": cell_id, "config_id": curve["config_id"].iloc[0],
                  "target": target, "guard": v.guard, "fired": v.fired,
                  "evidence": v.evidence} for v in verdicts]
    return pd.DataFrame(rows, columns=["cell_id", "config_id", "target", "guard", "fired",
                                       "evidence"])


def select_for_validation(configs_df: pd.DataFrame, fits_df: pd.DataFrame, *, k: int = 3,
                          basis: str = "extrapolated", max_width: float = 0.3,
                          guarded: dict[str, str] | None = None) -> list[dict]:
    """Choose up to k configs for full-budget validation, preferring distinct regimes.

    Score: the seeds' mean extrapolated prediction when ``basis="extrapolated"`` and every
    seed's fit is a sigmoid whose interval at the full budget is at most ``max_width``
    wide, else the observed pilot mean (``basis_used`` says which, the reason says why):
    a fit that cannot say where the curve goes (a 4-point pilot curve extrapolated 16x
    often cannot) must not outrank what was observed.
    First the best config of each distinct (model, reward, regime), then the next best.
    A config in ``guarded`` (config_id -> what fired, from :func:`guard_cells`) is never
    extrapolated and comes only after every unguarded one: its curve shows a late
    failure that neither a fit nor its last value can be trusted past.

    Returns:
        JSON-serializable dicts in selection order: config_id, cell_ids, rank (pilot rank),
        score, lo, hi, basis_used, interval_width, regime, model, reward, reason, and why
        ("distinct regime": the best of its regime; "free slot": its regime was chosen).
    """
    if basis not in ("extrapolated", "observed"):
        raise ValueError(f"basis={basis!r}: unknown; use 'extrapolated' or 'observed'")
    n_configs = len(configs_df)
    candidates = []
    for row in configs_df.itertuples(index=False):
        fits = fits_df[fits_df["config_id"] == row.config_id].sort_values("cell_id")
        target = getattr(row, "target", "the target")
        head = f"rank {row.rank} of {n_configs} on {target}"
        sigmoids = len(fits) and (fits["method"] == "sigmoid").all()
        wide = sigmoids and float((fits["hi"] - fits["lo"]).mean()) > max_width
        fired = (guarded or {}).get(row.config_id)
        if basis == "extrapolated" and sigmoids and not wide and not fired:
            score, lo, hi = (float(fits[c].mean()) for c in ("prediction", "lo", "hi"))
            used = "extrapolated"
            detail = (f"extrapolated to {fits['predict_at'].mean():.2g} FLOPs: {score:.3f} "
                      f"[{lo:.2f}, {hi:.2f}] (sigmoid fit, R^2 {fits['r2'].mean():.2f})")
        else:
            score, lo, hi, used = float(row.mean), float(row.lo), float(row.hi), "observed"
            bad = fits[fits["method"] != "sigmoid"]
            why = (f"guard fired: {fired}" if fired
                   else "basis=observed" if basis == "observed" else "no curve fit" if not len(fits)
                   else (f"fit too uncertain to extrapolate: interval "
                         f"[{fits['lo'].mean():.2f}, {fits['hi'].mean():.2f}] wider than "
                         f"{max_width}") if wide
                   else f"fallback fit for {bad['cell_id'].iloc[0]}: {bad['reason'].iloc[0]}")
            detail = f"observed pilot mean {score:.3f} [{lo:.2f}, {hi:.2f}] ({why})"
        candidates.append({"config_id": row.config_id, "cell_ids": list(fits["cell_id"]),
                           "rank": row.rank, "score": score, "lo": lo, "hi": hi,
                           "basis_used": used, "interval_width": hi - lo,
                           "regime": row.regime, "model": row.model, "reward": row.reward,
                           "guard": fired or None, "reason": f"{head}; {detail}"})
    candidates.sort(key=lambda c: (-c["score"] if math.isfinite(c["score"]) else math.inf,
                                   c["rank"], c["config_id"]))
    clean = [c for c in candidates if not c["guard"]]

    firsts = {}  # score order: the first config seen of each regime is its best
    for cand in clean:
        firsts.setdefault((cand["model"], cand["reward"], cand["regime"]), cand)
    chosen = list(firsts.values())[:k]
    for cand in chosen:
        cand["why"] = "distinct regime"
        cand["reason"] += f"; distinct regime {cand['model']}/{cand['reward']}/{cand['regime']}"
    for cand in [c for c in clean if all(c is not x for x in chosen)][:k - len(chosen)]:
        cand["why"] = "free slot"
        cand["reason"] += (f"; fills a slot (regime {cand['model']}/{cand['reward']}/"
                           f"{cand['regime']} already chosen)")
        chosen.append(cand)
    for cand in [c for c in candidates if c["guard"]][:k - len(chosen)]:
        cand["why"] = "guarded"
        cand["reason"] += "; chosen only because fewer unguarded configs than k"
        chosen.append(cand)
    return [{key: ([str(v) for v in val] if isinstance(val, list) else _plain(val))
             for key, val in cand.items()} for cand in chosen]


def compare_predictions(selection_or_df: list[dict] | pd.DataFrame,
                        realized: dict[str, float]) -> dict:
    """Compare pilot predictions with realized full-budget results.

    Args:
        selection_or_df: output of ``select_for_validation`` (uses ``score``), or a frame
            with config_id and one of score / prediction / mean, plus optional lo, hi.
        realized: config_id -> realized metric (accuracy) of the validation run.

    Returns:
        dict: n; kendall_tau, spearman (None, with a ``note``, under 3 configs or for
        constant values); top1_regret (best realized minus the predicted best's realized,
        >= 0); coverage (fraction realized inside [lo, hi]); rows (config_id, predicted,
        lo, hi, realized, inside); unmatched (realized config_ids never predicted).
    """
    records = selection_or_df
    if isinstance(records, pd.DataFrame):
        score = next((c for c in ("score", "prediction", "mean") if c in records), None)
        if score is None:
            raise KeyError("compare_predictions: the frame needs a score, prediction or mean "
                           f"column; has {list(records.columns)}")
        records = records.rename(columns={score: "score"}).to_dict("records")
    rows = []
    for rec in records:
        if rec["config_id"] not in realized:
            continue
        lo, hi = _plain(rec.get("lo")), _plain(rec.get("hi"))
        value = float(realized[rec["config_id"]])
        inside = None if lo is None or hi is None else bool(lo <= value <= hi)
        rows.append({"config_id": rec["config_id"], "predicted": float(rec["score"]),
                     "lo": lo, "hi": hi, "realized": value, "inside": inside})
    predicted_ids = {r["config_id"] for r in records}
    out = {"n": len(rows), "kendall_tau": None, "spearman": None, "top1_regret": None,
           "coverage": None, "note": "", "rows": rows,
           "unmatched": sorted(c for c in realized if c not in predicted_ids)}
    if not rows:
        return {**out, "note": "no predicted config has a realized value"}
    pred = np.array([r["predicted"] for r in rows])
    real = np.array([r["realized"] for r in rows])
    out["top1_regret"] = float(real.max() - real[int(np.argmax(pred))])
    flags = [r["inside"] for r in rows if r["inside"] is not None]
    out["coverage"] = float(np.mean(flags)) if flags else None
    if len(rows) < 3:
        out["note"] = f"rank correlations need >= 3 validated configs; got {len(rows)}"
    elif np.ptp(pred) == 0 or np.ptp(real) == 0:
        out["note"] = "rank correlations undefined: predicted or realized values are constant"
    else:
        out["kendall_tau"] = float(stats.kendalltau(pred, real).statistic)
        out["spearman"] = float(stats.spearmanr(pred, real).statistic)
    return out


def best_by_target(configs_by_target: dict[str, pd.DataFrame]) -> dict:
    """Say whether the top-ranked config differs between evaluation targets.

    Args:
        configs_by_target: target -> configs frame from ``rank_regimes`` (sorted by rank).

    Returns:
        {<target>: best config_id or None, ..., "best": that mapping, "agree", "message"}.
    """
    top = {t: df.iloc[0] for t, df in configs_by_target.items() if not df.empty}
    best = {t: (str(top[t]["config_id"]) if t in top else None) for t in configs_by_target}
    agree = len({str(row["config_id"]) for row in top.values()}) <= 1
    parts = ", ".join(f"{t} -> {row['config_id']} ({row['mean']:.3f})" for t, row in top.items())
    if not top:
        message = "no target has a ranked config"
    elif agree:
        message = f"the best allocation agrees across targets: {parts}"
    else:
        message = f"the best allocation differs between targets: {parts}"
    return {**best, "best": best, "agree": agree, "message": message}
