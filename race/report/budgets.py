"""``budgets.md`` and ``budgets.csv`` of a multi-budget sweep: the allocation selected at
each budget (:func:`race.analysis.select.budget_rows`) and where it changes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from race.analysis.headline import problems_text
from race.analysis.select import budget_rows
from race.core.fmt import fmt_flops
from race.core.fmt import interval as _interval
from race.core.fmt import md_table as _md_table
from race.core.stats import REPORT
from race.store.io import write_csv, write_text
from race.store.sweep_files import SweepDir


def write_budget_report(parent: Path | str, folders: dict[float, Path], *,
                        level: float = REPORT.level) -> str:
    """``budgets.md`` and ``budgets.csv`` of a multi-budget sweep: per target, the
    selected allocation at each budget with its interval, and where it changes: where
    its knobs change (:func:`race.analysis.select.allocation`), not its config id, which
    carries the pilot budget.

    Args:
        parent: the folder holding one sweep folder per budget.
        folders: budget (FLOPs) -> that budget's sweep folder (with its report written).

    Returns the terminal summary.
    """
    parent = Path(parent)
    rows = [r for budget, folder in sorted(folders.items())
            if SweepDir(folder).selection.is_file()
            for r in budget_rows(budget, folder, level=level)]
    frame = pd.DataFrame(rows)
    missing = [f"{b:.3g}" for b, f in folders.items() if not SweepDir(f).selection.is_file()]
    text = [f"# Best allocation by budget: {parent.name}",
            f"One ladder per budget (its own sweep folder, report and selection); the warm "
            f"start is shared. Per target, the allocation selected at each budget, with a "
            f"{level:.0%} normal interval from its standard error (binomial over the "
            f"problems each seed scored, pooled over seeds) where it was read (the "
            f"ladder's last rung); n: the problems each seed scored on the target (fewer "
            f"than asked where the target holds fewer). Selection reads the first target; "
            f"the others are reported, each with the last rung's best config on it, read "
            f"only where it was scored past its warm start. \"changes\": the allocation's "
            f"knobs (model, reward, G, mu, prompts per step, tokens, lr, LoRA rank, ...) "
            f"differ from the budget below; config ids always differ (they carry the "
            f"pilot budget)."]
    if missing:
        text.append(f"No selection (no ok cell) at budget {', '.join(missing)}.")
    lines = []
    for target, group in (frame.groupby("target", sort=False) if len(frame) else []):
        table, previous = [], None
        for r in group.itertuples():
            knobs = ("no pick" if r.config == "-" else
                     f"{r.model}/{r.reward} G{r.group_size} mu{r.update_epochs}")
            # the allocation's knobs, not its id (an id carries the pilot budget)
            changed = ("-" if previous in (None, "-") or r.config == "-" else  # no pick
                       "**changes**" if r.allocation != previous else "same")
            previous = r.allocation
            n = problems_text(r.n, r.n_max)
            table.append([fmt_flops(r.budget_flops), f"`{r.config}`", knobs,
                          _interval(r.score, r.lo, r.hi), n, r.seeds, r.read_at, changed,
                          r.guard])
            lines.append(f"  {target} @ {fmt_flops(r.budget_flops)}: {knobs} "
                         f"{_interval(r.score, r.lo, r.hi)}, n={n} ({changed})")
        tag = " (selection)" if group["selection"].iloc[0] else " (reported)"
        n = problems_text(group["n"].min(), group["n_max"].max())
        text += [f"## Target: {target}{tag}, n={n} problems per seed",
                 _md_table(["budget", "config", "allocation", f"{target} [{level:.0%}]", "n",
                            "seeds", "read at", "vs the budget below", "guard"], table,
                           "rllrrrlll")]
    write_text(parent / "budgets.md", "\n\n".join(text) + "\n")
    write_csv(parent / "budgets.csv", frame)
    return "\n".join([f"RACE budgets: {parent}", *lines,
                      f"wrote budgets.md, budgets.csv in {parent}"])
