"""``race flops``' card of one cell names what a PRM scores: its step tags per trace (the
task's typical reasoning steps) and, apart, the tokens they and its input format add."""

import json

import pytest

from race import catalog, cli
from race.core import flops


def test_the_prm_card_on_gsm8k_prints_6_step_tags_per_trace(capsys):
    args = ["flops", "model=qwen2.5-1.5b", "reward=qwen2.5-math-prm-7b", "task=gsm8k"]
    assert cli.main(args) == 0
    card = capsys.readouterr().out
    # race/conf/task/gsm8k.yaml: steps_per_trace 6; race/conf/reward/qwen2.5-math-prm-7b.yaml: one
    # <extra_0> tag per step and 40 tokens of input format: 40 + 6 x 1 = 46 tokens scored
    assert "6 step tags/trace (+46 tokens/trace: input format and tags)" in card
    assert "46 step tags" not in card


def test_the_prm_feedback_flops_count_46_extra_tokens_per_trace(capsys):
    """The fix renames a quantity, not a FLOP: the feedback phase still scores each of
    the 64 traces (128 prompt + 256 completion tokens) plus 46 tokens."""
    entry = catalog.load_entry("reward", "qwen2.5-math-prm-7b")
    reward = catalog.reward_shape(entry, steps=6)
    assert (reward.steps_per_trace, reward.extra_tokens_per_trace) == (6, 46)
    worst = catalog.reward_shape(entry)  # the budget's worst case: max_steps tags
    assert (worst.steps_per_trace, worst.extra_tokens_per_trace) == (32, 72)
    rule = catalog.reward_shape(catalog.load_entry("reward", "rule"), steps=6)
    assert (rule.steps_per_trace, rule.extra_tokens_per_trace) == (0, 0)

    assert cli.main(["flops", "model=qwen2.5-1.5b", "reward=qwen2.5-math-prm-7b",
                     "task=gsm8k", "format=json"]) == 0
    card = json.loads(capsys.readouterr().out)["cards"]["model"]
    expected = flops.reward_flops(reward, [128 + 256] * 64, [46] * 64)
    assert card["per_step_flops"]["feedback"] == pytest.approx(expected, rel=0)
