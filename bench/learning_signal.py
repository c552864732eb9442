"""Does GRPO climb on the embedded testbed? A small matrix of pilots, each scored by its
paired gain over its own warm start, in standard errors.

Each run is one pilot (``race.pilot.loop.run_pilot``, the code a sweep runs) of the embedded
task at ``--fraction`` of the embedded full-run budget (default F/6, the default ladder's
last rung: a budget the default sweep affords). It is scored on the same 1,000 ``val``
problems at its start (the warm start) and its end; the gain is the mean of the
per-problem differences and its SE is theirs (a paired test: the problems' own difficulty
cancels). ``test`` and ``ood`` are not read: what is tuned here is tuned on ``val``.

The matrix contrasts the testbed before this round (clean demonstrations, lr 5e-5 and
token-level aggregation) with the levers that were tried: the learning rate, loss
aggregation, std scaling, and a warm start whose demonstrations compute a share of the
subtraction steps as additions (``warmstart.flip``), so that the right procedure is in the
policy's support but not its mode.

Runs are stored in ``bench/data/learning_signal.json`` as they finish; a rerun skips the
ones there, so it resumes after an interruption and reprints in seconds when nothing is
missing. ``--only NAME`` runs (or reprints) one setting.

Usage: ``python bench/learning_signal.py [--seeds 2] [--fraction 0.1667]``.
Last line: ``best_gain_se=<z> seeds=<n> setting=<name> model=<size>``, the setting whose
weakest seed gains the most (every seed must clear a bar for it to count).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from bench.common import DATA as BENCH_DATA
from bench.common import add_quick, quick_policy, scratch, use_scratch_cache
from race.config import EMBEDDED_BUDGET, compose_config, to_run_spec
from race.pilot.loop import run_pilot
from race.store import io as results

DATA = BENCH_DATA / "learning_signal.json"
# name -> overrides; the first is the testbed as it stood (clean warm start, old default)
SETTINGS = {
    "clean, lr 5e-5, token": ["warmstart.flip=0", "grid.lr=5e-5", "grid.aggregation=token"],
    "clean, lr 3e-4, sequence": ["warmstart.flip=0", "grid.lr=3e-4"],
    "flip 0.6, lr 5e-5, sequence": ["warmstart.flip=0.6", "grid.lr=5e-5"],
    "flip 0.6, lr 3e-4, token": ["warmstart.flip=0.6", "grid.lr=3e-4", "grid.aggregation=token"],
    "flip 0.6, lr 3e-4, no std": ["warmstart.flip=0.6", "grid.lr=3e-4",
                                  "grid.scale_rewards=false"],
    "flip 0.6, lr 3e-4, sequence": ["warmstart.flip=0.6", "grid.lr=3e-4"],
}
MODELS = ("tiny-s", "tiny-m", "tiny-l")


def paired_gain(start: list[int], end: list[int]) -> tuple[float, float]:
    """Mean of ``end - start`` over the same problems, and its standard error."""
    diffs = [b - a for a, b in zip(start, end)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return mean, math.sqrt(var / n)


def run_one(setting: str, model: str, seed: int, fraction: float, extra: tuple = ()) -> dict:
    """One pilot of ``setting`` and its paired ``val`` gain over its warm start (``extra``:
    overrides after the setting's)."""
    overrides = [f"model={model}", "reward=rule", f"pilot.fraction={fraction}",
                 f"pilot.seed={seed}", "pilot.eval_targets=[val]", "pilot.checkpoints=[1.0]",
                 "pilot.select_examples=1000", "pilot.device=cpu", *SETTINGS[setting], *extra]
    cfg = compose_config(overrides)
    cfg.budget = EMBEDDED_BUDGET
    spec = to_run_spec(cfg, EMBEDDED_BUDGET * fraction)
    with tempfile.TemporaryDirectory(prefix="race-learning-signal-") as out:
        summary = run_pilot(spec, Path(out) / spec.cell_id, checkpoint_every=0)
        if summary["status"] != "ok":
            raise RuntimeError(f"{setting} {model} seed {seed}: {summary['error']}")
        rows = results.read_jsonl(Path(out) / spec.cell_id / "metrics.jsonl")
    evals = [r for r in rows if r["kind"] == "eval" and r["target"] == "val"]
    steps = [r for r in rows if r["kind"] == "step"]
    gain, se = paired_gain(evals[0]["correct"], evals[-1]["correct"])
    fifth = max(1, len(steps) // 5)
    return {"setting": setting, "model": model, "seed": seed, "fraction": fraction,
            "overrides": overrides, "cell_id": spec.cell_id, "steps": len(steps),
            "start": evals[0]["accuracy"], "end": evals[-1]["accuracy"],
            "n": len(evals[0]["correct"]), "gain": gain, "se": se, "z": gain / se if se else 0.0,
            "train_reward_first": sum(r["train_reward"] for r in steps[:fifth]) / fifth,
            "train_reward_last": sum(r["train_reward"] for r in steps[-fifth:]) / fifth,
            "wall_s": sum(summary["wall_s"].values())}


def main() -> None:
    import torch

    torch.set_num_threads(1)  # tiny models run best on one thread, beside other work
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=1 / 6)
    parser.add_argument("--models", default="tiny-m,tiny-l")
    parser.add_argument("--only", default="", help="one setting's name")
    parser.add_argument("--bar", type=float, default=5.0, help="gain, in SEs, every seed "
                        "must clear for a setting to count")
    add_quick(parser, "one setting, tiny-s of a 4-step warm start, one seed, 2 steps, "
                      "16 problems, results in a temp folder")
    args = parser.parse_args()
    data, extra = DATA, ()
    if args.quick:
        use_scratch_cache()
        data = scratch("learning-signal") / DATA.name
        extra = (f"model.hf_id={quick_policy()}", "pilot.select_examples=16",
                 "grid.prompts_per_step=2", "grid.group_size=2", "grid.max_new_tokens=12")
        args.only, args.models, args.seeds, args.fraction = next(iter(SETTINGS)), "tiny-s", 1, 1e-4
    done = json.loads(data.read_text()) if data.is_file() else []
    key = lambda r: (r["setting"], r["model"], r["seed"], round(r["fraction"], 6))  # noqa: E731
    have = {key(r) for r in done}
    settings = [args.only] if args.only else list(SETTINGS)
    models = args.models.split(",")
    for setting in settings:
        for model in models:
            for seed in range(args.seeds):
                if (setting, model, seed, round(args.fraction, 6)) in have:
                    continue
                done.append(run_one(setting, model, seed, args.fraction, extra))
                results.write_json(data, sorted(done, key=key))
                r = done[-1]
                print(f"ran {setting} {model} seed {seed}: {r['start']:.3f} -> "
                      f"{r['end']:.3f} ({r['z']:+.1f} SE)", flush=True)
    print(f"{'setting':<30}{'model':<8}{'seed':>5}{'steps':>6}{'val start':>10}{'val end':>9}"
          f"{'gain (SE)':>16}{'z':>7}{'train reward':>16}")
    shown = [r for r in sorted(done, key=key) if r["setting"] in settings
             and r["model"] in models and round(r["fraction"], 6) == round(args.fraction, 6)]
    for r in shown:
        print(f"{r['setting']:<30}{r['model']:<8}{r['seed']:>5}{r['steps']:>6}"
              f"{r['start']:>10.3f}{r['end']:>9.3f}{r['gain']:>+9.3f} ({r['se']:.3f})"
              f"{r['z']:>+7.1f}{r['train_reward_first']:>8.3f}->{r['train_reward_last']:.3f}")
    by = {}
    for r in shown:
        by.setdefault((r["setting"], r["model"]), []).append(r["z"])
    best = max(by.items(), key=lambda kv: (len(kv[1]) >= args.seeds, min(kv[1])))
    (setting, model), zs = best
    print(f"n={shown[0]['n'] if shown else 0} val problems per checkpoint, paired; fraction "
          f"{args.fraction:.4f} of the embedded budget")
    print(f"best_gain_se={min(zs):.1f} seeds={len(zs)} setting={setting!r} model={model}")


if __name__ == "__main__":
    main()
