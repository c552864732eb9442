"""One prepared check of RACE on a GPU: FLOPs measured vs the ledger, a pilot on the
Qwen2.5-0.5B shape, and the tiny family on CUDA vs CPU.

1. **FLOPs** (``flops``): a randomly initialised Qwen2.5-0.5B-shaped stand-in (real
   widths, 24 layers, 14 query / 2 key-value heads, 151,936-row vocabulary) in bf16
   under the pilot's own LoRA learner and HF backend with ``measure=True``: a policy
   forward, a reference pass (adapters off), a LoRA train pass and a sampled ``generate``
   with left padding, each measured with FlopCounterMode and compared with the
   ``executed`` ledger (relative error must be <= 1e-3).
2. **Pilot** (``pilot``, ``pilot_micro``): ``run_pilot`` of that stand-in for a few GRPO
   steps on the embedded task, in one pass per minibatch and in micro-batches of 8:
   tokens/s of rollouts, and per phase achieved FLOP/s, MFU, HFU and peak GiB beside
   ``race plan``'s memory estimate (the stand-in's weights are random: cost, not
   accuracy).
3. **Tiny family** (``tiny``): the default cell (G=8, mu=1, rule reward) of tiny-s and
   tiny-m at F/64 on CUDA (bf16) and on CPU (fp32): wall seconds, steps, val accuracy.

No model hub, no vLLM, no Hydra. ``--smoke`` runs the same code on CPU with a shrunken
shape and budgets (CI runs it). Results go to ``--out`` (JSON) and a Markdown table on
stdout.

``--perf`` runs the performance check instead (``bench/device_perf.py``: rollout tokens/s
and MFU per generation path and batch shape beside the bandwidth-bound decode limit,
learning MFU and peak memory per micro-batch size, eval time, one pilot's wall clock by
phase; at most 8 minutes on one GPU), written to ``bench/data/device_check_perf.json``;
``--perf --smoke`` runs every section of it on CPU with miniature shapes. Usage::

    python bench/device_check.py [--perf] [--smoke] [--out results/device_check.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bench.device_common import run_cell, section, standin_shape, task_texts
from race.catalog import load_model_shape
from race.core.specs import RunSpec
from race.pilot.budget import worst_step_flops

TOL = 1e-3
SECTIONS = ("flops", "pilot", "pilot_micro", "tiny")
FULL_BUDGET = 3.5e12  # the embedded default's full-run budget F (FLOPs)


def _versions() -> dict:
    import peft
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft.__version__,
            "cuda": torch.version.cuda if cuda else None,
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "cpu_threads": torch.get_num_threads()}


def check_flops(folder: Path, device: str, dtype: str) -> list[dict]:
    """Measured vs ledger (executed) FLOPs of the four passes a pilot runs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.catalog import load_model_shape
    from race.nn.devices import torch_dtype
    from race.pilot.learner import Batch, LearnerConfig, LoraLearner
    from race.pilot.rollout.hf import HFBackend

    shape = load_model_shape(str(folder))
    tok = AutoTokenizer.from_pretrained(folder)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(dtype))
    learner = LoraLearner(model, shape, LearnerConfig(lora_rank=16), pad_id=tok.pad_token_id,
                          measure=True, device=device)
    backend = HFBackend(learner.model, tok, shape, learner.lora, measure=True)
    prompts = ["3+4=?\n", "12+30+7=?\n", "5+5+5+5=?\nthink step by step\n", "8+1=?\n"]
    rows = []
    out = backend.generate(prompts, n=2, max_new_tokens=24, temperature=1.0, seed=0)
    rows.append({"phase": "generate (left padding)", "ledger": out.flops_executed,
                 "measured": out.flops_measured})
    batch = Batch(out.prompt_ids, out.completion_ids, tuple([1.0, -1.0] * len(prompts)))
    for label, run in (("policy forward", lambda: learner.logprobs(batch)),
                       ("reference pass", lambda: learner.logprobs(batch, adapters=False)),
                       ("LoRA train", lambda: learner.update(batch, step=0))):
        before = dict(learner.flops)
        run()
        rows.append({"phase": label, "ledger": learner.flops["executed"] - before["executed"],
                     "measured": learner.flops["measured"] - before["measured"]})
    for row in rows:
        row["rel_error"] = abs(row["ledger"] - row["measured"]) / row["measured"]
        row["ok"] = row["rel_error"] <= TOL
    rows.append({"phase": "attention backward", "fused": learner.fused_attention})
    return rows


