"""``device_check.py --perf``: how fast a pilot runs on one GPU, against the GPU's limits.

For Qwen2.5-0.5B- and 1.5B-shaped stand-ins (random weights, bf16, no hub) under the
pilot's LoRA learner (rank 16, every linear), in this order, each section inside its share
of an 8-minute budget (a configuration not started in time is recorded as skipped):

1. ``limits``: device-to-device copy bandwidth (read + write bytes / s) and the bf16
   matmul peak (8192^3) that MFU is measured against.
2. ``rollout``: sampled rollouts of 8 prompts x G in {4, 8, 16}, 128 and 512 new tokens,
   through each ``hf`` generation path (``eager``: today's; ``static``: static cache, decode
   step compiled into a CUDA graph): the first call (compile and capture included) and a
   second timed call (eager: one call, nothing to compile), completion tokens/s, MFU,
   and the bandwidth-bound decode limit for that shape (:func:`decode_limit`). The issue's
   target shape (0.5B, 8 x 8 x 128) first, then every 128-token shape, then 512.
3. ``learning``: one GRPO update (``LoraLearner.update``, the learner as it is in the
   tree) of 8 x 8 completions (random tokens, 128 and 512 at most) per micro-batch size (0:
   the learner's own plan), after one warm-up update: seconds, MFU, peak GiB.
4. ``eval``: greedy generation of 256 problems (batches of 64) per path.
5. ``pilot``: one whole pilot (``run_pilot``, generation ``auto``: static on CUDA) of the
   0.5B stand-in, sized for 16 worst-case steps, with the default cell's evaluation (4
   checkpoints and the start, 200 selection + 2 x 64 report problems each) and 128 new
   tokens: its wall clock split by phase, and eval's share of it.

``--smoke`` runs every section on CPU with miniature shapes and sizes (what CI runs).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

from bench.device_common import run_cell, section, standin_shape, task_texts
from race.catalog import load_model_shape
from race.core.specs import LoraShape, ModelShape, RunSpec
from race.pilot.budget import worst_step_flops

PATHS = ("static", "eager")
SECTIONS = ("limits", "rollout", "learning", "eval", "pilot")
# cumulative seconds from the start by which each section must have started its last
# configuration (8 minutes in all, the pilot's uninterruptible run given the most slack)
SECTION_END_S = {"limits": 40, "rollout": 230, "learning": 290, "eval": 320, "pilot": 360}
TARGET_ROLLOUT = ("qwen2.5-0.5b", 8, 128)  # the shape: 8 prompts x G=8, 128 tokens
TODAY_TOKENS_PER_S = 1604.0  # docs/gpus.md: eager HF generate on that shape, one H200


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one --perf run measures (the GPU plan, or its miniature for --smoke)."""

    models: tuple[str, ...]
    prompts: int
    groups: tuple[int, ...]
    new_tokens: tuple[int, ...]
    micro_sizes: tuple[int, ...]
    learn_tokens: tuple[int, ...]
    eval_prompts: int
    eval_rows: int
    pilot_steps: int
    copy_mib: int
    timed: bool  # hold sections to SECTION_END_S


GPU_PLAN = Plan(models=("qwen2.5-0.5b", "qwen2.5-1.5b"), prompts=8, groups=(8, 4, 16),
                new_tokens=(128, 512), micro_sizes=(0, 8, 16, 32, 64), learn_tokens=(128, 512),
                eval_prompts=256, eval_rows=64, pilot_steps=16, copy_mib=1024, timed=True)
SMOKE_PLAN = Plan(models=("mini-a", "mini-b"), prompts=2, groups=(2, 4), new_tokens=(8, 16),
                  micro_sizes=(0, 4), learn_tokens=(16,), eval_prompts=8, eval_rows=4,
                  pilot_steps=2, copy_mib=16, timed=False)


def perf_shape(name: str) -> ModelShape:
    """A shipped model's shape, or a miniature GQA one (``mini-a``: 2 layers, ``mini-b``: 3)."""
    if name.startswith("mini"):
        return dataclasses.replace(standin_shape(smoke=True), name=name,
                                   num_layers=2 if name == "mini-a" else 3)
    return load_model_shape(name)


class Clock:
    """Seconds since the run started, and whether a section is past its share."""

    def __init__(self, timed: bool):
        self.start, self.timed = time.perf_counter(), timed

    def late(self, section: str) -> bool:
        return self.timed and time.perf_counter() - self.start > SECTION_END_S[section]


