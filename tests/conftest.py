"""Shared fixtures: the SLURM cluster the `slurm`-marked tests run against, a short
warm-started tiny policy and tiny PRM, and a reward stand-in that makes every step learn."""

import shutil
import subprocess

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

    from race.policies import WarmStartRecipe, build_tiny_policy

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

    from race.policies import WarmStartRecipe
    from race.rewards.tiny_prm import PRMRecipe, build_tiny_prm

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
    """A model folder with the policy's config.json and tokenizer and a weights file of
    garbage bytes: it passes every check before the pilot (race.preflight: the weights
    exist, the architecture is causal, the tokenizer fits), and its pilot fails when the
    model loads."""
    from pathlib import Path

    from race import catalog

    broken = tmp_path / "broken-policy"
    broken.mkdir()
    for name in (*catalog.TOKENIZER_FILES, "config.json"):
        if (Path(policy) / name).is_file():
            shutil.copy(Path(policy) / name, broken / name)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file" * 8)
    return broken
