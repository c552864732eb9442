"""Shared fixtures: the SLURM cluster the `slurm`-marked tests run against, a short
warm-started tiny policy and tiny PRM, and a reward stand-in that makes every step learn."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def slurm_cluster():
    """Skip (with the fix) unless a SLURM controller answers; CI brings one up."""
    if shutil.which("sinfo") is None:
        pytest.skip("no SLURM client on PATH; run `bash launchers/slurm-localhost.sh up` "
                    "(CI does) to run the slurm tests")
    out = subprocess.run(["sinfo", "-h", "-o", "%P %t"], capture_output=True, text=True,
                         timeout=30)
    if out.returncode != 0 or not out.stdout.strip():
        pytest.skip(f"SLURM does not answer ({out.stderr.strip()[:120]}); run `bash "
                    f"launchers/slurm-localhost.sh up` and export SLURM_CONF")
    return out.stdout.split()[0].rstrip("*")


@pytest.fixture(scope="session")
def policy(tmp_path_factory):
    """A tiny-s policy from a 30-step warm start, in its own cache (a few seconds)."""
    import os

    from race.warmstart.policies import WarmStartRecipe, build_tiny_policy

    old = os.environ.get("RACE_CACHE_DIR")
    os.environ["RACE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        recipe = WarmStartRecipe(model="tiny-s", steps=60, curve_every=20,
                                 curve_examples=16, val_examples=16, eval_examples=16,
                                 warmup_steps=5)
        return build_tiny_policy("tiny-s", recipe=recipe)
    finally:
        if old is None:
            os.environ.pop("RACE_CACHE_DIR")
        else:
            os.environ["RACE_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory):
    """A prm-tiny-s from a 2-step PRM recipe on a 4-step tiny-m warm start, in its own cache."""
    import os

    from race.warmstart.policies import WarmStartRecipe
    from race.warmstart.prm import PRMRecipe, build_tiny_prm

    old = os.environ.get("RACE_CACHE_DIR")
    os.environ["RACE_CACHE_DIR"] = str(tmp_path_factory.mktemp("prm-cache"))
    try:
        recipe = WarmStartRecipe(model="tiny-m", steps=4, curve_every=2, curve_examples=8,
                                 val_examples=8, eval_examples=8, warmup_steps=2)
        prm_recipe = PRMRecipe(model="prm-tiny-s", init_from="tiny-m", train_steps=2,
                               batch_size=8, eval_examples=16, warmup_steps=1)
        return build_tiny_prm("prm-tiny-s", recipe=prm_recipe, policy_recipe=recipe)
    finally:
        if old is None:
            os.environ.pop("RACE_CACHE_DIR")
        else:
            os.environ["RACE_CACHE_DIR"] = old


class Shaped:
    """A reward stand-in (``from conftest import Shaped``): the rule reward plus a bonus
    that varies with the completion's text.

    The short warm start scores 0 on every training prompt, so the rule reward alone gives
    zero advantages and the learner never moves; a resume would then pass with or without
    its weights, optimizer and shuffle RNG restored. The bonus makes every step move them.
    """

    name, kind, value_range = "rule", "rule", (0.0, 2.0)

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, prompts, completions, **fields):
        base = self.inner(prompts, completions, **fields)
        return [b + len(set(c)) / 20 for b, c in zip(base, completions)]

    def pop_flops(self):
        return self.inner.pop_flops()



@pytest.fixture
def broken_policy(tmp_path, policy):
    """A model folder with the policy's config.json and tokenizer and a whole safetensors
    file of one wrongly shaped tensor: it passes every check before the pilot
    (race.preflight: the weights exist and are whole, the architecture is causal, the
    tokenizer fits), and its pilot fails when the model loads (a size mismatch)."""
    from race import catalog

    broken = tmp_path / "broken-policy"
    broken.mkdir()
    for name in (*catalog.TOKENIZER_FILES, "config.json"):
        if (Path(policy) / name).is_file():
            shutil.copy(Path(policy) / name, broken / name)
    import torch
    from safetensors.torch import save_file

    save_file({"model.norm.weight": torch.zeros(3)}, str(broken / "model.safetensors"))
    return broken


def race_in_process(args: list[str], cwd) -> subprocess.CompletedProcess:
    """``race <args>`` run in ``cwd`` by ``race.cli.main`` in this process (``from conftest
    import race_in_process``): what ``python -m race.cli`` runs, without a fresh
    interpreter's seconds of imports (torch, transformers). Its exit code and output, as
    ``subprocess.run(..., capture_output=True, text=True)`` gives them.

    For the calls whose process is not what a test checks; a test of what only a fresh
    process shows (stray output of imports, signals, environment) keeps a subprocess.
    What a process would take with it is put back: the environment, and torch's thread
    count (a pilot sets it to its launcher's share)."""
    import contextlib
    import importlib.util
    import io
    import os
    import sys

    from race import cli

    torch = importlib.import_module("torch") if importlib.util.find_spec("torch") else None
    out, err, argv, stdin = io.StringIO(), io.StringIO(), sys.argv, sys.stdin
    environ, threads = dict(os.environ), torch.get_num_threads() if torch else 0
    # sys.argv as `python -m race.cli` sees it (sweep.json and claims record it), and an
    # empty stdin, as a subprocess of CI's has: submitit's inline (debug) executor opens
    # pdb on a pilot's exception, which then reads EOF and goes on
    sys.argv = [str(Path(cli.__file__).with_name("__main__.py")), *map(str, args)]
    sys.stdin = io.StringIO()
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            code = cli.main(sys.argv[1:])
    finally:
        sys.argv, sys.stdin = argv, stdin
        os.environ.clear()
        os.environ.update(environ)
        if torch:
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["race", *args], code, out.getvalue(), err.getvalue())


