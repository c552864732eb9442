"""Leaderboard, compute card, plots and validation choice of one sweep folder (``race report``).

Reads with ``race.store.io``, ranks and fits with the pure ``race.analysis.aggregate``, draws with
``race.report.plots`` and writes every file through ``race.store.io`` (atomic).

Files written into the sweep folder (docs/design.md, results contract): ``leaderboard.md`` /
``.csv``, ``compute_card.md`` / ``.tex``, ``frontier.png``, ``curves.png``, ``phases.png``,
``selection.json``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from race.analysis import aggregate, load
from race.core.fmt import CHARGED_PHASES, cell_text, fmt_flops
from race.core.fmt import acc as _acc
from race.core.fmt import int_text as _int
from race.core.fmt import interval as _interval
from race.core.fmt import label as _label
from race.core.fmt import md_table as _md_table
from race.core.fmt import share as _share
from race.core.ladder import binomial_se
from race.errors import UsageError
from race.report import plots
from race.report.card import compute_card, cost_shares
from race.store import io as results

VALIDATION_HEADING = "## Validation: predicted vs realized"


def _fit_columns(fits: pd.DataFrame) -> pd.DataFrame:
    """Per config: the seeds' mean prediction/lo/hi/R^2 and their fit methods."""
    columns = ["config_id", "prediction", "prediction_lo", "prediction_hi", "fit_method",
               "fit_r2", "predict_at", "fit_reason"]
    if fits.empty:
        return pd.DataFrame(columns=columns)

    def methods(series: pd.Series) -> str:
        counts = series.value_counts()
        if len(counts) == 1:
            return str(counts.index[0])
        return ", ".join(f"{m} x{n}" for m, n in sorted(counts.items()))

    def reasons(series: pd.Series) -> str:
        return "; ".join(sorted({str(r) for r in series if isinstance(r, str) and r}))

    return fits.groupby("config_id", as_index=False).agg(
        prediction=("prediction", "mean"), prediction_lo=("lo", "mean"),
        prediction_hi=("hi", "mean"), fit_method=("method", methods), fit_r2=("r2", "mean"),
        predict_at=("predict_at", "mean"), fit_reason=("reason", reasons))[columns]


def _configs_markdown(configs: pd.DataFrame, full_flops: float, level: float) -> str:
    header = ["rank", "config", "model", "reward", "G", "mu", "regime", "seeds",
              f"mean [{level:.0%} CI]", "SE", "CI over",
              f"predicted at {fmt_flops(full_flops)} FLOPs [lo, hi]", "fit"]
    rows, notes = [], []
    for _, row in configs.iterrows():
        method = row.get("fit_method")
        method = method if isinstance(method, str) else "-"
        fit = (f"sigmoid (R^2 {_acc(row['fit_r2'], 2)})" if method == "sigmoid" else method)
        if method != "sigmoid" and isinstance(row.get("fit_reason"), str) and row["fit_reason"]:
            fit += " *"
            notes.append(f"- `{row['config_id']}` ({_label(row)}): {row['fit_reason']}")
        rows.append([row["rank"], f"`{row['config_id']}`", row["model"], row["reward"],
                     _int(row.get("group_size")), _int(row.get("update_epochs")),
                     row["regime"], _int(row["n_seeds"]),
                     _interval(row["mean"], row["lo"], row["hi"]), _acc(row.get("se")),
                     row["interval_source"],
                     _interval(row.get("prediction"), row.get("prediction_lo"),
                               row.get("prediction_hi")), fit])
    text = _md_table(header, rows, "rlllrrlrrrlrl")
    if notes:
        text += ("\n\n\\* fallback (\"last\"): the prediction is the last observed accuracy "
                 "+- max(spread, 0.05), because\n" + "\n".join(notes))
    return text


def _regimes_markdown(regimes: pd.DataFrame) -> str:
    rows = [[r["rank"], r["model"], r["reward"], r["regime"], _int(r["n_configs"]),
             f"`{r['config_id']}`", _interval(r["mean"], r["lo"], r["hi"])]
            for _, r in regimes.iterrows()]
    return _md_table(["rank", "model", "reward", "regime", "configs", "best config",
                      "best mean [lo, hi]"], rows, "rlllrlr")


