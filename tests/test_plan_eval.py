"""The plan's eval estimate (issue 25 item 3): evaluations x problems x one greedy
generation per problem, the warning against ``selection.pilot_budget``, and its validation."""

import subprocess
import sys

import pytest

from race import cli
from race.core import flops
from race.core.fmt import fmt_flops
from race.core.specs import LoraShape, ModelShape, RewardShape
from race.pilot.budget import checkpoints_after, planned_evaluations
from race.report.plan import eval_budget_warning, plan_summary
from race.run.grid import plan_grid

# tests/test_flops.py's shape: 2304 body FLOPs per token, 160 per head output, 64 per pair
G = ModelShape(name="g", hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
               num_kv_heads=1, head_dim=4, vocab_size=10, tied_embeddings=True,
               tokenizer="tok")
RULE = RewardShape(name="rule", kind="rule")
# one cell: every axis of the default grid fixed, two targets, two checkpoints
TINY = ["selection.policy=flat", "model=tiny-s", "reward=rule", "grid.group_size=4",
        "grid.update_epochs=1", "pilot.eval_targets=[val,test]", "pilot.select_examples=10",
        "pilot.eval_examples=3", "pilot.checkpoints=[0.5,1.0]"]


def test_eval_flops_golden():
    # prompt 3, cap 4: 6 positions through the body, 4 head outputs, 1+...+6 = 21 pairs
    one = 2304 * 6 + 160 * 4 + 64 * 21
    assert one == 15808
    assert flops.eval_flops(G, RULE, problems=5, prompt_tokens=3, max_new_tokens=4) == 5 * one


def test_a_continued_cell_evaluates_only_its_checkpoints_above_the_rung_below():
    # rung F/24 continued from F/48: 0.25 and 0.5 of its budget were the cell below's
    assert checkpoints_after([0.25, 0.5, 0.75, 1.0], 2.0, 1.0) == [0.75, 1.0]
    assert planned_evaluations([0.25, 0.5, 0.75, 1.0], 2.0, 1.0) == 2
    assert planned_evaluations([0.25, 0.5, 0.75, 1.0], 2.0) == 5  # fresh: checkpoint 0 too


def test_plan_eval_of_a_tiny_plan_equals_the_hand_count():
    plan = plan_grid(TINY)
    (cell,) = plan.runnable
    spec = cell.spec
    per_sequence = flops.generate_flops(spec.policy, [plan.base.task.prompt_tokens],
                                        [spec.max_new_tokens],
                                        lora=LoraShape(spec.lora_rank, spec.lora_targets))
    # checkpoints 0, 0.5, 1.0 x (val on max(10, 3) + test on 3) problems, a rule reward
    expected = 3 * (10 + 3) * per_sequence
    assert spec.eval_targets == ("val", "test") and spec.max_new_tokens == 40
    assert cell.eval_flops == plan.eval_flops == expected
    assert plan.share_with_eval == (plan.pilot_flops + expected) / plan.budget_flops
    assert (f"eval ~{fmt_flops(expected)} ({expected / plan.budget_flops:.1%}), "
            f"{plan.share_with_eval:.1%} with eval") in plan_summary(plan)


def test_default_ladder_counts_every_rung_with_its_checkpoints():
    plan = plan_grid([])
    cells = plan.runnable
    each = sum(c.eval_each_flops for c in cells) / len(cells)  # every target
    select = sum(c.eval_select_flops for c in cells) / len(cells)  # val alone
    assert 0 < select < each
    # one warm start per (size, reward), scored by the first cell of each on every target
    scorers = [c for c in cells if c.spec.score_start]
    assert sorted((c.spec.model, c.spec.reward_name) for c in scorers) == sorted(
        {(c.spec.model, c.spec.reward_name) for c in cells})
    starts = sum(c.eval_each_flops for c in scorers)
    last = plan.budget_flops * plan.ladder.rungs[-1]
    assert all(c.spec.report_from_flops == pytest.approx(last) for c in cells)
    # rung ends only: 16 + 8 + 4 cells on val alone below the last rung, its 2 on every target
    assert all(c.spec.checkpoints == (1.0,) for c in cells)
    assert plan.eval_flops == pytest.approx(starts + (16 + 8 + 4) * select + 2 * each)
    within = plan_grid(["selection.rung_checkpoints=[0.25,0.5,0.75,1.0]",
                        "selection.pilot_budget=100"])
    # 16 fresh cells x 4 checkpoints, then 8 + 4 continued cells x 2 (0.75, 1.0 of a rung
    # twice the one below), all on val; the last rung's 2 at 0.75 on val, at 1.0 on all
    assert within.eval_flops == pytest.approx(
        starts + 16 * 4 * select + (8 + 4) * 2 * select + 2 * (select + each))


def test_default_ladder_shrinks_its_rungs_until_charged_and_eval_fit_the_pilot_budget():
    plan = plan_grid([])
    loose = plan_grid(["selection.pilot_budget=100"])
    assert loose.ladder.scaled == 1.0 and loose.share_of_full_run == pytest.approx(5 / 6)
    assert loose.share_with_eval > 1.0  # the default rungs and their eval exceed one run
    # the same evaluations (eval does not scale with a rung), fewer charged FLOPs
    assert plan.eval_flops == pytest.approx(loose.eval_flops)
    assert plan.share_with_eval == pytest.approx(1.0)
    assert plan.ladder.scaled == pytest.approx(
        (1.0 - plan.eval_flops / plan.budget_flops) / (5 / 6))
    assert plan.ladder.rungs[0] == pytest.approx(plan.ladder.scaled / 48)
    assert "rungs shrunk x" in plan_summary(plan) and "selection.pilot_budget=1" in \
        plan_summary(plan)
    # a pilot budget the eval alone exceeds: the rungs stay, and the plan warns
    starved = plan_grid(["selection.pilot_budget=0.1"])
    assert starved.ladder.scaled == 1.0
    assert eval_budget_warning(starved).startswith(
        "warning: these pilots with their evaluation cost")


def test_plan_warns_beyond_pilot_budget_naming_the_key(capsys):
    assert cli.main(["plan", *TINY, "selection.pilot_budget=0.001"]) == 0
    err = capsys.readouterr().err
    share = plan_grid(TINY).share_with_eval
    assert share > 0.001
    assert (f"warning: these pilots with their evaluation cost {share:.2f} full-budget runs "
            f"> selection.pilot_budget=0.001") in err
    assert cli.main(["plan", *TINY, "selection.pilot_budget=100"]) == 0
    assert "selection.pilot_budget" not in capsys.readouterr().err


def test_pilot_budget_zero_is_bad_input():
    out = subprocess.run([sys.executable, "-m", "race.cli", "plan", "selection.pilot_budget=0"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "selection.pilot_budget=0.0: must be > 0" in lines[0], lines[0]
