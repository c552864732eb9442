"""``race validate``'s cost, stated before its full-budget runs start: runs, FLOPs, and
hours at the FLOP/s the sweep's own pilots ran at (their summaries' wall_s)."""

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


def test_pilot_rates_are_charged_flops_over_every_phases_wall_seconds(tmp_path):
    write_cell(tmp_path, "a", "tiny-m", flops=6e11, wall_s={"rollout": 20.0, "learning": 30.0,
                                                            "eval": 8.0, "load": 2.0})
    write_cell(tmp_path, "b", "tiny-m", flops=2e11, wall_s={"rollout": 10.0, "learning": 10.0})
    write_cell(tmp_path, "c", "tiny-l", flops=3e11, wall_s={"rollout": 100.0})
    # left out: a failed pilot, and a continued rung (its FLOPs accumulate along its lineage)
    write_cell(tmp_path, "d", "tiny-l", flops=1e15, wall_s={"rollout": 1.0}, status="failed")
    write_cell(tmp_path, "e", "tiny-l", flops=1e15, wall_s={"rollout": 1.0}, continues="c")
    rates = pilot_rates(tmp_path)
    assert rates == {"tiny-m": pytest.approx(8e11 / 80.0), "tiny-l": pytest.approx(3e9)}


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