def check_pilot(folder: Path, device: str, dtype: str, out_dir: Path, smoke: bool,
                micro_batch_size: int = 0) -> dict:
    """A few GRPO steps of the stand-in through run_pilot, beside race plan's memory
    estimate for the same cell (resident + each phase, GiB)."""
    from transformers import AutoTokenizer

    from race.core.memory import plan_memory
    from race.core.specs import LoraShape
    from race.tasks import build_task, prompt_bound

    base = dict(model=str(folder), reward=(("kind", "rule"), ("name", "rule")),
                task=(("name", "arith"),), budget_flops=1.0, prompts_per_step=8,
                group_size=8, max_new_tokens=32 if smoke else 128, device=device,
                dtype=dtype, micro_batch_size=micro_batch_size,
                checkpoints=(1.0,), eval_examples=16 if smoke else 32,
                eval_targets=("val",), select_examples=16 if smoke else 32)
    probe = RunSpec(**base)
    steps = 2 if smoke else 4
    budget = steps * worst_step_flops(probe, 16) * 1.01
    summary = run_cell(dataclasses.replace(probe, budget_flops=budget), out_dir)
    prompt = prompt_bound(build_task({"name": "arith"}), AutoTokenizer.from_pretrained(folder),
                          ("train", "val"))
    rows = probe.prompts_per_step * probe.group_size
    plan = plan_memory(load_model_shape(str(folder)), LoraShape(probe.lora_rank),
                       dtype=dtype, rows=rows, micro_rows=micro_batch_size or rows,
                       prompt_tokens=prompt, max_new_tokens=probe.max_new_tokens).gib()
    planned = {phase: plan["resident"] + plan[phase] for phase in ("rollout", "learning")}
    return {k: summary[k] for k in ("status", "error", "steps", "budget_flops", "total_flops",
                                    "device", "dtype", "peak_flops", "peak_measured",
                                    "throughput", "wall_s", "wall_total_s", "padding",
                                    "completion_tokens", "rollout_tokens_per_s")
            } | {"micro_batch_size": micro_batch_size, "planned_gib": planned}


def check_tiny(devices: list[str], out_dir: Path, smoke: bool) -> list[dict]:
    """The default cell of the tiny sizes at F/64 (tiny-s at F/256 with --smoke) per
    device, each in its device's default dtype."""
    rows = []
    sizes = ["tiny-s"] if smoke else ["tiny-s", "tiny-m"]
    for model in sizes:
        for device in devices:
            spec = RunSpec(model=model, reward=(("kind", "rule"), ("name", "rule")),
                           task=(("name", "arith"),),
                           budget_flops=FULL_BUDGET / (256 if smoke else 64),
                           device=device, checkpoints=(1.0,), eval_targets=("val",),
                           eval_examples=64 if smoke else 256,
                           select_examples=64 if smoke else 256)
            s = run_cell(spec, out_dir / device)
            final = s["final_eval"].get("val", {})
            rows.append({"model": model, "device": device, "dtype": s["dtype"],
                         "status": s["status"], "error": s["error"], "steps": s["steps"],
                         "wall_total_s": s["wall_total_s"], "wall_s": s["wall_s"],
                         "val_accuracy": final.get("accuracy"),
                         "rollout_tokens_per_s": s["rollout_tokens_per_s"]})
    return rows