def gsm8k_rows(n: int, seed: int = 0) -> list[dict]:
    """GSM8K-format word problems: two worked steps with calculator notes, then #### N."""
    import random

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        name = rng.choice(["Tom", "Ana", "Lee", "Mia", "Raj", "Zoe"])
        item = rng.choice(["apples", "pens", "books", "coins", "shells"])
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(1, 9)
        total, left = a + b, a + b - c
        rows.append({"question": f"{name} has {a} {item} and buys {b} more. Then {name} "
                                 f"gives away {c}. How many {item} does {name} have now?",
                     "answer": f"{name} has {a} + {b} = <<{a}+{b}={total}>>{total} {item}.\n"
                               f"After giving away {c}, {name} has {total} - {c} = "
                               f"<<{total}-{c}={left}>>{left}.\n#### {left}"})
    return rows


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """A GSM8K-format data file (240 rows), a local policy folder trained on its text (a
    64-wide, 2-layer Qwen2 stand-in with a BPE tokenizer and a chat template: what
    `model=<folder> task=gsm8k task.source=<file>` reads) and a Qwen-PRM-style stand-in
    of the same width (no auto_map: it loads into RACE's copy of the architecture)."""
    import dataclasses
    import json

    from race.catalog import load_model_shape
    from race.warmstart.standin import build_prm_standin, build_standin

    root = tmp_path_factory.mktemp("standin")
    rows = gsm8k_rows(240)
    data = root / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    shape = dataclasses.replace(load_model_shape("qwen2.5-0.5b"), hidden_size=64,
                                intermediate_size=128, num_layers=2, num_heads=4,
                                num_kv_heads=2, head_dim=16, vocab_size=512)
    texts = [row["question"] + "\n" + row["answer"] for row in rows]
    policy = build_standin(root / "policy", shape, texts)
    prm_shape = dataclasses.replace(shape, name="prm-standin", head="prm_value",
                                    tied_embeddings=False, step_tag="<extra_0>")
    prm = build_prm_standin(root / "prm", prm_shape, texts)
    return {"root": root, "data": data, "policy": policy, "rows": rows, "shape": shape,
            "prm": prm, "prm_shape": prm_shape}


@pytest.fixture
def uncached(tmp_path, monkeypatch):
    """An empty Hugging Face cache (``tmp_path/hub``) with the hub on: a dataset name is
    not in the cache, so a task hands it to `datasets` (where installed)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    return tmp_path / "hub"


def real_snapshot(name: str) -> tuple[Path, Path]:
    """(cache, snapshot folder) of real model ``name`` laid out by tools/real_models.py
    (``from conftest import real_snapshot``), or skip saying how to lay it out."""
    root = Path(__file__).parents[1] / "tools"
    sys.path.insert(0, str(root))
    try:
        import real_models  # tools/real_models.py: standalone, imports nothing of RACE
    finally:
        sys.path.remove(str(root))
    cache = os.environ.get("RACE_REAL_HUB_CACHE")
    if not cache:
        pytest.skip("RACE_REAL_HUB_CACHE is not set: run `python tools/real_models.py "
                    f"{name} --cache DIR` and export RACE_REAL_HUB_CACHE=DIR (.ci/run does)")
    snapshot = real_models.cached_snapshot(real_models.SOURCES[name], Path(cache))
    if snapshot is None:
        pytest.skip(f"{name} is not laid out in {cache}: run `python tools/real_models.py "
                    f"{name} --cache {cache}`")
    return Path(cache), snapshot
