"""The GSM8K-format loader (race.tasks.gsm8k) on small local files; no dataset hub."""

import json
import logging
import re
import sys
import types

import pytest

from race.errors import UsageError
from race.tasks.gsm8k import PROMPT_TEMPLATE, load_gsm8k, parse_solution, read_gsm8k
from race.tasks.task_base import Example

# Written for these tests in GSM8K's format: steps with <<calculator>> annotations, "#### N".
PROBLEMS = [
    {"question": "A baker makes 24 muffins in the morning and twice as many in the "
                 "afternoon. How many muffins does he make in all?",
     "answer": "In the afternoon he makes 24 * 2 = <<24*2=48>>48 muffins.\n"
               "In all he makes 24 + 48 = <<24+48=72>>72 muffins.\n#### 72"},
    {"question": "A library has 1,150 books. It buys 3 boxes of 28 books each. How many "
                 "books does it have now?",
     "answer": "The boxes hold 3 * 28 = <<3*28=84>>84 books.\n"
               "Now it has 1,150 + 84 = <<1150+84=1234>>1,234 books.\n#### 1,234"},
    {"question": "At noon it was 5 degrees. By midnight the temperature fell 8 degrees. "
                 "What was the temperature at midnight?",
     "answer": "It was 5 - 8 = <<5-8=-3>>-3 degrees at midnight.\n#### -3"},
    {"question": "Pens cost $1.25 each. Maria buys 6 pens. How much does she spend?",
     "answer": "She spends 6 * $1.25 = $<<6*1.25=7.5>>7.50.\n\n#### 7.50"},
]
ANSWERS = ["72", "1234", "-3", "7.5"]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def jsonl(tmp_path):
    return _write_jsonl(tmp_path / "test.jsonl", PROBLEMS)


@pytest.fixture
def parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "test-00000-of-00001.parquet"
    pd.DataFrame(PROBLEMS).to_parquet(path)
    return path


# --------------------------------------------------------------------------- parsing


def test_parse_solution():
    number, steps, trace = parse_solution(PROBLEMS[0]["answer"])
    assert number == "72"
    assert steps == ("In the afternoon he makes 24 * 2 = 48 muffins.",
                     "In all he makes 24 + 48 = 72 muffins.")
    assert trace == "\n".join(steps) + "\n#### 72"
    _, raw_steps, _ = parse_solution(PROBLEMS[0]["answer"], strip_calculator=False)
    assert raw_steps[0] == "In the afternoon he makes 24 * 2 = <<24*2=48>>48 muffins."


@pytest.mark.parametrize("answer, reason", [
    ("no final line", "no '#### <number>'"),
    ("steps\n#### seventy-two", "'seventy-two' after '####' is not a number"),
    ("steps\n####", "'' after '####' is not a number"),
])
def test_parse_solution_refuses(answer, reason):
    with pytest.raises(ValueError, match=reason):
        parse_solution(answer)


# --------------------------------------------------------------------------- files


def test_jsonl(jsonl):
    examples = load_gsm8k(jsonl)
    assert [e.answer for e in examples] == ANSWERS
    assert all(isinstance(e, Example) and e.split == "test" for e in examples)
    first = examples[0]
    assert first.prompt == PROMPT_TEMPLATE.format(question=PROBLEMS[0]["question"])
    assert first.prompt.startswith("A baker makes 24 muffins") and "####" in first.prompt
    assert first.steps == ("In the afternoon he makes 24 * 2 = 48 muffins.",
                           "In all he makes 24 + 48 = 72 muffins.")
    assert first.trace.endswith("72 muffins.\n#### 72")
    assert [len(e.steps) for e in examples] == [2, 2, 1, 1]  # blank lines dropped
    assert examples[3].trace == "She spends 6 * $1.25 = $7.50.\n#### 7.5"


def test_parquet_equals_jsonl(jsonl, parquet):
    assert load_gsm8k(parquet) == load_gsm8k(jsonl)


def test_json_array_and_json_lines(tmp_path, jsonl):
    array = tmp_path / "array.json"
    array.write_text(json.dumps(PROBLEMS, indent=2))
    lines = tmp_path / "lines.json"
    lines.write_text(jsonl.read_text())
    assert load_gsm8k(array) == load_gsm8k(lines) == load_gsm8k(jsonl)


