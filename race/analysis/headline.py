"""The answer a report opens with: the pick and why, its runner-up and whether the two are
told apart, and the best allocation conditional on size, reward system, target and budget,
each with its interval (pure pandas and scipy).

Scores are read where the selection read them: a ladder's configs at the highest rung
each reached (:func:`race.analysis.select.ladder_selection`), a flat sweep's at their
pilot's end. Intervals are :func:`race.core.stats.normal_interval` at ``level`` from a score's
standard error (binomial over its problems, pooled over seeds; a flat sweep's configs:
their ranking's), the one interval every table prints for a read; gains are over the
config's own warm start on the same target (:func:`race.analysis.select.warm_starts`).
Configs whose reads tie (equal scores, or every interval holding 0 with the leader's) are
a tie: a row names them all, never a winner picked by their order (``tied``).
"""

from __future__ import annotations

import math

import pandas as pd

from race.analysis.ladder_curves import ladder_points
from race.analysis.select import gain_text, ladder_selection, ranked_reads, warm_starts
from race.analysis.spend import training_rate
from race.core.fmt import CHARGED_PHASES, fmt_flops
from race.core.rungs import fmt_fraction
from race.core.stats import normal_interval, pooled_se, z_of_level

FINDING_COLUMNS = ["by", "value", "config_id", "model", "reward", "group_size",
                   "update_epochs", "target", "score", "se", "lo", "hi", "gain", "gain_se",
                   "read_at", "over_pick", "over_pick_se", "tied", "n_configs"]
# over_pick(_se): a target row's config minus the primary target's row's, on that target;
# tied: the configs tied with the row's (empty: none); n_configs: the configs read there


def ties(best: str, reads: list[tuple[str, float, float]]) -> list[str]:
    """The configs tied with ``best`` among ``reads`` ((config, score, interval's lo)):
    an equal score, or (where ``best``'s interval holds 0) every config whose interval
    holds 0 too: the order among them is noise, not a ranking. Empty where ``best``
    stands alone."""
    score, lo = next((s, low) for c, s, low in reads if c == best)
    members = {c for c, s, _ in reads if abs(s - score) <= 1e-9}
    if lo <= 0:
        members |= {c for c, _, low in reads if low <= 0}
    return sorted(members) if len(members) > 1 else []


def _knobs(configs: pd.DataFrame, config_id: str) -> dict:
    row = configs[configs["config_id"] == config_id]
    keys = ("model", "reward", "group_size", "update_epochs", "regime", "rho_planned")
    return {} if row.empty else {k: row.iloc[0].get(k) for k in keys}


def _finding(by: str, value: str, config_id: str, knobs: dict, target: str, score: float,
             se: float, read_at: str, level: float, start: dict | None,
             over_pick: tuple[float, float] = (math.nan, math.nan),
             tied: list[str] | None = None, n_configs: int = 0) -> dict:
    gain = gain_se = math.nan
    lo, hi = normal_interval(score, se, level)
    if start is not None:
        gain, gain_se = score - start["accuracy"], math.hypot(se, start["se"])
    return {"by": by, "value": value, "config_id": config_id,
            **{k: knobs.get(k) for k in ("model", "reward", "group_size", "update_epochs")},
            "target": target, "score": score, "se": se, "lo": lo, "hi": hi,
            "gain": gain, "gain_se": gain_se, "read_at": read_at,
            "over_pick": over_pick[0], "over_pick_se": over_pick[1],
            "tied": list(tied or []), "n_configs": n_configs}


def _reads(candidates: list[dict], level: float, key: str = "config_id") -> list[tuple]:
    """(config, score, interval's lo) of each candidate: what :func:`ties` reads."""
    return [(c[key], c["score"], normal_interval(c["score"], c["se"], level)[0])
            for c in candidates]


