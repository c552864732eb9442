"""`race` CLI: help, compute cards, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from race import cli


def run(*args):
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_help_lists_subcommands():
    out = run("--help")
    assert out.returncode == 0
    for name in ("flops", "plan", "sweep", "pilot", "report", "validate"):
        assert name in out.stdout


def test_version_names_the_distribution_pip_installs():
    """`race --version` prints the package index's name (not `race`, another project's)
    and the version pyproject.toml declares."""
    import re
    from pathlib import Path

    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    name, version = (re.search(rf'^{key} = "([^"]+)"', pyproject, re.M).group(1)
                     for key in ("name", "version"))
    out = run("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{name} {version}\n"
    assert name != "race"


def test_flops_card_7b(capsys):
    assert cli.main(["flops", "model=qwen2.5-7b"]) == 0
    out = capsys.readouterr().out
    for word in ("qwen2.5-7b", "7.616B", "rollout", "learning", "feedback", "total"):
        assert word in out


def test_flops_json_prm_card(capsys):
    args = ["flops", "model=qwen2.5-1.5b", "reward=qwen2.5-math-prm-7b", "task=gsm8k",
            "grid.group_size=8", "grid.max_new_tokens=512", "steps=100", "format=json"]
    assert cli.main(args) == 0
    card = json.loads(capsys.readouterr().out)
    model = card["cards"]["model"]
    assert model["steps"] == 100
    assert card["assumptions"]["group_size"] == 8
    assert model["total_flops"]["feedback"] > 0
    assert model["total_flops"]["total"] == pytest.approx(100 * model["per_step_flops"]["total"])
    assert sum(model["shares"].values()) == pytest.approx(1.0)
    executed = card["cards"]["executed"]
    assert executed["total_flops"]["total"] >= model["total_flops"]["total"]


def test_flops_budget_buys_whole_steps(capsys):
    assert cli.main(["flops", "model=qwen2.5-0.5b", "budget=1e17", "format=json"]) == 0
    model = json.loads(capsys.readouterr().out)["cards"]["model"]
    assert model["total_flops"]["total"] <= 1e17
    assert model["total_flops"]["total"] + model["per_step_flops"]["total"] > 1e17


@pytest.mark.parametrize("override, needle", [
    ("model=qwen2.5-8b", "did you mean model=qwen2.5-7b"),
    ("reward=qwen-prm", "valid names"),
    ("grid.group_size=1", "grid.group_size=1"),
    ("grid.max_new_tokens=0", "grid.max_new_tokens=0"),
    ("task.prompt_tokens=-3", "task.prompt_tokens=-3"),
    ("model=tiny-s grid.lora_rank=41", "grid.lora_rank=41"),
    ("model=tiny-m reward=qwen2.5-math-prm-7b", "tokenizer"),
    ("budget=1e3", "cannot buy one GRPO step"),
    ("budget=0", "budget=0"),
    ("grid.foo=3", "grid.foo"),
    ("grid.group_size=abc", "grid.group_size=abc"),
    ("model=tiny-s,tiny-m", "race sweep"),
])
def test_bad_input_one_line_exit_2(override, needle):
    out = run("flops", *override.split())
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("race flops: ")
    assert needle in lines[0]


@pytest.mark.parametrize("bug", [ValueError("unpack mismatch"), KeyError("rollout"),
                                 ZeroDivisionError("division by zero")])
def test_an_internal_bug_shows_its_traceback_not_a_usage_error(bug, monkeypatch, capsys):
    """Only UsageError (and Hydra's override errors) mean bad input; a ValueError or
    KeyError raised by RACE's own code is a bug and must not pass for one."""
    def broken(*args, **kwargs):
        raise bug

    monkeypatch.setattr(cli, "plan_table", broken)
    assert cli.main(["plan"]) == cli.INTERNAL_ERROR != cli.USAGE_ERROR
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in broken" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("race plan: internal error (") and "please report it" in last


def test_usage_errors_carry_fields_callers_branch_on():
    from race.core.specs import RunSpec
    from race.errors import BudgetTooSmall, UsageError
    from race.pilot.budget import check_budget

    spec = RunSpec("tiny-s", (("kind", "rule"), ("name", "rule")), (("name", "arith"),), 1.0)
    with pytest.raises(BudgetTooSmall) as info:
        check_budget(spec, prompt_tokens=1)
    error = info.value
    assert isinstance(error, UsageError) and error.budget_flops == 1.0
    assert error.cheapest_flops > 1.0 and error.convention == "model"
    assert error.cell_id == spec.cell_id
