"""Measured FLOPs: FlopCounterMode with every SDPA kernel counted one way.

torch's flop registry lacks ``aten._scaled_dot_product_flash_attention_for_cpu`` and its
backward (so on CPU the counter sees zero attention FLOPs), and older releases refuse
grouped-query shapes (fewer key/value heads than query heads) in their SDPA formulas.
:func:`flop_counter` maps every fused SDPA kernel -- CPU flash, CUDA flash, memory-
efficient and cuDNN, forward and backward -- to the formulas below, which are torch's
own (two bmm forward; five backward, the scores recomputed) with the query's heads
counted, so GQA needs no repeated keys. The math path runs plain bmm, which the counter
counts natively (backward: four bmm). The registry also lacks the in-place
``aten.addmm_`` (``acc += a @ b``), with which TRL's chunked log-prob head accumulates its
gradients off CUDA; it is counted here as the matmul it is. The ``executed`` convention in
:mod:`race.core.flops` reproduces these counts.

torch is imported at the top (every function here counts with it); transformers inside
the model builders, the only ones that need it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from race.core.specs import ModelShape


def _bmm(b: int, n: int, k: int, m: int) -> int:
    return 2 * b * n * k * m


def sdpa_forward_flops(query_shape, key_shape, value_shape) -> int:
    """QK^T and PV of ``[b, h_q, s_q, d]`` queries over ``[b, h_kv, s_k, d]`` keys and
    values (any ``h_q`` multiple of ``h_kv``): every query head attends."""
    b, h_q, s_q, d_q = query_shape
    s_k, d_v = key_shape[2], value_shape[3]
    return _bmm(b * h_q, s_q, d_q, s_k) + _bmm(b * h_q, s_q, s_k, d_v)


def sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape) -> int:
    """Fused SDPA backward: scores recomputed, then dP, dV, dQ and dK (five bmm, 2.5x the
    forward at equal widths)."""
    b, h_q, s_q, d_q = query_shape
    s_k, d_v = key_shape[2], value_shape[3]
    return (_bmm(b * h_q, s_q, d_q, s_k) + _bmm(b * h_q, s_q, d_v, s_k)
            + _bmm(b * h_q, s_k, s_q, d_v) + _bmm(b * h_q, s_q, s_k, d_q)
            + _bmm(b * h_q, d_q, s_q, s_k))


def _forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_forward_flops(query, key, value)


def _backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flops(grad_out, query, key, value)


def _sdpa_ops() -> dict:
    aten = torch.ops.aten
    pairs = {"_scaled_dot_product_flash_attention_for_cpu": _forward,
             "_scaled_dot_product_flash_attention_for_cpu_backward": _backward,
             "_scaled_dot_product_flash_attention": _forward,
             "_scaled_dot_product_flash_attention_backward": _backward,
             "_scaled_dot_product_efficient_attention": _forward,
             "_scaled_dot_product_efficient_attention_backward": _backward,
             "_scaled_dot_product_cudnn_attention": _forward,
             "_scaled_dot_product_cudnn_attention_backward": _backward}
    return {getattr(aten, name): count for name, count in pairs.items()
            if hasattr(aten, name)}  # a kernel this torch build lacks cannot run either


def _addmm_inplace(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return _bmm(1, a_shape[0], a_shape[1], b_shape[1])


SDPA_FLOPS = _sdpa_ops()
# what flop_counter() adds to torch's registry: the SDPA kernels and the in-place addmm_
COUNTED_OPS = SDPA_FLOPS | {torch.ops.aten.addmm_: _addmm_inplace}


def flop_counter() -> FlopCounterMode:
    """A silent FlopCounterMode counting every SDPA kernel (GQA included) and in-place
    ``addmm_``; read ``get_total_flops()``."""
    return FlopCounterMode(display=False, custom_mapping=COUNTED_OPS)


def qwen2_config(shape: ModelShape, **overrides: Any):
    """A ``transformers.Qwen2Config`` with the architecture numbers of ``shape``."""
    from transformers import Qwen2Config

    return Qwen2Config(**(_common(shape) | overrides))


def _common(shape: ModelShape) -> dict[str, Any]:
    return dict(hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
                num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                vocab_size=shape.vocab_size, tie_word_embeddings=shape.tied_embeddings,
                num_labels=shape.num_labels, max_position_embeddings=4096)


def hf_config(shape: ModelShape, **overrides: Any):
    """The ``transformers`` config of ``shape``'s ``model_type`` ("": Qwen2) with its
    numbers: attention biases, sliding window and layer types as the shape says."""
    import transformers

    if shape.model_type in ("", "qwen2"):
        return qwen2_config(shape, **overrides)
    values = _common(shape)
    if shape.model_type in ("llama", "qwen3"):
        values["attention_bias"] = shape.qkv_bias
    if shape.model_type in ("mistral", "qwen3"):
        values["sliding_window"] = shape.sliding_window or None
    if shape.model_type == "qwen3" and shape.sliding_layers:
        values |= dict(use_sliding_window=True, layer_types=list(shape.layer_types))
    if shape.model_type == "gemma3_text":
        values |= dict(sliding_window=shape.sliding_window or 4096,
                       layer_types=list(shape.layer_types or
                                        ["full_attention"] * shape.num_layers))
    classes = {"llama": "LlamaConfig", "qwen3": "Qwen3Config", "mistral": "MistralConfig",
               "gemma3_text": "Gemma3TextConfig"}
    return getattr(transformers, classes[shape.model_type])(**(values | overrides))


def build_causal_lm(shape: ModelShape, *, device: str = "cpu", seed: int = 0):
    """A randomly initialised causal LM of ``shape`` (its ``model_type``; "": Qwen2; SDPA
    attention), in eval mode.

    On ``device="meta"`` no memory is allocated, so full Qwen2.5 shapes cost nothing;
    meta tensors take PyTorch's math attention path (plain bmm, backward 2x).
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config(shape), attn_implementation="sdpa")
    return model.eval()


