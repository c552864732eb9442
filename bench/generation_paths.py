"""The ``hf`` backend's two generation paths side by side: eager (today's) vs static cache.

For the tiny family's tiny-s and a small Qwen2-shaped stand-in (14 query / 2 key-value
heads, random weights, no hub), each wrapped in the pilot's LoRA adapters (rank 16 on
every linear, ``lora_B`` drawn at N(0, 0.02) as after some training), one process:

1. **Greedy equality**: both paths generate the same greedy batch; the tokens must match.
2. **Speed**: greedy rollouts of 8 prompts x G (64 rows, ``--quick``: 32) of the embedded
   task, timed alternately path by path, several repetitions; the median completion
   tokens/s of each path and their ratio (static / eager).
3. **Sampling** (reported, not part of the last line): one sampled call per path with the
   same seed: whether the tokens match and the largest log-prob difference.

On CPU the static path runs uncompiled (transformers compiles the decode step only on
CUDA), so a ratio here says nothing about GPUs: ``bench/device_check.py --perf`` measures
them. Usage::

    python bench/generation_paths.py [--quick] [--out bench/data/generation_paths.json]

Last line: ``greedy_equal=yes|no speed_ratio=<static/eager tokens/s, geometric mean over
the models>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from race.catalog import load_model_shape
from race.tasks.arith import ArithTask

PATHS = ("eager", "static")


def standin_shape():
    """A small Qwen2.5-shaped stand-in: GQA 14/2, tied embeddings, 4 layers."""
    return dataclasses.replace(load_model_shape("qwen2.5-0.5b"), name="qwen-small",
                               hidden_size=448, intermediate_size=1216, num_layers=4,
                               num_heads=14, num_kv_heads=2, head_dim=32, vocab_size=8192)


def build_models(work: Path) -> dict:
    """``{name: (model, tokenizer, shape)}``: tiny-s and the stand-in, random weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.nn.measure import build_causal_lm
    from race.warmstart.standin import build_standin
    from race.warmstart.tokenizer import build_char_tokenizer

    tiny = load_model_shape("tiny-s")
    models = {"tiny-s": (build_causal_lm(tiny), build_char_tokenizer(tiny.vocab_size), tiny)}
    shape = standin_shape()
    texts = [ex.prompt + ex.trace for ex in ArithTask().sample("train", 500, seed=1)]
    folder = build_standin(work / "qwen-small", shape, texts)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    models["qwen-small"] = (AutoModelForCausalLM.from_pretrained(folder), tokenizer, shape)
    return models


def with_adapters(model, shape, tokenizer):
    """The pilot's LoRA learner around ``model``; its adapters moved off zero."""
    import torch

    from race.pilot.learner import LearnerConfig, LoraLearner

    learner = LoraLearner(model, shape, LearnerConfig(lora_rank=16),
                          pad_id=tokenizer.pad_token_id, device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return learner


def compare(name: str, model, tokenizer, shape, *, group: int, max_new_tokens: int,
            repeats: int) -> dict:
    """Greedy equality, median tokens/s per path, and one sampled call per path."""
    from race.pilot.rollout.hf import HFBackend

    learner = with_adapters(model, shape, tokenizer)
    prompts = [ex.prompt for ex in ArithTask().sample("test", 8, seed=5)]
    backends = {path: HFBackend(learner.model, tokenizer, shape, learner.lora, generation=path)
                for path in PATHS}
    kw = dict(n=group, max_new_tokens=max_new_tokens, greedy=True)
    greedy = {path: b.generate(prompts, **kw) for path, b in backends.items()}  # + warm-up
    rates = {path: [] for path in PATHS}
    for r in range(repeats):
        for path in PATHS if r % 2 == 0 else PATHS[::-1]:  # alternate who runs first
            start = time.perf_counter()
            out = backends[path].generate(prompts, **kw)
            rates[path].append(out.completion_tokens / (time.perf_counter() - start))
    sampled = {path: b.generate(prompts, n=group, max_new_tokens=max_new_tokens, seed=7,
                                temperature=1.0) for path, b in backends.items()}
    diff = max((abs(x - y) for a, b in zip(sampled["eager"].logprobs,
                                           sampled["static"].logprobs)
                for x, y in zip(a, b)), default=0.0)
    row = {"model": name, "rows": len(prompts) * group, "max_new_tokens": max_new_tokens,
           "repeats": repeats,
           "greedy_equal": greedy["eager"].completion_ids == greedy["static"].completion_ids,
           "sampled_equal": sampled["eager"].completion_ids == sampled["static"].completion_ids,
           "sampled_max_logprob_diff": diff}
    for path in PATHS:
        row[f"{path}_tokens_per_s"] = statistics.median(rates[path])
        row[f"{path}_rates"] = rates[path]
        row[f"{path}_flops_executed"] = greedy[path].flops_executed
    row["flops_model"] = greedy["eager"].flops_model
    row["speed_ratio"] = row["static_tokens_per_s"] / row["eager_tokens_per_s"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="G=4, 24 new tokens, 3 repetitions (a smoke run)")
    parser.add_argument("--repeats", type=int, default=0, help="timed repetitions per path")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", default="", help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    group, max_new = (4, 24) if args.quick else (8, 40)
    repeats = args.repeats or (3 if args.quick else 7)
    rows = []
    with tempfile.TemporaryDirectory(prefix="race-generation-paths-") as work:
        for name, (model, tokenizer, shape) in build_models(Path(work)).items():
            rows.append(compare(name, model, tokenizer, shape, group=group,
                                max_new_tokens=max_new, repeats=repeats))
            print(f"[generation_paths] {name} done", file=sys.stderr, flush=True)
    print(f"torch {torch.__version__}, {args.threads} thread(s), greedy, 8 prompts x G={group}, "
          f"{max_new} new tokens, median of {repeats}")
    print("| model | eager tok/s | static tok/s | static/eager | greedy equal | "
          "executed FLOPs static/eager | sampled equal | max logprob diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['eager_tokens_per_s']:.0f} | {r['static_tokens_per_s']:.0f} | "
              f"{r['speed_ratio']:.2f} | {'yes' if r['greedy_equal'] else 'no'} | "
              f"{r['static_flops_executed'] / r['eager_flops_executed']:.3f} | "
              f"{'yes' if r['sampled_equal'] else 'no'} | {r['sampled_max_logprob_diff']:.1e} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=2))
    equal = all(r["greedy_equal"] for r in rows)
    ratio = math.exp(statistics.fmean(math.log(r["speed_ratio"]) for r in rows))
    print(f"greedy_equal={'yes' if equal else 'no'} speed_ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
