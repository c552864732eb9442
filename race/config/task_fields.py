"""What a pilot's task reads of ``task.*`` (:func:`task_entry`): the embedded task's
knobs, a data task's files and prompt format, or a reasoning-gym generator with its knobs
as JSON text. The entry is part of a cell's spec (and so of its id).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from race.config.schema import TaskConfig
from race.tasks.math import MathTask
from race.tasks.reasoning_gym import as_text

# the embedded task's knobs (the TaskConfig fields that race.tasks.arith.ArithTask reads)
ARITH_FIELDS = ("digits", "first_digits", "min_ops", "max_ops", "ood_min_ops", "ood_max_ops",
                "ood_minus_share")


# what a math task reads of its TaskConfig: MathTask's own fields
MATH_FIELDS = tuple(f.name for f in fields(MathTask) if not f.name.startswith("_"))


def task_entry(task: TaskConfig) -> dict[str, Any]:
    """What the pilot's task reads of ``task`` (the embedded task's knobs, a data task's
    files and prompt format, or a reasoning-gym generator with its knobs as JSON text)."""
    if task.name == "reasoning-gym":
        values = asdict(task) | {"config": as_text(task.config),
                                 "ood_config": as_text(task.ood_config)}
        keys = ("name", "dataset", "config", "ood_config", "system_prompt", "answer_format")
    elif task.name == "math":
        values = asdict(task) | {"eval": as_text(task.eval) if task.eval else ""}
        keys = MATH_FIELDS
    else:
        values = asdict(task)
        keys = ("name", *ARITH_FIELDS) if task.name == "arith" else (
            "name", "source", "ood_source", "system_prompt", "answer_format")
    return {k: v for k, v in values.items() if k in keys and v != ""}
