"""Bad input to `race sweep` (and its siblings): exit code 2, one line naming the key and
the fix, and no results folder left behind. One table covers every case of the issue."""

import subprocess
import sys

import pytest

SLURM = pytest.mark.slurm

CASES = [
    # (arguments, text the one line must contain)
    pytest.param(["sweep", "model=tiny-x"], "did you mean model=tiny-s", id="unknown-model"),
    pytest.param(["sweep", "reward=prm-tiny-z"], "reward=prm-tiny-z: unknown reward; valid "
                 "names", id="unknown-reward"),
    pytest.param(["sweep", "model=tiny-s,tiny-q"], "model=tiny-q", id="unknown-model-in-list"),
    pytest.param(["sweep", "budget=0"], "budget=0: must be > 0", id="budget-zero"),
    pytest.param(["sweep", "budget=-1e12"], "budget=-1e+12: must be > 0", id="budget-negative"),
    pytest.param(["sweep", "budget=1e6"], "no cell can buy one GRPO step", id="budget-small"),
    pytest.param(["sweep", "grid.group_size=1"], "grid.group_size=1: GRPO needs >= 2",
                 id="group-size-1"),
    pytest.param(["sweep", "grid.group_size=1,4"], "grid.group_size=1", id="group-size-axis"),
    pytest.param(["sweep", "grid.group_size=[4"], "race sweep: ", id="malformed-override"),
    pytest.param(["sweep", "grid.foo=3"], "grid.foo", id="unknown-override"),
    pytest.param(["sweep", "task.source=/nonexistent/gsm8k.jsonl"],
                 "task.source=/nonexistent/gsm8k.jsonl: no such file", id="missing-data-file"),
    pytest.param(["sweep", "model.hf_id=/nonexistent/policy"], "model.hf_id=/nonexistent",
                 id="missing-model-folder"),
    pytest.param(["sweep", "budget=1e12,1e12"], "listed more than once", id="budget-axis"),
    pytest.param(["sweep", "selection.policy=best"], "selection.policy='best': use "
                 "selection.policy=ladder or selection.policy=flat", id="selection-policy"),
    pytest.param(["sweep", "selection.rungs=[0.25,0.0625]"], "selection.rungs=[0.25, 0.0625]: "
                 "need ascending", id="selection-rungs"),
    pytest.param(["sweep", "selection.guards.window=0"], "selection.guards.window=0: must be "
                 ">= 1", id="guard-window"),
    pytest.param(["sweep", "reward=rule", "reward=prm-tiny-s"], "reward: given twice",
                 id="key-twice"),
    pytest.param(["sweep", "budget=1e400"], "budget=inf: not finite (a value beyond 1.8e308, "
                 "such as 1e400, overflows to inf); give a finite number, e.g. budget=1e15",
                 id="budget-overflow"),
    pytest.param(["sweep", "budget=inf"], "budget=inf: not finite", id="budget-inf"),
    pytest.param(["sweep", "budget=nan"], "budget=nan: not a number; give a finite number",
                 id="budget-nan"),
    pytest.param(["sweep", "grid.lr=nan"], "grid.lr=nan: not a number", id="lr-nan"),
    pytest.param(["sweep", "model=tiny-s,tiny-s"], "model=tiny-s,tiny-s: tiny-s listed more "
                 "than once; list each value of an axis once, e.g. model=tiny-s",
                 id="axis-repeated-value"),
    pytest.param(["sweep", "grid.lr=1e-3,0.001"], "0.001 listed more than once",
                 id="axis-same-number"),
    pytest.param(["sweep", "grid.completion_tokens=30,40"], "grid.completion_tokens=40: the "
                 "same cell as", id="axis-same-cell"),
    pytest.param(["sweep", "reward.kind=orm"], "reward.kind='orm': no orm reward is built",
                 id="reward-kind-not-built"),
    pytest.param(["sweep", "pilot.device=tpu"], "pilot.device='tpu': use one of auto|cpu|cuda",
                 id="pilot-device"),
    pytest.param(["sweep", "pilot.dtype=float16"], "pilot.dtype='float16': use one of "
                 "auto|float32|bfloat16", id="pilot-dtype"),
    pytest.param(["sweep", "pilot.tis_cap=2"], "pilot.tis_cap=2.0: must be >= 0, and corrects "
                 "vLLM rollouts only", id="tis-with-hf"),
    pytest.param(["sweep", "accounting.peak_flops=-1"], "accounting.peak_flops=-1.0: must be "
                 "> 0 FLOP/s", id="peak-flops"),
    pytest.param(["plan", "grid.update_epochs=0"], "grid.update_epochs=0", id="plan-epochs"),
    pytest.param(["report", "/nonexistent/sweep"], "SWEEP_DIR=/nonexistent/sweep",
                 id="report-not-a-sweep"),
    pytest.param(["sweep", "launcher=slurm", "launcher.partition=nope"],
                 "launcher.partition='nope': no such SLURM partition", id="slurm-partition",
                 marks=SLURM),
    pytest.param(["sweep", "launcher=slurm", "launcher.cpus_per_task=4096"],
                 "launcher.cpus_per_task=4096: larger than a node", id="slurm-too-big",
                 marks=SLURM),
    pytest.param(["sweep", "launcher=slurm", "launcher.mem_gb=100000"],
                 "launcher.mem_gb=100000: larger than a node", id="slurm-too-much-memory",
                 marks=SLURM),
]


@pytest.mark.parametrize("args, needle", CASES)
def test_bad_input_exit_2_one_line_nothing_written(args, needle, tmp_path, request):
    if request.node.get_closest_marker("slurm"):
        request.getfixturevalue("slurm_cluster")  # skips, saying why, without a cluster
    out_dir = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "race.cli", *args,
                          *([f"sweep.out_dir={out_dir}"] if args[0] == "sweep" else [])],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"race {args[0]}: ")
    assert needle in lines[0], lines[0]
    assert not out_dir.exists()  # nothing half-written


def test_report_of_a_folder_with_no_ok_cells_exits_2(tmp_path):
    from race import results
    from race.launch import Task, record_lost
    from race.specs import RunSpec

    spec = RunSpec("tiny-s", (("kind", "rule"), ("name", "rule")), (("name", "arith"),), 1e10)
    results.write_json(tmp_path / "sweep.json", {"budget_flops": 1.6e11,
                                                  "pilot_fraction": 0.0625})
    record_lost(Task(spec, str(tmp_path / "cells" / spec.cell_id)), "job 1 was killed")
    out = subprocess.run([sys.executable, "-m", "race.cli", "report", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no ok cells to rank (1 failed" in lines[0], out.stderr
    assert not (tmp_path / "leaderboard.md").exists()
