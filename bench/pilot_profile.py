"""Where does a default pilot's wall time go, and how fast does each phase run?

Runs one pilot of the embedded default (tiny-m, rule reward, budget 4.5e12) and
splits its wall time by phase: rollout, learning, feedback, eval, load (imports, model,
adapters) and other (sampling prompts, bookkeeping, writing results). Each phase's
achieved FLOP/s (executed convention: what actually ran) is compared with this CPU's
measured matmul peak (the median of several large fp32 matmuls at the same thread count).

Usage: ``python bench/pilot_profile.py [--threads N]``.
Last line: ``overhead_fraction=<time outside the counted phases / total>``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from bench.common import QUICK_PILOT, add_quick, quick_policy, use_scratch_cache
from race.config import compose_config, to_run_spec
from race.pilot.loop import run_pilot


def matmul_peak_flops(size: int = 1024, repeats: int = 7) -> float:
    """Median FLOP/s of ``size x size`` fp32 matmuls (2 size^3 FLOPs each)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=4.5e12)  # README figures
    add_quick(parser, "a 2-step tiny-s pilot on a 4-step warm start")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peak = matmul_peak_flops()
    quick = []
    if args.quick:
        use_scratch_cache()
        quick = [*QUICK_PILOT, f"model.hf_id={quick_policy()}"]
    cfg = compose_config(["model=tiny-m", "reward=rule", f"budget={args.budget}", *quick])
    spec = to_run_spec(cfg, cfg.budget * cfg.pilot.fraction)
    start = time.perf_counter()
    summary = run_pilot(spec, tempfile.mkdtemp(prefix="race-profile-"))
    total_s = time.perf_counter() - start
    assert summary["status"] == "ok", summary["error"]
    wall = summary["wall_s"]
    executed = summary["flops_executed"]
    print(f"pilot: {spec.model} x rule, {summary['steps']} steps, "
          f"{summary['total_flops']:.3e} FLOPs charged, {total_s:.1f} s wall, "
          f"{args.threads} thread(s); matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(f"{'phase':<10}{'wall s':>8}{'share':>8}{'FLOPs (executed)':>18}{'GFLOP/s':>9}"
          f"{'of peak':>9}")
    for phase in ("rollout", "learning", "feedback", "eval", "load", "other"):
        flops = executed.get(phase, 0.0)
        rate = flops / wall[phase] if wall[phase] > 0 and flops else 0.0
        print(f"{phase:<10}{wall[phase]:>8.1f}{wall[phase] / total_s:>8.1%}{flops:>18.3e}"
              f"{rate / 1e9:>9.2f}{rate / peak:>9.1%}")
    print(f"outside the counted phases: load (imports, model, adapters) {wall['load']:.1f} s, "
          f"other (prompts, bookkeeping, results) {wall['other']:.1f} s")
    print(f"overhead_fraction={(wall['load'] + wall['other']) / total_s:.3f}")


if __name__ == "__main__":
    main()
