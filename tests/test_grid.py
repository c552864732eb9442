"""Grid expansion and the budget solver: axes from conf and the command line, refusals,
regime labels, and a plan that never loads torch or weights."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from race.config import EMBEDDED_BUDGET, compose_config, split_overrides, to_specs
from race.core import flops
from race.core.regime import regime_label
from race.report.plan import plan_summary, plan_table
from race.run.grid import plan_grid

THRESHOLDS = SimpleNamespace(feedback_heavy=0.15, learning_heavy=0.8, search_heavy=0.4)


def test_split_overrides_separates_sweep_axes():
    fixed, axes = split_overrides(["model=tiny-s,tiny-m", "budget=1e15", "grid.lr=1e-3",
                                   "grid.group_size=range(2,8,2)"])
    assert fixed == ["budget=1e15", "grid.lr=1e-3"]
    assert axes == {"model": ["tiny-s", "tiny-m"], "grid.group_size": ["2", "4", "6"]}


def test_default_grid_is_at_least_two_by_two_by_two_by_two():
    plan = plan_grid([])
    axes = dict(plan.axes)
    for key in ("model", "grid.group_size", "grid.update_epochs", "reward"):
        assert len(axes[key]) >= 2, key
    assert len(plan.cells) == 16 and len(plan.runnable) == 16
    assert plan.budget_flops == EMBEDDED_BUDGET
    assert len({c.spec.cell_id for c in plan.cells}) == 16  # every cell distinct
    seeds = {c.spec.seed for c in plan.cells}
    configs = {c.spec.config_id for c in plan.cells}
    assert len(configs) == 16 // len(seeds)


def test_command_line_value_fixes_an_axis_and_a_list_replaces_it():
    fixed = plan_grid(["model=tiny-m"])
    assert {c.spec.model for c in fixed.cells} == {"tiny-m"}
    assert "model" not in dict(fixed.axes) and len(fixed.cells) == 8
    swept = plan_grid(["grid.group_size=2,4,6", "model=tiny-s", "reward=rule"])
    assert dict(swept.axes)["grid.group_size"] == ("2", "4", "6")
    assert sorted(c.spec.group_size for c in swept.cells) == [2, 2, 4, 4, 6, 6]


def test_steps_solve_the_pilot_budget_at_nominal_tokens():
    plan = plan_grid(["model=tiny-m", "reward=rule", "grid.group_size=8",
                      "grid.update_epochs=1", "budget=1e13", "selection.policy=flat"])
    (cell,) = plan.cells
    cfg = compose_config(["model=tiny-m", "reward=rule", "budget=1e13"])
    specs = to_specs(cfg)
    step = flops.grpo_step_flops(specs.policy, specs.reward, lora=specs.lora,
                                 **specs.kwargs())
    pilot_budget = 1e13 * cfg.pilot.fraction
    assert cell.spec.budget_flops == pytest.approx(pilot_budget)
    assert cell.steps == int(pilot_budget // step.total)
    assert cell.planned.total <= pilot_budget < cell.planned.total + step.total
    assert plan.share_of_full_run == pytest.approx(cfg.pilot.fraction)


def test_cells_that_cannot_buy_a_step_are_refused_with_the_reason():
    # tiny-s buys a step on this budget, tiny-l does not
    plan = plan_grid(["model=tiny-s,tiny-l", "reward=rule", "grid.group_size=8",
                      "grid.update_epochs=1", "budget=2.5e11", "selection.policy=flat"])
    refused = [c for c in plan.cells if c.refused]
    assert [c.spec.model for c in refused] == ["tiny-l"]
    assert "worst-case step costs" in refused[0].refused and refused[0].steps == 0
    table = plan_table(plan)
    assert "refused (1 cell(s), not run)" in table and refused[0].spec.cell_id in table


def test_no_cell_can_buy_a_step_is_bad_input():
    with pytest.raises(ValueError, match="budget=1e\\+09: no cell can buy one GRPO step"):
        plan_grid(["budget=1e9"])


def test_real_models_need_an_explicit_budget():
    with pytest.raises(ValueError, match="budget=null"):
        plan_grid(["model=qwen2.5-0.5b"])


@pytest.mark.parametrize("shares, label", [
    ({"rollout": 0.3, "learning": 0.5, "feedback": 0.2}, "feedback-heavy"),
    ({"rollout": 0.15, "learning": 0.85, "feedback": 0.0}, "learning-heavy"),
    ({"rollout": 0.45, "learning": 0.55, "feedback": 0.0}, "search-heavy"),
    ({"rollout": 0.31, "learning": 0.69, "feedback": 0.0}, "balanced"),
])
def test_regime_labels_follow_the_thresholds(shares, label):
    assert regime_label(shares, THRESHOLDS) == label


def test_plan_of_real_models_loads_neither_torch_nor_weights():
    code = ("import sys; from race.cli import main; "
            "rc = main(['plan', 'budget=1e18', 'model=qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b', "
            "'reward=rule,qwen2.5-math-prm-7b']); "
            "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch was imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "qwen2.5-7b" in out.stdout and "qwen2.5-math-prm-7b" in out.stdout
    assert "24 cell(s), 24 runnable" in out.stdout
    assert "feedback-heavy" in out.stdout and "learning-heavy" in out.stdout


def test_plan_summary_reports_pilot_cost_as_share_of_a_full_run():
    plan = plan_grid(["selection.policy=flat"])
    assert "100.0% of one full-budget run" in plan_summary(plan)
    # the default ladder of 16 configs of 2 sizes, its eval not bounding it:
    ladder = plan_summary(plan_grid(["selection.pilot_budget=100"]))
    # 16/48 + 8 x (1/24 - 1/48) + 4 x (1/12 - 1/24) + 2 x (1/6 - 1/12) = 40/48
    assert "ladder 16 at F/48 -> 8 at F/24 -> 4 at F/12 -> 2 at F/6" in ladder
    assert "83.3% of one full-budget run" in ladder and "pilot.fraction=0.0625: 100.0%" in ladder
    assert "shrunk" not in ladder
    bounded = plan_summary(plan_grid([]))  # the default: charged and eval within one run
    assert "100.0% with eval" in bounded and "to fit selection.share=1 and, with eval, " \
        "selection.pilot_budget=1" in bounded


def test_conf_grid_rewards_that_do_not_fit_a_chosen_policy_are_refused_not_fatal():
    # the default grid's reward axis holds prm-tiny-s (character tokenizer): with Qwen
    # policies those cells cannot exist, the rule-reward cells still plan
    plan = plan_grid(["budget=1e18", "model=qwen2.5-0.5b,qwen2.5-1.5b"], runnable=False)
    refused = [c for c in plan.cells if c.refused]
    assert len(plan.cells) == 16 and len(refused) == 8 and len(plan.runnable) == 8
    assert all(dict(c.knobs)["reward"] == "prm-tiny-s" and c.spec is None for c in refused)
    assert "tokenizer" in refused[0].refused
    assert {c.spec.reward_name for c in plan.runnable} == {"rule"}
    with pytest.raises(ValueError, match="tokenizer"):  # asked for explicitly: bad input
        plan_grid(["budget=1e18", "model=qwen2.5-0.5b", "reward=prm-tiny-s"])


def test_plan_warns_when_a_flat_grid_costs_more_than_one_full_run(capsys):
    from race import cli

    args = ["plan", "budget=1e18", "model=qwen2.5-0.5b,qwen2.5-1.5b", "reward=rule",
            "grid.group_size=2,4,8,16,32", "selection.policy=flat"]  # x mu [1, 2]: 20 of 1/16
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert ("warning: these 20 pilots cost 1.25 full-budget runs (each gets "
            "pilot.fraction=0.0625 of the budget)") in err and "pilot.fraction<=0.05" in err
    assert cli.main(["plan", "budget=1e18", "model=qwen2.5-0.5b", "reward=rule",
                     "selection.policy=flat"]) == 0
    assert "warning" not in capsys.readouterr().err  # 4 cells: a quarter of a run
    assert cli.main(args[:-1]) == 0  # the ladder spends at most one full run, whatever the grid
    captured = capsys.readouterr()
    assert "pilots cost" not in captured.err
    # charged would fill selection.share=1; the rungs shrink so that eval fits too
    assert "selection.pilot_budget" not in captured.err
    assert "100.0% with eval" in captured.out and "rungs shrunk" in captured.out


def test_plan_of_a_budget_list_plans_one_ladder_per_budget(capsys):
    from race import cli

    assert cli.main(["plan", "budget=1e12,4e12", "model=tiny-s,tiny-m"]) == 0
    out = capsys.readouterr().out
    assert out.index("== budget=1e+12 ==") < out.index("== budget=4e+12 ==")
    assert out.count("ladder 16 at ") == 2
    assert "full-run budget F = 1.00e+12" in out and "full-run budget F = 4.00e+12" in out
