"""The embedded task: deterministic, disjoint splits, checkable steps, exact verifier."""

import pytest

from race.tasks import build_task
from race.tasks.arith import ArithTask, final_answer, parse_chain, split_lines, step_labels


def test_sample_is_deterministic_per_seed():
    task = ArithTask()
    assert task.sample("train", 20, seed=3) == task.sample("train", 20, seed=3)
    assert task.sample("train", 20, seed=3) != task.sample("train", 20, seed=4)


def test_trace_steps_are_correct_arithmetic():
    for ex in ArithTask(digits=2).sample("train", 50):
        total = None
        for line in ex.steps[:-1]:
            left, result = line.split("=")
            sign = "+" if "+" in left else "-"
            a, b = (int(x) for x in left.split(sign))
            assert total is None or a == total
            assert int(result) == (a + b if sign == "+" else a - b)
            total = int(result)
        assert ex.steps[-1] == f"#### {total}" == f"#### {ex.answer}"
        assert ex.trace == "\n".join(ex.steps)
        assert ex.prompt.endswith("=?\n")


def test_splits_are_disjoint_and_ood_is_harder():
    task = ArithTask()
    train = {ex.prompt for ex in task.sample("train", 2000)}
    test = {ex.prompt for ex in task.sample("test", 300)}
    assert not train & test
    ops = lambda ex: len(ex.steps) - 1  # noqa: E731
    assert max(ops(ex) for ex in task.sample("test", 200)) <= task.max_ops
    ood = task.sample("ood", 500)
    assert {ops(ex) for ex in ood} == {task.min_ops, task.max_ops}  # 0: as training
    minus = lambda xs: sum(ex.prompt.count("-") for ex in xs) / sum(map(ops, xs))  # noqa: E731
    assert minus(ood) > minus(task.sample("val", 500)) + 0.15  # every subtraction it can
    longer = ArithTask(ood_min_ops=4, ood_max_ops=4, ood_minus_share=0.5)
    assert {ops(ex) for ex in longer.sample("ood", 100)} == {4}


def test_ood_minus_share_subtracts_wherever_the_total_allows():
    for ex in ArithTask(ood_minus_share=1.0).sample("ood", 300):
        numbers, signs = parse_chain(ex.prompt)
        total = numbers[0]
        for sign, value in zip(signs, numbers[1:]):
            assert sign == ("-" if total >= value else "+")
            total = total - value if sign == "-" else total + value


def test_difficulty_knob_changes_operands():
    small = ArithTask(digits=1).sample("train", 200)
    big = ArithTask(digits=3).sample("train", 200)
    assert max(len(ex.prompt) for ex in big) > max(len(ex.prompt) for ex in small)


def test_verify_and_step_labels():
    task = ArithTask()
    ex = task.example([7, 5, 3], ["+", "-"], "test")
    assert ex.trace == "7+5=12\n12-3=9\n#### 9"
    assert task.verify(ex.trace, ex.answer)
    assert not task.verify("7+5=12\n12-3=8\n#### 8", ex.answer)
    assert not task.verify("no answer", ex.answer)
    assert final_answer("x\n#### 42") == "42"
    assert split_lines(" a\n\nb \n") == ["a", "b"]
    assert step_labels(ex.steps, ex.trace) == [1, 1, 1]
    assert step_labels(ex.steps, "7+5=13\n13-3=10\n#### 10") == [0, 0, 0]
    assert step_labels(ex.steps, "7+5=12\n12-3=8\n#### 8") == [1, 0, 0]
    assert step_labels(ex.steps, "7+5=12\n12-3=9\n#### 9\nextra") == [1, 1, 1, 0]


@pytest.mark.parametrize("kwargs, key", [({"digits": 0}, "task.digits"),
                                         ({"min_ops": 3, "max_ops": 2}, "task.min_ops"),
                                         ({"ood_min_ops": 3, "ood_max_ops": 2},
                                          "task.ood_min_ops"),
                                         ({"ood_minus_share": 1.5}, "task.ood_minus_share"),
                                         ({"ood_minus_share": 0.5}, "task.ood_minus_share")])
def test_bad_knobs(kwargs, key):
    with pytest.raises(ValueError, match=key):
        ArithTask(**kwargs)


def test_task_registry():
    assert isinstance(build_task({"name": "arith", "digits": 2}), ArithTask)
    with pytest.raises(KeyError, match="did you mean task=arith"):
        build_task({"name": "arth"})
