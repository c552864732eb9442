"""RACE's FLOP formulas vs FlopCounterMode, and the common shortcuts vs both.

One row per (model shape x phase): the measured count (FlopCounterMode with the CPU SDPA
kernels registered), RACE's ``executed`` and ``model`` predictions, and the relative
error of three shortcuts against the measurement:

* Kaplan et al. (2020): ``2N + 2 L n_ctx d_attn`` per token forward, 3x for training,
  N = non-embedding linear weights (no lm_head, non-causal attention at n_ctx = T);
* PaLM / nanoGPT: ``6N + 12 L H Q T`` per token for training, 1/3 of it forward,
  N = every parameter (the tied embedding counted once as the lm_head);
* verl's counter: ``6 (N + 2 V d)`` per token + ``12 L H Q sum(T^2)``, embedding and
  lm_head both counted even when tied; 1/3 of it for forward-only phases.

None of the shortcuts knows LoRA's cheaper backward or a KV-cache decode; they are applied
to the real (unpadded) tokens. Usage: ``python bench/flops_accuracy.py [--markdown] [--quick]``.
The last line is ``max_rel_error_executed=<value>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import peft
import torch

from bench.common import add_quick
from race.catalog import load_model_shape
from race.core import flops
from race.core.specs import LoraShape, ModelShape
from race.nn.measure import (
    build_causal_lm,
    count_forward,
    count_generate,
    count_train,
    left_padded_batch,
)

LENGTHS = [48, 40, 33, 48]
GEN_PROMPTS, GEN_STOPS, GEN_MAX = [12, 9, 7, 12], [5, 15, 9, 99], 16
LORA = LoraShape(rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj",
                                   "gate_proj", "up_proj", "down_proj"))


def kaplan(shape: ModelShape, seqs: list[int], factor: int) -> float:
    n = shape.linear_params
    return factor * sum(t * (2 * n + 2 * shape.num_layers * t * shape.d_attn) for t in seqs)


def palm(shape: ModelShape, seqs: list[int], factor: int) -> float:
    n = shape.total_params
    per_train = sum(t * (6 * n + 12 * shape.num_layers * shape.num_heads * shape.head_dim * t)
                    for t in seqs)
    return per_train * factor / 3


def verl(shape: ModelShape, seqs: list[int], factor: int) -> float:
    n = shape.linear_params + 2 * shape.vocab_size * shape.hidden_size
    per_train = (6 * n * sum(seqs) + 12 * shape.num_layers * shape.num_heads * shape.head_dim
                 * sum(t * t for t in seqs))
    return per_train * factor / 3


def rows_for(name: str, shape: ModelShape, device: str = "cpu"):
    """Yield (phase, measured, executed, model, shortcut_seqs, shortcut_factor)."""
    model = build_causal_lm(shape, device=device)
    fused = device != "meta"  # meta tensors take the math attention path (backward 2x)
    lengths = [max(LENGTHS)] * len(LENGTHS) if device == "meta" else LENGTHS
    ids, mask = left_padded_batch(lengths, shape.vocab_size, device=device)
    yield ("forward", count_forward(model, ids, mask),
           flops.forward_flops(shape, lengths, convention="executed"),
           flops.forward_flops(shape, lengths), lengths, 1)
    yield ("full fwd+bwd", count_train(model, ids, mask),
           flops.train_flops(shape, lengths, convention="executed", fused_attention=fused),
           flops.train_flops(shape, lengths), lengths, 3)
    peft_model = peft.get_peft_model(model, peft.LoraConfig(
        r=LORA.rank, lora_alpha=2 * LORA.rank, target_modules=list(LORA.targets)))
    yield (f"LoRA r{LORA.rank} fwd+bwd", count_train(peft_model, ids, mask),
           flops.lora_train_flops(shape, lengths, LORA, convention="executed",
                                  fused_attention=fused),
           flops.lora_train_flops(shape, lengths, LORA), lengths, 3)
    model = peft_model.unload()
    if device == "meta":
        return
    ids, mask = left_padded_batch(GEN_PROMPTS, shape.vocab_size, seed=1)
    measured, new_tokens, steps = count_generate(model, ids, mask, max_new_tokens=GEN_MAX,
                                                 stops=GEN_STOPS)
    seqs = [p + n for p, n in zip(GEN_PROMPTS, new_tokens)]
    yield ("generate (left pad, early EOS)", measured,
           flops.generate_flops(shape, GEN_PROMPTS, new_tokens, convention="executed",
                                decode_steps=steps),
           flops.generate_flops(shape, GEN_PROMPTS, new_tokens), seqs, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    add_quick(parser, "tiny-s on the meta device only")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    shapes = [(n, load_model_shape(n), "cpu") for n in ("tiny-s", "tiny-m", "tiny-l")]
    shapes.append(("qwen2.5-0.5b, 2 layers",
                   dataclasses.replace(load_model_shape("qwen2.5-0.5b"), num_layers=2), "cpu"))
    shapes += [(f"{n} (meta)", load_model_shape(n), "meta")
               for n in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")]
    if args.quick:  # the cheapest rows: tiny-s counted on meta, no kernels run
        shapes = [("tiny-s (meta)", load_model_shape("tiny-s"), "meta")]

    header = ["shape", "phase", "measured", "executed err", "model", "model err",
              "Kaplan err", "PaLM err", "verl err"]
    sep = " | " if args.markdown else "  "
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print(f"{'shape':<24}{'phase':<31}{'measured':>10}{'exec err':>10}{'model':>10}"
              f"{'model err':>10}{'Kaplan':>9}{'PaLM':>9}{'verl':>9}")
    worst = 0.0
    for name, shape, device in shapes:
        for phase, measured, executed, model, seqs, factor in rows_for(name, shape, device):
            def err(x: float, measured: float = measured) -> float:
                return (x - measured) / measured
            worst = max(worst, abs(err(executed)))
            cells = [name, phase, f"{measured:.3e}", f"{err(executed):.1e}", f"{model:.3e}",
                     f"{err(model):+.1%}", f"{err(kaplan(shape, seqs, factor)):+.1%}",
                     f"{err(palm(shape, seqs, factor)):+.1%}",
                     f"{err(verl(shape, seqs, factor)):+.1%}"]
            if args.markdown:
                print("| " + sep.join(cells) + " |")
            else:
                print(f"{cells[0]:<24}{cells[1]:<31}{cells[2]:>10}{cells[3]:>10}{cells[4]:>10}"
                      f"{cells[5]:>10}{cells[6]:>9}{cells[7]:>9}{cells[8]:>9}")
            sys.stdout.flush()
    print(f"max_rel_error_executed={worst:.2e}")


if __name__ == "__main__":
    main()