# --------------------------------------------------------------------------- pure limits


def weight_bytes(shape: ModelShape, lora: LoraShape | None, dtype_bytes: int = 2) -> int:
    """Bytes of weights one decode step reads: every decoder linear and the output head in
    the model's dtype, fp32 LoRA adapters (norms, biases and the embedding rows it looks up
    are left out: under 0.1% at Qwen2.5 widths)."""
    adapters = 0
    if lora is not None:
        adapters = shape.num_layers * sum(lora.rank * (d_in + d_out)
                                          for module, d_in, d_out in shape.linear_dims()
                                          if module in lora.targets)
    return (shape.linear_params + shape.vocab_size * shape.hidden_size) * dtype_bytes \
        + 4 * adapters


def decode_limit(shape: ModelShape, lora: LoraShape | None, *, rows: int, prompt_tokens: int,
                 new_tokens: int, bandwidth_bytes_per_s: float, dtype_bytes: int = 2) -> dict:
    """The bandwidth-bound decode rate of one batch: each step reads the weights once and
    every row's keys and values (2 x layers x kv_heads x head_dim per cached token), at the
    mean context ``prompt + new / 2``; tokens/s = rows / (bytes per step / bandwidth)."""
    kv_per_token = 2 * shape.num_layers * shape.d_kv * dtype_bytes
    step_bytes = (weight_bytes(shape, lora, dtype_bytes)
                  + rows * (prompt_tokens + new_tokens / 2) * kv_per_token)
    step_s = step_bytes / bandwidth_bytes_per_s
    return {"bytes_per_step": step_bytes, "step_s": step_s, "tokens_per_s": rows / step_s}


# --------------------------------------------------------------------------- measurements


def copy_bandwidth(device: str, mib: int, repeats: int = 10) -> float:
    """Device-to-device copy: read + write bytes per second (best of ``repeats``)."""
    import torch

    from race.nn.devices import synchronize

    src = torch.ones(mib << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() / best


def measure_limits(device: str, dtype: str, plan: Plan) -> dict:
    from race.nn.devices import measure_peak_flops

    size = 8192 if device == "cuda" else 512
    return {"copy_bytes_per_s": copy_bandwidth(device, plan.copy_mib),
            "peak_flops": measure_peak_flops(device, dtype, size=size)}


class Policies:
    """One LoRA learner per stand-in shape, built on the device once and shared by the
    rollout, learning and eval sections (random weights; a tokenizer trained on the task)."""

    def __init__(self, device: str, dtype: str):
        from race.warmstart.standin import train_tokenizer

        self.device, self.dtype, self.built = device, dtype, {}
        self.tokenizer = train_tokenizer(task_texts())
        self.tokenizer.padding_side = "left"

    def get(self, name: str):
        import torch
        from transformers import AutoModelForCausalLM

        from race.nn.devices import torch_dtype
        from race.nn.measure import qwen2_config
        from race.pilot.learner import LearnerConfig, LoraLearner

        if name not in self.built:
            shape, tok = perf_shape(name), self.tokenizer
            config = qwen2_config(shape, eos_token_id=tok.eos_token_id,
                                  pad_token_id=tok.pad_token_id)
            torch.manual_seed(0)
            with torch.device(self.device):  # initialised where it runs: seconds, not minutes
                model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(self.dtype))
            learner = LoraLearner(model, shape, LearnerConfig(lora_rank=16),
                                  pad_id=tok.pad_token_id, device=self.device)
            self.built[name] = (learner, shape)
        return self.built[name]

    def release(self) -> None:
        from race.pilot.components import release_memory

        self.built.clear()
        release_memory(self.device)


def _prompts(n: int, split: str = "test") -> list[str]:
    from race.tasks.arith import ArithTask

    return [ex.prompt for ex in ArithTask().sample(split, n, seed=5)]


def _timed_generate(backend, device: str, prompts, **kw):
    from race.nn.devices import synchronize

    synchronize(device)
    start = time.perf_counter()
    out = backend.generate(prompts, **kw)
    synchronize(device)
    return out, time.perf_counter() - start


