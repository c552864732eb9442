"""`race sweep launcher=slurm` against a real SLURM cluster (CI brings one up on localhost
with launchers/slurm-localhost.sh): a sweep with a failing cell, a job killed without
output, and a pilot that times out, is requeued and resumes with a correct ledger."""

import json
import re
import subprocess
import sys
import time

import pandas as pd
import pytest

pytest.importorskip("torch", reason="pilots train with torch")
pytest.importorskip("submitit", reason="launchers go through submitit")


pytestmark = pytest.mark.slurm

SMALL = ["model=tiny-s", "reward=rule", "grid.prompts_per_step=2", "grid.group_size=2",
         "grid.max_new_tokens=12", "grid.update_epochs=1", "grid.lora_rank=4",
         "pilot.eval_examples=4", "pilot.eval_targets=[test]", "budget=2e10"]




def race(tmp_path, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=tmp_path)


def test_slurm_sweep_two_cells_one_failing(tmp_path, policy, slurm_cluster, broken_policy):
    broken = broken_policy  # garbage weights: that pilot fails, the other runs
    out = race(tmp_path, "sweep", *SMALL, f"model.hf_id={policy},{broken}",
               "selection.policy=flat", "launcher=slurm", f"launcher.partition={slurm_cluster}",
               "launcher.poll_s=1", "launcher.timeout_min=10", f"sweep.out_dir={tmp_path}",
               "sweep.name=s")
    assert out.returncode == 1, out.stderr  # one failed cell: non-zero after writing all
    assert "submitted job array" in out.stderr
    frame = pd.read_csv(tmp_path / "s" / "pilots.csv")
    assert sorted(frame.status) == ["failed", "ok"]
    failed = frame[frame.status == "failed"].iloc[0]
    assert "could not load the policy" in failed.error
    ok = frame[frame.status == "ok"].iloc[0]
    assert 1 <= ok.steps and ok.total_flops <= ok.budget_flops
    logs = list((tmp_path / "s" / "submitit").glob("*_log.out"))
    assert len(logs) == 2  # both pilots ran as SLURM array tasks
    # a quiet, true progress line: submitit's and sacct's noise goes to the sweep's log
    for noise in ("Bypassing", "accounting storage", "submitit WARNING", "submitit INFO"):
        assert noise not in out.stderr and noise not in out.stdout, noise
    assert (tmp_path / "s" / "sweep.log").is_file()
    updates = [re.match(r"\[sweep\] (\d+)/(\d+) done, (\d+) running, (\d+) failed", line)
               for line in out.stderr.splitlines() if line.startswith("[sweep]")]
    assert updates and all(updates)
    for done, total, running, failed in (map(int, u.groups()) for u in updates):
        assert done + running + failed <= total  # a finished pilot no longer runs
    assert updates[-1].groups()[2] == "0"


def test_job_killed_without_output_is_reported_not_waited_on(tmp_path, policy, slurm_cluster):
    from race.config import compose_config, to_run_spec
    from race.run.launch.launcher_base import Task
    from race.run.launch.watch import launch

    cfg = compose_config([*SMALL, f"model.hf_id={policy}", "launcher=slurm",
                          f"launcher.partition={slurm_cluster}", "launcher.poll_s=1",
                          "launcher.lost_after_s=3", "launcher.timeout_min=10",
                          "budget=2e12"])  # long enough to be cancelled while running
    spec = to_run_spec(cfg, cfg.budget * cfg.pilot.fraction)
    cell = tmp_path / "cells" / spec.cell_id

    def cancel_when_running(counts):
        if counts.running and not getattr(cancel_when_running, "done", False):
            jobs = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True,
                                  text=True).stdout.split("\n")
            ids = [j.split()[0] for j in jobs if "race-pilot" in j]
            if ids:
                time.sleep(2)
                subprocess.run(["scancel", *ids], check=True)
                cancel_when_running.done = True

    start = time.monotonic()
    counts = launch([Task(spec, str(cell))], cfg.launcher, tmp_path / "submitit",
                    on_change=cancel_when_running)
    assert time.monotonic() - start < 120  # noticed within the deadline, not hung
    assert counts.failed == 1
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["status"] == "failed" and "left the SLURM queue" in summary["error"]


