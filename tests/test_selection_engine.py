"""One selection engine (race.core.climb) behind two sources of curves: a live sweep
(race.run.ladder.LiveSweep, its launches stood in for by cells that "finish" with
recorded curves, read back through the real rung_candidates) and a curve bank
(race.core.bank_source.BankSource, as bench/selection_replay.py replays it). One small
bank through both gives the same rungs and the same picks."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from race.config import SelectionConfig
from race.core import guards
from race.core.bank_source import BankSource, bank_reads, replayable
from race.core.climb import (
    climb,
    fit_to_eval,
    ladder_eval_cost,
    pick_order,
    rung_eval_costs,
)
from race.core.rungs import LadderPlan, plan_ladder
from race.core.specs import PhaseFlops, RunSpec
from race.run.grid import Cell, Plan
from race.run.ladder import run_ladder
from race.store.cell import CellDir
from race.store.io import write_json

FULL = 1e12
CHECKPOINTS = np.array([0.0, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0])
RUNGS = (1 / 16, 1 / 8, 1 / 4)


def steady(f):  # 0.30 -> 0.70 at F
    return 0.30 + 0.4 * f ** 0.5


def collapse(f):  # leads at F/16 (0.60), falls after: caught by the drawdown guard
    return 0.30 + 0.3 * f * 16 if f <= 1 / 16 else max(0.10, 0.60 - 0.5 * (f - 1 / 16) * 16 / 3)


def slow(f):
    return 0.30 + 0.15 * f


class Curve:
    """A recorded curve (race.core.bank_source.RecordedCurve) on 1,000 problems."""

    def __init__(self, shape, shift: float):
        self.full, self.fraction = FULL, CHECKPOINTS
        self.flops = CHECKPOINTS * FULL
        self.read = np.array([min(1.0, shape(f) + shift) for f in CHECKPOINTS])
        self.read_n = np.full(len(CHECKPOINTS), 1000)
        self.reward = self.read.copy()  # the proxy reward: never rising apart from accuracy


THRESHOLDS = SelectionConfig().guards.thresholds()  # the sweep's, as the live source reads


def bank_guard(curve, fraction, reads, t=THRESHOLDS):
    """The guards on a bank curve read at the warm start and the rung ends ``reads``."""
    keep = np.isin(curve.fraction, (0.0, *reads))
    empty = guards.at_full_cap([], [])
    fired = [v for v in guards.check_cell(curve.read[keep].tolist(), curve.reward[keep].tolist(),
                                          curve.read_n[keep].astype(int).tolist(), empty, empty, t)
             if v.fired]
    return "; ".join(f"{v.guard}: {v.evidence}" for v in fired) or None


@pytest.fixture()
def bank():
    """Six configs (two policy sizes x three curve shapes), one seed each: spec, curve."""
    out = []
    for model, shift in (("tiny-s", 0.0), ("tiny-m", 0.05)):
        for epochs, shape in ((1, steady), (2, collapse), (4, slow)):
            spec = RunSpec(model=model, reward=(("name", "rule"),), task=(("name", "arith"),),
                           budget_flops=FULL * RUNGS[0], update_epochs=epochs)
            out.append((spec, Curve(shape, shift)))
    return out


def stand_in_sweep(monkeypatch, bank):
    """``launch_cells`` and ``load_results`` stood in for: a launched cell finishes ok at
    once, and its rows are its config's recorded curve up to its budget (the warm start
    and the rung ends of its lineage, as a continued ladder cell repeats them)."""
    curve_of = {(spec.model, spec.update_epochs): curve for spec, curve in bank}
    launched: dict[str, RunSpec] = {}

    def launch_cells(sweep_dir, specs, launcher, me, *, label, keep_final_state):
        for spec in specs:
            launched[spec.cell_id] = spec
            CellDir.of(sweep_dir, spec.cell_id).path.mkdir(parents=True, exist_ok=True)
            write_json(CellDir.of(sweep_dir, spec.cell_id).summary, {"status": "ok"})
        return {"skipped": 0, "ran": len(specs), "wall_s": 0.0, "by_other": {},
                "launched": [s.cell_id for s in specs]}

    def load_results(sweep_dir, *, with_steps=False, **_):
        rows = []
        for cell_id, spec in launched.items():
            root = spec
            while root.continues:
                root = launched[root.continues]
            curve, budget = curve_of[root.model, root.update_epochs], spec.budget_flops / FULL
            for i, f in enumerate(curve.fraction):
                if f == 0 or (f in RUNGS and f <= budget * (1 + 1e-9)):
                    rows.append({"cell_id": cell_id, "config_id": spec.config_id,
                                 "target": spec.selection_target, "checkpoint": f / budget,
                                 "flops": curve.flops[i], "accuracy": curve.read[i],
                                 "mean_reward": curve.reward[i], "n": curve.read_n[i]})
        examples = pd.DataFrame(columns=["cell_id", "target", "example", "correct"])
        steps = pd.DataFrame(columns=["cell_id", "step", "max_new_tokens", "entropy",
                                      "truncation_rate"])
        return pd.DataFrame(), pd.DataFrame(rows), examples, steps

    monkeypatch.setattr("race.run.ladder.launch_cells", launch_cells)
    monkeypatch.setattr("race.analysis.select.load_results", load_results)
    # a stand-in cell keeps no final state: nothing for the rung above to read
    monkeypatch.setattr("race.run.ladder._refuse_damaged", lambda sweep_dir, parents: None)
    return launched


def test_a_live_sweep_and_the_curve_bank_climb_the_same_ladder_to_the_same_picks(
        tmp_path, monkeypatch, bank):
    selection = SelectionConfig()
    ladder = plan_ladder(len(bank), n_sizes=2, rungs=RUNGS, reduction=2)
    assert ladder.rungs == RUNGS and ladder.counts == (6, 3, 2)
    # live: the sweep's own loop (race.run.ladder.run_ladder) on stand-in launches
    cells = tuple(Cell((), (), spec, 1, PhaseFlops(), "") for spec, _ in bank)
    plan = Plan(FULL, RUNGS[0], (), cells, "arith", None, ladder)
    cfg = SimpleNamespace(launcher=None, selection=selection)
    launched = stand_in_sweep(monkeypatch, bank)
    outcome = run_ladder(plan, cfg, tmp_path, me={})
    live = [r["candidates"] for r in json.loads((tmp_path / "ladder.json").read_text())["rungs"]]
    # the bank: the same curves, replayed as bench/selection_replay.py replays its bank
    reads = bank_reads(CHECKPOINTS, ladder.rungs)
    assert reads == list(RUNGS) and replayable(reads)
    source = BankSource({s.config_id: c for s, c in bank}, {s.config_id: s.model for s, _ in bank},
                        reads, z=selection.z, promote_by=selection.promote_by, guard=bank_guard)
    replayed = climb(source, ladder, [s.config_id for s, _ in bank],
                     keep_sizes=selection.keep_sizes)

    def view(rungs):
        return [[(c["config"], c.get("promoted"), c["guard"], round(c["score"], 12))
                 for c in rung] for rung in rungs]

    assert view(live) == view(replayed)
    assert pick_order(live) == pick_order(replayed)
    # the answer: tiny-m's steady config; its collapsing one led at F/16, was promoted,
    # and its drawdown fired at F/8
    name = {s.config_id: (s.model, s.update_epochs) for s, _ in bank}
    assert name[pick_order(replayed)[0]] == ("tiny-m", 1)
    fell = next(c for c in replayed[1] if name[c["config"]] == ("tiny-m", 2))
    assert fell["guard"].startswith("drawdown") and not fell["promoted"]
    # both ran the same pilots: 6 at F/16, 3 at F/8 (where both collapsing configs'
    # drawdowns fire), the one unguarded config left at F/4
    assert source.pilots == {1 / 16: 6, 1 / 8: 3, 1 / 4: 1}
    assert outcome["ran"] == len(launched) == sum(source.pilots.values())
    assert source.charged == pytest.approx(6 / 16 + 3 / 16 + 1 / 8)


class Scripted:
    """A source that reads fixed scores and stops (returns None) at rung ``stop``."""

    def __init__(self, scores: dict[str, float], stop: int | None = None):
        self.scores, self.stop, self.asked = scores, stop, []

    def run_rung(self, index, configs):
        self.asked.append(list(configs))
        if index == self.stop:
            return None
        return [{"config": c, "model": "m", "score": self.scores[c], "lcb": self.scores[c],
                 "ucb": self.scores[c], "guard": None} for c in configs]


def test_climb_promotes_the_planned_counts_and_stops_where_the_source_cannot_run():
    plan = LadderPlan((0.25, 0.5, 1.0), (4, 2, 1), 1, 0.0)
    scores = {"a": 0.1, "b": 0.4, "c": 0.3, "d": 0.2}
    seen = []
    source = Scripted(scores)
    rungs = climb(source, plan, list(scores), on_rung=lambda i, ranked: seen.append(i))
    assert source.asked == [["a", "b", "c", "d"], ["b", "c"], ["b"]] and seen == [0, 1, 2]
    assert pick_order(rungs) == ["b", "c", "d", "a"]
    stopped = Scripted(scores, stop=1)
    assert len(climb(stopped, plan, list(scores))) == 1 and len(stopped.asked) == 2


def test_fit_to_eval_shrinks_only_a_ladder_whose_eval_leaves_too_little_room():
    plan = LadderPlan((0.25, 0.5), (4, 2), 1, 1.5)
    asked = []

    def replan(room):
        asked.append(room)
        return LadderPlan((0.125, 0.25), (4, 2), 1, room)

    assert fit_to_eval(plan, 0.25, 2.0, replan) is plan  # 1.5 + 0.25 fits 2
    assert fit_to_eval(plan, 2.5, 2.0, replan) is plan  # the eval alone is over: kept
    assert fit_to_eval(plan, 1.0, 2.0, replan).cost_share == 1.0 and asked == [1.0]


def test_the_eval_estimate_counts_each_rung_once_and_reports_at_the_last():
    # 3 rungs of 4, 2, 1 pilots, one evaluation each: 200 problems below the last rung,
    # 600 at its end; two warm starts on 600
    costs = rung_eval_costs(3, 1, select_cost=200, report_cost=600)
    assert costs == [200, 200, 600]
    assert ladder_eval_cost((4, 2, 1), costs, start_cost=2 * 600) == 1200 + 800 + 400 + 600
    assert ladder_eval_cost((4, 2), (1.0, 2.0), seeds=3) == 4 * 3 + 2 * 3 * 2
    assert math.isclose(ladder_eval_cost((), (), start_cost=0.5), 0.5)


def test_pooled_seeds_keep_one_seed_as_it_was_and_widen_with_the_seeds_spread():
    from race.core.rungs import next_rung_bound, pool_seeds

    one = next_rung_bound([0, 1e10], [0.3, 0.5], [1000, 1000], 2e10, z=1.0)
    assert pool_seeds([one]) == pytest.approx(one | {"ucb": one["predicted"] + one["predicted_se"],
                                                    "seeds": 1})
    apart = [next_rung_bound([0, 1e10], [0.3, a], [1000, 1000], 2e10) for a in (0.3, 0.7)]
    pooled = pool_seeds(apart)
    assert pooled["score"] == pytest.approx(0.5)
    assert pooled["se"] == pytest.approx(0.2)  # sd 0.283 / sqrt(2): the seeds, not problems
    alike = pool_seeds([one, one])
    assert alike["se"] == pytest.approx(one["se"] / math.sqrt(2))  # problems: the floor


def test_replicates_fit_the_same_pilot_compute_and_the_bank_pays_for_them(bank):
    single = plan_ladder(len(bank), n_sizes=2, rungs=RUNGS, reduction=2, share=0.5)
    double = plan_ladder(len(bank), n_sizes=2, rungs=RUNGS, reduction=2, share=0.5,
                         replicates=2)
    assert single.cost_share == pytest.approx(0.5) == pytest.approx(double.cost_share)
    assert double.rungs[-1] < single.rungs[-1] and double.replicates == 2
    curves = {s.config_id: c for s, c in bank}
    models = {s.config_id: s.model for s, _ in bank}
    other = {k: [Curve(steady, 0.0)] for k in curves}  # each config's second seed
    reads = bank_reads(CHECKPOINTS, RUNGS)
    source = BankSource(curves, models, reads, replicates=other)
    rungs = climb(source, LadderPlan(RUNGS, (6, 3, 2), 1, 0.0, replicates=2),
                  list(curves), keep_sizes="all")
    assert source.charged == pytest.approx(6 / 16 + 3 / 16 + 2 / 8 + 2 * RUNGS[-1])
    for cand in rungs[-1]:  # the last rung pools the config's seed with the replicate's
        own = curves[cand["config"]].read[list(CHECKPOINTS).index(RUNGS[-1])]
        assert cand["score"] == pytest.approx((own + steady(RUNGS[-1])) / 2)


def test_a_live_ladders_last_rung_runs_each_config_on_more_seeds_with_replicates(
        tmp_path, monkeypatch, bank):
    """selection.replicates=2: the last rung's configs each get a fresh cell on the next
    seed, run to the last rung's budget, pooled with the continued one."""
    selection = SelectionConfig(replicates=2)
    ladder = plan_ladder(len(bank), n_sizes=2, rungs=RUNGS, reduction=2, share=1.0,
                         replicates=2)
    cells = tuple(Cell((), (), spec, 1, PhaseFlops(), "") for spec, _ in bank)
    plan = Plan(FULL, RUNGS[0], (), cells, "arith", None, ladder)
    cfg = SimpleNamespace(launcher=None, selection=selection)
    launched = stand_in_sweep(monkeypatch, bank)
    run_ladder(plan, cfg, tmp_path, me={})
    last = json.loads((tmp_path / "ladder.json").read_text())["rungs"][-1]
    fresh = [launched[c] for c in last["cells"] if launched[c].continues is None]
    assert fresh and {s.seed for s in fresh} == {1}
    assert all(s.budget_flops == pytest.approx(FULL * ladder.rungs[-1]) for s in fresh)
    assert all(len(c["cell_ids"]) == 2 for c in last["candidates"])  # pooled: 2 seeds
