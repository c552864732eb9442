"""The update fraction rho of every cell and the response surface's recommendation in a
sweep's report (race.analysis.surfaces, race.report), on hand-made sweep folders built
with tests/test_report.py's helpers."""

import json

import pandas as pd
import pytest
from test_report import FAILED, _md_tables, accuracy, make_sweep, write_cell

from race.analysis.surfaces import with_update_fractions
from race.report.write import write_report
from race.store import io as results

PLANNED_SHIFT = 0.02  # planned rho = realized + this: completions end early, unevenly


def rho_config(name, model, reward, rho, score):
    """One seed of a config whose cell spends the share ``rho`` of its charged FLOPs on
    learning (the rest on rollout) and ends at ``score`` on test: the fixture's final
    accuracy is the sigmoid at the pilot budget, (R0 + A) / 2, minus seed 0's 0.03, on the
    1/20 grid."""
    r0 = max(0.0, score - 0.05)
    curve = (r0, 2 * (score + 0.03) - r0, 1.0, 2.0)
    return {"config_id": name, "model": model, "reward": reward, "group_size": 4,
            "update_epochs": 1, "shares": {"rollout": 1 - rho, "learning": rho,
                                           "feedback": 0.0},
            "test": curve, "ood": curve, "seeds": (0,), "rho": rho, "score": score}


def rho_sweep(root, configs):
    """A sweep folder of ``configs`` whose ``sweep.json`` lists each cell's planned FLOPs
    (rho planned ``PLANNED_SHIFT`` above the realized one), plus one failed cell."""
    sweep = make_sweep(root, configs, failed=False, missing=False)
    write_cell(sweep, FAILED, 0, status="failed")
    record = results.read_json(sweep / "sweep.json")
    record["cells"] = [{"cell_id": f"{c['config_id']}-s0", "planned_flops": {
        "rollout": 1 - c["rho"] - PLANNED_SHIFT, "learning": c["rho"] + PLANNED_SHIFT,
        "feedback": 0.0, "eval": 0.1, "total": 1.0}} for c in configs]
    results.write_json(sweep / "sweep.json", record)
    return sweep


LEVELS = (0.30, 0.45, 0.60, 0.75, 0.90)
# tiny-m/rule: 0.45 - (20/9) (rho - 0.75)^2, a concave quadratic peaking inside the grid
PEAK = [rho_config(f"m-rule-{i}", "tiny-m", "rule", r, s)
        for i, (r, s) in enumerate(zip(LEVELS, (0.0, 0.25, 0.40, 0.45, 0.40)))]
# tiny-m/prm: 0.80 - (20/9) (rho - 0.90)^2, still rising at the grid's top
EDGE = [rho_config(f"m-prm-{i}", "tiny-m", "prm-tiny-s", r, s)
        for i, (r, s) in enumerate(zip(LEVELS, (0.0, 0.35, 0.60, 0.75, 0.80)))]
# tiny-s/rule: the same score at every rho
FLAT = [rho_config(f"s-rule-{i}", "tiny-s", "rule", r, 0.40) for i, r in enumerate(LEVELS[:3])]
# tiny-s/prm: two levels of rho, as the default grid has
TWO = [rho_config(f"s-prm-{i}", "tiny-s", "prm-tiny-s", r, s)
       for i, (r, s) in enumerate(((0.68, 0.30), (0.84, 0.35)))]
CONFIGS = [*PEAK, *EDGE, *FLAT, *TWO]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    sweep = rho_sweep(tmp_path_factory.mktemp("rho"), CONFIGS)
    write_report(sweep, n_boot=200)
    return (sweep, (sweep / "leaderboard.md").read_text(),
            results.read_json(sweep / "selection.json"))


def test_the_fixture_ends_each_cell_at_its_score():
    for cfg in CONFIGS:
        assert accuracy(cfg["test"], 1.0, 0) == pytest.approx(cfg["score"], abs=1e-12)


