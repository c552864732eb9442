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
from conftest import race_in_process  # tests/conftest.py

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
    # issue 62: checks before anything is written, and no override ignored in silence
    pytest.param(["sweep", "model=tiny-s", "warmstart.seed=99999999999999999999"],
                 "warmstart.seed=99999999999999999999: the warm start seeds torch's generator "
                 "with it, which takes 0 to 2**64 - 1", id="warmstart-seed-too-long"),
    pytest.param(["plan", "warmstart.seed=-1"], "warmstart.seed=-1: the warm start seeds",
                 id="warmstart-seed-negative"),
    pytest.param(["sweep", "selection.policy=flat", "selection.replicates=3"],
                 "selection.replicates=3: reads a ladder's last rung on more seeds, and "
                 "selection.policy=flat has no rungs (it would be ignored); give the seeds as "
                 "an axis, pilot.seed=0,1,2, or use selection.policy=ladder",
                 id="replicates-on-flat"),
    pytest.param(["pilot", "model=tiny-s", "launcher=slurm"], "launcher=slurm: race pilot runs "
                 "its one pilot in this process, with no launcher", id="pilot-launcher"),
    pytest.param(["pilot", "model=tiny-s", "launcher.slots=2", "launcher.timeout_min=5"],
                 "launcher.slots=2 launcher.timeout_min=5: race pilot runs its one pilot in "
                 "this process", id="pilot-launcher-keys"),
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


def _tiny_sweep(policy: Path, out_dir: Path, *more: str) -> list[str]:
    """The command of ``finished_sweep`` (``more``: extra overrides, or budget=...)."""
    budget = [] if any(m.startswith("budget=") for m in more) else ["budget=2e10"]
    return ["sweep", "model=tiny-s", f"model.hf_id={policy}", "reward=rule", "grid.axes={}",
            "grid.prompts_per_step=2", "grid.group_size=2", "grid.max_new_tokens=12",
            "grid.lora_rank=4", "pilot.eval_examples=4", "pilot.select_examples=4",
            "pilot.eval_targets=[val]", *budget, "selection.policy=flat", "launcher=inline",
            f"sweep.out_dir={out_dir}", "sweep.name=s", *more]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory, policy):
    """A real one-cell sweep folder with its report (selection.json included)."""
    root = tmp_path_factory.mktemp("finished")
    out = race_in_process(_tiny_sweep(policy, root), root)
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
    pytest.param("validate", lambda s: (_selecting(s), (_cell(s) / "spec.json").unlink()),
                 "spec.json: missing", "rerun the same race sweep command", id="spec-missing"),
]


def _selecting(sweep: Path) -> None:
    """selection.json selecting the sweep's one cell, as a report of a sweep that learned
    writes it (the tiny sweep's stand-in policy learns nothing, so its report selects
    none): a later loss of the cell's spec.json is then what validate must name."""
    cell = _cell(sweep)
    spec = json.loads((cell / "spec.json").read_text())
    selection = json.loads((sweep / "selection.json").read_text())
    selection["selected"] = [{"config_id": spec.get("config_id", cell.name),
                              "cell_ids": [cell.name]}]
    (sweep / "selection.json").write_text(json.dumps(selection))


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
    out = race_in_process(["report", sweep], tmp_path)
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


def _stderr_line(capsys, command: str) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0].startswith(f"race {command}: ")
    return lines[0]