def _excluded_markdown(excluded: pd.DataFrame) -> str:
    if excluded.empty:
        return "None: every cell finished ok."
    rows = [[f"`{r['cell_id']}`", r.get("model"), r.get("reward"), _int(r.get("group_size")),
             _int(r.get("update_epochs")), _int(r.get("seed")), r["status"], r.get("error")]
            for _, r in excluded.iterrows()]
    return (_md_table(["cell", "model", "reward", "G", "mu", "seed", "status", "error"],
                      rows, "lllrrrll")
            + "\n\nThese cells are left out of every ranking. `race sweep` with the same "
            "overrides reruns them (ok cells are skipped).")


def _leaderboard_markdown(name: str, ranked: dict, primary: str, ok: pd.DataFrame,
                          excluded: pd.DataFrame, by_target: dict, level: float,
                          ladder: bool = False) -> str:
    full = float(ok["full_budget_flops"].iloc[0])
    pilot = float(ok["budget_flops"].max())
    n_missing = int((excluded["status"] == "missing").sum()) if len(excluded) else 0
    where = ("The tables below rank the ladder's first rung, where every config ran; the "
             "ladder section after them shows every rung and what was selected. "
             if ladder else "")
    parts = [
        f"# Leaderboard: {name}",
        f"{where}Each pilot spends up to {fmt_flops(pilot)} FLOPs; a full run is {fmt_flops(full)} "
        f"FLOPs. Cells: {len(ok)} ok, {len(excluded) - n_missing} failed, {n_missing} "
        f"missing. Intervals: {level:.0%} percentile bootstrap of the final accuracy over "
        "seeds (over prompts when a config has one seed). Predicted: the ScaleRL sigmoid "
        "fitted to each pilot's checkpoint curve, extrapolated to the full budget (seeds "
        "averaged). A pilot ranking is evidence, not a guarantee: `race validate` checks it.",
    ]
    for target, (configs, regimes) in ranked.items():
        tag = " (primary)" if target == primary else ""
        parts += [f"## Target: {target}{tag}", "### Allocation configs (seeds pooled)",
                  _configs_markdown(configs, full, level),
                  "### Regimes (best config of each model / reward / regime)",
                  _regimes_markdown(regimes)]
    parts += ["## Failed and missing cells", _excluded_markdown(excluded),
              "## Best allocation by target", f"**{by_target['message'][0].upper()}"
              f"{by_target['message'][1:]}.**"]
    return "\n\n".join(parts) + "\n"


# ------------------------------------------------------------------ figures


def _ladder_markdown(ladder: dict, target: str, selected: list[dict],
                     starts: dict[str, dict] | None = None) -> str:
    """The leaderboard's ladder section: every rung's configs, scores and decisions, each
    score beside its size's warm start."""
    starts = starts or {}
    text = ["", "## Ladder (successive halving)",
            f"Every config ran to the first rung; after each rung the configs with the "
            f"highest lower confidence bound of their `{target}` score at the next rung "
            f"(the trend of their last checkpoints carried one rung, minus "
            f"{ladder.get('z', 1.0):g} standard errors) continued from their checkpoints, "
            f"keeping the best 1/{ladder.get('reduction', 4)} and at least one config per "
            f"policy size; a config whose guard fired is never promoted. Pilot compute: "
            f"{ladder.get('cost_share', float('nan')):.1%} of one full run as planned."]
    if starts:
        text.append(f"Warm start on `{target}` (each size's checkpoint 0, before any update; "
                    "the \"vs start\" column is a score minus its size's): " + ", ".join(
                        f"{model} {s['accuracy']:.3f} (SE {s['se']:.3f}, n={s['n']})"
                        for model, s in sorted(starts.items())) + ".")
    for rung in ladder["rungs"]:
        last = rung is ladder["rungs"][-1]
        rows = []
        for c in rung["candidates"]:
            decision = ("-" if last and not c.get("guard") else
                        "promoted" if c.get("promoted") else c.get("why", "-"))
            rows.append([f"`{c['config']}`", f"{c['model']}/{c['reward']} G{c['group_size']} "
                         f"mu{c['update_epochs']}", len(c["cell_ids"]), _acc(c["score"]),
                         _acc(c["se"]), "-" if last else _acc(c["predicted"]),
                         "-" if last else _acc(c["lcb"]),
                         (f"{c['score'] - starts[c['model']]['accuracy']:+.3f}"
                          if c["model"] in starts else "-"),
                         c.get("why", "") if c.get("promoted") else decision,
                         c.get("guard") or ""])
        text += [f"### Rung {rung['rung']}: {aggregate.fmt_fraction(rung['fraction'])} "
                 f"({fmt_flops(rung['budget_flops'])} FLOPs per cell), "
                 f"{len(rung['candidates'])} config(s)",
                 _md_table(["config", "knobs", "seeds", f"{target}", "SE",
                            "predicted next rung", "LCB", "vs start", "decision", "guard"],
                           rows, "llrrrrrrll")]
    if selected:
        pick = selected[0]
        text.append(f"**Pick: `{pick['config_id']}` ({pick['model']}/{pick['reward']}), "
                    f"{pick['score']:.3f} [{pick['lo']:.3f}, {pick['hi']:.3f}] "
                    f"{pick['basis_used']}"
                    + (f"; {pick['gain_text']}" if "gain_text" in pick else "") + ".**")
    return "\n\n".join(text) + "\n"


