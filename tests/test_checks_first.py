"""Checks before anything is written (issue 62, items 5 to 7): a damaged shipped warm start
refused by `race sweep` before its sweep.json and by `race pilot` before its cell, in the
same words; `race plan` says in one line what a sweep would refuse or train; `race pilot`
runs on the torch threads a sweep's local pilot gets, and says so."""

import subprocess
import sys

import pytest
from conftest import race_in_process  # tests/conftest.py

# the B: one flat cell of tiny-s
B = ["model=tiny-s", "reward=rule", "grid.group_size=4", "grid.update_epochs=1",
     "budget=1e12", "selection.policy=flat", "pilot.select_examples=64",
     "pilot.eval_examples=16"]


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def _lines(text):
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def damaged(tmp_path, monkeypatch):
    """A model cache of its own holding the shipped tiny-s warm start, its weights changed
    after install (8 bytes), as a disk or a hand can change them."""
    from race.warmstart.policies import build_tiny_policy, warm_start_recipe

    monkeypatch.setenv("RACE_CACHE_DIR", str(tmp_path / "cache"))
    folder = build_tiny_policy("tiny-s", recipe=warm_start_recipe("tiny-s"))  # installed
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"garbage!")
    return folder


def test_a_damaged_shipped_warm_start_is_refused_before_sweep_json_or_a_cell(damaged,
                                                                            tmp_path):
    out_dir = tmp_path / "results"
    said = {}
    for command in ("sweep", "pilot"):
        out = _run([command, *B, f"{command}.out_dir={out_dir}"], tmp_path)
        assert out.returncode == 2, out.stderr
        [line] = _lines(out.stderr)
        assert line.startswith(f"race {command}: RACE_CACHE_DIR: the cached warm start "
                               f"{damaged} is not the one RACE ships"), line
        assert f"remove it (rm -r {damaged}) and RACE installs the shipped weights" in line
        said[command] = line.split(": ", 1)[1]
        assert not out_dir.exists(), command  # no sweep.json, no cell folder
    assert said["pilot"] == said["sweep"]  # one check for both


def test_plan_says_in_one_line_that_a_sweep_would_refuse_the_damaged_warm_start(damaged,
                                                                               tmp_path):
    out = race_in_process(["plan", *B], tmp_path)
    assert out.returncode == 0, out.stderr
    notes = [line for line in _lines(out.stderr) if "warm start" in line]
    assert notes == [f"race plan: RACE_CACHE_DIR: the cached warm start {damaged} is not the "
                     f"one RACE ships (model.safetensors differs), so race sweep and race "
                     f"pilot refuse it; remove it (rm -r {damaged}) and RACE installs the "
                     f"shipped weights"]


def test_plan_says_in_one_line_that_a_seed_race_does_not_ship_is_trained_here(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("RACE_CACHE_DIR", str(tmp_path / "cache"))
    out = race_in_process(["plan", *B, "warmstart.seed=7"], tmp_path)
    assert out.returncode == 0, out.stderr
    notes = [line for line in _lines(out.stderr) if "warm start" in line]
    assert notes == ["race plan: warm start of tiny-s: not a recipe RACE ships (the "
                     "warmstart.* or task knobs differ from a shipped one's, e.g. "
                     "warmstart.seed), so race sweep trains it on this machine first, once "
                     "(cached under RACE_CACHE_DIR), and its results will differ from the docs"]
    shipped = race_in_process(["plan", *B], tmp_path)  # seed 0: shipped, nothing to say
    assert shipped.returncode == 0 and "warm start" not in shipped.stderr
    assert not (tmp_path / "cache").exists()  # race plan installs and builds nothing


@pytest.mark.parametrize("given, threads, why", [
    ([], 1, "as each pilot of a local race sweep: "),
    (["launcher.threads_per_pilot=2"], 2, "launcher.threads_per_pilot=2"),
])
def test_race_pilot_runs_on_a_local_sweeps_threads_and_says_so(given, threads, why, policy,
                                                              tmp_path, monkeypatch):
    """A lone `race pilot` took every core, and beside a busy process its threads spun (12x
    a sweep's pilot); it now takes what a sweep's local launcher gives each pilot."""
    import torch

    from race import cli

    seen, real = [], cli.run_pilot

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "run_pilot", recording)
    out = race_in_process(["pilot", "model=tiny-s", f"model.hf_id={policy}", "reward=rule",
                           "grid.prompts_per_step=2", "grid.group_size=2",
                           "grid.max_new_tokens=12", "grid.lora_rank=4",
                           "pilot.eval_examples=4", "pilot.select_examples=4",
                           "pilot.eval_targets=[val]", "budget=2e10",
                           f"pilot.out_dir={tmp_path / 'p'}", *given], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert seen == [threads]
    [line] = [line for line in out.stderr.splitlines() if "torch thread" in line]
    assert line.startswith(f"race pilot: {threads} torch thread(s) ({why}")
