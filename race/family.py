"""Build the tiny family a sweep needs: warm-started policies and the tiny PRMs trained
from them, at once, one single-threaded process per core (both cached, built once)."""

from __future__ import annotations

from pathlib import Path

from race.catalog import load_model_shape
from race.policies import build_tiny_policy
from race.rewards.tiny_prm import INIT_FROM, build_tiny_prm


def build_family(names: list[str], *, workers: int = 2, seed: int = 0,
                 rebuild: bool = False, prms: list[str] = ()) -> dict[str, Path]:
    """Build tiny policies (and tiny PRMs) at once, one single-threaded process per core.

    The largest policy starts first, so on 2 cores tiny-l runs beside tiny-s then tiny-m.
    Each PRM in ``prms`` starts as soon as the policy its body starts from is built (never
    before: two processes would build the same policy). Returns every name's folder.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    order = sorted(names, key=lambda n: load_model_shape(n).total_params, reverse=True)
    if workers <= 1 or len(order) + len(prms) == 1:
        folders = {n: build_tiny_policy(n, seed=seed, rebuild=rebuild) for n in order}
        return folders | {n: build_tiny_prm(n, seed=seed, rebuild=rebuild) for n in prms}
    context = multiprocessing.get_context("spawn")
    folders: dict[str, Path] = {}
    with ProcessPoolExecutor(min(workers, len(order) + len(prms)),
                             mp_context=context) as pool:
        running = {pool.submit(build_tiny_policy, n, seed=seed, rebuild=rebuild): n
                   for n in order}
        waiting = list(prms)
        while running or waiting:
            for name in list(waiting):  # its init policy is built, or not ours to build
                if INIT_FROM.get(name, "") in folders or INIT_FROM.get(name) not in order:
                    waiting.remove(name)
                    running[pool.submit(build_tiny_prm, name, seed=seed,
                                        rebuild=rebuild)] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                folders[running.pop(future)] = future.result()  # a failed build raises
    return folders
