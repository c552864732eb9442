"""Build the tiny policy family from scratch by one common recipe and report what each
size reaches.

Every size gets the same warm-start recipe (same data, same steps, same schedule; no
per-size target). For tiny-s, tiny-m and tiny-l: greedy accuracy on ``val`` (1,000
problems, with its standard error), ``test`` (in-distribution) and ``ood`` (longer
chains), the ``val`` curve along the build, build wall seconds on this machine, and the
warm-start FLOPs (pre-training: never charged to a post-training budget). Then it loads
each again from the cache and reports how long that takes, and whether the family is
ordered by capacity on ``val``.

Then, per size, the room it leaves RL on ``val``
(``race.warmstart.policies.headroom``, 200 problems,
8 samples each at temperature 1): greedy accuracy, pass@8 counting only step-correct traces
(every line right), pass@8 counting any right final answer, and the lucky-answer rate (the
share of sampled right answers whose trace has a wrong step). The testbed asks every size
for greedy ``val`` in 0.15-0.65 and step-correct pass@8 at least 0.15 above it.

Usage: ``python bench/warmstart.py [--cached] [--quick]`` (``--cached`` reuses existing
builds). ``--quick``: each size built by ``bench.common.quick_recipe`` (4 steps, scored on
8 problems) into a scratch cache, one after the other in this process (the recipe of
``build_family``'s pool is the embedded one, which scores 1,000 ``val`` problems), and
its headroom on 8 problems.
Last line: ``headroom tiny-s=<greedy>/<pass@8 steps>/<lucky> ...`` and ``in_range=yes|no``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

from bench.common import add_quick, quick_recipe, use_scratch_cache
from race.warmstart.family import build_family
from race.warmstart.policies import build_info, build_tiny_policy

NAMES = ("tiny-s", "tiny-m", "tiny-l")
HEADROOM_PROBLEMS = 200  # val problems, 8 samples each
QUICK_HEADROOM_PROBLEMS = 8


def quick_build(name: str, rebuild: bool = False) -> Path:
    """``name`` warm-started by :func:`bench.common.quick_recipe` (``--quick``)."""
    return build_tiny_policy(name, recipe=quick_recipe(name), rebuild=rebuild)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cached", action="store_true", help="reuse cached builds")
    add_quick(parser, "4-step builds of each size, scored on 8 problems, in this process")
    args = parser.parse_args()
    build, problems = build_tiny_policy, HEADROOM_PROBLEMS
    if args.quick:
        use_scratch_cache()
        build, problems = quick_build, QUICK_HEADROOM_PROBLEMS
    print(f"{'model':<8}{'params':>10}{'val acc (SE)':>15}{'test acc':>10}{'ood acc':>10}"
          f"{'steps':>7}{'build s':>9}{'load s':>8}{'warm-start FLOPs (model)':>26}")
    accuracy, val, curves, total_s = {}, {}, {}, 0.0
    start = time.perf_counter()
    if args.quick:
        folders = {name: quick_build(name, rebuild=not args.cached) for name in NAMES}
    else:
        folders = build_family(list(NAMES), workers=os.cpu_count() or 1,
                               rebuild=not args.cached)
    family_s = time.perf_counter() - start
    for name in NAMES:
        folder = folders[name]
        info = build_info(folder)
        start = time.perf_counter()
        again = build(name)  # second call: the cache
        load_s = time.perf_counter() - start
        assert again == folder
        accuracy[name] = info["accuracy"]["test"]
        val[name] = info["accuracy"]["val"]
        n_val = info["recipe"]["val_examples"]
        se = math.sqrt(val[name] * (1 - val[name]) / n_val)
        curves[name] = info["val_curve"]
        total_s += info["build_s"]
        print(f"{name:<8}{info['params']:>10,}{f'{val[name]:.3f} ({se:.3f})':>15}"
              f"{info['accuracy']['test']:>10.3f}"
              f"{info['accuracy']['ood']:>10.3f}{info['sft_steps']:>7}{info['build_s']:>9.1f}"
              f"{load_s:>8.2f}"
              f"{info['pretrain_flops']['model']:>26.3e}")
    print(f"family build: {family_s:.0f} s wall on {os.cpu_count()} cores, "
          + ("one build after another" if args.quick else "one process per core")
          + f" ({total_s:.0f} s of single-threaded builds)")
    for name in NAMES:
        recipe = build_info(folders[name])["recipe"]
        print(f"val curve {name}: " + " ".join(f"{step}:{acc:.2f}" for step, acc in curves[name])
              + f" (steps: accuracy; the last point on {recipe['val_examples']:,} problems, "
              f"the others on {recipe['curve_examples']:,})")
    ordered = all(val[a] < val[b] for a, b in zip(NAMES, NAMES[1:]))
    print(f"ordered by capacity on val: {'yes' if ordered else 'no'} ("
          + " < ".join(f"{n} {val[n]:.3f}" for n in NAMES) + ")")
    print("accuracy " + " ".join(f"{n}={accuracy[n]:.3f}" for n in NAMES))
    print(f"{'model':<8}{'greedy val':>11}{'pass@8 steps':>14}{'pass@8 final':>14}"
          f"{'sampled':>9}{'lucky rate':>12}   (val, {problems} problems x 8 samples, T=1)")
    rooms = {}
    for name in NAMES:
        rooms[name] = room = _headroom(folders[name], problems)
        print(f"{name:<8}{room['greedy']:>11.3f}{room['pass@8_steps']:>14.3f}"
              f"{room['pass@8_final']:>14.3f}{room['sampled']:>9.3f}{room['lucky_rate']:>12.3f}")
    ok = all(0.15 <= r["greedy"] <= 0.65 and r["pass@8_steps"] - r["greedy"] >= 0.15
             for r in rooms.values())
    print("headroom " + " ".join(f"{n}={r['greedy']:.3f}/{r['pass@8_steps']:.3f}/"
                                 f"{r['lucky_rate']:.3f}" for n, r in rooms.items())
          + f" in_range={'yes' if ok else 'no'}")


def _headroom(folder, problems: int = HEADROOM_PROBLEMS) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.tasks.arith import ArithTask
    from race.warmstart.policies import headroom, single_thread

    info = build_info(folder)
    task = ArithTask(**info["recipe"]["task"])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with single_thread():
        return headroom(model, tokenizer, task, task.sample("val", problems, seed=10_000))


if __name__ == "__main__":
    main()