def pick_profile(pick: dict, cells: pd.DataFrame, configs: pd.DataFrame, *,
                 starts: dict[str, dict], level: float, fallback: dict | None = None) -> dict:
    """The pick as the answer states it: its knobs and regime, its update fraction rho
    (planned, and as its cells spent it), the FLOP split its cells charged, and (a flat
    sweep's, whose selection may read a prediction) its observed score's SE and gain.
    ``fallback``: knobs to use where ``configs`` has none (a ladder's candidate)."""
    mine = cells[cells["cell_id"].isin(pick["cell_ids"])]
    total = float(mine["total_flops"].fillna(0).sum()) if "total_flops" in mine else 0.0
    shares = {p: (float(mine[f"flops_{p}"].fillna(0).sum()) / total
                  if total and f"flops_{p}" in mine else math.nan) for p in CHARGED_PHASES}
    realized = (float(mine["rho_realized"].mean()) if "rho_realized" in mine
                and mine["rho_realized"].notna().any() else math.nan)
    knobs = {k: v for k, v in _knobs(configs, pick["config_id"]).items() if v is not None}
    out = (fallback or {}) | pick | knobs | {"shares": shares, "rho_realized": realized,
                          "regime": pick.get("regime") or knobs.get("regime")}
    row = configs[configs["config_id"] == pick["config_id"]]
    if "se" not in pick and len(row):  # a flat pick: its observed pilot mean
        mean, se = float(row["mean"].iloc[0]), float(row["se"].iloc[0])
        out |= {"observed": mean, "observed_lo": float(row["lo"].iloc[0]),
                "observed_hi": float(row["hi"].iloc[0]), "se": se}
        start = starts.get(pick["config_id"])
        if start is not None:
            gain, gain_se = mean - start["accuracy"], math.hypot(se, start["se"])
            out |= {"start": start["accuracy"], "gain": gain, "gain_se": gain_se,
                    "gain_text": gain_text(gain, gain_se, z_of_level(level))}
    return out


def ladder_answer(ladder: dict, configs: pd.DataFrame, cells: pd.DataFrame,
                  evals: pd.DataFrame, targets: list[str], *, level: float,
                  starts: dict[str, dict]) -> tuple[dict | None, pd.DataFrame]:
    """A ladder's runner-up (with the difference from the pick) and its findings.

    Args:
        ladder: ``ladder.json``.
        configs: the first rung's ranked configs on the primary target (knobs, regime).
        cells, evals: every rung's cells and checkpoint evals.
        targets: the evaluated targets, the primary (selection's) first.
        starts: each config's warm start on the primary target
            (:func:`race.analysis.select.warm_starts`).

    Returns:
        (runner_up or None, findings: one row per (by, value), :data:`FINDING_COLUMNS`).
    """
    z = z_of_level(level)
    ranking = [_knobs(configs, c["config_id"]) | c for c in
               ladder_selection(ladder, configs, k=10 ** 6, level=level, starts=starts)]
    primary, rows = targets[0], []
    for by, key in (("size", "model"), ("reward", "reward")):
        for value in sorted({c[key] for c in ranking}):
            group = [c for c in ranking if c[key] == value]
            best = group[0]
            rows.append(_finding(by, value, best["config_id"], best, primary, best["score"],
                                 best["se"], best["basis_used"].replace("observed at ", ""),
                                 level, starts.get(best["config_id"]),
                                 tied=ties(best["config_id"], _reads(group, level)),
                                 n_configs=len(group)))
    for target in targets:
        best = (ranking[0] | {"over_pick": (0.0, 0.0), "reads": _reads(ranking, level)}
                if target == primary else
                _best_on(ladder, cells, evals, target, ranking[0]["config_id"], level))
        if best is None:
            continue
        start = (starts if target == primary else
                 warm_starts(evals, cells, target=target)).get(best["config_id"])
        rows.append(_finding("target", target, best["config_id"], best, target,
                             best["score"], best["se"],
                             best.get("read_at") or best["basis_used"].replace(
                                 "observed at ", ""), level, start,
                             over_pick=best["over_pick"],
                             tied=ties(best["config_id"], best["reads"]),
                             n_configs=len(best["reads"])))
    for rung in ladder["rungs"]:
        clean = [c for c in rung["candidates"] if not c.get("guard")]
        if not clean:
            continue
        best = max(clean, key=lambda c: (c["score"], c["config"]))
        rows.append(_finding("budget", f"{fmt_fraction(rung['fraction'])} "
                             f"({fmt_flops(rung['budget_flops'])})", best["config"], best,
                             primary, best["score"], best["se"],
                             f"rung {rung['rung']} ({len(rung['candidates'])} configs)",
                             level, starts.get(best["config"]),
                             tied=ties(best["config"], _reads(clean, level, "config")),
                             n_configs=len(clean)))
    return _ladder_runner_up(ladder, ranking, z), pd.DataFrame(rows, columns=FINDING_COLUMNS)


