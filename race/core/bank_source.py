"""A curve bank as a ladder's source of curves (pure: numpy, no IO).

A bank holds each config's curve run to the full budget F with dense checkpoints
(``bench/curve_bank.py``); a replayed ladder reads it truncated at its rungs, each rung at
the bank's last checkpoint at or below it (:func:`bank_reads`), and only there (a sweep's
ladder scores its rung ends, ``selection.rung_checkpoints=[1.0]``). The engine that
climbs it is :func:`race.core.climb.climb`, as in ``race sweep``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from race.core.rungs import DEFAULT_PROMOTE_BY, next_rung_bound, pool_seeds


class RecordedCurve(Protocol):
    """One recorded cell on the selection target, checkpoint by checkpoint (ascending).

    Attributes:
        fraction: (checkpoints,) each checkpoint's share of ``full`` (0: the warm start).
        flops: (checkpoints,) charged FLOPs at each checkpoint.
        read: (checkpoints,) accuracy a pilot reads there.
        read_n: (checkpoints,) problems that accuracy is over.
        full: the full budget F, FLOPs.
    """

    fraction: np.ndarray
    flops: np.ndarray
    read: np.ndarray
    read_n: np.ndarray
    full: float


def bank_reads(checkpoints: np.ndarray, rungs: Sequence[float]) -> list[float]:
    """Where a bank with ``checkpoints`` (shares of F) is read for each rung: its last
    checkpoint at or below the rung."""
    return [float(checkpoints[checkpoints <= r + 1e-9].max()) for r in rungs]


def replayable(reads: Sequence[float]) -> bool:
    """Whether a ladder's rungs can be replayed on a bank: each reads a checkpoint of its
    own after the warm start. A rung below the bank's first checkpoint would read the
    warm start (every config of a size ties there, and ids would pick), two rungs on one
    checkpoint would decide twice on one read."""
    return reads[0] > 0 and len(set(reads)) == len(reads)


class BankSource:
    """Recorded curves, one per config, replayed rung by rung (a
    :class:`race.core.climb.CurveSource`).

    Args:
        curves: config -> its curve (one seed's).
        models: config -> its policy size.
        reads: each rung's checkpoint (share of F, :func:`bank_reads`).
        z: standard errors below the prediction a promotion ranks by.
        promote_by: what a promotion reads (:data:`race.core.rungs.PROMOTE_BY`).
        guard: ``guard(curve, fraction, reads)``: what fired on the curve at rung
            ``fraction``, read at the rung ends ``reads`` (None: no guards).
        replicates: config -> its curves on other seeds (``selection.replicates``): at
            the last rung each is read too, run afresh to it (and paid for), and the
            config's candidate pools every seed (:func:`race.core.rungs.pool_seeds`).

    After a climb, ``charged`` is the compute spent (share of F: each rung's configs pay
    their increment over the rung below) and ``pilots`` {rung read: configs run to it}.
    """

    def __init__(self, curves: Mapping[str, RecordedCurve], models: Mapping[str, str],
                 reads: Sequence[float], *, z: float = 1.0,
                 promote_by: str = DEFAULT_PROMOTE_BY,
                 guard: Callable[[RecordedCurve, float, tuple], str | None] | None = None,
                 replicates: Mapping[str, Sequence[RecordedCurve]] | None = None):
        self.curves, self.models, self.reads = curves, models, list(reads)
        self.z, self.promote_by, self.guard = z, promote_by, guard
        self.replicates = replicates or {}
        self.charged, self.pilots, self._before = 0.0, {}, 0.0

    def run_rung(self, index: int, configs: Sequence[str]) -> list[dict]:
        """Every config of ``configs`` read at rung ``index``'s end (and the rung ends
        below it), its bound at the next rung (the last rung: at itself)."""
        fraction = self.reads[index]
        self.charged += len(configs) * (fraction - self._before)
        self.pilots[fraction] = len(configs)
        self._before = fraction
        reads = tuple(self.reads[:index + 1])
        last = index + 1 == len(self.reads)
        nxt = fraction if last else self.reads[index + 1]
        candidates = []
        for config in configs:
            curve = self.curves[config]
            bounds = [self._bound(curve, reads, nxt)]
            if last:  # the replicates, run afresh to the last rung
                extra = self.replicates.get(config, ())
                self.charged += len(extra) * fraction
                bounds += [self._bound(c, (fraction,), nxt) for c in extra]
            bound = pool_seeds(bounds, self.z)
            candidates.append({"config": config, "model": self.models[config],
                               "lcb": bound["lcb"], "score": bound["score"],
                               "ucb": bound["ucb"],
                               "guard": (self.guard(curve, fraction, reads)
                                         if self.guard is not None else None)})
        return candidates

    def _bound(self, curve: RecordedCurve, reads: tuple, nxt: float) -> dict:
        keep = np.isin(curve.fraction, (0.0, *reads))  # the warm start and rung ends
        return next_rung_bound(curve.flops[keep].tolist(), curve.read[keep].tolist(),
                               curve.read_n[keep].astype(int).tolist(), nxt * curve.full,
                               z=self.z, promote_by=self.promote_by)
