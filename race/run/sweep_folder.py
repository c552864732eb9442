"""What a sweep folder must agree with before ``race sweep`` writes into it: the same
plan (a rerun resumes it), or with ``sweep.extend=true`` the same task, budget,
``selection.policy`` and ``pilot.fraction`` (one table, :data:`EXTEND_KEYS`) and the same
task knobs; a folder that already mixes them, a budget list into one budget's folder or
the reverse, and cells ``sweep.json`` lists whose folders are gone, each refused with the
folder to fix.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from race.errors import DamagedResult, UsageError
from race.run.grid import Plan
from race.store.cell import CellDir, cell_dirs
from race.store.io import SWEEP_JSON_FIX, read_json, read_result
from race.store.sweep_files import SweepDir


def _planned_ids(cells: list[dict]) -> set[str]:
    return {c["cell_id"] for c in cells if c.get("cell_id") and not c.get("refused")}


# keys that say where and how a sweep runs, not what it runs
_NOT_THE_PLAN = ("sweep.", "launcher", "report.", "hydra")


def _plan_keys(overrides) -> set[str]:
    """The overrides that shape a plan's cells (the budget is compared on its own)."""
    return {t for t in overrides if not t.lstrip("+~").startswith(_NOT_THE_PLAN)
            and not t.startswith("budget=")}


def check_same_plan(folder: Path, plan: Plan, overrides: list[str], *,
                    extend: bool = False) -> None:
    """Refuse to run ``plan`` in a folder that holds another plan's sweep.

    A folder's ``sweep.json`` lists the cells it was planned with; the same plan again
    (or part of it) resumes, a different one (another budget, grid or knob) would mix two
    experiments in one report, so it is a UsageError naming what differs, unless ``extend``
    (``sweep.extend=true``: add the new cells to the folder on purpose). An extension
    keeps what one report compares across its cells (:data:`EXTEND_KEYS`: the task, the
    budget, the pilots' fraction of it, the selection policy), each refused with its fix
    (:func:`check_extension`). A folder whose cells already mix tasks or pilot budgets
    (an older RACE's extension) is refused, naming the cell folders to remove
    (:func:`check_not_mixed`); so is a budget list's parent folder taken for one budget's.
    A folder with no ``sweep.json`` is new; a damaged one (torn, edited) is no plan to
    compare, so the folder's cell folders stand for it (:func:`run_sweep` sets the file
    aside and writes it anew). Nothing is written here.
    """
    path = SweepDir(folder).record
    if not path.is_file():
        _check_not_budget_parent(folder, plan.budget_flops)
        return
    planned = {c.spec.cell_id for c in plan.runnable}
    try:
        record = read_result(path, SWEEP_JSON_FIX)
    except DamagedResult as error:
        _check_cells_planned(folder, planned, error)
        return
    specs = _cell_specs(folder)
    check_not_mixed(folder, specs)
    if extend:
        check_extension(folder, record, specs, plan)
        return
    held = _planned_ids(record.get("cells", []))
    if planned <= held:  # the same plan (or part of it, after an extension): resume
        return
    differs = []
    if record.get("budget_flops") != plan.budget_flops:
        differs.append(f"budget {float(record.get('budget_flops') or 0):.3g} there, "
                       f"{plan.budget_flops:.3g} here")
    axes = {k: list(v) for k, v in plan.axes}
    if record.get("axes") != axes:
        changed = sorted(k for k in set(axes) | set(record.get("axes", {}))
                         if axes.get(k) != record.get("axes", {}).get(k))
        differs.append(f"axes {', '.join(changed)} differ")
    mine, theirs = _plan_keys(overrides), _plan_keys(record.get("overrides", []))
    if mine != theirs:
        differs.append(", ".join([*(f"{t} here" for t in sorted(mine - theirs)),
                                  *(f"{t} there" for t in sorted(theirs - mine))]))
    if not differs:
        differs.append(f"{len(planned - held)} of its {len(planned)} cells are not among the "
                       f"{len(held)} planned there")
    raise UsageError(f"sweep.name={folder.name}: {folder} holds another plan's sweep "
                     f"({'; '.join(differs)}); give another sweep.name, or pass "
                     f"sweep.extend=true to add these cells to it on purpose")


def _cell_specs(folder: Path) -> dict[str, dict]:
    """The ``spec.json`` of every cell folder of ``folder`` that has a readable one."""
    specs = {}
    for path in cell_dirs(folder):
        try:
            spec = read_json(CellDir(path).spec)
        except (OSError, ValueError):
            continue  # a damaged cell: the report names it
        if isinstance(spec, dict):
            specs[path.name] = spec
    return specs


