"""`report.tracker`: a two-cell sweep logs each pilot's steps and evals, grouped by sweep
with its knobs as config, and the sweep's pick, to W&B (offline), trackio (its local
store), MLflow (a file store) and TensorBoard (event files); each is read back from the
tracker's own store. A tracker whose package is missing is refused at `race plan`."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from race import cli

# A tiny pilot's knobs (tests/test_sweep.py's SMALL at 0.3 of its budget: 3 steps, enough
# to log a history), two cells by learning rate.
SMALL = ["model=tiny-s", "reward=rule", "grid.prompts_per_step=2", "grid.group_size=2",
         "grid.max_new_tokens=12", "grid.update_epochs=1", "grid.lora_rank=4",
         "pilot.eval_examples=4", "pilot.eval_targets=[test]", "budget=6e9",
         "selection.policy=flat", "launcher=inline", "grid.lr=1e-3,2e-3"]


def _sweep(tmp_path: Path, policy, tracker: str, env: dict) -> Path:
    """Run the two-cell sweep with ``report.tracker=tracker``; its folder."""
    pytest.importorskip("torch", reason="pilots train with torch")
    args = ["sweep", *SMALL, f"model.hf_id={policy}", f"sweep.out_dir={tmp_path}",
            "sweep.name=s", f"report.tracker={tracker}", "report.tracker_project=race-test"]
    out = subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                         text=True, timeout=900, cwd=tmp_path, env=os.environ | env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "logs to it no more" not in out.stderr, out.stderr[-3000:]
    return tmp_path / "s"


def _expected(sweep: Path) -> dict[str, dict]:
    """Each cell's logged history from its metrics.jsonl: charged FLOPs by step, and its
    test evals as (step, accuracy) in order (step 0: the warm start)."""
    cells = {}
    for folder in sorted((sweep / "cells").iterdir()):
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        step, flops, evals = 0, {}, []
        for row in rows:
            if row["kind"] == "step":
                step = row["step"]
                flops[step] = row["charged_flops"]
            elif row["kind"] == "eval":
                evals.append((step, row["accuracy"]))
        assert len(flops) >= 1 and len(evals) >= 2
        cells[folder.name] = {"flops": flops, "evals": evals}
    assert len(cells) == 2
    return cells


def _pick(sweep: Path) -> str | None:
    """The report's pick (None: it selected none, as where nothing learned)."""
    selected = json.loads((sweep / "selection.json").read_text())["selected"]
    return selected[0]["config_id"] if selected else None


def _check(logged: dict, expected: dict, *, last_per_step: bool = False) -> None:
    """``logged``: run name -> {"flops": [(step, value)], "evals": [(step, value)]}."""
    for cell_id, want in expected.items():
        got = logged[cell_id]
        assert dict(got["flops"]) == pytest.approx(want["flops"], rel=1e-6)
        if last_per_step:  # W&B merges what is logged at one step: the last value stays
            assert dict(got["evals"]) == pytest.approx(dict(want["evals"]))
        else:
            got, want = sorted(got["evals"]), sorted(want["evals"])
            assert [s for s, _ in got] == [s for s, _ in want]
            assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)


def _wandb_records(path: Path):
    """The protobuf records of a ``.wandb`` transaction log (LevelDB's log format: 32 KiB
    blocks of chunks, each a 7-byte header -- crc32, length, type -- then its bytes)."""
    from wandb.proto import wandb_internal_pb2

    data, block, pos, chunk = path.read_bytes(), 32768, 7, b""  # 7: the ":W&B" header
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a FULL or LAST chunk ends a record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            chunk = b""
            yield record


def test_wandb_offline(tmp_path, policy):
    pytest.importorskip("wandb", reason="report.tracker=wandb needs pip install 'race-rl[wandb]'")
    store = tmp_path / "wandb-store"
    store.mkdir()
    sweep = _sweep(tmp_path, policy, "wandb", {"WANDB_MODE": "offline", "WANDB_DIR": str(store),
                                               "WANDB_SILENT": "true"})
    logged, groups, picks = {}, {}, {}
    for path in store.glob("wandb/offline-run-*/*.wandb"):
        name, flops, evals = None, [], []
        for record in _wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                name, groups[record.run.display_name] = (record.run.display_name,
                                                         record.run.run_group)
                config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
                picks[name] = config.get("pick")
            elif kind == "history":
                item = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                        for i in record.history.item}
                if "charged_flops" in item:
                    flops.append((item["_step"], item["charged_flops"]))
                if "eval/test/accuracy" in item:
                    evals.append((item["_step"], item["eval/test/accuracy"]))
        logged[name] = {"flops": flops, "evals": evals}
    expected = _expected(sweep)
    _check(logged, expected, last_per_step=True)
    assert set(groups.values()) == {"s"}
    assert picks["sweep"] == _pick(sweep)


