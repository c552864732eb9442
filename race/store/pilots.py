"""``pilots.csv``: one flat row per cell of a sweep (its knobs, status, FLOPs, seconds,
throughput and evals), read from the cell's ``spec.json`` and ``summary.json``.

The columns are this module's, but for ``rho_planned`` and ``rho_realized``, which the
sweep adds before it writes the file (``race.analysis.surfaces``); the report and the
budget report read it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from race.core.specs import PhaseFlops
from race.store.cell import SPEC, SUMMARY, CellDir, every_cell_dir, gone
from race.store.claims import running_pilot
from race.store.io import read_result
from race.store.records import PilotSession, PilotSummary, phase_flops_from

# what a cell folder can be, in the order counts are printed: ok and failed pilots left a
# verdict; missing ones never finished (a rerun resumes them) or lost their folder (the
# sweep's records list them); running ones hold their run lock now; damaged folders lack
# their spec.json, so nothing says what they ran
STATUSES = ("ok", "failed", "missing", "running", "damaged")

# spec fields copied into every row
SPEC_COLUMNS = ("model", "seed", "prompts_per_step", "group_size", "max_new_tokens",
                "update_epochs", "minibatch_size", "lr", "lora_rank", "kl_coef",
                "temperature", "backend", "convention", "config_id", "continues",
                "select_target")


def pilot_row(cell_dir: Path) -> dict:
    """One cell as a flat row: its knobs, status, FLOPs and seconds by phase, final evals.

    A cell without ``summary.json`` is ``running`` while a pilot holds its run lock, else
    ``missing`` (never finished); a folder without ``spec.json`` is ``damaged`` (or
    ``running``, while its pilot is starting), its id the folder's name. A cell the
    sweep's records list whose folder is gone (deleted) is ``missing``, and says so.
    """
    cell = CellDir(cell_dir)
    if gone(cell.path):
        return {"cell_id": cell.path.name, "status": "missing",
                "error": f"its folder {cell.path} is gone (the sweep's sweep.json or "
                         f"ladder.json lists it); rerun the command that planned it to run "
                         f"it again"}
    rerun = cell.rerun_fix()
    if not cell.spec.is_file():
        if running_pilot(cell.path) is not None:
            return {"cell_id": cell.path.name, "status": "running",
                    "error": "its pilot is starting (no spec.json yet)"}
        return {"cell_id": cell.path.name, "status": "damaged",
                "error": f"no {SPEC}: nothing says what this cell ran; {rerun}"}
    spec = read_result(cell.spec, rerun)
    row = {"cell_id": spec["cell_id"]} | {k: spec.get(k) for k in SPEC_COLUMNS}
    row["reward"] = spec["reward"].get("name")
    row["task"] = spec["task"].get("name")
    row["budget_flops"] = spec["budget_flops"]
    if not cell.has_summary():
        running = running_pilot(cell.path)  # asked only of a cell without a verdict
        if running is not None:
            return row | {"status": "running", "error": f"running now (pid "
                          f"{running.get('pid')} on {running.get('host')}); report again "
                          f"once the sweep finishes"}
        return row | {"status": "missing", "error": f"no {SUMMARY}: the pilot never "
                      "finished; rerun the sweep to resume it"}
    summary = PilotSummary.from_json(read_result(cell.summary, rerun))
    row |= {"status": summary.status, "error": summary.error, "steps": summary.steps,
            "total_flops": summary.total_flops,
            "resumed_from_step": summary.resumed_from_step,
            "redone_flops": summary.redone_flops, "unspent_flops": summary.unspent_flops}
    for phase, value in summary.flops.items():
        row[f"flops_{phase}"] = value
    for phase, value in summary.wall_s.items():
        row[f"wall_s_{phase}"] = value
    session = summary.session or PilotSession()
    row |= {"device": summary.device, "dtype": summary.dtype,
            "peak_flops": session.peak_flops}
    for phase, use in (session.throughput or {}).items():
        for key in ("flops_per_s", "mfu", "hfu", "peak_gib"):
            row[f"{key}_{phase}"] = use.get(key)
    for when, scores in (("initial", summary.initial_eval), ("final", summary.final_eval)):
        for target, score in scores.items():
            row[f"{when}_{target}"] = score.accuracy
            row[f"{when}_{target}_reward"] = score.mean_reward
    return row


def row_flops(row: dict) -> PhaseFlops:
    """A ``pilots.csv`` row's FLOPs by phase (``flops_<phase>``, the charged convention);
    a missing or empty phase (a cell that never started) reads as nan."""
    return phase_flops_from({p: row.get(f"flops_{p}")
                             for p in ("rollout", "learning", "feedback", "eval")},
                            "flops_<phase>")


def pilots_frame(sweep_dir: Path):
    """``pilots.csv`` as a DataFrame: one row per cell folder of the sweep (damaged ones
    included)."""
    return pd.DataFrame([pilot_row(d) for d in every_cell_dir(sweep_dir)])


def status_counts(status) -> dict[str, int]:
    """How many cells have each of :data:`STATUSES` (``status``: an iterable of them)."""
    values = list(status)
    return {name: sum(v == name for v in values) for name in STATUSES}


def counts_text(status) -> str:
    """``"3 ok, 1 failed, 0 missing"``, then running and damaged where there are any: the
    counts add up to every cell folder."""
    counts = status_counts(status)
    shown = [k for k in STATUSES if k in ("ok", "failed", "missing") or counts[k]]
    return ", ".join(f"{counts[k]} {k}" for k in shown)
