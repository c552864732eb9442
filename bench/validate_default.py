"""Live validation of the embedded default sweep: is its pick worth the full run?

Runs the default sweep (``race sweep``, no other arguments) into ``--out`` unless that
folder already holds it (a rerun resumes it), then ``race validate`` of it with
``validate.top_k=1``: the pick, run at the full budget F with every seed the sweep ran it
with. Prints the pick's realized ``val`` accuracy at F against

- its warm start: the same validation run's checkpoint 0, paired on the same problems
  (SE over problems, and over seeds when the pick ran more than one);
- the curve bank's best config of the pick's size at F, *run again on this machine*
  (``--here``, the default): the bank's command for that config at the full budget
  (``selection.policy=flat pilot.fraction=1``) with the bank's seeds, less the seeds the
  pick itself ran when it is the same config (so the two are independent runs), scoring
  ``val`` on the validation's problems (``validate.select_examples``) at F. The seed
  mean with its SE over seeds and problems; the SE of the difference combines the two
  SEs. ``within_1se`` says whether the difference is at most one SE of the difference.
  Why again: a run is reproducible on one machine, not across machines (the bank's
  warm starts already score differently from this machine's on the same problems), so
  the bank's own values differ from any run here by the machines' offset; they are
  printed beside it.

``above`` says whether the gain over the warm start exceeds twice its paired SE.

``val`` is the target the sweep selected on, so the comparison reads the numbers the pick
was made from, at F instead of at the pilots' budgets.

Usage: ``python bench/validate_default.py [--out /tmp/race-validate-default]
[--name default] [--bank bench/data/curve_bank_v3.json.gz] [--no-here] [--quick]``
(``--here`` costs two or three full-budget runs, about 5 minutes each on one core).
``--quick``: the same steps on a miniature problem in a temp folder: a flat sweep of two
tiny-s configs (G2 mu1, G2 mu2) on a 4-step warm start with a full budget of four steps,
validated on 16 problems, against a miniature bank (``--bank`` is ignored), both configs
run at F with seed 1, the way ``bench/curve_bank.py``'s bank is run, and read from its
sweep folder; ``--here`` reruns the bank's best config with its seed, as above. Four steps
teach nothing, so the miniature's report selects no config ("nothing learned"); ``--quick``
selects its best cell as a learning sweep's report would (``common.select_best_cell``), to
run the validation's code path.
Last line: ``pick=... realized=R se=S bank_best=... bank_best_value=B bank_best_se=T
here_best_value=H here_best_se=U here_seeds=... diff_se=D within_1se=yes|no
warm_start=W gain=G gain_se=H above=yes|no`` (without ``--here``: ``diff_se`` and
``within_1se`` against the bank's own value, and no ``here_*``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from bench.common import (
    QUICK_PILOT,
    add_quick,
    merged,
    quick_policy,
    race,
    scratch,
    select_best_cell,
    use_scratch_cache,
)
from bench.science.interactions import DEFAULT_BANK, allocation, configs, load, score

SWEEP_NAME = "default"
TARGET = "val"
# --quick: every run's knobs (a full budget F of four 2-prompt tiny-s steps, inline), the
# sweep's (two configs, G2 mu1 and G2 mu2, flat pilots at F/2) and the validation's problems
QUICK_BUDGET = 8e8
QUICK_SWEEP = ["selection.policy=flat", "pilot.fraction=0.5", "grid.update_epochs=1,2"]
QUICK_VALIDATE = ["validate.select_examples=16", "launcher=inline"]


def quick_runs() -> list[str]:
    """The knobs of every ``race sweep`` of ``--quick`` (its warm start built first)."""
    return merged(QUICK_PILOT, [f"model.hf_id={quick_policy()}", f"budget={QUICK_BUDGET}",
                                "pilot.eval_targets=[val]", "launcher=inline"])


def quick_bank(out: Path, runs: list[str]) -> Path:
    """``--quick``'s bank: the quick sweep's configs run at F (``pilot.fraction=1``) with
    seed 1, as ``bench/curve_bank.py``'s bank is; its sweep folder (``load`` reads it)."""
    race("sweep", *merged(runs, QUICK_SWEEP, ["pilot.fraction=1", "pilot.seed=1",
                                              "pilot.select_examples=16",
                                              f"sweep.out_dir={out}", "sweep.name=bank"]))
    return out / "bank"


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def target_evals(cell: Path) -> list[dict]:
    """A cell's eval rows on the selection target, in the order it wrote them."""
    return [r for r in read_jsonl(cell / "metrics.jsonl")
            if r["kind"] == "eval" and r["target"] == TARGET]


