"""Shared fixtures: the SLURM cluster the `slurm`-marked tests run against."""

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
        recipe = WarmStartRecipe(model="tiny-s", max_steps=30, eval_every=10,
                                 greedy_every=10, val_examples=16, target_accuracy=1.01,
                                 eval_examples=16)
        return build_tiny_policy("tiny-s", recipe=recipe)
    finally:
        if old is None:
            os.environ.pop("RACE_CACHE_DIR")
        else:
            os.environ["RACE_CACHE_DIR"] = old
