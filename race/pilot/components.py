"""What a pilot runs with: its task, reward, LoRA learner, rollout backend and tokenizer,
built from the spec alone (:func:`build_components`), and freed after it.

torch and transformers are imported inside :func:`build_components` (heavy: a sweep
process plans and launches pilots without them).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from race import preflight
from race.catalog import load_model_shape
from race.core.specs import RunSpec
from race.errors import RewardFormatTooLong, UsageError
from race.nn.devices import resolve_device, resolve_dtype, torch_dtype
from race.pilot.learner import LearnerConfig, LoraLearner
from race.pilot.rollout.base import RolloutBackend
from race.pilot.rollout.hf import HFBackend
from race.pilot.rollout.vllm import VLLMBackend
from race.pilot.rollout.vllm_settings import engine_settings
from race.rewards import build_reward
from race.rewards.reward_base import Reward
from race.tasks import prompt_bound, with_chat_template
from race.tasks.task_base import Example
from race.warmstart.policies import build_tiny_policy, warm_start_recipe
from race.warmstart.tokenizer import in_family

if TYPE_CHECKING:  # heavy: only the type checker reads them
    from transformers import PreTrainedTokenizerBase


class PilotTask(Protocol):
    """What a pilot asks of a task (``race.tasks``' tasks, or one in a chat template)."""

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` problems of ``split``, drawn with ``seed``."""
        ...

    def verify(self, completion: str, answer: str, problem: str = "") -> bool:
        """Whether ``completion`` answers the problem correctly."""
        ...


@dataclass
class Components:
    """What a pilot runs with (built by :func:`build_components`, or given by tests)."""

    task: PilotTask
    reward: Reward
    learner: LoraLearner
    backend: RolloutBackend  # HFBackend or VLLMBackend
    tokenizer: PreTrainedTokenizerBase
    # the weights each model loaded: {"policy": {"source", "revision"}, "reward": ...}
    # (a hub snapshot's commit hash; "" for a local folder)
    weights: dict = field(default_factory=dict)


def build_components(spec: RunSpec, policy_folder: Path | None = None) -> Components:
    """Load the policy, wrap it in the LoRA learner, and build backend, task and reward.

    ``policy_folder`` overrides where the policy loads from (default: ``spec.policy_path``,
    else the warm-started tiny policy or the model's ``hf_id``). The base weights load in
    the pilot's dtype; the adapters are initialised on CPU in fp32 and only then moved to
    the pilot's device, so a seed gives the same adapters on every device.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    shape = spec.policy or load_model_shape(spec.model)
    # the plan's own checks (race.preflight), so that the two never disagree
    inner_task = preflight.open_task(dict(spec.task), spec.eval_targets)
    folder = policy_folder or spec.policy_path or (
        build_tiny_policy(spec.model, recipe=warm_start_recipe(spec.model, dict(spec.task),
                                                               dict(spec.warmstart)))
        if in_family(shape.tokenizer) else shape.hf_id)
    key = preflight.policy_key(spec)
    source = str(folder)
    folder, revision = preflight.resolve_weights(source, spec.policy_revision, key=key)
    if preflight.is_local(source):
        preflight.check_policy_folder(folder, key=key)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:  # many base checkpoints pad with their EOS
            tokenizer.pad_token = tokenizer.eos_token
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(dtype))
    except Exception as error:  # OSError, ValueError, safetensors' own error, ...
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise UsageError(f"model.hf_id={folder}: could not load the policy ({first}); point "
                      f"model.hf_id at a Hugging Face model folder or id") from error
    learner = LoraLearner(model, shape, LearnerConfig.from_spec(spec),
                          pad_id=tokenizer.pad_token_id, seed=spec.seed, measure=spec.measure,
                          device=device)
    task = with_chat_template(inner_task, tokenizer)
    if spec.backend == "hf":
        # on a GPU, evaluation generates in batches no larger than a step's (the memory
        # plan's); on CPU in one batch (memory is plentiful, each call costs overhead)
        rows = spec.prompts_per_step * spec.group_size if device != "cpu" else 0
        backend = HFBackend(learner.model, tokenizer, shape, learner.lora, batch_rows=rows,
                            measure=spec.measure)
    elif spec.backend == "vllm":
        # sized from the cell: its longest prompt plus the cap, one step's P x G sequences
        # (on a GPU, its share beside the learner from the memory plan)
        size = engine_settings(spec, shape, dtype, device=device,
                               prompt_tokens=prompt_bound(task, tokenizer,
                                                          ("train", *spec.eval_targets)))
        backend = VLLMBackend(folder, shape, learner.lora, seed=spec.seed, dtype=dtype, **size)
    else:
        raise UsageError(f"pilot.backend={spec.backend!r}: use hf or vllm")
    reward = build_reward(dict(spec.reward), task, device=device, dtype=dtype,
                          shape=spec.reward_model,
                          family=(dict(spec.task), dict(spec.warmstart)))
    weights = {"policy": {"source": source, "revision": revision}}
    reward_source = getattr(spec.reward_model, "hf_id", "") if spec.reward_model else ""
    if reward_source and not preflight.is_local(reward_source):
        weights["reward"] = {"source": reward_source,
                             "revision": getattr(reward, "revision", "")}
    return Components(task, reward, learner, backend, tokenizer, weights)


def release_memory(device: str) -> None:
    """Free what a finished pilot held: collect its models and, on CUDA, return the cached
    blocks to the driver (a slot's next pilot starts from the same memory). A vLLM
    engine stays open for the next pilot; ``race.pilot.rollout.vllm.close_engine`` ends it."""
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def check_reward_format(spec: RunSpec, reward: Reward) -> None:
    """Refuse a reward model whose real input format adds more tokens per trace than the
    budget's worst case assumes (:class:`~race.errors.RewardFormatTooLong`)."""
    measure = getattr(reward, "overhead_tokens", None)
    if measure is None:
        return
    configured = int(dict(spec.reward).get("overhead_tokens") or 0)
    measured = measure()
    if measured > configured:
        raise RewardFormatTooLong(spec.reward_name, configured, measured)
