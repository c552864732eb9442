"""A ladder scores each warm start once: the cells that leave checkpoint 0 to their group
(``score_start`` false) read the group's rows (race.analysis.load), and only they."""

from race.analysis.load import load_results
from race.core.specs import RunSpec, start_key
from race.store import io as results

RULE = (("kind", "rule"), ("name", "rule"))
PRM = (("kind", "prm"), ("model", "prm-tiny-s"), ("name", "prm-tiny-s"))
TASK = (("name", "arith"),)


def write_cell(sweep, spec: RunSpec, start: float | None, end: float):
    """A finished cell: val at checkpoint 0 (when ``start`` is given) and at its end."""
    folder = sweep / "cells" / spec.cell_id
    results.write_json(folder / "spec.json", spec.to_dict())
    rows = []
    if start is not None:
        rows.append({"kind": "eval", "target": "val", "checkpoint": 0.0, "accuracy": start,
                     "mean_reward": start, "correct": [1, 0, 1, 0]})
    rows.append({"kind": "step", "step": 1, "charged_flops": 0.9 * spec.budget_flops})
    rows.append({"kind": "eval", "target": "val", "checkpoint": 1.0, "accuracy": end,
                 "mean_reward": end, "correct": [1, 1, 1, 0]})
    results.write_jsonl(folder / "metrics.jsonl", rows)
    results.write_json(folder / "summary.json", {
        "cell_id": spec.cell_id, "status": "ok", "error": None,
        "budget_flops": spec.budget_flops, "convention": "model", "steps": 1,
        "total_flops": 0.9 * spec.budget_flops, "flops": {"rollout": 0.9 * spec.budget_flops},
        "wall_s": {}, "final_eval": {}, "initial_eval": {}})


def test_cells_without_their_warm_start_read_their_groups(tmp_path):
    sweep = tmp_path / "sweep"
    results.write_json(sweep / "sweep.json", {"budget_flops": 1e12, "pilot_fraction": 0.1})
    base = RunSpec("tiny-m", RULE, TASK, 1e11, eval_targets=("val",))
    scorer = base
    other = RunSpec("tiny-m", RULE, TASK, 1e11, eval_targets=("val",), group_size=4,
                    score_start=False)
    alone = RunSpec("tiny-m", PRM, TASK, 1e11, eval_targets=("val",), score_start=False)
    assert start_key(scorer.to_dict()) == start_key(other.to_dict())  # one group
    assert start_key(alone.to_dict()) != start_key(scorer.to_dict())  # another reward
    assert other.config_id == RunSpec("tiny-m", RULE, TASK, 1e11, eval_targets=("val",),
                                      group_size=4).config_id  # the plan is not the config
    write_cell(sweep, scorer, 0.5, 0.6)
    write_cell(sweep, other, None, 0.7)
    write_cell(sweep, alone, None, 0.8)
    _, evals, _ = load_results(sweep)
    start = evals[evals["checkpoint"] == 0.0].set_index("cell_id")
    # the scorer's row, read for the other cell of its group; the PRM cell has no scorer
    assert sorted(start.index) == sorted([scorer.cell_id, other.cell_id])
    assert start.loc[other.cell_id, "accuracy"] == 0.5 and start.loc[other.cell_id, "n"] == 4
    assert start.loc[other.cell_id, "config_id"] == other.config_id
    assert start.loc[other.cell_id, "flops"] == 0.0
    ends = evals[evals["checkpoint"] == 1.0].set_index("cell_id")["accuracy"]
    assert ends.to_dict() == {scorer.cell_id: 0.6, other.cell_id: 0.7, alone.cell_id: 0.8}


def test_new_eval_plan_fields_at_their_defaults_keep_every_id():
    spec = RunSpec("tiny-m", RULE, TASK, 1e11)
    plain = spec._fields()
    assert "score_start" not in plain and "report_from_flops" not in plain
    ladder = RunSpec("tiny-m", RULE, TASK, 1e11, report_from_flops=5e11)
    shared = RunSpec("tiny-m", RULE, TASK, 1e11, score_start=False, report_from_flops=5e11)
    assert shared.cell_id != ladder.cell_id  # what runs differs: it scores less
    # one config and lineage whichever seed of it scores the group's warm start
    assert (shared.config_id, shared.lineage_id) == (ladder.config_id, ladder.lineage_id)