def _guard_thresholds(sweep_dir: Path):
    """The guard thresholds the sweep ran with (``sweep.json``), else the defaults."""
    from race.core.guards import DEFAULT, GuardThresholds

    path = sweep_dir / "sweep.json"
    record = results.read_result(path, results.SWEEP_JSON_FIX) if path.is_file() else {}
    given = record.get("config", {}).get("selection", {}).get("guards")
    return GuardThresholds(**given) if given else DEFAULT


def ladder_guards(ladder: dict) -> list[dict]:
    """Every guard the ladder saw fire, rung by rung (a continued cell's curve is checked
    at each rung it reaches, so a failure after the first rung shows only here)."""
    return [{"rung": rung["rung"], "fraction": rung["fraction"], "config_id": c["config"],
             "cell_ids": c["cell_ids"], "evidence": c["guard"]}
            for rung in ladder["rungs"] for c in rung["candidates"] if c.get("guard")]


def _guards_markdown(checks: pd.DataFrame | None, target: str, n_cells: int,
                     ladder: dict | None = None) -> str:
    """The leaderboard's guard section: every guard that fired, with its evidence (with a
    ladder, at every rung, read from it: ``checks`` is then not needed)."""
    text = ["", "## Guards against late failure",
            f"Checked on `{target}` for {n_cells} ok cell(s)"
            + (" and at every later rung of the ladder" if ladder is not None else "")
            + ": drawdown from the running best, proxy reward rising while verifier accuracy "
            "falls (reward hacking), entropy collapse, truncation at the cap "
            "(`race/guards.py`). A config whose guard fired is neither extrapolated nor "
            "preferred for validation" + (" nor promoted." if ladder is not None else ".")]
    if ladder is not None:
        rows = [[f"{g['rung']} ({aggregate.fmt_fraction(g['fraction'])})",
                 ", ".join(f"`{c}`" for c in g["cell_ids"]), f"`{g['config_id']}`",
                 g["evidence"]] for g in ladder_guards(ladder)]
        header = ["rung", "cell(s)", "config", "guard: evidence"]
    else:
        rows = [[f"`{r.cell_id}`", f"`{r.config_id}`", r.guard, r.evidence]
                for r in checks[checks["fired"]].itertuples()]
        header = ["cell", "config", "guard", "evidence"]
    text.append(_md_table(header, rows, "l" * len(header)) if rows else "No guard fired.")
    return "\n\n".join(text) + "\n"


def _no_ok_cells(sweep_dir: Path, cells: pd.DataFrame) -> UsageError:
    status = cells["status"] if len(cells) else pd.Series(dtype=str)
    missing = int((status == "missing").sum())
    failed = len(status) - missing - int((status == "ok").sum())
    return UsageError(f"{sweep_dir}: no ok cells to rank ({failed} failed, {missing} missing); "
                      "rerun `race sweep` with the same overrides to resume them, or check the "
                      "errors in pilots.csv")


