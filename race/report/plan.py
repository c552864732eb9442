"""``race plan``'s text: the plan as a table, its one-paragraph summary, and the warnings
a plan earns (pilots that cost more than one full run, eval past the pilot budget).

Rendered from a :class:`race.run.grid.Plan` and its cells, read by attribute: this module
imports nothing of ``run/``.
"""

from __future__ import annotations

from race.core.fmt import fmt_flops
from race.core.memory import GIB
from race.core.rungs import LadderPlan, fmt_fraction


def plan_table(plan) -> str:
    """The plan as a fixed-width table, refused cells listed last with their reasons."""
    always = [k for k in ("model", "reward") if k not in dict(plan.axes)]
    keys = always + [k for k, _ in plan.axes]
    short = {k: k.split(".")[-1].replace("group_size", "G").replace("update_epochs", "mu")
             for k in keys}
    shown = [c.shown_knobs() for c in plan.cells]
    widths = {k: max(len(short[k]), *(len(str(kn.get(k, ""))) for kn in shown)) for k in keys}
    header = (f"{'cell':<13}" + "".join(f"{short[k]:<{widths[k] + 2}}" for k in keys)
              + f"{'steps':>6}{'rollout':>19}{'learning':>19}{'feedback':>19}"
              + f"{'mem GiB':>9}  regime")
    lines = [header]
    for cell in plan.runnable:
        knobs = cell.shown_knobs()
        shares = cell.planned.shares()
        phases = "".join(f"{fmt_flops(getattr(cell.planned, p)):>11} {shares[p]:>6.1%}"
                         for p in ("rollout", "learning", "feedback"))
        memory = f"{cell.memory.peak / GIB:>9.2f}" if cell.memory else f"{'-':>9}"
        lines.append(f"{cell.spec.cell_id:<13}"
                     + "".join(f"{knobs[k]:<{widths[k] + 2}}" for k in keys)
                     + f"{cell.steps:>6}{phases}{memory}  {cell.regime}")
    refused = [c for c in plan.cells if c.refused]
    if refused:
        lines.append("")
        lines.append(f"refused ({len(refused)} cell(s), not run):")
        for cell in refused:
            knobs = " ".join(f"{k}={v}" for k, v in cell.knobs)
            lines.append(f"  {cell_label(cell)}  {knobs}: {cell.refused}")
    return "\n".join(lines)


def cell_label(cell) -> str:
    """The cell id, or a dash for a cell that cannot exist."""
    return cell.spec.cell_id if cell.spec else "-" * 12


def flat_share(plan) -> float:
    """What a flat grid of these cells at ``pilot.fraction`` would cost, in full runs."""
    return len(plan.runnable) * plan.base.pilot.fraction if plan.base else 0.0


def cost_warning(plan) -> str:
    """A warning when the grid's pilots together cost more than one full-budget run
    ("" otherwise): under ``selection.policy=flat`` each cell gets ``pilot.fraction`` of
    the budget, whatever the grid (a ladder spends ``selection.share``)."""
    n = len(plan.runnable)
    if plan.ladder is not None or plan.share_of_full_run <= 1.0:
        return ""
    return (f"warning: these {n} pilots cost {plan.share_of_full_run:.2f} full-budget runs "
            f"(each gets pilot.fraction={plan.pilot_fraction:g} of the budget); to keep the "
            f"pilots within one full run, use selection.policy=ladder, "
            f"pilot.fraction<={1 / n:.3g} or fewer cells")


def eval_budget_warning(plan) -> str:
    """A warning when the pilots' charged and planned eval FLOPs together exceed
    ``selection.pilot_budget`` full-budget runs ("" otherwise)."""
    limit = plan.base.selection.pilot_budget if plan.base else 1.0
    if plan.share_with_eval <= limit:
        return ""
    return (f"warning: these pilots with their evaluation cost {plan.share_with_eval:.2f} "
            f"full-budget runs > selection.pilot_budget={limit:g}; score fewer problems "
            f"(pilot.select_examples, pilot.eval_examples), fewer checkpoints "
            f"(pilot.checkpoints) or targets (pilot.eval_targets), or raise "
            f"selection.pilot_budget")


def ladder_text(ladder: LadderPlan) -> str:
    """``16 configs at F/48 -> 8 at F/24 -> 4 at F/12 -> 2 at F/6``, with seeds."""
    rungs = " -> ".join(f"{count} at {fmt_fraction(rung)}"
                        for count, rung in zip(ladder.counts, ladder.rungs))
    seeds = f" (x{ladder.seeds} seeds)" if ladder.seeds > 1 else ""
    return f"{rungs} config(s){seeds}"


def plan_summary(plan) -> str:
    """One paragraph: the grid's size, budgets, and pilot cost vs one full run."""
    axes = " x ".join(f"{k}[{len(v)}]" for k, v in plan.axes) or "one cell"
    head = (f"grid {axes} = {len(plan.cells)} cell(s), {len(plan.runnable)} runnable; "
            f"full-run budget F = {fmt_flops(plan.budget_flops)} FLOPs")
    charged = (f"{fmt_flops(plan.pilot_flops)} FLOPs charged = {plan.share_of_full_run:.1%} "
               f"of one full-budget run, eval ~{fmt_flops(plan.eval_flops)} "
               f"({plan.eval_flops / plan.budget_flops:.1%}), {plan.share_with_eval:.1%} "
               f"with eval")
    if plan.ladder is not None:
        selection = plan.base.selection
        shrunk = (f"; rungs shrunk x{plan.ladder.scaled:.3g} to fit selection.share="
                  f"{selection.share:g} and, with eval, selection.pilot_budget="
                  f"{selection.pilot_budget:g}" if plan.ladder.scaled < 1 else "")
        return (f"{head}; ladder {ladder_text(plan.ladder)}, pilots {charged} (a flat grid "
                f"at pilot.fraction={plan.base.pilot.fraction:g}: {flat_share(plan):.1%} "
                f"charged){shrunk}")
    each = fmt_flops(plan.budget_flops * plan.pilot_fraction)
    return (f"{head}, pilots {plan.pilot_fraction:g} x budget = {each} each; all pilots "
            f"{charged}")


def problems_text(counts) -> str:
    """One line: the problems each split of a task setting holds (the training split after
    dropping those that appear in a target) and what each target scores at a checkpoint
    (``counts``: a :class:`race.pilot.problems.SplitCounts`, read by attribute)."""
    scored = []
    for target, n in counts.scored.items():
        notes = ["selection"] if target == counts.selection else []
        if n < counts.asked[target]:
            notes.append(f"all it holds; {counts.asked[target]:,} asked")
        scored.append(f"{target} {n:,}" + (f" ({'; '.join(notes)})" if notes else ""))
    head, listing = f"problems (task={counts.task}): ", ", ".join(scored)
    if counts.drawn:
        return f"{head}{counts.unknown}; scored per checkpoint: {listing}"
    if counts.unknown:
        return f"{head}split sizes {counts.unknown}; scored per checkpoint: at most {listing}"
    train = counts.held["train"]
    dropped = (f" (after dropping {counts.dropped:,} also in an evaluation target)"
               if counts.dropped else "")
    held = ", ".join(f"{t} {counts.held[t]:,}" for t in counts.asked)
    return f"{head}train {train:,}{dropped}; held out: {held}; scored per checkpoint: {listing}"
