"""The leaderboard's markdown (rankings per target, the ladder's rungs, the guards) and
the report's terminal summary, rendered from a :class:`~race.analysis.sweep_analysis.SweepAnalysis`.
"""

from __future__ import annotations

import re

import pandas as pd

from race.analysis.headline import problems_text
from race.analysis.select import baselines, ladder_guards
from race.analysis.sweep_analysis import SweepAnalysis
from race.core.fmt import CHARGED_PHASES, fmt_flops
from race.core.fmt import acc as _acc
from race.core.fmt import int_text as _int
from race.core.fmt import interval as _interval
from race.core.fmt import label as _label
from race.core.fmt import md_table as _md_table
from race.core.fmt import share as _share
from race.core.rungs import fmt_fraction
from race.report.answer import answer_lines, answer_markdown, ranks
from race.report.buys import buys_markdown
from race.report.card import cost_shares
from race.report.honesty import (
    flat_spend_note,
    interval_text,
    rung_spend_note,
    spend_markdown,
    unlearned_lines,
)
from race.store.pilots import counts_text


def leaderboard_markdown(result: SweepAnalysis) -> str:
    """``leaderboard.md``: the answer first (the pick, its runner-up, its cost at the full
    budget, the best allocation by condition), then the ladder (a ladder's sweep), what
    the budget buys per size, the rankings per target, the response surface, the guards."""
    ladder, primary = result.ladder, result.primary
    parts = [f"# Leaderboard: {result.name}", answer_markdown(result), spend_markdown(result)]
    if ladder is not None:
        parts.append(_ladder_markdown(ladder, primary, result.selected, result.starts,
                                      result.spend, provisional=not ranks(result)))
    parts += [_buys_section(result),
              _leaderboard_markdown(result),
              _surfaces_markdown(result.surfaces, primary, result.level),
              _guards_markdown(result.checks, primary, len(result.ok), ladder,
                               unlearned_lines(result))]
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"


def _buys_section(result: SweepAnalysis) -> str:
    full = float(result.ok["full_budget_flops"].iloc[0])
    body = (buys_markdown(result.buys, full, whose="the pick's")
            if result.buys is not None and len(result.buys)
            else f"Not solved: {result.buys_note or 'no cell spec'}.")
    return f"\n## What the full budget buys, per size\n\n{body}\n"


def summary_text(result: SweepAnalysis, ok: pd.DataFrame, totals: dict, paths: dict) -> str:
    """The terminal summary of a report (``ok``: every rung's ok cells)."""
    return _summary(result.name, result.sweep_dir, result.every_cell, ok, totals,
                    result.primary, result.primary_configs, result.ranked[result.primary][1],
                    result.by_target, result.selected, result.basis, result.level, paths,
                    result.ladder, answer_lines(result), result.no_pick)


def has_fit(configs: pd.DataFrame) -> bool:
    """Whether any config's curve was fitted by a sigmoid (else no prediction to show)."""
    return "fit_method" in configs and bool(
        configs["fit_method"].astype(str).str.contains("sigmoid").any())


_FEW = re.compile(r"(\d+) point\(s\) with FLOPs > 0; a sigmoid fit needs >= 3(; )?")


def no_fit_reason(ranked: dict) -> str:
    """One sentence: why no config of any target has a prediction at the full budget."""
    texts = [str(t) for configs, _ in ranked.values() if "fit_reason" in configs
             for t in configs["fit_reason"].dropna() if t]
    few = [int(m.group(1)) for t in texts for m in _FEW.finditer(t)]
    others = sorted({rest for t in texts if (rest := _FEW.sub("", t).strip("; "))})
    why = ([f"each pilot curve has at most {max(few)} checkpoint(s) past its warm start "
            "and a fit needs 3"] if few else []) + others[:2]
    return ("No column predicts the full budget: no pilot curve could be fitted by the "
            "ScaleRL sigmoid" + (f" ({'; '.join(why)})" if why else "") + ".")