def write_failures(sweep_dir: Path | str, cells: pd.DataFrame) -> Path:
    """``leaderboard.md`` of a sweep with no ok cell: every cell with its status and
    error (nothing to rank), so that the failures are read where the ranking would be.
    Returns its path."""
    sweep_dir = Path(sweep_dir)
    columns = [c for c in ("cell_id", "model", "reward", "group_size", "update_epochs",
                           "seed", "budget_flops", "status", "error") if c in cells]
    rows = [[f"`{r['cell_id']}`" if c == "cell_id" else
             fmt_flops(r[c]) if c == "budget_flops" and pd.notna(r[c]) else
             str(r[c]).replace("|", "\\|").replace("\n", " ") for c in columns]
            for _, r in cells.iterrows()]
    status = cells["status"] if len(cells) else pd.Series(dtype=str)
    text = [f"# RACE leaderboard: {sweep_dir.resolve().name}",
            f"No ok cell to rank: {int((status != 'ok').sum())} of {len(cells)} cell(s) did "
            f"not finish ok ({int((status == 'failed').sum())} failed, "
            f"{int((status == 'missing').sum())} missing). Fix what the errors say, then "
            f"rerun the same `race sweep` command: finished cells are kept, the others run "
            f"again.",
            _md_table(columns, rows, "l" * len(columns)) if rows else "No cells."]
    path = sweep_dir / "leaderboard.md"
    results.write_text(path, "\n\n".join(text) + "\n")
    return path


def _summary(name: str, sweep_dir: Path, cells: pd.DataFrame, ok: pd.DataFrame,
             totals: dict, primary: str, configs: pd.DataFrame, regimes: pd.DataFrame,
             by_target: dict, selected: list[dict], basis: str, level: float,
             paths: dict, ladder: dict | None = None) -> str:
    charged = totals["total"]
    n_missing = int((cells["status"] == "missing").sum())
    split = ", ".join(f"{p} {_share(totals[p], charged)}" for p in CHARGED_PHASES)
    full = float(ok["full_budget_flops"].iloc[0])
    lines = [f"RACE report: {name}",
             f"cells: {len(ok)} ok, {len(cells) - len(ok) - n_missing} failed, {n_missing} "
             f"missing; pilot FLOPs {fmt_flops(charged)} charged ({split}) + "
             f"{fmt_flops(totals['eval'])} eval + {fmt_flops(totals['redone'])} redone = "
             f"{fmt_flops(totals['used'])} used; pilot_cost_share "
             f"{cost_shares(totals, full)['charged']:.3f} of one full run "
             f"({cost_shares(totals, full)['with_eval']:.3f} with eval)",
             f"top configs on {primary}: mean [{level:.0%} CI] -> predicted at "
             f"{fmt_flops(full)} FLOPs"]
    top = configs.head(5)
    id_width = max(len(str(c)) for c in top["config_id"])
    label_width = max(len(_label(c)) for _, c in top.iterrows())
    for _, c in top.iterrows():
        predicted = _interval(c.get("prediction"), c.get("prediction_lo"),
                              c.get("prediction_hi"))
        lines.append(f"  {c['rank']:>2}. {c['config_id']:<{id_width}}  "
                     f"{_label(c):<{label_width}}  {_interval(c['mean'], c['lo'], c['hi'])}"
                     f" -> {predicted} ({c.get('fit_method', '-')})")
    lines.append(f"regimes on {primary}:")
    shown = regimes.head(5)
    names = [f"{r['model']}/{r['reward']}/{r['regime']}" for _, r in shown.iterrows()]
    width = max(map(len, names), default=0)
    for name_, (_, r) in zip(names, shown.iterrows()):
        lines.append(f"  {r['rank']:>2}. {name_:<{width}}  "
                     f"{_interval(r['mean'], r['lo'], r['hi'])}")
    lines.append(by_target["message"])
    if ladder is not None:
        lines.append("ladder: " + " -> ".join(
            f"{len(r['candidates'])} at {aggregate.fmt_fraction(r['fraction'])}"
            for r in ladder["rungs"]) + " config(s)")
    lines.append(f"selected for validation (k={len(selected)}, basis {basis}):")
    for s in selected:
        why = {"distinct regime": "best of a distinct regime",
               "guarded": f"a guard fired ({s.get('guard')}), chosen for lack of others",
               "free slot": "fills a free slot (its regime already chosen)"
               }.get(s.get("why"), s.get("why"))
        lines.append(f"  {s['config_id']} ({s['model']}/{s['reward']}, {s['regime']}): "
                     f"{s['basis_used']} {_interval(s['score'], s['lo'], s['hi'])}; {why}"
                     + (f"; {s['gain_text']}" if "gain_text" in s else ""))
    lines.append(f"wrote {', '.join(p.name for p in paths.values())} in {sweep_dir}")
    return "\n".join(lines)


def _from_other_trainers(ok: pd.DataFrame) -> bool:
    """Whether every ok cell is a run another trainer made (race.integrations: TRL)."""
    return "backend" in ok and bool((ok["backend"] == "trl").all())


