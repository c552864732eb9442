"""Measured FLOPs: FlopCounterMode with the CPU attention kernels registered.

torch 2.13's flop registry lacks ``aten._scaled_dot_product_flash_attention_for_cpu``
and its backward, so on CPU the counter sees zero attention FLOPs. We map them to the
counter's own SDPA formulas (the same ones it uses for the CUDA kernels), which is what
the ``executed`` convention in :mod:`race.flops` reproduces.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from race.specs import ModelShape


def _sdpa_cpu_forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _sdpa_cpu_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


CPU_SDPA_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu_forward,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward,
}


def flop_counter() -> FlopCounterMode:
    """A silent FlopCounterMode that also counts CPU SDPA; read ``get_total_flops()``."""
    return FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS)


def qwen2_config(shape: ModelShape, **overrides: Any):
    """A ``transformers.Qwen2Config`` with the architecture numbers of ``shape``."""
    from transformers import Qwen2Config

    values = dict(hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                  num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
                  num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                  vocab_size=shape.vocab_size, tie_word_embeddings=shape.tied_embeddings,
                  num_labels=shape.num_labels, max_position_embeddings=4096)
    return Qwen2Config(**(values | overrides))


def build_causal_lm(shape: ModelShape, *, device: str = "cpu", seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` of ``shape`` (SDPA attention), in eval mode.

    On ``device="meta"`` no memory is allocated, so full Qwen2.5 shapes cost nothing;
    meta tensors take PyTorch's math attention path (plain bmm, backward 2x).
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(qwen2_config(shape),
                                                 attn_implementation="sdpa")
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
