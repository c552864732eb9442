"""A cell's regime, named from its FLOP shares (pure): ``feedback-heavy``, ``learning-heavy``,
``search-heavy`` or ``balanced``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class RegimeThresholds:
    """The shares at which a regime is named (``regime.*`` in the config)."""

    # the share of the charged FLOPs each phase needs for the regime its name gives
    feedback_heavy: float = 0.15
    learning_heavy: float = 0.80
    search_heavy: float = 0.40

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RegimeThresholds:
        """From a config section (``sweep.json``'s ``config.regime``); missing keys keep
        their defaults."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


def regime_label(shares: Mapping[str, float], thresholds) -> str:
    """Name a cell's regime from its FLOP shares (``thresholds``: :class:`RegimeThresholds`
    or the config's ``RegimeConfig``).

    The first threshold met wins, in the order feedback, learning, search: a reward model
    taking a visible share is the cell's most distinctive spend.
    """
    if shares.get("feedback", 0.0) >= thresholds.feedback_heavy:
        return "feedback-heavy"
    if shares.get("learning", 0.0) >= thresholds.learning_heavy:
        return "learning-heavy"
    if shares.get("rollout", 0.0) >= thresholds.search_heavy:
        return "search-heavy"
    return "balanced"
