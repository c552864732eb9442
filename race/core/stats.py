"""The binomial standard error of an accuracy, the one spelling every ranking, interval,
guard and promotion reads; and the statistics a report uses when nothing else is said
(pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
