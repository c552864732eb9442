"""How much wall time does `race sweep` add around the pilots it runs?

Runs a small local sweep of tiny pilots (``launcher=local``, one slot, so pilots run one
after another and their wall times add up) several times, each in a fresh folder. For
each run, the orchestration overhead is the sweep command's wall time minus the pilots'
own wall time (``wall_s`` in their summaries: load, rollout, learning, feedback, eval,
other), as a fraction of the sweep's wall time. What it contains: Python start-up, grid
expansion and composition, submitit's job start (a fresh interpreter importing torch and
transformers per pilot), polling, results files and the report with its plots.

Also measures SLURM submit-to-start latency on the localhost cluster when one answers
(``bash launchers/slurm-localhost.sh up``): submitit jobs that return the time they started.

Usage: ``python bench/sweep_overhead.py [--repeats 3] [--cells 2] [--quick]``.
Last line: ``overhead_fraction=<median>``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import QUICK_PILOT, add_quick, merged, quick_policy, use_scratch_cache

GRID = ["model=tiny-s", "reward=rule", "grid.update_epochs=1", "grid.prompts_per_step=4",
        "grid.max_new_tokens=24", "pilot.eval_examples=32", "budget=1.2e11",
        "launcher=local", "launcher.slots=1", "launcher.threads_per_pilot=1",
        "launcher.poll_s=0.5", "selection.policy=flat"]  # independent pilots, one slot


def one_sweep(folder: Path, cells: int, grid: list[str] = GRID) -> dict:
    sizes = ",".join(str(g) for g in (4, 8, 2, 6)[:cells])
    args = [sys.executable, "-m", "race.cli", "sweep", *merged(grid, [f"grid.group_size={sizes}"]),
            f"sweep.out_dir={folder}", "sweep.name=bench"]
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"sweep failed (rc {out.returncode}):\n{out.stderr[-2000:]}")
    pilots = sum(sum(json.loads(p.read_text())["wall_s"].values())
                 for p in (folder / "bench" / "cells").glob("*/summary.json"))
    launch = json.loads((folder / "bench" / "sweep.json").read_text())["launch_wall_s"]
    return {"wall_s": wall, "pilots_s": pilots, "launch_s": launch,
            "overhead": (wall - pilots) / wall, "launch_overhead": (launch - pilots) / launch}


def _started() -> float:
    return time.time()


def slurm_latency(repeats: int = 5) -> list[float] | None:
    """Seconds from submit to start of trivial submitit jobs on the SLURM cluster."""
    if shutil.which("sinfo") is None:
        return None
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        return None
    import submitit

    latencies = []
    with tempfile.TemporaryDirectory() as tmp:
        ex = submitit.AutoExecutor(tmp, cluster="slurm")
        ex.update_parameters(timeout_min=2, cpus_per_task=1, mem_gb=1)
        for _ in range(repeats):
            submitted = time.time()
            job = ex.submit(_started)
            latencies.append(job.result() - submitted)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cells", type=int, default=2)
    add_quick(parser, "one sweep of one 2-step pilot, one SLURM job")
    args = parser.parse_args()
    grid, jobs = GRID, 5
    if args.quick:
        use_scratch_cache()
        grid = merged(GRID, QUICK_PILOT, [f"model.hf_id={quick_policy()}", "pilot.fraction=0.25"])
        args.repeats, args.cells, jobs = 1, 1, 1
    rows = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            row = one_sweep(Path(tmp), args.cells, grid)
        rows.append(row)
        print(f"run {i}: sweep {row['wall_s']:.1f} s, pilots {row['pilots_s']:.1f} s, "
              f"launch {row['launch_s']:.1f} s -> overhead {row['overhead']:.3f} "
              f"(launch only {row['launch_overhead']:.3f})", flush=True)
    latencies = slurm_latency(jobs)
    if latencies:
        print(f"slurm submit-to-start: median {statistics.median(latencies):.2f} s over "
              f"{len(latencies)} jobs (min {min(latencies):.2f}, max {max(latencies):.2f})")
    else:
        print("slurm submit-to-start: no SLURM cluster answers (bash "
              "launchers/slurm-localhost.sh up)")
    launch = statistics.median(r["launch_overhead"] for r in rows)
    print(f"launch_overhead_fraction={launch:.3f}")
    print(f"overhead_fraction={statistics.median(r['overhead'] for r in rows):.3f}")


if __name__ == "__main__":
    main()
