"""Guards against late failure (race/guards.py): each fires on a synthetic failure with
the numbers that say so, and stays quiet on a clean rising curve; selection demotes a
guarded config and never extrapolates it."""

import functools
import math

import pandas as pd
import pytest

from race.analysis import aggregate
from race.analysis.select import select_for_validation
from race.core import guards
from race.core.stats import binomial_se

RISING = [0.20, 0.26, 0.31, 0.35, 0.38]  # a clean learning curve
COLLAPSE = [0.20, 0.35, 0.47, 0.30, 0.12]  # peaks, then falls (the mu=2 collapse)
N = 128


def test_standard_error_is_binomial():
    assert binomial_se(0.3, 1000, floor=False) == pytest.approx(math.sqrt(0.21 / 1000))
    assert binomial_se(0.0, 50, floor=False) == 0.0
    assert binomial_se(0.5, 0, floor=False) == math.inf


def test_drawdown_fires_on_a_collapse_and_not_on_a_rising_curve():
    verdict = guards.drawdown(COLLAPSE, N)
    # best 0.47 at checkpoint 2, last 0.12: margin max(0.03, 3.5 * hypot(
    # sqrt(0.47 * 0.53 / 128), sqrt(0.12 * 0.88 / 128))) = 3.5 * 0.05264 = 0.184
    assert verdict.fired and verdict.guard == "drawdown"
    assert "best 0.470 at checkpoint 2" in verdict.evidence and "drop 0.350" in verdict.evidence
    assert "margin 0.184" in verdict.evidence
    assert not guards.drawdown(RISING, N).fired


def test_drawdown_ignores_a_dip_within_the_noise():
    # 0.40 -> 0.36 on 128 problems: 0.04 < 2 SE = 0.0866
    assert not guards.drawdown([0.2, 0.4, 0.36], N).fired
    # the same dip on 10,000 problems is beyond 2 SE = 0.0098 and the 0.03 floor
    assert guards.drawdown([0.2, 0.4, 0.36], 10_000).fired


def test_reward_hacking_fires_when_the_proxy_rises_as_accuracy_falls():
    proxy = [0.50, 0.60, 0.64, 0.80, 0.90]  # the PRM's score keeps rising ...
    accuracy = [0.20, 0.40, 0.47, 0.25, 0.02]  # ... while the verifier's falls
    verdict = guards.reward_hacking(proxy, accuracy, N)
    assert verdict.fired
    assert "0.640 -> 0.900" in verdict.evidence and "0.470 -> 0.020" in verdict.evidence


def test_reward_hacking_stays_quiet_when_both_rise_or_the_proxy_is_flat():
    assert not guards.reward_hacking([0.5, 0.6, 0.7, 0.8, 0.85], RISING, N).fired
    # a rule reward: the proxy is the accuracy itself, so it cannot rise while it falls
    assert not guards.reward_hacking(COLLAPSE, COLLAPSE, N).fired
    assert not guards.reward_hacking([0.9], [0.1], N).fired  # one checkpoint: nothing to compare


def test_reward_hacking_sees_a_collapse_that_came_before_its_window():
    # a PRM-trained tiny-l seed of the testbed bank (val, 500 problems): accuracy peaks at
    # 0.696, falls to 0 by the next checkpoint but one and stays there, while the PRM's
    # score jumps and stays flat: over the window nothing moves, from the best it all did
    proxy = [0.479, 0.526, 0.552, 0.569, 0.565, 0.613, 0.596, 0.623, 0.621, 0.622, 0.888,
             0.893, 0.887]
    accuracy = [0.416, 0.504, 0.566, 0.586, 0.592, 0.676, 0.6, 0.618, 0.696, 0.688, 0.0,
                0.0, 0.0]
    verdict = guards.reward_hacking(proxy, accuracy, 500)
    assert verdict.fired
    assert verdict.evidence.startswith("from its best accuracy (checkpoint 8)")
    assert "0.621 -> 0.887" in verdict.evidence and "0.696 -> 0.000" in verdict.evidence
    # the same curve with accuracy back at its best: no fall, no verdict, from either anchor
    assert not guards.reward_hacking(proxy, accuracy[:-1] + [0.70], 500).fired
    # and a drop the proxy did not pay for is a drawdown, not reward hacking
    assert not guards.reward_hacking(proxy[:10] + [0.62] * 3, accuracy, 500).fired


def test_precursors():
    collapse = guards.entropy_collapse([1.2, 0.9, 0.4, 0.15])
    assert collapse.fired and "12% of the first step's" in collapse.evidence
    assert not guards.entropy_collapse([1.2, 1.0, 0.9]).fired
    assert not guards.entropy_collapse([]).fired
    assert guards.truncation([0.1, 0.6]).fired and not guards.truncation([0.6, 0.4]).fired


