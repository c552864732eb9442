"""What several bench scripts share: the ``--quick`` flag and the miniature problem its
runs use (a tiny warm start in a scratch model cache, a pilot of a few steps), a scratch
folder for outputs, JSON writes, running ``race`` as a subprocess, and timing.

A quick run never writes under ``bench/data`` or ``bench/figures`` (the committed
measurements) nor into the user's model cache: :func:`scratch` folders and
:func:`use_scratch_cache` keep everything under the system's temp folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from race.warmstart.policies import WarmStartRecipe, build_tiny_policy
from race.warmstart.prm import PRMRecipe

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DATA = BENCH / "data"  # committed measurements: only a full run writes here
FIGURES = BENCH / "figures"
SHARED_CACHE = "RACE_BENCH_CACHE"  # a scratch model cache quick runs share (see below)
USER_CACHE = Path.home() / ".cache" / "race"  # race's default model cache

# a miniature pilot's knobs (tests/test_sweep.py's, at 0.3 of its budget: 2-3 GRPO steps
# of tiny-s in a pilot at the default pilot.fraction, 1/16); add model.hf_id=quick_policy()
QUICK_PILOT = ["model=tiny-s", "reward=rule", "grid.prompts_per_step=2", "grid.group_size=2",
               "grid.max_new_tokens=12", "grid.update_epochs=1", "grid.lora_rank=4",
               "pilot.eval_examples=4", "pilot.select_examples=4", "pilot.eval_targets=[test]",
               "pilot.checkpoints=[0.5,1.0]", "budget=6e9"]


def merged(*groups: list[str] | tuple[str, ...]) -> list[str]:
    """Hydra overrides of ``groups`` in order, a later ``key=value`` replacing an earlier
    one of the same key in its place (``race sweep`` refuses a key given twice)."""
    out: dict[str, str] = {}
    for override in (o for group in groups for o in group):
        out[override.split("=", 1)[0]] = override
    return list(out.values())


def add_quick(parser: argparse.ArgumentParser, what: str = "") -> None:
    """The ``--quick`` flag every script takes: its whole code path on a miniature problem,
    outputs under a temp folder (``what`` says what it shrinks)."""
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run in seconds on a miniature problem, writing only "
                             "under a temp folder" + (f" ({what})" if what else ""))


def scratch(name: str) -> Path:
    """A fresh folder under the system's temp folder (left for the OS to clean)."""
    return Path(tempfile.mkdtemp(prefix=f"race-bench-{name}-"))


def use_scratch_cache() -> Path:
    """Point ``RACE_CACHE_DIR`` (this process and its children) at a fresh scratch folder,
    so quick builds never land in, or read from, the user's model cache.

    Where ``$RACE_BENCH_CACHE`` names a folder, that one instead: a scratch cache several
    quick runs share, so that the warm starts they have in common are built once
    (``tests/test_bench_quick.py`` sets it for its session). It may be neither the user's
    model cache nor inside the repository."""
    shared = os.environ.get(SHARED_CACHE)
    folder = Path(shared).resolve() if shared else scratch("cache")
    if shared and (folder == USER_CACHE.resolve() or folder.is_relative_to(REPO)):
        raise SystemExit(f"{SHARED_CACHE}={shared}: a shared scratch cache, neither the "
                         f"user's model cache {USER_CACHE} nor inside {REPO}; unset it, or "
                         f"name a temp folder")
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["RACE_CACHE_DIR"] = str(folder)
    return folder


def quick_recipe(model: str) -> WarmStartRecipe:
    """A warm start of a few steps, scored on a handful of problems (about a second)."""
    return WarmStartRecipe(model=model, steps=4, batch_size=8, warmup_steps=2, curve_every=2,
                           curve_examples=8, val_examples=8, eval_examples=8)


def quick_prm_recipe(model: str, init_from: str) -> PRMRecipe:
    """A PRM trained for two steps on top of a :func:`quick_recipe` policy."""
    return PRMRecipe(model=model, init_from=init_from, train_steps=2, batch_size=8,
                     warmup_steps=1, eval_examples=16)


def quick_policy(model: str = "tiny-s") -> Path:
    """The folder of a :func:`quick_recipe` warm start of ``model`` (built on first use)."""
    return build_tiny_policy(model, recipe=quick_recipe(model))


def write_json(path: Path | str, value: Any) -> Path:
    """``value`` as indented JSON at ``path``, its folder made first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, default=str))
    return path


def race(*args: str, capture: bool = False, check: bool = True,
         cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``race <args>`` with this interpreter (echoed as ``$ race ...`` unless
    captured); ``check``: exit on a non-zero status, with the tail of its stderr."""
    if not capture:
        print("$ race " + " ".join(args), flush=True)
    done = subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=capture,
                          text=True, cwd=cwd)
    if check and done.returncode != 0:
        tail = (done.stderr or "")[-2000:] if capture else ""
        raise SystemExit(f"race {args[0]} failed (exit {done.returncode})"
                         + (f":\n{tail}" if tail else ""))
    return done


def median_seconds(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The median wall seconds of ``repeats`` calls of ``fn`` and its last result."""
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def select_best_cell(sweep: Path) -> dict:
    """Rewrite a flat sweep's ``selection.json`` to select its best cell on the selection
    target, as the report of a sweep that learned would. Miniature sweeps (``--quick``,
    the tests' stand-ins) learn nothing in a few steps, so their reports rightly select
    none; this lets what comes after a selection (``race validate``) run on them. Returns
    the selected record."""
    from race.core.specs import RunSpec

    sweep = Path(sweep)
    selection = json.loads((sweep / "selection.json").read_text())
    reads = []
    for path in sorted((sweep / "cells").glob("*/summary.json")):
        summary = json.loads(path.read_text())
        spec = json.loads((path.parent / "spec.json").read_text())
        reads.append((summary["final_eval"][selection["target"]]["accuracy"],
                      path.parent.name, spec))
    score, cell_id, spec = max(reads, key=lambda r: (r[0], r[1]))
    record = {"config_id": RunSpec.from_dict(spec).config_id, "cell_ids": [cell_id],
              "score": score, "lo": None, "hi": None}
    selection["selected"] = [record]
    (sweep / "selection.json").write_text(json.dumps(selection))
    return record
