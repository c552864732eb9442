"""Bad input to `race sweep` (and its siblings): exit code 2, one line naming the key and
the fix, and no results folder left behind. One table covers every case of the issue:
keys (CASES), data files and model folders (FILE_CASES: checked by race.preflight before
any pilot), and damaged results of a real sweep (DAMAGED)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    pytest.param(["sweep", "selection.promote_by=mean"], "selection.promote_by='mean': use "
                 "selection.promote_by=last or selection.promote_by=trend", id="promote-by"),
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
    pytest.param(["sweep", "launcher.poll_s=-1"], "launcher.poll_s=-1.0: seconds between "
                 "polls: must be > 0, e.g. launcher.poll_s=2", id="poll-negative"),
    pytest.param(["sweep", "report.level=1.5"], "report.level=1.5: an interval's coverage: "
                 "must be in (0, 1), e.g. report.level=0.9", id="report-level"),
    pytest.param(["sweep", "report.n_boot=0"], "report.n_boot=0: bootstrap resamples: must "
                 "be >= 1", id="report-n-boot"),
    pytest.param(["plan", "report.n_boot=0"], "report.n_boot=0", id="plan-report-n-boot"),
    pytest.param(["sweep", "pilot.eval_targets=[foo]"], "pilot.eval_targets=[foo]: unknown "
                 "target(s) ['foo']; use some of [val,test,ood]", id="eval-target-unknown"),
    pytest.param(["sweep", "pilot.eval_targets=[]"], "pilot.eval_targets=[]: evaluate at "
                 "least one target", id="eval-targets-empty"),
    pytest.param(["sweep", "pilot.checkpoints=[0.5,2]"], "pilot.checkpoints=[0.5, 2.0]: need "
                 "ascending, distinct budget fractions in (0, 1]", id="checkpoints"),
    pytest.param(["sweep", "launcher.gpus=[64]"], "launcher.gpus=[64]: this machine has",
                 id="gpus-absent"),
    pytest.param(["sweep", "sweep.name=../../x"], "sweep.name=../../x: must name a folder "
                 "inside sweep.out_dir", id="sweep-name-escapes"),
    pytest.param(["sweep", "sweep.name=/tmp/x"], "sweep.name=/tmp/x: must name a folder "
                 "inside sweep.out_dir", id="sweep-name-absolute"),
    pytest.param(["plan", "model=tiny-s", "budget=1e25"], "GRPO steps, past "
                 "pilot.max_steps=100000; lower budget", id="plan-absurd-budget"),
    pytest.param(["sweep", "model=tiny-s", "budget=1e25"], "past pilot.max_steps",
                 id="sweep-absurd-budget"),
    pytest.param(["plan", "model=tiny-s", "budget=1e17", "pilot.max_steps=1000000000",
                  "pilot.device=cpu"],
                 "h on cpu at 1e+10 FLOP/s, past pilot.max_hours=168", id="sweep-too-long"),
    pytest.param(["plan", "grid.max_new_tokens=600"], "plus grid.max_new_tokens=600 exceeds "
                 "its context of 512 tokens; lower grid.max_new_tokens to 496",
                 id="plan-cap-past-context"),
    pytest.param(["sweep", "grid.max_new_tokens=600"], "exceeds its context of 512",
                 id="sweep-cap-past-context"),
    pytest.param(["plan", "task=gsm8k", "task.source=data/x.jsonl", "grid.max_new_tokens=40"],
                 "task.source=data/x.jsonl"
                 ": source='data/x.jsonl': no such file", id="plan-relative-source"),
    pytest.param(["sweep", "task=gsm8k", "task.source=data/x.jsonl", "grid.max_new_tokens=40"],
                 "no such file",
                 id="sweep-relative-source"),
    pytest.param(["sweep", "sweep.name=" + "x" * 300], "300 bytes, past the 200 a folder "
                 "name may have", id="sweep-name-300"),
    pytest.param(["sweep", "task=gsm8k", "task.source=/tmp/my", "data", "dir/x.jsonl"],
                 "data: not a key=value override; if it is the rest of task.source's value "
                 "(a path with spaces), quote the whole override in the shell: "
                 "\"task.source=/tmp/my data dir/x.jsonl\" (Hydra keeps the spaces)",
                 id="path-with-spaces"),
    pytest.param(["sweep", "launcher.checkpoint_every=-1"], "launcher.checkpoint_every=-1: "
                 "must be >= 0", id="checkpoint-every"),
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
    from race.core.specs import RunSpec
    from race.run.launch.launcher_base import Task, record_lost
    from race.store import io as results

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


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def _one_line(out: subprocess.CompletedProcess, command: str, needle: str) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"race {command}: ")
    assert needle in lines[0], lines[0]
    return lines[0]


def _data(tmp: Path, rows: list[dict], name: str = "data.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _folder(tmp: Path, world: dict, edit) -> Path:
    """A copy of the stand-in policy folder, changed by ``edit(folder)``."""
    folder = tmp / "policy"
    shutil.copytree(world["policy"], folder)
    edit(folder)
    return folder


def _config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))


def _non_numeric(tmp: Path, world: dict) -> Path:
    rows = [dict(r) for r in world["rows"]]
    rows[4]["answer"] = rows[4]["answer"].rsplit("####", 1)[0] + "#### many"
    return _data(tmp, rows)


def _binary(tmp: Path, world: dict) -> Path:
    import random

    rng = random.Random(0)
    path = tmp / "data.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(4096)))
    return path


def _remote_code_folder(tmp: Path, world: dict) -> Path:
    """A PRM folder whose config.json's auto_map names a modelling file that writes a
    marker file when it is imported."""
    folder = tmp / "prm-with-code"
    shutil.copytree(world["prm"], folder)
    source = Path(__file__).parent.parent / "race" / "nn" / "qwen_prm_modeling.py"
    marker = tmp / "MARKER"
    (folder / "marker_prm.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('folder code ran')\n"
        + source.read_text().replace("from __future__ import annotations\n", ""))
    _config(folder, auto_map={"AutoModel": "marker_prm.Qwen2ForProcessRewardModel"})
    return folder


def _no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def _not_causal(folder: Path) -> None:
    _config(folder, architectures=["BertForMaskedLM"])


def _bad_config(folder: Path) -> None:
    (folder / "config.json").write_text("{oops")


def _small_vocab(folder: Path) -> None:
    _config(folder, vocab_size=100)


def _missing_shard(folder: Path) -> None:
    """An index naming two shards, one of them absent (a download that stopped)."""
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}))


def _truncated(folder: Path) -> None:
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])


def _vocab_mismatch(folder: Path) -> None:
    """config.json of a checkpoint with more vocabulary rows than the weights hold (the
    tokenizer still fits both)."""
    _config(folder, vocab_size=json.loads((folder / "config.json").read_text())["vocab_size"]
            + 64)


def _model_case(tmp: Path, world: dict, edit) -> list[str]:
    return [f"model={_folder(tmp, world, edit)}", *GSM8K, f"task.source={world['data']}"]


# (command, arguments built from (tmp_path, world), text the one line must contain)
GSM8K = ["task=gsm8k", "budget=1e12", "grid.max_new_tokens=40"]
FILE_CASES = [
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{_data(t, [])}"], "data.jsonl: holds no GSM8K rows", id="data-empty"),
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{_data(t, w['rows'][:3])}"], "no val problems", id="data-3-rows"),
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{_non_numeric(t, w)}"], "data.jsonl:5: invalid GSM8K row (final answer "
                 "'many' after '####' is not a number)", id="data-non-numeric"),
    pytest.param("plan", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{_non_numeric(t, w)}"], "fix or delete those rows", id="plan-data-row"),
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{_binary(t, w)}"], "data.jsonl: not UTF-8 text (byte 0x89 at offset 0)",
                 id="data-binary"),
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{w['data']}", "pilot.eval_targets=[val,test,ood]"], "task=gsm8k has no "
                 "ood problems (task.ood_source is unset)", id="ood-without-ood-source"),
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{w['data']}".replace("/gsm8k.jsonl", "/données.jsonl")],
                 "quote the value as Hydra documents", id="non-ascii-unquoted"),
    pytest.param("sweep", lambda t, w: _model_case(t, w, _no_weights), "no weights in that "
                 "folder", id="model-no-weights"),
    pytest.param("sweep", lambda t, w: _model_case(t, w, _not_causal), "not a causal "
                 "language model", id="model-not-causal"),
    pytest.param("plan", lambda t, w: _model_case(t, w, _bad_config), "config.json is not "
                 "valid JSON", id="model-config-invalid"),
    pytest.param("sweep", lambda t, w: _model_case(t, w, _small_vocab), "its tokenizer has "
                 "500 tokens, more than the model's vocab_size=100", id="tokenizer-too-big"),
    pytest.param("plan", lambda t, w: _model_case(t, w, _missing_shard), "names 2 weight "
                 "file(s) and 1 are missing (model-00002-of-00002.safetensors); copy or "
                 "download the folder again", id="model-missing-shard"),
    pytest.param("sweep", lambda t, w: _model_case(t, w, _truncated), "model.safetensors is "
                 "damaged (its tensors need", id="model-truncated-safetensors"),
    pytest.param("plan", lambda t, w: _model_case(t, w, _vocab_mismatch), "but the weights' "
                 "embedding has", id="model-vocab-mismatch"),
    pytest.param("sweep", lambda t, w: [f"model={w['policy']}", *GSM8K, "task.source="
                 f"{w['data']}", "reward=qwen2.5-math-prm-7b",
                 f"reward.model={_remote_code_folder(t, w)}"],
                 "pass reward.trust_remote_code=true if you trust it", id="remote-code"),
]


@pytest.mark.parametrize("command, build, needle", FILE_CASES)
def test_bad_files_exit_2_one_line_before_any_cell_folder(command, build, needle, tmp_path,
                                                         standin):
    out_dir = tmp_path / "results"
    args = [command, *build(tmp_path, standin)]
    if command == "sweep":
        args.append(f"sweep.out_dir={out_dir}")
    _one_line(_run(args, tmp_path), command, needle)
    assert not out_dir.exists()  # no cell folder, no sweep folder
    assert not (tmp_path / "MARKER").exists()  # no folder code ran


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory, policy):
    """A real one-cell sweep folder with its report (selection.json included)."""
    root = tmp_path_factory.mktemp("finished")
    out = _run(["sweep", "model=tiny-s", f"model.hf_id={policy}", "reward=rule",
                "grid.axes={}", "grid.prompts_per_step=2", "grid.group_size=2",
                "grid.max_new_tokens=12", "grid.lora_rank=4", "pilot.eval_examples=4",
                "pilot.select_examples=4", "pilot.eval_targets=[val]", "budget=2e10",
                "selection.policy=flat", "launcher=inline", f"sweep.out_dir={root}",
                "sweep.name=s"], root)
    assert out.returncode == 0, out.stderr[-2000:]
    return root / "s"


def _null(path: Path) -> None:
    path.write_text("null\n")


def _torn(path: Path) -> None:
    path.write_text(path.read_text()[:40])


def _cell(sweep: Path) -> Path:
    return next((sweep / "cells").iterdir())


# (command, damage(sweep), file named, fix the line gives)
DAMAGED = [
    pytest.param("report", lambda s: _torn(_cell(s) / "summary.json"), "summary.json: not "
                 "valid JSON", "delete the cell folder", id="summary-invalid"),
    pytest.param("report", lambda s: _null(_cell(s) / "summary.json"), "summary.json: holds "
                 "null, not a JSON object", "delete the cell folder", id="summary-null"),
    pytest.param("report", lambda s: _torn(s / "sweep.json"), "sweep.json: not valid JSON",
                 "rerun the same race sweep command", id="sweep-json-invalid"),
    pytest.param("validate", lambda s: _torn(s / "selection.json"), "selection.json: not "
                 "valid JSON", "rerun `race report`", id="selection-invalid"),
    pytest.param("validate", lambda s: (_cell(s) / "spec.json").unlink(), "spec.json: missing",
                 "rerun the same race sweep command", id="spec-missing"),
]


def test_sweep_out_dir_that_is_a_file_exits_2_one_line(tmp_path):
    (tmp_path / "results").write_text("not a folder\n")
    _one_line(_run(["sweep", f"sweep.out_dir={tmp_path / 'results'}"], tmp_path), "sweep",
              "is a file, not a folder; give a folder for the results")
    assert (tmp_path / "results").read_text() == "not a folder\n"


def test_report_names_a_cell_folder_without_its_spec_as_damaged(finished_sweep, tmp_path):
    """A folder under cells/ that lost its spec.json is a row of the report (damaged, with
    the fix), and the counts add up to every folder."""
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep)
    lost = sweep / "cells" / "0123456789ab"
    shutil.copytree(_cell(sweep), lost)
    (lost / "spec.json").unlink()
    folders = len(list((sweep / "cells").iterdir()))
    out = _run(["report", str(sweep)], tmp_path)
    assert out.returncode == 0, out.stderr
    counts = f"{folders - 1} ok, 0 failed, 0 missing, 1 damaged"  # adds up to every folder
    assert f"cells: {counts}" in out.stdout
    board = (sweep / "leaderboard.md").read_text()
    assert f"Cells: {counts}." in board
    assert "`0123456789ab`" in board and "no spec.json" in board and "delete the cell " \
        "folder" in board


@pytest.mark.parametrize("command, damage, named, fix", DAMAGED)
def test_damaged_results_exit_2_naming_the_file_and_the_fix(command, damage, named, fix,
                                                            finished_sweep, tmp_path):
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep)
    damage(sweep)
    line = _one_line(_run([command, str(sweep)], tmp_path), command, named)
    assert fix in line
    assert not (sweep / "validate").exists()  # race validate ran nothing