def test_check_cell_on_a_clean_curve_fires_nothing():
    verdicts = guards.check_cell(RISING, RISING, N, [1.1, 1.0, 0.95], [0.2, 0.1])
    assert [v.guard for v in verdicts] == ["drawdown", "reward_hacking", "entropy_collapse",
                                          "truncation"]
    assert not any(v.fired for v in verdicts)


def _frames():
    curves = {"clean": (RISING, RISING), "hacked": ([0.5, 0.6, 0.64, 0.8, 0.9],
                                                   [0.2, 0.4, 0.47, 0.25, 0.02])}
    evals, examples = [], []
    for cell, (proxy, accuracy) in curves.items():
        for i, (r, a) in enumerate(zip(proxy, accuracy)):
            evals.append({"cell_id": cell, "config_id": f"cfg-{cell}", "target": "test",
                          "checkpoint": i / 4, "flops": float(i), "accuracy": a,
                          "mean_reward": r})
        examples += [{"cell_id": cell, "target": "test", "example": j, "correct": 0}
                     for j in range(N)]
    # the last step shortened its cap to fit the budget: all its completions hit it, and
    # its few sampled tokens are the most certain ones (NLL near 0)
    steps = pd.DataFrame([{"cell_id": c, "step": s, "max_new_tokens": cap, "entropy": nll,
                           "truncation_rate": rate}
                          for c in curves for s, cap, rate, nll in ((1, 40, 0.1, 1.0),
                                                                    (2, 40, 0.1, 0.9),
                                                                    (3, 7, 1.0, 0.01))])
    return pd.DataFrame(evals), pd.DataFrame(examples), steps


def test_precursors_read_the_steps_at_the_full_cap():
    assert guards.at_full_cap([1.0, 0.9, 0.01], [40, 40, 7]) == [1.0, 0.9]
    assert guards.at_full_cap([1.0, 0.9, 0.01], [None, None, None]) == [1.0, 0.9]
    assert guards.at_full_cap([1.0, 0.9, 0.01], []) == [1.0, 0.9]  # no caps logged
    collapsed = guards.at_full_cap([1.0, 0.9, 0.1, 0.05], [40, 40, 40, 12])
    assert guards.entropy_collapse(collapsed).fired  # 1.0 -> 0.1 at the full cap


def test_guard_cells_names_the_cell_and_config():
    evals, examples, steps = _frames()
    checks = aggregate.guard_cells(evals, examples, steps, target="test")
    fired = checks[checks["fired"]]
    assert set(zip(fired["cell_id"], fired["guard"])) == {("hacked", "drawdown"),
                                                          ("hacked", "reward_hacking")}
    assert set(fired["config_id"]) == {"cfg-hacked"}
    assert len(checks) == 8  # 4 guards x 2 cells
    truncation = checks[checks["guard"] == "truncation"]
    assert not truncation["fired"].any()  # read at the full cap: 10%, not the last 100%
    assert all("10% of the last step's" in e for e in truncation["evidence"])
    entropy = checks[checks["guard"] == "entropy_collapse"]
    assert not entropy["fired"].any()  # read at the full cap: 1.0 -> 0.9, not -> 0.01
    assert all("1.000 -> 0.900 nats/token" in e for e in entropy["evidence"])
    steps.loc[steps["step"] == 2, "truncation_rate"] = 0.9  # the last full-cap step
    again = aggregate.guard_cells(evals, examples, steps, target="test")
    assert again[again["guard"] == "truncation"]["fired"].all()
    # rows from before caps were logged: the last step, which may be shortened, is left out
    older = aggregate.guard_cells(evals, examples, steps.drop(columns="max_new_tokens"),
                                  target="test")
    assert older[older["guard"] == "truncation"]["fired"].all()  # 90% at step 2


def test_selection_demotes_a_guarded_config_and_does_not_extrapolate_it():
    configs = pd.DataFrame([
        {"config_id": "hacked", "rank": 1, "mean": 0.6, "lo": 0.5, "hi": 0.7,
         "regime": "feedback-heavy", "model": "tiny-m", "reward": "prm", "target": "test"},
        {"config_id": "clean", "rank": 2, "mean": 0.4, "lo": 0.3, "hi": 0.5,
         "regime": "search-heavy", "model": "tiny-m", "reward": "rule", "target": "test"}])
    fits = pd.DataFrame([
        {"config_id": c, "cell_id": f"{c}-0", "method": "sigmoid", "prediction": p,
         "lo": p - 0.05, "hi": p + 0.05, "predict_at": 1e12, "r2": 0.9, "reason": ""}
        for c, p in (("hacked", 0.9), ("clean", 0.45))])
    chosen = select_for_validation(configs, fits, k=2,
                                   guarded={"hacked": "reward_hacking (...)"})
    assert [c["config_id"] for c in chosen] == ["clean", "hacked"]
    assert chosen[0]["basis_used"] == "extrapolated" and chosen[0]["guard"] is None
    hacked = chosen[1]
    assert hacked["basis_used"] == "observed" and hacked["score"] == 0.6
    assert hacked["why"] == "guarded" and "guard fired: reward_hacking" in hacked["reason"]
    only = select_for_validation(configs, fits, k=1,
                                           guarded={"hacked": "reward_hacking (...)"})
    assert [c["config_id"] for c in only] == ["clean"]


