"""The task=math loader (race.tasks.math) on files written in the public layouts of
MATH-500, Polaris-53K and GSM8K's hub snapshot; no dataset hub."""

import json
import subprocess
import sys
import types

import pytest

from race.errors import UsageError, WeightsMissing
from race.tasks.math import MATH_SYSTEM_PROMPT, MathTask, _bucket, eval_entries, read_math

# MATH-500's fields (HuggingFaceH4/MATH-500, split test): realistic LaTeX answers.
ANSWERS = [r"\left( 3, \frac{\pi}{2} \right)", r"3\sqrt{2}", "2x+1", r"\frac{14}{3}",
           "[-2, 7]", r"10\%", "1,000", r"\text{(C)}", r"\frac{\sqrt{3}}{2}"]
SUBJECTS = ["Precalculus", "Geometry", "Algebra", "Prealgebra", "Intermediate Algebra",
            "Prealgebra", "Number Theory", "Geometry", "Precalculus"]


def math500_rows():
    return [{"problem": f"Problem {i}: find the value described in case {i}.",
             "solution": f"Working through case {i} step by step gives "
                         f"$\\boxed{{{answer}}}$.",
             "answer": answer, "subject": SUBJECTS[i], "level": 1 + i % 5,
             "unique_id": f"test/{SUBJECTS[i].lower().replace(' ', '_')}/{100 + i}.json"}
            for i, answer in enumerate(ANSWERS)]


def polaris_rows(n=80):
    """Polaris-53K's fields: problem, answer, difficulty (a pass rate string)."""
    return [{"problem": f"Let $f(x) = {i}x + {i + 1}$. Compute $f({i % 7})$.",
             "answer": str(i * (i % 7) + i + 1), "difficulty": f"{i % 9}/8"}
            for i in range(n)]


def gsm8k_rows(n, offset, style="main"):
    rows = []
    for i in range(offset, offset + n):
        step = (f"How many apples? ** He buys {i} * 2 = <<{i}*2={2 * i}>>{2 * i} apples."
                if style == "socratic" else f"He buys {i} * 2 = <<{i}*2={2 * i}>>{2 * i}.")
        rows.append({"question": f"Tom has {i} bags of 2 apples each. How many apples?",
                     "answer": f"{step}\n#### {2 * i:,}"})
    return rows


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_parquet(path, rows):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.fixture
def gsm8k_snapshot(tmp_path):
    """openai/gsm8k as a hub snapshot lays it out: main/ and socratic/ parquet files."""
    root = tmp_path / "gsm8k"
    for style in ("main", "socratic"):
        write_parquet(root / style / "train-00000-of-00001.parquet", gsm8k_rows(60, 0, style))
        write_parquet(root / style / "test-00000-of-00001.parquet",
                      gsm8k_rows(5, 615, style))
    return root


# ------------------------------------------------------------------ public formats


def test_math500_jsonl_and_parquet_snapshot(tmp_path):
    jsonl = write_jsonl(tmp_path / "m500" / "test.jsonl", math500_rows())
    snapshot = tmp_path / "snap"
    write_parquet(snapshot / "data" / "test-00000-of-00001.parquet", math500_rows())
    for source in (jsonl, jsonl.parent, snapshot):
        rows = read_math(source, "test")
        assert [ex.answer for ex in rows] == ANSWERS  # LaTeX kept whole, source order
        first = rows[0]
        assert first.prompt == first.question == math500_rows()[0]["problem"]
        assert first.trace == math500_rows()[0]["solution"] and first.split == "test"
    assert [ex.answer for ex in read_math(jsonl, limit=2)] == ANSWERS[:2]


def test_answer_from_last_boxed_of_the_solution(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "answer"} for row in math500_rows()]
    rows[0]["solution"] = r"First $\boxed{1}$ is wrong; then $\boxed{\frac{\sqrt{3}}{2}}$."
    read = read_math(write_jsonl(tmp_path / "test.jsonl", rows), "test")
    assert read[0].answer == r"\frac{\sqrt{3}}{2}"  # the last box, nested braces whole
    assert [ex.answer for ex in read[1:6]] == ANSWERS[1:6]
    dollars = [{"problem": "p", "answer": r"$\frac{14}{3}$"}, {"problem": "q", "answer": ""}]
    dollars[1]["solution"] = r"So $x = \boxed{2x+1}$."
    read = read_math(write_jsonl(tmp_path / "d.jsonl", dollars))
    assert [ex.answer for ex in read] == [r"\frac{14}{3}", "2x+1"]