def perf_rollout(policies: Policies, plan: Plan, limits: dict, clock: Clock) -> list[dict]:
    """Sampled rollouts per (model, path, G, new tokens), the target shape first."""
    from race.pilot.rollout.hf import HFBackend

    configs = [(m, g, n) for n in plan.new_tokens for m in plan.models for g in plan.groups]
    configs.sort(key=lambda c: c != TARGET_ROLLOUT)  # stable: the rest in plan order
    prompts, rows = _prompts(plan.prompts), []
    for model, group, new in configs:
        for path in PATHS:
            row = {"model": model, "path": path, "prompts": plan.prompts, "group": group,
                   "new_tokens": new}
            if clock.late("rollout"):
                rows.append(row | {"skipped": "time budget"})
                continue
            learner, shape = policies.get(model)
            backend = HFBackend(learner.model, policies.tokenizer, shape, learner.lora,
                                generation=path)
            kw = dict(n=group, max_new_tokens=new, temperature=1.0, seed=0)
            first_s = None
            if backend.generation == "static":  # the first call compiles and captures
                _, first_s = _timed_generate(backend, policies.device, prompts, **kw)
            out, seconds = _timed_generate(backend, policies.device, prompts, **kw)
            prompt = statistics.fmean(len(p) for p in out.prompt_ids)
            limit = decode_limit(shape, learner.lora, rows=len(out.completion_ids),
                                 prompt_tokens=round(prompt), new_tokens=new,
                                 bandwidth_bytes_per_s=limits["copy_bytes_per_s"])
            rate = out.completion_tokens / seconds
            rows.append(row | {
                "first_s": first_s, "s": seconds, "completion_tokens": out.completion_tokens,
                "tokens_per_s": rate, "mfu": out.flops_model / seconds / limits["peak_flops"],
                "flops_model": out.flops_model, "flops_executed": out.flops_executed,
                "limit_tokens_per_s": limit["tokens_per_s"],
                "share_of_limit": rate / limit["tokens_per_s"],
                "limit_bytes_per_step": limit["bytes_per_step"]})
    return rows


