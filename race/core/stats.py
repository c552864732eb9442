"""The binomial standard error of an accuracy, the one spelling every ranking, interval,
guard and promotion reads; and the statistics a report uses when nothing else is said
(pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist


def binomial_se(accuracy: float, n_problems: int, *, floor: bool = True) -> float:
    """Standard error of an accuracy measured on ``n_problems`` problems,
    ``sqrt(p (1 - p) / n)`` with ``p`` clipped to [0, 1]; infinite with no problems.

    ``floor``: ``p (1 - p)`` is floored at ``1 / n``, so that a score of 0 or 1 still
    carries its measurement's uncertainty (rankings, intervals, promotion). The guards
    compare two checkpoints' scores without the floor (``floor=False``).
    """
    if n_problems < 1:
        return math.inf
    p = min(max(accuracy, 0.0), 1.0)
    variance = p * (1 - p)
    if floor:
        variance = max(variance, 1 / n_problems)
    return math.sqrt(variance / n_problems)


@dataclass(frozen=True, slots=True)
class ReportDefaults:
    """How a sweep is ranked and selected when nothing else is said (``report.*`` in the
    config reads these)."""

    n_boot: int = 1000  # bootstrap resamples of each config's interval
    level: float = 0.9  # interval coverage
    top_k: int = 3  # configs chosen for validation
    basis: str = "extrapolated"  # validation ranks on extrapolated or observed scores


REPORT = ReportDefaults()
# what validation may rank on (report.basis): extrapolated (curve fit) or observed scores
BASES = ("extrapolated", "observed")


def z_of_level(level: float) -> float:
    """The normal quantile of a two-sided ``level`` interval (1.645 at 0.9): the one
    z-from-level formula every interval uses."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def normal_interval(score: float, se: float, level: float) -> tuple[float, float]:
    """The interval every report prints for a read: ``score +- z se`` at ``level``,
    clipped to [0, 1] (an accuracy). One function, so that a read shows one interval in
    the headline, the rankings, the by-condition table, the budgets report and
    ``selection.json``. NaN in, NaN out."""
    if se is None or score is None or math.isnan(float(score)) or math.isnan(float(se)):
        return math.nan, math.nan
    z = z_of_level(level)
    return max(0.0, float(score) - z * float(se)), min(1.0, float(score) + z * float(se))


def pooled_se(accuracies: Sequence[float], n_problems: Sequence[int]) -> float:
    """The SE of the seeds' mean score from each seed's binomial SE over its problems,
    ``sqrt(sum se_i^2) / k`` (floored: a score of 0 or 1 still carries its
    measurement's uncertainty). It covers the problems only."""
    k = len(accuracies)
    if not k:
        return math.nan
    return math.sqrt(sum(binomial_se(a, int(n)) ** 2
                         for a, n in zip(accuracies, n_problems))) / k


def read_se(accuracies: Sequence[float], n_problems: Sequence[int], *,
            over_seeds: bool = True) -> tuple[float, str]:
    """A config's read (one score per seed, each on ``n_problems``) -> (SE, what it
    covers: :data:`COVERS`). One seed: binomial over its problems. Several seeds
    (``over_seeds``): the seeds' spread / sqrt(seeds), never below the problems' pooled
    SE (two seeds can agree by chance); ``over_seeds=False`` (a ladder's rungs, whose
    promotions read the problems' pooled SE): the pooled SE."""
    k = len(accuracies)
    problems = pooled_se(accuracies, n_problems)
    if k < 2 or not over_seeds:
        return problems, COVERS["problems"]
    mean = sum(accuracies) / k
    spread = math.sqrt(sum((a - mean) ** 2 for a in accuracies) / (k - 1))
    return max(spread / math.sqrt(k), problems), COVERS["seeds"]


# what an interval covers: problems only (seed variance not measured) or seeds too
COVERS = {"problems": "problems only", "seeds": "seeds and problems"}
# the testbed's measure of what a one-seed interval leaves out (docs/reports.md)
SEED_VARIANCE_NOTE = (
    "seed variance was not measured (one seed per config): on the testbed's curve bank "
    "the seed-to-seed SD of a config's val score is 0.65-0.77x the binomial SD at n=200 "
    "for the median config, 1.2-1.35x at the 75th percentile and up to 10x where a seed "
    "collapses, so a one-seed interval is about 1.2x too narrow for a typical config "
    "(docs/reports.md#seed-variance)")
