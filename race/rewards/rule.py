"""``rule``: exact check of the final answer by the task's verifier. 0 FLOPs.

On the embedded task the verifier reads ``#### N``; on GSM8K-format data it compares
numbers with ``math-verify`` (:mod:`race.rewards.verify`).
"""

from __future__ import annotations

from typing import Any

from race.rewards.base import FlopLedger, check_rewards


class RuleReward(FlopLedger):
    """1.0 when the completion's final answer verifies against ``answer``, else 0.0."""

    kind = "rule"
    value_range = (0.0, 1.0)

    def __init__(self, name: str, task: Any):
        self.name, self.task = name, task

    def __call__(self, prompts: list[str], completions: list[str], *,
                 answer: list[str], **task_fields: Any) -> list[float]:
        if len(answer) != len(completions):
            raise ValueError(f"reward={self.name}: {len(answer)} answers for "
                             f"{len(completions)} completions; pass one answer per completion")
        rewards = [float(self.task.verify(c, a)) for c, a in zip(completions, answer)]
        return check_rewards(self, completions, rewards)
