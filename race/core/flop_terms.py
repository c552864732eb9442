"""The per-token pieces of the FLOP formulas (:mod:`race.core.flops` sums them into
terms): an output head's FLOPs per position, every decoder linear's per token (LoRA
adapters included), attention per (query, key) pair, and which activations need gradients
under LoRA or full fine-tuning (:func:`grad_flow`).

Pure: integers from a :class:`~race.core.shapes.ModelShape`; no torch, no IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from race.core.shapes import LoraShape, ModelShape

Convention = Literal["model", "executed"]

# FlopCounterMode's SDPA backward counts 5 bmm (QK^T recompute, dP, dV, dQ, dK) against
# the forward's 2: torch.utils.flop_counter.sdpa_backward_flop_count.
SDPA_BACKWARD_FACTOR = 2.5


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


def adapter_rank(lora: LoraShape | None, module: str, adapters: bool) -> int:
    return lora.rank if adapters and lora is not None and module in lora.targets else 0


def linear_forward_flops_per_token(shape: ModelShape, lora: LoraShape | None = None,
                                   adapters: bool = True) -> int:
    """Forward FLOPs of all decoder-layer linears for one token: ``2 N`` plus LoRA adapters.

    Each adapter adds ``2 r (d_in + d_out)`` (A then B). ``adapters=False`` is the
    reference policy (PEFT's ``disable_adapter``), which runs the base weights only.
    """
    per_layer = 0
    for module, d_in, d_out in shape.linear_dims():
        rank = adapter_rank(lora, module, adapters)
        per_layer += 2 * d_in * d_out + 2 * rank * (d_in + d_out)
    return shape.num_layers * per_layer


@dataclass(frozen=True, slots=True)
class GradFlow:
    """Backward structure of one fine-tuning setup, independent of sequence lengths."""

    linear_backward_per_token: int  # all decoder linears (+ adapters), per token
    head_backward_per_position: int  # output head, per position
    attn_grads: tuple[tuple[bool, bool, bool], ...]  # per layer: (q, k, v) need grad


def grad_flow(shape: ModelShape, lora: LoraShape | None,
               input_grad: bool = False) -> GradFlow:
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
        rank = adapter_rank(lora, module, True)
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
    return GradFlow(backward, head, tuple(attn_grads))


def causal_keys(query_tokens: int, cached_tokens: int = 0) -> int:
    """Sum of keys attended by ``query_tokens`` causal queries after ``cached_tokens``."""
    return query_tokens * cached_tokens + query_tokens * (query_tokens + 1) // 2


def window_keys(query_tokens: int, cached_tokens: int = 0, window: int = 0) -> int:
    """Sum of keys attended by ``query_tokens`` queries after ``cached_tokens`` when each
    attends at most the last ``window`` positions, its own included (a query at 1-based
    position ``t`` attends ``min(t, window)`` keys; Hugging Face's sliding-window mask keeps
    key ``k`` for query ``q`` when ``q - window < k <= q``). ``window=0``: causal."""
    if window <= 0:
        return causal_keys(query_tokens, cached_tokens)
    first, last = cached_tokens + 1, cached_tokens + query_tokens
    inside = max(0, min(last, window) - first + 1)  # positions <= window attend t keys
    start = first + inside - 1
    return (start * (start + 1) - (first - 1) * first) // 2 + (query_tokens - inside) * window


@dataclass(frozen=True, slots=True)
class Pairs:
    """(query, key) pairs one pass computes per layer: in full-attention layers and in
    sliding-window layers (equal where nothing limits the keys, e.g. ``executed`` full
    passes, where SDPA multiplies the whole masked square)."""

    full: int
    sliding: int

    @classmethod
    def same(cls, pairs: int) -> Pairs:
        return cls(pairs, pairs)

    def __add__(self, other: Pairs) -> Pairs:
        return Pairs(self.full + other.full, self.sliding + other.sliding)

    def scale(self, factor: int) -> Pairs:
        return Pairs(self.full * factor, self.sliding * factor)


def _pairs(pairs: int | Pairs) -> Pairs:
    return pairs if isinstance(pairs, Pairs) else Pairs.same(pairs)


def layer_attention_flops(shape: ModelShape, layer: int, pairs: int | Pairs) -> int:
    """Attention forward FLOPs of decoder layer ``layer``: ``4 d_attn`` per pair it computes."""
    pairs = _pairs(pairs)
    return 4 * shape.d_attn * (pairs.sliding if shape.is_sliding(layer) else pairs.full)


def attention_flops(shape: ModelShape, query_key_pairs: int | Pairs) -> int:
    """Attention forward FLOPs, all layers: ``4 d_attn`` per (query, key) pair and layer,
    each layer with the pairs of its kind (an int: every layer the same pairs).

    ``QK^T`` and ``PV`` are ``2 d_attn`` each per pair (GQA shares K/V heads but every
    query head still does its own products).
    """
    pairs = _pairs(query_key_pairs)
    sliding = shape.sliding_layers
    return 4 * shape.d_attn * ((shape.num_layers - sliding) * pairs.full
                               + sliding * pairs.sliding)


def attention_backward(shape: ModelShape, flow: GradFlow, query_key_pairs: int | Pairs,
                        convention: Convention, fused_attention: bool) -> float:
    total = 0.0
    for layer, (q_rg, k_rg, v_rg) in enumerate(flow.attn_grads):
        per_layer = layer_attention_flops(shape, layer, query_key_pairs)
        if convention == "executed":
            # fused SDPA recomputes QK^T; eager/math attention is autograd over two bmm
            factor = SDPA_BACKWARD_FACTOR if fused_attention else 2.0
            total += factor * per_layer if (q_rg or k_rg or v_rg) else 0
        else:
            # each gradient matmul costs half the forward: dP (for dQ or dK), dV, dQ, dK
            grads = int(q_rg or k_rg) + int(v_rg) + int(q_rg) + int(k_rg)
            total += per_layer * grads / 2
    return total


def layout(tokens: Sequence[int], convention: Convention, window: int = 0
           ) -> tuple[int, Pairs, int]:
    """(positions, query-key pairs, rows) of full-sequence passes over ``tokens``.

    ``executed``: rows padded to the longest, every layer the full padded square (a
    sliding-window mask still multiplies it). ``model``: causal pairs of each real row;
    a sliding-window layer's query attends at most ``window`` keys.
    """
    if convention == "executed":
        rows, longest = len(tokens), max(tokens)
        return rows * longest, Pairs.same(rows * longest * longest), rows
    return (sum(tokens), Pairs(sum(causal_keys(t) for t in tokens),
                               sum(window_keys(t, 0, window) for t in tokens)), len(tokens))