def test_polaris_file_splits_are_disjoint_and_cover_every_row(tmp_path):
    path = write_jsonl(tmp_path / "polaris.jsonl", polaris_rows())
    task = MathTask(source=str(path))
    assert task.targets() == ("val", "test")
    assert task.system_prompt == MATH_SYSTEM_PROMPT
    splits = {s: [ex.problem for ex in task.rows(s)] for s in ("train", "val", "test")}
    assert all(splits.values()) and sum(map(len, splits.values())) == 80
    assert set().union(*splits.values()) == {row["problem"] for row in polaris_rows()}
    assert {ex.split for ex in task.rows("val")} == {"val"}
    assert task.dropped_overlap() == 0
    assert task.verify(r"so \boxed{7}", "7") and not task.verify("7", "7")


def test_gsm8k_snapshot_test_file_and_val_cut_from_train(gsm8k_snapshot):
    test = read_math(gsm8k_snapshot, "test")  # subset main by default
    assert len(test) == 5 and test[0].answer == "1230"
    assert any(ex.answer == "1234" for ex in test)  # "#### 1,234"
    assert test[0].steps == ("He buys 615 * 2 = 1230.",)
    assert test[0].trace.endswith("#### 1230")
    socratic = read_math(gsm8k_snapshot, "test", subset="socratic")
    assert socratic[0].steps[0].startswith("How many apples? **")
    task = MathTask(source=str(gsm8k_snapshot))
    assert [ex.problem for ex in task.rows("test")] == [ex.problem for ex in test]
    train, val = (set(ex.problem for ex in task.rows(s)) for s in ("train", "val"))
    assert val and not train & val
    assert train | val == {row["question"] for row in gsm8k_rows(60, 0)}


def test_folder_of_configs_without_main_names_them(tmp_path):
    for config in ("algebra", "geometry"):
        write_jsonl(tmp_path / config / "test.jsonl", math500_rows()[:2])
    with pytest.raises(UsageError, match=r"task.subset.*algebra.*geometry"):
        read_math(tmp_path, "test")
    assert len(read_math(tmp_path, "test", subset="geometry")) == 2
    with pytest.raises(UsageError, match="no such subfolder"):
        read_math(tmp_path, "test", subset="main")


# ------------------------------------------------------------------ evaluation targets


def test_eval_targets_beside_and_without_a_training_source(tmp_path, gsm8k_snapshot):
    polaris = write_jsonl(tmp_path / "polaris.jsonl", polaris_rows())
    math500 = write_jsonl(tmp_path / "test.jsonl", math500_rows())
    targets = json.dumps({"gsm8k": str(gsm8k_snapshot), "math500": str(math500)})
    task = MathTask(source=str(polaris), eval=targets)
    assert task.targets() == ("val", "test", "gsm8k", "math500")
    assert len(task.rows("gsm8k")) == 5 and len(task.rows("math500")) == 9
    assert {ex.split for ex in task.rows("math500")} == {"math500"}
    only = MathTask(eval=targets)
    assert only.targets() == ("gsm8k", "math500")
    assert only.rows("math500")[0].answer == ANSWERS[0]
    for split in ("train", "val"):
        with pytest.raises(UsageError, match="task.source"):
            only.rows(split)
    with pytest.raises(UsageError, match=r"'gsm8k', 'math500'"):
        only.rows("ood")


def test_eval_entries_parse_and_validate():
    entries = eval_entries(json.dumps({"b": "x.jsonl", "a": {"source": "y", "split": "dev"}}))
    assert list(entries) == ["b", "a"]  # given order
    assert entries["b"] == {"source": "x.jsonl", "subset": "", "split": "test",
                            "problem_key": "", "answer_key": "", "solution_key": "solution"}
    assert entries["a"]["split"] == "dev" and eval_entries("") == {}
    assert list(eval_entries('{"val": "v.jsonl"}', has_source=False)) == ["val"]
    for bad, match in [('{"val": "v"}', "task.eval.val"), ('{"train": "t"}', "task.eval.train"),
                       ('{"a b": "t"}', "task.eval.a b"), ('{"a": {"src": "t"}}', "src"),
                       ('{"a": ""}', "non-empty source"), ("[1]", "task.eval"),
                       ("{x", "not JSON")]:
        with pytest.raises(UsageError, match=match):
            eval_entries(bad)


def test_separate_val_and_test_sources_are_read_whole(tmp_path):
    polaris = write_jsonl(tmp_path / "polaris.jsonl", polaris_rows())
    math500 = write_jsonl(tmp_path / "m500" / "test.jsonl", math500_rows())
    task = MathTask(source=str(polaris), val_source=str(math500),
                    test_source=str(math500.parent))
    assert len(task.rows("train")) == 80 and len(task.rows("test")) == 9