def _task_of(spec: dict) -> str | None:
    return (spec.get("task") or {}).get("name")


def _first_pilots(folder: Path, specs: dict[str, dict]) -> dict[str, float]:
    """A flat folder's pilots by cell id, their pilot budgets in FLOPs (a ladder's rungs
    differ on purpose; cells that continue another are a rung above the first)."""
    if SweepDir(folder).ladder.is_file():
        return {}
    return {cell_id: float(spec["budget_flops"]) for cell_id, spec in specs.items()
            if not spec.get("continues") and isinstance(spec.get("budget_flops"), (int, float))}


def check_not_mixed(folder: Path, specs: dict[str, dict]) -> None:
    """A folder whose cells mix tasks, or (flat) pilot budgets: UsageError naming the cell
    folders that are not the folder's own (those of the groups other than the one holding
    its oldest cell), to remove. Only an older RACE's ``sweep.extend=true`` mixed them; the
    report cannot rank such a folder, and no command should add to it."""
    budgets = _first_pilots(folder, specs)
    for key, value_of in (("task", lambda c: _task_of(specs[c])),
                          ("pilot budget", lambda c: budgets.get(c))):
        groups: dict[object, list[str]] = {}
        for cell_id in specs:
            value = value_of(cell_id)
            if value is not None:
                groups.setdefault(value, []).append(cell_id)
        if len(groups) < 2:
            continue
        oldest = min((c for cells in groups.values() for c in cells),
                     key=lambda c: CellDir.of(folder, c).spec.stat().st_mtime)
        own = value_of(oldest)
        others = sorted(c for value, cells in groups.items() if value != own for c in cells)
        shown = {v: (f"{v:.3g}" if isinstance(v, float) else str(v)) for v in groups}
        raise UsageError(
            f"sweep.name={folder.name}: {folder} mixes {key} "
            f"{' and '.join(shown[v] for v in sorted(groups, key=lambda v: v != own))} (cells "
            f"an older RACE's sweep.extend=true "
            f"added), which no report can rank together; remove the {len(others)} cell "
            f"folder(s) not of its first {key} ({shown[own]}): "
            f"{' '.join(str(CellDir.of(folder, c).path) for c in others)}, then rerun")


# What one report compares across a folder's cells, so an extension must keep it:
# (key, its noun in a fix, why, the folder's value, the plan's value). A value of None
# (a record too old to say, a ladder's pilots) is not compared.
EXTEND_KEYS = (
    ("task", "task", "one report ranks one task's pilots",
     lambda folder, record, specs: (next(iter({_task_of(s) for s in specs.values()} - {None}),
                                         None) if specs else None) or record.get("task"),
     lambda plan: plan.task),
    ("budget", "budget", "one folder holds one budget's pilots",
     lambda folder, record, specs: record.get("budget_flops"),
     lambda plan: plan.budget_flops),
    ("selection.policy", "policy", "its report ranks one policy's cells (a ladder's report "
     "reads its first rung only)",
     lambda folder, record, specs: "ladder" if SweepDir(folder).ladder.is_file() else
     (record.get("config") or {}).get("selection", {}).get("policy"),
     lambda plan: plan.base.selection.policy),
    ("pilot.fraction", "fraction", "one report ranks pilots of one budget",
     lambda folder, record, specs: _folder_fraction(folder, record, specs),
     lambda plan: plan.pilot_fraction if plan.ladder is None else None),
)


def _folder_fraction(folder: Path, record: dict, specs: dict[str, dict]) -> float | None:
    """A flat folder's pilot fraction: its pilots' budget over the folder's (its cells say
    what ran; ``sweep.json`` says what the last command planned)."""
    if SweepDir(folder).ladder.is_file() or (record.get("config") or {}).get(
            "selection", {}).get("policy") == "ladder":
        return None
    budgets = set(_first_pilots(folder, specs).values())
    full = record.get("budget_flops")
    if len(budgets) == 1 and isinstance(full, (int, float)) and full > 0:
        return budgets.pop() / full
    return record.get("pilot_fraction")


def _shown(key: str, value) -> str:
    if key == "budget":
        return f"{value:.6g}".replace("+", "")
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


