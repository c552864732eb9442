"""A pilot's GPU memory, estimated from shapes before anything loads (``race plan``).

Pure arithmetic on :class:`~race.core.shapes.ModelShape` (no torch). The estimate is the peak
of three moments of a GRPO step, on top of what stays resident the whole time:

* **resident**: the policy's frozen weights in the pilot's dtype; the LoRA adapters,
  their gradients and AdamW's two moments in fp32; a reward model's weights.
* **rollout** (HF ``generate``): the KV cache of one step's P x G sequences at prompt +
  cap tokens, and the logits ``generate`` keeps for every decode step (what the sampled
  tokens' log-probs are read from), plus one fp32 ``[rows, V]`` slice at a time.
* **learning**: the activations autograd keeps for one forward/backward pass of
  ``micro_batch_size`` completions (per token and layer: the inputs of the norms, the
  projections and the SwiGLU, fused attention keeping no ``T x T`` scores), the final
  hidden states and their gradient, and one chunk of the output head's logits (the
  learner never holds ``[tokens, V]`` logits: :func:`learning_bytes`).
* **feedback**: a reward model's forward on a batch of 8 traces (no gradients).

With ``pilot.backend=vllm`` (``plan_memory(backend="vllm")``) the rollout phase runs in a
vLLM engine beside the learner, and the plan holds its share instead (:func:`engine_bytes`):

* **engine**: vLLM's own copy of the policy's weights and one adapter slot in the pilot's
  dtype, its paged KV cache for one step's P x G sequences at prompt + cap tokens
  (:func:`engine_kv_bytes`), its working set (one scheduler batch of activations and the
  sampler's fp32 logits) and a fixed allowance for the engine process (CUDA context,
  CUDA graphs). It counts as held the whole step: vLLM's sleep mode frees it while the
  learner works, a margin the plan does not count on. ``rollout`` is then 0: the learner's
  process holds nothing while vLLM generates.

Measured against ``torch.cuda.max_memory_allocated`` on one GPU, it lands within the
factor that the docs report (docs/gpus.md); treat it as a plan, not a promise.
"""

from __future__ import annotations

from dataclasses import dataclass

