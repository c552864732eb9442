"""``race sweep`` and ``race report``: a sweep folder planned, launched, summarised and
reported, and the ``SWEEP_DIR`` checks ``race report`` and ``race validate`` share
(:func:`_sweep_folder`, :func:`_report`). Argument parsing and error handling stay in
:mod:`race.cli`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from race.config import Overrides, compose_config, validate
from race.errors import UsageError
from race.integrations.trackers import log_sweep
from race.report.budgets import write_budget_report
from race.report.pilot_text import failures_table
from race.report.plan import cell_label, cost_warning, eval_budget_warning, plan_summary
from race.report.write import write_failures, write_report
from race.run.bounds import length_warning
from race.run.cells import held_text
from race.run.sweep import plan_budget_sweeps, plan_sweep, run_sweep
from race.store.cell import CELLS
from race.store.io import SWEEP_JSON_FIX, read_result
from race.store.sweep_files import SWEEP_JSON, SweepDir


def cmd_sweep(overrides: Overrides) -> int:
    """``race sweep``: plan, launch every cell without an ok summary, wait, summarise.

    A budget list (``budget=1e12,4e12,1.6e13``) runs one sweep (one ladder) per budget in
    ``<out_dir>/<name>/budget-<B>/``, then writes the budget-conditional report beside
    them: the selected allocation at each budget and where it changes.
    """
    budgets, rest = overrides.budget_axis()
    if not budgets:
        plan, sweep_dir = plan_sweep(overrides)
        return _sweep_one(plan, overrides, sweep_dir)
    parent, sweeps = plan_budget_sweeps(rest, budgets)
    failed = 0
    for sweep in sweeps:
        print(f"race sweep: == budget={sweep.plan.budget_flops:.3g} -> {sweep.folder} ==",
              file=sys.stderr)
        failed += _sweep_one(sweep.plan, sweep.overrides, sweep.folder) != 0
    print(write_budget_report(parent, {s.plan.budget_flops: s.folder for s in sweeps},
                              level=sweeps[0].plan.base.report.level))
    return 0 if failed == 0 else 1


def _sweep_one(plan, overrides: Overrides, sweep_dir: Path) -> int:
    """One budget's sweep of ``plan`` into ``sweep_dir``, then its report; the exit code."""
    base = plan.base
    print(f"race sweep: {plan_summary(plan)}", file=sys.stderr)
    if cost_warning(plan):
        print(f"race sweep: {cost_warning(plan)}", file=sys.stderr)
    if eval_budget_warning(plan):
        print(f"race sweep: {eval_budget_warning(plan)}", file=sys.stderr)
    if length_warning(plan):
        print(f"race sweep: {length_warning(plan)}", file=sys.stderr)
    for cell in (c for c in plan.cells if c.refused):
        print(f"race sweep: refused {cell_label(cell)} "
              f"({' '.join(f'{k}={v}' for k, v in cell.knobs)}): {cell.refused}",
              file=sys.stderr)
    print(f"race sweep: {len(plan.runnable)} pilot(s) via launcher={base.launcher.name} -> "
          f"{sweep_dir}", file=sys.stderr)
    outcome = run_sweep(plan, base, list(overrides), sweep_dir)
    frame = pd.read_csv(SweepDir(sweep_dir).pilots)
    if outcome["ok"]:
        written = _report(sweep_dir, base)
        log_sweep(base.report.tracker, base.report.tracker_project, sweep_dir, written)
    else:
        write_failures(sweep_dir, frame)
        print(failures_table(frame))
    print(f"\n{outcome['counts']} ({outcome['skipped']} already "
          f"done before this run); launch wall {outcome['wall_s']:.0f} s; results in "
          f"{sweep_dir}")
    if outcome["by_other"]:
        print(f"race sweep: {len(outcome['by_other'])} cell(s) were run by "
              f"{held_text(outcome['by_other'])}, not here: "
              f"{', '.join(sorted(outcome['by_other']))}", file=sys.stderr)
    # an extended folder holds other commands' cells: this command answers for its own
    not_ok = frame[frame["status"] != "ok"]
    ours = not_ok["cell_id"].isin(set(outcome["cells"]))  # every rung's, a ladder's
    for _, row in not_ok[ours].iterrows():
        print(f"failed {row['cell_id']}: {row['error']}", file=sys.stderr)
    if (~ours).any():
        others = not_ok[~ours].sort_values("cell_id")
        print(f"race sweep: {len(others)} cell(s) of {sweep_dir} outside this command are "
              f"not ok ({', '.join(f'{r.cell_id} {r.status}' for r in others.itertuples())})"
              f": this command does not run them; rerun the command that described a "
              f"stopped one to resume it", file=sys.stderr)
    return 0 if not ours.any() else 1


