"""Pure FLOP accounting for GRPO post-training, in two conventions.

No torch, no timing, no IO: plain integers from shapes and token counts.

Conventions (see docs/accounting.md, "FLOP conventions"):

* ``model`` (default for budgets and reports, backend-independent): 2 FLOPs per
  multiply-add of every matmul on real (unpadded) tokens. The output head costs its
  matmul only on positions whose output is computed (every position in training, one
  per generated token in generation). The embedding lookup is free. Attention costs
  ``4 * d_attn * c`` per layer and query, with causal ``c`` (query at 1-based position
  ``t`` attends ``t`` keys). Backward costs, per matmul, one forward for each operand
  that needs a gradient: 2x for trainable weights whose input needs a gradient, 1x for
  frozen weights (activation gradient only), 0x below the first trainable module.
* ``executed``: what the Hugging Face backend runs, equal to
  ``torch.utils.flop_counter.FlopCounterMode`` (CPU SDPA kernels registered): batches
  padded to their longest row, full ``Tq x Tk`` attention (the counter ignores causal
  masking), finished rows that keep decoding until the longest row ends, and SDPA
  backward at 2.5x the attention forward (it recomputes ``QK^T``).

Biases, norms, activations and softmax are elementwise and not counted in either
convention (FlopCounterMode counts only matmul-like ops; ``addmm`` counts its matmul).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from race.core.specs import LoraShape, ModelShape, PhaseFlops, RewardShape
from race.errors import RewardTokenizerMismatch, UsageError

Convention = Literal["model", "executed"]
CONVENTIONS: tuple[str, ...] = ("model", "executed")

# FlopCounterMode's SDPA backward counts 5 bmm (QK^T recompute, dP, dV, dQ, dK) against
# the forward's 2: torch.utils.flop_counter.sdpa_backward_flop_count.
SDPA_BACKWARD_FACTOR = 2.5


# --------------------------------------------------------------------------- checks


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise UsageError(f"convention={convention!r}: unknown FLOP convention; "
                         f"use one of {list(CONVENTIONS)}")


def _check_tokens(key: str, tokens: Sequence[int]) -> None:
    if len(tokens) == 0:
        raise UsageError(f"{key}=[]: needs at least one sequence")
    bad = [t for t in tokens if not isinstance(t, int) or t <= 0]
    if bad:
        raise UsageError(f"{key}={bad[0]!r}: token counts must be positive integers; "
                         f"pass the real length of each sequence (>= 1)")


# --------------------------------------------------------------------------- per-token pieces


def head_flops_per_position(shape: ModelShape) -> int:
    """Forward FLOPs of the output head on one position whose output is computed.

    lm: ``2 V d``; Qwen2.5-Math-PRM value head ``Linear(d, d) -> ReLU -> Linear(d, 2)``:
    ``2 (d^2 + 2 d)``; token/sequence classification ``Linear(d, labels)``: ``2 d labels``;
    RACE's tiny-PRM ``lm_verifier``: ``2 V d + 2 (d + 2) labels``.
    """
    d = shape.hidden_size
    if shape.head == "lm":
        return 2 * shape.vocab_size * d
    if shape.head == "prm_value":
        return 2 * (d * d + d * shape.num_labels)
    if shape.head == "lm_verifier":  # lm_head for token log-likelihoods + Linear(d + 2, labels)
        return 2 * shape.vocab_size * d + 2 * (d + 2) * shape.num_labels
    return 2 * d * shape.num_labels


def _adapter_rank(lora: LoraShape | None, module: str, adapters: bool) -> int:
    return lora.rank if adapters and lora is not None and module in lora.targets else 0


def linear_forward_flops_per_token(shape: ModelShape, lora: LoraShape | None = None,
                                   adapters: bool = True) -> int:
    """Forward FLOPs of all decoder-layer linears for one token: ``2 N`` plus LoRA adapters.

    Each adapter adds ``2 r (d_in + d_out)`` (A then B). ``adapters=False`` is the
    reference policy (PEFT's ``disable_adapter``), which runs the base weights only.
    """
    per_layer = 0
    for module, d_in, d_out in shape.linear_dims():
        rank = _adapter_rank(lora, module, adapters)
        per_layer += 2 * d_in * d_out + 2 * rank * (d_in + d_out)
    return shape.num_layers * per_layer


@dataclass(frozen=True, slots=True)
class _GradFlow:
    """Backward structure of one fine-tuning setup, independent of sequence lengths."""

    linear_backward_per_token: int  # all decoder linears (+ adapters), per token
    head_backward_per_position: int  # output head, per position
    attn_grads: tuple[tuple[bool, bool, bool], ...]  # per layer: (q, k, v) need grad


def _grad_flow(shape: ModelShape, lora: LoraShape | None,
               input_grad: bool = False) -> _GradFlow:
    """Follow which activations need gradients through the decoder, layer by layer.

    ``lora=None`` is full fine-tuning: every weight (embedding included) trains, so every
    activation needs a gradient. Under LoRA the embedding is frozen, so the residual
    stream needs no gradient until the first adapter; frozen linears then cost their
    activation gradient only (1x forward), adapters cost weight + input gradients.
    """
    full = lora is None
    dims = {m: (d_in, d_out) for m, d_in, d_out in shape.linear_dims()}
    backward = 0
    attn_grads = []
    # the residual stream entering layer 0 (embedding output); input_grad: it needs a
    # gradient anyway (transformers' enable_input_require_grads, set for checkpointing)
    stream_rg = full or input_grad

    def linear(module: str, input_rg: bool) -> bool:
        nonlocal backward
        d_in, d_out = dims[module]
        rank = _adapter_rank(lora, module, True)
        # base weight: input gradient if the input needs one, weight gradient if trainable
        backward += 2 * d_in * d_out * (int(input_rg) + int(full))
        if rank:
            # A: weight grad (+ input grad); B: weight grad + input grad (A's output)
            backward += 2 * d_in * rank * (1 + int(input_rg)) + 4 * rank * d_out
        return input_rg or full or bool(rank)

    for _ in range(shape.num_layers):
        q_rg = linear("q_proj", stream_rg)
        k_rg = linear("k_proj", stream_rg)
        v_rg = linear("v_proj", stream_rg)
        attn_grads.append((q_rg, k_rg, v_rg))
        o_rg = linear("o_proj", q_rg or k_rg or v_rg)
        stream_rg = stream_rg or o_rg
        gate_rg = linear("gate_proj", stream_rg)
        up_rg = linear("up_proj", stream_rg)
        down_rg = linear("down_proj", gate_rg or up_rg)
        stream_rg = stream_rg or down_rg
    head = head_flops_per_position(shape) * (int(stream_rg) + int(full))
    return _GradFlow(backward, head, tuple(attn_grads))


def _causal_keys(query_tokens: int, cached_tokens: int = 0) -> int:
    """Sum of keys attended by ``query_tokens`` causal queries after ``cached_tokens``."""
    return query_tokens * cached_tokens + query_tokens * (query_tokens + 1) // 2


def attention_flops(shape: ModelShape, query_key_pairs: int) -> int:
    """Attention forward FLOPs, all layers: ``4 L d_attn`` per (query, key) pair.

    ``QK^T`` and ``PV`` are ``2 d_attn`` each per pair (GQA shares K/V heads but every
    query head still does its own products).
    """
    return 4 * shape.num_layers * shape.d_attn * query_key_pairs


def _attention_backward(shape: ModelShape, flow: _GradFlow, query_key_pairs: int,
                        convention: Convention, fused_attention: bool) -> float:
    per_layer = attention_flops(shape, query_key_pairs) // shape.num_layers
    total = 0.0
    for q_rg, k_rg, v_rg in flow.attn_grads:
        if convention == "executed":
            # fused SDPA recomputes QK^T; eager/math attention is autograd over two bmm
            factor = SDPA_BACKWARD_FACTOR if fused_attention else 2.0
            total += factor * per_layer if (q_rg or k_rg or v_rg) else 0
        else:
            # each gradient matmul costs half the forward: dP (for dQ or dK), dV, dQ, dK
            grads = int(q_rg or k_rg) + int(v_rg) + int(q_rg) + int(k_rg)
            total += per_layer * grads / 2
    return total


def _layout(tokens: Sequence[int], convention: Convention) -> tuple[int, int, int]:
    """(positions, query-key pairs, rows) of full-sequence passes over ``tokens``."""
    if convention == "executed":
        rows, longest = len(tokens), max(tokens)
        return rows * longest, rows * longest * longest, rows
    return sum(tokens), sum(_causal_keys(t) for t in tokens), len(tokens)


# --------------------------------------------------------------------------- terms


def forward_flops(shape: ModelShape, seq_tokens: Sequence[int], *,
                  convention: Convention = "model", lora: LoraShape | None = None,
                  adapters: bool = True, outputs: Literal["all", "last"] = "all") -> int:
    """One forward pass without gradients over whole sequences (one padded batch).

    Used for old-policy and reference log-probs (``outputs="all"``) and reward models.

    Args:
        shape: the model.
        seq_tokens: real length of each sequence; under ``executed`` they form one batch
            padded to the longest.
        convention: ``model`` or ``executed``.
        lora: adapters on the model, if any; ``adapters=False`` runs the base only.
        outputs: head on every position or only the last one of each sequence.
    """
    _check_convention(convention)
    _check_tokens("seq_tokens", seq_tokens)
    positions, pairs, rows = _layout(seq_tokens, convention)
    head_positions = positions if outputs == "all" else rows
    return (linear_forward_flops_per_token(shape, lora, adapters) * positions
            + head_flops_per_position(shape) * head_positions
            + attention_flops(shape, pairs))


def prefill_flops(shape: ModelShape, prompt_tokens: Sequence[int], *,
                  convention: Convention = "model", lora: LoraShape | None = None) -> int:
    """Prompt processing of a ``generate`` call: every prompt position, one output each.

    Under ``executed``, prompts are left-padded to the longest and attention is the full
    padded square (a padding mask sends SDPA down its masked, non-causal path).
    """
    _check_tokens("prompt_tokens", prompt_tokens)
    return forward_flops(shape, prompt_tokens, convention=convention, lora=lora,
                         outputs="last")


def decode_flops(shape: ModelShape, prompt_tokens: Sequence[int],
                 new_tokens: Sequence[int], *, convention: Convention = "model",
                 lora: LoraShape | None = None, decode_steps: int | None = None) -> int:
    """Decode steps with a KV cache, after the prefill produced the first new token.

    A sequence of ``n`` new tokens needs ``n - 1`` one-token forward passes; step ``k``
    attends ``prompt + k`` cached keys and computes one head output.

    Under ``executed`` all rows run ``decode_steps - 1`` steps (default: the longest
    completion), finished rows included, against the left-padded prompt length.
    """
    _check_convention(convention)
    _check_tokens("prompt_tokens", prompt_tokens)
    _check_tokens("new_tokens", new_tokens)
    if len(prompt_tokens) != len(new_tokens):
        raise UsageError(f"new_tokens: {len(new_tokens)} completions for "
                         f"{len(prompt_tokens)} prompts; pass one count per sequence")
    per_token = linear_forward_flops_per_token(shape, lora) + head_flops_per_position(shape)
    if convention == "executed":
        rows, prompt, steps = len(prompt_tokens), max(prompt_tokens), (
            decode_steps if decode_steps is not None else max(new_tokens))
        if steps < max(new_tokens):
            raise UsageError(f"decode_steps={steps}: fewer than the longest completion "
                             f"({max(new_tokens)})")
        pairs = rows * _causal_keys(steps - 1, prompt)
        return rows * (steps - 1) * per_token + attention_flops(shape, pairs)
    steps_total = sum(n - 1 for n in new_tokens)
    pairs = sum(_causal_keys(n - 1, p) for p, n in zip(prompt_tokens, new_tokens))
    return steps_total * per_token + attention_flops(shape, pairs)


def generate_flops(shape: ModelShape, prompt_tokens: Sequence[int],
                   new_tokens: Sequence[int], *, convention: Convention = "model",
                   lora: LoraShape | None = None, decode_steps: int | None = None) -> int:
    """One batched ``generate`` call: :func:`prefill_flops` + :func:`decode_flops`."""
    return (prefill_flops(shape, prompt_tokens, convention=convention, lora=lora)
            + decode_flops(shape, prompt_tokens, new_tokens, convention=convention,
                           lora=lora, decode_steps=decode_steps))


def _train_flops(shape: ModelShape, seq_tokens: Sequence[int], lora: LoraShape | None,
                 convention: Convention, fused_attention: bool) -> float:
    _check_convention(convention)
    _check_tokens("seq_tokens", seq_tokens)
    if lora is not None:
        lora.validate(shape)
    flow = _grad_flow(shape, lora)
    positions, pairs, _ = _layout(seq_tokens, convention)
    forward = forward_flops(shape, seq_tokens, convention=convention, lora=lora)
    backward = ((flow.linear_backward_per_token + flow.head_backward_per_position) * positions
                + _attention_backward(shape, flow, pairs, convention, fused_attention))
    return forward + backward


def train_flops(shape: ModelShape, seq_tokens: Sequence[int], *,
                convention: Convention = "model", fused_attention: bool = True) -> float:
    """Full fine-tuning forward + backward (every weight trains), head on every position.

    Backward is 2x forward for every matmul, including the output head (the tied
    embedding gets its gradient there). Attention backward: 2x (model) or SDPA's 2.5x
    (executed; ``fused_attention=False`` for eager or math attention, which is 2x).
    """
    return _train_flops(shape, seq_tokens, None, convention, fused_attention)


def lora_train_flops(shape: ModelShape, seq_tokens: Sequence[int], lora: LoraShape, *,
                     convention: Convention = "model", fused_attention: bool = True) -> float:
    """LoRA forward + backward with frozen base weights, head on every position.

    Frozen linears cost only their activation gradient (1x), and nothing below the first
    adapter (the frozen embedding needs no input gradient). Each adapter's A and B cost
    their weight gradients, plus input gradients where the input needs one. Attention
    backward counts only the gradients it needs (model) or SDPA's 2.5x (executed) in
    layers where q, k or v needs a gradient (2x with ``fused_attention=False``).
    """
    return _train_flops(shape, seq_tokens, lora, convention, fused_attention)


def decoder_backward_flops(shape: ModelShape, seq_tokens: Sequence[int],
                           lora: LoraShape | None = None, *, convention: Convention = "model",
                           fused_attention: bool = True, input_grad: bool = False) -> float:
    """The backward pass of the decoder layers alone: everything :func:`lora_train_flops`
    (``lora`` given) or :func:`train_flops` (``lora=None``) adds to the forward pass except
    the output head's gradients.

    For trainers whose output head runs its own kernel, e.g. a chunked log-prob head that
    recomputes its logits in the backward pass (TRL's ``GRPOTrainer``); the caller adds that
    head's cost. Same conventions and ``fused_attention`` as :func:`lora_train_flops`;
    ``input_grad``: the embedding output needs a gradient although the embedding is frozen
    (``enable_input_require_grads``, which PEFT models get for gradient checkpointing), so
    frozen linears below the first adapter compute their input gradients too.
    """
    _check_convention(convention)
    _check_tokens("seq_tokens", seq_tokens)
    if lora is not None:
        lora.validate(shape)
    flow = _grad_flow(shape, lora, input_grad)
    positions, pairs, _ = _layout(seq_tokens, convention)
    return (flow.linear_backward_per_token * positions
            + _attention_backward(shape, flow, pairs, convention, fused_attention))


def reward_flops(reward: RewardShape, seq_tokens: Sequence[int],
                 step_tags: Sequence[int] | None = None, *,
                 convention: Convention = "model") -> int:
    """Reward evaluation of scored sequences (prompt + completion).

    ``rule``: 0 FLOPs (a verifier, no model). ``prm``: one forward over each trace plus
    one step-tag token per step, value head on every position. ``orm``: one forward per
    trace, score head on the last position (model) or on every position, as Hugging
    Face's sequence classifiers compute it (executed).
    """
    if reward.kind == "rule" or reward.model is None:
        return 0
    tokens = list(seq_tokens)
    if reward.kind == "prm":
        tags = list(step_tags) if step_tags is not None else [0] * len(tokens)
        if len(tags) != len(tokens) or any(t < 0 for t in tags):
            raise UsageError(f"step_tags={tags}: pass one non-negative step count per trace")
        tokens = [t + s for t, s in zip(tokens, tags)]
    outputs = "last" if reward.kind == "orm" and convention == "model" else "all"
    return forward_flops(reward.model, tokens, convention=convention, outputs=outputs)


# --------------------------------------------------------------------------- one GRPO step


def check_reward_matches(policy: ModelShape, reward: RewardShape) -> None:
    """A PRM scores the policy's own tokens, so both must share a tokenizer."""
    if reward.kind != "prm" or reward.model is None:
        return
    theirs, ours = reward.model, policy
    same = (theirs.tokenizer == ours.tokenizer if theirs.tokenizer and ours.tokenizer
            else theirs.vocab_size == ours.vocab_size)
    if not same:
        raise RewardTokenizerMismatch(reward.name, policy.name, theirs.tokenizer,
                                      ours.tokenizer, detail=f" (vocab {theirs.vocab_size})")


def grpo_step_flops(policy: ModelShape, reward: RewardShape, *, prompts_per_step: int,
                    group_size: int, prompt_tokens: int, completion_tokens: int,
                    max_new_tokens: int | None = None, update_epochs: int = 1,
                    minibatch_size: int | None = None, kl_coef: float = 0.0,
                    lora: LoraShape | None = None, steps_per_trace: int | None = None,
                    old_logprobs: bool | None = None,
                    convention: Convention = "model") -> PhaseFlops:
    """FLOPs of one GRPO step of a cell, from nominal token counts.

    Rollout: one ``generate`` of ``prompts_per_step * group_size`` completions. Feedback:
    the reward model on every trace. Learning: old-policy log-probs (needed when the
    policy moves before a batch is used: ``update_epochs > 1`` or several minibatches;
    ``old_logprobs`` forces it), reference log-probs with adapters disabled when
    ``kl_coef > 0``, and ``update_epochs`` passes of forward + backward over every trace.

    Under ``executed`` every row is padded to ``max_new_tokens`` (the longest row of a
    batch sets the decode steps and the training padding). Under ``model`` each
    completion is ``completion_tokens`` long (the mean realized length).
    """
    _check_convention(convention)
    for key, value in (("grid.prompts_per_step", prompts_per_step),
                       ("task.prompt_tokens", prompt_tokens),
                       ("grid.completion_tokens", completion_tokens),
                       ("grid.update_epochs", update_epochs)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{key}={value!r}: must be an integer >= 1")
    if not isinstance(group_size, int) or group_size < 2:
        raise UsageError(f"grid.group_size={group_size!r}: GRPO needs >= 2 samples per "
                         f"prompt for a group baseline; use e.g. grid.group_size=8")
    max_new_tokens = completion_tokens if max_new_tokens is None else max_new_tokens
    if max_new_tokens < completion_tokens:
        raise UsageError(f"grid.max_new_tokens={max_new_tokens}: smaller than "
                         f"grid.completion_tokens={completion_tokens}; raise max_new_tokens "
                         f"or lower completion_tokens")
    rows = prompts_per_step * group_size
    minibatch = rows if minibatch_size is None else minibatch_size
    if minibatch < 1 or rows % minibatch:
        raise UsageError(f"grid.minibatch_size={minibatch_size}: must divide the rollout "
                         f"batch prompts_per_step x group_size = {rows}; use a divisor "
                         f"such as {rows // 2 if rows % 2 == 0 else rows}")
    if kl_coef < 0:
        raise UsageError(f"grid.kl_coef={kl_coef}: must be >= 0 (0 disables the KL term)")
    if lora is not None:
        lora.validate(policy)
    check_reward_matches(policy, reward)

    length = max_new_tokens if convention == "executed" else completion_tokens
    prompts, completions = [prompt_tokens] * rows, [length] * rows
    traces = [prompt_tokens + length] * rows
    batch = traces[:minibatch]
    batches = rows // minibatch

    rollout = generate_flops(policy, prompts, completions, convention=convention, lora=lora)
    tags = steps_per_trace if steps_per_trace is not None else reward.steps_per_trace
    feedback = reward_flops(reward, traces, [tags] * rows, convention=convention)

    if lora is None:
        update = train_flops(policy, batch, convention=convention)
    else:
        update = lora_train_flops(policy, batch, lora, convention=convention)
    learning = update_epochs * batches * update
    if old_logprobs if old_logprobs is not None else (update_epochs > 1 or batches > 1):
        learning += batches * forward_flops(policy, batch, convention=convention, lora=lora)
    if kl_coef > 0:
        learning += batches * forward_flops(policy, batch, convention=convention, lora=lora,
                                            adapters=False)
    return PhaseFlops(rollout=float(rollout), learning=float(learning), feedback=float(feedback))


def eval_flops(policy: ModelShape, reward: RewardShape, *, problems: int, prompt_tokens: int,
               max_new_tokens: int, lora: LoraShape | None = None,
               steps_per_trace: int | None = None, convention: Convention = "model") -> float:
    """Held-out evaluation of ``problems`` problems at one checkpoint: one greedy
    ``generate`` of each at ``prompt_tokens`` and ``max_new_tokens`` completion tokens,
    and the reward scoring each trace (what the pilot charges to its eval phase).

    The rollout's own terms (:func:`generate_flops`, :func:`reward_flops`, the adapter
    the policy samples with), every completion at the cap: an upper-ish bound, since
    greedy completions that stop at EOS cost less (``executed`` pads them to the longest
    row of their batch, so it is near the bound).
    """
    if problems < 0:
        raise UsageError(f"problems={problems}: must be >= 0 problems per evaluation")
    per_problem = (generate_flops(policy, [prompt_tokens], [max_new_tokens],
                                  convention=convention, lora=lora)
                   + reward_flops(reward, [prompt_tokens + max_new_tokens],
                                  [steps_per_trace if steps_per_trace is not None
                                   else reward.steps_per_trace], convention=convention))
    return float(problems * per_problem)


def reward_extra_tokens(reward: Mapping[str, Any], steps: int | None = None) -> int:
    """Tokens a reward adds to each scored trace beyond its prompt and completion.

    Args:
        reward: a ``conf/reward`` entry (``RunSpec.reward`` as a dict).
        steps: reasoning steps of the trace (default: ``max_steps``, the worst case).
    """
    if reward.get("kind", "rule") == "rule" or not reward.get("model"):
        return 0
    steps = int(reward.get("max_steps") or 0) if steps is None else steps
    return int(reward.get("overhead_tokens") or 0) + steps * int(
        reward.get("tag_tokens_per_step") or 0)
