"""Pure pandas aggregation of pilots: rank configs and regimes, the frontier, what each
size buys, the guards on every curve, predictions against validation runs.

No IO, torch or plotting (:mod:`race.analysis.load` reads, :mod:`race.report` draws).
Accuracies are fractions in [0, 1]; FLOPs are model FLOPs; random draws come from seeded
Generators.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from race.core import guards
from race.core.stats import COVERS, REPORT, binomial_se, normal_interval, read_se
from race.errors import UnknownName, UsageError

# Knob columns copied from a config's first seed (they are shared by its seeds).
CONFIG_COLUMNS = ("model", "params", "reward", "task", "group_size", "prompts_per_step",
                  "max_new_tokens", "update_epochs", "lr", "lora_rank", "budget_flops",
                  "full_budget_flops", "rho_planned")
LEVEL, N_BOOT = REPORT.level, REPORT.n_boot  # when a caller gives none
REGIME_KEYS = ["model", "reward", "regime"]


def split_status(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split pilots into (ok, failed); any status other than "ok" counts as failed."""
    ok = cells["status"] == "ok"
    return cells[ok].reset_index(drop=True), cells[~ok].reset_index(drop=True)


def check_consistent(cells: pd.DataFrame) -> None:
    """Raise UsageError when the pilots mix tasks or full budgets (two sweeps in one
    folder), naming the cell folders of every group but the largest: removing those
    leaves one sweep that reports and extends."""
    for column, fix in (("task", "split the folder by task"),
                        ("full_budget_flops", "split the folder by budget")):
        if column not in cells:
            continue
        groups = cells.dropna(subset=[column]).groupby(column)["cell_id"].apply(sorted)
        if len(groups) < 2:
            continue
        names = {v: f"{column}={float(v):.3g}" if column.endswith("_flops")  # 3.2e+15
                 else f"{column}={v}" for v in groups.index}
        counted = [f"{names[v]} ({len(ids)} cell{'s' * (len(ids) != 1)})"
                   for v, ids in groups.items()]
        keep = max(groups.index, key=lambda v: (len(groups[v]), str(v)))
        others = [f"cells/{i}" for v, ids in groups.items() if v != keep for i in ids]
        listed = " ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6
                                         else "")
        raise UsageError(f"results mix {', '.join(counted[:-1])} and {counted[-1]}: "
                         f"aggregate one sweep at a time, {fix}, or remove {listed} to "
                         f"keep {names[keep]}")


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


def _rank(mean: pd.Series) -> pd.Series:
    # Round first so float noise does not break exact ties; a missing mean ranks last.
    return mean.round(12).rank(ascending=False, method="min", na_option="bottom").astype(int)


def _mode(series: pd.Series):
    counts = series.value_counts()  # ties: alphabetical first, deterministic
    return sorted(counts[counts == counts.max()].index)[0] if len(counts) else None


def rank_regimes(cells: pd.DataFrame, examples: pd.DataFrame, *, target: str,
                 metric: str = "final", level: float = LEVEL, over_seeds: bool = True
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rank allocation configs (seeds pooled) and allocation regimes on one target.

    Args:
        cells: one row per pilot; failed pilots are ignored.
        examples: final-checkpoint correctness (cell_id, target, example, correct): how
            many problems each seed's read scored.
        target: evaluation target, e.g. "test" (column ``final_<target>``).
        metric: only "final" (final-checkpoint accuracy).
        level: interval coverage.
        over_seeds: several seeds' SE from their spread (else, as a ladder's rungs read
            them, the problems' pooled binomial SE): :func:`race.core.stats.read_se`.

    Returns:
        (configs, regimes). configs: one row per config_id: knobs (and ``rho_planned``),
        ``rho_realized`` (the seeds' mean; both when the cells carry them, see
        :func:`race.analysis.surfaces.with_update_fractions`), ``regime`` (most common
        among seeds), ``target``, ``n_seeds``, ``mean`` accuracy, its standard error
        ``se`` (:func:`race.core.stats.read_se`), the normal interval ``lo``/``hi`` from
        it (:func:`race.core.stats.normal_interval`, the one every report prints),
        ``covers`` (:data:`race.core.stats.COVERS`), ``interval_source`` "seeds"
        (>= 2 seeds, ``over_seeds``), "prompts" (problems only) or "none" (no examples
        and one seed), ``rank`` (1 =
        best, ties share the min rank); sorted by rank then config_id. regimes: per
        (model, reward, regime), its best config's config_id, mean, lo, hi, n_seeds,
        interval_source; n_configs, rank.
    """
    if metric != "final":
        raise ValueError(f"metric={metric!r}: unknown; use metric='final'")
    if not 0 < level < 1:
        raise ValueError(f"level={level}: need 0 < level < 1")
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
        if "rho_realized" in group:  # seeds spend slightly different shares
            row["rho_realized"] = float(group["rho_realized"].mean())
        row.update(regime=_mode(group["regime"]), target=target, n_seeds=len(values),
                   mean=float(values.mean()) if len(values) else math.nan)
        counts = ex.groupby("cell_id").size() if len(ex) else pd.Series(dtype=int)
        reads = group[group[column].notna()]
        n = [int(counts.get(c, 0)) for c in reads["cell_id"]]
        lo = hi = se = math.nan
        source, covers = "none", ""
        if len(values) >= 2 or (len(values) and all(n)):
            se, covers = read_se(values.tolist(), n if all(n) else [0] * len(n),
                                 over_seeds=over_seeds)
            if not all(n):  # seeds without their problems: the spread alone
                se = float(values.std(ddof=1) / math.sqrt(len(values)))
            source = "seeds" if covers == COVERS["seeds"] else "prompts"
            lo, hi = normal_interval(row["mean"], se, level)
        row.update(lo=lo, hi=hi, se=se, interval_source=source, covers=covers)
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


def target_evals(evals: pd.DataFrame, cells: pd.DataFrame, target: str) -> pd.DataFrame:
    ok, _ = split_status(cells)
    if target not in set(evals["target"]):
        raise UnknownName(f"target={target!r}: not in the checkpoint evals; available targets: "
                       f"{sorted(evals['target'].unique())}")
    ev = evals[(evals["target"] == target) & evals["cell_id"].isin(ok["cell_id"])
               & evals["accuracy"].notna()]
    ev = ev.drop(columns=[c for c in ("reward", "config_id") if c in ev])
    return ev.merge(ok[["cell_id", "config_id", "reward"]], on="cell_id", how="left")


def frontier(evals: pd.DataFrame, cells: pd.DataFrame, *, target: str,
             level: float = LEVEL) -> pd.DataFrame:
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
    ev = target_evals(evals, cells, target)
    n = ev["n"].clip(lower=1) if "n" in ev else pd.Series(1, index=ev.index)
    bounds = [normal_interval(a, binomial_se(a, int(k)), level)
              for a, k in zip(ev["accuracy"], n)]
    ev = ev.assign(lo=[b[0] for b in bounds], hi=[b[1] for b in bounds])
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


def plain(value):
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
        lo, hi = plain(rec.get("lo")), plain(rec.get("hi"))
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