def _report(sweep_dir, cfg) -> dict:
    report = cfg.report
    written = write_report(sweep_dir, n_boot=report.n_boot, level=report.level,
                           top_k=report.top_k, basis=report.basis)
    print(written["summary"])
    return written


def _sweep_folder(path: str) -> Path:
    folder = Path(path)
    if not SweepDir(folder).record.is_file() and not SweepDir(folder).cells.is_dir():
        raise UsageError(f"SWEEP_DIR={path}: not a sweep folder (no {SWEEP_JSON} or {CELLS}/); "
                         f"give the folder `race sweep` printed, e.g. results/<sweep>")
    return folder


def cmd_report(sweep_dir: str, overrides: Overrides) -> int:
    """``race report SWEEP_DIR``: leaderboard, compute card, plots, selection."""
    folder = _sweep_folder(sweep_dir)
    check_report_keys(folder, overrides)  # before their values are composed and checked
    cfg = compose_config(overrides)
    validate(cfg)
    check_report_overrides(folder, overrides, cfg)
    _report(folder, cfg)
    return 0


# the overrides race report reads (ReportConfig's own: how it ranks and reports)
REPORT_KEYS = ("report.n_boot", "report.level", "report.top_k", "report.basis")


def check_report_keys(folder: Path, overrides: Overrides) -> None:
    """Refuse, never ignore, an override ``race report`` does not read: any key but
    :data:`REPORT_KEYS` (its cells ran with what their ``spec.json`` records: ``grid.*``,
    ``budget``, a model or a launcher given here would change nothing)."""
    unused = [text for text in overrides if text.lstrip("+~").split("=", 1)[0]
              not in REPORT_KEYS]
    if unused:
        raise UsageError(f"{' '.join(unused)}: race report ranks the cells {folder} holds, "
                         f"which ran with what their spec.json records, and reads only "
                         f"{', '.join(REPORT_KEYS)}; drop {'it' if len(unused) == 1 else 'them'}"
                         f" (to run cells with other knobs: race sweep with them, "
                         f"sweep.extend=true to add them to this folder)")


def check_report_overrides(folder: Path, overrides: Overrides, cfg) -> None:
    """Refuse a ``report.*`` override the sweep's selection cannot honour, before anything
    is written (it is never ignored in silence): on a ladder sweep (``ladder.json``),
    ``report.basis`` (the picks are the ladder's own ranking) and a ``report.top_k`` past
    the configs the ladder ranked."""
    ladder_path = SweepDir(folder).ladder
    given = {text.lstrip("+~").split("=", 1)[0]: text.split("=", 1)[1]
             for text in overrides if "=" in text}
    if not ladder_path.is_file():
        return
    if "report.basis" in given:
        raise UsageError(f"report.basis={given['report.basis']}: this sweep ran "
                         f"selection.policy=ladder, whose picks are the ladder's own ranking "
                         f"(basis ladder); report.basis applies to flat sweeps "
                         f"(selection.policy=flat); drop it")
    if "report.top_k" in given:
        ladder = read_result(ladder_path, SWEEP_JSON_FIX)
        configs = {cand.get("config") for rung in ladder.get("rungs") or []
                   for cand in rung.get("candidates") or []}
        if cfg.report.top_k > len(configs):
            raise UsageError(f"report.top_k={cfg.report.top_k}: this sweep's ladder ranked "
                             f"{len(configs)} config(s), so at most {len(configs)} can be "
                             f"selected; use report.top_k={len(configs)} or less")