def _card_only(sweep_dir: Path, cells: pd.DataFrame, ok: pd.DataFrame) -> dict:
    """The compute card of runs that carry RACE's ledger but no RACE held-out evals (TRL
    runs tracked by race.integrations.trl): ranking, frontier and selection need those."""
    name = sweep_dir.resolve().name
    paths = {"compute_card_md": sweep_dir / "compute_card.md",
             "compute_card_tex": sweep_dir / "compute_card.tex"}
    card, latex, totals = compute_card(name, aggregate.increments(cells), ok,
                                       ok["cell_id"].tolist(), [])
    results.write_text(paths["compute_card_md"], card)
    results.write_text(paths["compute_card_tex"], latex)
    charged = totals["total"]
    split = ", ".join(f"{p} {_share(totals[p], charged)}" for p in CHARGED_PHASES)
    summary = "\n".join([
        f"RACE report: {name}",
        f"runs: {len(ok)} ok of {len(cells)}; FLOPs {fmt_flops(charged)} charged ({split}) + "
        f"{fmt_flops(totals['eval'])} eval",
        "no RACE held-out evals (runs of another trainer): the compute card only; the "
        "leaderboard, frontier and selection need pilots' checkpoint evals",
        f"wrote {', '.join(p.name for p in paths.values())} in {sweep_dir}"])
    return {"paths": paths, "summary": summary, "target": None, "selected": [],
            "totals": totals}