def test_planned_rho_follows_what_a_rung_continues_and_realized_reads_the_ledger():
    cells = pd.DataFrame([
        {"cell_id": "a", "continues": "", "flops_rollout": 3.0, "flops_learning": 1.0,
         "flops_feedback": 0.0, "flops_eval": 9.0},
        {"cell_id": "b", "continues": "a", "flops_rollout": 5.0, "flops_learning": 3.0,
         "flops_feedback": 2.0, "flops_eval": 9.0},
        {"cell_id": "c", "continues": "", "flops_rollout": 0.0, "flops_learning": 0.0,
         "flops_feedback": 0.0, "flops_eval": 0.0},
        {"cell_id": "d", "continues": None},  # missing: never wrote a summary
    ])
    planned = [{"cell_id": "a", "planned_flops": {"rollout": 6.0, "learning": 3.0,
                                                  "feedback": 1.0, "eval": 5.0}},
               {"cell_id": "c", "planned_flops": {"rollout": 0.0, "learning": 0.0,
                                                  "feedback": 0.0, "eval": 0.0}}]
    out = with_update_fractions(cells, planned)
    # b is a later rung of a: the same step, another budget; c is refused (no step);
    # d is not in the plan
    assert out["rho_planned"].tolist()[:2] == [0.3, 0.3]
    assert out["rho_planned"].iloc[2:].isna().all()
    assert out["rho_realized"].tolist()[:2] == [0.25, 0.3]  # eval is never charged
    assert out["rho_realized"].iloc[2:].isna().all()
    assert "rho_planned" not in cells  # a copy


def test_leaderboard_shows_each_configs_planned_and_realized_rho(report):
    _, text, _ = report
    rows = _md_tables(text, "## Target: test", "### Allocation configs")
    shown = {row[1].strip("`"): row[-1] for row in rows}
    assert shown == {c["config_id"]: f"{c['rho'] + PLANNED_SHIFT:.2f} / {c['rho']:.2f}"
                     for c in CONFIGS}


def test_selection_json_carries_every_cells_rho(report):
    _, _, selection = report
    rho = {r["cell_id"]: r for r in selection["rho"]}
    assert set(rho) == {f"{c['config_id']}-s0" for c in CONFIGS} | {"cfg-m-g8-s0"}
    for cfg in CONFIGS:
        cell = rho[f"{cfg['config_id']}-s0"]
        assert (cell["model"], cell["reward"], cell["status"]) == (cfg["model"],
                                                                   cfg["reward"], "ok")
        assert cell["rho_planned"] == pytest.approx(cfg["rho"] + PLANNED_SHIFT)
        assert cell["rho_realized"] == pytest.approx(cfg["rho"])
    failed = rho["cfg-m-g8-s0"]  # not in the plan; its ledger's share (tests/test_report.py)
    assert failed["status"] == "failed" and failed["rho_planned"] is None
    assert failed["rho_realized"] == pytest.approx(0.55)
    # the keys other code reads are all still there
    assert {"target", "basis", "k", "selected", "by_target", "excluded", "warm_starts",
            "guards_fired"} <= set(selection)


def _surfaces(selection):
    return {(s["model"], s["reward"]): s for s in selection["response_surface"]}


def _surface_rows(text):
    rows = _md_tables(text, "## Response surface in rho", "## Response surface in rho")
    return {(row[0], row[1]): row for row in rows}


