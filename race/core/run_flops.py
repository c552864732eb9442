"""Compute cards: one GRPO step's FLOPs (:func:`race.core.flops.grpo_step_flops`) over a
whole run, by phase, as a paper should report them, and the steps a budget buys.

Pure: no torch, no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from race.core.flops import CONVENTIONS, Convention, grpo_step_flops
from race.core.specs import LoraShape, ModelShape, PhaseFlops, RewardShape
from race.errors import UsageError


def steps_for_budget(step: PhaseFlops, budget_flops: float) -> int:
    """Whole GRPO steps a budget buys (a run never overspends, so round down)."""
    if budget_flops <= 0:
        raise UsageError(f"budget={budget_flops:.3g}: must be > 0 FLOPs; use e.g. budget=1e15")
    steps = int(budget_flops // step.total)
    if steps < 1:
        raise UsageError(f"budget={budget_flops:.3g}: cannot buy one GRPO step, which costs "
                         f"{step.total:.3g} FLOPs; raise budget or shrink the step "
                         f"(grid.prompts_per_step, grid.group_size, grid.max_new_tokens)")
    return steps


@dataclass(frozen=True, slots=True)
class ComputeCard:
    """Total FLOPs of a run and their split by phase: what a paper should report."""

    policy: str
    reward: str
    convention: str
    per_step: PhaseFlops
    steps: int

    @property
    def total(self) -> PhaseFlops:
        return self.per_step.scale(self.steps)

    def to_dict(self) -> dict:
        total = self.total
        return {"policy": self.policy, "reward": self.reward, "convention": self.convention,
                "steps": self.steps, "per_step_flops": self.per_step.to_dict(),
                "total_flops": total.to_dict(), "shares": total.shares()}


def compute_card(policy: ModelShape, reward: RewardShape, step: PhaseFlops, *,
                 convention: Convention = "model", steps: int | None = None,
                 budget_flops: float | None = None) -> ComputeCard:
    """Aggregate one step's FLOPs over ``steps`` steps, or over what ``budget_flops`` buys."""
    if (steps is None) == (budget_flops is None):
        raise UsageError("compute_card: pass exactly one of steps=N or budget_flops=B")
    if steps is None:
        steps = steps_for_budget(step, budget_flops)
    elif steps < 1:
        raise UsageError(f"steps={steps}: must be >= 1")
    return ComputeCard(policy.name, reward.name, convention, step, steps)


def cell_cards(policy: ModelShape, reward: RewardShape, *, lora: LoraShape | None,
               step_kwargs: Mapping[str, Any], convention: Convention = "model",
               steps: int | None = None, budget_flops: float | None = None
               ) -> dict[str, ComputeCard]:
    """One cell's compute card in both conventions (``race flops``): over ``steps`` steps,
    else over what ``budget_flops`` buys in ``convention``, else over one step."""
    step = {conv: grpo_step_flops(policy, reward, convention=conv, lora=lora, **step_kwargs)
            for conv in CONVENTIONS}
    if steps is None:
        steps = steps_for_budget(step[convention], budget_flops) if budget_flops is not None else 1
    return {conv: compute_card(policy, reward, step[conv], convention=conv, steps=steps)
            for conv in CONVENTIONS}
