"""The reward registry, the rule reward and range checks; the tiny PRM on a short recipe."""

import math

import pytest

from race.rewards import build_reward, check_rewards
from race.rewards.rule import RuleReward
from race.tasks import Gsm8kTask
from race.tasks.arith import ArithTask, step_labels
from race.warmstart.prm import corrupt, prefix_labels, roc_auc


def test_rule_reward_arith_is_exact_and_free():
    task = ArithTask()
    reward = build_reward({"name": "rule", "kind": "rule"}, task)
    ex = task.example([7, 5, 3], ["+", "-"], "test")
    got = reward([ex.prompt] * 3, [ex.trace, "7+5=12\n12-3=8\n#### 8", ""],
                 answer=[ex.answer] * 3)
    assert got == [1.0, 0.0, 0.0]
    flops = reward.pop_flops()
    assert flops.model == flops.executed == 0


def test_rule_reward_gsm8k_uses_math_verify():
    reward = RuleReward("rule", Gsm8kTask(source="unused.jsonl"))
    got = reward(["q"] * 3, ["so #### 1,234", "\\boxed{72}", "#### 71"],
                 answer=["1234", "72", "72"])
    assert got == [1.0, 1.0, 0.0]


def test_rule_reward_needs_one_answer_per_completion():
    reward = RuleReward("rule", ArithTask())
    with pytest.raises(ValueError, match="one answer per completion"):
        reward(["p"], ["a", "b"], answer=["1"])


class _Fixed:
    name, kind, value_range = "fixed", "prm", (0.0, 1.0)


@pytest.mark.parametrize("value", [math.nan, 1.5, -0.1])
def test_check_rewards_names_the_completion(value):
    with pytest.raises(ValueError, match="the bad one"):
        check_rewards(_Fixed(), ["fine", "the bad one"], [0.5, value])


def test_unknown_reward_kind():
    with pytest.raises(KeyError, match="valid kinds"):
        build_reward({"name": "x", "kind": "magic"}, ArithTask())


def test_corruptions_are_labelled_like_math_shepherd():
    import random

    task, rng = ArithTask(), random.Random(0)
    for ex in task.sample("train", 200):
        trace, labels = corrupt(task, ex, rng)
        assert labels == step_labels(ex.steps, trace)
        assert 0 in labels and labels == sorted(labels, reverse=True)
        dense = prefix_labels(ex.trace, trace)
        ends = [i for i, ch in enumerate("\n".join(trace.split("\n")) + "\n") if ch == "\n"]
        assert [dense[i] for i in ends] == labels


def test_roc_auc_by_hand():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert roc_auc([0.5, 0.5], [0, 1]) == 0.5
    with pytest.raises(ValueError):
        roc_auc([0.1, 0.2], [1, 1])


# --------------------------------------------------------------- the verifier family
# One problem, 7+5-3 = 9, and four hand-made traces: fully right; a right answer after a
# wrong step (the step claims 7+5=11); a right answer in a malformed trace; wrong throughout.
_TASK = ArithTask()
_EX = _TASK.example([7, 5, 3], ["+", "-"], "test")
_RIGHT = "7+5=12\n12-3=9\n#### 9"
_WRONG_STEP = "7+5=11\n12-3=9\n#### 9"
_MALFORMED = "seven plus five\n#### 9"
_WRONG = "7+5=13\n13-3=10\n#### 10"
_TRACES = [_RIGHT, _WRONG_STEP, _MALFORMED, _WRONG]


def _score(reward_name: str) -> list[float]:
    from race import catalog

    reward = build_reward(catalog.load_entry("reward", reward_name), _TASK)
    got = reward([_EX.prompt] * 4, _TRACES, answer=[_EX.answer] * 4)
    assert reward.pop_flops().model == 0  # a verifier costs no FLOPs
    return got


def test_rule_reward_pays_every_right_answer():
    assert _EX.trace == _RIGHT
    assert _score("rule") == [1.0, 1.0, 1.0, 0.0]


def test_structured_reward_pays_format_and_answer():
    # 0.8 x right answer + 0.2 x well-formed: the malformed right answer loses the
    # format's share; a well-formed wrong trace keeps it
    assert _score("structured") == pytest.approx([1.0, 1.0, 0.8, 0.2])


def test_dense_reward_pays_each_correct_step_before_the_first_wrong_one():
    # reference lines: 7+5=12, 12-3=9, #### 9 (three); the wrong first step earns nothing
    # after it, even though the final answer is right
    assert _score("dense") == pytest.approx([1.0, 0.0, 0.0, 0.0])
    reward = build_reward({"name": "dense", "kind": "rule", "check": "steps"}, _TASK)
    half = reward([_EX.prompt], ["7+5=12\n12-3=8\n#### 8"], answer=[_EX.answer])
    assert half == pytest.approx([1 / 3])


def test_well_formed_and_reference_steps():
    assert _TASK.well_formed(_RIGHT) and _TASK.well_formed(_WRONG)
    assert not _TASK.well_formed(_MALFORMED) and not _TASK.well_formed("#### 9")
    assert _TASK.reference_steps(_EX.prompt) == _EX.steps
