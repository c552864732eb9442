"""A sweep folder read into the DataFrames the analysis works on (the only reader of
``metrics.jsonl`` for analysis, its eval rows as :class:`~race.store.records.EvalRow`;
what it reads is the store's, :mod:`race.store`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from race.analysis.surfaces import with_update_fractions
from race.catalog import load_model_shape
from race.core.regime import RegimeThresholds, regime_label
from race.core.specs import ModelShape, RunSpec, baseline_key, start_key
from race.store.cell import CellDir, cell_dirs, every_cell_dir
from race.store.io import SWEEP_JSON_FIX, read_jsonl, read_result
from race.store.pilots import pilot_row
from race.store.records import EvalRow
from race.store.sweep_files import SweepDir

# step-row keys the guards read
STEP_KEYS = ("step", "max_new_tokens", "train_reward", "entropy", "truncation_rate",
             "clip_fraction", "kl")


def model_shapes(sweep_dir: Path) -> dict[str, Any]:
    """Every policy's and reward model's :class:`~race.core.shapes.ModelShape` of a sweep, by
    name, as its cells' ``spec.json`` recorded them (an older spec without shapes: the
    catalog's). A report never reopens a model folder, which may have moved since."""
    shapes: dict[str, Any] = {}
    for cell_dir in cell_dirs(sweep_dir):
        spec = read_result(CellDir(cell_dir).spec, CellDir(cell_dir).rerun_fix())
        if spec.get("policy"):
            shapes[spec["model"]] = ModelShape.from_dict(spec["policy"])
        elif spec.get("model") not in shapes:
            shapes[spec["model"]] = load_model_shape(spec["model"])
        reward_model = (spec.get("reward") or {}).get("model")
        if reward_model and spec.get("reward_model"):
            shapes[reward_model] = ModelShape.from_dict(spec["reward_model"])
    return shapes


def run_specs(sweep_dir: Path) -> dict[str, RunSpec]:
    """Every cell's :class:`~race.core.specs.RunSpec`, by cell id, as its ``spec.json``
    recorded it."""
    return {path.name: RunSpec.from_dict(read_result(CellDir(path).spec,
                                                     CellDir(path).rerun_fix()))
            for path in cell_dirs(sweep_dir)}