def test_a_hub_name_as_an_eval_target_without_datasets(tmp_path, monkeypatch, capsys,
                                                       uncached):
    """`task.eval.m500=<hub name>` with `datasets` not installed: `race sweep` and `race
    prefetch` refuse it in one line naming the fix, `race plan` plans it and says what to
    fetch; once its snapshot is in the cache all three read it."""
    from race import cli

    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails
    rows = [{"problem": f"Let $f(x) = {i}x + 1$. Compute $f(2)$.", "answer": str(2 * i + 1)}
            for i in range(60)]
    args = ["task=math", f"task.source={_data(tmp_path, rows)}", "grid.max_new_tokens=64",
            "task.eval.m500=HuggingFaceH4/MATH-500"]
    out_dir = tmp_path / "results"
    fix = "run `race prefetch` with the same overrides as this command, then rerun it"
    assert cli.main(["sweep", *args, f"sweep.out_dir={out_dir}"]) == 2
    assert _stderr_line(capsys, "sweep") == (
        "race sweep: task.eval.m500=HuggingFaceH4/MATH-500: not in the Hugging Face cache "
        "(the `datasets` library that would download it is not installed); on a machine "
        f"that reaches the hub (the node that submits), {fix}")
    assert not out_dir.exists()
    assert cli.main(["plan", *args]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "HuggingFaceH4/MATH-500 (dataset, task.eval.m500); run `race prefetch`" in err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # prefetch: no download attempted here
    assert cli.main(["prefetch", *args]) == 2
    assert "task.eval.m500=HuggingFaceH4/MATH-500: not in the Hugging Face cache, and " \
        "HF_HUB_OFFLINE=1 stops race prefetch" in _stderr_line(capsys, "prefetch")
    # cached as the hub caches it (refs/main -> snapshots/<commit>/test.jsonl): all read it
    repo = uncached / "datasets--HuggingFaceH4--MATH-500"
    (repo / "snapshots" / "c0ffee").mkdir(parents=True)
    _data(repo / "snapshots" / "c0ffee", [{"problem": "What is 2 + 2?", "answer": "4"}],
          "test.jsonl")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c0ffee")
    assert cli.main(["plan", *args]) == 0
    assert "note:" not in capsys.readouterr().err
    assert cli.main(["prefetch", *args]) == 0
    assert "1 repo(s) in the Hugging Face cache" in capsys.readouterr().out


# issue 44's bad input that crashed or went silent: each exits 2 with one line whose fix,
# followed, works, and leaves nothing written (or, for a damaged sweep.json, rewrites it)
MATH_ROWS = [{"problem": f"Let $f(x) = {i}x + 1$. Compute $f(2)$.", "answer": str(2 * i + 1)}
             for i in range(60)]
EVAL_ROWS = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(20)]


def test_plan_of_task_math_without_a_source_refuses_as_the_sweep_does(tmp_path):
    for command in ("plan", "sweep"):
        _one_line(_run([command, "task=math", "grid.max_new_tokens=64",
                        f"sweep.out_dir={tmp_path / 'results'}"], tmp_path), command,
                  "task.source=: task=math pilots train on problem/answer rows; give "
                  "task.source=<a .jsonl/.json/.parquet file")
    assert not (tmp_path / "results").exists()
    source = _data(tmp_path, MATH_ROWS)
    assert _run(["plan", "task=math", f"task.source={source}", "grid.max_new_tokens=64"],
                tmp_path).returncode == 0  # the fix


def test_a_problem_longer_than_the_context_is_refused_before_any_cell_folder(tmp_path,
                                                                             standin):
    """One ~4.3k-token problem (the stand-in's context: 4096): `race sweep` names the
    source, the problem and a fix that works (dropping it), before any folder is written;
    the pilot's own check no longer offers "lower grid.max_new_tokens to 0"."""
    rows = [{"problem": r["question"], "answer": r["answer"].rsplit("#### ", 1)[1]}
            for r in standin["rows"]]
    long = {"problem": "Tom has 3 apples. " * 700 + rows[5]["problem"], "answer": "7"}
    source = _data(tmp_path, [*rows[:5], long, *rows[5:]])
    args = ["task=math", f"model={standin['policy']}", "grid.max_new_tokens=16", "budget=1e12"]
    out_dir = tmp_path / "results"
    line = _one_line(_run(["sweep", *args, f"task.source={source}",
                           f"sweep.out_dir={out_dir}"], tmp_path), "sweep",
                     f"task.source={source}: 1 problem(s) too long for model=")
    assert "(\"Tom has 3 apples. Tom has 3 apples." in line
    assert "exceeds its context of 4096 tokens (the problem alone fills it); drop or " \
        "shorten the problems over 4080 tokens in it, or use a policy with a longer " \
        "context" in line and "or less" not in line
    assert not out_dir.exists()
    fixed = _data(tmp_path, rows, "fixed.jsonl")  # the fix: that problem dropped
    out = _run(["plan", *args, f"task.source={fixed}"], tmp_path)
    assert out.returncode == 0, out.stderr
    from race.errors import PromptTooLong

    assert "or less" not in str(PromptTooLong("m", 5000, 16, 4096))
    assert "lower grid.max_new_tokens to 96 or less" in str(PromptTooLong("m", 4000, 200, 4096))


