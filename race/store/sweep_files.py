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

import json
import time
from pathlib import Path

CELLS = "cells"
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


def listed_cell_ids(sweep_dir: str | Path) -> set[str]:
    """The cells a sweep folder's records say it ran: every planned, unrefused cell of
    ``sweep.json`` and every rung's cells of ``ladder.json`` (a later rung's cells are
    listed there only). A record that cannot be read lists nothing here (the report
    names a damaged one when it reads it)."""
    folder, ids = SweepDir(sweep_dir), set()
    for path, cells_of in ((folder.record, _sweep_json_cells), (folder.ladder, _ladder_cells)):
        try:
            ids |= cells_of(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return ids


def _sweep_json_cells(record: dict) -> set[str]:
    return {c["cell_id"] for c in record.get("cells", [])
            if isinstance(c, dict) and c.get("cell_id") and not c.get("refused")}


def _ladder_cells(ladder: dict) -> set[str]:
    return {cell_id for rung in ladder.get("rungs", []) for cell_id in rung.get("cells", {})}


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