def write_report(sweep_dir: Path | str, *, n_boot: int = 1000, level: float = 0.9,
                 top_k: int = 3, basis: str = "extrapolated") -> dict:
    """Rank a sweep's pilots and write its leaderboard, compute card, plots and selection.

    Args:
        sweep_dir: a sweep folder (``results/<sweep_id>``, holding ``cells/``).
        n_boot: bootstrap resamples of each config's interval.
        level: interval coverage, e.g. 0.9.
        top_k: configs to select for full-budget validation.
        basis: "extrapolated" (sigmoid prediction at the full budget) or "observed"
            (pilot mean) for the selection.

    Returns:
        {"paths": {name: Path of each file written}, "summary": terminal summary (about 20
        lines), "target": the primary target, "selected": the selection, "totals": sweep
        FLOPs by phase (rollout, learning, feedback, eval) and "total" (charged)}.

    Raises:
        ValueError: no ok cell, results that mix tasks or budgets, a corrupt metrics line
            (naming file:line), or a bad argument.
    """
    if basis not in ("extrapolated", "observed"):
        raise UsageError(f"report.basis={basis!r}: unknown; use 'extrapolated' or 'observed'")
    if top_k < 1:
        raise UsageError(f"report.top_k={top_k}: select at least 1 config for validation")
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / "cells").is_dir():
        raise UsageError(f"{sweep_dir}: no cells/ folder; pass a sweep folder "
                         "(results/<sweep_id>) written by `race sweep`")
    every_cell, evals, examples, steps = load.load_results(sweep_dir, with_steps=True)
    if every_cell.empty:
        raise _no_ok_cells(sweep_dir, every_cell)
    aggregate.check_consistent(every_cell)
    ladder = (results.read_result(sweep_dir / "ladder.json", results.SWEEP_JSON_FIX)
              if (sweep_dir / "ladder.json").is_file() else None)
    cells = every_cell
    if ladder is not None:  # rank on the first rung: every config at one budget
        first = set(ladder["rungs"][0]["cells"])
        cells = every_cell[every_cell["cell_id"].isin(first)]
        evals = evals[evals["cell_id"].isin(first)] if len(evals) else evals
        examples = examples[examples["cell_id"].isin(first)] if len(examples) else examples
        steps = steps[steps["cell_id"].isin(first)] if len(steps) else steps
    ok, excluded = aggregate.split_status(cells)
    if ok.empty:
        raise _no_ok_cells(sweep_dir, cells)
    # final_<target>_reward columns also start with final_: keep the evaluated targets.
    evaluated = set(evals["target"]) if "target" in evals else set()
    names = [t for t in aggregate.targets(ok) if t in evaluated]
    if not names and _from_other_trainers(ok):
        return _card_only(sweep_dir, every_cell, ok)
    if not names:
        raise UsageError(f"{sweep_dir}: the ok cells have no checkpoint evals; check "
                         "pilot.eval_targets and the cells' metrics.jsonl")
    # selection reads val (test and ood are only reported); older sweeps ranked on test
    primary = next((t for t in ("val", "test") if t in names), names[0])
    names = [primary, *(t for t in names if t != primary)]  # the primary target first

    ranked, raw, fits_by, fronts = {}, {}, {}, {}
    for target in names:
        configs, regimes = aggregate.rank_regimes(cells, examples, target=target,
                                                  n_boot=n_boot, level=level)
        fits = aggregate.fit_cells(evals, cells, target=target)
        raw[target], fits_by[target] = configs, fits
        ranked[target] = (configs.merge(_fit_columns(fits), on="config_id", how="left"),
                          regimes)
        fronts[target] = aggregate.frontier(evals, cells, target=target)
    by_target = aggregate.best_by_target(raw)
    starts = aggregate.warm_starts(evals, cells, target=primary)
    if ladder is not None:  # the ladder checked every rung's guards as it ran
        basis, checks, guards_fired = "ladder", None, ladder_guards(ladder)
        selected = aggregate.ladder_selection(ladder, raw[primary], k=top_k, level=level,
                                              starts=starts)
    else:
        checks = aggregate.guard_cells(evals, examples, steps, target=primary,
                                       thresholds=_guard_thresholds(sweep_dir))
        fired = checks[checks["fired"]]
        guards_fired = fired.to_dict("records")
        guarded = {cid: "; ".join(f"{g} ({c}: {e})" for g, c, e in
                                  zip(group["guard"], group["cell_id"], group["evidence"]))
                   for cid, group in fired.groupby("config_id")}
        selected = aggregate.select_for_validation(raw[primary], fits_by[primary], k=top_k,
                                                   basis=basis, guarded=guarded)

    primary_configs = ranked[primary][0]
    config_order = {cid: i for i, cid in enumerate(primary_configs["config_id"])}
    order = ok.assign(_o=ok["config_id"].map(config_order)).sort_values(
        ["_o", "seed", "cell_id"], kind="stable")["cell_id"].tolist()
    name = sweep_dir.resolve().name
    paths = {key: sweep_dir / file for key, file in (
        ("leaderboard_md", "leaderboard.md"), ("leaderboard_csv", "leaderboard.csv"),
        ("compute_card_md", "compute_card.md"), ("compute_card_tex", "compute_card.tex"),
        ("frontier_png", "frontier.png"), ("curves_png", "curves.png"),
        ("phases_png", "phases.png"), ("selection_json", "selection.json"))}

    board = pd.concat([c for c, _ in ranked.values()], ignore_index=True)
    results.write_csv(paths["leaderboard_csv"], board)
    results.write_text(paths["leaderboard_md"], _leaderboard_markdown(
        name, ranked, primary, ok, excluded, by_target, level, ladder is not None)
        + (_ladder_markdown(ladder, primary, selected, starts) if ladder is not None else "")
        + _guards_markdown(checks, primary, len(ok), ladder))
    card, latex, totals = compute_card(name, aggregate.increments(every_cell), ok, order,
                                        names, load.model_shapes(sweep_dir))
    results.write_text(paths["compute_card_md"], card)
    results.write_text(paths["compute_card_tex"], latex)
    plots.frontier(paths["frontier_png"], fronts, evals, ok, names, primary, name)
    plots.curves(paths["curves_png"], primary_configs, fits_by[primary], evals, ok, primary,
                 name)
    ranks = dict(zip(primary_configs["config_id"], primary_configs["rank"]))
    plots.phases(paths["phases_png"], cells, order, ranks, name)
    excluded_rows = [{"cell_id": str(r["cell_id"]), "status": str(r["status"]),
                      "error": None if pd.isna(r.get("error")) else str(r.get("error"))}
                     for _, r in excluded.iterrows()]
    results.write_json(paths["selection_json"], {
        "target": primary, "basis": basis, "k": top_k, "selected": selected,
        "by_target": by_target, "excluded": excluded_rows, "warm_starts": starts,
        "guards_fired": guards_fired})

    comparison_path = sweep_dir / "validate" / "comparison.json"
    if comparison_path.is_file():  # a rerun of the report keeps the validation section
        validation_section(sweep_dir, results.read_result(
            comparison_path, "rerun `race validate` on the sweep folder to rewrite it"))

    summary = _summary(name, sweep_dir, every_cell, every_cell[every_cell["status"] == "ok"],
                       totals, primary, primary_configs, ranked[primary][1], by_target,
                       selected, basis, level, paths, ladder)
    return {"paths": paths, "summary": summary, "target": primary, "selected": selected,
            "totals": totals}


