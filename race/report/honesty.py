"""What a report must say before its numbers are read: whether anything learned (and,
where nothing did, why, with no recommendation), what the pilots spent beside what was
planned, whether the cells a rung compares spent comparable compute, and what each
interval covers (problems only, or seeds too). Rendered from a
:class:`~race.analysis.sweep_analysis.SweepAnalysis`.
"""

from __future__ import annotations

from race.analysis.learning import NOTHING_LEARNED
from race.analysis.sweep_analysis import SweepAnalysis
from race.core.fmt import fmt_flops
from race.core.fmt import md_table as _md_table
from race.core.stats import COVERS, SEED_VARIANCE_NOTE


def nothing_learned_markdown(result: SweepAnalysis) -> str:
    """The leaderboard's opening where no config learned: the verdict, the causes the
    cells show, no validation runs, and every config's evidence."""
    learning = result.learning
    causes = "\n".join(f"- {cause}" for cause in learning.causes)
    rows = [[f"`{r['config']}`", f"{r['model']}/{r['reward']}",
             {True: "flat", False: "rose", None: "not logged"}[r["train_flat"]],
             r["evidence"]] for _, r in learning.configs.iterrows()]
    return "\n\n".join([
        f"**{NOTHING_LEARNED[0].upper()}{NOTHING_LEARNED[1:]}.** No config's train reward "
        f"and `{result.primary}` score both left their start (the warm start, by more "
        f"than the difference's {result.level:.0%} interval), so no allocation is "
        f"better than another here and none is recommended.",
        f"Likely causes, from the cells:\n{causes}",
        "No validation runs: `selection.json` holds no pick (`\"pick\": null`, with this "
        "reason), and `race validate` has nothing to run. The tables below are kept for "
        "diagnosis, not as a ranking.",
        _md_table(["config", "allocation", "train reward", "selection target"], rows,
                  "llll")])


def nothing_learned_lines(result: SweepAnalysis) -> list[str]:
    """The terminal summary's opening where no config learned, one line each."""
    return [f"{NOTHING_LEARNED}: no config learned on {result.primary}; no pick, no "
            f"validation runs",
            *(f"  likely cause: {cause}" for cause in result.learning.causes)]


def unlearned_lines(result: SweepAnalysis) -> list[str]:
    """One line per config that did not learn (the guard section lists them; where some
    did learn, they do not change the ladder's pick)."""
    learning = result.learning
    if learning is None or not len(learning.configs):
        return []
    return [f"- no learning: `{r['config']}` ({r['model']}/{r['reward']}): {r['evidence']}"
            for _, r in learning.configs.iterrows() if not r["learned"]]


def spend_markdown(result: SweepAnalysis) -> str:
    """Pilot compute as spent beside the plan, and why they differ."""
    spend = result.spend
    if not spend:
        return ""
    text = (f"Pilot compute: {spend['spent']:.1%} of one full run as spent (charged "
            f"FLOPs of every cell), {spend['planned']:.1%} as planned.")
    why = []
    if spend["refused"]:
        reasons = "; ".join(spend["refused_why"][:2])
        why.append(f"{spend['refused']} cell(s) refused at planning, "
                   f"{spend['refused_share']:.1%} of the plan ({reasons})")
    if spend["shrunk_share"] > 5e-4:
        why.append(f"rungs ran fewer configs than planned, {spend['shrunk_share']:.1%}")
    if abs(spend["unspent_share"]) > 5e-4:
        why.append(f"the cells that ran stopped {spend['unspent_share']:.1%} short of "
                   f"their budgets (whole steps, failures)")
    if why:
        text += " The difference: " + "; ".join(why) + "."
    return text


def rung_spend_note(spend: dict, rung: int) -> str:
    """Under a rung's table: each cell's spend where they differ by more than 10%."""
    row = next((r for r in spend.get("rungs", []) if r["rung"] == rung), None)
    if row is None or row["matched"] or not row["spends"]:
        return ""
    spends = ", ".join(f"`{c}` {fmt_flops(f)}" for c, f in sorted(row["spends"].items()))
    return (f"The cells compared here spent different compute ({spends} of "
            f"{fmt_flops(row['budget_flops'])} FLOPs): their scores are not at matched "
            f"compute, and with one read per cell at this rung RACE cannot match them; "
            f"read their order as weak evidence.")


def flat_spend_note(spend: dict) -> str:
    """A flat sweep's ranking: the same note, where its cells spent unequal compute."""
    return rung_spend_note(spend, 1)


def _seeds(result: SweepAnalysis) -> int:
    configs = result.primary_configs if result.primary in result.ranked else None
    return int(configs["n_seeds"].max()) if configs is not None and len(configs) else 1


def covers(result: SweepAnalysis) -> str:
    """What the report's intervals cover: ``problems only (one seed)``, ``problems only``
    (a ladder's pooled reads) or ``seeds and problems``."""
    seeds = _seeds(result)
    if result.ladder is None and seeds >= 2:
        return COVERS["seeds"]
    return COVERS["problems"] + (" (one seed)" if seeds < 2 else "")


def interval_text(result: SweepAnalysis) -> str:
    """What every interval in the report is and what it covers (with one seed: that seed
    variance was not measured, and how large the testbed found it)."""
    seeds = _seeds(result)
    over_seeds = result.ladder is None and seeds >= 2
    covers = COVERS["seeds"] if over_seeds else COVERS["problems"]
    text = (f"Every interval here is {result.level:.0%} normal, score +- z SE "
            f"(`race.core.stats.normal_interval`), and covers {covers}: ")
    if over_seeds:
        return text + ("the SE is the seeds' spread / sqrt(seeds), never below the "
                       "problems' binomial SE; a config with one seed covers problems only.")
    text += ("the SE is binomial over the problems each read scored"
             + (", pooled over seeds (as the ladder's rungs read them)" if seeds >= 2
                else "") + "; ")
    return text + (SEED_VARIANCE_NOTE + "." if seeds < 2 else
                   "seed variance is not in it.")
