"""The successive-halving ladder: which configs get more pilot compute (pure, no IO).

Every config runs to the first rung (a fraction of the full budget F, by default F/48);
the best ``1/reduction`` of them (half) continue from their checkpoints to the next rung
(F/24), the best half of those to F/12, and the best of those to F/6. Less pilot
compute than a flat grid of 1/16 pilots is spent on fewer, longer runs, so the decision
rests on curves nearer the full budget (multi-fidelity search: successive halving,
Hyperband, ASHA). Halving, not quartering: on this task configs of one size separate
only from about F/32, so a deep early cut is made on noise.

Promotion ranks configs by a *lower confidence bound of their score*: by default
(``promote_by="last"``) the accuracy at this rung's end minus ``z`` standard errors;
with ``promote_by="trend"``, the score predicted at the next rung, never at F: the
accuracy at this rung plus the trend of its last checkpoints carried one rung further (a
line in log FLOPs), minus ``z`` standard errors of both. A ladder scores only its rung
ends, so a trend rests on two or three rung-end reads: from two, the prediction
``2 p2 - p1`` (rungs doubling) has five times the variance of ``p2`` alone; on the
curve bank's tuning half ``last`` regretted no more than ``trend`` at any geometry (at
the default one 0.012 against 0.019, inside one SE; ``bench/selection_replay.py`` tunes
``promote_by`` with the geometry). A config
whose guards fired (:mod:`race.core.guards`) is never promoted, and each policy size keeps at
least one config as long as it has an unguarded one whose upper confidence bound
reaches the leader's lower bound (``keep_sizes="close"``; ``"all"``: as long as
it has one), so that the size axis is decided where the sizes are close, and a size that
is clearly behind gives its place to a config of the leading size. The pick
(:func:`final_ranking`) reads each config at the highest rung it reached: unguarded
first, the higher rung first within a size, sizes by score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from race.core.stats import binomial_se

# Four rungs of halving, F/48 -> F/24 -> F/12 -> F/6: chosen on the curve bank's tuning
# half over reductions 2-4 and 2-4 rungs (bench/selection_replay.py, docs/reports.md).
DEFAULT_RUNGS = (1 / 48, 1 / 24, 1 / 12, 1 / 6)
DEFAULT_REDUCTION = 2
# which sizes keep a config at each rung (promote): those close to the leader, or all
KEEP_SIZES = ("close", "all")
# what a promotion reads (next_rung_bound): the rung's end alone, or its end plus the
# trend of the rung ends carried to the next rung; "last" chosen on the curve bank's
# tuning half (bench/selection_replay.py, docs/reports.md)
PROMOTE_BY = ("last", "trend")
DEFAULT_PROMOTE_BY = "last"


def geometric_rungs(n_rungs: int, reduction: int) -> tuple[float, ...]:
    """``n_rungs`` rungs, each ``reduction`` times the one before, the last at F/reduction
    (``geometric_rungs(3, 4)`` is F/64 -> F/16 -> F/4): each rung gives its configs as
    many times more compute as it keeps fewer of them."""
    return tuple(float(reduction) ** -(n_rungs - i) for i in range(n_rungs))


@dataclass(frozen=True, slots=True)
class LadderPlan:
    """A ladder's rungs and how many configs reach each.

    Attributes:
        rungs: budget of each rung as a fraction of the full budget F (ascending), after
            any shrinking to fit ``share``.
        counts: configs planned at each rung (the first: every config).
        seeds: cells (seeds) per config.
        cost_share: the whole ladder's pilot compute as a share of one full run (each
            continued cell pays only its increment over the rung before).
        scaled: the factor the requested rungs were multiplied by to fit ``share`` (1.0:
            they fit as given).
        replicates: seeds each config of the last rung is read on (``selection.replicates``):
            the first continued, the others run afresh to the last rung's budget.
    """

    rungs: tuple[float, ...]
    counts: tuple[int, ...]
    seeds: int
    cost_share: float
    scaled: float = 1.0
    replicates: int = 1


def fmt_fraction(fraction: float) -> str:
    """A budget fraction as ``F/64`` (or ``0.3 F`` when not a unit fraction)."""
    inverse = 1 / fraction
    return f"F/{inverse:.0f}" if abs(inverse - round(inverse)) < 1e-6 else f"{fraction:.3g} F"


def rung_counts(n_configs: int, n_rungs: int, reduction: int, n_sizes: int = 1) -> tuple[int, ...]:
    """Configs at each rung: all at the first, then ``ceil(n / reduction)`` but at least
    one per policy size (never more than the rung before)."""
    counts = [n_configs]
    for _ in range(n_rungs - 1):
        before = counts[-1]
        counts.append(min(before, max(math.ceil(before / reduction), n_sizes, 1)))
    return tuple(counts)


def ladder_cost(rungs: Sequence[float], counts: Sequence[int], seeds: int,
                replicates: int = 1) -> float:
    """Pilot compute of a ladder as a share of one full run: each rung's cells pay only
    their increment over the rung before (a continued cell resumes its checkpoint); each
    of the last rung's ``replicates - 1`` extra seeds runs afresh to the last rung."""
    spent, before = 0.0, 0.0
    for rung, count in zip(rungs, counts):
        spent += count * seeds * (rung - before)
        before = rung
    return spent + (counts[-1] * seeds * (replicates - 1) * rungs[-1] if replicates > 1 else 0.0)


