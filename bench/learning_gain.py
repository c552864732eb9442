"""Does a default pilot really learn? tiny-m, rule reward, a 4.5e12 full-run budget.

Runs the pilot of ``model=tiny-m reward=rule budget=4.5e12`` (every other knob at
its config default) for several seeds and reports held-out accuracy on both evaluation
targets at the warm start (checkpoint 0) and at the end of the pilot budget.

Usage: ``python bench/learning_gain.py [--seeds 3] [--budget 4.5e12]``.
Last line: ``gain_mean=<points> gain_std=<points> seeds=<n>`` (in-distribution ``test``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from bench.common import QUICK_PILOT, add_quick, quick_policy, use_scratch_cache
from race.config import compose_config, to_run_spec
from race.pilot.loop import run_pilot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=4.5e12)  # README figures
    parser.add_argument("--eval-examples", type=int, default=256)
    add_quick(parser, "two seeds of a 2-step tiny-s pilot on a 4-step warm start")
    args = parser.parse_args()
    quick = []
    if args.quick:
        use_scratch_cache()
        quick = [*QUICK_PILOT, f"model.hf_id={quick_policy()}", "pilot.eval_targets=[test,ood]"]
        args.seeds = 2
    out = tempfile.mkdtemp(prefix="race-learning-gain-")
    print(f"{'seed':>4}{'steps':>7}{'FLOPs spent':>13}{'test start':>12}{'test end':>10}"
          f"{'ood start':>11}{'ood end':>9}{'wall s':>8}")
    gains = []
    for seed in range(args.seeds):
        cfg = compose_config(["model=tiny-m", "reward=rule", f"budget={args.budget}",
                              f"pilot.seed={seed}", f"pilot.eval_examples={args.eval_examples}",
                              *quick])
        spec = to_run_spec(cfg, cfg.budget * cfg.pilot.fraction)
        summary = run_pilot(spec, f"{out}/{spec.cell_id}")
        assert summary["status"] == "ok", summary["error"]
        start, end = summary["initial_eval"], summary["final_eval"]
        gains.append(100 * (end["test"]["accuracy"] - start["test"]["accuracy"]))
        print(f"{seed:>4}{summary['steps']:>7}{summary['total_flops']:>13.3e}"
              f"{start['test']['accuracy']:>12.3f}{end['test']['accuracy']:>10.3f}"
              f"{start['ood']['accuracy']:>11.3f}{end['ood']['accuracy']:>9.3f}"
              f"{sum(summary['wall_s'].values()):>8.0f}", flush=True)
    spread = statistics.stdev(gains) if len(gains) > 1 else 0.0
    print(f"gain_mean={statistics.mean(gains):.1f} gain_std={spread:.1f} seeds={len(gains)}")


if __name__ == "__main__":
    main()