def check_extension(folder: Path, record: dict, specs: dict[str, dict], plan: Plan) -> None:
    """``sweep.extend=true`` with another value of a key of :data:`EXTEND_KEYS` than the
    folder's: UsageError, every such key on one line, each naming its value here, the
    folder's value and the fix (that value, or another ``sweep.name``)."""
    problems = []
    for key, noun, why, held_of, here_of in EXTEND_KEYS:
        held, here = held_of(folder, record, specs), here_of(plan)
        if held is None or here is None or _same(held, here):
            continue
        there, mine = _shown(key, held), _shown(key, here)
        also = (f" (or for both listed as an axis, budget={there},{mine}: one folder per "
                f"budget and a report across them)" if key == "budget" else "")
        problems.append(f"{key}={mine}: sweep.extend=true adds cells to {folder}, a sweep at "
                        f"{key}={there} (its sweep.json), and {why}; give "
                        f"{key}={there} to extend it, or another sweep.name for this "
                        f"{noun}{also}")
    problems += _task_knob_problems(folder, specs, plan)
    if problems:
        raise UsageError("; ".join(problems))


def _task_knob_problems(folder: Path, specs: dict[str, dict], plan: Plan) -> list[str]:
    """Each knob of the folder's task (``task.digits``, ``task.source``, ...) that this
    plan's cells give another value: one report ranks pilots of one task, and a knob of
    it changes the problems every cell is scored on (another task is
    :data:`EXTEND_KEYS`' own line, so only the same task's knobs are compared here)."""
    mine = next((dict(c.spec.task) for c in plan.cells if c.spec is not None), None)
    theirs = [s["task"] for s in specs.values() if isinstance(s.get("task"), dict)]
    if mine is None or not theirs or theirs[0].get("name") != mine.get("name"):
        return []
    problems = []
    for key in sorted((set(mine) | {k for t in theirs for k in t}) - {"name"}):
        held = []
        for task in theirs:
            if task.get(key) not in held:
                held.append(task.get(key))
        if mine.get(key) in held:
            continue
        there = ",".join(_knob_text(v) for v in held)
        problems.append(f"task.{key}={_knob_text(mine.get(key))}: sweep.extend=true adds "
                        f"cells to {folder}, a sweep at task.{key}={there} (its cells' "
                        f"spec.json), and one report ranks pilots of one task, each scored on "
                        f"the same problems; give task.{key}={there} to extend it, or "
                        f"another sweep.name for this task")
    return problems


def _knob_text(value) -> str:
    """A task knob's value as an override would give it."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return _shown("", value)


def _check_not_budget_parent(folder: Path, budget_flops: float) -> None:
    """One budget's sweep into a budget list's parent folder (``budget-<B>/`` folders,
    no ``sweep.json`` of its own): UsageError naming the folder to extend instead."""
    if not folder.is_dir():
        return
    held = sorted(p.name for p in folder.glob("budget-*") if SweepDir(p).record.is_file())
    if not held:
        return
    mine = f"budget-{budget_flops:.3g}".replace("+", "")
    raise UsageError(f"sweep.name={folder.name}: {folder} holds a budget list's sweeps "
                     f"({', '.join(held)}), one folder per budget; give the budget list "
                     f"again to extend them, or sweep.name={folder.name}/{mine} for this "
                     f"budget's folder alone")


def check_one_budget_folder(parent: Path, budgets: list[float]) -> None:
    """A budget list into one budget's sweep folder (its ``sweep.json`` or ``cells/``):
    UsageError (a budget list writes a folder per budget under its ``sweep.name``; nested
    in a sweep folder, its report would mix with the folder's own)."""
    folder = SweepDir(parent)
    if not (folder.record.is_file() or folder.cells.is_dir()):
        return
    try:
        there = float(read_json(folder.record)["budget_flops"])
    except (OSError, ValueError, KeyError, TypeError):
        there = None
    listed = ",".join(f"{b:.6g}".replace("+", "") for b in budgets)
    at = f" at budget={_shown('budget', there)}" if there else ""
    extend = (f", or extend it at its own budget with budget={_shown('budget', there)}"
              if there else "")
    raise UsageError(f"budget={listed}: sweep.name={parent.name} is one budget's sweep "
                     f"folder ({parent}{at}), and a budget list writes one folder per budget "
                     f"(budget-<B>/) under its sweep.name; give another sweep.name for the "
                     f"list, e.g. sweep.name={parent.name}-budgets{extend}")


def _check_cells_planned(folder: Path, planned: set[str], damage: DamagedResult) -> None:
    """A folder whose ``sweep.json`` is damaged: UsageError when it holds cell folders
    and none of them is ``planned`` (another plan's sweep); else the rerun may go on."""
    cells = SweepDir(folder).cells
    held = {p.name for p in cells.iterdir() if p.is_dir()} if cells.is_dir() else set()
    if held and not held & planned:
        raise UsageError(f"sweep.name={folder.name}: its sweep.json is damaged "
                         f"({damage.problem}) and none of the {len(held)} cell folder(s) "
                         f"there is planned by this command, so it holds another plan's "
                         f"sweep; rerun the command that made it (which writes sweep.json "
                         f"anew), or give another sweep.name")