def plan_ladder(n_configs: int, *, seeds: int = 1, n_sizes: int = 1,
                rungs: Sequence[float] = DEFAULT_RUNGS,
                reduction: int = DEFAULT_REDUCTION, share: float = 1.0,
                fill: bool = False, replicates: int = 1) -> LadderPlan:
    """The ladder for ``n_configs`` configs of ``seeds`` cells each (the last rung's
    configs on ``replicates`` seeds each, within the same ``share``).

    When the rungs as given would cost more than ``share`` of one full run (a large
    grid), every rung shrinks by one factor until the ladder costs exactly ``share``.
    With ``fill``, cheaper rungs also grow by one factor to cost ``share`` (the first
    rung as late as the share allows), as long as the last stays within F.
    """
    counts = rung_counts(n_configs, len(rungs), reduction, n_sizes)
    cost = ladder_cost(rungs, counts, seeds, replicates)
    scale = share / cost if cost > 0 else 1.0
    scale = min(scale, 1 / rungs[-1]) if fill else min(scale, 1.0)
    return LadderPlan(tuple(r * scale for r in rungs), counts, seeds, cost * scale, scale,
                      replicates)


def trend_per_log_flops(flops: Sequence[float], accuracy: Sequence[float],
                        n_problems: Sequence[int], last: int = 4) -> tuple[float, float]:
    """Slope of accuracy against ln(FLOPs) over the last ``last`` checkpoints (flops > 0),
    weighted by each checkpoint's binomial variance, and its standard error.

    (0, 0) with fewer than 2 such checkpoints: no trend is claimed.
    """
    points = [(f, a, n) for f, a, n in zip(flops, accuracy, n_problems) if f > 0][-last:]
    if len(points) < 2:
        return 0.0, 0.0
    x = np.log([p[0] for p in points])
    y = np.array([p[1] for p in points])
    var = np.array([binomial_se(a, n) ** 2 for _, a, n in points])
    w = 1 / var
    xm = np.sum(w * x) / np.sum(w)
    sxx = np.sum(w * (x - xm) ** 2)
    if sxx <= 0:
        return 0.0, 0.0
    slope = float(np.sum(w * (x - xm) * (y - np.sum(w * y) / np.sum(w))) / sxx)
    return slope, float(math.sqrt(1 / sxx))


def next_rung_bound(flops: Sequence[float], accuracy: Sequence[float],
                    n_problems: Sequence[int], next_flops: float, *,
                    z: float = 1.0, promote_by: str = DEFAULT_PROMOTE_BY) -> dict:
    """A cell's score now and the lower confidence bound a promotion ranks it by.

    ``promote_by="trend"``: the prediction is the last checkpoint's accuracy plus the
    trend of the last checkpoints carried to ``next_flops`` (one rung: never to F),
    clipped to [0, 1]; its standard error adds the last checkpoint's binomial SE and the
    slope's, times the log distance. ``promote_by="last"``: the prediction is the last
    checkpoint's accuracy itself, with its binomial SE (no trend is claimed).

    Returns ``{"score", "se", "predicted", "predicted_se", "lcb"}``.
    """
    if promote_by not in PROMOTE_BY:
        raise ValueError(f"promote_by={promote_by!r}: one of {', '.join(PROMOTE_BY)}")
    p, n = float(accuracy[-1]), int(n_problems[-1])
    se = binomial_se(p, n)
    slope, slope_se = (trend_per_log_flops(flops, accuracy, n_problems)
                       if promote_by == "trend" else (0.0, 0.0))
    distance = math.log(next_flops / flops[-1]) if flops[-1] > 0 and next_flops > 0 else 0.0
    predicted = min(1.0, max(0.0, p + slope * distance))
    predicted_se = math.sqrt(se ** 2 + (slope_se * distance) ** 2)
    return {"score": p, "se": se, "predicted": predicted, "predicted_se": predicted_se,
            "lcb": predicted - z * predicted_se}


def pool_seeds(bounds: Sequence[dict], z: float = 1.0) -> dict:
    """One config's :func:`next_rung_bound` results on several seeds, pooled: the seed
    means of ``score`` and ``predicted``, and their SEs from the problems (each seed's
    binomial SE) or, with two seeds or more, from the seeds' spread where that is larger
    (the seed-to-seed noise a one-seed read cannot see). Returns the keys of
    :func:`next_rung_bound` plus ``ucb`` and ``seeds``."""
    k = len(bounds)
    out = {"seeds": k}
    for key, se_key in (("score", "se"), ("predicted", "predicted_se")):
        values = [b[key] for b in bounds]
        mean = sum(values) / k
        problems = math.sqrt(sum(b[se_key] ** 2 for b in bounds)) / k
        spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1) / k) if k > 1 else 0.0
        out |= {key: mean, se_key: max(problems, spread)}
    return out | {"lcb": out["predicted"] - z * out["predicted_se"],
                  "ucb": out["predicted"] + z * out["predicted_se"]}


