"""How often the response surface's recommendation holds a curve bank's best config.

The check, on one group (size, reward, target) of a bank whose configs all ran to the full
budget F:

- The bank's **best config** is the one with the highest truth at F (the seed mean).
- **Folds.** For each config c, the surface (:func:`race.analysis.response.fit_response_surface`)
  is fitted to the pilot scores of every config but c. Its recommendation **hits** when
  - it is a regime (a stable fit): the best config's rho falls in that regime, i.e. on
    that side of the fold's threshold (``race.analysis.response.regime_of``);
  - it is the fallback: the fold's best pilot cell *is* the best config.

  Leaving c out tests whether the recommendation survives losing one config of the grid;
  in the fold that leaves out the best config itself, a regime can still hit (the
  surface points to where the best config lies without having seen it), a fallback
  cannot.
- **rate** = hits / folds. A regime holds several configs, so it hits more easily than a
  single pick: ``mean_share`` is the average share of the fold's configs the
  recommendation holds (a regime: those on its side of the threshold; a fallback: 1 of
  n), the chance a config drawn at random from the fold would fall inside it. Compare
  ``rate`` with the ladder's pick rate (the share of replicates whose pick is the best
  config, ``bench/selection_replay.py``) beside ``mean_share``.
- **full**: the same question for the surface fitted to every config (what a sweep of
  the whole grid would recommend).

Pure: plain mappings in, a frozen dataclass out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from race.analysis.response import (
    BOOT,
    LEVEL,
    RHO_TOL,
    ResponseSurface,
    fit_response_surface,
    regime_of,
)


@dataclass(frozen=True, slots=True)
class Fold:
    """One leave-one-config-out fold.

    Attributes:
        held_out: the config left out.
        regime: the recommended regime (None: the fit was unstable, ``pick`` stands).
        threshold: the fold's regime threshold.
        pick: the fold's best pilot cell.
        share: the share of the fold's configs the recommendation holds.
        hit: whether it holds the bank's best config.
    """

    held_out: str
    regime: str | None
    threshold: float
    pick: str
    share: float
    hit: bool


@dataclass(frozen=True, slots=True)
class RegimeCheck:
    """The check on one group (see the module docstring).

    Attributes:
        best, best_rho: the bank's best config at F and its rho.
        full: the surface fitted to every config; ``full_hit``: whether it holds ``best``.
        folds: one per config, in sorted order.
    """

    best: str
    best_rho: float
    full: ResponseSurface
    full_hit: bool
    folds: tuple[Fold, ...]

    @property
    def rate(self) -> float:
        """Hits / folds."""
        return sum(f.hit for f in self.folds) / len(self.folds)

    @property
    def n_regime(self) -> int:
        """Folds whose fit was stable (they recommend a regime)."""
        return sum(f.regime is not None for f in self.folds)

    @property
    def regime_rate(self) -> float:
        """Hits among the regime folds (nan: none)."""
        n = self.n_regime
        return sum(f.hit for f in self.folds if f.regime) / n if n else math.nan

    @property
    def fallback_rate(self) -> float:
        """Hits among the fallback folds (nan: none)."""
        n = len(self.folds) - self.n_regime
        return sum(f.hit for f in self.folds if not f.regime) / n if n else math.nan

    @property
    def mean_share(self) -> float:
        """The average share of a fold's configs its recommendation holds."""
        return sum(f.share for f in self.folds) / len(self.folds)

    def line(self) -> str:
        hits = sum(f.hit for f in self.folds)
        n_fallback = len(self.folds) - self.n_regime
        regime_hits = sum(f.hit for f in self.folds if f.regime)
        return (f"regime check: the recommendation holds the bank's best config at F "
                f"({self.best}, rho {self.best_rho:.2f}) in {hits} of {len(self.folds)} "
                f"leave-one-config-out folds (rate {self.rate:.2f}, holding "
                f"{self.mean_share:.2f} of the configs on average; a regime in "
                f"{self.n_regime} ({regime_hits} hit), the best pilot cell in {n_fallback} "
                f"({hits - regime_hits} hit)); fitted to every config: "
                f"{'hit' if self.full_hit else 'miss'}")

    def to_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_rho": self.best_rho, "rate": self.rate,
                "n_folds": len(self.folds), "n_regime": self.n_regime,
                "regime_rate": None if math.isnan(self.regime_rate) else self.regime_rate,
                "fallback_rate": (None if math.isnan(self.fallback_rate)
                                  else self.fallback_rate),
                "mean_share": self.mean_share, "full_hit": self.full_hit,
                "full": self.full.to_dict(),
                "folds": [{"held_out": f.held_out, "regime": f.regime,
                           "threshold": f.threshold, "pick": f.pick, "share": f.share,
                           "hit": f.hit} for f in self.folds], "line": self.line()}


def regime_check(rho: Mapping[str, float], pilot: Mapping[str, float | Sequence[float]],
                 truth: Mapping[str, float], *,
                 n_problems: int | None = None, threshold: float | None = None,
                 level: float = LEVEL, boot: int = BOOT, seed: int = 0,
                 rho_tol: float = RHO_TOL) -> RegimeCheck:
    """Leave each config out, fit the surface to the rest, and score its recommendation.

    Args:
        rho: config -> its rho (planned, or the mean realized over seeds).
        pilot: config -> its pilot score(s) at the pilot budget (one per seed).
        truth: config -> its truth at F (the seed mean); the best of it is the target.
        n_problems, threshold, level, boot, seed, rho_tol: as
            :func:`race.analysis.response.fit_response_surface`.
    """
    names = sorted(truth)
    if sorted(rho) != names or sorted(pilot) != names:
        missing = sorted(set(names).symmetric_difference(rho).union(
            set(names).symmetric_difference(pilot)))
        raise ValueError(f"rho, pilot and truth must name the same configs; these are "
                         f"missing from one of them: {missing}")
    if len(names) < 2:
        raise ValueError(f"{len(names)} config(s): a leave-one-config-out check needs >= 2")
    best = max(names, key=lambda c: truth[c])  # the first name wins a tie

    def surface(kept: list[str]) -> ResponseSurface:
        points = [(c, rho[c], s) for c in kept for s in _scores(pilot[c])]
        return fit_response_surface([p[1] for p in points], [p[2] for p in points],
                                    [p[0] for p in points], n_problems=n_problems,
                                    threshold=threshold, level=level, boot=boot, seed=seed,
                                    rho_tol=rho_tol)

    def judge(fit: ResponseSurface, kept: list[str]) -> tuple[bool, float]:
        if fit.regime is None:
            return fit.best_config == best, 1 / len(kept)
        inside = [c for c in kept if regime_of(rho[c], fit.threshold) == fit.regime]
        return regime_of(rho[best], fit.threshold) == fit.regime, len(inside) / len(kept)

    folds = []
    for out in names:
        kept = [c for c in names if c != out]
        fit = surface(kept)
        hit, share = judge(fit, kept)
        folds.append(Fold(out, fit.regime, fit.threshold, fit.best_config, share, hit))
    full = surface(names)
    return RegimeCheck(best, float(rho[best]), full, judge(full, names)[0], tuple(folds))


def _scores(value: float | Sequence[float]) -> list[float]:
    try:  # one score per seed
        return [float(v) for v in value]
    except TypeError:  # a single score
        return [float(value)]