@pytest.mark.parametrize("task", [["task=arith"], ["task=gsm8k", "task.source={data}"]],
                         ids=["arith", "gsm8k"])
def test_task_eval_on_a_task_without_named_targets_is_refused(task, tmp_path, standin):
    target = _data(tmp_path, EVAL_ROWS, "eval.jsonl")
    args = [a.format(data=standin["data"]) for a in task] + [
        "grid.max_new_tokens=40", f"task.eval.m20={target}"]
    name = task[0].split("=")[1]
    line = _one_line(_run(["sweep", *args, f"sweep.out_dir={tmp_path / 'results'}"],
                          tmp_path), "sweep", f"task.eval.m20={target}: named evaluation "
                     f"targets are read by task=math only; task={name} evaluates on its own "
                     f"targets")
    assert "drop task.eval.m20, or use task=math" in line
    assert not (tmp_path / "results").exists()
    fix = ["task=math", f"task.source={_data(tmp_path, MATH_ROWS)}", "grid.max_new_tokens=40",
           f"task.eval.m20={target}"]
    assert _run(["plan", *fix], tmp_path).returncode == 0


def test_extend_at_another_budget_is_refused(finished_sweep, policy, tmp_path):
    """sweep.extend=true adds cells at the folder's budget only; another budget goes in
    another folder (a budget axis), so one report never mixes two budgets' pilots."""
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep)
    record, cells = (sweep / "sweep.json").read_bytes(), sorted((sweep / "cells").iterdir())
    line = _one_line(_run(_tiny_sweep(policy, tmp_path, "budget=4e10", "sweep.extend=true"),
                          tmp_path), "sweep", "budget=4e10: sweep.extend=true adds cells to")
    assert "a sweep at budget=2e10 (its sweep.json)" in line
    assert "give budget=2e10 to extend it, or another sweep.name for this budget (or for " \
        "both listed as an axis, budget=2e10,4e10" in line
    assert (sweep / "sweep.json").read_bytes() == record
    assert sorted((sweep / "cells").iterdir()) == cells
    assert not list(sweep.glob("budget-*"))


def test_a_damaged_sweep_json_is_set_aside_and_rewritten_by_the_rerun(finished_sweep,
                                                                      policy, tmp_path):
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep)
    _torn(sweep / "sweep.json")
    _one_line(_run(["report", str(sweep)], tmp_path), "report",
              "rerun the same race sweep command to rewrite it")
    # another plan's command into that folder: refused, nothing moved
    other = _run(_tiny_sweep(policy, tmp_path, "budget=4e10"), tmp_path)
    held = len(list((sweep / "cells").iterdir()))
    assert f"none of the {held} cell folder(s) there is planned by this command" in \
        _one_line(other, "sweep", "sweep.name=s: its sweep.json is damaged")
    assert not list(sweep.glob("sweep.json.damaged-*"))
    out = race_in_process(_tiny_sweep(policy, tmp_path), tmp_path)  # the fix the report gives
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    moved = [line for line in out.stderr.splitlines() if "was damaged" in line]
    assert len(moved) == 1 and "moved it aside to sweep.json.damaged-" in moved[0], out.stderr
    assert f"{held} already done before this run" in out.stdout  # nothing ran again
    assert len(list(sweep.glob("sweep.json.damaged-*"))) == 1
    assert json.loads((sweep / "sweep.json").read_text())["budget_flops"] == 2e10
    assert race_in_process(["report", sweep], tmp_path).returncode == 0


