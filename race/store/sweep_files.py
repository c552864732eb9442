"""One sweep folder: the names of the files a sweep, its report and its validation write.

Layout (docs/design.md, results contract)::

    <sweep>/sweep.json        resolved config, cells, git sha, versions, times, runs
    <sweep>/pilots.csv        one row per cell (race.store.pilots)
    <sweep>/ladder.json       selection.policy=ladder: every rung's candidates and decisions
    <sweep>/selection.json    the configs chosen for validation, and why
    <sweep>/cells/<cell_id>/  one cell (race.store.cell)
    <sweep>/claims/           which process runs which cell (race.store.claims)
    <sweep>/validate/         the full-budget runs of the selected cells
"""

from __future__ import annotations

import time
from pathlib import Path

from race.store.cell import CELLS

SWEEP_JSON = "sweep.json"
PILOTS_CSV = "pilots.csv"
LADDER_JSON = "ladder.json"
SELECTION_JSON = "selection.json"
VALIDATE = "validate"


class SweepDir:
    """A sweep's results folder and the files in it."""

    __slots__ = ("path",)

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"SweepDir({str(self.path)!r})"

    @property
    def record(self) -> Path:
        return self.path / SWEEP_JSON

    @property
    def pilots(self) -> Path:
        return self.path / PILOTS_CSV

    @property
    def ladder(self) -> Path:
        return self.path / LADDER_JSON

    @property
    def selection(self) -> Path:
        return self.path / SELECTION_JSON

    @property
    def cells(self) -> Path:
        return self.path / CELLS

    @property
    def validate(self) -> Path:
        return self.path / VALIDATE


def set_aside(path: Path) -> Path:
    """Move a damaged results file out of the way, beside itself as
    ``<name>.damaged-<UTC time>`` (kept for a look, never read again); returns its new
    path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target, n = path.with_name(f"{path.name}.damaged-{stamp}"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.damaged-{stamp}-{n}"), n + 1
    path.rename(target)
    return target
