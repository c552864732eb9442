"""The one selection engine: a ladder climbed over a source of curves (pure, no IO).

``race sweep`` (:mod:`race.run.ladder`: its source launches the rung's cells and reads
their rows) and the curve-bank replay (``bench/selection_replay.py``: its source,
:class:`race.core.bank_source.BankSource`, reads recorded curves truncated at the rungs)
both climb with :func:`climb`, so the replay scores the rules a sweep runs:

1. the rungs, shrunk until their charged and planned eval compute fit the pilot budget
   (:func:`fit_to_eval`; the eval estimate's shape is :func:`ladder_eval_cost`);
2. at each rung, the source runs (or continues) the configs still in and returns one
   candidate per config it could read (its score, the bounds a promotion ranks by, the
   guards that fired: :func:`race.core.rungs.next_rung_bound`, :mod:`race.core.guards`);
3. promotions below the last rung (:func:`race.core.rungs.promote`), the last rung ranked
   (:func:`race.core.rungs.rank_last_rung`);
4. the final ranking (:func:`race.core.rungs.final_ranking`): the pick is its first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from race.core.rungs import LadderPlan, final_ranking, promote, rank_last_rung


class CurveSource(Protocol):
    """Where a ladder's curves come from: a live sweep, or a bank of recorded curves."""

    def run_rung(self, index: int, configs: Sequence[str]) -> list[dict] | None:
        """Run ``configs`` to rung ``index`` (continuing them from the rung below) and
        return one candidate per config it could read: ``config``, ``model`` (its
        policy size), ``score``, ``lcb`` and ``ucb`` (the bounds at the next rung a
        promotion ranks by) and ``guard`` (what fired, or None). None: nothing of
        ``configs`` could run (the climb stops there, the rung unrecorded)."""
        ...


def climb(source: CurveSource, plan: LadderPlan, configs: Sequence[str], *,
          keep_sizes: str = "close",
          on_rung: Callable[[int, list[dict]], None] | None = None) -> list[list[dict]]:
    """Climb ``plan``'s rungs with ``configs`` (every config at the first rung).

    Below the last rung, ``plan.counts[index + 1]`` configs are promoted
    (:func:`race.core.rungs.promote` with ``keep_sizes``); the last rung is ranked
    (:func:`race.core.rungs.rank_last_rung`). ``on_rung(index, ranked)`` is called after
    each rung (a live sweep writes ``ladder.json`` there).

    Returns each rung's ranked candidates, first to last (fewer than the plan's rungs when
    the source stopped): :func:`pick_order` reads the pick from them.
    """
    alive, rungs = list(configs), []
    for index in range(len(plan.rungs)):
        candidates = source.run_rung(index, alive)
        if candidates is None:
            break
        last = index == len(plan.rungs) - 1
        ranked = (rank_last_rung(candidates) if last
                  else promote(candidates, plan.counts[index + 1], keep_sizes=keep_sizes))
        rungs.append(ranked)
        if on_rung is not None:
            on_rung(index, ranked)
        alive = [c["config"] for c in ranked if c.get("promoted")]
    return rungs


def pick_order(rungs: Sequence[Sequence[dict]]) -> list[str]:
    """The configs of a climb, best first (:func:`race.core.rungs.final_ranking`)."""
    return [c["config"] for c in final_ranking(rungs)]


def fit_to_eval(plan: LadderPlan, eval_share: float, pilot_budget: float,
                replan: Callable[[float], LadderPlan]) -> LadderPlan:
    """The ladder with its rungs shrunk until its charged compute and its planned eval
    (``eval_share`` of one full run) together fit ``pilot_budget`` full runs:
    ``replan(room)`` plans it at the share left after the eval. ``plan`` itself when it
    fits already, or when the eval alone exceeds the budget (the plan warns instead).

    A rung's eval does not depend on its budget (every checkpoint scores the same
    problems), so the eval share is read once, at the requested rungs.
    """
    room = pilot_budget - eval_share
    if room <= 0 or plan.cost_share <= room * (1 + 1e-9):
        return plan
    return replan(room)


def rung_eval_costs(n_rungs: int, evaluations: int, *, select_cost: float,
                    report_cost: float) -> list[float]:
    """One pilot's eval at each rung when each rung scores ``evaluations`` checkpoints:
    the selection target alone (``select_cost`` each) below the last rung's end, every
    target there (``report_cost``: a ladder reports only what its last rung reached)."""
    below = evaluations * select_cost
    return [below] * (n_rungs - 1) + [(evaluations - 1) * select_cost + report_cost]


def ladder_eval_cost(counts: Sequence[float], rung_costs: Sequence[float], *,
                     seeds: int = 1, start_cost: float = 0.0, replicates: int = 1) -> float:
    """A ladder's planned eval: ``start_cost`` (each warm start scored once), then per
    rung its ``counts[i] x seeds`` pilots at ``rung_costs[i]`` each (a continued cell
    scores only its checkpoints above the rung below), and the last rung's ``replicates -
    1`` extra seeds at its cost (an upper bound: a fresh cell scores the last rung's
    checkpoints). In the units of the costs."""
    total = start_cost
    for count, cost in zip(counts, rung_costs):
        total += count * seeds * cost
    extra = counts[-1] * seeds * (replicates - 1) * rung_costs[-1] if replicates > 1 else 0.0
    return total + extra
