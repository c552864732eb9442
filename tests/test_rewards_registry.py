"""The reward registry, the rule reward and range checks; the tiny PRM on a short recipe."""

import math

import pytest

from race.rewards import build_reward, check_rewards
from race.rewards.rule import RuleReward
from race.rewards.tiny_prm import corrupt, prefix_labels, roc_auc
from race.tasks import Gsm8kTask
from race.tasks.arith import ArithTask, step_labels


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
