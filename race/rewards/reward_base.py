"""What every reward system shares: the call signature, its FLOP ledger, range checks.

A reward is a callable ``(prompts, completions, **task_fields) -> rewards`` (one float per
completion). Model-based rewards also count the FLOPs of the tokens they actually scored,
in both conventions, through :mod:`race.core.flops`; ``pop_flops()`` hands them to the pilot's
ledger. A rule-based verifier costs 0 FLOPs (its seconds are timed by the pilot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class RewardFlops:
    """FLOPs a reward spent since the last ``pop_flops()``, and the tokens it scored."""

    model: float = 0.0
    executed: float = 0.0
    tokens: int = 0

    def __add__(self, other: RewardFlops) -> RewardFlops:
        return RewardFlops(self.model + other.model, self.executed + other.executed,
                           self.tokens + other.tokens)


@runtime_checkable
class Reward(Protocol):
    """A reward system: ``name``, ``kind`` (rule | orm | prm) and its valid ``value_range``."""

    name: str
    kind: str
    value_range: tuple[float, float]

    def __call__(self, prompts: list[str], completions: list[str],
                 **task_fields: Any) -> list[float]: ...

    def pop_flops(self) -> RewardFlops: ...


class FlopLedger:
    """Mixin keeping a reward's FLOP count between two ``pop_flops()`` calls."""

    def _charge(self, flops: RewardFlops) -> None:
        self._pending = getattr(self, "_pending", RewardFlops()) + flops

    def pop_flops(self) -> RewardFlops:
        pending = getattr(self, "_pending", RewardFlops())
        self._pending = RewardFlops()
        return pending


def check_rewards(reward: Reward, completions: list[str], rewards: list[float]) -> list[float]:
    """Refuse NaN, infinite or out-of-range rewards, naming the offending completion."""
    if len(rewards) != len(completions):
        raise ValueError(f"reward={reward.name}: returned {len(rewards)} rewards for "
                         f"{len(completions)} completions; return one float per completion")
    low, high = reward.value_range
    for completion, value in zip(completions, rewards):
        if not isinstance(value, (int, float)) or math.isnan(value) or not low <= value <= high:
            raise ValueError(f"reward={reward.name}: value {value!r} outside [{low}, {high}] "
                             f"for completion {completion[:120]!r}; fix the reward function "
                             f"or its value_range")
    return [float(v) for v in rewards]