def validated(sweep: Path) -> tuple[dict, list[list[int]], list[list[int]]]:
    """The pick's spec and, per seed, its per-problem ``val`` scores at 0 and at F."""
    comparison = json.loads((sweep / "validate" / "comparison.json").read_text())
    if comparison["failed"]:
        sys.exit(f"{sweep}/validate: a validation run failed: {comparison['failed']}")
    record = json.loads((sweep / "validate" / "validate.json").read_text())
    spec, start, end = None, [], []
    for cell_id in record["cells"]:
        cell = sweep / "validate" / "cells" / cell_id
        spec = json.loads((cell / "spec.json").read_text())
        rows = target_evals(cell)
        first = next(r for r in rows if r["checkpoint"] == 0.0)
        last = max(rows, key=lambda r: r["checkpoint"])
        if first["problems"] != last["problems"]:
            sys.exit(f"{cell}: checkpoints 0 and F scored different problems; cannot pair")
        start.append(first["correct"])
        end.append(last["correct"])
    return spec, start, end


def here_scores(sweep: Path) -> list[list[int]]:
    """Per ok cell of a flat sweep, its per-problem ``val`` scores at its last checkpoint."""
    scores = []
    for cell in sorted((sweep / "cells").iterdir()):
        summary = json.loads((cell / "summary.json").read_text())
        if summary["status"] != "ok":
            sys.exit(f"{cell}: a run of the bank's best config failed: {summary.get('error')}")
        rows = target_evals(cell)
        scores.append([int(c) for c in max(rows, key=lambda r: r["checkpoint"])["correct"]])
    return scores


def rerun_here(args, spec: dict, best_cells: list[dict], same: bool,
               extra: list[str] = ()) -> tuple[list[list[int]], list[int]] | None:
    """The bank's best config of the pick's size, run at F on this machine with the bank's
    seeds less the pick's own when it is the same config (``same``), scored on ``val`` at
    F on the validation's problem count (``extra``: knobs before these, ``--quick``'s).
    Returns per-seed scores and the seeds (None when no seed is left)."""
    cell = best_cells[0]
    seeds = sorted({int(c["seed"]) for c in best_cells} - ({int(spec["seed"])} if same else set()))
    if not seeds:
        print(f"the bank ran {allocation(cell)} only with the pick's own seed: compared "
              "with the bank's value")
        return None
    name = f"{args.name}-bank-best-here"
    race("sweep", *merged(extra, [
        f"sweep.out_dir={args.out}", f"sweep.name={name}",
        "selection.policy=flat", "pilot.fraction=1", f"model={spec['model']}",
        f"reward={cell['reward']}", f"grid.group_size={cell['group_size']}",
        f"grid.update_epochs={cell['update_epochs']}",
        "pilot.seed=" + ",".join(map(str, seeds)), "pilot.checkpoints=[1.0]",
        "pilot.eval_targets=[val]", f"pilot.select_examples={spec['select_examples']}"]))
    return here_scores(args.out / name), seeds