def test_options(jsonl):
    examples = load_gsm8k(jsonl, split="train", limit=2, template="{question}")
    assert len(examples) == 2
    assert examples[0].prompt == PROBLEMS[0]["question"]
    assert {e.split for e in examples} == {"train"}
    assert load_gsm8k(jsonl, limit=0) == []
    with pytest.raises(ValueError, match="limit=-1"):
        load_gsm8k(jsonl, limit=-1)
    with pytest.raises(ValueError, match="template='Q:'.*question"):
        load_gsm8k(jsonl, template="Q:")


def test_folder_with_split_files(tmp_path, parquet):
    # Hugging Face's layout: <folder>/{main,socratic}/test-00000-of-00001.parquet
    folder = tmp_path / "gsm8k"
    for config in ("main", "socratic"):
        (folder / config).mkdir(parents=True)
    (folder / "socratic" / parquet.name).write_bytes(parquet.read_bytes())
    parquet.rename(folder / "main" / parquet.name)
    assert [e.answer for e in load_gsm8k(folder)] == ANSWERS
    with pytest.raises(FileNotFoundError, match="no file for split='train'"):
        load_gsm8k(folder, split="train")
    # GSM8K's own release: data/test.jsonl beside data/test_socratic.jsonl
    release = tmp_path / "grade_school_math" / "data"
    release.mkdir(parents=True)
    _write_jsonl(release / "test.jsonl", PROBLEMS[:2])
    _write_jsonl(release / "test_socratic.jsonl", PROBLEMS)
    assert len(load_gsm8k(release.parent)) == 2


def test_a_sharded_split_is_read_whole_in_shard_order(tmp_path, parquet):
    """``train-0000i-of-00003`` in any format the loader reads: every shard, by index (not
    by name: ``-<hex>`` suffixes of older uploads sort anywhere)."""
    pd = pytest.importorskip("pandas")
    data = tmp_path / "data"
    data.mkdir()
    rows = [PROBLEMS[:2], PROBLEMS[2:3], PROBLEMS[3:]]
    pd.DataFrame(rows[0]).to_parquet(data / "train-00000-of-00003-ff00.parquet")
    _write_jsonl(data / "train-00001-of-00003-0a.jsonl", rows[1])
    (data / "train-00002-of-00003.json").write_text(json.dumps(rows[2]))
    assert [e.answer for e in load_gsm8k(tmp_path, split="train")] == ANSWERS
    # the bad row of a later shard is named with that shard and its own row
    (data / "train-00002-of-00003.json").write_text(json.dumps([{"question": "Q?",
                                                                 "answer": "no number"}]))
    with pytest.raises(UsageError, match=re.escape(f"{data / 'train-00002-of-00003.json'} "
                                                   f"row 1: invalid GSM8K row")):
        load_gsm8k(tmp_path, split="train")


