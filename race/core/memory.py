"""A pilot's GPU memory, estimated from shapes before anything loads (``race plan``).

Pure arithmetic on :class:`~race.core.specs.ModelShape` (no torch). The estimate is the peak
of three moments of a GRPO step, on top of what stays resident the whole time:

* **resident**: the policy's frozen weights in the pilot's dtype; the LoRA adapters,
  their gradients and AdamW's two moments in fp32; a reward model's weights.
* **rollout** (HF ``generate``): the KV cache of one step's P x G sequences at prompt +
  cap tokens, and the logits ``generate`` keeps for every decode step (what the sampled
  tokens' log-probs are read from), plus one fp32 ``[rows, V]`` slice at a time.
* **learning**: the activations autograd keeps for one forward/backward pass of
  ``micro_batch_size`` completions (per token and layer: the inputs of the norms, the
  projections and the SwiGLU, fused attention keeping no ``T x T`` scores), the logits
  and their gradient in the pilot's dtype, and the fp32 copy of each row's logits that
  the log-softmax keeps.
* **feedback**: a reward model's forward on a batch of 8 traces (no gradients).

Measured against ``torch.cuda.max_memory_allocated`` on one GPU, it lands within the
factor that the docs report (docs/gpus.md); treat it as a plan, not a promise.
"""

from __future__ import annotations

from dataclasses import dataclass

from race.core.specs import LoraShape, ModelShape

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
PRM_BATCH = 8  # traces per reward-model forward (race.rewards.qwen_prm's default)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Bytes of a pilot's resident state and of its three step phases' working sets."""

    resident: float
    rollout: float
    learning: float
    feedback: float

    @property
    def peak(self) -> float:
        """The largest moment: resident plus the largest phase."""
        return self.resident + max(self.rollout, self.learning, self.feedback)

    def gib(self) -> dict[str, float]:
        return {"resident": self.resident / GIB, "rollout": self.rollout / GIB,
                "learning": self.learning / GIB, "feedback": self.feedback / GIB,
                "peak": self.peak / GIB}


def lora_params(shape: ModelShape, lora: LoraShape) -> int:
    """Trainable parameters of the adapters: ``rank x (d_in + d_out)`` per wrapped linear."""
    return shape.num_layers * sum(lora.rank * (d_in + d_out)
                                  for module, d_in, d_out in shape.linear_dims()
                                  if module in lora.targets)


def kv_bytes_per_token(shape: ModelShape, dtype: str) -> int:
    """KV-cache bytes of one token: keys and values of every layer's KV heads."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * DTYPE_BYTES[dtype]


def _layer_activation_values(shape: ModelShape) -> int:
    """Values autograd keeps per token and decoder layer (both norms' inputs and outputs,
    q/k/v before and after RoPE, the attention output and its projection, the SwiGLU's
    gate, up, product and output)."""
    d, i = shape.hidden_size, shape.intermediate_size
    return 6 * d + 3 * shape.d_attn + 3 * shape.d_kv + 4 * i


def plan_memory(policy: ModelShape, lora: LoraShape, *, dtype: str, rows: int,
                micro_rows: int, prompt_tokens: int, max_new_tokens: int,
                reward_model: ModelShape | None = None) -> MemoryPlan:
    """Estimated bytes of one pilot of ``policy`` (see the module docstring).

    Args:
        rows: completions per GRPO step (prompts_per_step x group_size).
        micro_rows: completions per forward/backward pass (the micro-batch).
        prompt_tokens, max_new_tokens: the longest sequence is their sum.
        reward_model: a reward model's shape (None: a rule verifier).
    """
    width = DTYPE_BYTES[dtype]
    seq = prompt_tokens + max_new_tokens
    vocab = policy.vocab_size
    adapters = lora_params(policy, lora)
    resident = policy.total_params * width + 4 * 4 * adapters  # weights, A+grad+2 moments
    if reward_model is not None:
        resident += reward_model.total_params * width
    rollout = (rows * seq * kv_bytes_per_token(policy, dtype)
               + rows * max_new_tokens * vocab * width + rows * vocab * 4)
    tokens = micro_rows * seq
    learning = (policy.num_layers * tokens * _layer_activation_values(policy) * width
                + 2 * tokens * vocab * width + tokens * vocab * 4)
    feedback = 0.0
    if reward_model is not None:
        feedback = (PRM_BATCH * seq * (_layer_activation_values(reward_model)
                                       + reward_model.hidden_size) * width)
    return MemoryPlan(float(resident), float(rollout), float(learning), float(feedback))