@pytest.mark.parametrize("signal_name", ["USR2", "TERM"])
def test_signalled_pilot_checkpoints_at_the_next_step_and_resumes_there(
        tmp_path, policy, slurm_cluster, signal_name):
    """SLURM's time-limit warning (USR2, as sent by --signal=USR2@...) or SIGTERM (scancel,
    or a preemption) reaches the pilot mid-run: it saves its state at the next step
    boundary. On the warning submitit requeues the job; on SIGTERM the job ends, its cell
    is recorded with what it spent, and the sweep's rerun launches it again. Either way
    the pilot resumes from exactly that step. No periodic checkpoint is configured, so
    resuming past step 0 proves the save on the signal; nothing is redone, and the metrics
    equal an uninterrupted run's, byte for byte.

    The signal is sent with ``scancel --signal`` rather than by waiting for a real time
    limit: SLURM delivers the warning only on its periodic check (up to 30 s early or
    late), which would make the test slow and flaky; the code path is the same.
    """
    from race.config import compose_config, to_run_spec
    from race.run.launch.launcher_base import Task
    from race.run.launch.watch import launch

    cfg = compose_config([*SMALL, f"model.hf_id={policy}", "launcher=slurm",
                          f"launcher.partition={slurm_cluster}", "launcher.poll_s=1",
                          "launcher.checkpoint_every=1000", "launcher.timeout_min=10",
                          "launcher.lost_after_s=5", "budget=6e10"])
    spec = to_run_spec(cfg, cfg.budget * cfg.pilot.fraction)
    cell = tmp_path / "slurm" / spec.cell_id
    state = {"signalled": False}

    def signal_after_a_step(counts):
        metrics = cell / "metrics.jsonl"
        if state["signalled"] or not metrics.is_file() or '"step"' not in metrics.read_text():
            return
        jobs = subprocess.run(["squeue", "-h", "-o", "%i %j %t"], capture_output=True,
                              text=True).stdout.splitlines()
        ids = [j.split()[0] for j in jobs if "race-pilot" in j and j.split()[2] == "R"]
        if ids:
            subprocess.run(["scancel", f"--signal={signal_name}", *ids], check=True)
            state["signalled"] = True

    counts = launch([Task(spec, str(cell))], cfg.launcher, tmp_path / "submitit",
                    on_change=signal_after_a_step)
    assert state["signalled"], "the pilot finished before it could be signalled"
    if signal_name == "TERM":  # the job ended: recorded with its saved ledger, then rerun
        assert counts.failed == 1
        stopped = json.loads((cell / "summary.json").read_text())
        assert stopped["status"] == "failed" and stopped["steps"] >= 1
        assert 0 < stopped["total_flops"] <= spec.budget_flops
        counts = launch([Task(spec, str(cell))], cfg.launcher, tmp_path / "submitit-rerun")
    assert counts.done == 1, (cell / "summary.json").read_text()
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["resumed_from_step"] >= 1
    assert summary["redone_flops"] == 0.0 and not any(summary["redone"].values())
    if signal_name == "USR2":
        log = "".join(p.read_text() for p in (tmp_path / "submitit").glob("*_log.*"))
        assert "Requeued" in log or "requeued" in log, log[-2000:]

    # the same pilot, uninterrupted and in-process: the ledger must be identical
    inline = compose_config([*SMALL, f"model.hf_id={policy}", "launcher=inline",
                             "budget=6e10"])
    reference = tmp_path / "inline" / spec.cell_id
    launch([Task(spec, str(reference))], inline.launcher, tmp_path / "submitit-inline")
    expected = json.loads((reference / "summary.json").read_text())
    assert (cell / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    for key in ("total_flops", "flops", "flops_model", "flops_executed", "steps"):
        assert summary[key] == expected[key], key
    assert summary["total_flops"] <= spec.budget_flops