def test_trackio_local_store(tmp_path, policy):
    pytest.importorskip("trackio", reason="report.tracker=trackio needs pip install "
                                          "'race-rl[trackio]'")
    store = tmp_path / "trackio-store"
    sweep = _sweep(tmp_path, policy, "trackio", {"TRACKIO_DIR": str(store)})
    # trackio reads TRACKIO_DIR once, on import: read its store in a fresh process
    read = ("import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage as S\n"
            "runs = S.get_runs('race-test')\n"
            "print(json.dumps({r: {'logs': S.get_logs('race-test', r), "
            "'config': S.get_run_config('race-test', r)} for r in runs}, default=str))")
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True,
                         timeout=120, env=os.environ | {"TRACKIO_DIR": str(store)})
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout.splitlines()[-1])
    logged = {name: {"flops": [(r["step"], r["charged_flops"]) for r in run["logs"]
                               if "charged_flops" in r],
                     "evals": [(r["step"], r["eval/test/accuracy"]) for r in run["logs"]
                               if "eval/test/accuracy" in r]}
              for name, run in runs.items()}
    _check(logged, _expected(sweep))
    assert {run["config"]["_Group"] for run in runs.values()} == {"s"}
    assert runs["sweep"]["config"]["pick"] == _pick(sweep)
    cell = next(iter(_expected(sweep)))
    assert runs[cell]["config"]["lr"] in (1e-3, 2e-3)


def test_mlflow_file_store(tmp_path, policy, monkeypatch):
    pytest.importorskip("mlflow", reason="report.tracker=mlflow needs pip install "
                                         "'race-rl[mlflow]'")
    from mlflow.tracking import MlflowClient

    uri = f"file:{tmp_path / 'mlruns'}"
    # MLflow 3 keeps its file store in maintenance mode: allowed by name
    sweep = _sweep(tmp_path, policy, "mlflow", {"MLFLOW_TRACKING_URI": uri,
                                                "MLFLOW_ALLOW_FILE_STORE": "true"})
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("race-test")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    logged = {name: {key: [(m.step, m.value) for m in client.get_metric_history(
        run.info.run_id, metric)] for key, metric in (("flops", "charged_flops"),
                                                    ("evals", "eval/test/accuracy"))}
              for name, run in runs.items()}
    _check(logged, _expected(sweep))
    assert {r.data.tags["group"] for r in runs.values()} == {"s"}
    assert runs["sweep"].data.params["pick"] == str(_pick(sweep))  # params are strings
    cell = next(iter(_expected(sweep)))
    assert float(runs[cell].data.params["lr"]) in (1e-3, 2e-3)


def test_tensorboard_event_files(tmp_path, policy):
    pytest.importorskip("tensorboard", reason="report.tracker=tensorboard needs pip install "
                                              "'race-rl[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep = _sweep(tmp_path, policy, "tensorboard", {})
    logged = {}
    for folder in (sweep / "tensorboard").iterdir():
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
        events.Reload()
        tags = events.Tags()["scalars"]
        logged[folder.name] = {
            key: [(e.step, e.value) for e in events.Scalars(tag)] if tag in tags else []
            for key, tag in (("flops", "charged_flops"), ("evals", "eval/test/accuracy"))}
    _check(logged, _expected(sweep))
    assert "sweep" in logged


def test_a_tracker_whose_package_is_missing_is_refused_at_plan_in_one_line(
        monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    assert cli.main(["plan", "report.tracker=wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "report.tracker=wandb: the wandb package is not installed; pip install " \
           "'race-rl[wandb]'" in err


def test_an_unknown_tracker_is_refused_with_the_valid_names(capsys):
    assert cli.main(["plan", "report.tracker=wandbb"]) == 2
    err = capsys.readouterr().err
    assert "none|wandb|trackio|mlflow|tensorboard" in err and "report.tracker=wandb?" in err


def test_a_tracker_does_not_change_a_cells_id():
    from dataclasses import replace

    from race.core.specs import RunSpec

    spec = RunSpec(model="tiny-s", reward=(), task=(), budget_flops=1e10)
    tracked = replace(spec, tracker="wandb", tracker_project="p")
    assert (tracked.cell_id, tracked.config_id, tracked.lineage_id) == (
        spec.cell_id, spec.config_id, spec.lineage_id)
    assert RunSpec.from_dict(tracked.to_dict()) == tracked


def test_a_failing_tracker_warns_once_and_never_fails_the_caller(monkeypatch, capsys):
    from race.integrations import trackers

    calls = []

    class Broken:
        def __init__(self, *a, **k):
            pass

        def log(self, step, metrics):
            calls.append(step)
            raise RuntimeError("the tracker is down")

    monkeypatch.setitem(trackers.TRACKER_RUNS, "mlflow", Broken)
    run = trackers.open_run("mlflow", "c", "g", {"a": {"b": 1}})
    run.log(1, {"x": 1.0})
    run.log(2, {"x": 2.0})
    run.finish()
    assert calls == [1]
    assert capsys.readouterr().err.count("logs to it no more") == 1


def test_a_row_the_feed_cannot_read_disables_it_without_failing_the_pilot(monkeypatch,
                                                                          capsys):
    from race.integrations import trackers

    logged = []

    class Store:
        def __init__(self, *a, **k):
            pass

        def log(self, step, metrics):
            logged.append((step, metrics))

        def finish(self):
            pass

    monkeypatch.setitem(trackers.TRACKER_RUNS, "tensorboard", Store)
    feed = trackers.PilotFeed(trackers.open_run("tensorboard", "c", "g", {}), "model")
    feed({"kind": "eval", "target": "test", "accuracy": 0.5, "mean_reward": 0.25})
    feed({"kind": "step", "step": 1})  # no FLOPs: unreadable
    feed({"kind": "eval", "target": "test", "accuracy": 0.75, "mean_reward": 0.5})
    feed.finish()
    assert logged == [(0, {"eval/test/accuracy": 0.5, "eval/test/mean_reward": 0.25})]
    assert capsys.readouterr().err.count("logs to it no more") == 1
