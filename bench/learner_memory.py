"""The learner's peak memory: today's full-vocabulary logits against the chunked head.

One micro-batch on a Qwen2 stand-in with Qwen2.5's vocabulary (151,936 entries; hidden
64, 2 layers, LoRA rank 8 on all seven targets, random weights, no hub): 8 completions
of 128 prompt tokens and 64 to 128 completion tokens (padded to 256). Two variants of
the same ``LoraLearner``:

* ``full`` (today's path, ``learner.head = None``): ``model(...).logits``, ``[B, T, V]``
  float32, then :func:`race.core.grpo.token_logprobs`;
* ``chunked``: the decoder body, then :func:`race.core.grpo.head_token_logprobs` over
  chunks of :func:`race.core.memory.head_chunk_positions` positions.

**Peak memory**: each variant runs one forward + backward of the GRPO loss
(``LoraLearner._backward`` on the whole micro-batch) in a fresh Python process, after a
warm-up pass on a 2 x 8 batch; its peak is ``ru_maxrss`` (the process's resident
high-water mark) minus the resident set just before the pass (``/proc/self/statm``):
what the pass added at its worst, weights and adapters excluded. torch's CPU allocator
takes buffers this large straight from ``mmap`` and unmaps them when freed, so the
resident set follows live tensors (tracemalloc does not see them). Processes alternate
between the variants; the medians of ``--repeats`` are reported.

**Equality**: both variants start from the same weights and adapters (LoRA B drawn at
random, so A gets a gradient); each process saves the completion tokens' float32
log-probs of its measured pass and the LoRA gradients it left, and the first pair is
compared: the largest absolute differences.

Usage: ``python bench/learner_memory.py [--quick] [--repeats N]``. ``--quick``: 4 rows of
32 + 32 tokens, one repeat (CI smoke). The last line is
``peak_ratio=<full / chunked> max_logprob_diff=<value>``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from race.core import memory
from race.core.specs import ModelShape
from race.nn.measure import build_causal_lm
from race.pilot.learner import Batch, LearnerConfig, LoraLearner

SHAPE = ModelShape("qwen-vocab-standin", hidden_size=64, intermediate_size=128,
                   num_layers=2, num_heads=4, num_kv_heads=2, vocab_size=151_936)
CONFIG = LearnerConfig(lora_rank=8, lora_alpha=16, aggregation="token")
# (rows, prompt tokens, shortest and longest completion)
SIZES = {"full": (8, 128, 64, 128), "quick": (4, 32, 16, 32)}
VARIANTS = ("full", "chunked")


def make_batch(rows: int, prompt: int, shortest: int, longest: int, seed: int = 0) -> Batch:
    """Random token ids; completion lengths spread over [shortest, longest], one of each end."""
    generator = torch.Generator().manual_seed(seed)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(1, SHAPE.vocab_size, (n,), generator=generator).tolist())

    lengths = torch.randint(shortest, longest + 1, (rows,), generator=generator).tolist()
    lengths[0], lengths[-1] = shortest, longest
    advantages = torch.randn(rows, generator=generator).tolist()
    return Batch(prompt_ids=tuple(ids(prompt) for _ in range(rows)),
                 completion_ids=tuple(ids(n) for n in lengths),
                 advantages=tuple(advantages))


def make_learner(base, variant: str) -> LoraLearner:
    learner = LoraLearner(copy.deepcopy(base), SHAPE, CONFIG, pad_id=0, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in learner.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    assert learner.head is not None, "the stand-in's head should run chunked"
    if variant == "full":
        learner.head = None
    return learner


def forward_backward(learner: LoraLearner, batch: Batch) -> torch.Tensor:
    """One forward + backward of the GRPO loss over the whole batch; returns the
    completion tokens' log-probs it computed (detached, flat)."""
    rows = list(range(len(batch.completion_ids)))
    advantages = torch.tensor(batch.advantages)
    seen = []
    logprobs = learner._logprobs

    def keep(ids, attention):  # a view of what the pass computed, nothing recomputed
        out = logprobs(ids, attention)
        seen.append(out.detach())
        return out

    learner._logprobs = keep
    try:
        learner._backward(batch, rows, None, None, None, advantages, 1.0, step=0)
    finally:
        learner._logprobs = logprobs
    _, _, mask, _ = learner._padded(batch, rows)
    return seen[0][mask.bool()]


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(variant: str, size: str, out: Path) -> None:
    """Measure one variant's pass (in a fresh process), print it as one JSON line and
    save its log-probs and LoRA gradients to ``out``."""
    learner = make_learner(build_causal_lm(SHAPE), variant)
    forward_backward(learner, make_batch(2, 4, 4, 4, seed=1))  # warm-up: 2 x 8 tokens
    learner.model.zero_grad(set_to_none=True)
    batch = make_batch(*SIZES[size])
    before = resident_bytes()
    start = time.perf_counter()
    logprobs = forward_backward(learner, batch)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    grads = {n: p.grad for n, p in learner.model.named_parameters() if p.requires_grad}
    torch.save({"logprobs": logprobs, "grads": grads}, out)
    print(json.dumps({"variant": variant, "peak_bytes": peak - before, "seconds": seconds}))


