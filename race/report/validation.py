"""The leaderboard's last section: what the pilots read and what their curves predicted
at the full budget, against the full-budget runs of ``race validate``, replacing any
earlier one."""

from __future__ import annotations

from pathlib import Path

from race.core.fmt import acc as _acc
from race.core.fmt import cell_text, fmt_flops
from race.core.fmt import interval as _interval
from race.core.fmt import md_table as _md_table
from race.errors import UsageError
from race.store.io import REPORT_FIX, read_result, write_text
from race.store.sweep_files import SweepDir

VALIDATION_HEADING = "## Validation: predicted vs realized"


def validation_section(sweep_dir: Path | str, comparison: dict) -> str:
    """Render :func:`race.analysis.aggregate.compare_predictions`'s output into
    leaderboard.md's last section.

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
    selection = SweepDir(sweep_dir).selection
    if selection.is_file():
        for s in read_result(selection, REPORT_FIX).get("selected", []):
            labels[s["config_id"]] = f"{s.get('model')}/{s.get('reward')} ({s.get('regime')})"

    target = comparison.get("target")
    budget = comparison.get("budget_flops")
    head = "Pilot reads and predictions at F checked against full-budget runs"
    if target:
        head += f" on {target}"
    if budget:
        head += f" at {fmt_flops(float(budget))} FLOPs"
    readings = [_readings(r) for r in comparison.get("rows", [])]
    rows = []
    for r in readings:
        rows.append([f"`{r['config_id']}`", labels.get(r["config_id"], ""),
                     _interval(r["pilot_read"], r["pilot_lo"], r["pilot_hi"]),
                     "-" if r["predicted"] is None else
                     _interval(r["predicted"], r["lo"], r["hi"]),
                     _acc(r["realized"]), {True: "yes", False: "no", None: "-"}[r["inside"]]])
    parts = [VALIDATION_HEADING, head + ".",
             _md_table(["config", "allocation", "pilot read [lo, hi]",
                        "predicted at F [90%]", "realized", "inside?"], rows, "llrrrl")
             if rows else "No selected config has a realized value."]

    def stat(value, digits=3):
        return "n/a" if value is None else f"{value:.{digits}f}"

    note = comparison.get("note") or ""
    if comparison.get("kendall_tau") is None:
        ranks = f"- Kendall tau / Spearman: n/a ({note or 'not computed'})"
    else:
        ranks = (f"- Kendall tau {stat(comparison['kendall_tau'], 2)}, Spearman "
                 f"{stat(comparison['spearman'], 2)} (rank agreement of the pilot reads with "
                 "the realized scores, 1 = same order)")
    flags = [r["inside"] for r in readings if r["inside"] is not None]
    bullets = [
        f"- Configs validated: {comparison.get('n', len(rows))}", ranks,
        f"- Top-1 regret: {stat(comparison.get('top1_regret'))} (accuracy lost by trusting "
        "the pilot's best pick instead of the realized best)",
        "- Coverage: n/a (no prediction at F)" if not flags else
        f"- Coverage: {sum(flags)}/{len(flags)} ({sum(flags) / len(flags):.0%}) of realized "
        "values inside the 90% interval predicted at F"]
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
    write_text(board, text.rstrip("\n") + "\n\n" + section)
    return section


def _readings(row: dict) -> dict:
    """A comparison row with both readings: the pilot's own score (``pilot_read``,
    ``pilot_lo``, ``pilot_hi``) and the prediction at F (``predicted``, ``lo``, ``hi``;
    None where none was made). A row of an earlier ``comparison.json`` holds the pilot's
    read under ``predicted`` and no prediction at F."""
    if "pilot_read" in row:
        return row
    return {"config_id": row["config_id"], "pilot_read": row["predicted"],
            "pilot_lo": row.get("lo"), "pilot_hi": row.get("hi"), "predicted": None,
            "lo": None, "hi": None, "realized": row["realized"], "inside": None}
