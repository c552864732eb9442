"""``bench/device_check.py --perf`` (bench/device_perf.py): its pure limits, its reading of
the issue's targets, and a CPU smoke run of every section (CI runs it)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import device_perf
from race.catalog import load_model_shape
from race.core.specs import LoraShape

ROOT = Path(__file__).resolve().parent.parent


def test_weight_bytes_by_hand():
    """tiny-s in bf16: 3 layers of linears plus the (tied) head read once; rank-2 fp32
    adapters on q_proj and v_proj."""
    shape = load_model_shape("tiny-s")
    linears = 3 * (80 * 80 + 2 * 80 * 40 + 80 * 80 + 3 * 80 * 240)
    adapters = 3 * 2 * ((80 + 80) + (80 + 40))
    assert device_perf.weight_bytes(shape, None) == 2 * (linears + 64 * 80)
    assert device_perf.weight_bytes(shape, LoraShape(2, ("q_proj", "v_proj"))) == \
        2 * (linears + 64 * 80) + 4 * adapters


def test_decode_limit_by_hand():
    """Qwen2.5-0.5B, no adapters, 64 rows, prompt 40, 128 new tokens, 4 TB/s: weights once
    per step plus keys and values of 104 tokens per row (24 layers, 2 x 128 wide, bf16)."""
    shape = load_model_shape("qwen2.5-0.5b")
    weights = 2 * (shape.linear_params + 151936 * 896)
    kv = 64 * (40 + 64) * 2 * 24 * 128 * 2
    limit = device_perf.decode_limit(shape, None, rows=64, prompt_tokens=40, new_tokens=128,
                                     bandwidth_bytes_per_s=4e12)
    assert limit["bytes_per_step"] == weights + kv
    assert limit["tokens_per_s"] == pytest.approx(64 * 4e12 / (weights + kv))
    # about 1 GB a step: a batch of 64 is bounded near 2.6e5 tokens/s on such a GPU
    assert 2e5 < limit["tokens_per_s"] < 3e5


def test_targets_read_the_target_shape_and_the_pilot():
    report = {
        "rollout": [
            {"model": "qwen2.5-0.5b", "group": 8, "new_tokens": 128, "tokens_per_s": 20000.0},
            {"model": "qwen2.5-0.5b", "group": 8, "new_tokens": 128, "tokens_per_s": 1600.0},
            {"model": "qwen2.5-0.5b", "group": 16, "new_tokens": 128, "tokens_per_s": 9e5},
            {"model": "qwen2.5-0.5b", "group": 4, "new_tokens": 512, "skipped": "time budget"}],
        "learning": [{"model": "qwen2.5-0.5b", "mfu": 0.2}, {"model": "qwen2.5-1.5b",
                                                             "mfu": 0.5},
                     {"model": "qwen2.5-0.5b", "oom": "CUDA out of memory"}],
        "pilot": {"failed": "Traceback ..."}}
    got = device_perf.targets(report)
    assert got["rollout_tokens_per_s"] == {"value": 20000.0, "met": True}
    assert got["learning_mfu"] == {"value": 0.2, "met": False}
    assert got["eval_share"] == {"value": None, "met": None}


@pytest.mark.slow
def test_perf_smoke_runs_every_section_on_cpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--perf",
                          "--smoke", "--out", str(tmp_path / "perf.json"), "--work",
                          str(tmp_path / "work")],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "device_check --perf: ok on cpu (smoke)"
    report = json.loads((tmp_path / "perf.json").read_text())
    plan = device_perf.SMOKE_PLAN
    rollout = report["rollout"]
    assert len(rollout) == len(plan.models) * len(plan.groups) * len(plan.new_tokens) * 2
    assert all(r["tokens_per_s"] > 0 and r["limit_tokens_per_s"] > 0 for r in rollout)
    assert {r["path"] for r in rollout} == {"eager", "static"}
    assert all("mfu" in r for r in report["learning"])
    assert [r["path"] for r in report["eval"]] == ["static", "eager"]
    assert report["pilot"]["status"] == "ok" and 0 < report["pilot"]["eval_share"] < 1
    assert set(report["targets"]) == {"rollout_tokens_per_s", "learning_mfu", "eval_share"}