def _learning_batch(tokenizer, rows: int, completion_tokens: int, seed: int = 0):
    """``rows`` completions of random tokens: prompts of 40-60 tokens, completions of 3/4 to all
    of ``completion_tokens`` (the lengths a pilot's batch spreads over), advantages +-1."""
    import random

    from race.pilot.learner import Batch

    rng = random.Random(seed)
    vocab = len(tokenizer)
    prompt = [tuple(rng.randrange(vocab) for _ in range(rng.randint(40, 60))) for _ in range(rows)]
    completion = [tuple(rng.randrange(vocab) for _ in range(
        rng.randint(3 * completion_tokens // 4, completion_tokens))) for _ in range(rows)]
    return Batch(tuple(prompt), tuple(completion), tuple((-1.0) ** r for r in range(rows)))


def perf_learning(policies: Policies, plan: Plan, limits: dict, clock: Clock) -> list[dict]:
    """One update of ``prompts`` x 8 completions per micro-batch size: seconds, MFU, peak
    GiB."""
    import torch

    from race.nn.devices import synchronize

    cuda, out = policies.device == "cuda", []
    for model in plan.models:
        for tokens in plan.learn_tokens:
            batch = _learning_batch(policies.tokenizer, plan.prompts * 8, tokens)
            warm = False
            for micro in plan.micro_sizes:
                row = {"model": model, "completion_tokens": tokens, "micro_batch_size": micro}
                if clock.late("learning"):
                    out.append(row | {"skipped": "time budget"})
                    continue
                learner, _ = policies.get(model)
                learner.config = dataclasses.replace(learner.config, micro_batch_size=micro)
                try:
                    if not warm:  # first pass of a shape: kernels, allocator, autotuning
                        learner.update(batch, step=0)
                        warm = True
                    if cuda:
                        torch.cuda.reset_peak_memory_stats()
                    before = dict(learner.flops)
                    synchronize(policies.device)
                    start = time.perf_counter()
                    learner.update(batch, step=1)
                    synchronize(policies.device)
                    seconds = time.perf_counter() - start
                except torch.cuda.OutOfMemoryError as error:
                    out.append(row | {"oom": str(error).splitlines()[0]})
                    torch.cuda.empty_cache()
                    continue
                flops_model = learner.flops["model"] - before["model"]
                out.append(row | {
                    "s": seconds, "flops_model": flops_model,
                    "flops_executed": learner.flops["executed"] - before["executed"],
                    "mfu": flops_model / seconds / limits["peak_flops"],
                    "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None})
    return out


def perf_eval(policies: Policies, plan: Plan, clock: Clock) -> list[dict]:
    """Greedy generation of ``eval_prompts`` problems in batches of ``eval_rows``, per path."""
    from race.pilot.rollout.hf import HFBackend

    model, new = plan.models[0], plan.new_tokens[0]
    prompts, rows = _prompts(plan.eval_prompts, "val"), []
    for path in PATHS:
        row = {"model": model, "path": path, "problems": len(prompts), "new_tokens": new}
        if clock.late("eval"):
            rows.append(row | {"skipped": "time budget"})
            continue
        learner, shape = policies.get(model)
        backend = HFBackend(learner.model, policies.tokenizer, shape, learner.lora,
                            batch_rows=plan.eval_rows, generation=path)
        _, first_s = _timed_generate(backend, policies.device, prompts[:plan.eval_rows], n=1,
                                     max_new_tokens=new, greedy=True)  # compile, capture
        out, seconds = _timed_generate(backend, policies.device, prompts, n=1,
                                       max_new_tokens=new, greedy=True)
        rows.append(row | {"warmup_s": first_s, "s": seconds,
                           "tokens_per_s": out.completion_tokens / seconds})
    return rows


def perf_pilot(work: Path, device: str, dtype: str, plan: Plan, clock: Clock,
               smoke: bool) -> dict:
    """One pilot of the first model's stand-in with the default cell's evaluation."""
    from transformers import AutoTokenizer

    if clock.late("pilot"):
        return {"skipped": "time budget"}

    from race.tasks import build_task, prompt_bound
    from race.warmstart.standin import build_standin

    folder = build_standin(work / "pilot-standin", perf_shape(plan.models[0]), task_texts(),
                           dtype=dtype)
    base = dict(model=str(folder), reward=(("kind", "rule"), ("name", "rule")),
                task=(("name", "arith"),), budget_flops=1.0, max_new_tokens=plan.new_tokens[0],
                device=device, dtype=dtype)
    if smoke:
        base |= dict(eval_examples=4, select_examples=4, checkpoints=(0.5, 1.0))
    probe = RunSpec(**base)
    prompt = prompt_bound(build_task({"name": "arith"}), AutoTokenizer.from_pretrained(folder),
                          ("train", "val", "test", "ood"))
    budget = plan.pilot_steps * worst_step_flops(probe, prompt) * 1.01
    summary = run_cell(dataclasses.replace(probe, budget_flops=budget), work / "pilot")
    wall = summary["wall_s"]
    return {k: summary[k] for k in ("status", "error", "steps", "wall_s", "wall_total_s",
                                    "throughput", "rollout_tokens_per_s", "peak_flops")} | {
        "eval_share": wall.get("eval", 0.0) / summary["wall_total_s"],
        "phase_share": {k: v / summary["wall_total_s"] for k, v in wall.items()},
        "checkpoints": list(probe.checkpoints), "eval_examples": probe.eval_examples,
        "select_examples": probe.select_examples, "max_new_tokens": probe.max_new_tokens}


# --------------------------------------------------------------------------- report


def targets(report: dict) -> dict:
    """The issue's GPU targets read off this run (None where a section has no number)."""
    out = {"rollout_tokens_per_s": None, "learning_mfu": None, "eval_share": None}
    rollout = report.get("rollout")
    if isinstance(rollout, list):
        hits = [r["tokens_per_s"] for r in rollout if "tokens_per_s" in r
                and (r["model"], r["group"], r["new_tokens"]) == TARGET_ROLLOUT]
        out["rollout_tokens_per_s"] = max(hits, default=None)
    learning = report.get("learning")
    if isinstance(learning, list):
        mfus = [r["mfu"] for r in learning if "mfu" in r and r["model"] == TARGET_ROLLOUT[0]]
        out["learning_mfu"] = max(mfus, default=None)
    pilot = report.get("pilot")
    if isinstance(pilot, dict) and "eval_share" in pilot:
        out["eval_share"] = pilot["eval_share"]
    met = {"rollout_tokens_per_s": lambda v: v >= 10 * TODAY_TOKENS_PER_S,
           "learning_mfu": lambda v: v >= 0.30, "eval_share": lambda v: v <= 0.25}
    return {k: {"value": v, "met": None if v is None else met[k](v)} for k, v in out.items()}


def _num(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict) -> str:
    lines = [f"versions: {report['versions']}", ""]
    limits = report.get("limits")
    if isinstance(limits, dict) and "peak_flops" in limits:
        lines += [f"copy bandwidth {limits['copy_bytes_per_s'] / 1e12:.3f} TB/s, "
                  f"matmul peak {limits['peak_flops']:.3e} FLOP/s", ""]
    rollout = report.get("rollout")
    if isinstance(rollout, list):
        lines += ["| rollout | path | P x G x new | first s | s | tokens/s | MFU | "
                  "limit tokens/s | of limit |", "|---|---|---|---|---|---|---|---|---|"]
        for r in rollout:
            shape = f"{r['prompts']} x {r['group']} x {r['new_tokens']}"
            if "skipped" in r:
                lines.append(f"| {r['model']} | {r['path']} | {shape} | skipped | | | | | |")
                continue
            lines.append(f"| {r['model']} | {r['path']} | {shape} | {_num(r['first_s'], '.2f')} | "
                         f"{r['s']:.2f} | {r['tokens_per_s']:.0f} | {r['mfu']:.4f} | "
                         f"{r['limit_tokens_per_s']:.0f} | {r['share_of_limit']:.3f} |")
        lines.append("")
    learning = report.get("learning")
    if isinstance(learning, list):
        lines += ["| learning | tokens | micro-batch | s | MFU | peak GiB |",
                  "|---|---|---|---|---|---|"]
        for r in learning:
            note = r.get("skipped") or ("OOM" if "oom" in r else None)
            if note:
                lines.append(f"| {r['model']} | {r['completion_tokens']} | "
                             f"{r['micro_batch_size']} | {note} | | |")
                continue
            lines.append(f"| {r['model']} | {r['completion_tokens']} | "
                         f"{r['micro_batch_size']} | {r['s']:.2f} | {r['mfu']:.4f} | "
                         f"{_num(r['peak_gib'], '.2f')} |")
        lines.append("")
    pilot = report.get("pilot")
    if isinstance(pilot, dict) and "skipped" in pilot:
        lines += [f"pilot: skipped ({pilot['skipped']})", ""]
    if isinstance(pilot, dict) and "wall_s" in pilot:
        lines += [f"pilot: {pilot['status']}, {pilot['steps']} steps, "
                  f"{pilot['wall_total_s']:.1f} s, eval share {pilot['eval_share']:.3f}; "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in pilot["wall_s"].items()), ""]
    evals = report.get("eval")
    if isinstance(evals, list):
        for r in evals:
            lines.append(f"eval {r['model']} {r['path']}: " + (
                r["skipped"] if "skipped" in r else
                f"{r['problems']} problems in {r['s']:.2f} s ({r['tokens_per_s']:.0f} tokens/s)"))
        lines.append("")
    for name, t in report["targets"].items():
        met = {None: "-", True: "met", False: "NOT met"}[t["met"]]
        lines.append(f"target {name}: {_num(t['value'], '.4g')} ({met})")
    for name in SECTIONS:
        if isinstance(report.get(name), dict) and "failed" in report[name]:
            lines.append(f"{name}: FAILED (traceback in the JSON)")
    return "\n".join(lines)


def run_perf(report: dict, device: str, dtype: str, work: Path, smoke: bool) -> bool:
    """Fill ``report`` section by section; True when none failed."""
    plan, clock = SMOKE_PLAN if smoke else GPU_PLAN, Clock(timed=not smoke)
    report["plan"] = dataclasses.asdict(plan)
    if device == "cuda":
        import torch

        # one compiled decode step per (model, batch rows, cache length): more than the
        # default 8 entries across the two stand-ins and every shape
        torch._dynamo.config.recompile_limit = 64
    section(report, "limits", lambda: measure_limits(device, dtype, plan))
    limits = report["limits"] if "peak_flops" in report["limits"] else {
        "copy_bytes_per_s": float("nan"), "peak_flops": float("nan")}
    policies = None

    def shared() -> Policies:
        nonlocal policies
        policies = policies or Policies(device, dtype)
        return policies

    section(report, "rollout", lambda: perf_rollout(shared(), plan, limits, clock))
    section(report, "learning", lambda: perf_learning(shared(), plan, limits, clock))
    section(report, "eval", lambda: perf_eval(shared(), plan, clock))
    if policies is not None:  # the pilot builds its own model
        policies.release()
    section(report, "pilot", lambda: perf_pilot(work, device, dtype, plan, clock, smoke))
    report["targets"] = targets(report)
    report["wall_s"] = time.perf_counter() - clock.start
    failed = [k for k in SECTIONS if isinstance(report[k], dict) and "failed" in report[k]]
    pilot_ok = report["pilot"].get("status") == "ok" or (
        "skipped" in report["pilot"] and not smoke)
    print(f"[device_check] perf took {report['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return not failed and pilot_ok
