"""What one budget buys at each policy size (race.analysis.size_buys, race.report.buys),
checked against the planner's own solver (race.run.grid.solve_cell, through plan_grid)."""

import pytest

from race.analysis.size_buys import budget_buys, recipe
from race.report.buys import budget_buys_text, buys_lines, buys_markdown
from race.run.grid import plan_grid

F = 3.5e12  # the embedded default budget, FLOPs
PROMPT, COMPLETION = 16, 40  # race/conf/task/arith.yaml: nominal prompt and completion tokens


@pytest.fixture(scope="module")
def plan():
    """Every tiny size, both rewards and both mu, each cell solved at the full budget
    (pilot.fraction=1 on a flat grid: the pilot budget is F itself)."""
    return plan_grid(["model=tiny-s,tiny-m,tiny-l", "selection.policy=flat",
                      "pilot.fraction=1", "grid.update_epochs=1,2"], runnable=False)


def test_every_cell_buys_what_the_solver_solved(plan):
    cells = plan.runnable
    assert len(cells) > 8 and all(c.spec.budget_flops == F for c in cells)
    for cell in cells:
        row = budget_buys(F, [cell.spec]).iloc[0]
        assert row["steps"] == cell.steps > 0, cell.knobs
        assert row["spent_flops"] == pytest.approx(cell.planned.total, rel=1e-12)
        for phase, share in cell.planned.shares().items():
            assert row[f"share_{phase}"] == pytest.approx(share, rel=1e-9)
            assert row[f"flops_{phase}"] == pytest.approx(getattr(cell.planned, phase),
                                                          rel=1e-12)
        # whole steps: the budget holds them, and not one more
        assert row["spent_flops"] <= F < row["spent_flops"] + row["step_flops"]
        # by hand: prompts x G completions a step, each 16 + 40 tokens, read mu times
        spec = cell.spec
        completions = cell.steps * spec.prompts_per_step * spec.group_size
        assert row["completions"] == completions
        assert row["tokens_trained"] == completions * (PROMPT + COMPLETION) * spec.update_epochs
        assert (row["prompt_tokens"], row["completion_tokens"]) == (PROMPT, COMPLETION)


def test_one_recipe_solved_at_every_size_buys_a_larger_policy_fewer_steps(plan):
    specs = [c.spec for c in plan.runnable]
    reference = next(c.spec for c in plan.runnable if c.spec.model == "tiny-m"
                     and dict(c.knobs)["reward"] == "rule"
                     and dict(c.knobs)["grid.update_epochs"] == "1"
                     and dict(c.knobs)["grid.group_size"] == "8")
    frame = budget_buys(F, specs, reference=reference)
    assert list(frame["model"]) == ["tiny-s", "tiny-m", "tiny-l"]  # smallest first
    assert frame["same_recipe"].all()
    solver = {c.spec.model: c.steps for c in plan.runnable if recipe(c.spec) == recipe(reference)}
    assert dict(zip(frame["model"], frame["steps"])) == solver
    assert frame["params"].is_monotonic_increasing
    assert frame["step_flops"].is_monotonic_increasing
    assert frame["steps"].is_monotonic_decreasing and frame["steps"].iloc[-1] > 0
    assert frame["completions"].is_monotonic_decreasing


def test_a_size_without_the_recipe_is_solved_at_its_own_and_says_so(plan):
    # a grid whose tiny-s cells all run G=8: none of them runs the recipe of the default
    # grid's other G (2)
    other = min(c.spec.group_size for c in plan.runnable)
    assert other != 8
    specs = [c.spec for c in plan.runnable if c.spec.model != "tiny-s"
             or c.spec.group_size == 8]
    tiny_m_other = next(s for s in specs if s.model == "tiny-m" and s.group_size == other)
    frame = budget_buys(F, specs, reference=tiny_m_other).set_index("model")
    assert not frame.loc["tiny-s", "same_recipe"] and frame.loc["tiny-m", "same_recipe"]
    assert frame.loc["tiny-s", "group_size"] == 8
    assert frame.loc["tiny-l", "group_size"] == other
    assert "\\* no cell of this size runs that recipe" in buys_markdown(
        frame.reset_index(), F)


def test_the_table_and_the_plan_lines_show_the_solved_numbers(plan):
    specs = [c.spec for c in plan.runnable if c.spec.update_epochs == 1
             and c.spec.reward_name == "rule" and c.spec.group_size == 8]
    frame = budget_buys(F, specs)
    table = buys_markdown(frame, F, whose="the pick's")
    rows = [line for line in table.splitlines() if line.startswith("| tiny-")]
    assert [r.split("|")[1].strip() for r in rows] == ["tiny-s", "tiny-m", "tiny-l"]
    for line, (_, row) in zip(rows, frame.iterrows()):
        assert f"| {row['steps']:,} |" in line
    lines = budget_buys_text(F, specs).splitlines()
    assert lines[0].startswith("what F = 3.50e+12 FLOPs buys per size at one recipe (rule, 8 "
                              "prompts x G8")
    assert len(lines) == 4 and lines[3].lstrip().startswith("tiny-l")
    assert "fewer than tiny-s" in lines[3] and "GRPO steps" in lines[1]
    assert buys_lines(frame.iloc[:0], F) == ""
    assert budget_buys_text(F, specs[:1]) == ""  # one size: the plan table says it


def test_no_spec_buys_nothing():
    assert budget_buys(F, []).empty
