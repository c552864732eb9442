"""The one launch helper every sweep kind shares (flat, each ladder rung, validation):
claim the cells without an ok summary, warm-start what they need, launch them through the
configured launcher, wait for the cells another process holds, and show one progress line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from race.catalog import load_entry
from race.core.fmt import fmt_flops
from race.run.launch.job import PilotJob, cores, threads
from race.run.launch.launcher_base import Task
from race.run.launch.watch import launch, quiet_library_output
from race.store import claims
from race.store.cell import CellDir, last_charged_flops
from race.store.io import read_json
from race.warmstart.family import build_family, family_status, ready_family
from race.warmstart.tokenizer import in_family


def launch_cells(folder: Path, specs: list, launcher, me: dict, *, label: str = "",
                 keep_final_state: bool = False, log: str = "sweep.log",
                 command: str = "race sweep") -> dict:
    """Claim, warm-start and launch the cells of ``specs`` (under ``folder/cells/``)
    without an ok summary; wait for the ones another process holds.

    Args:
        folder: the sweep folder (or a sweep's ``validate/``).
        launcher: the ``LauncherConfig``.
        me: this process (:func:`race.store.claims.this_process`), the claims' owner.
        label: what the progress line and messages call this batch (a ladder rung).
        keep_final_state: the pilots keep their final state (a later rung continues it).
        log: the file under ``folder`` that library output goes to.
        command: the command its messages name (``race sweep``, ``race validate``).

    Returns the counts: ``skipped`` (already ok), ``ran``, ``wall_s`` (of the launch),
    ``by_other`` (cell -> the process that ran it) and ``launched`` (cell ids).
    """
    todo = [s for s in specs if not CellDir.of(folder, s.cell_id).is_ok()]
    skipped = len(specs) - len(todo)
    mine, held = claims.claim_cells(folder, [s.cell_id for s in todo], me)
    where = f" of {label}" if label else ""
    try:
        if skipped:
            print(f"{command}: {skipped} cell(s){where} already ok in {folder}; running "
                  f"the other {len(todo)}", file=sys.stderr)
        if held:
            print(f"{command}: {len(held)} cell(s){where} are being run by "
                  f"{held_text(held)}; waiting for them instead of running them twice",
                  file=sys.stderr)
        ours = [s for s in todo if s.cell_id in mine]
        warm_start(ours, workers=cores(), command=command)
        tasks = [Task(s, str(CellDir.of(folder, s.cell_id).path)) for s in ours]
        progress = SweepProgress(folder, [s.cell_id for s in specs],
                                 sum(s.budget_flops for s in specs), skipped,
                                 elsewhere=len(held), label=label,
                                 command=command)
        launch_start = time.perf_counter()
        job = PilotJob(threads(launcher), launcher.checkpoint_every,
                       keep_final_state=keep_final_state)
        with quiet_library_output(folder / log):
            counts = launch(tasks, launcher, folder / "submitit", on_change=progress, job=job)
            _wait_for_others(folder, held, launcher.poll_s, counts, progress, me)
        progress.close()
        wall_s = time.perf_counter() - launch_start
    finally:
        claims.release_claims(folder, mine, me)
    return {"skipped": skipped, "ran": counts.done + counts.failed, "wall_s": wall_s,
            "by_other": held, "launched": sorted(mine)}


def family_models(spec) -> tuple[str | None, str | None]:
    """The tiny policy and tiny PRM a cell's pilot needs built into the model cache (None
    where its weights come from elsewhere: ``policy_path``, a Hugging Face id)."""
    policy = spec.model if not spec.policy_path and in_family(
        load_entry("model", spec.model).get("tokenizer")) else None
    prm = dict(spec.reward).get("model")
    return policy, prm if prm and in_family(load_entry("model", prm).get("tokenizer")) else None


def needs_warm_start(spec) -> bool:
    """Whether a cell's pilot needs a tiny policy or tiny PRM built into the model cache."""
    return any(family_models(spec))