def test_shards_of_no_one_split_are_refused_by_name(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _write_jsonl(data / "train-00000-of-00002.jsonl", PROBLEMS[:2])
    _write_jsonl(data / "train-00001-of-00002.jsonl", PROBLEMS[2:])
    _write_jsonl(data / "train.jsonl", PROBLEMS)  # the whole split beside its shards
    with pytest.raises(FileNotFoundError, match="found 3 files .* for split='train'"):
        load_gsm8k(tmp_path, split="train")
    (data / "train.jsonl").unlink()
    _write_jsonl(data / "train-00002-of-00002.jsonl", PROBLEMS)  # a shard past the count
    with pytest.raises(FileNotFoundError, match="is shard 2 of a split of 2"):
        load_gsm8k(tmp_path, split="train")


def test_a_missing_shard_is_named_with_the_fix(tmp_path):
    from race.tasks.gsm8k import MissingShard

    data = tmp_path / "data"
    data.mkdir()
    for i in (0, 3):
        _write_jsonl(data / f"test-{i:05d}-of-00005.jsonl", PROBLEMS[i:i + 1])
    with pytest.raises(MissingShard) as raised:
        load_gsm8k(tmp_path)
    gone = [str(data / f"test-{i:05d}-of-00005.jsonl") for i in (1, 2, 4)]
    assert raised.value.missing == tuple(gone) and raised.value.total == 5
    assert str(raised.value) == (
        f"shards {', '.join(gone)} are missing (3 of the split's 5); a split is read whole: "
        f"put all 5 shards in that folder (for a dataset named by hub id, `race prefetch` "
        f"downloads them) and rerun")
    assert isinstance(raised.value, UsageError)


# --------------------------------------------------------------------------- bad input


def test_missing_file(tmp_path):
    missing = tmp_path / "nope" / "test.jsonl"
    expected = re.escape(str(missing)) + ".*no such file.*check the path"
    with pytest.raises(FileNotFoundError, match=expected):
        load_gsm8k(missing)


def test_unsupported_file_type(tmp_path):
    path = tmp_path / "test.csv"
    path.write_text("question,answer\n")
    with pytest.raises(ValueError, match="unsupported file type '.csv'"):
        load_gsm8k(path)


def _with_bad_rows(tmp_path):
    rows = [PROBLEMS[0],
            PROBLEMS[1],
            {"question": "No final answer line?", "answer": "Just steps.\nMore steps."},
            PROBLEMS[2],
            {"question": "Words for a number?", "answer": "Steps.\n#### twelve"},
            {"question": "Missing answer key"}]
    return _write_jsonl(tmp_path / "bad.jsonl", rows)


def test_bad_rows_raise_with_file_line_and_count(tmp_path):
    path = _with_bad_rows(tmp_path)
    with pytest.raises(ValueError) as error:
        load_gsm8k(path)
    message = str(error.value)
    assert f"{path}:3:" in message
    assert "no '#### <number>'" in message
    assert "3 invalid row(s)" in message
    assert "skip_invalid" not in message  # no config key accepts it
    assert "fix or delete those rows" in message


def test_skip_invalid_reports(tmp_path, caplog):
    path = _with_bad_rows(tmp_path)
    loaded = read_gsm8k(path, skip_invalid=True)
    assert [e.answer for e in loaded.examples] == ["72", "1234", "-3"]
    assert loaded.invalid_rows == (3, 5, 6)
    assert loaded.invalid_count == 3
    assert loaded.first_error.startswith(f"{path}:3: no '#### <number>'")
    with caplog.at_level(logging.WARNING, logger="race.tasks.gsm8k"):
        examples = load_gsm8k(path, skip_invalid=True)
    assert examples == loaded.examples
    assert "skipped 3 invalid GSM8K row(s)" in caplog.text and f"{path}:3" in caplog.text
    # a clean file reports nothing
    assert read_gsm8k(_write_jsonl(tmp_path / "ok.jsonl", PROBLEMS)).invalid_count == 0


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(PROBLEMS[0]) + "\n\n" + '{"question": "cut off' + "\n")
    for skip in (False, True):  # a corrupt file is never skipped silently
        with pytest.raises(ValueError, match=re.escape(f"{path}:3: malformed JSON")):
            load_gsm8k(path, skip_invalid=skip)


def test_bad_parquet_row_named(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "test.parquet"
    pd.DataFrame([PROBLEMS[0], {"question": "q", "answer": "no answer"}]).to_parquet(path)
    with pytest.raises(ValueError, match=re.escape(f"{path} row 2: invalid GSM8K row")):
        load_gsm8k(path)


# --------------------------------------------------------------------------- datasets


def test_dataset_name_goes_to_load_dataset(monkeypatch, uncached):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return list(PROBLEMS)

    monkeypatch.setitem(sys.modules, "datasets",
                        types.SimpleNamespace(load_dataset=load_dataset))
    examples = load_gsm8k("openai/gsm8k", split="train", limit=3)
    assert calls == [("openai/gsm8k", "main", "train")]
    assert [e.answer for e in examples] == ANSWERS[:3]
    assert {e.split for e in examples} == {"train"}


def test_dataset_bad_row_named(monkeypatch, uncached):
    fake = types.SimpleNamespace(load_dataset=lambda name, config, split: [
        PROBLEMS[0], {"question": "q", "answer": "none"}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(ValueError, match=r"dataset openai/gsm8k \(split test\) row 2"):
        load_gsm8k("openai/gsm8k")


def test_dataset_name_without_datasets_installed(monkeypatch, uncached):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(UsageError, match="source=openai/gsm8k: not in the Hugging Face cache "
                       r"\(the `datasets` library .* not installed\).*race prefetch"):
        load_gsm8k("openai/gsm8k")


def test_a_gsm8k_tasks_held_out_splits_score_a_repeated_question_once(tmp_path):
    from race.tasks import Gsm8kTask

    folder = tmp_path / "gsm"
    folder.mkdir()
    rows = [{"question": f"What is {i} plus 1?", "answer": f"{i}+1={i + 1}\n#### {i + 1}"}
            for i in range(20)]
    _write_jsonl(folder / "train.jsonl", rows)
    _write_jsonl(folder / "test.jsonl", rows[:5] + rows[:2])  # 7 rows, 5 problems
    task = Gsm8kTask(source=str(folder))
    assert len(task.rows("test")) == 5
    assert len(task.sample("test", 100)) == 5  # the evaluation's real n