def test_an_interior_peak_recommends_its_regime(report):
    _, text, selection = report
    entry = _surfaces(selection)[("tiny-m", "rule")]
    fit = entry["surface"]
    assert entry["target"] == "test"
    # the points lie on the quadratic exactly: every fit and resample finds its vertex
    assert fit["model"] == "quadratic" and fit["stable"] and fit["reasons"] == []
    assert fit["rho_opt"] == pytest.approx(0.75) and fit["edge"] == ""
    assert fit["interval"] == pytest.approx([0.75, 0.75])
    assert fit["threshold"] == pytest.approx(0.60)  # the midpoint of 0.30-0.90
    assert fit["regime"] == "high-update" and fit["score_opt"] == pytest.approx(0.45)
    assert fit["coefficients"] == pytest.approx([0.45 - 20 / 9 * 0.75 ** 2, 40 / 9 * 0.75,
                                                 -20 / 9], abs=1e-9)
    assert entry["recommendation"] == ("high-update (rho* 0.75, 90% interval 0.75-0.75; "
                                       "threshold 0.60)")
    assert _surface_rows(text)[("tiny-m", "rule")] == [
        "tiny-m", "rule", "5", "5", "0.30-0.90", "quadratic", "0.75 [0.75, 0.75]", "-",
        entry["recommendation"]]


def test_a_peak_on_the_edge_falls_back_to_the_best_pilot_cell(report):
    _, text, selection = report
    entry = _surfaces(selection)[("tiny-m", "prm-tiny-s")]
    fit = entry["surface"]
    assert fit["model"] == "quadratic" and fit["rho_opt"] == pytest.approx(0.90)
    assert fit["edge"] == "high" and fit["reasons"] == ["edge"] and fit["regime"] is None
    assert (fit["best_config"], fit["best_rho"], fit["best_score"]) == (
        "m-prm-4", pytest.approx(0.90), pytest.approx(0.80))
    assert entry["recommendation"] == ("no stable fit (edge): the best pilot cell is m-prm-4 "
                                       "(rho 0.90, pilot score 0.800)")
    row = _surface_rows(text)[("tiny-m", "prm-tiny-s")]
    assert row[6].startswith("0.90") and row[7] == "high"
    assert row[8] == entry["recommendation"]
    assert "- tiny-m/prm-tiny-s: its optimum sits on the grid's high edge (rho 0.90 of " \
           "0.30-0.90)" in text


def test_a_flat_surface_falls_back_as_constant(report):
    _, text, selection = report
    entry = _surfaces(selection)[("tiny-s", "rule")]
    fit = entry["surface"]
    assert fit["model"] == "constant" and fit["reasons"] == ["constant"]
    assert fit["rho_opt"] is None and fit["interval"] is None
    assert fit["coefficients"] == pytest.approx([0.40])
    # every config ties at 0.40: the first in sorted order stands
    assert (fit["best_config"], fit["best_score"]) == ("s-rule-0", pytest.approx(0.40))
    assert entry["recommendation"] == ("no stable fit (constant): the best pilot cell is "
                                       "s-rule-0 (rho 0.30, pilot score 0.400)")
    assert _surface_rows(text)[("tiny-s", "rule")][5:] == ["constant", "-", "-",
                                                          entry["recommendation"]]


def test_two_rho_levels_fall_back_as_few_rho(report):
    _, text, selection = report
    entry = _surfaces(selection)[("tiny-s", "prm-tiny-s")]
    # with 2 configs no fold of a moving model keeps 2 levels: few-rho alone, not constant
    assert entry["surface"]["reasons"] == ["few-rho"] and entry["surface"]["n_rho"] == 2
    assert entry["recommendation"] == ("no stable fit (few-rho): the best pilot cell is "
                                       "s-prm-1 (rho 0.84, pilot score 0.350)")
    assert _surface_rows(text)[("tiny-s", "prm-tiny-s")][2:5] == ["2", "2", "0.68-0.84"]
    assert "- tiny-s/prm-tiny-s: 2 level(s) of rho more than 0.02 apart, a surface needs 3" \
        in text


def test_one_surface_line_per_model_and_reward_and_json_without_nan(report):
    sweep, text, selection = report
    assert set(_surface_rows(text)) == {(c["model"], c["reward"]) for c in CONFIGS}
    assert [(s["model"], s["reward"]) for s in selection["response_surface"]] == sorted(
        {(c["model"], c["reward"]) for c in CONFIGS})
    json.loads((sweep / "selection.json").read_text(),
               parse_constant=lambda name: pytest.fail(f"selection.json holds {name}"))