def _configs_markdown(configs: pd.DataFrame, full_flops: float, level: float) -> str:
    fitted = has_fit(configs)
    header = ["rank", "config", "model", "reward", "G", "mu", "LoRA r", "regime", "seeds",
              f"mean [{level:.0%} CI]", "SE", "CI covers",
              *([f"predicted at {fmt_flops(full_flops)} FLOPs [lo, hi]", "fit"] if fitted
                else []), "rho planned / realized"]
    rows, fallbacks = [], {}
    for _, row in configs.iterrows():
        method = row.get("fit_method")
        method = method if isinstance(method, str) else "-"
        fit = (f"sigmoid (R^2 {_acc(row['fit_r2'], 2)})" if method == "sigmoid" else method)
        if method != "sigmoid" and isinstance(row.get("fit_reason"), str) and row["fit_reason"]:
            fit += " *"
            fallbacks.setdefault(row["fit_reason"], []).append(f"`{row['config_id']}`")
        predicted = [_interval(row.get("prediction"), row.get("prediction_lo"),
                               row.get("prediction_hi")), fit] if fitted else []
        rows.append([row["rank"], f"`{row['config_id']}`", row["model"], row["reward"],
                     _int(row.get("group_size")), _int(row.get("update_epochs")),
                     _int(row.get("lora_rank")), row["regime"], _int(row["n_seeds"]),
                     _interval(row["mean"], row["lo"], row["hi"]), _acc(row.get("se")),
                     row.get("covers") or "-", *predicted,
                     f"{_acc(row.get('rho_planned'), 2)} / {_acc(row.get('rho_realized'), 2)}"])
    text = _md_table(header, rows, "rlllrrrlrrrl" + ("rl" if fitted else "") + "r")
    if fitted and fallbacks:  # one line per reason, naming its configs
        text += ("\n\n\\* fallback (\"last\"): the prediction is the last observed accuracy "
                 "+- max(spread, 0.05), because\n" + "\n".join(
                     f"- {reason}: {', '.join(ids)}" for reason, ids in fallbacks.items()))
    return text


def _surfaces_markdown(surfaces: dict, target: str, level: float) -> str:
    """The leaderboard's response-surface section: per (model, reward), the fit of the
    pilot score in rho and what it recommends (:mod:`race.analysis.response`)."""
    text = ["", f"## Response surface in rho (target: {target})",
            f"rho = learning / charged FLOPs (rollout + learning + feedback), as each pilot "
            f"spent it. Per policy model and reward, the cells' final `{target}` scores are "
            f"fitted in rho by a constant, a log-linear and a quadratic model, chosen by "
            f"leave-one-config-out error; rho* is the fit's best rho on the grid's range, "
            f"with a {level:.0%} bootstrap interval over configs. A stable fit recommends "
            f"the high-update regime (rho* above the threshold, the range's midpoint) or "
            f"the low-update one (at or below it); an unstable one (few-rho: under 3 "
            f"levels of rho; constant: the score does not move with rho; edge: rho* on the "
            f"grid's edge; wide: its interval spans both regimes; bootstrap: most "
            f"resamples unfit) falls back to the best pilot cell."]
    if not surfaces:
        text.append(f"No ok cell has a realized rho and a final `{target}` score.")
        return "\n\n".join(text) + "\n"
    rows, notes = [], []
    for (model, reward, _), fit in surfaces.items():
        optimum = ("-" if fit.rho_opt is None else f"{fit.rho_opt:.2f}"
                   + (f" [{fit.interval[0]:.2f}, {fit.interval[1]:.2f}]" if fit.interval
                      else ""))
        rows.append([model, reward, fit.n_configs, fit.n_rho,
                     f"{fit.rho_range[0]:.2f}-{fit.rho_range[1]:.2f}", fit.model, optimum,
                     fit.edge or "-", fit.recommendation()])
        if not fit.stable:
            notes.append(f"- {model}/{reward}: {fit.why()}.")
    text.append(_md_table(["model", "reward", "configs", "rho levels", "rho range", "fit",
                           f"rho* [{level:.0%}]", "edge", "recommendation"], rows,
                          "llrrlllll"))
    if notes:
        text.append("Why a fit is unstable:\n" + "\n".join(notes))
    return "\n\n".join(text) + "\n"


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