def load_results(sweep_dir: Path, *, thresholds=None, with_steps: bool = False):
    """A sweep folder as the aggregator's three DataFrames: ``(cells, evals, examples)``.

    - ``cells``: one row per cell (``pilots.csv``'s columns plus ``params``,
      ``full_budget_flops`` and the ``regime`` named from its realized shares; with
      ``rho_planned`` and ``rho_realized``, as ``pilots.csv``, read afresh; an ok cell's
      ``baseline_key``, :func:`race.core.specs.baseline_key`: the cells whose checkpoint 0
      its gain is read against).
    - ``evals``: one row per (cell, target, checkpoint): FLOPs spent then, accuracy, and
      the problems ``n`` it was scored on. A ladder cell that left its warm start to its
      group (``score_start`` false) gets the group's checkpoint-0 rows (the same model on
      the same problems, :func:`race.core.specs.start_key`), so every curve starts there.
    - ``examples``: the final checkpoint's per-problem correctness (prompt bootstrap).
    - with ``with_steps=True``, a fourth: ``steps``, one row per ok cell's GRPO step
      (``cell_id`` and ``STEP_KEYS``: the step's cap, train reward, entropy, truncation
      rate, clip fraction, KL where logged), read in the same pass.

    A corrupt ``metrics.jsonl`` line raises ValueError naming its file and line.
    ``thresholds`` (a ``RegimeConfig``) defaults to the one in ``sweep.json``.
    """
    sweep_dir = Path(sweep_dir)
    path = SweepDir(sweep_dir).record
    record = read_result(path, SWEEP_JSON_FIX) if path.is_file() else {}
    if thresholds is None:
        thresholds = RegimeThresholds.from_dict(record.get("config", {}).get("regime", {}))
    rows, evals, examples, steps = [], [], [], []
    starts, unscored = {}, []  # warm-start rows by start_key; cells that left them out
    shapes = model_shapes(sweep_dir)
    for cell_dir in every_cell_dir(sweep_dir):  # a damaged folder is a row too
        row = pilot_row(cell_dir)
        fraction = record.get("pilot_fraction") or 1.0
        if "budget_flops" not in row:  # damaged, or starting: no spec to read
            rows.append(row)
            continue
        row["full_budget_flops"] = record.get("budget_flops") or row["budget_flops"] / fraction
        row["params"] = shapes[row["model"]].total_params
        total = row.get("total_flops") or 0.0
        shares = {p: (row.get(f"flops_{p}", 0.0) or 0.0) / total if total else 0.0
                  for p in ("rollout", "learning", "feedback")}
        row["regime"] = regime_label(shares, thresholds)
        rows.append(row)
        if row["status"] != "ok":
            continue
        spec = read_result(CellDir(cell_dir).spec, CellDir(cell_dir).rerun_fix())
        row["baseline_key"] = baseline_key(spec)  # whose checkpoint 0 its gain is read against
        first = len(evals)
        finals = _read_metrics(CellDir(cell_dir), row, spec.get("convention", "model"),
                               evals, steps)
        start = [e for e in evals[first:] if e["checkpoint"] == 0.0]
        if start:
            starts.setdefault(start_key(spec), start)
        elif not spec.get("score_start", True):
            unscored.append((start_key(spec), row["cell_id"], row["config_id"]))
        for target, correct in finals.items():
            examples += [{"cell_id": row["cell_id"], "target": target, "example": i,
                          "correct": c} for i, c in enumerate(correct)]
    for key, cell_id, config_id in unscored:  # a ladder scored its group's warm start once
        evals += [e | {"cell_id": cell_id, "config_id": config_id}
                  for e in starts.get(key, [])]
    cells = with_update_fractions(pd.DataFrame(rows), record.get("cells", []))
    frames = (cells, pd.DataFrame(evals), pd.DataFrame(examples))
    if with_steps:
        return (*frames, pd.DataFrame(steps, columns=["cell_id", *STEP_KEYS]))
    return frames


def _read_metrics(cell: CellDir, row: dict, convention: str, evals: list[dict],
                  steps: list[dict]) -> dict[str, tuple[int, ...]]:
    """Append an ok cell's eval rows to ``evals`` and its step rows to ``steps``; return
    each target's per-problem correctness at its last checkpoint.

    An eval row is dated by its own ledger snapshot (charged FLOPs in ``convention``),
    else by the last step's ``charged_flops``: a continued ladder cell repeats its
    lineage's eval rows after its own steps, and only the snapshot dates them (a repeated
    (target, FLOPs) is read once).
    """
    charged = 0.0
    finals: dict[str, tuple[int, ...]] = {}
    seen = set()  # (target, charged FLOPs): a ladder rung repeats its lineage's evals
    for metric in read_jsonl(cell.metrics):
        if metric["kind"] == "step":
            charged = metric["charged_flops"]
            steps.append({"cell_id": row["cell_id"]} | {k: metric.get(k) for k in STEP_KEYS})
        elif metric["kind"] == "eval":
            scored = EvalRow.from_json(metric)
            at = scored.charged_flops(convention)
            at = charged if at is None else at
            if (scored.target, at) in seen:
                continue
            seen.add((scored.target, at))
            evals.append({"cell_id": row["cell_id"], "config_id": row["config_id"],
                          "target": scored.target, "checkpoint": scored.checkpoint,
                          "flops": at, "accuracy": scored.accuracy,
                          "mean_reward": scored.mean_reward, "n": scored.n})
            finals[scored.target] = scored.correct
    return finals