def left_padded_batch(lengths: list[int], vocab_size: int, *, device: str = "cpu",
                      seed: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Random token ids left-padded to the longest length, and the attention mask.

    The mask is ``None`` when no row is padded (or on the meta device, where the
    padding check cannot read values), which lets SDPA take its causal path.
    """
    rows, longest = len(lengths), max(lengths)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (rows, longest), generator=generator)
    mask = torch.zeros(rows, longest, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, longest - length:] = 1
    if device == "meta" or bool(mask.all()):
        return ids.to(device), None
    return ids, mask


def count_forward(model, ids: torch.Tensor, mask: torch.Tensor | None) -> int:
    """Measured FLOPs of one no-grad forward pass (logits on every position)."""
    with torch.no_grad(), flop_counter() as counter:
        model(input_ids=ids, attention_mask=mask)
    return counter.get_total_flops()


def count_train(model, ids: torch.Tensor, mask: torch.Tensor | None) -> int:
    """Measured FLOPs of one forward + backward pass through whatever requires grad."""
    with flop_counter() as counter:
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits.float().logsumexp(-1).mean().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


class _StopAt:
    """Logits processor that forces EOS for row ``r`` at new-token index ``stops[r]``.

    It does no matmul, so the counter is unaffected; it makes early EOS deterministic.
    """

    def __init__(self, prompt_tokens: int, stops: list[int], eos_id: int):
        self.prompt_tokens, self.stops, self.eos_id = prompt_tokens, stops, eos_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_tokens
        for row, stop in enumerate(self.stops):
            if step == stop:
                scores[row] = float("-inf")
                scores[row, self.eos_id] = 0.0
        return scores


def count_generate(model, ids: torch.Tensor, mask: torch.Tensor | None, *,
                   max_new_tokens: int, stops: list[int]) -> tuple[int, list[int], int]:
    """Measured FLOPs of a greedy ``generate`` with early EOS at ``stops`` (0-based).

    Returns (FLOPs, new tokens of each row including its EOS, decode steps run).
    """
    eos_id = model.config.vocab_size - 1
    pad_id = model.config.vocab_size - 2
    prompt = ids.shape[1]
    with torch.no_grad(), flop_counter() as counter:
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=max_new_tokens, eos_token_id=eos_id,
                             pad_token_id=pad_id,
                             logits_processor=[_StopAt(prompt, stops, eos_id)])
    new = out[:, prompt:]
    lengths = []
    for row in new.tolist():
        lengths.append(row.index(eos_id) + 1 if eos_id in row else len(row))
    return counter.get_total_flops(), lengths, new.shape[1]


def attention_backward_is_fused(model, *, device: str = "cpu") -> bool:
    """Whether a training pass of ``model`` runs a fused SDPA backward (flash, efficient,
    cuDNN or CPU flash: FlopCounterMode counts 5 bmm, 2.5x the forward) rather than the
    math path (autograd over two bmm: 2x). Probed once with a 2-row right-padded batch,
    as the learner's minibatches are; gradients are cleared afterwards."""
    ids = torch.arange(1, 9, device=device).reshape(2, 4) % model.config.vocab_size
    mask = torch.ones_like(ids)
    mask[1, 3:] = 0
    with flop_counter() as counter:
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits.float().mean().backward()
    model.zero_grad(set_to_none=True)
    ops = {str(op) for op in counter.get_flop_counts().get("Global", {})}
    return any("scaled_dot_product" in op and "backward" in op for op in ops)