def _leaderboard_markdown(result: SweepAnalysis) -> str:
    """The rankings per target (a target no ranked cell was scored on past its warm start
    gets why instead of a table), the failed cells and the best allocation by target."""
    ranked, primary, ok, excluded = result.ranked, result.primary, result.ok, result.excluded
    level, ladder = result.level, result.ladder is not None
    full = float(ok["full_budget_flops"].iloc[0])
    pilot = float(ok["budget_flops"].max())
    where = ("The tables below rank the ladder's first rung, where every config ran. "
             if ladder else "")
    fitted = any(has_fit(configs) for configs, _ in ranked.values())
    predicted = ("Predicted: the ScaleRL sigmoid fitted to each pilot's checkpoint curve, "
                 "extrapolated to the full budget (seeds averaged). " if fitted
                 else no_fit_reason(ranked) + " ")
    parts = [
        "", "## Rankings per target",
        f"{where}Each pilot spends up to {fmt_flops(pilot)} FLOPs; a full run is "
        f"{fmt_flops(full)} FLOPs. Cells: "
        f"{counts_text([*ok['status'], *(excluded['status'] if len(excluded) else [])])}. "
        f"{interval_text(result)} {predicted}n: the problems "
        "each read of a target scored, past the warm start (fewer than asked where the "
        "target holds fewer). A pilot ranking is evidence, not a guarantee: "
        "`race validate` checks it.",
    ]
    if not ladder and (note := flat_spend_note(result.spend)):
        parts.append(note)
    for target in result.targets:
        tag = " (primary)" if target == primary else ""
        span = result.problems.get(target)
        parts.append(f"### Target: {target}{tag}, n="
                     f"{problems_text(*span) if span else 'unknown'} problems per read")
        if target in result.unranked:
            parts.append(f"Not ranked: {result.unranked[target]}.")
            continue
        configs, regimes = ranked[target]
        parts += ["#### Allocation configs (seeds pooled)",
                  _configs_markdown(configs, full, level),
                  "#### Regimes (best config of each model / reward / regime)",
                  _regimes_markdown(regimes)]
    message = result.by_target["message"]
    parts += ["## Failed and missing cells", _excluded_markdown(excluded),
              "## Best allocation by target",
              f"**{message[0].upper()}{message[1:]}.** (The by-condition table's target "
              f"rows, read where they were scored past the warm start.)"]
    return "\n\n".join(parts) + "\n"


def _ladder_markdown(ladder: dict, target: str, selected: list[dict],
                     starts: dict[str, dict] | None = None, spend: dict | None = None,
                     provisional: bool = False) -> str:
    """The leaderboard's ladder section: every rung's configs, scores, charged FLOPs
    spent and decisions, each score beside its config's warm start (``spend``:
    :func:`race.analysis.spend.pilot_spend`'s, whose rung spends say where a rung's
    cells spent unequal compute)."""
    starts, spend = starts or {}, spend or {}
    spent_at = {r["rung"]: r["spends"] for r in spend.get("rungs", [])}
    text = ["", "## Ladder (successive halving)",
            f"Every config ran to the first rung; after each rung the configs with the "
            f"highest lower confidence bound of their `{target}` score "
            + ("at the next rung (the trend of their last checkpoints carried one rung, "
               if ladder.get("promote_by", "trend") == "trend" else
               "at the rung's end (")
            + f"minus {ladder.get('z', 1.0):g} standard errors) continued from their "
            f"checkpoints, "
            f"keeping the best 1/{ladder.get('reduction', 4)} and "
            + ("at least one config per policy size"
               if ladder.get("keep_sizes", "all") == "all" else
               "a config of each policy size whose upper bound reached the leader's lower "
               "bound") +
            "; a config whose guard fired is never promoted (pilot compute, as spent and "
            "as planned, is above)."]
    if starts:
        text.append(f"Warm start on `{target}` (checkpoint 0, before any update, of the cells "
                    "with the same warm start and evaluation conditions; the \"vs start\" "
                    "column is a score minus its config's): " + ", ".join(
                        f"{s['label']} {s['accuracy']:.3f} (SE {s['se']:.3f}, n={s['n']})"
                        for s in baselines(starts)) + ".")
    for rung in ladder["rungs"]:
        last = rung is ladder["rungs"][-1]
        rows, spends = [], spent_at.get(rung["rung"], {})
        for c in rung["candidates"]:
            mine = [spends[cell] for cell in c["cell_ids"] if cell in spends]
            decision = ("-" if last and not c.get("guard") else
                        "promoted" if c.get("promoted") else c.get("why", "-"))
            rows.append([f"`{c['config']}`", f"{c['model']}/{c['reward']} G{c['group_size']} "
                         f"mu{c['update_epochs']}", len(c["cell_ids"]),
                         fmt_flops(sum(mine) / len(mine)) if mine else "-", _acc(c["score"]),
                         _acc(c["se"]), "-" if last else _acc(c["predicted"]),
                         "-" if last else _acc(c["lcb"]),
                         (f"{c['score'] - starts[c['config']]['accuracy']:+.3f}"
                          if c["config"] in starts else "-"),
                         c.get("why", "") if c.get("promoted") else decision,
                         c.get("guard") or ""])
        text += [f"### Rung {rung['rung']}: {fmt_fraction(rung['fraction'])} "
                 f"({fmt_flops(rung['budget_flops'])} FLOPs per cell), "
                 f"{len(rung['candidates'])} config(s)",
                 _md_table(["config", "knobs", "seeds", "FLOPs spent", f"{target}", "SE",
                            "promotion score", "LCB", "vs start", "decision", "guard"],
                           rows, "llrrrrrrrll")]
        if note := rung_spend_note(spend, rung["rung"]):
            text.append(note)
    if selected:
        pick = selected[0]
        word = "Provisional pick" if provisional else "Pick"
        text.append(f"**{word}: `{pick['config_id']}` ({pick['model']}/{pick['reward']}), "
                    f"{pick['score']:.3f} [{pick['lo']:.3f}, {pick['hi']:.3f}] "
                    f"{pick['basis_used']}"
                    + (f"; {pick['gain_text']}" if "gain_text" in pick else "") + ".**")
    return "\n\n".join(text) + "\n"