def validation_section(sweep_dir: Path | str, comparison: dict) -> str:
    """Render ``aggregate.compare_predictions`` output into leaderboard.md's last section.

    The section "## Validation: predicted vs realized" replaces any earlier one (a rerun
    does not duplicate it) and is always the file's last section.

    Args:
        sweep_dir: the sweep folder holding leaderboard.md (``race report`` writes it).
        comparison: ``compare_predictions``'s dict, optionally with ``target``,
            ``budget_flops`` and ``failed`` (as ``race validate`` adds).

    Returns:
        The section's markdown.
    """
    sweep_dir = Path(sweep_dir)
    board = sweep_dir / "leaderboard.md"
    if not board.is_file():
        raise UsageError(f"{board}: not found; run `race report {sweep_dir}` before adding "
                         "the validation section")
    labels = {}
    selection = sweep_dir / "selection.json"
    if selection.is_file():
        for s in results.read_result(selection, results.REPORT_FIX).get("selected", []):
            labels[s["config_id"]] = f"{s.get('model')}/{s.get('reward')} ({s.get('regime')})"

    target = comparison.get("target")
    budget = comparison.get("budget_flops")
    head = "Pilot predictions checked against full-budget runs"
    if target:
        head += f" on {target}"
    if budget:
        head += f" at {fmt_flops(float(budget))} FLOPs"
    rows = []
    for r in comparison.get("rows", []):
        inside = {True: "yes", False: "no", None: "-"}[r.get("inside")]
        rows.append([f"`{r['config_id']}`", labels.get(r["config_id"], ""),
                     _interval(r["predicted"], r.get("lo"), r.get("hi")),
                     _acc(r["realized"]), inside])
    parts = [VALIDATION_HEADING, head + ".",
             _md_table(["config", "allocation", "predicted [lo, hi]", "realized", "inside?"],
                       rows, "llrrl") if rows else "No selected config has a realized value."]

    def stat(value, digits=3):
        return "n/a" if value is None else f"{value:.{digits}f}"

    note = comparison.get("note") or ""
    if comparison.get("kendall_tau") is None:
        ranks = f"- Kendall tau / Spearman: n/a ({note or 'not computed'})"
    else:
        ranks = (f"- Kendall tau {stat(comparison['kendall_tau'], 2)}, Spearman "
                 f"{stat(comparison['spearman'], 2)} (rank agreement, 1 = same order)")
    coverage = comparison.get("coverage")
    flags = [r.get("inside") for r in comparison.get("rows", []) if r.get("inside") is not None]
    bullets = [
        f"- Configs validated: {comparison.get('n', len(rows))}", ranks,
        f"- Top-1 regret: {stat(comparison.get('top1_regret'))} (accuracy lost by trusting "
        "the pilot's best pick instead of the realized best)",
        "- Coverage: n/a" if coverage is None else
        f"- Coverage: {sum(flags)}/{len(flags)} ({coverage:.0%}) of realized values inside "
        "the predicted interval"]
    if comparison.get("unmatched"):
        bullets.append("- Realized but never predicted: "
                       + ", ".join(f"`{c}`" for c in comparison["unmatched"]))
    for failure in comparison.get("failed", []):
        bullets.append(f"- Failed validation run `{failure.get('cell_id')}`: "
                       f"{cell_text(failure.get('error'))}")
    parts.append("\n".join(bullets))
    section = "\n\n".join(parts) + "\n"

    text = board.read_text()
    at = text.find("\n" + VALIDATION_HEADING)  # a heading at a line start, not in prose
    if at >= 0:
        text = text[:at + 1]
    results.write_text(board, text.rstrip("\n") + "\n\n" + section)
    return section


# ------------------------------------------------------------------ budget axis


