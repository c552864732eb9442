"""The pilot's budget rule: a cell's worst-case GRPO step and the check.

``race plan``, the pilot and the reports all decide "does the next step fit?" here, from
the cell's :class:`~race.core.specs.RunSpec` alone (shapes from the catalog, the reward's own
input format from ``spec.reward``), so they agree to the FLOP.

A reward model scores more than the policy's tokens. What it adds to every scored trace
is described by three fields of its ``race/conf/reward/*.yaml`` entry:

- ``overhead_tokens``: tokens on every trace whatever it says (Qwen2.5-Math-PRM: its
  system prompt and chat-template tokens; the tiny PRM: the newline closing the last line);
- ``tag_tokens_per_step``: tokens inserted per reasoning step (Qwen2.5-Math-PRM: one
  ``<extra_0>``; the tiny PRM: 0, the newline ending a step is its tag);
- ``max_steps``: the most steps the reward scores (later steps join the last one), which
  bounds the tags of any trace.

A trace of ``p`` prompt and ``c`` completion tokens is scored on at most
``p + c + overhead_tokens + max_steps x tag_tokens_per_step`` tokens
(:func:`trace_token_limit`); the rewards refuse, before their model runs, any input
longer than that, so the worst case below is a bound, not an estimate. Plans quote the
nominal cost with the task's ``steps_per_trace`` in place of ``max_steps``.

No torch, no IO beyond the catalog's YAML (for a spec that carries no shapes).
"""

from __future__ import annotations

from functools import lru_cache

from race.catalog import load_model_shape, reward_shape
from race.core import flops
from race.core.flops import reward_extra_tokens
from race.core.specs import (
    LoraShape,
    ModelShape,
    RewardShape,
    RunSpec,
    corrects_sampler,
    target_problems,
)
from race.errors import BudgetTooSmall
from race.nn.devices import visible_gpus


@lru_cache(maxsize=256)
def shapes(spec: RunSpec) -> tuple[ModelShape, RewardShape]:
    """The policy's shape and the reward's worst-case shape of a cell (the shapes the
    spec carries; the catalog's for a spec written without them)."""
    return (spec.policy or load_model_shape(spec.model),
            reward_shape(dict(spec.reward), model=spec.reward_model))


def trace_token_limit(spec: RunSpec, prompt_tokens: int, completion_tokens: int) -> int:
    """The most tokens the reward may score for one trace (what the worst case assumes)."""
    return prompt_tokens + completion_tokens + reward_extra_tokens(dict(spec.reward))


def worst_step_flops(spec: RunSpec, prompt_tokens: int, max_new_tokens: int = 0) -> float:
    """One step's charged FLOPs with every completion at the cap: an upper bound.

    Args:
        spec: the cell.
        prompt_tokens: the longest prompt of the step, tokens.
        max_new_tokens: the generation cap (default: ``spec.max_new_tokens``).
    """
    policy, reward = shapes(spec)
    cap = max_new_tokens or spec.max_new_tokens
    step = flops.grpo_step_flops(
        policy, reward, prompts_per_step=spec.prompts_per_step,
        group_size=spec.group_size, prompt_tokens=prompt_tokens,
        completion_tokens=cap, max_new_tokens=cap,
        update_epochs=spec.update_epochs, minibatch_size=spec.minibatch_size or None,
        kl_coef=spec.kl_coef, lora=LoraShape(spec.lora_rank, spec.lora_targets),
        convention=spec.convention,
        old_logprobs=corrects_sampler(spec.tis_cap, spec.backend) or None)
    return step.total


# Sanity bounds on one pilot (pilot.max_steps, pilot.max_hours): a budget that buys more
# is a typo (budget=1e25), not a pilot; raise them on purpose.
MAX_PILOT_STEPS = 100_000
MAX_PILOT_HOURS = 168.0  # one week
# Charged FLOP/s a whole pilot ran at (eval and loading included), measured: the tiny
# family on one CPU thread with two pilots running (~1e10-2e10), a Qwen2.5-0.5B-shaped
# bf16 pilot on one H200 with Hugging Face generate (2.5e12, docs/gpus.md). Estimates of
# wall time only: slower than a tuned GPU pilot, so they err towards refusing.
PILOT_FLOPS_PER_S = {"cpu": 1e10, "cuda": 2.5e12}


def machine_device() -> str:
    """``cuda`` when this machine has a visible CUDA device (torch is asked), else ``cpu``."""
    return "cuda" if visible_gpus() else "cpu"


def pilot_hours(pilot_flops: float, device: str) -> float:
    """Estimated wall hours of a pilot that charges ``pilot_flops`` on ``device``
    (``cpu`` or ``cuda``), at :data:`PILOT_FLOPS_PER_S`."""
    return pilot_flops / PILOT_FLOPS_PER_S[device] / 3600


def eval_problems(spec: RunSpec) -> dict[str, int]:
    """Problems each evaluation target scores at a checkpoint: the target selection reads
    (``spec.select_target``) on ``max(select_examples, eval_examples)``, the others on
    ``eval_examples``."""
    return {target: target_problems(target, select_target=spec.select_target,
                                    select_examples=spec.select_examples,
                                    eval_examples=spec.eval_examples)
            for target in spec.eval_targets}


def reports_at(spec: RunSpec, flops: float) -> bool:
    """Whether a checkpoint at ``flops`` charged scores every target (from
    ``spec.report_from_flops`` on), not the selection target alone."""
    return flops >= spec.report_from_flops * (1 - 1e-9)


def checkpoint_problems(spec: RunSpec, fraction: float) -> dict[str, int]:
    """What the checkpoint at ``fraction`` of the pilot's budget scores: every target of
    :func:`eval_problems` at the warm start (0) and from ``spec.report_from_flops``
    charged FLOPs on (:func:`reports_at`), else only the selection target (what a
    ladder's promotions read)."""
    problems = eval_problems(spec)
    if fraction == 0 or reports_at(spec, fraction * spec.budget_flops):
        return problems
    return {t: n for t, n in problems.items() if t == spec.selection_target}


def checkpoints_after(checkpoints: tuple[float, ...] | list[float], budget_flops: float,
                      start_flops: float = 0.0) -> list[float]:
    """The checkpoints (fractions of ``budget_flops``) a pilot that starts with
    ``start_flops`` charged still evaluates: those above it (a continued ladder cell
    starts at the budget of the cell below, whose end was evaluated already)."""
    return [c for c in sorted(checkpoints) if c * budget_flops > start_flops * (1 + 1e-9)]


def planned_evaluations(checkpoints: tuple[float, ...] | list[float], budget_flops: float,
                        start_flops: float = 0.0) -> int:
    """Evaluations of every target a pilot runs: its warm start (checkpoint 0) when it
    starts fresh, then one per checkpoint after its start (a checkpoint the budget never
    reaches folds into the final evaluation, so this is an upper bound)."""
    fresh = 1 if start_flops == 0 else 0
    return fresh + len(checkpoints_after(checkpoints, budget_flops, start_flops))


def check_budget(spec: RunSpec, prompt_tokens: int, *, key: str = "budget") -> None:
    """Refuse a budget that cannot buy one worst-case step (:class:`BudgetTooSmall`)."""
    cheapest = worst_step_flops(spec, prompt_tokens)
    if spec.budget_flops < cheapest:
        raise BudgetTooSmall(spec.budget_flops, cheapest, spec.convention, spec.cell_id,
                             key=key)