def _guards_markdown(checks: pd.DataFrame | None, target: str, n_cells: int,
                     ladder: dict | None = None, unlearned: list[str] | None = None) -> str:
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
        rows = [[f"{g['rung']} ({fmt_fraction(g['fraction'])})",
                 ", ".join(f"`{c}`" for c in g["cell_ids"]), f"`{g['config_id']}`",
                 g["evidence"]] for g in ladder_guards(ladder)]
        header = ["rung", "cell(s)", "config", "guard: evidence"]
    else:
        rows = [[f"`{r.cell_id}`", f"`{r.config_id}`", r.guard, r.evidence]
                for r in checks[checks["fired"]].itertuples()]
        header = ["cell", "config", "guard", "evidence"]
    text.append(_md_table(header, rows, "l" * len(header)) if rows else "No guard fired.")
    if unlearned:  # reported, not acted on: the ladder's pick is its own
        text.append("Configs whose train reward or selection score never left its start "
                    "(no learning; listed, not excluded):\n" + "\n".join(unlearned))
    return "\n\n".join(text) + "\n"


def _top_lines(configs: pd.DataFrame, regimes: pd.DataFrame, primary: str, full: float,
               level: float) -> list[str]:
    """A flat sweep's top configs (with their predictions where a fit exists) and
    regimes, one line each."""
    fitted = has_fit(configs)
    lines = [f"top configs on {primary}: mean [{level:.0%} CI]"
             + (f" -> predicted at {fmt_flops(full)} FLOPs" if fitted else "")]
    top = configs.head(3)  # the opening lines already name the pick and runner-up
    id_width = max(len(str(c)) for c in top["config_id"])
    label_width = max(len(_label(c)) for _, c in top.iterrows())
    for _, c in top.iterrows():
        predicted = _interval(c.get("prediction"), c.get("prediction_lo"),
                              c.get("prediction_hi"))
        lines.append(f"  {c['rank']:>2}. {c['config_id']:<{id_width}}  "
                     f"{_label(c):<{label_width}}  {_interval(c['mean'], c['lo'], c['hi'])}"
                     + (f" -> {predicted} ({c.get('fit_method', '-')})" if fitted else ""))
    lines.append(f"regimes on {primary}:")
    shown = regimes.head(3)
    names = [f"{r['model']}/{r['reward']}/{r['regime']}" for _, r in shown.iterrows()]
    width = max(map(len, names), default=0)
    for name_, (_, r) in zip(names, shown.iterrows()):
        lines.append(f"  {r['rank']:>2}. {name_:<{width}}  "
                     f"{_interval(r['mean'], r['lo'], r['hi'])}")
    return lines


def _summary(name: str, sweep_dir, cells: pd.DataFrame, ok: pd.DataFrame,
             totals: dict, primary: str, configs: pd.DataFrame, regimes: pd.DataFrame,
             by_target: dict, selected: list[dict], basis: str, level: float,
             paths: dict, ladder: dict | None = None,
             opening: list[str] | None = None, no_pick: str = "") -> str:
    charged = totals["total"]
    split = ", ".join(f"{p} {_share(totals[p], charged)}" for p in CHARGED_PHASES)
    full = float(ok["full_budget_flops"].iloc[0])
    lines = [f"RACE report: {name}", *(opening or []),
             f"cells: {counts_text(cells['status'])}; pilot FLOPs {fmt_flops(charged)} "
             f"charged ({split}) + "
             f"{fmt_flops(totals['eval'])} eval + {fmt_flops(totals['redone'])} redone = "
             f"{fmt_flops(totals['used'])} used; pilot_cost_share "
             f"{cost_shares(totals, full)['charged']:.3f} of one full run "
             f"({cost_shares(totals, full)['with_eval']:.3f} with eval)",
             ]
    if ladder is None:  # a ladder's first-rung ranking is in leaderboard.md
        lines += _top_lines(configs, regimes, primary, full, level)
    if ladder is not None:
        lines.append("ladder: " + " -> ".join(
            f"{len(r['candidates'])} at {fmt_fraction(r['fraction'])}"
            for r in ladder["rungs"]) + " config(s)")
    if no_pick:
        lines.append(f"no validation runs: {no_pick}")
    else:
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
