"""Whether a sweep's pilots can rank its configs: reliability read from the sweep's own
reads, with no full-budget truth (pure: numpy).

A ranking of configs by their pilot scores is only as good as the scores' signal against
their noise. Three diagnostics, each computed from what a sweep already measured:

- **problem reliability** (:func:`problem_reliability`): at one rung (or a flat sweep's
  pilot end), every config read on the same problems (their per-problem ``correct`` lists
  pair up). Split the problems into two random halves, score each config on each half,
  and correlate the two halves' scores across configs, within policy size (each size's
  mean removed: the ladder keeps one config per size, so what it must rank is the order
  inside a size). Averaged over ``splits`` random splits and stepped up to the whole
  problem set by Spearman-Brown, ``2 r / (1 + r)``. It is the share of the spread of
  the configs' scores that is not problem noise (1: the order would not change on other
  problems; 0: it is a draw). A single odd/even split is one draw of the split and can
  mislead: random splits, averaged.
- **rung agreement** (:func:`rung_agreement`): Kendall's tau between two consecutive
  rungs' scores over the configs that ran both. Curves that settle keep their order.
- **share past the warm start** (:func:`share_past_start`): the configs whose first read
  is above their own warm start. Where few are, the configs differ by noise more than
  by what they learned.

:func:`verdict` turns them into one of ``can rank``, ``weakly`` or ``cannot``, with the
thresholds of :data:`THRESHOLDS` (calibrated on the testbed's worlds 1 and 2 before world
3 existed; ``bench/reliability.py`` prints the calibration). :func:`problems_needed` is
Spearman-Brown's prophecy: the problems per read that would lift a reliability to a target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

VERDICTS = ("can rank", "weakly", "cannot")
SPLITS = 50  # random split halves averaged (one split is a single draw)
SPLIT_SEED = 0  # the splits' RNG seed: a report reads the same number every time


@dataclass(frozen=True, slots=True)
class ReliabilityThresholds:
    """Where the verdict changes (frozen before world 3; ``bench/reliability.py``).

    ``can rank``: problem reliability at least ``can`` and, where two rungs exist, their
    agreement at least ``agreement``; ``cannot``: reliability below ``cannot``, or
    reliability below ``can`` with agreement below ``agreement``; ``weakly``: between.
    ``target``: the reliability a recommendation aims for (problems, fraction).
    """

    can: float = 0.84
    cannot: float = 0.70
    agreement: float = 0.30
    target: float = 0.84


# Calibrated on worlds 1 and 2 (bench/reliability.py, leave-one-seed-out replicates of
# the default-shaped grids, the ladder's first rung): see its docstring for the numbers.
THRESHOLDS = ReliabilityThresholds()


def _centered(scores: np.ndarray, groups: Sequence[str]) -> np.ndarray:
    """``scores`` (configs, ...) with each group's mean over its configs removed; the
    configs of a group with one member are dropped (nothing to rank inside it)."""
    groups = np.asarray(groups)
    keep = np.zeros(len(groups), bool)
    out = np.array(scores, dtype=float)
    for g in np.unique(groups):
        mine = groups == g
        if mine.sum() >= 2:
            keep |= mine
            out[mine] = out[mine] - out[mine].mean(axis=0)
    return out[keep]


def problem_reliability(correct: np.ndarray, groups: Sequence[str], *, splits: int = SPLITS,
                        seed: int = SPLIT_SEED) -> float:
    """Split-half reliability of the configs' scores against problem noise.

    Args:
        correct: (configs, problems) 0/1, every config scored on the same problems.
        groups: (configs,) each config's policy size; scores are compared within a size.
        splits: random split halves averaged.

    Returns:
        Spearman-Brown ``2 r / (1 + r)`` of the mean half-to-half Pearson r across
        configs (within size; across all of them where fewer than 3 configs share a
        size with another), clipped to [0, 1]; NaN with fewer than 3 configs or 4
        problems. Configs that all score alike on both halves (no spread):
        0, nothing to rank.
    """
    correct = np.asarray(correct, dtype=float)
    n_configs, n_problems = correct.shape
    if len(_centered(np.zeros(n_configs), groups)) < 3:
        groups = ["all"] * n_configs  # too few to rank within a size: across configs
    if n_problems < 4 or n_configs < 3:
        return math.nan
    rng = np.random.default_rng(seed)
    rs = []
    for _ in range(splits):
        order = rng.permutation(n_problems)
        a, b = order[: n_problems // 2], order[n_problems // 2:]
        halves = _centered(np.stack([correct[:, a].mean(1), correct[:, b].mean(1)], 1),
                           groups)
        x, y = halves[:, 0], halves[:, 1]
        denom = math.sqrt(float((x ** 2).sum() * (y ** 2).sum()))
        rs.append(float((x * y).sum()) / denom if denom > 0 else 0.0)
    r = float(np.mean(rs))
    return float(min(1.0, max(0.0, 2 * r / (1 + r)))) if r > -1 else 0.0


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-a of two paired score lists (NaN with fewer than 3 pairs)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n < 3:
        return math.nan
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    return float((dx * dy)[np.triu_indices(n, 1)].sum() / (n * (n - 1) / 2))


def rung_agreement(before: Mapping[str, float], after: Mapping[str, float],
                   groups: Mapping[str, str]) -> float:
    """Kendall's tau between two rungs' scores over the configs that ran both, within
    size (each size's pairs counted, pooled); NaN with fewer than 3 such pairs."""
    both = [c for c in before if c in after]
    concordant = pairs = 0.0
    for g in {groups[c] for c in both}:
        mine = [c for c in both if groups[c] == g]
        for i, a in enumerate(mine):
            for b in mine[i + 1:]:
                concordant += (np.sign(before[a] - before[b])
                               * np.sign(after[a] - after[b]))
                pairs += 1
    return float(concordant / pairs) if pairs >= 3 else math.nan


def share_past_start(scores: Mapping[str, float], starts: Mapping[str, float]) -> float:
    """The share of configs scoring above their warm start (``starts``: config -> its
    own warm-start score on the same target); NaN with none known."""
    known = [c for c in scores if c in starts]
    if not known:
        return math.nan
    return float(np.mean([scores[c] > starts[c] for c in known]))


def problems_needed(reliability: float, problems: int, target: float) -> int | None:
    """Spearman-Brown's prophecy: the problems per read at which ``reliability`` (on
    ``problems``) reaches ``target``. None when it is 0 or unknown (more problems cannot
    rank configs that do not differ)."""
    if math.isnan(reliability) or reliability <= 0:
        return None
    if reliability >= target:
        return problems
    factor = target * (1 - reliability) / (reliability * (1 - target))
    return int(math.ceil(problems * factor))


def verdict(reliability: float, agreement: float = math.nan,
            t: ReliabilityThresholds = THRESHOLDS) -> str:
    """``can rank``, ``weakly`` or ``cannot`` (:class:`ReliabilityThresholds`); an
    unknown reliability (too few configs to compare) reads ``weakly``."""
    if math.isnan(reliability):
        return "weakly"
    low_agreement = not math.isnan(agreement) and agreement < t.agreement
    if reliability < t.cannot or (reliability < t.can and low_agreement):
        return "cannot"
    if reliability >= t.can and not low_agreement:
        return "can rank"
    return "weakly"
