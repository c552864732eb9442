"""Every read and write under ``results/``: atomic (temp file, then rename).

Layout (docs/design.md, results contract)::

    results/<sweep_id>/cells/<cell_id>/spec.json      the frozen RunSpec
    results/<sweep_id>/cells/<cell_id>/metrics.jsonl  one row per step / checkpoint eval
    results/<sweep_id>/cells/<cell_id>/summary.json   status, FLOPs and seconds by phase
    results/<sweep_id>/cells/<cell_id>/state/         resume state, while a pilot is unfinished
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from race.errors import DamagedResult, NoSpace, UsageError
from race.store.umask import file_mode, share_like_umask


def no_space(error: BaseException, path: Path) -> NoSpace | None:
    """``error`` as :class:`~race.errors.NoSpace` when it says the disk is full (its own
    file named, else ``path``), else None."""
    import errno

    if isinstance(error, NoSpace):
        return error
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpace(str(error.filename or path))
    return None


@contextlib.contextmanager
def _no_space_named(path: Path):
    """Turn a full disk (``ENOSPC``, or ``EDQUOT``: over quota) into :class:`NoSpace`
    naming ``path``; other errors pass unchanged."""
    try:
        yield
    except OSError as error:
        full = no_space(error, path)
        if full is not None:
            raise NoSpace(str(path)) from error
        raise


def _atomic(path: Path, write: Callable[[Any], None], mode: str = "w") -> None:
    """Call ``write(file)`` on a temp file beside ``path``, sync it, rename it to ``path``.

    The file gets the umask's mode (:func:`file_mode`). On any failure (a full disk
    included: :class:`~race.errors.NoSpace`) the temp file is removed and ``path`` keeps
    its old content, whole.
    """
    path = Path(path)
    with _no_space_named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, mode) as f:
                write(f)
                f.flush()
                os.fchmod(f.fileno(), file_mode())
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _atomic_write(path: Path, text: str) -> None:
    _atomic(path, lambda f: f.write(text))


def write_folder(path: Path, fill: Callable[[Path], None]) -> None:
    """Create the folder ``path`` whole or not at all.

    ``fill(tmp)`` writes into a hidden temp folder beside ``path``; its files are synced,
    then the folder is renamed to ``path``. A crash midway leaves only the hidden folder,
    which readers skip. An existing ``path`` is replaced (moved aside first: a rename
    cannot replace a non-empty folder).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        with _no_space_named(path):
            fill(tmp)
            share_like_umask(tmp)  # mkdtemp's 0700, whatever the umask
            for file in tmp.rglob("*"):
                if file.is_file():
                    with open(file, "rb") as f:
                        os.fsync(f.fileno())
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    _atomic_write(Path(path), json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as JSON lines, atomically (the whole file each time)."""
    _atomic_write(Path(path), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def append_jsonl(path: Path, row: dict) -> None:
    """Append one row, whole or not at all: readers see whole lines only.

    The line goes out in one ``write`` on an ``O_APPEND`` descriptor. A write that
    stops short (a full disk) is undone by truncating the file back to its old length,
    and raises :class:`~race.errors.NoSpace`, so no torn line is ever left behind.
    """
    path = Path(path)
    data = (json.dumps(row, sort_keys=True) + "\n").encode()
    with _no_space_named(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
            except OSError:
                os.ftruncate(fd, start)
                raise
            if written != len(data):  # short write: the disk filled midway
                import errno

                os.ftruncate(fd, start)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        finally:
            os.close(fd)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def rerun_cell_fix(cell_dir: Path) -> str:
    """The fix for a damaged file of a cell: delete the cell, rerun the sweep."""
    return (f"delete the cell folder {cell_dir} and rerun the same race sweep command to "
            f"rerun it (finished cells are kept)")


SWEEP_JSON_FIX = ("rerun the same race sweep command to rewrite it (finished cells are "
                  "kept)")
REPORT_FIX = "rerun `race report` on the sweep folder to rewrite it"


def read_result(path: Path, fix: str, *, kind: type = dict) -> Any:
    """A JSON results file the sweep wrote, or :class:`~race.errors.DamagedResult`
    naming the file and ``fix`` when it is not valid JSON of type ``kind`` (a truncated,
    edited or ``null`` file); a missing file raises FileNotFoundError."""
    path = Path(path)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except (ValueError, UnicodeDecodeError) as error:
        raise DamagedResult(str(path), f"not valid JSON ({type(error).__name__})",
                            fix) from None
    if not isinstance(value, kind):
        shown = json.dumps(value)
        raise DamagedResult(str(path), f"holds {shown[:40]}, not a JSON "
                            f"{'object' if kind is dict else kind.__name__}", fix)
    return value


def read_jsonl(path: Path, *, skip_corrupt: bool = False) -> list[dict]:
    """Rows of a JSON-lines file; a corrupt line is reported with its file and line.

    ``skip_corrupt=True`` keeps the whole lines instead (a job killed mid-write leaves a
    torn last line).
    """
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if skip_corrupt:
                continue
            raise UsageError(f"{path}:{number}: corrupt JSON line ({error.msg}); delete the "
                             f"cell folder to rerun it") from None
    return rows


def write_csv(path: Path, frame) -> None:
    """Write a pandas DataFrame as CSV, atomically."""
    _atomic_write(Path(path), frame.to_csv(index=False))


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (markdown, LaTeX, ...) atomically."""
    _atomic_write(Path(path), text)


def save_figure(fig, path: Path, **savefig_kwargs) -> None:
    """Save a matplotlib figure atomically: a temp file in the same folder, then rename.

    The format follows ``path``'s suffix (the temp file's own name does not end in it).
    """
    fmt = Path(path).suffix.lstrip(".") or "png"
    _atomic(path, lambda f: fig.savefig(f, format=fmt, **savefig_kwargs), mode="wb")


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
    return sorted(p.parent for p in (Path(sweep_dir) / "cells").glob("*/spec.json"))


SPEC_COLUMNS = ("model", "seed", "prompts_per_step", "group_size", "max_new_tokens",
         "update_epochs", "minibatch_size", "lr", "lora_rank", "kl_coef", "temperature",
         "backend", "convention", "config_id", "continues")


def pilot_row(cell_dir: Path) -> dict:
    """One cell as a flat row: its knobs, status, FLOPs and seconds by phase, final evals.

    A cell without ``summary.json`` (never finished) is reported as ``status: missing``.
    """
    rerun = rerun_cell_fix(cell_dir)
    spec = read_result(cell_dir / "spec.json", rerun)
    row = {"cell_id": spec["cell_id"]} | {k: spec.get(k) for k in SPEC_COLUMNS}
    row["reward"] = spec["reward"].get("name")
    row["task"] = spec["task"].get("name")
    row["budget_flops"] = spec["budget_flops"]
    path = cell_dir / "summary.json"
    if not path.is_file():
        return row | {"status": "missing", "error": "no summary.json: the pilot never "
                      "finished; rerun the sweep to resume it"}
    summary = read_result(path, rerun)
    row |= {"status": summary["status"], "error": summary.get("error"),
            "steps": summary.get("steps", 0), "total_flops": summary.get("total_flops", 0.0),
            "resumed_from_step": summary.get("resumed_from_step"),
            "redone_flops": summary.get("redone_flops", 0.0)}
    for phase, value in summary.get("flops", {}).items():
        row[f"flops_{phase}"] = value
    for phase, value in summary.get("wall_s", {}).items():
        row[f"wall_s_{phase}"] = value
    row |= {"device": summary.get("device"), "dtype": summary.get("dtype"),
            "peak_flops": summary.get("peak_flops")}
    for phase, use in (summary.get("throughput") or {}).items():
        for key in ("flops_per_s", "mfu", "hfu", "peak_gib"):
            row[f"{key}_{phase}"] = use.get(key)
    for when in ("initial", "final"):
        for target, metrics in summary.get(f"{when}_eval", {}).items():
            row[f"{when}_{target}"] = metrics.get("accuracy")
            row[f"{when}_{target}_reward"] = metrics.get("mean_reward")
    return row


def pilots_frame(sweep_dir: Path):
    """``pilots.csv`` as a DataFrame: one row per cell folder of the sweep."""
    import pandas as pd

    return pd.DataFrame([pilot_row(d) for d in cell_dirs(sweep_dir)])


STEP_KEYS = ("step", "max_new_tokens", "train_reward", "entropy", "truncation_rate",
             "clip_fraction", "kl")


def model_shapes(sweep_dir: Path) -> dict[str, Any]:
    """Every policy's and reward model's :class:`~race.core.specs.ModelShape` of a sweep, by
    name, as its cells' ``spec.json`` recorded them (an older spec without shapes: the
    catalog's). A report never reopens a model folder, which may have moved since."""
    from race.catalog import load_model_shape
    from race.core.specs import ModelShape

    shapes: dict[str, Any] = {}
    for cell_dir in cell_dirs(sweep_dir):
        spec = read_result(cell_dir / "spec.json", rerun_cell_fix(cell_dir))
        if spec.get("policy"):
            shapes[spec["model"]] = ModelShape.from_dict(spec["policy"])
        elif spec.get("model") not in shapes:
            shapes[spec["model"]] = load_model_shape(spec["model"])
        reward_model = (spec.get("reward") or {}).get("model")
        if reward_model and spec.get("reward_model"):
            shapes[reward_model] = ModelShape.from_dict(spec["reward_model"])
    return shapes


def load_results(sweep_dir: Path, *, thresholds=None, with_steps: bool = False):
    """A sweep folder as the aggregator's three DataFrames: ``(cells, evals, examples)``.

    - ``cells``: one row per cell (``pilots.csv``'s columns plus ``params``,
      ``full_budget_flops`` and the ``regime`` named from its realized shares).
    - ``evals``: one row per (cell, target, checkpoint): FLOPs spent then, accuracy, and
      the problems ``n`` it was scored on.
    - ``examples``: the final checkpoint's per-problem correctness (prompt bootstrap).
    - with ``with_steps=True``, a fourth: ``steps``, one row per ok cell's GRPO step
      (``cell_id`` and ``STEP_KEYS``: the step's cap, train reward, entropy, truncation
      rate, clip fraction, KL where logged), read in the same pass.

    A corrupt ``metrics.jsonl`` line raises ValueError naming its file and line.
    ``thresholds`` (a ``RegimeConfig``) defaults to the one in ``sweep.json``.
    """
    from types import SimpleNamespace

    import pandas as pd

    from race.run.grid import regime_label

    sweep_dir = Path(sweep_dir)
    record = (read_result(sweep_dir / "sweep.json", SWEEP_JSON_FIX)
              if (sweep_dir / "sweep.json").is_file() else {})
    if thresholds is None:
        thresholds = SimpleNamespace(**record.get("config", {}).get("regime", {
            "feedback_heavy": 0.15, "learning_heavy": 0.8, "search_heavy": 0.4}))
    rows, evals, examples, steps = [], [], [], []
    shapes = model_shapes(sweep_dir)
    for cell_dir in cell_dirs(sweep_dir):
        row = pilot_row(cell_dir)
        fraction = record.get("pilot_fraction") or 1.0
        row["full_budget_flops"] = record.get("budget_flops") or row["budget_flops"] / fraction
        row["params"] = shapes[row["model"]].total_params
        total = row.get("total_flops") or 0.0
        shares = {p: (row.get(f"flops_{p}", 0.0) or 0.0) / total if total else 0.0
                  for p in ("rollout", "learning", "feedback")}
        row["regime"] = regime_label(shares, thresholds)
        rows.append(row)
        if row["status"] != "ok":
            continue
        metrics = read_jsonl(cell_dir / "metrics.jsonl")
        charged = 0.0
        finals = {}
        for metric in metrics:
            if metric["kind"] == "step":
                charged = metric["charged_flops"]
                steps.append({"cell_id": row["cell_id"]}
                             | {k: metric.get(k) for k in STEP_KEYS})
            elif metric["kind"] == "eval":
                evals.append({"cell_id": row["cell_id"], "config_id": row["config_id"],
                              "target": metric["target"], "checkpoint": metric["checkpoint"],
                              "flops": charged, "accuracy": metric["accuracy"],
                              "mean_reward": metric["mean_reward"],
                              "n": len(metric.get("correct", []))})
                finals[metric["target"]] = metric.get("correct", [])
        for target, correct in finals.items():
            examples += [{"cell_id": row["cell_id"], "target": target, "example": i,
                          "correct": c} for i, c in enumerate(correct)]
    frames = (pd.DataFrame(rows), pd.DataFrame(evals), pd.DataFrame(examples))
    if with_steps:
        return (*frames, pd.DataFrame(steps, columns=["cell_id", *STEP_KEYS]))
    return frames


# ------------------------------------------------------------------ cell claims

CLAIMS = "claims"  # <sweep>/claims/<cell_id>: which race process is running the cell


def this_process() -> dict:
    """Who claims a cell: this process's pid, host and start time, and its command line."""
    import socket
    import sys
    import time

    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
            "started_ticks": _start_ticks(os.getpid()), "argv": " ".join(sys.argv)[:300]}