from race.core.specs import LoraShape, ModelShape

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
PRM_BATCH = 8  # traces per reward-model forward (race.rewards.qwen_prm's default)
# float32 logits of one chunk of positions through the learner's output head (256 MiB)
LOGITS_CHUNK_BYTES = 2**28
# A vLLM engine on a GPU (race.pilot.rollout.vllm sets or keeps these): its KV cache is
# paged in blocks of this many tokens; its scheduler runs at most ENGINE_MAX_SEQS
# sequences (or a step's P x G, when more) and ENGINE_BATCHED_TOKENS tokens per forward
# (vLLM's default for the LLM class on 70+ GiB GPUs; 8192 on smaller ones)
KV_BLOCK_TOKENS = 16
ENGINE_MAX_SEQS = 256
ENGINE_BATCHED_TOKENS = 16384
# the engine process's CUDA context, cuBLAS workspace and CUDA graphs: an allowance read
# from vLLM's docs and logs of other machines, not measured here (docs/gpus.md)
ENGINE_FIXED_BYTES = GIB


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Bytes of a pilot's resident state and of its three step phases' working sets."""

    resident: float
    rollout: float
    learning: float
    feedback: float
    # a vLLM engine's share of the GPU, held beside the learner (0: pilot.backend=hf)
    engine: float = 0.0

    @property
    def peak(self) -> float:
        """The largest moment: resident (and the engine's share) plus the largest phase."""
        return self.resident + self.engine + max(self.rollout, self.learning, self.feedback)

    def gib(self) -> dict[str, float]:
        return {"resident": self.resident / GIB, "rollout": self.rollout / GIB,
                "learning": self.learning / GIB, "feedback": self.feedback / GIB,
                "engine": self.engine / GIB, "peak": self.peak / GIB}


def lora_params(shape: ModelShape, lora: LoraShape) -> int:
    """Trainable parameters of the adapters: ``rank x (d_in + d_out)`` per wrapped linear."""
    return shape.num_layers * sum(lora.rank * (d_in + d_out)
                                  for module, d_in, d_out in shape.linear_dims()
                                  if module in lora.targets)


def kv_bytes_per_token(shape: ModelShape, dtype: str) -> int:
    """KV-cache bytes of one token: keys and values of every layer's KV heads."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * DTYPE_BYTES[dtype]


def engine_kv_bytes(policy: ModelShape, dtype: str, *, sequences: int, seq_tokens: int,
                    block_tokens: int = KV_BLOCK_TOKENS) -> int:
    """A paged KV cache that holds ``sequences`` of ``seq_tokens`` each, every sequence
    rounded up to whole blocks of ``block_tokens`` (vLLM allocates whole blocks)."""
    blocks = -(-seq_tokens // block_tokens)
    return max(sequences, 1) * blocks * block_tokens * kv_bytes_per_token(policy, dtype)


def engine_bytes(policy: ModelShape, lora: LoraShape, *, dtype: str, rows: int,
                 seq_tokens: int) -> float:
    """A vLLM engine's share of the GPU for a step of ``rows`` sequences of up to
    ``seq_tokens`` (see the module docstring): weights and one adapter slot of
    ``lora.rank`` (vLLM rounds the rank up to one it accepts: a few MB more) in ``dtype``,
    the KV cache, one scheduler batch of no-grad activations (:data:`ENGINE_BATCHED_TOKENS`
    tokens, per token the largest layer's inputs and outputs: the SwiGLU's gate, up and
    product, q/k/v and the residual), two fp32 ``[seqs, V]`` logits of the sampler, and
    :data:`ENGINE_FIXED_BYTES`."""
    width = DTYPE_BYTES[dtype]
    weights = (policy.total_params + lora_params(policy, lora)) * width
    kv = engine_kv_bytes(policy, dtype, sequences=rows, seq_tokens=seq_tokens)
    seqs = max(rows, ENGINE_MAX_SEQS)
    per_token = (2 * policy.hidden_size + 3 * policy.intermediate_size + policy.d_attn
                 + 2 * policy.d_kv)
    working = (max(ENGINE_BATCHED_TOKENS, seqs) * per_token * width
               + 2 * seqs * policy.vocab_size * 4)
    return float(weights + kv + working + ENGINE_FIXED_BYTES)


def _layer_activation_values(shape: ModelShape) -> int:
    """Values autograd keeps per token and decoder layer (both norms' inputs and outputs,
    q/k/v before and after RoPE, the attention output and its projection, the SwiGLU's
    gate, up, product and output)."""
    d, i = shape.hidden_size, shape.intermediate_size
    return 6 * d + 3 * shape.d_attn + 3 * shape.d_kv + 4 * i


def head_chunk_positions(vocab_size: int) -> int:
    """Positions per chunk of the learner's output head: as many as keep one chunk's
    float32 logits within :data:`LOGITS_CHUNK_BYTES`
    (``race.core.logprobs.head_token_logprobs``)."""
    return max(1, LOGITS_CHUNK_BYTES // (4 * vocab_size))


def learning_bytes(policy: ModelShape, tokens: int, dtype: str) -> float:
    """Working set of one learner forward/backward pass over ``tokens`` (padded) positions.

    Per token: every layer's activations (:func:`_layer_activation_values`), and the final
    norm's input and output plus the head's hidden-state gradient (``[d]`` each in the
    pilot's dtype, one float32 copy of the gradient in the backward). Once per pass: one
    chunk of the head, its float32 logits and one copy in the pilot's dtype (the head's
    output before the upcast, the gradient cast back for its matmul); no ``[tokens, V]``
    logits are ever held.
    """
    width = DTYPE_BYTES[dtype]
    per_token = (policy.num_layers * _layer_activation_values(policy) * width
                 + policy.hidden_size * (3 * width + 4))
    head = head_chunk_positions(policy.vocab_size) * policy.vocab_size * (4 + width)
    return float(tokens * per_token + head)


def micro_rows_that_fit(policy: ModelShape, *, seq_tokens: int, dtype: str,
                        free_bytes: float) -> int:
    """Most completions of ``seq_tokens`` (padded) per learner pass whose
    :func:`learning_bytes` fit in ``free_bytes``; at least 1."""
    fixed = learning_bytes(policy, 0, dtype)
    per_row = learning_bytes(policy, seq_tokens, dtype) - fixed
    return max(1, int((free_bytes - fixed) // per_row))


def plan_memory(policy: ModelShape, lora: LoraShape, *, dtype: str, rows: int,
                micro_rows: int, prompt_tokens: int, max_new_tokens: int,
                reward_model: ModelShape | None = None, backend: str = "hf") -> MemoryPlan:
    """Estimated bytes of one pilot of ``policy`` (see the module docstring).

    Args:
        rows: completions per GRPO step (prompts_per_step x group_size).
        micro_rows: completions per forward/backward pass (the micro-batch).
        prompt_tokens, max_new_tokens: the longest sequence is their sum.
        reward_model: a reward model's shape (None: a rule verifier).
        backend: the rollout backend (``pilot.backend``): ``hf`` generates in the
            learner's model (the rollout phase); ``vllm`` in an engine beside it (the
            engine's share, :func:`engine_bytes`; no rollout phase in the learner).
    """
    if backend not in ("hf", "vllm"):
        raise ValueError(f"pilot.backend={backend!r}: use hf or vllm")
    width = DTYPE_BYTES[dtype]
    seq = prompt_tokens + max_new_tokens
    vocab = policy.vocab_size
    adapters = lora_params(policy, lora)
    resident = policy.total_params * width + 4 * 4 * adapters  # weights, A+grad+2 moments
    if reward_model is not None:
        resident += reward_model.total_params * width
    rollout = (rows * seq * kv_bytes_per_token(policy, dtype)
               + rows * max_new_tokens * vocab * width + rows * vocab * 4)
    learning = learning_bytes(policy, micro_rows * seq, dtype)
    feedback = 0.0
    if reward_model is not None:
        feedback = (PRM_BATCH * seq * (_layer_activation_values(reward_model)
                                       + reward_model.hidden_size) * width)
    engine = 0.0
    if backend == "vllm":
        engine = engine_bytes(policy, lora, dtype=dtype, rows=rows, seq_tokens=seq)
        rollout = 0.0
    return MemoryPlan(float(resident), float(rollout), float(learning), float(feedback),
                      float(engine))