def markdown(report: dict) -> str:
    lines = [f"versions: {json.dumps(report['versions'])}", ""]
    flops = report.get("flops")
    if isinstance(flops, list):
        lines += ["| FLOPs check | ledger (executed) | measured | rel. error | ok |",
                  "|---|---|---|---|---|"]
        for r in flops:
            if "ledger" in r:
                lines.append(f"| {r['phase']} | {r['ledger']:.4e} | {r['measured']:.4e} | "
                             f"{r['rel_error']:.1e} | {'yes' if r['ok'] else 'NO'} |")
            else:
                lines.append(f"| {r['phase']} | fused kernel: {r['fused']} | | | |")
        lines.append("")
    for key in ("pilot", "pilot_micro"):
        pilot = report.get(key)
        if not (isinstance(pilot, dict) and "throughput" in pilot):
            continue
        lines += [f"{key}: {pilot['status']} {pilot['steps']} steps on {pilot['device']} "
                  f"({pilot['dtype']}, micro_batch_size={pilot['micro_batch_size']}), "
                  f"{pilot['total_flops']:.3e} of {pilot['budget_flops']:.3e} FLOPs, rollout "
                  f"{pilot['rollout_tokens_per_s']:.0f} tokens/s, peak "
                  f"{pilot['peak_flops']:.3e} FLOP/s "
                  f"({'measured' if pilot['peak_measured'] else 'given'}), executed/model "
                  + ", ".join(f"{k} {v:.3f}" for k, v in pilot["padding"].items()),
                  "", "| phase | wall s | FLOP/s (model) | MFU | HFU | peak GiB | plan GiB |",
                  "|---|---|---|---|---|---|---|"]
        for phase, t in pilot["throughput"].items():
            mfu = f"{t['mfu']:.4f}" if t["mfu"] is not None else "-"
            hfu = f"{t['hfu']:.4f}" if t["hfu"] is not None else "-"
            gib = f"{t['peak_gib']:.2f}" if t["peak_gib"] is not None else "-"
            plan = pilot["planned_gib"].get(phase)
            lines.append(f"| {phase} | {pilot['wall_s'][phase]:.2f} | "
                         f"{t['flops_per_s']:.3e} | {mfu} | {hfu} | {gib} | "
                         f"{f'{plan:.2f}' if plan is not None else '-'} |")
        lines.append("")
    tiny = report.get("tiny")
    if isinstance(tiny, list):
        lines += ["| tiny cell | device | dtype | status | steps | wall s | val acc | "
                  "rollout tokens/s |", "|---|---|---|---|---|---|---|---|"]
        for r in tiny:
            acc = f"{r['val_accuracy']:.3f}" if r["val_accuracy"] is not None else "-"
            lines.append(f"| {r['model']} | {r['device']} | {r['dtype']} | {r['status']} | "
                         f"{r['steps']} | {r['wall_total_s']:.1f} | {acc} | "
                         f"{r['rollout_tokens_per_s']:.0f} |")
    for name in SECTIONS:
        if isinstance(report.get(name), dict) and "failed" in report[name]:
            lines.append(f"{name}: FAILED (traceback in the JSON)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", "--quick", action="store_true",
                        help="CPU, a miniature shape and tiny budgets (what CI runs)")
    parser.add_argument("--perf", action="store_true",
                        help="the performance check (bench/device_perf.py) instead")
    parser.add_argument("--out", default="", help="JSON path (default: "
                        "results/device_check.json; --perf: bench/data/device_check_perf.json"
                        ", with --smoke results/device_check_perf_smoke.json)")
    parser.add_argument("--work", default="", help="scratch folder (default: a temp dir)")
    args = parser.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    device = "cuda" if cuda else "cpu"
    dtype = "bfloat16"  # the GPU default; on CPU it checks the bf16 path too
    report = {"smoke": args.smoke, "versions": _versions(), "device": device}
    work = Path(args.work or tempfile.mkdtemp(prefix="race-device-check-"))
    if args.perf:
        return perf_main(report, device, dtype, work, args)
    args.out = args.out or "results/device_check.json"
    folder = work / "standin"
    from race.warmstart.standin import build_standin

    start = time.perf_counter()
    build_standin(folder, standin_shape(args.smoke), task_texts(), dtype=dtype)
    print(f"[device_check] stand-in built in {time.perf_counter() - start:.0f} s",
          file=sys.stderr, flush=True)
    section(report, "flops", lambda: check_flops(folder, device, dtype))
    section(report, "pilot", lambda: check_pilot(folder, device, dtype, work / "pilot",
                                                   args.smoke))
    section(report, "pilot_micro", lambda: check_pilot(folder, device, dtype,
                                                         work / "pilot-micro", args.smoke,
                                                         micro_batch_size=8))
    devices = ["cuda", "cpu"] if cuda else ["cpu"]
    section(report, "tiny", lambda: check_tiny(devices, work / "tiny", args.smoke))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print(markdown(report))
    failed = [k for k in SECTIONS if isinstance(report[k], dict) and "failed" in report[k]]
    bad_flops = isinstance(report["flops"], list) and not all(
        r.get("ok", True) for r in report["flops"])
    broken = (not failed and (report["pilot"]["status"] != "ok"
                              or report["pilot_micro"]["status"] != "ok"
                              or any(r["status"] != "ok" for r in report["tiny"])))
    ok = not failed and not bad_flops and not broken
    print(f"device_check: {'ok' if ok else 'FAILED'} on {device}"
          f"{' (smoke)' if args.smoke else ''}")
    return 0 if ok else 1


def perf_main(report: dict, device: str, dtype: str, work: Path, args) -> int:
    """``--perf``: bench/device_perf.py's sections, its JSON and table, one status line."""
    from bench import device_perf

    ok = device_perf.run_perf(report, device, dtype, work, args.smoke)
    out = Path(args.out or ("results/device_check_perf_smoke.json" if args.smoke
                            else "bench/data/device_check_perf.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(device_perf.markdown(report))
    print(f"device_check --perf: {'ok' if ok else 'FAILED'} on {device}"
          f"{' (smoke)' if args.smoke else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
