"""Build the tiny policy family from scratch and report what each starts at.

For tiny-s, tiny-m and tiny-l: held-out accuracy on both evaluation targets (``test``:
in-distribution, ``ood``: longer chains), build wall seconds on this machine, and the
warm-start FLOPs (pre-training: never charged to a post-training budget). Then it loads
each again from the cache and reports how long that takes.

Usage: ``python bench/warmstart.py [--cached]`` (``--cached`` reuses existing builds).
Last line: ``accuracy tiny-s=<a> tiny-m=<b> tiny-l=<c>`` (in-distribution ``test``).
"""

from __future__ import annotations

import argparse
import os
import time

from race.policies import build_family, build_info, build_tiny_policy

NAMES = ("tiny-s", "tiny-m", "tiny-l")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cached", action="store_true", help="reuse cached builds")
    args = parser.parse_args()
    print(f"{'model':<8}{'params':>10}{'test acc':>10}{'ood acc':>10}{'steps':>7}{'build s':>9}"
          f"{'load s':>8}{'warm-start FLOPs (model)':>26}")
    accuracy, total_s = {}, 0.0
    start = time.perf_counter()
    folders = build_family(list(NAMES), workers=os.cpu_count() or 1, rebuild=not args.cached)
    family_s = time.perf_counter() - start
    for name in NAMES:
        folder = folders[name]
        info = build_info(folder)
        start = time.perf_counter()
        again = build_tiny_policy(name)  # second call: the cache
        load_s = time.perf_counter() - start
        assert again == folder
        accuracy[name] = info["accuracy"]["test"]
        total_s += info["build_s"]
        print(f"{name:<8}{info['params']:>10,}{info['accuracy']['test']:>10.3f}"
              f"{info['accuracy']['ood']:>10.3f}{info['sft_steps']:>7}{info['build_s']:>9.1f}"
              f"{load_s:>8.2f}"
              f"{info['pretrain_flops']['model']:>26.3e}")
    print(f"family build: {family_s:.0f} s wall on {os.cpu_count()} cores, one process per "
          f"core ({total_s:.0f} s of single-threaded builds)")
    print("accuracy " + " ".join(f"{n}={accuracy[n]:.3f}" for n in NAMES))


if __name__ == "__main__":
    main()
