"""The answer first: the opening of ``leaderboard.md`` and of the terminal summary,
rendered from what :mod:`race.analysis.headline` decided (the pick, its runner-up, what it
costs at the full budget, the best allocation by size, reward, target and budget).
"""

from __future__ import annotations

import math

import pandas as pd

from race.analysis.headline import leader_text, problems_text, verdict
from race.analysis.reliability import verdict_line
from race.analysis.sweep_analysis import SweepAnalysis
from race.core.fmt import CHARGED_PHASES, fmt_flops
from race.core.fmt import acc as _acc
from race.core.fmt import interval as _interval
from race.core.fmt import label as _label
from race.core.fmt import md_table as _md_table
from race.report.buys import count
from race.report.honesty import covers, nothing_learned_lines, nothing_learned_markdown


def _split(shares: dict) -> str:
    """``rollout 31% / learning 69% / feedback 0%`` (``-`` when unknown)."""
    if any(math.isnan(shares.get(p, math.nan)) for p in CHARGED_PHASES):
        return "FLOP split unknown"
    return " / ".join(f"{p} {shares[p]:.0%}" for p in CHARGED_PHASES)


def _rho(pick: dict) -> str:
    realized, planned = pick.get("rho_realized"), pick.get("rho_planned")
    parts = []
    if realized is not None and not math.isnan(float(realized)):
        parts.append(f"rho {float(realized):.2f} as spent")
    if planned is not None and not math.isnan(float(planned)):
        parts.append(f"{float(planned):.2f} planned")
    return ", ".join(parts) if parts else "rho unknown"


def _score(pick: dict, target: str, scope: str = "") -> str:
    """The pick's score as selection read it, with its SE (``scope``: what its interval
    covers) and gain."""
    basis = {"observed": "observed at the pilot's end",
             "extrapolated": "predicted at the full budget"}.get(pick["basis_used"],
                                                                 pick["basis_used"])
    text = (f"`{target}` {_interval(pick['score'], pick['lo'], pick['hi'])} "
            f"(SE {_acc(pick.get('se'))}{'; ' + scope if scope else ''}), {basis}")
    if pick.get("basis_used") == "extrapolated" and "observed" in pick:
        observed = _interval(pick["observed"], pick["observed_lo"], pick["observed_hi"])
        text += f"; observed {observed}"
    return text + (f"; {pick['gain_text']}" if pick.get("gain_text") else "")


def pick_tie(result: SweepAnalysis) -> list[str]:
    """The configs the pick ties with on the primary target (empty: it stands alone)."""
    rows = result.findings
    if rows is None or not len(rows):
        return []
    mine = rows[(rows["by"] == "target") & (rows["value"] == result.primary)]
    return list(mine["tied"].iloc[0]) if len(mine) and mine["tied"].iloc[0] else []


def ranks(result: SweepAnalysis) -> bool:
    """Whether the pilots can rank the configs (the reliability verdict; an older or
    hand-built analysis without one is read as it was)."""
    return result.reliability.get("verdict", "can rank") == "can rank"


def reliability_lines(result: SweepAnalysis) -> list[str]:
    """The reliability verdict with its numbers, and where the pilots cannot rank
    reliably, what would make them."""
    if not result.reliability:
        return []
    lines = [verdict_line(result.reliability)]
    if result.reliability.get("remedies"):
        lines.append("the pick is provisional; reliable with: "
                     + "; or ".join(result.reliability["remedies"]))
    return lines


def pick_line(result: SweepAnalysis) -> str:
    pick, tie = result.pick, pick_tie(result)
    score = _score(pick, result.primary, covers(result))
    if tie:  # an order among tied reads is noise: name no winner
        return (f"**No winner: a tie of {', '.join(f'`{c}`' for c in tie)}** on "
                f"`{result.primary}` (equal scores, or intervals that all hold 0); the "
                f"ladder's order among them is not a ranking. First listed: {score}.")
    word = "Pick" if ranks(result) else "Provisional pick"
    return (f"**{word}: `{pick['config_id']}`, {_label(pick)}**: {pick.get('regime')} regime "
            f"({_rho(pick)}); FLOPs {_split(pick['shares'])}. {score}.")


def runner_up_line(result: SweepAnalysis) -> str:
    runner = result.runner_up
    if runner is None:
        return "Runner-up: none (one config ran)."
    return (f"Runner-up: `{runner['config_id']}`, {_label(runner)}, "
            f"{_interval(runner['score'], runner['lo'], runner['hi'])} "
            f"{runner['basis_used']}. The pick's lead: "
            f"{verdict(runner, result.level, ranks(result))}.")


def full_line(result: SweepAnalysis) -> str:
    """What the pick's recipe buys at the full budget, and how long it would run."""
    full_flops = float(result.ok["full_budget_flops"].iloc[0])
    row = result.full
    if not row or "steps" not in row:
        return (f"At the full budget ({fmt_flops(full_flops)} FLOPs): not solved "
                f"({result.buys_note or 'no spec'}).")
    text = (f"At the full budget ({fmt_flops(full_flops)} FLOPs) the pick buys "
            f"{row['steps']:,} GRPO steps, {count(row['completions'])} completions and "
            f"{count(row['tokens_trained'])} tokens trained ({_split(_shares(row))})")
    rate = row.get("flops_per_s", math.nan)
    if rate and not math.isnan(rate):
        hours = full_flops / rate / 3600
        text += (f", about {hours:.2g} h at the {fmt_flops(rate)} FLOP/s its size's "
                 f"pilots trained at{' on ' + row['device'] if row.get('device') else ''} "
                 f"(loading and eval left out, as `race validate` estimates)")
    prediction = _pick_prediction(result)
    return text + "." + (f" {prediction}." if prediction else "")