def _best_on(ladder: dict, cells: pd.DataFrame, evals: pd.DataFrame, target: str,
             pick: str, level: float) -> dict | None:
    """The best config on a reported target, at the highest rung that scored it (seeds
    averaged, binomial SE pooled): the other targets are scored at the last rung. With
    ``over_pick``: its lead over ``pick`` there, and that lead's SE (NaN where the pick
    was not scored there); ``reads``: every config read there (:func:`ties`)."""
    points = ladder_points(ladder, cells, evals, target=target)
    points = points[points["rung"] > 0]
    if points.empty:
        return None
    top = int(points["rung"].max())
    ends = points[points["rung"] == top].sort_values("flops").groupby("lineage").tail(1)
    guarded = {c["config"] for r in ladder["rungs"] for c in r["candidates"] if c.get("guard")}
    scored = []
    for config, group in ends.groupby("config_id"):
        score = float(group["accuracy"].mean())
        se = pooled_se(group["accuracy"].tolist(), group["n"].tolist())
        scored.append((config in guarded, -score, config, score, se, group.iloc[0]))
    _, _, config, score, se, row = min(scored)
    fraction = next(r["fraction"] for r in ladder["rungs"] if r["rung"] == top)
    theirs = next(((s, e) for _, _, c, s, e, _ in scored if c == pick), None)
    over = ((score - theirs[0], math.hypot(se, theirs[1])) if theirs and config != pick
            else (0.0, 0.0) if theirs else (math.nan, math.nan))
    return {"config_id": config, "model": row["model"], "reward": row["reward"],
            "group_size": row["group_size"], "update_epochs": row["update_epochs"],
            "score": score, "se": se, "read_at": f"rung {top} ({fmt_fraction(fraction)})",
            "over_pick": over,
            "reads": [(c, s, normal_interval(s, e, level)[0]) for _, _, c, s, e, _ in scored]}


def _ladder_runner_up(ladder: dict, ranking: list[dict], z: float) -> dict | None:
    """The second of the final ranking, and the pick's lead over it at the highest rung
    both reached (where the ladder compared them)."""
    if len(ranking) < 2:
        return None
    pick, second = ranking[0], ranking[1]
    rung = min(pick["rung"], second["rung"])
    at = {c["config"]: c for c in ladder["rungs"][rung - 1]["candidates"]}
    a, b = at.get(pick["config_id"]), at.get(second["config_id"])
    if a is None or b is None:
        return None
    where = f"rung {rung} ({fmt_fraction(ladder['rungs'][rung - 1]['fraction'])})"
    return second | difference(a["score"], a["se"], b["score"], b["se"], z, where)


def difference(score: float, se: float, other: float, other_se: float, z: float,
               where: str) -> dict:
    """The pick's lead over another config, with its normal interval and a verdict."""
    diff, diff_se = score - other, math.hypot(se, other_se)
    lo, hi = diff - z * diff_se, diff + z * diff_se
    return {"diff": diff, "diff_se": diff_se, "diff_lo": lo, "diff_hi": hi,
            "clear": bool(lo > 0), "compared_at": where}