def measure(size: str, repeats: int, folder: Path) -> dict[str, dict[str, float]]:
    """Median peak bytes and seconds per variant over ``repeats`` fresh processes."""
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for k in range(repeats):
        for variant in VARIANTS:  # alternate, so drift hits both alike
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--size", size,
                                  "--out", str(folder / f"{variant}-{k}.pt")],
                                 capture_output=True, text=True, check=True)
            runs[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {v: {key: statistics.median(r[key] for r in rs)
                for key in ("peak_bytes", "seconds")} for v, rs in runs.items()}


def equality(folder: Path) -> tuple[float, float, float]:
    """(max |logp| diff on completion tokens, max |grad| diff, largest |grad|) between
    the two variants' first processes, float32."""
    full, chunked = (torch.load(folder / f"{v}-0.pt") for v in VARIANTS)
    logp_diff = float((full["logprobs"] - chunked["logprobs"]).abs().max())
    grad_diff = max(float((g - chunked["grads"][n]).abs().max())
                    for n, g in full["grads"].items())
    grad_max = max(float(g.abs().max()) for g in full["grads"].values())
    return logp_diff, grad_diff, grad_max


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a miniature batch, one repeat")
    parser.add_argument("--repeats", type=int, default=None,
                        help="fresh processes per variant (default 3, 1 with --quick)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--size", choices=list(SIZES), default="full", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.size, args.out)
        return
    size = "quick" if args.quick else "full"
    repeats = args.repeats or (1 if args.quick else 3)
    rows, prompt, shortest, longest = SIZES[size]
    chunk = memory.head_chunk_positions(SHAPE.vocab_size)
    print(f"learner memory: {rows} rows x ({prompt} prompt + {shortest}-{longest} completion) "
          f"tokens, vocab {SHAPE.vocab_size:,}, hidden {SHAPE.hidden_size}, "
          f"{SHAPE.num_layers} layers, LoRA rank {CONFIG.lora_rank} on "
          f"{len(CONFIG.lora_targets)} targets; head chunks of {chunk} positions; "
          f"medians of {repeats} fresh processes per variant")
    with tempfile.TemporaryDirectory() as folder:
        peaks = measure(size, repeats, Path(folder))
        logp_diff, grad_diff, grad_max = equality(Path(folder))
    for variant in VARIANTS:
        print(f"  {variant:8s} peak {peaks[variant]['peak_bytes'] / 2**20:9.1f} MiB   "
              f"forward+backward {peaks[variant]['seconds']:6.2f} s")
    print(f"  max |logp diff| {logp_diff:.1e} on completion tokens (float32); "
          f"max |LoRA grad diff| {grad_diff:.1e} (largest |grad| {grad_max:.1e})")
    ratio = peaks["full"]["peak_bytes"] / peaks["chunked"]["peak_bytes"]
    print(f"peak_ratio={ratio:.2f} max_logprob_diff={logp_diff:.1e}")


if __name__ == "__main__":
    main()