def promote(candidates: list[dict], count: int, *, keep_sizes: str = "close") -> list[dict]:
    """Choose ``count`` configs to continue, from one rung's candidates.

    Args:
        candidates: one dict per config: ``config``, ``model`` (its policy size),
            ``lcb`` and ``ucb`` (seed-mean lower and upper bounds at the next rung; higher
            is better; no ``ucb``: never behind) and ``guard`` (what fired, or a falsy
            value).
        count: configs the next rung holds.
        keep_sizes: ``"close"``: a size left out of the top ``count`` keeps its best
            config when that config's ``ucb`` reaches the leader's ``lcb``; ``"all"``:
            always (one of each size reaches the next rung).

    Returns every candidate, in rank order (unguarded by ``lcb``, then guarded by ``lcb``), each
    with ``promoted`` (bool) and ``why``: "top lcb", "best of its size" (kept so that
    each size reaches the next rung), "guard fired: ...", "below the cut", or "below the
    cut, its size behind the leader".
    """
    if keep_sizes not in KEEP_SIZES:
        raise ValueError(f"keep_sizes={keep_sizes!r}: one of {', '.join(KEEP_SIZES)}")
    clean = sorted((c for c in candidates if not c.get("guard")),
                   key=lambda c: (-c["lcb"], c["config"]))
    chosen = clean[:count]
    behind = set()
    for size in dict.fromkeys(c["model"] for c in clean):  # sizes in rank order
        if any(c["model"] == size for c in chosen):
            continue
        best = next(c for c in clean if c["model"] == size)
        if keep_sizes == "close" and best.get("ucb", math.inf) < clean[0]["lcb"]:
            behind.add(size)  # clearly behind the leader: its place goes to the leader's
            continue
        counts = {m: sum(c["model"] == m for c in chosen) for m in {c["model"] for c in chosen}}
        crowded = [c for c in reversed(chosen) if counts[c["model"]] > 1]
        if crowded:  # give up the lowest-ranked config of a size that has several
            chosen.remove(crowded[0])
        chosen.append(best)
    ranked = []
    for cand in clean:
        if cand in chosen:
            top = clean.index(cand) < count and cand in clean[:count]
            ranked.append(cand | {"promoted": True,
                                  "why": "top lcb" if top else "best of its size"})
        else:
            why = "below the cut" + (", its size behind the leader"
                                     if cand["model"] in behind else "")
            ranked.append(cand | {"promoted": False, "why": why})
    guarded = sorted((c for c in candidates if c.get("guard")),
                     key=lambda c: (-c["lcb"], c["config"]))  # ranked too, after the rest
    ranked += [c | {"promoted": False, "why": f"guard fired: {c['guard']}"} for c in guarded]
    return ranked


def rank_last_rung(candidates: list[dict]) -> list[dict]:
    """The last rung's candidates in rank order: unguarded by score, then guarded by score
    (nothing is promoted from the last rung)."""
    return sorted(candidates, key=lambda c: (bool(c.get("guard")), -c["score"], c["config"]))


def final_ranking(rungs: Sequence[Sequence[dict]]) -> list[dict]:
    """Every config of a ladder, best first, from each rung's ranked candidates.

    Args:
        rungs: per rung (first to last), its candidates in the order the rung ranked them
            (the last rung: :func:`rank_last_rung`; a lower rung: :func:`promote`).
            Each has ``config``, ``model`` (its policy size), ``score`` and ``guard``.

    A config is read at the highest rung it reached (a promoted config whose cells failed
    above is read where it last ran). Unguarded configs come first, guarded ones after
    them (highest rung first). Within a policy size, a higher rung comes first whatever
    its score: a config continued past a rung was ranked above the ones stopped there, on
    more evidence. Across sizes, the sizes' orders are merged by score, so that a size
    whose last-rung config was guarded competes with its best config stopped lower
    instead of losing to a weaker size's last-rung config by default. Configs read at
    different rungs are compared at the highest rung both reached (on rising curves a
    higher rung scores higher for its compute alone).

    Returns the candidates (as given, plus ``rung``: 1-based index of the rung read).
    """
    read, seen = [], set()
    score_at = {(c["config"], index + 1): c["score"] for index, rung in enumerate(rungs)
                for c in rung}
    for index in range(len(rungs) - 1, -1, -1):
        for cand in rungs[index]:
            if cand["config"] not in seen:
                seen.add(cand["config"])
                read.append(cand | {"rung": index + 1})
    clean = [c for c in read if not c.get("guard")]
    queues = {}  # per size, its configs in rung-then-rank order
    for cand in clean:
        queues.setdefault(cand["model"], []).append(cand)
    merged = []
    while queues:
        common = min(q[0]["rung"] for q in queues.values())  # every head reached it
        size = max(queues, key=lambda m: (score_at[queues[m][0]["config"], common],
                                          queues[m][0]["rung"], m))
        merged.append(queues[size].pop(0))
        if not queues[size]:
            del queues[size]
    return merged + [c for c in read if c.get("guard")]
