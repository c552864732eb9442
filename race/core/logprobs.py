"""Log-probabilities of sampled tokens: from full logits (:func:`token_logprobs`), or
through the lm-head in chunks of positions without ever holding ``[B, T, V]`` logits
(:func:`head_token_logprobs`), equal to the first to the bit.

Pure tensor maths, no IO and no models (``tests/test_grpo.py`` checks them by hand and by
gradcheck). Notation as in :mod:`race.core.grpo`: ``B`` rows, ``T`` positions, ``V``
vocabulary entries, ``d`` hidden width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from race.core.grpo import float_dtype


def _check_ids(ids: Tensor, vocab: int) -> None:
    if ids.shape[1] < 2:
        raise ValueError(f"ids.shape={tuple(ids.shape)}: T must be >= 2; position t "
                         f"predicts ids[:, t + 1], so one token has nothing to score")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"ids.dtype={ids.dtype}: must be an integer dtype; pass "
                         f"ids.long()")
    if bool((ids < 0).any()) or bool((ids >= vocab).any()):
        raise ValueError(f"ids: values must lie in [0, V) = [0, {vocab}) "
                         f"(got min {int(ids.min())}, max {int(ids.max())}); check the "
                         f"tokenizer matches the model's vocabulary")


def token_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    """Log-probability of each next token: ``log_softmax(logits[:, t])[ids[:, t + 1]]``.

    A causal LM's output at position ``t`` predicts token ``t + 1``, so the result is
    one shorter than ``ids`` and entry ``t`` belongs to token ``ids[:, t + 1]``; a
    completion mask for it is the mask of ``ids[:, 1:]``.

    Computed in float32 (float64 stays float64) as ``logit - logsumexp(logits)``, one
    row at a time, so a bf16 ``[B, T, V]`` batch never needs a full float32 copy at
    once (log-probs for old and reference policies are taken without gradient).

    Args:
        logits: ``[B, T, V]`` unnormalised scores.
        ids: ``[B, T]`` integer token ids in ``[0, V)``.

    Returns:
        ``[B, T - 1]`` log-probs in nats, float32 (float64 for float64 logits),
        differentiable in ``logits``.

    Raises:
        ValueError: wrong ranks or shapes, ``T < 2``, non-integer ids or ids out of
            ``[0, V)``.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits.shape={tuple(logits.shape)}: must be 3-D [B, T, V]")
    if ids.shape != logits.shape[:2]:
        raise ValueError(f"ids.shape={tuple(ids.shape)}: must be [B, T]="
                         f"{tuple(logits.shape[:2])}, the first two dims of logits")
    _check_ids(ids, logits.shape[2])
    dtype = float_dtype(logits)
    targets = ids[:, 1:].long().unsqueeze(-1)  # [B, T-1, 1]
    rows = []
    for b in range(logits.shape[0]):
        row = logits[b, :-1]  # [T-1, V], still the input dtype
        picked = row.gather(-1, targets[b]).squeeze(-1).to(dtype)  # upcast is exact
        rows.append(picked - torch.logsumexp(row.to(dtype), dim=-1))
    return torch.stack(rows)