def test_each_step_logs_the_precursors_guards_read():
    from race.pilot.evaluate import precursors
    from race.pilot.rollout.base import Rollouts

    out = Rollouts(prompt_index=(0, 0), prompt_ids=((1,), (1,)), completion_ids=((5, 6), (7,)),
                   logprobs=((-0.5, -1.5), (-1.0,)), texts=("a", "b"),
                   finished=(True, False), flops_model=0.0, flops_executed=0.0)
    assert precursors(out) == {"truncation_rate": 0.5, "entropy": 1.0}


def test_drawdown_margin_is_the_standard_error_of_the_difference():
    # best 0.40 on 128 problems (SE 0.0433), last 0.30 on 1000 (SE 0.0145): the SE of the
    # difference is hypot(0.0433, 0.0145) = 0.0457, so a 0.10 drop is within 3.5 of them;
    # on 1000 problems each (hypot 0.0212, margin 0.074) it is not
    curve = [0.2, 0.40, 0.30]
    assert not guards.drawdown(curve, [128, 128, 1000]).fired
    assert "n=128" in guards.drawdown(curve, [128, 128, 1000]).evidence
    assert guards.drawdown(curve, [1000, 1000, 1000]).fired


@functools.cache
def _default_rungs() -> tuple[float, ...]:
    from race.run.grid import plan_grid

    return plan_grid([]).ladder.rungs


def _default_sweep_curves(rng, accuracy) -> list[list[tuple[list[float], int]]]:
    """Each rung of the default ladder as planned (its rungs shrunk to fit the pilot
    budget): for every config still running, its curve so far (the start, then each
    rung's checkpoints above the rung below, ``selection.rung_checkpoints``) with binomial
    noise on the same ``n`` problems at every checkpoint (``pilot.select_examples``)."""

    from race.config import PilotConfig, SelectionConfig
    from race.core.rungs import DEFAULT_REDUCTION

    n = PilotConfig().select_examples
    rungs, configs = list(_default_rungs()), 16
    checkpoints = sorted(SelectionConfig().rung_checkpoints)
    points = [0.0]
    out = []
    for i, rung in enumerate(rungs):
        below = rungs[i - 1] if i else 0.0
        points += [c * rung for c in checkpoints if c * rung > below * (1 + 1e-9)]
        alive = max(2, configs // DEFAULT_REDUCTION ** i)
        out.append([([float(rng.binomial(n, accuracy(f)) / n) for f in points], n)
                    for _ in range(alive)])
    return out


def test_drawdown_rarely_fires_on_flat_curves_over_a_whole_default_sweep():
    import numpy as np

    rng = np.random.default_rng(0)
    sweeps = 400
    fired = sum(any(guards.drawdown(curve, n).fired for rung in
                    _default_sweep_curves(rng, lambda f: 0.4) for curve, n in rung)
                for _ in range(sweeps))
    assert fired / sweeps < 0.05, f"drawdown fired on {fired} of {sweeps} flat sweeps"


def test_drawdown_still_fires_on_a_real_collapse():
    import numpy as np

    rng = np.random.default_rng(1)
    second, last = _default_rungs()[1], _default_rungs()[-1]

    # rises to 0.5 by the second rung, then collapses by ``drop`` by the last (a late
    # overshoot); the default's 200 problems per checkpoint and z=3.5 put the margin near
    # 0.17: a 0.3 collapse is caught nearly always, a 0.2 one about 4 times in 5
    def caught(drop: float) -> int:
        def collapse(f):
            return (0.4 + 0.1 * min(1.0, f / second)
                    - drop * max(0.0, (f - second) / (last - second)))
        return sum(guards.drawdown(*_default_sweep_curves(rng, collapse)[-1][0]).fired
                   for _ in range(100))

    assert caught(0.3) >= 95
    assert 70 <= caught(0.2) < 95


def test_the_report_reads_the_guard_thresholds_the_sweep_ran_with(tmp_path):
    from race.analysis.sweep_analysis import _guard_thresholds
    from race.config import GuardConfig, RaceConfig
    from race.store import io as results

    assert _guard_thresholds(tmp_path) == guards.DEFAULT  # no sweep.json: the defaults
    assert GuardConfig().thresholds() == guards.DEFAULT  # the config's defaults are these
    looser = {"floor": 0.1, "z": 3.0, "reward_rise": 0.2, "window": 3, "entropy_floor": 0.1,
              "max_truncation": 0.9}
    results.write_json(tmp_path / "sweep.json", {"config": {"selection": {"guards": looser}}})
    assert _guard_thresholds(tmp_path) == guards.GuardThresholds(**looser)
    assert RaceConfig.__dataclass_fields__["selection"]  # the schema holds them