def _family_needs(specs) -> tuple[list[str], list[str], list[tuple[dict, dict]]]:
    """The tiny policies and tiny PRMs the cells of ``specs`` need, and the (task entry,
    ``warmstart.*`` knobs) pairs each is built for."""
    specs = list(specs)
    built = [family_models(s) for s in specs]
    policies = sorted({policy for policy, _ in built if policy})
    prms = sorted({prm for _, prm in built if prm})
    recipes = sorted({(tuple(s.task), tuple(s.warmstart)) for s in specs
                      if any(family_models(s))})
    return policies, prms, [(dict(task), dict(warm)) for task, warm in recipes]


def warm_start(specs, workers: int, command: str = "race sweep") -> list[str]:
    """Build the tiny policies and tiny PRMs the pilots need (cached; built once), saying
    so on stderr as ``command``.

    Returns the names built or found. Models with weights elsewhere (``policy_path`` or a
    Hugging Face id) need nothing.
    """
    policies, prms, recipes = _family_needs(specs)
    if not policies and not prms:
        return []
    start = time.perf_counter()
    print(f"{command}: warm start of {', '.join(policies + prms)} (the weights RACE ships "
          f"for the default recipes; another recipe is trained here, once)...",
          file=sys.stderr, flush=True)
    for task, warm in recipes:
        build_family(policies, prms=prms, workers=workers, task=task, warmstart=warm)
    print(f"{command}: warm start ready in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return policies + prms


def check_warm_starts(specs) -> None:
    """What :func:`warm_start` would refuse, refused before anything is written (a sweep's
    ``sweep.json``, a pilot's cell folder): each warm start RACE ships that the cells need
    is installed (or found) and checked (:func:`race.warmstart.family.ready_family`), so
    a damaged cached copy is one UsageError here, not a failed pilot per cell. A recipe
    RACE does not ship is left to :func:`warm_start` to train."""
    policies, prms, recipes = _family_needs(specs)
    for task, warm in recipes:
        ready_family(policies, prms=prms, task=task, warmstart=warm)


def warm_start_notes(specs) -> list[str]:
    """What ``race plan`` says of the warm starts its cells need, read only (nothing
    installed or built; :func:`race.warmstart.family.family_status`): one line for the
    recipes RACE does not ship (a sweep trains them here first, and their results differ
    from the docs), one per damaged cached copy (a sweep refuses it) and one for local
    builds. Empty where every warm start is shipped."""
    policies, prms, recipes = _family_needs(specs)
    states: dict[str, dict[str, tuple]] = {}
    for task, warm in recipes:
        for name, (state, folder, bad) in family_status(policies, prms=prms, task=task,
                                                       warmstart=warm).items():
            states.setdefault(state, {})[str(folder)] = (name, folder, bad)
    notes = []
    if train := states.get("to train"):
        names = ", ".join(sorted({name for name, _, _ in train.values()}))
        notes.append(f"warm start of {names}: not a recipe RACE ships (the warmstart.* or "
                     f"task knobs differ from a shipped one's, e.g. warmstart.seed), so "
                     f"race sweep trains it on this machine first, once (cached under "
                     f"RACE_CACHE_DIR), and its results will differ from the docs")
    for _name, folder, bad in (states.get("damaged") or {}).values():
        notes.append(f"RACE_CACHE_DIR: the cached warm start {folder} is not the one RACE "
                     f"ships ({bad} differs), so race sweep and race pilot refuse it; "
                     f"remove it (rm -r {folder}) and RACE installs the shipped weights")
    if local := states.get("local build"):
        folders = " ".join(str(f) for _, f, _ in local.values())
        notes.append(f"warm start {folders}: a local build, not the weights RACE ships: "
                     f"results will differ from the docs (rm -r it to use the shipped ones)")
    return notes


LOG_EVERY_S = 300.0  # a log file's status line, between finished pilots, while FLOPs move


class SweepProgress:
    """One status line on stderr: cells done/running/failed and FLOPs spent, headed by
    the command's name (``[sweep]``, ``[validate]``) and the batch's label. On a terminal
    the line is redrawn; in a log file a line is written per finished pilot and, while
    pilots run, one every :data:`LOG_EVERY_S` seconds in which their FLOPs moved (a
    pilot of an hour is not a silent hour)."""

    def __init__(self, sweep_dir: Path, cell_ids: list[str], budget_flops: float,
                 done_before: int, elsewhere: int = 0, label: str = "",
                 command: str = "race sweep"):
        self.dir, self.cell_ids, self.budget = sweep_dir, cell_ids, budget_flops
        self.done_before, self.elsewhere = done_before, elsewhere
        name = command.removeprefix("race ")
        self.prefix = f"[{name} {label}]" if label else f"[{name}]"
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.last, self.shown, self.logged_flops = None, 0.0, None
        self.finished_flops: dict[str, float] = {}

    def spent_flops(self) -> float:
        """Charged FLOPs of finished cells (read once) plus running cells' last steps."""
        total = 0.0
        for cell_id in self.cell_ids:
            if cell_id in self.finished_flops:
                total += self.finished_flops[cell_id]
                continue
            cell = CellDir.of(self.dir, cell_id)
            if cell.has_summary():
                try:
                    spent = read_json(cell.summary)["total_flops"]
                except (ValueError, KeyError, OSError, TypeError):
                    continue
                self.finished_flops[cell_id] = spent
                total += spent
            elif cell.metrics.is_file():
                total += last_charged_flops(cell.metrics)
        return total

    def __call__(self, counts) -> None:
        finished = (counts.done, counts.failed, counts.running)
        now = time.perf_counter()
        # a terminal: at most one redraw a second (reading results costs CPU pilots need);
        # a log file: a line per finished pilot, else at most one per LOG_EVERY_S
        if finished == self.last and now - self.shown < (1.0 if self.tty else LOG_EVERY_S):
            return
        spent, self.shown = self.spent_flops(), now
        if not self.tty and finished == self.last and spent == self.logged_flops:
            return  # ... and only where the running pilots got further
        self.last, self.logged_flops = finished, spent
        elapsed = now - self.start
        total = counts.total + self.done_before + self.elsewhere
        line = (f"{self.prefix} {counts.done + self.done_before}/{total} "
                f"done, {counts.running} running, {counts.failed} failed; FLOPs spent "
                f"{fmt_flops(spent)} of {fmt_flops(self.budget)}; "
                f"{int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
        print(f"\r{line}" if self.tty else line, end="" if self.tty else "\n",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def held_text(held: dict[str, dict]) -> str:
    """Who holds ``held``: ``another process (pid 12 on h: race validate ...)``, each
    holder by its own command line (a sweep or a validation may hold cells)."""
    owners = {(o["pid"], o["host"]): o for o in held.values()}
    who = "; ".join(f"pid {o['pid']} on {o['host']}: {o.get('argv', '')}"
                    for o in owners.values())
    return f"another process ({who})"


def _wait_for_others(sweep_dir: Path, held: dict[str, dict], poll_s: float, counts,
                     progress, me: dict) -> None:
    """Wait until no other process holds any of ``held``: its sweep released it or is
    gone, and no pilot runs it any more (a killed sweep's pilot still running: the cell
    stays unfinished when it dies, and a rerun resumes it). The cells count as running
    in ``counts`` (shown by ``progress``) until then."""
    waiting = dict(held)
    while waiting:
        for cell_id in list(waiting):
            if claims.cell_holder(sweep_dir, cell_id, me) is None:
                waiting.pop(cell_id)
                ok = CellDir.of(sweep_dir, cell_id).is_ok()
                counts.done += ok
                counts.failed += not ok
        counts.running = len(waiting)
        progress(counts)
        if waiting:
            time.sleep(poll_s)
