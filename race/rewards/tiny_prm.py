"""``prm-tiny``: the reward of the tiny PRMs that RACE trains for the embedded task.

Per-step scores of a completion (P(step correct) at each step's newline, from
:mod:`race.warmstart.prm`, which builds the model) aggregated into one reward in [0, 1]
(min, product or last). Its FLOPs are counted through :mod:`race.core.flops` on the
tokens it actually scored (no extra tag tokens: the newline is the tag).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from race.catalog import load_model_shape
from race.core import flops
from race.core.specs import ModelShape, RewardShape
from race.rewards.qwen_prm import aggregate_scores
from race.rewards.reward_base import FlopLedger, RewardFlops, check_rewards
from race.warmstart.prm import build_tiny_prm, encode_for_scoring, load_prm, step_scores


class TinyPRM(FlopLedger):
    """The ``prm-tiny`` reward: per-step scores aggregated into one reward in [0, 1]."""

    kind = "prm"
    value_range = (0.0, 1.0)

    def __init__(self, name: str, model_name: str, *, aggregate: str = "min",
                 batch_size: int = 64, folder: Path | None = None, device: str = "cpu",
                 dtype: str = "float32", shape: ModelShape | None = None):
        self.name, self.aggregate, self.batch_size = name, aggregate, batch_size
        aggregate_scores([1.0], aggregate)  # validates the name early
        self.shape = shape or load_model_shape(model_name)
        self.tokenizer, self.lm, self.head = load_prm(folder or build_tiny_prm(model_name),
                                                   device, dtype)
        self.last_step_scores: list[list[float]] = []

    def overhead_tokens(self) -> int:
        """Tokens the scoring format adds to every trace: the newline closing its last line."""
        return len(encode_for_scoring(self.tokenizer, "", "")[0])

    def __call__(self, prompts: list[str], completions: list[str], *,
                 token_limits: list[int] | None = None, **task_fields: Any) -> list[float]:
        reward = RewardShape(self.name, "prm", self.shape)
        scores = []
        for start in range(0, len(prompts), self.batch_size):  # charged batch by batch
            end = start + self.batch_size
            chunk, batches = step_scores(self.lm, self.head, self.tokenizer,
                                         prompts[start:end], completions[start:end],
                                         self.batch_size,
                                         token_limits[start:end] if token_limits else None,
                                         self.name)
            scores += chunk
            charged = {conv: sum(flops.reward_flops(reward, lengths, convention=conv)
                                 for lengths in batches) for conv in flops.CONVENTIONS}
            self._charge(RewardFlops(charged["model"], charged["executed"],
                                     sum(map(sum, batches))))
        self.last_step_scores = scores
        rewards = [aggregate_scores(row, self.aggregate) for row in scores]
        return check_rewards(self, completions, rewards)
