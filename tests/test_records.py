"""The typed records of a cell's results files (race.store.records): each writes exactly the
JSON its writers wrote before it existed, and reads every shape they wrote (a finished
pilot's, a lost pilot's, a TRL run's, older hand-made ones)."""

import json
import math

import pytest

from race.core.specs import PhaseFlops, RunSpec
from race.pilot.state import Ledger, build_summary, pilot_summary, unfinished_summary
from race.store import io as results
from race.store.pilots import pilot_row
from race.store.records import (
    EvalRow,
    EvalScore,
    ExternalRun,
    PilotSession,
    PilotSummary,
    phase_flops_from,
)

PHASES = {"rollout": 2.0e9, "learning": 5.0e9, "feedback": 1.0e9, "eval": 9.0e9}
EVALS = [
    {"kind": "eval", "checkpoint": 0.0, "target": "val", "problems": "9f26", "accuracy": 0.25,
     "mean_reward": 0.3, "correct": [1, 0, 0, 0], "flops": {"model": dict(PHASES)}},
    {"kind": "eval", "checkpoint": 1.0, "target": "val", "problems": "9f26", "accuracy": 0.5,
     "mean_reward": 0.55, "correct": [1, 1, 0, 0], "flops": {"model": dict(PHASES)}},
]
SESSION = {"continued_from": {"cell_id": "abc", "steps": 2}, "device": "cpu",
           "dtype": "float32", "engine": None,
           "weights": {"policy": {"source": "/w", "revision": ""}},
           "peak_flops": 1.0e11, "peak_measured": True,
           "throughput": {"rollout": {"flops_per_s": 1e9, "mfu": 0.01, "hfu": 0.02,
                                      "peak_gib": None}},
           "padding": {"rollout": 1.25}}


def spec() -> RunSpec:
    return RunSpec("tiny-s", (("kind", "rule"), ("name", "exact-match")),
                   (("name", "arith"),), 1e10, eval_targets=("val",))


def ledger() -> Ledger:
    out = Ledger()
    for phase, value in PHASES.items():
        out.add(phase, value, 1.5 * value)
    out.redone["model"]["rollout"] = 1.0e8
    out.wall_s["rollout"] = 1.5
    return out


def old_build_summary(spec, ledger, steps, evals, status, error, resumed_from_step, **extra):
    """race.pilot.state.build_summary as it was before the records (git c76c99b)."""
    final = {}
    for row in evals:
        final[row["target"]] = {"accuracy": row["accuracy"], "mean_reward": row["mean_reward"],
                                "checkpoint": row["checkpoint"]}
    initial = {r["target"]: {"accuracy": r["accuracy"], "mean_reward": r["mean_reward"]}
               for r in evals if r["checkpoint"] == 0.0}
    charged = ledger.flops[spec.convention]
    redone = ledger.redone[spec.convention]
    return {"status": status, "error": error, "cell_id": spec.cell_id,
            "budget_flops": spec.budget_flops, "convention": spec.convention,
            "total_flops": ledger.charged(spec.convention),
            "flops": dict(charged), "flops_model": ledger.flops["model"],
            "flops_executed": ledger.flops["executed"],
            "flops_measured": ledger.measured() if spec.measure else None,
            "redone": dict(redone), "redone_flops": sum(redone.values()),
            "unspent_flops": max(0.0, spec.budget_flops - ledger.charged(spec.convention)),
            "wall_s": ledger.wall_s, "steps": steps, "final_eval": final,
            "initial_eval": initial, "resumed_from_step": resumed_from_step} | extra


def test_a_finished_pilots_summary_is_the_old_dict_key_for_key(tmp_path):
    new = build_summary(spec(), ledger(), 4, EVALS, "ok", None, 2, **SESSION)
    old = old_build_summary(spec(), ledger(), 4, EVALS, "ok", None, 2, **SESSION)
    assert list(new) == list(old) and new == old  # same keys, same order, same values
    results.write_json(tmp_path / "new.json", new)
    results.write_json(tmp_path / "old.json", old)
    assert (tmp_path / "new.json").read_bytes() == (tmp_path / "old.json").read_bytes()
    read = PilotSummary.from_json(json.loads((tmp_path / "new.json").read_text()))
    assert read.to_json() == json.loads((tmp_path / "old.json").read_text())  # round trip
    assert read.session == PilotSession(**SESSION) and read.device == "cpu"
    assert read.final_eval == {"val": EvalScore(0.5, 0.55, 1.0)}
    assert read.initial_eval == {"val": EvalScore(0.25, 0.3)}
    assert read.unspent_flops == pytest.approx(1e10 - 8e9) and read.extra == {}