def _budget_rows(budget: float, folder: Path, z: float) -> list[dict]:
    """One budget's selected allocation on every target (the selection target: its pick
    from ``selection.json``; the others: the best config of the last rung on them)."""
    selection = results.read_json(folder / "selection.json")
    frame = pd.read_csv(folder / "pilots.csv")
    frame = frame[frame["status"] == "ok"]
    ladder_path = folder / "ladder.json"
    if ladder_path.is_file():
        last = results.read_json(ladder_path)["rungs"][-1]
        options = {c["config"]: (c["cell_ids"], c.get("guard"), last["fraction"])
                   for c in last["candidates"]}
    else:
        options = {cid: (list(group["cell_id"]), None, float(group["budget_flops"].iloc[0])
                         / budget) for cid, group in frame.groupby("config_id")}
    specs = {cid: results.read_json(folder / "cells" / cid / "spec.json")
             for ids, _, _ in options.values() for cid in ids}
    primary = selection["target"]
    rows = []
    for target in aggregate.targets(frame):
        scored = []
        for config, (ids, guard, fraction) in options.items():
            values = frame[frame["cell_id"].isin(ids)][f"final_{target}"].dropna()
            if values.empty:
                continue
            spec = specs[ids[0]]
            n = (max(spec["select_examples"], spec["eval_examples"])
                 if target == spec["select_target"] else spec["eval_examples"])
            p = float(values.mean())
            se = binomial_se(p, n) / math.sqrt(len(values))
            scored.append({"config": config, "score": p, "se": se, "guard": guard,
                           "fraction": fraction, "spec": spec})
        if not scored:
            continue
        if target == primary and selection["selected"]:
            chosen = selection["selected"][0]
            best = next((s for s in scored if s["config"] == chosen["config_id"]), None)
        else:
            best = None
        best = best or min(scored, key=lambda s: (bool(s["guard"]), -s["score"], s["config"]))
        spec = best["spec"]
        rows.append({"budget_flops": budget, "target": target, "selection": target == primary,
                     "config": best["config"], "model": spec["model"],
                     "reward": spec["reward"]["name"], "group_size": spec["group_size"],
                     "update_epochs": spec["update_epochs"], "score": best["score"],
                     "lo": max(0.0, best["score"] - z * best["se"]),
                     "hi": min(1.0, best["score"] + z * best["se"]),
                     "read_at": aggregate.fmt_fraction(best["fraction"]),
                     "guard": best["guard"] or ""})
    return rows


def write_budget_report(parent: Path | str, folders: dict[float, Path], *,
                        level: float = 0.9) -> str:
    """``budgets.md`` and ``budgets.csv`` of a multi-budget sweep: per target, the
    selected allocation at each budget with its interval, and where it changes.

    Args:
        parent: the folder holding one sweep folder per budget.
        folders: budget (FLOPs) -> that budget's sweep folder (with its report written).

    Returns the terminal summary.
    """
    from scipy import stats

    parent = Path(parent)
    z = float(stats.norm.ppf(0.5 + level / 2))
    rows = [r for budget, folder in sorted(folders.items())
            if (folder / "selection.json").is_file()
            for r in _budget_rows(budget, folder, z)]
    frame = pd.DataFrame(rows)
    missing = [f"{b:.3g}" for b, f in folders.items() if not (f / "selection.json").is_file()]
    text = [f"# Best allocation by budget: {parent.name}",
            f"One ladder per budget (its own sweep folder, report and selection); the warm "
            f"start is shared. Per target, the allocation selected at each budget, with a "
            f"{level:.0%} normal interval from its standard error (binomial over the "
            f"problems, pooled over seeds) where it was read (the ladder's last rung). "
            f"Selection reads the first target; the others are reported, each with the "
            f"last rung's best config on it."]
    if missing:
        text.append(f"No selection (no ok cell) at budget {', '.join(missing)}.")
    lines = []
    for target, group in (frame.groupby("target", sort=False) if len(frame) else []):
        table, previous = [], None
        for r in group.itertuples():
            knobs = f"{r.model}/{r.reward} G{r.group_size} mu{r.update_epochs}"
            changed = "-" if previous is None else ("**changes**" if r.config != previous
                                                    else "same")
            previous = r.config
            table.append([fmt_flops(r.budget_flops), f"`{r.config}`", knobs,
                          _interval(r.score, r.lo, r.hi), r.read_at, changed, r.guard])
            lines.append(f"  {target} @ {fmt_flops(r.budget_flops)}: {knobs} "
                         f"{_interval(r.score, r.lo, r.hi)} ({changed})")
        tag = " (selection)" if group["selection"].iloc[0] else " (reported)"
        text += [f"## Target: {target}{tag}",
                 _md_table(["budget", "config", "allocation", f"{target} [{level:.0%}]",
                            "read at", "vs the budget below", "guard"], table, "rllrlll")]
    results.write_text(parent / "budgets.md", "\n\n".join(text) + "\n")
    results.write_csv(parent / "budgets.csv", frame)
    return "\n".join([f"RACE budgets: {parent}", *lines,
                      f"wrote budgets.md, budgets.csv in {parent}"])