def _shares(row: dict) -> dict:
    return {p: row.get(f"share_{p}", math.nan) for p in CHARGED_PHASES}


def _pick_prediction(result: SweepAnalysis) -> str:
    """The pick's prediction at F with its calibrated 90% interval
    (:mod:`race.analysis.forecast`): its last read plus what the rest of the budget added
    on the testbed's curve banks after a read that far from F."""
    mine = result.predictions.get(result.pick["config_id"])
    if mine is None:
        return ""
    return (f"Predicted there: {_interval(mine['prediction'], mine['lo'], mine['hi'])} "
            f"(its read {mine['read']:.3f} at {mine['read_fraction']:.3g} F plus what F "
            f"added after such a read on the testbed's worlds 1-2; 90% interval; "
            f"docs/reports.md)")


def findings_markdown(findings: pd.DataFrame, level: float,
                      problems: dict[str, tuple[int, int]] | None = None) -> str:
    """The conditional findings: one row per (by, condition), with ``n``: the problems
    a read of its target scored (``problems``: target -> (fewest, most))."""
    rows = []
    for _, f in findings.iterrows():
        gain = ("-" if f["gain"] is None or math.isnan(f["gain"]) else
                f"{f['gain']:+.3f} (SE {f['gain_se']:.3f})")
        span = (problems or {}).get(f["target"])
        tied = isinstance(f.get("tied"), list) and bool(f["tied"])
        rows.append([f["by"], f["value"],
                     f"tie of {', '.join(f'`{c}`' for c in f['tied'])} (no winner)" if tied
                     else f"`{f['config_id']}`", "-" if tied else _label(f),
                     f"{_interval(f['score'], f['lo'], f['hi'])}", gain, f["target"],
                     problems_text(*span) if span else "-", f["read_at"]])
    return _md_table(["by", "condition", "config", "allocation", f"score [{level:.0%}]",
                      "vs warm start", "on", "n", "read at"], rows, "lllllrlrl")


def answer_markdown(result: SweepAnalysis) -> str:
    """The leaderboard's opening: the pick, the runner-up, the full-budget cost, then
    the findings table (about 25 lines for two sizes, two rewards, three targets and
    four rungs)."""
    head = "\n\n".join(f"**{line[0].upper()}{line[1:]}**" if i == 0 else line
                        for i, line in enumerate(reliability_lines(result)))
    if result.no_pick:  # nothing learned comes first; nothing is picked to be provisional
        return "\n\n".join([nothing_learned_markdown(result)]
                           + ([verdict_line(result.reliability)] if result.reliability
                              else []))
    if not result.pick:
        return "No config was selected."
    parts = [p for p in (head,) if p] + [pick_line(result), runner_up_line(result),
                                         full_line(result)]
    if result.findings is not None and len(result.findings):
        scope = ("; a flat sweep has one budget: `race sweep budget=a,b` compares budgets"
                 if result.ladder is None else "; budget: the leader at each rung")
        parts += [f"Best allocation by condition ({result.level:.0%} intervals covering "
                  f"{covers(result)}; gain over "
                  f"the config's own warm start on the same target, with SE; n: the problems a "
                  f"read of that target scored{scope}; a target is read only past the "
                  f"warm start):",
                  findings_markdown(result.findings, result.level, result.problems)]
    return "\n\n".join(parts)


def _best(findings: pd.DataFrame, by: str) -> str:
    part = findings[findings["by"] == by]
    return ", ".join(f"{r['value']} {_interval(r['score'], r['lo'], r['hi'])} "
                     f"({leader_text(r)})" for _, r in part.iterrows())


def answer_lines(result: SweepAnalysis) -> list[str]:
    """The terminal summary's opening: the same answer, one line each."""
    head = reliability_lines(result)
    if result.no_pick:
        return nothing_learned_lines(result) + head[:1]
    if not result.pick:
        return ["no config was selected"]
    pick, lines = result.pick, list(head)
    tie = pick_tie(result)
    lines.append((f"no winner: a tie of {', '.join(tie)} on {result.primary}; first listed "
                  if tie else "pick: " if ranks(result) else "provisional pick: ")
                 + f"{pick['config_id']} {_label(pick)} ({pick.get('regime')}, "
                 f"{_rho(pick)}): "
                 f"{_score(pick, result.primary, covers(result)).replace('`', '')}")
    runner = result.runner_up
    if runner is not None:
        lines.append(f"runner-up: {runner['config_id']} {_label(runner)} "
                     f"{_acc(runner['score'])}; lead "
                     f"{verdict(runner, result.level, ranks(result))}")
    row = result.full
    if row and "steps" in row:
        lines.append(f"full budget {fmt_flops(float(result.ok['full_budget_flops'].iloc[0]))}"
                     f" FLOPs buys the pick {row['steps']:,} steps, "
                     f"{count(row['completions'])} completions, "
                     f"{count(row['tokens_trained'])} tokens trained ({_split(_shares(row))})")
    findings = result.findings
    if findings is not None and len(findings):
        for by in ("size", "reward", "target"):
            if (findings["by"] == by).any():
                lines.append(f"best by {by}: {_best(findings, by)}")
    return lines