def test_a_lost_pilots_summary_is_the_old_dict(tmp_path):
    record = pilot_summary(spec(), ledger(), 3, EVALS[:1], "failed", "lost", None,
                           recovered_from="state/ and metrics.jsonl")
    old = old_build_summary(spec(), ledger(), 3, EVALS[:1], "failed", "lost", None,
                            recovered_from="state/ and metrics.jsonl")
    assert list(record.to_json()) == list(old) and record.to_json() == old
    assert record.session is None and record.device is None
    assert PilotSummary.from_json(old) == record
    # a pilot that never wrote anything: nothing spent, every key still written
    never = unfinished_summary(spec(), tmp_path / "cell", "killed")
    assert never["status"] == "failed" and never["total_flops"] == 0.0
    assert never["recovered_from"] == "state/ and metrics.jsonl"


def test_a_trl_runs_summary_reads_and_writes_back_unchanged():
    trl = {"status": "ok", "error": None, "cell_id": "trl-1", "budget_flops": 8e9,
           "convention": "model", "total_flops": 8e9, "flops": dict(PHASES),
           "flops_model": dict(PHASES), "flops_executed": dict(PHASES),
           "flops_measured": None, "redone": dict.fromkeys(PHASES, 0.0),
           "redone_flops": 0.0, "wall_s": {"rollout": 1.0}, "steps": 2, "final_eval": {},
           "initial_eval": {}, "resumed_from_step": None, "source": "trl",
           "device": "cpu", "dtype": "torch.float32"}
    read = PilotSummary.from_json(trl)
    assert read.external == ExternalRun("trl", "cpu", "torch.float32")
    assert read.unspent_flops is None and read.session is None and read.dtype == "torch.float32"
    assert list(read.to_json()) == list(trl) and read.to_json() == trl


def test_an_old_hand_made_summary_reads_with_defaults_and_keeps_unknown_keys():
    old = {"cell_id": "c1", "status": "ok", "error": None, "budget_flops": 1e9,
           "convention": "model", "steps": 1, "total_flops": 9e8, "device": "cpu",
           "flops": {"rollout": 9e8}, "wall_s": {}, "final_eval": {}, "initial_eval": {},
           "future_key": [1, 2]}
    read = PilotSummary.from_json(old)
    assert read.device == "cpu" and read.session.dtype is None and read.session.throughput is None
    assert read.flops_model == {} and read.redone_flops == 0.0
    assert read.extra == {"future_key": [1, 2]}
    assert read.to_json()["future_key"] == [1, 2]
    assert PilotSummary.from_json({"status": "failed"}).steps == 0


def test_pilots_row_reads_the_typed_summary(tmp_path):
    cell = tmp_path / "cells" / spec().cell_id
    results.write_json(cell / "spec.json", spec().to_dict())
    results.write_json(cell / "summary.json",
                       build_summary(spec(), ledger(), 4, EVALS, "ok", None, None, **SESSION))
    row = pilot_row(cell)
    assert row["status"] == "ok" and row["steps"] == 4 and row["total_flops"] == 8e9
    assert row["flops_learning"] == 5e9 and row["wall_s_rollout"] == 1.5
    assert (row["device"], row["dtype"], row["peak_flops"]) == ("cpu", "float32", 1e11)
    assert row["mfu_rollout"] == 0.01 and row["peak_gib_rollout"] is None
    assert (row["initial_val"], row["final_val"], row["final_val_reward"]) == (0.25, 0.5, 0.55)
    assert row["unspent_flops"] == pytest.approx(2e9) and row["redone_flops"] == 1e8


def test_eval_rows_round_trip_and_date_themselves():
    for row in EVALS:
        assert EvalRow.from_json(row).to_json() == row
    bare = {"kind": "eval", "checkpoint": 0.5, "target": "test", "accuracy": 1.0,
            "mean_reward": 1.0}  # an older row: no problems, no FLOP snapshot
    scored = EvalRow.from_json(bare)
    assert scored.to_json() == bare | {"correct": []} and scored.n == 0
    assert scored.charged_flops("model") is None
    assert EvalRow.from_json(EVALS[1]).charged_flops("model") == 8e9  # eval not charged
    with pytest.raises(ValueError, match="not an eval row"):
        EvalRow.from_json({"kind": "step", "step": 1})


def test_phase_flops_from_a_mapping():
    assert phase_flops_from(PHASES) == PhaseFlops(2e9, 5e9, 1e9, 9e9)
    assert math.isnan(phase_flops_from({"rollout": None, "learning": 1.0,
                                        "feedback": 0.0}).rollout)
    with pytest.raises(ValueError, match=r"planned lacks the phase\(s\) \['feedback'\]"):
        phase_flops_from({"rollout": 1.0, "learning": 1.0}, "planned")
