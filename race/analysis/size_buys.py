"""What one budget buys at each policy size: the same recipe (reward, G, mu, prompts,
lengths, adapter) solved at every size, as the planner solves a cell.

The paper's same-FLOP comparison made concrete: a larger policy costs more per token in
every phase, so the same FLOPs buy it fewer GRPO steps, fewer completions and fewer
trained tokens. Pure: :func:`race.core.flops.grpo_step_flops` at nominal token counts
(``race plan``'s solver, ``race.run.grid.solve_cell``), shapes from the specs or the
catalog; no IO beyond the catalog's YAML.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from race import catalog
from race.core.flops import grpo_step_flops
from race.core.fmt import CHARGED_PHASES
from race.core.specs import LoraShape, PhaseFlops, RunSpec, corrects_sampler

# RunSpec fields that set one step's FLOPs, the policy aside: two cells agreeing on them
# run the same recipe at their own size
RECIPE_KEYS = ("reward", "task", "prompts_per_step", "group_size", "max_new_tokens",
               "update_epochs", "minibatch_size", "kl_coef", "lora_rank", "lora_targets",
               "convention", "tis_cap", "backend")

COLUMNS = ["model", "params", "reward", "prompts_per_step", "group_size", "update_epochs",
           "prompt_tokens", "completion_tokens", "same_recipe", "step_flops", "steps",
           "completions", "tokens_trained", "spent_flops",
           *(f"flops_{p}" for p in CHARGED_PHASES), *(f"share_{p}" for p in CHARGED_PHASES)]


def _task(spec: RunSpec) -> dict[str, Any]:
    """The task entry the spec carries, completed from the catalog (older specs hold
    its name only)."""
    task = dict(spec.task)
    if "prompt_tokens" not in task or "completion_tokens" not in task:
        task = catalog.load_entry("task", task["name"]) | task
    return task


def _reward(spec: RunSpec, steps_per_trace: int | None):
    entry = dict(spec.reward)
    if "kind" not in entry or (entry["kind"] != "rule" and "model" not in entry):
        entry = catalog.load_entry("reward", entry["name"]) | entry
    return catalog.reward_shape(entry, steps=steps_per_trace, model=spec.reward_model)


def step_flops(spec: RunSpec, *, completion_tokens: int | None = None) -> PhaseFlops:
    """One GRPO step of ``spec`` at nominal token counts, as ``race plan`` solves it
    (``race.config.to_specs``): the task's prompt length, its mean completion length
    capped at ``max_new_tokens`` (``completion_tokens``: ``grid.completion_tokens``,
    which a spec does not keep), the task's mean reasoning steps per trace.
    """
    task = _task(spec)
    completion = min(completion_tokens or int(task["completion_tokens"]), spec.max_new_tokens)
    return grpo_step_flops(
        spec.policy or catalog.load_model_shape(spec.model),
        _reward(spec, task.get("steps_per_trace")),
        prompts_per_step=spec.prompts_per_step, group_size=spec.group_size,
        prompt_tokens=int(task["prompt_tokens"]), completion_tokens=completion,
        max_new_tokens=spec.max_new_tokens, update_epochs=spec.update_epochs,
        minibatch_size=spec.minibatch_size or None, kl_coef=spec.kl_coef,
        lora=LoraShape(spec.lora_rank, tuple(spec.lora_targets)) if spec.lora_rank else None,
        old_logprobs=corrects_sampler(spec.tis_cap, spec.backend) or None,
        convention=spec.convention)


def recipe(spec: RunSpec) -> tuple:
    """What a cell runs, its policy and seed aside (:data:`RECIPE_KEYS`)."""
    return tuple(getattr(spec, key) for key in RECIPE_KEYS)


def budget_buys(budget_flops: float, specs: Iterable[RunSpec], *,
                reference: RunSpec | None = None,
                completion_tokens: int | None = None) -> pd.DataFrame:
    """Per policy size, what ``budget_flops`` buys with one recipe.

    Args:
        budget_flops: the budget, FLOPs (a sweep's full-run budget F).
        specs: the grid's cells (any budget: only their recipes and policies are read).
        reference: the recipe every size is solved at (default: the first spec's); a
            size without a cell of that recipe is solved at its own first cell's
            (``same_recipe`` False).
        completion_tokens: ``grid.completion_tokens`` when the plan set it.

    Returns:
        One row per policy, smallest first: ``model``, ``params``, the recipe's knobs
        (``reward``, ``prompts_per_step``, ``group_size``, ``update_epochs``,
        ``prompt_tokens``, ``completion_tokens``), ``same_recipe``, ``step_flops`` (one
        step, FLOPs), ``steps`` (whole GRPO steps the budget buys: ``budget //
        step_flops``, the planner's rule), ``completions`` (steps x prompts x G
        generated), ``tokens_trained`` (prompt + completion tokens through the learner's
        forward and backward, once per update epoch: completions x (prompt + completion)
        x mu), ``spent_flops`` (steps x step_flops) and its ``flops_<phase>`` and
        ``share_<phase>`` (the FLOP split; the same at every step).
    """
    specs = list(specs)
    if not specs:
        return pd.DataFrame(columns=COLUMNS)
    wanted = recipe(reference or specs[0])
    by_model: dict[str, RunSpec] = {}
    for spec in specs:
        have = by_model.get(spec.model)
        if have is None or (recipe(have) != wanted and recipe(spec) == wanted):
            by_model[spec.model] = spec
    rows = [_row(budget_flops, spec, recipe(spec) == wanted, completion_tokens)
            for spec in by_model.values()]
    return (pd.DataFrame(rows, columns=COLUMNS).sort_values(["params", "model"], kind="stable")
            .reset_index(drop=True))


def _row(budget_flops: float, spec: RunSpec, same: bool,
         completion_tokens: int | None) -> dict[str, Any]:
    step = step_flops(spec, completion_tokens=completion_tokens)
    task = _task(spec)
    length = (spec.max_new_tokens if spec.convention == "executed" else
              min(completion_tokens or int(task["completion_tokens"]), spec.max_new_tokens))
    steps = int(budget_flops // step.total)
    completions = steps * spec.prompts_per_step * spec.group_size
    spent = step.scale(steps)
    shares = step.shares()
    policy = spec.policy or catalog.load_model_shape(spec.model)
    return {"model": spec.model, "params": policy.total_params,
            "reward": spec.reward_name, "prompts_per_step": spec.prompts_per_step,
            "group_size": spec.group_size, "update_epochs": spec.update_epochs,
            "prompt_tokens": int(task["prompt_tokens"]), "completion_tokens": length,
            "same_recipe": same, "step_flops": step.total, "steps": steps,
            "completions": completions,
            "tokens_trained": completions * (int(task["prompt_tokens"]) + length)
            * spec.update_epochs,
            "spent_flops": spent.total,
            **{f"flops_{p}": getattr(spent, p) for p in CHARGED_PHASES},
            **{f"share_{p}": shares[p] for p in CHARGED_PHASES}}
