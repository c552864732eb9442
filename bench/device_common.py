"""What ``bench/device_check.py`` and ``bench/device_perf.py`` share: the stand-in shape,
its tokenizer's texts, one pilot cell run and timed, and a report section that keeps the
others' numbers when it fails (so neither script imports the other's internals)."""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from pathlib import Path

from race.catalog import load_model_shape
from race.core.specs import RunSpec
from race.store import io as results


def task_texts(n: int = 2000) -> list[str]:
    from race.tasks import build_task

    task = build_task({"name": "arith"})
    return [ex.prompt + ex.trace for ex in task.sample("train", n, seed=123)]


def standin_shape(smoke: bool):
    """Qwen2.5-0.5B's shape, or a GQA miniature of it for --smoke."""
    shape = load_model_shape("qwen2.5-0.5b")
    if smoke:
        shape = dataclasses.replace(shape, name="qwen-mini", hidden_size=128,
                                    intermediate_size=352, num_layers=2, num_heads=4,
                                    num_kv_heads=2, head_dim=32, vocab_size=1024)
    return shape


def run_cell(spec: RunSpec, out_dir: Path) -> dict:
    from race.pilot.loop import run_pilot

    start = time.perf_counter()
    summary = run_pilot(spec, out_dir / spec.cell_id, checkpoint_every=0)
    summary["wall_total_s"] = time.perf_counter() - start
    rows = [r for r in results.read_jsonl(out_dir / spec.cell_id / "metrics.jsonl")
            if r["kind"] == "step"]
    tokens = sum(r["completion_tokens"] for r in rows)
    summary["completion_tokens"] = tokens
    summary["rollout_tokens_per_s"] = tokens / max(summary["wall_s"]["rollout"], 1e-9)
    return summary


def section(report: dict, name: str, run) -> None:
    start = time.perf_counter()
    try:
        report[name] = run()
    except Exception:  # one broken section must not hide the others' numbers
        report[name] = {"failed": traceback.format_exc()}
        print(report[name]["failed"], file=sys.stderr)
    print(f"[device_check] {name}: {time.perf_counter() - start:.0f} s", file=sys.stderr,
          flush=True)
