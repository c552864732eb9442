"""One cell folder of a sweep: the names of its files, and whether it finished ok.

Layout (docs/design.md, results contract)::

    <sweep>/cells/<cell_id>/spec.json      the frozen RunSpec
    <sweep>/cells/<cell_id>/metrics.jsonl  one row per step / checkpoint eval
    <sweep>/cells/<cell_id>/timing.jsonl   wall seconds by phase, per step
    <sweep>/cells/<cell_id>/summary.json   status, FLOPs and seconds by phase (the verdict)
    <sweep>/cells/<cell_id>/state/         resume state, while a pilot is unfinished
    <sweep>/cells/<cell_id>/error.txt      the traceback of a failed pilot
    <sweep>/cells/<cell_id>/adapter/       the LoRA weights a non-HF rollout engine loads
    <sweep>/cells/<cell_id>/.running       the run lock of the process running the pilot

Every other module names these files through :class:`CellDir`; "is this cell ok?" is
:meth:`CellDir.is_ok` and nothing else.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

from race.store.io import read_json
from race.store.sweep_files import CELLS, listed_cell_ids

SPEC = "spec.json"
SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
TIMING = "timing.jsonl"
STATE = "state"
ERROR = "error.txt"
ADAPTER = "adapter"
RUNNING = ".running"  # flock-ed by the process running the pilot (race.store.claims)


class CellDir:
    """A cell's results folder (``<sweep>/cells/<cell_id>/``) and the files in it."""

    __slots__ = ("path",)

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def of(cls, sweep_dir: str | Path, cell_id: str) -> CellDir:
        """The folder of ``cell_id`` in the sweep ``sweep_dir``."""
        return cls(Path(sweep_dir) / CELLS / cell_id)

    def __repr__(self) -> str:
        return f"CellDir({str(self.path)!r})"

    @property
    def spec(self) -> Path:
        return self.path / SPEC

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def timing(self) -> Path:
        return self.path / TIMING

    @property
    def state(self) -> Path:
        return self.path / STATE

    @property
    def error(self) -> Path:
        return self.path / ERROR

    @property
    def adapter(self) -> Path:
        return self.path / ADAPTER

    @property
    def lock(self) -> Path:
        return self.path / RUNNING

    def is_ok(self) -> bool:
        """Whether the cell finished ok: its summary says ``status: ok`` (a missing or
        damaged summary is not ok: the cell runs again)."""
        try:
            return read_json(self.summary).get("status") == "ok"
        except (ValueError, OSError, AttributeError):
            return False

    def has_summary(self) -> bool:
        """Whether the pilot left a verdict (ok or failed)."""
        return self.summary.is_file()

    def summary_since(self, epoch_s: float) -> bool:
        """Whether the summary was written at or after ``epoch_s`` (epoch seconds)."""
        try:
            return self.summary.stat().st_mtime >= epoch_s
        except FileNotFoundError:
            return False

    def state_problem(self) -> str:
        """Why the newest saved state (``state/step-*/``) cannot be read, "" when it can:
        there is none, or a file of it does not open (a JSON file that does not parse; a
        torch file, a zip archive, whose directory does not read: an emptied or cut-short
        file). Reads no tensors; what a later ladder rung checks before it continues it."""
        saved = sorted(p for p in self.state.glob("step-*") if p.is_dir())
        if not saved:
            return f"no saved state in {self.state}"
        for path in sorted(saved[-1].iterdir()):
            try:
                if path.suffix == ".json":
                    read_json(path)
                elif path.suffix == ".pt":
                    zipfile.ZipFile(path).close()
            except (OSError, ValueError, zipfile.BadZipFile) as error:
                return f"{path.name} does not read ({type(error).__name__}: {error})"
        return ""

    def rerun_fix(self) -> str:
        """The fix for a damaged file of this cell: delete the cell, rerun the sweep."""
        return (f"delete the cell folder {self.path} and rerun the same race sweep command "
                f"to rerun it (finished cells are kept)")


def last_charged_flops(path: Path) -> float:
    """The charged FLOPs of the last step row of a running pilot's ``metrics.jsonl``."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().decode(errors="ignore").splitlines()
    except OSError:
        return 0.0
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "charged_flops" in row:
            return float(row["charged_flops"])
    return 0.0


def cell_dirs(sweep_dir: Path) -> list[Path]:
    """The cell folders of a sweep (``cells/<cell_id>/`` holding a spec.json), sorted."""
    return sorted(p.parent for p in (Path(sweep_dir) / CELLS).glob(f"*/{SPEC}"))


def every_cell_dir(sweep_dir: Path) -> list[Path]:
    """Every cell a report must account for, sorted: each folder under ``<sweep>/cells/``,
    whether or not it holds a spec.json (a folder without its spec is damaged, not
    absent), and the folder of each cell ``sweep.json`` or ``ladder.json`` lists that is
    gone (a deleted cell is missing, not absent: :func:`gone`)."""
    folder = Path(sweep_dir) / CELLS
    present = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    names = {p.name for p in present}
    return sorted([*present, *(folder / c for c in listed_cell_ids(sweep_dir) - names)])


def gone(cell_dir: Path) -> bool:
    """Whether a cell's folder is absent (a listed cell whose folder was deleted)."""
    return not Path(cell_dir).is_dir()