class _HeadLogprobs(torch.autograd.Function):
    """Chunked ``log_softmax(h W^T + b)[target]`` whose hidden-state gradient is taken in
    the forward pass (see :func:`head_token_logprobs`)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_positions, with_grad):
        flat = hidden.reshape(-1, hidden.shape[-1])  # [N, d], rows x positions, row-major
        goal = targets.reshape(-1)
        dtype = float_dtype(weight)
        out = torch.empty(flat.shape[0], dtype=dtype, device=flat.device)
        grad = torch.empty_like(flat) if with_grad else None
        for start in range(0, flat.shape[0], chunk_positions):
            stop = min(start + chunk_positions, flat.shape[0])
            # one [n, V] float32 tensor per chunk: every step below works in its storage
            z = torch.nn.functional.linear(flat[start:stop], weight, bias).to(dtype)
            if temperature != 1.0:
                z.div_(temperature)
            picked = goal[start:stop].unsqueeze(-1)
            logit = z.gather(-1, picked)
            # torch.logsumexp's own steps, in z's storage: log(sum(exp(z - top))) + top
            top = z.amax(dim=-1, keepdim=True)
            total = z.sub_(top).exp_().sum(dim=-1, keepdim=True)
            out[start:stop] = (logit - total.log().add_(top)).squeeze(-1)
            if grad is not None:
                # d logp / d z = (onehot - softmax(z)) / tau, in z's storage
                z.div_(total).scatter_add_(-1, picked, torch.full_like(logit, -1.0))
                grad[start:stop] = z.mul_(-1.0 / temperature).to(weight.dtype) @ weight
            del z  # before the next chunk's logits exist
        ctx.save_for_backward(grad)
        return out.view(targets.shape)

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        scaled = grad.to(grad_out.dtype) * grad_out.reshape(-1, 1)
        return (scaled.to(grad.dtype).view(*grad_out.shape, -1),
                None, None, None, None, None, None)


def head_token_logprobs(hidden: Tensor, weight: Tensor, ids: Tensor, *,
                        bias: Tensor | None = None, temperature: float = 1.0,
                        chunk_positions: int = 1024) -> Tensor:
    """:func:`token_logprobs` of ``linear(hidden, weight, bias) / temperature`` without
    ever holding ``[B, T, V]`` logits: the output head runs over chunks of
    ``chunk_positions`` positions (rows x positions, row-major), each chunk's logits are
    reduced to the sampled token's logit and their float32 ``logsumexp`` (max-shifted, as
    ``torch.logsumexp``), then freed.

    The head runs on every position, padding and the last one included (its output
    predicts nothing and is dropped), as ``model(...).logits`` does: its matmuls are the
    ones the ``executed`` FLOP convention counts for a full head
    (:func:`race.core.flops.lora_train_flops`), and no more.

    Gradient, for the hidden states only (a frozen head): taken in the forward pass, chunk
    by chunk, as fused linear cross-entropy kernels do (Hsu et al. 2024, "Liger Kernel",
    sec. 3.3): ``d logp / d h = (onehot(target) - softmax(z / tau)) W / tau``, kept as one
    ``[B, T, d]`` tensor that the backward pass scales by the incoming gradient. So a
    forward and backward run exactly today's head matmuls (``2 V d`` per position each:
    logits, then the hidden's gradient) with no recompute; gradient checkpointing would
    add a third. Without gradients (``torch.no_grad`` or a hidden state that needs none)
    only the logits are computed.

    Args:
        hidden: ``[B, T, d]`` final hidden states (after the last norm).
        weight: ``[V, d]`` output head weight, frozen; ``bias``: ``[V]`` or None.
        ids: ``[B, T]`` integer token ids in ``[0, V)``.
        temperature: the logits are divided by it (per chunk, in float32).
        chunk_positions: positions per chunk; the working memory is one float32
            ``[chunk_positions, V]`` tensor (plus one in the head's dtype when that is
            not float32).

    Returns:
        ``[B, T - 1]`` log-probs in nats, float32 (float64 for a float64 head); entry
        ``t`` belongs to token ``ids[:, t + 1]``, as in :func:`token_logprobs`.

    Raises:
        ValueError: wrong ranks or shapes, ``T < 2``, bad ids, a head that needs a
            gradient, a temperature that is not > 0 or ``chunk_positions < 1``.
    """
    if hidden.dim() != 3:
        raise ValueError(f"hidden.shape={tuple(hidden.shape)}: must be 3-D [B, T, d]")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[2]:
        raise ValueError(f"weight.shape={tuple(weight.shape)}: must be [V, d] with "
                         f"d={hidden.shape[2]}, the hidden states' width")
    if ids.shape != hidden.shape[:2]:
        raise ValueError(f"ids.shape={tuple(ids.shape)}: must be [B, T]="
                         f"{tuple(hidden.shape[:2])}, the first two dims of hidden")
    _check_ids(ids, weight.shape[0])
    if weight.requires_grad or (bias is not None and bias.requires_grad):
        raise ValueError("weight: the output head needs a gradient (full fine-tuning or "
                         "an adapted head); take token_logprobs of the model's logits")
    if not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature={temperature!r}: must be a finite number > 0")
    if chunk_positions < 1:
        raise ValueError(f"chunk_positions={chunk_positions}: must be >= 1")
    # the last position predicts nothing: its target is a stand-in, its output dropped
    targets = torch.cat([ids[:, 1:], ids[:, :1]], dim=1).long()
    # Function.forward runs under no_grad: whether a gradient is wanted is decided here
    with_grad = torch.is_grad_enabled() and hidden.requires_grad
    logprobs = _HeadLogprobs.apply(hidden, weight, bias, targets, float(temperature),
                                   int(chunk_positions), with_grad)
    return logprobs[:, :-1]
