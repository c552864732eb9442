"""The prediction at the full budget F a report prints: calibrated persistence (pure).

A pilot's last read, plus what the rest of the budget added on the testbed's curve banks
at that distance from F: the point is the read plus the median of (score at F - read),
the 90% interval the read plus its 5th and 95th percentiles. It replaced the sigmoid band
(:mod:`race.analysis.curves`) as the reported prediction because on the testbed's worlds
1 and 2 it predicted better (``bench/prediction_coverage.py``, leave-one-world-out at a
ladder's last rung F/6: coverage 0.875 and 0.771, width 0.21 and 0.55, mean absolute error
0.078 and 0.067 against the last read's 0.094 and 0.109; the sigmoid band: width 0.60,
error above the last read's). Pooled over sizes and rewards: splitting by reward covered
less held out (0.906 and 0.625).

:data:`PERSISTENCE` is the calibration, fitted on every cell of worlds 1 and 2 (240 cells,
3 seeds each, ``val`` read on the first 200 problems as a pilot reads it, the score at F on
500) and frozen before world 3's bank existed. A read between two calibrated distances
takes their quantiles interpolated in log budget; a read closer to F than 3F/4 shrinks
toward none at F; a read before F/96 takes F/96's.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# share of F read -> (5th, 50th, 95th percentile of score at F minus the read), worlds 1-2
PERSISTENCE: dict[float, tuple[float, float, float]] = {
    0.010417: (+0.0384, +0.1795, +0.3270),
    0.020833: (+0.0342, +0.1650, +0.2981),
    0.041667: (-0.0480, +0.1390, +0.2506),
    0.062500: (-0.0625, +0.1255, +0.2327),
    0.083333: (-0.0650, +0.1125, +0.2101),
    0.125000: (-0.0678, +0.0920, +0.2071),
    0.166667: (-0.0818, +0.0750, +0.1701),
    0.250000: (-0.0834, +0.0605, +0.1350),
    0.333333: (-0.0724, +0.0500, +0.1402),
    0.500000: (-0.0672, +0.0325, +0.1001),
    0.750000: (-0.0372, +0.0085, +0.0802),
    1.000000: (0.0, 0.0, 0.0),  # read at F: nothing left to add
}
MODEL = "calibrated persistence"


def shift_at(fraction: float) -> tuple[float, float, float]:
    """The (5th, 50th, 95th) percentile of what F adds to a read at ``fraction`` of F."""
    points = sorted(PERSISTENCE)
    f = min(max(fraction, points[0]), points[-1])
    hi = next(p for p in points if p >= f - 1e-12)
    lo = max(p for p in points if p <= f + 1e-12)
    if hi == lo:
        return PERSISTENCE[lo]
    w = (math.log(f) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return tuple((1 - w) * a + w * b for a, b in zip(PERSISTENCE[lo], PERSISTENCE[hi]))


def predict(read: float, fraction: float) -> tuple[float, float, float]:
    """(prediction, lo, hi) at F for an accuracy ``read`` at ``fraction`` of F, clipped
    to [0, 1]."""
    low, mid, high = shift_at(fraction)
    clip = lambda x: min(1.0, max(0.0, x))  # noqa: E731
    return clip(read + mid), clip(read + low), clip(read + high)


def config_forecasts(last_reads: pd.DataFrame, full_flops: float) -> dict[str, dict]:
    """Each config's prediction at F from its last reads.

    Args:
        last_reads: one row per lineage (a seed's cell, or a ladder lineage's highest
            rung): ``config_id``, ``flops`` (charged when read), ``accuracy``.
        full_flops: the full budget F.

    Returns:
        config_id -> {"prediction", "lo", "hi"} (the seeds' means), ``read`` (their last
        reads' mean), ``read_fraction`` (of F), ``seeds``, ``model``.
    """
    out = {}
    if last_reads is None or last_reads.empty or not full_flops:
        return out
    for config, group in last_reads.groupby("config_id", sort=True):
        fractions = (group["flops"].to_numpy(float) / full_flops).clip(1e-6, None)
        preds = np.array([predict(a, f) for a, f in zip(group["accuracy"], fractions)])
        out[str(config)] = {"prediction": float(preds[:, 0].mean()),
                            "lo": float(preds[:, 1].mean()), "hi": float(preds[:, 2].mean()),
                            "read": float(group["accuracy"].mean()),
                            "read_fraction": float(fractions.mean()),
                            "seeds": len(group), "model": MODEL}
    return out