def _start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (Linux), which tells a live owner
    from a later process that reuses its pid; None where /proc does not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the name


def owner_alive(owner: dict) -> bool:
    """Whether a claim's owner still runs (a process on another host is assumed to)."""
    import socket

    if owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    started = owner.get("started_ticks")
    return started is None or _start_ticks(int(owner["pid"])) in (None, started)


@contextlib.contextmanager
def claims_lock(sweep_dir: Path):
    """An exclusive lock over a sweep's claims (``fcntl.flock`` on a lock file)."""
    import fcntl

    folder = Path(sweep_dir) / CLAIMS
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


CELL_LOCK = ".running"  # <cell>/.running: flock-ed by the process running the pilot


@contextlib.contextmanager
def cell_lock(cell_dir: Path):
    """Hold the cell's run lock (``fcntl.flock`` on ``<cell>/.running``) while a pilot
    runs; the file records who holds it (:func:`this_process`).

    The kernel drops the lock when the process ends however it ends (``kill -9``
    included), so a lock that is held means a pilot is running this cell now, whichever
    sweep started it: :func:`claim_cells` never takes such a cell over. Raises
    :class:`CellBusy` when another process holds it.
    """
    import fcntl

    path = Path(cell_dir) / CELL_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CellBusy(str(cell_dir), _lock_holder(path)) from None
        try:
            try:  # who holds it, for messages; the lock itself is what counts
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(this_process()))
                handle.flush()
            except OSError:
                pass
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class CellBusy(RuntimeError):
    """A cell another live process is running (its pilot holds :func:`cell_lock`)."""

    def __init__(self, cell_dir: str, holder: dict):
        self.cell_dir, self.holder = cell_dir, holder
        super().__init__(f"{cell_dir}: another process runs this cell now "
                         f"(pid {holder.get('pid')} on {holder.get('host')})")

    def __reduce__(self):
        return (CellBusy, (self.cell_dir, self.holder))


