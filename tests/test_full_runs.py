"""``race validate``'s cost, stated before its full-budget runs start: runs, FLOPs, and
hours at the FLOP/s the sweep's own pilots trained at (their summaries' wall_s of the
charged phases), the rate the leaderboard reads too; above an hour it asks first."""

from types import SimpleNamespace

import pytest

from race.core.fmt import fmt_flops
from race.run.full_runs import pilot_rates, validation_cost
from race.store import io as results


def write_cell(sweep, cell_id, model, *, flops, wall_s, status="ok", continues=""):
    folder = sweep / "cells" / cell_id
    results.write_json(folder / "spec.json", {"cell_id": cell_id, "model": model,
                                              "continues": continues})
    results.write_json(folder / "summary.json", {"cell_id": cell_id, "status": status,
                                                 "total_flops": flops, "wall_s": wall_s})


def test_pilot_rates_are_charged_flops_over_their_training_wall_seconds(tmp_path):
    write_cell(tmp_path, "a", "tiny-m", flops=6e11, wall_s={"rollout": 20.0, "learning": 30.0,
                                                            "eval": 8.0, "load": 2.0})
    write_cell(tmp_path, "b", "tiny-m", flops=2e11, wall_s={"rollout": 10.0, "learning": 10.0})
    write_cell(tmp_path, "c", "tiny-l", flops=3e11, wall_s={"rollout": 100.0})
    # left out: a failed pilot, and a continued rung (its FLOPs accumulate along its lineage)
    write_cell(tmp_path, "d", "tiny-l", flops=1e15, wall_s={"rollout": 1.0}, status="failed")
    write_cell(tmp_path, "e", "tiny-l", flops=1e15, wall_s={"rollout": 1.0}, continues="c")
    rates = pilot_rates(tmp_path)
    # loading and eval left out: 70 s of rollout and learning
    assert rates == {"tiny-m": pytest.approx(8e11 / 70.0), "tiny-l": pytest.approx(3e9)}


def spec(model, budget_flops=3.5e12):
    return SimpleNamespace(model=model, budget_flops=budget_flops)


def test_the_cost_line_says_runs_flops_and_hours_at_the_measured_rate():
    line = validation_cost([spec("tiny-m")] * 3, {"tiny-m": 1e9})
    hours = 3 * 3.5e12 / 1e9 / 3600  # 2.9 h one after another
    assert line.startswith("3 full-budget run(s) of 3.50e+12 FLOPs each, 1.05e+13 FLOPs in all")
    assert f"about {hours:.2g} h one after another" in line
    assert f"tiny-m {fmt_flops(1e9)} FLOP/s" in line
    two = validation_cost([spec("tiny-m"), spec("tiny-l")], {"tiny-m": 1e9, "tiny-l": 5e8},
                          planned=3)
    assert "2 full-budget run(s) of 3.50e+12 FLOPs each (1 of 3 already ok)" in two
    assert f"about {(3.5e12 / 1e9 + 3.5e12 / 5e8) / 3600:.2g} h" in two
    assert "about 35 min one after another" in validation_cost([spec("tiny-m", 2.1e12)],
                                                              {"tiny-m": 1e9})
    assert "about 12 s one after another" in validation_cost([spec("tiny-s", 2.4e9)],
                                                             {"tiny-s": 2e8})


def test_the_cost_line_says_when_hours_cannot_be_measured_or_nothing_is_left():
    line = validation_cost([spec("tiny-l")], {"tiny-m": 1e9})
    assert line.endswith("hours unknown: no ok pilot of tiny-l with a measured wall time in "
                         "this sweep")
    assert validation_cost([], {}, planned=2) == \
        "no full-budget run left to do (2 of 2 already ok)"


# ---------------------------------------------------------------- asking before it starts


def _plan(hours, todo=2):
    from race.run.full_runs import ValidationPlan

    return ValidationPlan(chosen=[{"config_id": "c"}], specs=[spec("tiny-m")] * todo,
                          todo=[spec("tiny-m")] * todo, config_of={}, full_flops=3.5e12,
                          target="val", predicted={},
                          cost=f"{todo} full-budget run(s) of 3.50e+12 FLOPs each, "
                               f"7.00e+12 FLOPs in all; about {hours:.2g} h one after "
                               f"another", hours=hours)


def test_more_than_an_hour_of_runs_asks_first_unless_told_not_to():
    assert _plan(6.8).needs_confirmation() and _plan(float("nan")).needs_confirmation()
    assert not _plan(0.2).needs_confirmation()
    assert not _plan(6.8).needs_confirmation(confirm=False)  # validate.confirm=false
    assert not _plan(6.8, todo=0).needs_confirmation()  # nothing left to run


@pytest.fixture
def validate_cli(tmp_path, monkeypatch):
    """``race validate`` on a sweep folder whose plan costs 6.8 h (planning and running
    stood in for: what is tested is what it says and when it starts)."""
    import race.cli as cli

    (tmp_path / "cells").mkdir()
    (tmp_path / "selection.json").write_text("{}")
    started = []
    monkeypatch.setattr(cli, "plan_validation", lambda folder, cfg, top_k=None: _plan(6.8))
    monkeypatch.setattr(cli, "run_validation", lambda folder, cfg, top_k=None, plan=None:
                        started.append(plan) or {"failed": []})
    monkeypatch.setattr(cli, "validation_section", lambda folder, comparison: "compared")
    return cli, tmp_path, started


def test_validate_states_its_cost_first_and_without_a_terminal_stops_without_yes(
        validate_cli, capsys, monkeypatch):
    cli, folder, started = validate_cli
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    assert cli.main(["validate", str(folder)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("race validate: 2 full-budget run(s) of 3.50e+12 FLOPs each, "
                      "7.00e+12 FLOPs in all; about 6.8 h one after another")
    assert len(err) == 2 and "--yes" in err[1] and "validate.confirm=false" in err[1]
    assert started == []
    assert cli.main(["validate", str(folder), "--yes"]) == 0
    assert len(started) == 1
    assert cli.main(["validate", str(folder), "validate.confirm=false"]) == 0
    assert len(started) == 2


def test_validate_asks_y_or_n_on_a_terminal(validate_cli, capsys, monkeypatch):
    cli, folder, started = validate_cli
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    answers = iter(["", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert cli.main(["validate", str(folder)]) == 1  # the default is no
    assert started == [] and "not started" in capsys.readouterr().err
    assert cli.main(["validate", str(folder)]) == 0 and len(started) == 1


def test_ctrl_d_at_the_prompt_means_no(validate_cli, capsys, monkeypatch):
    """End of input (Ctrl-D) at the y/N prompt: not started, as a plain no (it was an
    internal error, EOFError)."""
    cli, folder, started = validate_cli
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)

    def ctrl_d(prompt):
        raise EOFError

    monkeypatch.setattr("builtins.input", ctrl_d)
    assert cli.main(["validate", str(folder)]) == 1
    err = capsys.readouterr().err
    assert started == [] and "not started" in err
    assert "internal error" not in err and "Traceback" not in err


def test_validate_help_states_what_it_costs_and_how_to_confirm(capsys):
    import race.cli as cli

    with pytest.raises(SystemExit):
        cli.main(["validate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "states the runs, FLOPs and hours first" in text
    assert "asks before more than 1 h unless --yes or validate.confirm=false" in text
    assert "--yes" in text
