"""The curve banks as data: one reader of a bank's export (``read_bank``), one reader of a
results folder's cell (``cell_curves``, what ``bench/curve_bank.py`` exports), and the
per-problem scores a replay reads (``correct_index``).

A bank (``bench/data/curve_bank*.json.gz``) holds each cell's knobs, its checkpoint evals
(``checkpoint``, ``target``, charged ``flops``, ``accuracy``, ``n``, ``correct``: the
per-problem 0/1 string, the same problems at every checkpoint) and per-step precursors.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from race.store import io as results
from race.store.cell import CellDir

GRID_PROMPTS = 8  # prompts per step of the testbed's grids (a cell without the knob ran 8)


def cell_curves(cell_dir: Path) -> dict | None:
    """One ok cell's knobs, checkpoint evals and per-step precursors (None if not ok, or
    still running)."""
    if not CellDir(cell_dir).is_ok():
        return None
    spec = results.read_json(cell_dir / "spec.json")
    convention = spec["convention"]
    evals, steps = [], []
    for row in results.read_jsonl(cell_dir / "metrics.jsonl"):
        spent = row.get("flops", {}).get(convention, {})
        charged = sum(spent.get(p, 0.0) for p in ("rollout", "learning", "feedback"))
        if row["kind"] == "eval":
            evals.append({"checkpoint": row["checkpoint"], "target": row["target"],
                          "flops": charged, "eval_flops": spent.get("eval", 0.0),
                          "accuracy": row["accuracy"], "n": len(row["correct"]),
                          "mean_reward": row["mean_reward"],
                          # per problem, the same problems at every checkpoint (paired)
                          "correct": "".join(map(str, row["correct"]))})
        elif row["kind"] == "step":
            steps.append({"step": row["step"], "flops": charged,
                          "entropy": row.get("entropy"),
                          "truncation_rate": row.get("truncation_rate"),
                          "max_new_tokens": row.get("max_new_tokens"),
                          "train_reward": row["train_reward"]})
    return {"cell_id": spec["cell_id"], "config": spec["config_id"], "model": spec["model"],
            "warmstart": spec.get("warmstart", {}), "lr": spec.get("lr"),
            "reward": spec["reward"]["name"], "group_size": spec["group_size"],
            "update_epochs": spec["update_epochs"],
            "prompts_per_step": spec.get("prompts_per_step"), "seed": spec["seed"],
            "budget_flops": spec["budget_flops"], "evals": evals, "steps": steps}


def read_bank(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def correct_index(path: Path, problems: int, target: str = "val"
                  ) -> dict[tuple[str, int, float], np.ndarray]:
    """(config, seed, checkpoint) -> the first ``problems`` per-problem scores on
    ``target`` of the bank at ``path``."""
    out = {}
    for cell in read_bank(path)["cells"]:
        for row in cell["evals"]:
            if row["target"] == target and row.get("correct"):
                out[cell["config"], cell["seed"], round(row["checkpoint"], 6)] = np.array(
                    [int(c) for c in row["correct"][:problems]])
    return out