def test_a_non_ascii_eval_name_gets_a_fix_that_works(tmp_path):
    source, target = _data(tmp_path, MATH_ROWS), _data(tmp_path, EVAL_ROWS, "eval.jsonl")
    args = ["plan", "task=math", f"task.source={source}", "grid.max_new_tokens=64"]
    for given in (f"task.eval.mäth={target}", f"'task.eval.mäth'={target}"):
        line = _one_line(_run([*args, given], tmp_path), "plan",
                         f"task.eval.mäth={target}: the key holds 'ä', not ASCII")
        assert line.endswith(f"name it in ASCII, e.g. task.eval.math={target}")
    assert _run([*args, f"task.eval.math={target}"], tmp_path).returncode == 0  # the fix


# issue "Reports that never claim more than the data": an extension that would mix what
# one report compares, a deleted cell, a damaged ladder state, a budget list into one
# budget's folder, a newline in sweep.name. Each: exit 2, one line naming the key, the
# value and the fix, nothing written, and the folder still reports and extends after.
def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: its size and modification time (what a write changes)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _swapped(args: list[str], *given: str) -> list[str]:
    """``args`` with each of ``given`` replacing the override of its key."""
    keys = {g.split("=", 1)[0] for g in given}
    return [a for a in args if a.split("=", 1)[0] not in keys] + list(given)


def _copy(finished_sweep: Path, tmp_path: Path) -> Path:
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep)
    return sweep