# ------------------------------------------------------------------ bad rows, fields


def test_bad_rows_are_named_with_line_and_row(tmp_path):
    rows = math500_rows()[:5]
    del rows[2]["problem"]
    rows[4]["answer"] = r"\frac{"
    path = write_jsonl(tmp_path / "test.jsonl", rows)
    with pytest.raises(UsageError, match=rf"{path}:3: bad row \(no problem.*2 bad row\(s\)"
                                         r".*task.problem_key / task.answer_key"):
        read_math(path)
    rows = math500_rows()[:3]
    rows[1]["answer"] = r"\frac{"
    parquet = write_parquet(tmp_path / "snap" / "data" / "test-00000-of-00001.parquet", rows)
    with pytest.raises(UsageError, match=r"row 2: bad row \(answer '\\\\frac\{' cannot be"):
        read_math(parquet)
    with pytest.raises(UsageError, match=r"task.eval.m=.*row 2"):
        MathTask(eval=json.dumps({"m": str(tmp_path / "snap")})).rows("m")
    no_answer = write_jsonl(tmp_path / "n.jsonl", [{"problem": "p", "solution": "no box"},
                                                   {"problem": "q", "level": 3}])
    with pytest.raises(UsageError, match=r"n.jsonl:1: .*no answer.*closed .*2 bad row"):
        read_math(no_answer)
    with pytest.raises(UsageError, match="no such file"):
        read_math(tmp_path / "missing.jsonl")


def test_problem_and_answer_keys(tmp_path):
    rows = [{"prompt": "What is 7 * 6?", "final": "42", "id": 1},
            {"prompt": "Solve $x^2 = 18$, $x > 0$.", "final": r"3\sqrt{2}", "id": 2}]
    path = write_jsonl(tmp_path / "x.jsonl", rows)
    read = read_math(path, problem_key="prompt", answer_key="final")
    assert [(ex.problem, ex.answer) for ex in read] == [(r["prompt"], r["final"]) for r in rows]
    with pytest.raises(UsageError, match=r"no field 'answer_text' \(the row has fields "
                                         r"\['prompt', 'final', 'id'\]\)"):
        read_math(path, problem_key="prompt", answer_key="answer_text")
    with pytest.raises(UsageError, match=r"no problem .*'problem or question'"):
        read_math(path)


def test_dataset_name_goes_to_load_dataset(monkeypatch, uncached):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return math500_rows()[:2]

    monkeypatch.setitem(sys.modules, "datasets",
                        types.SimpleNamespace(load_dataset=load_dataset))
    assert len(read_math("HuggingFaceH4/MATH-500", "test")) == 2
    read_math("openai/gsm8k", "test", subset="main")
    assert calls == [("HuggingFaceH4/MATH-500", None, "test"), ("openai/gsm8k", "main", "test")]
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(WeightsMissing, match=r"source=HuggingFaceH4/MATH-500: not in the "
                       r"Hugging Face cache \(the `datasets` library that would download it "
                       r"is not installed\).*run `race prefetch`"):
        read_math("HuggingFaceH4/MATH-500", "test")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = MathTask(source="HuggingFaceH4/MATH-500")
    with pytest.raises(WeightsMissing, match=r"^task.source=HuggingFaceH4/MATH-500: not in "
                                             r"the Hugging Face cache \(HF_HUB_OFFLINE=1\)"):
        task.rows("test")


# ------------------------------------------------------------------ sampling, overlap


def test_eval_sample_never_repeats_and_train_cycles(tmp_path):
    math500 = write_jsonl(tmp_path / "test.jsonl", math500_rows())
    polaris = write_jsonl(tmp_path / "polaris.jsonl", polaris_rows(20))
    task = MathTask(source=str(polaris), eval=json.dumps({"math500": str(math500)}))
    drawn = task.sample("math500", 200, seed=3)
    assert len(drawn) == 9 and len({ex.problem for ex in drawn}) == 9
    assert [ex.problem for ex in task.sample("math500", 4, seed=3)] == \
        [ex.problem for ex in drawn[:4]]
    train = task.rows("train")
    cycled = task.sample("train", 3 * len(train) + 1, seed=0)
    assert len(cycled) == 3 * len(train) + 1
    assert cycled[:len(train)] == cycled[len(train):2 * len(train)]
    assert {ex.problem for ex in cycled} == {ex.problem for ex in train}
    assert task.sample("train", 5, seed=1) != task.sample("train", 5, seed=2)


