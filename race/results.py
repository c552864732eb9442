"""Every read and write under ``results/``: atomic (temp file, then rename).

Layout (DESIGN.md, results contract)::

    results/<sweep_id>/cells/<cell_id>/spec.json      the frozen RunSpec
    results/<sweep_id>/cells/<cell_id>/metrics.jsonl  one row per step / checkpoint eval
    results/<sweep_id>/cells/<cell_id>/summary.json   status, FLOPs and seconds by phase
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    _atomic_write(Path(path), json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as JSON lines, atomically (the whole file each time)."""
    _atomic_write(Path(path), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def append_jsonl(path: Path, row: dict) -> None:
    """Append one row as a single write: readers see whole lines only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file; a corrupt line is reported with its file and line."""
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: corrupt JSON line ({error.msg}); delete the "
                             f"cell folder to rerun it") from None
    return rows