def _still_reports_and_extends(sweep: Path, policy: Path, tmp_path: Path, *,
                               new_cell: bool = False) -> None:
    """The folder reports, and a valid extension runs into it: its own command again with
    sweep.extend=true (accepted, nothing to run), or with ``new_cell`` another learning
    rate, whose pilot runs (seconds: once is enough to show it). Both run in this process:
    what is checked is that they work, not a fresh process's output."""
    assert race_in_process(["report", sweep], tmp_path).returncode == 0
    held = len(list((sweep / "cells").iterdir()))
    more = ("grid.lr=2e-3",) if new_cell else ()
    out = race_in_process(_tiny_sweep(policy, tmp_path, *more, "sweep.extend=true"), tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    now = len(list((sweep / "cells").iterdir()))
    assert now > held if new_cell else now == held


def test_extend_with_another_task_is_refused_before_any_pilot(finished_sweep, policy,
                                                               standin, tmp_path):
    sweep = _copy(finished_sweep, tmp_path)
    before = _listing(sweep)
    line = _one_line(_run(_tiny_sweep(policy, tmp_path, "task=gsm8k",
                                      f"task.source={standin['data']}", "sweep.extend=true"),
                          tmp_path), "sweep", "task=gsm8k: sweep.extend=true adds cells to")
    assert f"{sweep}, a sweep at task=arith (its sweep.json)" in line
    assert "give task=arith to extend it, or another sweep.name for this task" in line
    assert _listing(sweep) == before  # no pilot ran, nothing written
    _still_reports_and_extends(sweep, policy, tmp_path)


def test_a_folder_an_older_race_mixed_names_the_cell_folders_to_remove(finished_sweep,
                                                                       policy, tmp_path):
    """An older RACE let a gsm8k extension into an arith folder: every sweep into it is
    refused, naming the cell folder to remove; removed, the folder runs again."""
    sweep = _copy(finished_sweep, tmp_path)
    mixed = sweep / "cells" / "0123456789ab"
    shutil.copytree(_cell(sweep), mixed)
    spec = json.loads((mixed / "spec.json").read_text())
    (mixed / "spec.json").write_text(json.dumps(spec | {"cell_id": mixed.name, "task": {
        "name": "gsm8k"}}))
    before = _listing(sweep)
    line = _one_line(_run(_tiny_sweep(policy, tmp_path, "grid.lr=2e-3", "sweep.extend=true"),
                          tmp_path), "sweep", f"sweep.name=s: {sweep} mixes task arith and "
                     f"gsm8k")
    assert line.endswith(f"remove the 1 cell folder(s) not of its first task (arith): "
                         f"{mixed}, then rerun")
    assert _listing(sweep) == before
    shutil.rmtree(mixed)  # the fix
    _still_reports_and_extends(sweep, policy, tmp_path)


def test_extend_with_another_pilot_fraction_is_refused(finished_sweep, policy, tmp_path):
    sweep = _copy(finished_sweep, tmp_path)
    before = _listing(sweep)
    line = _one_line(_run(_tiny_sweep(policy, tmp_path, "pilot.fraction=0.125",
                                      "sweep.extend=true"), tmp_path), "sweep",
                     f"pilot.fraction=0.125: sweep.extend=true adds cells to {sweep}, a sweep "
                     f"at pilot.fraction=0.0625 (its sweep.json)")
    assert "give pilot.fraction=0.0625 to extend it, or another sweep.name" in line
    assert _listing(sweep) == before
    _still_reports_and_extends(sweep, policy, tmp_path)


def test_extend_with_another_selection_policy_is_refused(finished_sweep, policy, tmp_path):
    sweep = _copy(finished_sweep, tmp_path)
    before = _listing(sweep)
    args = _swapped(_tiny_sweep(policy, tmp_path, "grid.lr=1e-3,2e-3", "sweep.extend=true"),
                    "selection.policy=ladder", "budget=2e11")
    line = _one_line(_run(args, tmp_path), "sweep", "selection.policy=ladder: "
                     f"sweep.extend=true adds cells to {sweep}, a sweep at "
                     f"selection.policy=flat (its sweep.json)")
    assert "budget=2e11: " in line  # every key that differs, on the one line
    assert "give selection.policy=flat to extend it, or another sweep.name" in line
    assert _listing(sweep) == before
    _still_reports_and_extends(sweep, policy, tmp_path)


def test_a_deleted_cell_folder_is_reported_missing(finished_sweep, policy, tmp_path):
    sweep = _copy(finished_sweep, tmp_path)
    _still_reports_and_extends(sweep, policy, tmp_path, new_cell=True)  # two configs
    cells = sorted((sweep / "cells").iterdir())
    gone = next(c for c in cells if json.loads((c / "spec.json").read_text())["lr"] == 2e-3)
    shutil.rmtree(gone)  # a cell of the extension
    out = race_in_process(["report", sweep], tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"cells: {len(cells) - 1} ok, 0 failed, 1 missing" in out.stdout
    board = (sweep / "leaderboard.md").read_text()
    assert "every cell finished ok" not in board
    assert f"`{gone.name}`" in board and f"its folder {gone} is gone" in board
    again = race_in_process(_tiny_sweep(policy, tmp_path, "grid.lr=2e-3", "sweep.extend=true"),
                            tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]  # the fix: the command reruns it
    assert (gone / "summary.json").is_file()


def test_a_budget_list_into_one_budgets_folder_is_refused(finished_sweep, policy, tmp_path):
    sweep = _copy(finished_sweep, tmp_path)
    before = _listing(sweep)
    line = _one_line(_run(_tiny_sweep(policy, tmp_path, "budget=2e10,4e10",
                                      "sweep.extend=true"), tmp_path), "sweep",
                     f"budget=2e10,4e10: sweep.name=s is one budget's sweep folder ({sweep} "
                     f"at budget=2e10)")
    assert "give another sweep.name for the list, e.g. sweep.name=s-budgets, or extend it at " \
        "its own budget with budget=2e10" in line
    assert _listing(sweep) == before and not list(sweep.glob("budget-*"))
    _still_reports_and_extends(sweep, policy, tmp_path)


@pytest.mark.parametrize("name", ["a\nb", "'a\nb'"], ids=["unquoted", "quoted"])
def test_a_newline_in_sweep_name_is_shown_whole(name, tmp_path):
    line = _one_line(_run(["sweep", f"sweep.name={name}", f"sweep.out_dir={tmp_path / 'r'}"],
                          tmp_path), "sweep", "sweep.name='a\\nb': holds a control character "
                     "('\\n'); give ")
    assert line.endswith("without it, e.g. sweep.name=ab")
    assert not (tmp_path / "r").exists()


# Issue "Reports that never claim more than the data", items B-D: `race pilot` refuses what
# `race sweep` refuses, before anything is written; a SLURM launcher without SLURM and a
# report override the sweep's selection cannot honour each exit 2 with one line.
def _long_math_source(tmp: Path) -> Path:
    """41 math rows, one of them a 5,214-token problem for the tiny family's character
    tokenizer (one token per character: lowercase letters, digits, spaces and "?")."""
    rows = [{"problem": f"what is {i} plus {i}?", "answer": str(2 * i)} for i in range(40)]
    long = {"problem": "tom has 3 apples and " * 248 + "total?", "answer": "7"}
    assert len(long["problem"]) == 5214
    return _data(tmp, [*rows[:5], long, *rows[5:]], "long.jsonl")


def _refs_only(tmp: Path) -> Path:
    """A Hugging Face cache holding ``race-test/refs`` as ``refs/main`` alone (its snapshot
    never downloaded)."""
    repo = tmp / "hub" / "datasets--race-test--refs"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("c0ffee")
    return tmp / "hub"


def _missing_data_shard(tmp: Path) -> Path:
    """A local split in 3 parquet shards with the second one absent."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(75)]
    folder = tmp / "sharded"
    (folder / "data").mkdir(parents=True)
    for i in (0, 2):
        pd.DataFrame(rows[25 * i:25 * (i + 1)]).to_parquet(
            folder / "data" / f"train-{i:05d}-of-00003.parquet")
    pd.DataFrame(rows[:6]).to_parquet(folder / "data" / "test-00000-of-00001.parquet")
    return folder


# (overrides built from tmp_path, text the one line must contain)
PILOT_CASES = [
    pytest.param(lambda t: ["model=tiny-s", "task=math", f"task.source={_long_math_source(t)}"],
                 "1 problem(s) too long for model=tiny-s; the longest, a ", id="tiny-too-long"),
    pytest.param(lambda t: ["task=math", f"task.source={_missing_data_shard(t)}",
                            "grid.max_new_tokens=64"],
                 "train-00001-of-00003.parquet is missing", id="missing-shard"),
    pytest.param(lambda t: ["task=math", "task.source=race-test/refs", "grid.max_new_tokens=64",
                            f"+env={_refs_only(t)}"],
                 "task.source=race-test/refs: not in the Hugging Face cache", id="refs-only"),
]


@pytest.mark.parametrize("build, needle", PILOT_CASES)
def test_race_pilot_refuses_what_race_sweep_refuses_before_writing(build, needle, tmp_path,
                                                                   monkeypatch):
    """The same line from `race plan`, `race sweep` and `race pilot` (one function checks
    for all), exit 2, and no sweep folder and no cell folder written."""
    args = build(tmp_path)
    env = [a for a in args if a.startswith("+env=")]
    args = [a for a in args if not a.startswith("+env=")]
    if env:  # the hub cache the case laid out, offline
        monkeypatch.setenv("HF_HUB_CACHE", env[0].split("=", 1)[1])
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out_dir = tmp_path / "results"
    lines = {}
    for command in ("sweep", "pilot") + (("plan",) if not env else ()):
        extra = {"sweep": [f"sweep.out_dir={out_dir}"],
                 "pilot": [f"pilot.out_dir={out_dir}"], "plan": []}[command]
        line = _one_line(_run([command, *args, *extra], tmp_path), command, needle)
        lines[command] = line.split(": ", 1)[1]
        assert not out_dir.exists(), command  # nothing half-written
    assert lines["pilot"] == lines["sweep"]


def test_a_slurm_hydra_launcher_without_slurm_exits_2_one_line(tmp_path):
    """`race pilot -m ... hydra/launcher=submitit_slurm` where no `sbatch` is on PATH (CI
    has SLURM: PATH is emptied here) names the override and the fix, not a traceback."""
    import os

    empty = tmp_path / "bin"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "race.cli", "pilot", "-m", "model=tiny-s",
                          "hydra/launcher=submitit_slurm", f"pilot.out_dir={tmp_path / 'r'}"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PATH": str(empty)})
    line = _one_line(out, "pilot", "hydra/launcher=submitit_slurm: no SLURM here (sbatch not "
                                   "found on PATH); run on a SLURM login node")
    assert "drop the hydra/launcher override" in line
    assert not (tmp_path / "r").exists() and not (tmp_path / "multirun").exists()


@pytest.fixture
def ladder_sweep(tmp_path):
    """The hand-made three-rung ladder folder of tests/test_ladder_report.py (4 configs)."""
    import test_ladder_report as world

    from race.store import io as results_io

    sweep = tmp_path / "ladder"
    results_io.write_json(sweep / "sweep.json", {
        "budget_flops": world.FULL, "pilot_fraction": world.RUNGS[0], "task": "arith",
        "config": {"regime": {"feedback_heavy": 0.15, "learning_heavy": 0.8,
                              "search_heavy": 0.4}}})
    rungs = []
    for number, configs in enumerate(world.LADDER, 1):
        above = world.LADDER[number] if number < len(world.LADDER) else ()
        for config in configs:
            world.write_cell(sweep, config, number)
        ranked = sorted(configs, key=lambda c: -world.accuracy(c, number))
        rungs.append({"rung": number, "fraction": world.RUNGS[number - 1],
                      "budget_flops": world.budget(number),
                      "cells": [world.cell_id(c, number) for c in configs],
                      "candidates": [world.candidate(c, number, c in above) for c in ranked]})
    results_io.write_json(sweep / "ladder.json", {
        "rungs": rungs, "reduction": 2, "z": 1.0, "promote_by": "last",
        "keep_sizes": "close", "cost_share": 0.2, "scaled": 1.0})
    return sweep


@pytest.mark.parametrize("overrides, needle", [
    (["report.top_k=4", "report.basis=observed"], "report.basis=observed: this sweep ran "
     "selection.policy=ladder, whose picks are the ladder's own ranking (basis ladder); "
     "report.basis applies to flat sweeps (selection.policy=flat); drop it"),
    (["report.basis=extrapolated"], "report.basis=extrapolated: this sweep ran "
     "selection.policy=ladder"),
    (["report.top_k=9"], "report.top_k=9: this sweep's ladder ranked 4 config(s), so at most "
     "4 can be selected; use report.top_k=4 or less"),
])
def test_a_report_override_a_ladder_cannot_honour_is_refused(overrides, needle, ladder_sweep,
                                                            tmp_path):
    before = _listing(ladder_sweep)
    _one_line(_run(["report", str(ladder_sweep), *overrides], tmp_path), "report", needle)
    assert _listing(ladder_sweep) == before  # nothing written
    # the fix: without the override (top_k within the ladder's configs) the folder reports
    out = race_in_process(["report", ladder_sweep, "report.top_k=4", "report.n_boot=50"],
                          tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    selection = json.loads((ladder_sweep / "selection.json").read_text())
    assert (selection["k"], len(selection["selected"]), selection["basis"]) == (4, 4, "ladder")


def test_extend_with_another_task_knob_is_refused_naming_it(finished_sweep, policy, tmp_path):
    """issue 62: task.digits=2 into a task.digits=1 folder is refused as task=gsm8k is (it
    trained a second warm start, and the leaderboard showed both tasks' cells as one)."""
    sweep = _copy(finished_sweep, tmp_path)
    before = _listing(sweep)
    line = _one_line(_run(_tiny_sweep(policy, tmp_path, "task.digits=2", "sweep.extend=true"),
                          tmp_path), "sweep", f"task.digits=2: sweep.extend=true adds cells to "
                     f"{sweep}, a sweep at task.digits=1 (its cells' spec.json)")
    assert line.endswith("give task.digits=1 to extend it, or another sweep.name for this task")
    assert _listing(sweep) == before  # no pilot ran, nothing written


def test_report_refuses_the_overrides_it_does_not_read(ladder_sweep, tmp_path):
    """issue 62: grid.* and budget given to race report changed nothing and said nothing."""
    before = _listing(ladder_sweep)
    line = _one_line(_run(["report", str(ladder_sweep), "grid.lr=1e-3", "budget=2e12",
                           "report.top_k=2"], tmp_path), "report",
                     f"grid.lr=1e-3 budget=2e12: race report ranks the cells {ladder_sweep} "
                     f"holds, which ran with what their spec.json records, and reads only "
                     f"report.n_boot, report.level, report.top_k, report.basis; drop them")
    assert "report.top_k=2" not in line  # what it reads is not named
    assert _listing(ladder_sweep) == before
