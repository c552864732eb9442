"""Pure FLOP accounting for GRPO post-training, in two conventions.

No torch, no timing, no IO: plain integers from shapes and token counts.

Conventions (see docs/accounting.md, "FLOP conventions"):

* ``model`` (default for budgets and reports, backend-independent): 2 FLOPs per
  multiply-add of every matmul on real (unpadded) tokens. The output head costs its
  matmul only on positions whose output is computed (every position in training, one
  per generated token in generation). The embedding lookup is free. Attention costs
  ``4 * d_attn * c`` per layer and query, with causal ``c`` (query at 1-based position
  ``t`` attends ``t`` keys; ``min(t, window)`` in a sliding-window layer). Backward
  costs, per matmul, one forward for each operand that needs a gradient: 2x for
  trainable weights whose input needs a gradient, 1x for frozen weights (activation
  gradient only), 0x below the first trainable module.
* ``executed``: what the Hugging Face backend runs, equal to
  ``torch.utils.flop_counter.FlopCounterMode`` (CPU SDPA kernels registered): batches
  padded to their longest row, full ``Tq x Tk`` attention (the counter ignores causal
  and sliding-window masks; a decode step's sliding-window layers attend their cache, at
  most the window), finished rows that keep decoding until the longest row ends, and SDPA
  backward at 2.5x the attention forward (it recomputes ``QK^T``).

Biases, norms, activations and softmax are elementwise and not counted in either
convention (FlopCounterMode counts only matmul-like ops; ``addmm`` counts its matmul).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from race.core.flop_terms import (
    Convention,
    Pairs,
    attention_backward,
    attention_flops,
    causal_keys,
    grad_flow,
    head_flops_per_position,
    layout,
    linear_forward_flops_per_token,
    window_keys,
)
from race.core.knobs import check_knob
from race.core.specs import (
    CONVENTIONS,
    LoraShape,
    ModelShape,
    PhaseFlops,
    RewardShape,
    RunSpec,
)
from race.errors import RewardTokenizerMismatch, UsageError

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
    positions, pairs, rows = layout(seq_tokens, convention, shape.sliding_window)
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
    attends ``prompt + k`` cached keys and computes one head output; in a sliding-window
    layer at most ``window`` of them (its cache keeps the last ``window - 1`` keys and
    appends the new one, so this holds under ``executed`` too).

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
        window = shape.sliding_window
        pairs = Pairs(causal_keys(steps - 1, prompt), window_keys(steps - 1, prompt, window))
        return rows * (steps - 1) * per_token + attention_flops(shape, pairs.scale(rows))
    steps_total = sum(n - 1 for n in new_tokens)
    pairs = Pairs(sum(causal_keys(n - 1, p) for p, n in zip(prompt_tokens, new_tokens)),
                  sum(window_keys(n - 1, p, shape.sliding_window)
                      for p, n in zip(prompt_tokens, new_tokens)))
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
    flow = grad_flow(shape, lora)
    positions, pairs, _ = layout(seq_tokens, convention, shape.sliding_window)
    forward = forward_flops(shape, seq_tokens, convention=convention, lora=lora)
    backward = ((flow.linear_backward_per_token + flow.head_backward_per_position) * positions
                + attention_backward(shape, flow, pairs, convention, fused_attention))
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
    flow = grad_flow(shape, lora, input_grad)
    positions, pairs, _ = layout(seq_tokens, convention, shape.sliding_window)
    return (flow.linear_backward_per_token * positions
            + attention_backward(shape, flow, pairs, convention, fused_attention))


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


def minibatch_problem(minibatch_size: int | None, prompts_per_step: int,
                      group_size: int) -> str:
    """The rule of ``grid.minibatch_size`` (null: the whole rollout batch): it divides the
    rollout batch ``prompts_per_step x group_size``. "" when it holds, else the message."""
    rows = prompts_per_step * group_size
    minibatch = rows if minibatch_size is None else minibatch_size
    if minibatch >= 1 and rows % minibatch == 0:
        return ""
    return (f"grid.minibatch_size={minibatch_size}: must divide the rollout batch "
            f"prompts_per_step x group_size = {rows}; use a divisor such as "
            f"{rows // 2 if rows % 2 == 0 else rows}")


def grpo_step_flops(policy: ModelShape, reward: RewardShape, *, prompts_per_step: int,
                    group_size: int, prompt_tokens: int, completion_tokens: int,
                    max_new_tokens: int | None = None, update_epochs: int = 1,
                    minibatch_size: int | None = None, kl_coef: float = 0.0,
                    lora: LoraShape | None = None,
                    extra_tokens_per_trace: int | None = None, old_logprobs: bool | None = None,
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
    for key, value in (("task.prompt_tokens", prompt_tokens),
                       ("grid.completion_tokens", completion_tokens)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{key}={value!r}: must be an integer >= 1")
    for name, value in (("prompts_per_step", prompts_per_step), ("group_size", group_size),
                        ("update_epochs", update_epochs), ("kl_coef", kl_coef)):
        check_knob(RunSpec, name, value)  # the rule the config's validation applies
    max_new_tokens = completion_tokens if max_new_tokens is None else max_new_tokens
    if max_new_tokens < completion_tokens:
        raise UsageError(f"grid.max_new_tokens={max_new_tokens}: smaller than "
                         f"grid.completion_tokens={completion_tokens}; raise max_new_tokens "
                         f"or lower completion_tokens")
    rows = prompts_per_step * group_size
    minibatch = rows if minibatch_size is None else minibatch_size
    problem = minibatch_problem(minibatch_size, prompts_per_step, group_size)
    if problem:
        raise UsageError(problem)
    if lora is not None:
        lora.validate(policy)
    check_reward_matches(policy, reward)

    length = max_new_tokens if convention == "executed" else completion_tokens
    prompts, completions = [prompt_tokens] * rows, [length] * rows
    traces = [prompt_tokens + length] * rows
    batch = traces[:minibatch]
    batches = rows // minibatch

    rollout = generate_flops(policy, prompts, completions, convention=convention, lora=lora)
    extra = (extra_tokens_per_trace if extra_tokens_per_trace is not None
             else reward.extra_tokens_per_trace)
    feedback = reward_flops(reward, traces, [extra] * rows, convention=convention)

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
               extra_tokens_per_trace: int | None = None,
               convention: Convention = "model") -> float:
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
                                  [extra_tokens_per_trace if extra_tokens_per_trace
                                   is not None else reward.extra_tokens_per_trace],
                                  convention=convention))
    return float(problems * per_problem)


def reward_extra_tokens(reward: Mapping[str, Any], steps: int | None = None) -> int:
    """Tokens a reward adds to each scored trace beyond its prompt and completion.

    Args:
        reward: a ``race/conf/reward`` entry (``RunSpec.reward`` as a dict).
        steps: reasoning steps of the trace (default: ``max_steps``, the worst case).
    """
    if reward.get("kind", "rule") == "rule" or not reward.get("model"):
        return 0
    steps = int(reward.get("max_steps") or 0) if steps is None else steps
    return int(reward.get("overhead_tokens") or 0) + steps * int(
        reward.get("tag_tokens_per_step") or 0)
