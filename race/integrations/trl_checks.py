"""What race.integrations.trl can count: the policy's and reward models' shapes, the LoRA
adapters, and the trainer settings it refuses (each in one line naming the fix).

peft is imported inside the function that needs it (heavy: the checks run before any model loads).
"""

from __future__ import annotations

from typing import Any

from race.core.specs import LAYER_MODULES, LoraShape, ModelShape
from race.errors import UsageError

# decoder families whose linears are RACE's seven per layer (race.core.shapes.LAYER_MODULES);
# tested on qwen2
MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")


def refuse(key: str, value: Any, why: str, fix: str) -> UsageError:
    return UsageError(f"{key}={value!r}: {why}; {fix}")


# --------------------------------------------------------------------------- shapes


def model_shape(config, *, head: str = "lm", name: str = "") -> ModelShape:
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_TYPES:
        raise refuse("model.config.model_type", model_type, "the RACE ledger knows the "
                      f"linears of {', '.join(MODEL_TYPES)} decoders only",
                      "use one of those families or drop race.integrations.trl.track")
    if getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None):
        raise refuse("model.config.num_experts", getattr(config, "num_experts", None)
                      or config.num_local_experts, "mixture-of-experts layers are not "
                      "counted", "use a dense model")
    return ModelShape.from_hf_config(config, name=name or getattr(config, "_name_or_path", ""),
                                     head=head)


def lora_shape(model, shape: ModelShape) -> LoraShape | None:
    """The LoRA adapters of a PEFT ``model`` (None: full fine-tuning of every weight).

    Raises UsageError for what the ledger does not count: another PEFT method, DoRA,
    trained modules besides the adapters, ranks that differ by module, adapters outside
    the decoder's seven linears or missing from some layer, or frozen weights without PEFT.
    """
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer
    except ImportError:  # no peft: full fine-tuning only
        PeftModel, LoraLayer = (), ()  # noqa: N806
    if not isinstance(model, PeftModel):
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
        if frozen:
            raise refuse("model (frozen parameters)", frozen[0], "full fine-tuning with "
                          "some weights frozen is not counted", "train every weight or "
                          "pass a LoRA model (peft_config=LoraConfig(...))")
        return None
    config = model.peft_config[model.active_adapter]
    if str(getattr(config.peft_type, "value", config.peft_type)) != "LORA":
        raise refuse("peft_config.peft_type", str(config.peft_type), "only LoRA adapters "
                      "are counted", "use peft.LoraConfig")
    if getattr(config, "use_dora", False):
        raise refuse("peft_config.use_dora", True, "DoRA's magnitude vectors are not "
                      "counted", "set use_dora=False")
    if getattr(config, "modules_to_save", None):
        raise refuse("peft_config.modules_to_save", list(config.modules_to_save),
                      "fully trained modules beside the adapters are not counted",
                      "train adapters only")
    layers = [(n.rsplit(".", 1)[-1], m) for n, m in model.named_modules()
              if isinstance(m, LoraLayer)]
    targets = {n for n, _ in layers}
    ranks = {m.r[model.active_adapter] for _, m in layers}
    unknown = sorted(targets - set(LAYER_MODULES))
    if unknown:
        raise refuse("peft_config.target_modules", unknown, "adapters outside the decoder "
                      f"linears {list(LAYER_MODULES)} are not counted", "target those only")
    if len(ranks) != 1 or len(layers) != shape.num_layers * len(targets):
        raise refuse("peft_config (rank_pattern / layers_to_transform)", sorted(ranks),
                      "the ledger counts one rank on the same modules of every layer",
                      "use one rank and adapt every layer")
    extra = [n for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n]
    if extra:
        raise refuse("trainable parameter", extra[0], "weights trained beside the LoRA "
                      "adapters are not counted", "freeze them")
    return LoraShape(ranks.pop(), tuple(m for m in LAYER_MODULES if m in targets))


def check_trainer(trainer) -> None:
    """Raise a one-line UsageError for a trainer whose FLOPs the ledger cannot count."""
    args = trainer.args
    if getattr(args, "use_vllm", False):
        mode = getattr(args, "vllm_mode", "server")
        raise refuse("GRPOConfig.use_vllm", True, f"vllm_mode={mode!r} samples in vLLM "
                      + ("on another server, whose kernels and prefix cache this process "
                         "never sees" if mode == "server" else "kernels that FlopCounterMode "
                         "cannot follow"), "set use_vllm=False (transformers generate)")
    checks = (("GRPOConfig.use_transformers_continuous_batching",
               getattr(args, "use_transformers_continuous_batching", False),
               "paged continuous batching is not counted", "set it to False"),
              ("GRPOConfig.use_liger_kernel", getattr(args, "use_liger_kernel", False),
               "Liger kernels replace the counted layers", "set use_liger_kernel=False"),
              ("GRPOTrainer(rollout_func=...)", getattr(trainer, "rollout_func", None),
               "custom rollouts generate outside the counted generate call",
               "drop rollout_func"),
              ("GRPOTrainer(tools=...)", getattr(trainer, "tools", None),
               "tool calls insert tokens the ledger does not see", "drop tools"),
              ("GRPOTrainer(environment_factory=...)",
               getattr(trainer, "environment_factories", None),
               "environments insert tokens the ledger does not see", "drop them"),
              ("vision inputs", getattr(trainer, "_is_vlm", False),
               "image tokens are not counted", "train a text-only model"))
    for key, value, why, fix in checks:
        if value:
            raise refuse(key, value if isinstance(value, bool) else type(value).__name__,
                          why, fix)
    processes = trainer.accelerator.num_processes
    if processes > 1 or trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        raise refuse("accelerate num_processes", processes, "the ledger counts one "
                      "process's tokens (no DeepSpeed, FSDP or data parallelism yet)",
                      "run on one process")