def flat_answer(ranked: dict, selected: list[dict], targets: list[str], *, level: float,
                starts: dict[str, dict], evals: pd.DataFrame, cells: pd.DataFrame
                ) -> tuple[dict | None, pd.DataFrame]:
    """A flat sweep's runner-up and findings, read from each target's ranked configs
    (observed pilot means, bootstrap intervals; a target not in ``ranked``, never scored
    past the warm start, has no row); one budget, so no budget rows."""
    z, primary = z_of_level(level), targets[0]
    configs = ranked[primary][0]
    rows = []
    for by, key in (("size", "model"), ("reward", "reward")):
        for value, group in configs.groupby(key, sort=True):
            best = group.iloc[0]
            rows.append(_finding(by, value, best["config_id"], best, primary, best["mean"],
                                 best["se"], "pilot end", level,
                                 starts.get(best["config_id"]),
                                 tied=ties(best["config_id"], _frame_reads(group)),
                                 n_configs=len(group)))
    pick = configs.iloc[0]["config_id"]  # the primary target's row
    for target in (t for t in targets if t in ranked):  # a target read past warm starts
        best = ranked[target][0].iloc[0]
        start = (starts if target == primary else
                 warm_starts(evals, cells, target=target)).get(best["config_id"])
        theirs = ranked[target][0][ranked[target][0]["config_id"] == pick]
        over = ((best["mean"] - theirs["mean"].iloc[0],
                 math.hypot(best["se"], theirs["se"].iloc[0])) if len(theirs)
                else (math.nan, math.nan))
        rows.append(_finding("target", target, best["config_id"], best, target,
                             best["mean"], best["se"], "pilot end", level, start,
                             over_pick=over,
                             tied=ties(best["config_id"], _frame_reads(ranked[target][0])),
                             n_configs=len(ranked[target][0])))
    runner = None
    if selected and len(configs) > 1:
        pick = configs[configs["config_id"] == selected[0]["config_id"]].iloc[0]
        other = configs[configs["config_id"] != pick["config_id"]].iloc[0]
        runner = ({k: other[k] for k in ("config_id", "model", "reward", "group_size",
                                         "update_epochs", "se", "lo", "hi")}
                  | {"score": other["mean"], "basis_used": "observed at the pilot's end"}
                  | difference(pick["mean"], pick["se"], other["mean"], other["se"], z,
                               "the pilot's end"))
    return runner, pd.DataFrame(rows, columns=FINDING_COLUMNS)


def _frame_reads(configs: pd.DataFrame) -> list[tuple]:
    """(config, mean, lo) of ranked configs: what :func:`ties` reads."""
    return list(zip(configs["config_id"], configs["mean"], configs["lo"].fillna(0.0)))


def full_run(buys: pd.DataFrame, pick: dict, cells: pd.DataFrame) -> dict:
    """What the pick costs at the full budget: its size's row of the budget's table
    (:func:`race.analysis.size_buys.budget_buys`: steps, completions, tokens, split), and
    ``flops_per_s``: the charged FLOP/s the size's fresh pilot cells trained at
    (:func:`race.analysis.spend.training_rate`, as ``race validate`` reads it; a
    continued rung's FLOPs accumulate along its lineage), on ``device``."""
    row = buys[buys["model"] == pick["model"]]
    out = {} if row.empty else row.iloc[0].to_dict()
    mine = cells[(cells["model"] == pick["model"]) & (cells["status"] == "ok")]
    if "continues" in mine:
        mine = mine[~mine["continues"].fillna("").astype(bool)]
    walls = {p: float(mine[f"wall_s_{p}"].fillna(0).sum()) for p in CHARGED_PHASES
             if f"wall_s_{p}" in mine}
    flops = float(mine["total_flops"].fillna(0).sum()) if "total_flops" in mine else 0.0
    out["flops_per_s"] = training_rate(flops, walls)
    device = mine["device"].dropna() if "device" in mine else pd.Series(dtype=str)
    out["device"] = str(device.iloc[0]) if len(device) else ""
    return out


def verdict(runner: dict, level: float, ranks: bool = True) -> str:
    """``+0.030 [-0.06, 0.12]: not clear at 90%``; where the pilots cannot rank the
    configs reliably (``ranks`` False: :mod:`race.analysis.reliability`), an interval
    clear of 0 is not called clear: the ranking it comes from is not reliable."""
    word = ("clear" if runner["clear"] and ranks else
            "apart on these reads, but the ranking is unreliable" if runner["clear"]
            else "not clear")
    return (f"{runner['diff']:+.3f} [{runner['diff_lo']:+.2f}, {runner['diff_hi']:+.2f}] at "
            f"{runner['compared_at']}: {word} at {level:.0%}")