def _lock_holder(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def running_pilot(cell_dir: Path) -> dict | None:
    """Who runs the cell's pilot now (its :func:`cell_lock` is held), else None."""
    import fcntl

    path = Path(cell_dir) / CELL_LOCK
    if not path.is_file():
        return None
    with open(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _lock_holder(path) or {"pid": None, "host": None}
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def cell_holder(sweep_dir: Path, cell_id: str, me: dict) -> dict | None:
    """The live process other than ``me`` that holds a cell of a sweep: the sweep that
    claimed it, else a pilot still running it (a killed sweep's orphan), else None."""
    owner = claim_owner(sweep_dir, cell_id)
    if owner and not _same(owner, me) and owner_alive(owner):
        return owner
    return running_pilot(Path(sweep_dir) / "cells" / cell_id)


def claim_cells(sweep_dir: Path, cell_ids: list[str], me: dict
                ) -> tuple[list[str], dict[str, dict]]:
    """Claim ``cell_ids`` for the process ``me`` (:func:`this_process`).

    Returns the cells now claimed by ``me`` and, for the others, the live process that
    holds each: another sweep's live claim, or a pilot still running the cell (its
    :func:`cell_lock`: a killed sweep's pilot that has not ended yet). A claim whose owner
    is gone and whose cell no pilot runs is taken over. Claims are taken under one lock,
    so two processes never both get a cell.
    """
    mine, held = [], {}
    with claims_lock(sweep_dir):
        for cell_id in cell_ids:
            holder = cell_holder(sweep_dir, cell_id, me)
            if holder is not None:
                held[cell_id] = holder
                continue
            write_json(Path(sweep_dir) / CLAIMS / cell_id, me)
            mine.append(cell_id)
    return mine, held


def claim_owner(sweep_dir: Path, cell_id: str) -> dict | None:
    """Who holds ``cell_id`` of a sweep (None: nobody)."""
    try:
        return read_json(Path(sweep_dir) / CLAIMS / cell_id)
    except (OSError, ValueError):
        return None


def _same(owner: dict, me: dict) -> bool:
    return (owner.get("pid"), owner.get("host")) == (me["pid"], me["host"])


def release_claims(sweep_dir: Path, cell_ids: list[str], me: dict) -> None:
    """Drop the claims ``me`` holds among ``cell_ids``."""
    with claims_lock(sweep_dir) as folder:
        for cell_id in cell_ids:
            path = folder / cell_id
            try:
                if _same(read_json(path), me):
                    path.unlink()
            except (OSError, ValueError):
                continue
