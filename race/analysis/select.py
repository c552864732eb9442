"""Every selection rule in one place: which configs a rung promotes (its candidates),
which go to full-budget validation (flat: :func:`select_for_validation`; ladder:
:func:`ladder_selection`), and each choice's gain over its warm start. The pure rules of
promotion and the final ranking are :mod:`race.core.rungs`'s.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from race.analysis.aggregate import (
    LEVEL,
    guard_cells,
    plain,
    target_evals,
    targets,
)
from race.analysis.load import load_results
from race.core.rungs import final_ranking, fmt_fraction, next_rung_bound, pool_seeds
from race.core.stats import (
    BASES,
    REPORT,
    binomial_se,
    normal_interval,
    pooled_se,
    z_of_level,
)
from race.store.cell import CellDir
from race.store.io import read_json
from race.store.sweep_files import SweepDir

TOP_K, BASIS = REPORT.top_k, REPORT.basis  # when a caller gives none

# load_results' column naming the cells whose checkpoint 0 a cell's gain is read against
BASELINE = "baseline_key"
# cells' columns that may tell two baselines of one model apart, in a label
CONDITIONS = ("task", "max_new_tokens", "select_target", "backend", "convention", "dtype")


def warm_starts(evals: pd.DataFrame, cells: pd.DataFrame, *, target: str) -> dict[str, dict]:
    """Each config's accuracy on ``target`` before any update: checkpoint 0 of the cells
    that share its warm start *and* its evaluation conditions (``baseline_key``,
    :func:`race.core.specs.baseline_key`: the same weights scored greedily on the same
    problems of the same task and knobs, at the same generation cap), scored on the most
    problems any of them used (pilots score the selection target at the start on as many
    problems as at the end). Cells whose conditions differ (another ``grid.max_new_tokens``,
    task knob or eval target) never share a baseline: each config is judged against the
    start it had. Frames without ``baseline_key`` (made by hand) group by model.

    Returns ``{config_id: {"accuracy", "n", "se", "model", "baseline", "label"}}``
    (``baseline``: its group's key; ``label``: the model, with what sets the group apart
    where the model has several); configs whose group was never evaluated at the start
    are left out.
    """
    if not len(evals) or target not in set(evals["target"]):
        return {}
    ok = cells[cells["status"] == "ok"] if "status" in cells else cells
    groups = (ok[BASELINE].fillna(ok["model"]) if BASELINE in ok else ok["model"]).astype(str)
    group_of = dict(zip(ok["cell_id"], groups))
    ev = target_evals(evals, cells, target)
    ev = ev[ev["checkpoint"] == 0.0]
    ev = ev.assign(group=ev["cell_id"].map(group_of))
    scored = {}
    for group, rows in ev.groupby("group"):
        rows = rows[rows["n"] == rows["n"].max()]
        accuracy, n = float(rows["accuracy"].mean()), int(rows["n"].iloc[0])
        if n > 0:
            scored[group] = {"accuracy": accuracy, "n": n, "se": binomial_se(accuracy, n)}
    labels = _baseline_labels(ok.assign(group=groups))
    return {str(config): scored[group] | {"model": str(model), "baseline": group,
                                          "label": labels[group]}
            for config, group, model in zip(ok["config_id"], groups, ok["model"])
            if group in scored}


def _baseline_labels(ok: pd.DataFrame) -> dict[str, str]:
    """Each baseline group's label: its model, and where the model has several groups the
    :data:`CONDITIONS` whose values differ among them (else the group's key)."""
    labels = {}
    for model, rows in ok.groupby("model"):
        firsts = rows.groupby("group").first()
        differ = [c for c in CONDITIONS if c in firsts and firsts[c].astype(str).nunique() > 1]
        for group, row in firsts.iterrows():
            if len(firsts) == 1:
                labels[group] = str(model)
            else:
                apart = ", ".join(f"{c}={_shown(row[c])}" for c in differ) or f"start {group}"
                labels[group] = f"{model} ({apart})"
    return labels


def _shown(value) -> str:
    value = plain(value)
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def baselines(starts: dict[str, dict]) -> list[dict]:
    """The distinct baselines of :func:`warm_starts` (one per group), by label."""
    return sorted({s["baseline"]: s for s in starts.values()}.values(),
                  key=lambda s: s["label"])


def ladder_selection(ladder: dict, configs: pd.DataFrame, *, k: int = TOP_K,
                     level: float = LEVEL, starts: dict[str, dict] | None = None) -> list[dict]:
    """The ladder's choices for full-budget validation, best first.

    :func:`race.core.rungs.final_ranking` of the rungs: unguarded configs first; within a
    policy size the higher rung first; sizes merged by the observed score (seeds
    averaged) at the rung where each config was read. Intervals are normal at ``level``
    from the score's standard error (binomial over the rung's problems, pooled over
    seeds).

    Args:
        ladder: ``ladder.json`` (rungs, each with its ranked ``candidates``).
        configs: ``rank_regimes``'s configs on the first rung (for each config's regime).
        starts: :func:`warm_starts`; each choice then carries its ``gain`` over its own
            warm start (its config's), with ``gain_se`` (the two standard errors combined)
            and a verdict at ``level`` in its reason.
    """
    z = z_of_level(level)
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
        start, gain = (starts or {}).get(cand["config"]), {}
        if start is not None:
            diff, diff_se = score - start["accuracy"], math.hypot(se, start["se"])
            gain = {"start": start["accuracy"], "gain": diff, "gain_se": diff_se,
                    "gain_text": gain_text(diff, diff_se, z)}
        lo, hi = normal_interval(score, se, level)
        chosen.append(gain | {
            "config_id": cand["config"], "cell_ids": list(cand["cell_ids"]),
            "score": score, "lo": lo, "hi": hi, "se": se, "rung": rung["rung"],
            "basis_used": f"observed at {where}", "interval_width": 2 * z * se,
            "regime": regime.get(cand["config"]), "model": cand["model"],
            "reward": cand["reward"], "guard": guard, "why": why, "rank": rank,
            "reason": f"{why}: {score:.3f} +- {se:.3f} (SE) on the selection target at "
                      f"{where}" + (f"; guard fired: {guard}" if guard else "")
                      + (f"; {gain['gain_text']}" if gain else "")})
    return [{key: plain(val) for key, val in c.items()} for c in chosen]


def gain_text(gain: float, se: float, z: float) -> str:
    """A score's gain over its warm start, and whether it is clear of noise at ``z`` SE."""
    verdict = ("above it" if gain - z * se > 0 else
               "below it: post-training made it worse" if gain + z * se < 0 else
               "no clear gain from post-training")
    return f"{gain:+.3f} (SE {se:.3f}) vs its warm start, {verdict}"


def select_for_validation(configs_df: pd.DataFrame, fits_df: pd.DataFrame, *, k: int = TOP_K,
                          basis: str = BASIS, max_width: float = 0.3,
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
    if basis not in BASES:
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
    return [{key: ([str(v) for v in val] if isinstance(val, list) else plain(val))
             for key, val in cand.items()} for cand in chosen]
def rung_candidates(sweep_dir: Path, specs: list, config_of: dict[str, str],
                    next_flops: float | None, *, z: float, promote_by: str,
                    thresholds=None) -> list[dict]:
    """One rung's configs as promotion candidates: each config's ok cells (seeds) read on
    the selection target at the rung's end, their guards, and (below the last rung) the
    lower confidence bound of the seed mean that promotions rank by
    (:func:`race.core.rungs.next_rung_bound` with ``promote_by``; ``"trend"``: at
    ``next_flops``)."""
    ids = {s.cell_id for s in specs}
    if not specs:
        return []
    target = specs[0].selection_target
    cells, evals, examples, steps = load_results(sweep_dir, with_steps=True)
    if evals.empty:  # no ok cell evaluated anything (every pilot of the rung failed)
        return []
    evals = evals[evals["cell_id"].isin(ids) & (evals["target"] == target)]
    checks = guard_cells(evals, examples[examples["cell_id"].isin(ids)]
                                   if len(examples) else examples,
                                   steps[steps["cell_id"].isin(ids)], target=target,
                                   thresholds=thresholds)
    fired = checks[checks["fired"]]
    by_config: dict[str, list] = {}
    for spec in specs:
        curve = evals[evals["cell_id"] == spec.cell_id].sort_values(["flops", "checkpoint"])
        if not CellDir.of(sweep_dir, spec.cell_id).is_ok() or curve.empty:
            continue
        bound = next_rung_bound(curve["flops"].tolist(), curve["accuracy"].tolist(),
                                curve["n"].astype(int).tolist(),
                                next_flops or float(curve["flops"].iloc[-1]), z=z,
                                promote_by=promote_by)
        by_config.setdefault(config_of[spec.cell_id], []).append((spec, bound))
    candidates = []
    for config, members in sorted(by_config.items()):
        pooled = pool_seeds([b for _, b in members], z)  # seeds and problems
        score, se = pooled["score"], pooled["se"]
        predicted, predicted_se = pooled["predicted"], pooled["predicted_se"]
        cell_ids = [s.cell_id for s, _ in members]
        guard = fired[fired["cell_id"].isin(cell_ids)]
        spec = members[0][0]
        candidates.append({
            "config": config, "cell_ids": cell_ids, "model": spec.model,
            "reward": spec.reward_name, "group_size": spec.group_size,
            "update_epochs": spec.update_epochs, "score": score, "se": se,
            "predicted": predicted, "predicted_se": predicted_se,
            "lcb": predicted - z * predicted_se, "ucb": predicted + z * predicted_se,
            "guard": "; ".join(f"{g}: {e}" for g, e in zip(guard["guard"], guard["evidence"]))
            or None})
    return candidates


def ladder_guards(ladder: dict) -> list[dict]:
    """Every guard the ladder saw fire, rung by rung (a continued cell's curve is checked
    at each rung it reaches, so a failure after the first rung shows only here)."""
    return [{"rung": rung["rung"], "fraction": rung["fraction"], "config_id": c["config"],
             "cell_ids": c["cell_ids"], "evidence": c["guard"]}
            for rung in ladder["rungs"] for c in rung["candidates"] if c.get("guard")]


def ranked_reads(evals: pd.DataFrame) -> pd.DataFrame:
    """The checkpoint evals a ranking may read: those past the warm start (checkpoint >
    0). A warm start scores the same model for every config of its size, so ranking it
    ranks nothing any allocation did (a ladder scores its reported targets at its last
    rung only: below it they hold warm starts alone)."""
    return evals[evals["checkpoint"] > 0] if len(evals) else evals


def final_reads(evals: pd.DataFrame, target: str) -> pd.DataFrame:
    """Each cell's last read of ``target`` past its warm start (:func:`ranked_reads`):
    one row per cell with its ``accuracy`` and ``n``, the problems it scored."""
    reads = ranked_reads(evals)
    if not len(reads):
        return reads
    reads = reads[reads["target"] == target].sort_values(["cell_id", "flops", "checkpoint"])
    return reads.groupby("cell_id", sort=True).tail(1)


def pooled(reads: pd.DataFrame) -> tuple[float, float]:
    """The seeds' mean score and its standard error: each seed's binomial SE over the
    problems it scored (its ``n``), pooled, ``sqrt(sum se_i^2) / k``."""
    return float(reads["accuracy"].mean()), pooled_se(reads["accuracy"].tolist(),
                                                      reads["n"].tolist())


# the knobs that make an allocation (a config id also carries the pilot budget, so two
# budgets' ids always differ): what "changes" between budgets compares
ALLOCATION_KEYS = ("model", "reward", "group_size", "update_epochs", "prompts_per_step",
                   "max_new_tokens", "lr", "lora_rank", "kl_coef", "temperature",
                   "minibatch_size")


def allocation(spec: dict) -> str:
    """A cell's allocation as its knobs, ``model=tiny-m reward=rule group_size=4 ...``
    (the budget and seed left out): equal across budgets where the allocation is."""
    knobs = {k: spec.get(k) for k in ALLOCATION_KEYS}
    knobs["reward"] = (spec.get("reward") or {}).get("name")
    return " ".join(f"{k}={v}" for k, v in knobs.items() if v is not None)


def budget_rows(budget: float, folder: Path, *, level: float = LEVEL) -> list[dict]:
    """One budget's selected allocation on every target (the selection target: its pick
    from ``selection.json``; the others: the best config of the last rung on them), with
    a normal interval at ``level`` from its standard error (:func:`pooled`: binomial over
    the problems each seed scored, read from its eval rows, pooled over seeds). A config
    is read on a target only where it was scored past its warm start
    (:func:`final_reads`); ``n`` is the fewest problems a seed of the chosen config
    scored, ``n_max`` the most."""
    sweep = SweepDir(folder)
    selection = read_json(sweep.selection)
    cells, evals, _ = load_results(folder)
    frame = cells[cells["status"] == "ok"]
    if sweep.ladder.is_file():
        last = read_json(sweep.ladder)["rungs"][-1]
        options = {c["config"]: (c["cell_ids"], c.get("guard"), last["fraction"])
                   for c in last["candidates"]}
    else:
        options = {cid: (list(group["cell_id"]), None, float(group["budget_flops"].iloc[0])
                         / budget) for cid, group in frame.groupby("config_id")}
    specs = {cid: read_json(CellDir.of(folder, cid).spec)
             for ids, _, _ in options.values() for cid in ids}
    primary = selection["target"]
    rows = []
    for target in targets(frame):
        reads = final_reads(evals, target)
        scored = []
        for config, (ids, guard, fraction) in options.items():
            mine = reads[reads["cell_id"].isin(ids) & reads["cell_id"].isin(frame["cell_id"])]
            if mine.empty:
                continue
            score, se = pooled(mine)
            scored.append({"config": config, "score": score, "se": se, "guard": guard,
                           "fraction": fraction, "spec": specs[ids[0]],
                           "n": int(mine["n"].min()), "n_max": int(mine["n"].max()),
                           "seeds": len(mine)})
        if not scored:
            continue
        best = None
        if target == primary and selection.get("pick", "") is None:  # nothing learned
            rows.append({"budget_flops": budget, "target": target, "selection": True,
                         "config": "-", "allocation": "-",
                         "score": math.nan, "se": math.nan, "lo": math.nan, "hi": math.nan,
                         "n": min(s["n"] for s in scored),
                         "n_max": max(s["n_max"] for s in scored), "seeds": 0,
                         "read_at": "-", "guard": selection.get("pick_reason", "")})
            continue
        if target == primary and selection["selected"]:
            chosen = selection["selected"][0]["config_id"]
            best = next((s for s in scored if s["config"] == chosen), None)
        best = best or min(scored, key=lambda s: (bool(s["guard"]), -s["score"], s["config"]))
        spec = best["spec"]
        lo, hi = normal_interval(best["score"], best["se"], level)
        rows.append({"budget_flops": budget, "target": target, "selection": target == primary,
                     "config": best["config"], "allocation": allocation(spec),
                     "model": spec["model"],
                     "reward": spec["reward"]["name"], "group_size": spec["group_size"],
                     "update_epochs": spec["update_epochs"], "score": best["score"],
                     "se": best["se"], "lo": lo, "hi": hi, "n": best["n"],
                     "n_max": best["n_max"], "seeds": best["seeds"],
                     "read_at": fmt_fraction(best["fraction"]),
                     "guard": best["guard"] or ""})
    return rows