def scored_problems(evals: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """The problems each target was scored on past the warm start: target -> (fewest,
    most) over every checkpoint > 0 of every ok cell (``n``: the problems an eval row
    scored). A target scored only at warm starts, or by rows that kept no per-problem
    scores, is left out."""
    if not len(evals) or "n" not in evals:
        return {}
    past = ranked_reads(evals)
    past = past[past["n"] > 0]
    return {str(t): (int(g["n"].min()), int(g["n"].max()))
            for t, g in past.groupby("target", sort=False)}


def problems_text(fewest: int, most: int | None = None) -> str:
    """``20``, or ``18-20`` where reads scored different numbers of problems."""
    fewest, most = int(fewest), int(fewest if most is None else most)
    return str(fewest) if most == fewest else f"{fewest}-{most}"


def _tied(row) -> bool:
    return isinstance(row.get("tied"), list) and bool(row["tied"])


def leader_text(row) -> str:
    """A findings row's leader: its config, or ``tie of a, b (no winner)``."""
    return (f"tie of {', '.join(row['tied'])} (no winner)" if _tied(row)
            else str(row["config_id"]))


def best_by_target(findings: pd.DataFrame | None, targets: list[str],
                   problems: dict[str, tuple[int, int]], level: float = 0.9) -> dict:
    """The findings' target rows (the by-condition table's) in one line: the best config
    on each target, read where the table reads it, and whether the targets agree. Point
    leaders that differ are not yet a finding: the answer differs between targets only
    where another target's leader beats the primary target's leader on it with a ``level``
    interval excluding 0 (unpaired, so conservative); otherwise the line says the leaders
    differ within their intervals. ``agree``: the point leaders are one config, every
    target compared scored at least two configs past their warm starts and no target's
    lead is a tie (:func:`ties`); else the line says which targets cannot be compared.

    Returns:
        {<target>: best config_id or None (not ranked: never scored past a warm start),
        ..., "best": that mapping, "agree", "message"}.
    """
    rows = (findings[findings["by"] == "target"] if findings is not None and len(findings)
            else pd.DataFrame(columns=FINDING_COLUMNS))
    best = {t: None for t in targets} | {str(r["value"]): (None if _tied(r) else
                                                           str(r["config_id"]))
                                         for _, r in rows.iterrows()}
    agree = len(set(rows["config_id"])) <= 1
    parts = ", ".join(
        f"{r['value']} -> {leader_text(r)} ({r['score']:.3f} at {r['read_at']}"
        + (f", n={problems_text(*problems[r['value']])}" if r["value"] in problems else "")
        + ")" for _, r in rows.iterrows())
    z, pick = z_of_level(level), (rows["config_id"].iloc[0] if len(rows) else None)
    leads = [f"on {r['value']} {r['config_id']} leads {rows['value'].iloc[0]}'s "
             f"{pick} by {r['over_pick']:+.3f} [{r['over_pick'] - z * r['over_pick_se']:+.3f}, "
             f"{r['over_pick'] + z * r['over_pick_se']:+.3f}]"
             for _, r in rows.iloc[1:].iterrows()
             if r["config_id"] != pick and pd.notna(r.get("over_pick"))]
    clear = any(r["config_id"] != pick and r["over_pick"] - z * r["over_pick_se"] > 0
                for _, r in rows.iloc[1:].iterrows() if pd.notna(r.get("over_pick")))
    few = [str(r["value"]) for _, r in rows.iterrows()
           if pd.notna(r.get("n_configs")) and int(r["n_configs"]) < 2]
    tied = [f"{r['value']} ({', '.join(r['tied'])} at {r['score']:.3f})"
            for _, r in rows.iterrows() if _tied(r)]
    agree = agree and not few and not tied
    if len(rows) and (few or tied):
        message = "the targets cannot be compared: " + "; ".join(
            ([f"only one config was scored past its warm start on {', '.join(few)}"]
             if few else [])
            + ([f"the leaders tie on {', '.join(tied)}"] if tied else [])) + f" ({parts})"
    elif not len(rows):
        message = "no target has a ranked config"
    elif agree:
        message = f"the best allocation agrees across targets: {parts}"
    elif clear:
        message = (f"the best allocation differs between targets: {parts}; "
                   f"{', '.join(leads)} ({level:.0%} interval)")
    else:
        message = (f"the targets' point leaders differ, but within their intervals: "
                   f"{parts}; " + (f"{', '.join(leads)} ({level:.0%} interval, holding 0)"
                                   if leads else f"{pick} was not scored on the others"))
    unread = [t for t in targets if t not in set(rows["value"])]
    if unread and len(rows):
        message += (f"; not ranked: {', '.join(unread)} (no config was scored on it past "
                    f"its warm start)")
    return {**best, "best": best, "agree": agree, "message": message}