def seed_mean(per_seed: list[list[int]]) -> tuple[float, float, list[float]]:
    """Mean over seeds and problems, its SE (seeds and problems), and per-problem means."""
    n = min(map(len, per_seed))
    problem = [sum(s[i] for s in per_seed) / len(per_seed) for i in range(n)]
    means = [sum(s[:n]) / n for s in per_seed]
    seed_var = statistics.variance(means) / len(means) if len(means) > 1 else 0.0
    return (sum(means) / len(means), math.sqrt(seed_var + statistics.variance(problem) / n),
            problem)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/race-validate-default"))
    parser.add_argument("--name", default=SWEEP_NAME,
                        help="the sweep's folder name under --out (an existing default "
                             "sweep there is resumed, not rerun)")
    parser.add_argument("--bank", type=Path, default=DEFAULT_BANK)
    parser.add_argument("--here", action=argparse.BooleanOptionalAction, default=True,
                        help="run the bank's best config of the pick's size again on this "
                             "machine and compare with that (default; --no-here: with the "
                             "bank's own value, from the machine that ran the bank)")
    add_quick(parser, "two 2-step tiny-s configs, a miniature bank of them at F")
    args = parser.parse_args()
    runs, sweep_knobs, validate_knobs = [], [], []
    if args.quick:
        use_scratch_cache()
        args.out, runs = scratch("validate-default"), quick_runs()
        sweep_knobs, validate_knobs = merged(runs, QUICK_SWEEP), QUICK_VALIDATE
    sweep = args.out / args.name
    race("sweep", *sweep_knobs, f"sweep.out_dir={args.out}", f"sweep.name={args.name}")
    if args.quick:  # two-step configs learn nothing: their report rightly selects none
        select_best_cell(sweep)
    race("validate", str(sweep), "validate.top_k=1", *validate_knobs)
    if args.quick:
        args.bank = quick_bank(args.out, runs)
    spec, start, end = validated(sweep)
    realized, realized_se, end_problem = seed_mean(end)
    warm, _, start_problem = seed_mean(start)
    diffs = [b - a for a, b in zip(start_problem, end_problem)]
    gain = sum(diffs) / len(diffs)
    gain_se = math.sqrt(statistics.variance(diffs) / len(diffs))

    bank = [c for c in load(args.bank) if c["model"] == spec["model"]]
    full = max(c["budget_flops"] for c in bank)
    if abs(full - spec["budget_flops"]) > 1e-6 * full:
        sys.exit(f"the bank's full budget {full:.3g} is not the sweep's {spec['budget_flops']:.3g}")
    scored = sorted(((s, cells) for cells in configs(bank).values()
                     if (s := score(cells, TARGET, 1.0)) is not None),
                    key=lambda x: -x[0]["mean"])
    best, best_cells = scored[0]
    pick = allocation({"group_size": spec["group_size"], "update_epochs": spec["update_epochs"],
                       "reward": spec["reward"]["name"]})
    same = next((s for s, cells in scored if allocation(cells[0]) == pick), None)
    here = None
    rerun = args.here and rerun_here(args, spec, best_cells, allocation(best_cells[0]) == pick,
                                     runs)
    if rerun:
        here_per_seed, here_seeds = rerun
        here_mean, here_se, here_problem = seed_mean(here_per_seed)
        here = {"mean": here_mean, "se": here_se, "seeds": here_seeds, "n": len(here_problem)}
    reference = here or best
    diff_se = math.hypot(realized_se, reference["se"])
    within = abs(realized - reference["mean"]) <= diff_se

    print(f"\npick {spec['model']} {pick}: realized {TARGET} at F {realized:.3f} "
          f"(SE {realized_se:.3f}, {len(end)} seed(s) x {len(end_problem)} problems)")
    if same is not None:
        print(f"  the bank's value of the same config: {same['mean']:.3f} (SE {same['se']:.3f},"
              f" {same['seeds']} seeds x {same['n']} problems)")
    print(f"  the bank's best config of {spec['model']}: {allocation(best_cells[0])} "
          f"{best['mean']:.3f} (SE {best['se']:.3f}) in the bank"
          + (f"; run here, seeds {','.join(map(str, here['seeds']))} x {here['n']} problems: "
             f"{here['mean']:.3f} (SE {here['se']:.3f})" if here else "")
          + f"; difference {realized - reference['mean']:+.3f} (SE {diff_se:.3f}): "
          f"{'within' if within else 'outside'} one SE")
    print(f"  warm start {warm:.3f}; gain {gain:+.3f} (paired SE {gain_se:.3f}"
          + (f", {gain / gain_se:.1f} SE)" if gain_se else ": every problem moved alike)"))
    print(f"pick={spec['model']}/{pick.replace(' ', '/')} realized={realized:.4f} "
          f"se={realized_se:.4f} bank_best={allocation(best_cells[0]).replace(' ', '/')} "
          f"bank_best_value={best['mean']:.4f} bank_best_se={best['se']:.4f} "
          + (f"here_best_value={here['mean']:.4f} here_best_se={here['se']:.4f} "
             f"here_seeds={','.join(map(str, here['seeds']))} " if here else "")
          + f"diff_se={diff_se:.4f} within_1se={'yes' if within else 'no'} "
          f"warm_start={warm:.4f} gain={gain:.4f} gain_se={gain_se:.4f} "
          f"above={'yes' if gain - 2 * gain_se > 0 else 'no'}")


if __name__ == "__main__":
    main()
