"""Hub weights before launch: an offline sweep of a hub model that is not in the Hugging
Face cache is refused before any cell folder exists (naming `race prefetch`), `race plan`
plans it and says what a sweep would need, and a cache laid out as the hub lays it out
(built here from a stand-in) lets the pilot run offline and record the snapshot's hash;
a dataset cached the same way passes the sweep's checks and loads, with no `datasets`."""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml

from race.catalog import conf_dir
from race.core.specs import RunSpec
from race.errors import WeightsMissing
from race.preflight import check_plan, open_task
from race.run.prefetch import HubNeed, check_needs, hub_needs

pytest.importorskip("torch", reason="the offline pilot trains with torch")

SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"  # a commit hash, as the hub names them
REPO = "race-test/Standin-Tiny"


def _race(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=900, cwd=cwd, env=dict(os.environ, **env))


def _one_line(out: subprocess.CompletedProcess) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_an_offline_sweep_of_a_missing_hub_model_is_refused_before_any_folder(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-cache")}
    args = ["model=qwen2.5-0.5b", "budget=1e15"]
    out = _race(["sweep", *args, f"sweep.out_dir={tmp_path / 'results'}"], tmp_path, **env)
    assert out.returncode == 2, out.stderr
    line = _one_line(out)
    assert line.startswith("race sweep: model.hf_id=Qwen/Qwen2.5-0.5B-Instruct: not in the "
                           "Hugging Face cache (HF_HUB_OFFLINE=1)")
    assert "run `race prefetch` with the same overrides" in line
    assert not (tmp_path / "results").exists()
    plan = _race(["plan", *args], tmp_path, **env)
    assert plan.returncode == 0, plan.stderr
    assert "Qwen/Qwen2.5-0.5B-Instruct (model, model.hf_id)" in plan.stderr
    assert "run `race prefetch`" in plan.stderr


def test_hub_needs_lists_policies_reward_models_and_datasets_once():
    rule = (("kind", "rule"), ("name", "rule"))
    specs = [RunSpec("qwen2.5-0.5b", rule, (("name", "math"), ("source", "org/data"),
                                            ("eval", json.dumps({"m": "/local/file.jsonl",
                                                                 "g": {"source": "openai/gsm8k",
                                                                       "subset": "main"}}))),
                     1.0, policy_path="Qwen/Qwen2.5-0.5B-Instruct", policy_revision="v1",
                     seed=seed) for seed in (0, 1)]
    assert hub_needs(specs) == [
        HubNeed("dataset", "task.source", "org/data"),
        HubNeed("dataset", "task.eval.g", "openai/gsm8k", subset="main"),
        HubNeed("model", "model.hf_id", "Qwen/Qwen2.5-0.5B-Instruct", "v1")]


@pytest.fixture
def hub_cache(standin, tmp_path):
    """``$HF_HUB_CACHE/models--race-test--Standin-Tiny/snapshots/<hash>/`` holding the
    stand-in policy, ``refs/main`` naming the hash, and a race/conf/ folder whose model entry
    ``standin-hub`` names the hub id (shape from the stand-in)."""
    cache = tmp_path / "hub"
    repo = cache / f"models--{REPO.replace('/', '--')}"
    shutil.copytree(standin["policy"], repo / "snapshots" / SNAPSHOT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    entry = dataclasses.asdict(dataclasses.replace(standin["shape"], name="standin-hub",
                                                   hf_id=REPO))
    (conf / "model" / "standin-hub.yaml").write_text(yaml.safe_dump(
        entry | {"tokenizer": "", "context_tokens": 4096}))
    return {"cache": cache, "conf": conf}


def test_a_cache_laid_out_like_the_hub_runs_offline_and_records_the_snapshot(
        hub_cache, standin, tmp_path):
    rows = standin["rows"]  # the data by hub name too, as GSM8K's snapshot lays it out
    _hub_dataset(hub_cache["cache"], "race-test/gsm8k", {
        "main/train-00000-of-00001.jsonl": _jsonl(rows[:200]),
        "main/test-00000-of-00001.jsonl": _jsonl(rows[200:])})
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache["cache"]),
           "RACE_CONF_DIR": str(hub_cache["conf"])}
    out = _race(["sweep", "model=standin-hub", "task=gsm8k", "task.source=race-test/gsm8k",
                 "reward=rule", "grid.axes={}", "grid.group_size=2", "grid.update_epochs=1",
                 "grid.prompts_per_step=2", "grid.max_new_tokens=12", "budget=2e10",
                 "pilot.fraction=0.25", "selection.policy=flat", "pilot.eval_examples=4",
                 "pilot.select_examples=4", "pilot.checkpoints=[1.0]", "launcher=inline",
                 f"sweep.out_dir={tmp_path}", "sweep.name=hub"], tmp_path, **env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(next((tmp_path / "hub" / "cells").glob("*/summary.json")).read_text())
    assert summary["status"] == "ok", summary["error"]
    assert summary["weights"]["policy"] == {"source": REPO, "revision": SNAPSHOT}


def _hub_dataset(cache: Path, repo: str, files: dict) -> None:
    """``repo`` laid out as huggingface_hub caches a dataset: each file a blob under
    ``blobs/`` named by its hash, linked from ``snapshots/<commit>/<path>``, and
    ``refs/main`` naming the commit. ``files`` maps a path to a writer of its bytes."""
    root = cache / f"datasets--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True)
    for name, write in files.items():
        written = root / "blobs" / "incomplete"
        write(written)
        blob = written.rename(root / "blobs" / hashlib.sha256(written.read_bytes()).hexdigest())
        link = root / "snapshots" / SNAPSHOT / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(SNAPSHOT)


def _jsonl(rows: list[dict]):
    return lambda path: path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _word_problems(n: int, offset: int, style: str = "") -> list[dict]:
    return [{"question": f"{style}Tom has {i} bags of 2 apples each. How many apples?",
             "answer": f"He has {i} * 2 = <<{i}*2={2 * i}>>{2 * i} apples.\n#### {2 * i}"}
            for i in range(offset, offset + n)]


def test_a_dataset_cached_as_the_hub_lays_it_out_passes_the_checks_and_loads(
        tmp_path, monkeypatch):
    """GSM8K's layout (main/ and socratic/ parquet files) as the training source and
    MATH-500's (test.jsonl) as a target, offline and without `datasets`: what the sweep's
    checks accept is what the pilot's task reads."""
    pd = pytest.importorskip("pandas")

    def parquet(rows):
        return lambda path: pd.DataFrame(rows).to_parquet(path)

    train, test = _word_problems(60, 0), _word_problems(6, 600)
    math500 = [{"problem": f"Compute ${i} \\cdot 3$.", "solution": f"$\\boxed{{{3 * i}}}$",
                "answer": str(3 * i), "unique_id": f"test/algebra/{i}.json"} for i in range(7)]
    card = lambda path: path.write_text("---\nlicense: mit\n---\n")  # noqa: E731
    cache = tmp_path / "hub"
    _hub_dataset(cache, "race-test/gsm8k", {
        "README.md": card, "main/train-00000-of-00001.parquet": parquet(train),
        "main/test-00000-of-00001.parquet": parquet(test),
        "socratic/train-00000-of-00001.parquet": parquet(_word_problems(60, 0, "Q: ")),
        "socratic/test-00000-of-00001.parquet": parquet(_word_problems(6, 600, "Q: "))})
    _hub_dataset(cache, "race-test/MATH-500", {"README.md": card, "test.jsonl": _jsonl(math500)})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails
    rule = (("kind", "rule"), ("name", "rule"))
    math = (("eval", json.dumps({"m500": "race-test/MATH-500"})), ("name", "math"),
            ("source", "race-test/gsm8k"))
    spec = RunSpec("tiny-s", rule, math, 1.0, eval_targets=("test", "m500"))
    check_needs(hub_needs([spec]))  # race sweep's hub check: both snapshots are cached
    check_plan([spec])  # the plan's check reads the snapshots' files
    assert open_task(dict(spec.task), spec.eval_targets, local_only=True) is not None
    task = open_task(dict(spec.task), spec.eval_targets)  # as the pilot opens it
    assert [(ex.problem, ex.answer) for ex in task.rows("m500")] == \
        [(r["problem"], r["answer"]) for r in math500]
    assert [ex.problem for ex in task.rows("test")] == [r["question"] for r in test]
    assert sorted(ex.problem for ex in [*task.rows("train"), *task.rows("val")]) == \
        sorted(r["question"] for r in train)  # main/, not socratic/
    gsm8k = open_task({"name": "gsm8k", "source": "race-test/gsm8k"}, ("val", "test"))
    assert [ex.answer for ex in gsm8k.rows("test")] == [str(2 * i) for i in range(600, 606)]
    # a target whose snapshot is not cached: the plan skips reading, the sweep refuses
    missing = (("eval", json.dumps({"m500": "race-test/absent"})), *math[1:])
    absent = dataclasses.replace(spec, task=missing)
    assert open_task(dict(absent.task), absent.eval_targets, local_only=True) is None
    with pytest.raises(WeightsMissing, match=r"^task.eval.m500=race-test/absent: not in the "
                                             r"Hugging Face cache \(HF_HUB_OFFLINE=1\)"):
        check_needs(hub_needs([absent]))


def _sharded(tmp_path: Path, n: int = 2, absent: tuple[int, ...] = ()):
    """A dataset split the hub's way: ``data/train-0000i-of-0000n.parquet`` of 25 word
    problems each (less the ``absent`` shards) and ``data/test-00000-of-00001.parquet``;
    returns (train rows, test rows, {path in the repository: writer})."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    train, test = _word_problems(25 * n, 0), _word_problems(6, 900)
    files = {f"data/train-{i:05d}-of-{n:05d}.parquet":
             (lambda rows: lambda path: pd.DataFrame(rows).to_parquet(path))(
                 train[25 * i:25 * (i + 1)]) for i in range(n) if i not in absent}
    files["data/test-00000-of-00001.parquet"] = lambda path: pd.DataFrame(test).to_parquet(path)
    return train, test, files


def test_a_sharded_split_is_read_whole_from_a_folder_a_snapshot_and_a_hub_name(
        tmp_path, monkeypatch):
    """Every row of both shards, in shard order, whichever way the dataset is named: a
    local folder, its hub snapshot folder, or its hub id resolved offline from the cache."""
    from race.tasks import build_task
    from race.tasks.gsm8k import load_gsm8k
    from race.tasks.math import read_math
    from race.tasks.task_base import HELD_OUT

    train, test, files = _sharded(tmp_path)
    folder = tmp_path / "local"
    for name, write in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write(folder / name)
    cache = tmp_path / "hub"
    _hub_dataset(cache, "race-test/sharded", files)
    snapshot = cache / "datasets--race-test--sharded" / "snapshots" / SNAPSHOT
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "datasets", None)  # no `datasets`: the files themselves
    questions = [r["question"] for r in train]
    for source in (str(folder), str(snapshot), "race-test/sharded"):
        assert [ex.problem for ex in read_math(source, "train")] == questions, source
        assert [ex.question for ex in load_gsm8k(source, "train")] == questions, source
        task = build_task({"name": "math", "source": source})
        assert sorted(ex.problem for s in ("train", "val") for ex in task.rows(s)) == \
            sorted(questions)  # both shards: train and the val cut from it
        assert [ex.problem for ex in task.rows("test")] == [r["question"] for r in test]
        gsm8k = build_task({"name": "gsm8k", "source": source})  # its train file's test
        cut = [q for q in questions if HELD_OUT.get(zlib.crc32(q.encode()) % 10) != "test"]
        assert sorted(ex.question for s in ("train", "val") for ex in gsm8k.rows(s)) == \
            sorted(cut)  # bucket is set aside: the test split is the test file


def test_a_missing_shard_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """``train-00001-of-00003`` absent: `race plan` and `race sweep` exit 2 with one line
    naming that file and the fix, and the sweep writes nothing; read by hub name too."""
    from race.tasks.gsm8k import MissingShard
    from race.tasks.math import MathTask

    *_, files = _sharded(tmp_path, n=3, absent=(1,))
    folder = tmp_path / "local"
    for name, write in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write(folder / name)
    missing = folder / "data" / "train-00001-of-00003.parquet"
    results = tmp_path / "results"
    for command in ("plan", "sweep"):
        out = _race([command, "task=math", f"task.source={folder}", "grid.max_new_tokens=64",
                     f"sweep.out_dir={results}"], tmp_path)
        assert out.returncode == 2, out.stderr
        line = _one_line(out)
        assert line.startswith(f"race {command}: task.source={folder}: shard {missing} is "
                               f"missing (1 of the split's 3)"), line
        assert "put all 3 shards in that folder" in line
    assert not results.exists()
    cache = tmp_path / "hub"
    _hub_dataset(cache, "race-test/sharded", files)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MissingShard, match="train-00001-of-00003.parquet is missing") as error:
        MathTask(source="race-test/sharded").rows("train")
    assert error.value.total == 3 and error.value.where == "task.source=race-test/sharded"
    assert [Path(p).name for p in error.value.missing] == ["train-00001-of-00003.parquet"]


def test_a_snapshot_whose_blob_is_gone_is_named_damaged_with_the_fix(tmp_path, monkeypatch):
    """A cached dataset whose snapshot links to a deleted blob is damaged, not absent: the
    line names the file and how to fetch it again."""
    from race.errors import UsageError
    from race.tasks.hub_data import dataset_source

    cache = tmp_path / "hub"
    _hub_dataset(cache, "race-test/blobless", {
        "train.jsonl": _jsonl(_word_problems(20, 0)),
        "test.jsonl": _jsonl(_word_problems(5, 100))})
    root = cache / "datasets--race-test--blobless"
    (root / "snapshots" / SNAPSHOT / "test.jsonl").resolve().unlink()  # the blob
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match=r"task.source=race-test/blobless: .* is damaged: "
                                         r"test.jsonl points to a blob that is gone.*prefetch"):
        dataset_source("race-test/blobless", key="task.source")
