"""Hub weights before launch: an offline sweep of a hub model that is not in the Hugging
Face cache is refused before any cell folder exists (naming `race prefetch`), `race plan`
plans it and says what a sweep would need, and a cache laid out as the hub lays it out
(built here from a stand-in) lets the pilot run offline and record the snapshot's hash."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from race.catalog import conf_dir
from race.core.specs import RunSpec
from race.run.prefetch import HubNeed, hub_needs

pytest.importorskip("torch", reason="the offline pilot trains with torch")

SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"  # a commit hash, as the hub names them
REPO = "race-test/Standin-Tiny"


def _race(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=900, cwd=cwd, env=dict(os.environ, **env))


def _one_line(out: subprocess.CompletedProcess) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_an_offline_sweep_of_a_missing_hub_model_is_refused_before_any_folder(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-cache")}
    args = ["model=qwen2.5-0.5b", "budget=1e15"]
    out = _race(["sweep", *args, f"sweep.out_dir={tmp_path / 'results'}"], tmp_path, **env)
    assert out.returncode == 2, out.stderr
    line = _one_line(out)
    assert line.startswith("race sweep: model.hf_id=Qwen/Qwen2.5-0.5B-Instruct: not in the "
                           "Hugging Face cache (HF_HUB_OFFLINE=1)")
    assert "run `race prefetch` with the same overrides" in line
    assert not (tmp_path / "results").exists()
    plan = _race(["plan", *args], tmp_path, **env)
    assert plan.returncode == 0, plan.stderr
    assert "Qwen/Qwen2.5-0.5B-Instruct (model, model.hf_id)" in plan.stderr
    assert "run `race prefetch`" in plan.stderr


def test_hub_needs_lists_policies_reward_models_and_datasets_once():
    rule = (("kind", "rule"), ("name", "rule"))
    specs = [RunSpec("qwen2.5-0.5b", rule, (("name", "math"), ("source", "org/data"),
                                            ("eval", json.dumps({"m": "/local/file.jsonl",
                                                                 "g": {"source": "openai/gsm8k",
                                                                       "subset": "main"}}))),
                     1.0, policy_path="Qwen/Qwen2.5-0.5B-Instruct", policy_revision="v1",
                     seed=seed) for seed in (0, 1)]
    assert hub_needs(specs) == [
        HubNeed("dataset", "task.source", "org/data"),
        HubNeed("dataset", "task.eval.g", "openai/gsm8k", subset="main"),
        HubNeed("model", "model.hf_id", "Qwen/Qwen2.5-0.5B-Instruct", "v1")]


@pytest.fixture
def hub_cache(standin, tmp_path):
    """``$HF_HUB_CACHE/models--race-test--Standin-Tiny/snapshots/<hash>/`` holding the
    stand-in policy, ``refs/main`` naming the hash, and a conf/ folder whose model entry
    ``standin-hub`` names the hub id (shape from the stand-in)."""
    cache = tmp_path / "hub"
    repo = cache / f"models--{REPO.replace('/', '--')}"
    shutil.copytree(standin["policy"], repo / "snapshots" / SNAPSHOT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    entry = dataclasses.asdict(dataclasses.replace(standin["shape"], name="standin-hub",
                                                   hf_id=REPO))
    (conf / "model" / "standin-hub.yaml").write_text(yaml.safe_dump(
        entry | {"tokenizer": "", "context_tokens": 4096}))
    return {"cache": cache, "conf": conf}


def test_a_cache_laid_out_like_the_hub_runs_offline_and_records_the_snapshot(
        hub_cache, standin, tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache["cache"]),
           "RACE_CONF_DIR": str(hub_cache["conf"])}
    out = _race(["sweep", "model=standin-hub", "task=gsm8k", f"task.source={standin['data']}",
                 "reward=rule", "grid.axes={}", "grid.group_size=2", "grid.update_epochs=1",
                 "grid.prompts_per_step=2", "grid.max_new_tokens=12", "budget=2e10",
                 "pilot.fraction=0.25", "selection.policy=flat", "pilot.eval_examples=4",
                 "pilot.select_examples=4", "pilot.checkpoints=[1.0]", "launcher=inline",
                 f"sweep.out_dir={tmp_path}", "sweep.name=hub"], tmp_path, **env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(next((tmp_path / "hub" / "cells").glob("*/summary.json")).read_text())
    assert summary["status"] == "ok", summary["error"]
    assert summary["weights"]["policy"] == {"source": REPO, "revision": SNAPSHOT}