def test_training_problems_in_an_eval_target_are_dropped(tmp_path):
    shared = polaris_rows(60)
    target_rows = [dict(shared[i], problem="  " + shared[i]["problem"].replace(" ", "  "))
                   for i in (2, 5, 11)]  # the same problems, other whitespace
    target = write_jsonl(tmp_path / "target.jsonl", target_rows)
    path = write_jsonl(tmp_path / "polaris.jsonl", shared)
    plain = MathTask(source=str(path))
    task = MathTask(source=str(path), eval=json.dumps({"aime": str(target)}))
    in_train = sum(ex.problem in {shared[i]["problem"] for i in (2, 5, 11)}
                   for ex in plain.rows("train"))
    assert in_train and task.dropped_overlap() == in_train
    assert len(task.rows("train")) == len(plain.rows("train")) - in_train
    assert not {ex.problem for ex in task.rows("train")} & {shared[i]["problem"]
                                                           for i in (2, 5, 11)}


def test_a_source_wholly_inside_a_target_names_the_overlap_and_the_target(tmp_path):
    rows = polaris_rows(40)
    source = write_jsonl(tmp_path / "polaris.jsonl", rows)
    target = write_jsonl(tmp_path / "aime.jsonl", rows)  # the same problems
    n_train = len(MathTask(source=str(source)).rows("train"))
    task = MathTask(source=str(source), eval=json.dumps({"aime": str(target)}))
    with pytest.raises(UsageError) as raised:
        task.rows("train")
    assert str(raised.value) == (
        f"task.source={source}: all {n_train} training problems also appear in evaluation "
        f"target aime (task.eval.aime={target}) and were dropped (a model is not scored on "
        f"problems it trained on); give a training source that differs from the targets")
    assert "hash cut" not in str(raised.value)
    # the source's own test split, named as such, when it is what overlaps
    folder = tmp_path / "folder"
    write_jsonl(folder / "train.jsonl", rows[:30])
    write_jsonl(folder / "test.jsonl", rows[:30])
    with pytest.raises(UsageError, match=rf"all \d+ training problems also appear in "
                                         rf"evaluation target test \(task.source={folder}, "
                                         rf"split test\) and were dropped"):
        MathTask(source=str(folder)).rows("train")


def test_a_target_with_repeated_problems_counts_and_scores_each_once(tmp_path, caplog):
    """A GSM8K train parquet of 40 rows and 38 problems as a target: 38 held, 38 scored,
    the first row of each kept (a repeat with other whitespace is the same problem)."""
    rows = gsm8k_rows(38, 0)
    repeats = [dict(rows[3]), dict(rows[20], question=rows[20]["question"].replace(" ", "  "))]
    target = write_parquet(tmp_path / "gsmtrain.parquet", rows[:25] + repeats + rows[25:])
    polaris = write_jsonl(tmp_path / "polaris.jsonl", polaris_rows())
    setting = {"source": str(polaris), "eval": json.dumps({"gsmtrain": str(target)})}
    task = MathTask(**setting)
    with caplog.at_level("WARNING", logger="race.tasks.math"):
        held = task.rows("gsmtrain")
        MathTask(**setting).rows("gsmtrain")  # the same setting opened again: said once
    assert [ex.problem for ex in held] == [r["question"] for r in rows]
    drawn = task.sample("gsmtrain", 100, seed=0)
    assert len(drawn) == 38 and len({ex.problem for ex in drawn}) == 38
    notes = [r.getMessage() for r in caplog.records if "repeated" in r.getMessage()]
    assert notes == ["task math: dropped 2 repeated problem(s) from gsmtrain, which scores "
                     "each of its 38 problems once"]
    assert len(task.rows("train")) == len(MathTask(source=str(polaris)).rows("train"))


def test_race_plan_counts_unique_problems_and_says_each_drop_once(tmp_path):
    """`race plan` opens the task for its checks and again for its counts: the counts are
    of unique problems and each drop is printed once."""
    rows = polaris_rows(60)
    source = write_jsonl(tmp_path / "polaris.jsonl", rows)
    target = write_jsonl(tmp_path / "aime.jsonl", rows[:3] + rows[:2])  # 5 rows, 3 problems
    out = subprocess.run([sys.executable, "-m", "race.cli", "plan", "task=math",
                          f"task.source={source}", f"task.eval.aime={target}",
                          "grid.max_new_tokens=64"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    in_train = len([r for r in rows[:3] if _bucket(r["problem"]) == "train"])
    assert out.stderr.count(f"task math: dropped {in_train} training problem(s) also in "
                            f"aime\n") == 1, out.stderr
    assert out.stderr.count("task math: dropped 2 repeated problem(s) from aime, which "
                            "scores each of its 3 problems once\n") == 1, out.stderr
    assert ", aime 3 (all it holds; " in out.stdout
