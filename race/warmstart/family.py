"""Build the tiny family a sweep needs: warm-started policies and the tiny PRMs trained
from them, at once, one single-threaded process per core (both cached, built once)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from race.catalog import load_model_shape
from race.warmstart.policies import build_tiny_policy, warm_start_recipe
from race.warmstart.prm import INIT_FROM, family_prm


def _policy(name: str, task: dict, warmstart: dict, rebuild: bool,
            train: bool = True) -> Path | None:
    return build_tiny_policy(name, recipe=warm_start_recipe(name, task, warmstart),
                             rebuild=rebuild, train=train)


def ready_family(names: list[str], *, prms: list[str] = (), task: dict | None = None,
                 warmstart: dict | None = None) -> dict[str, Path | None]:
    """The folders of the tiny policies and PRMs that need no training: a shipped one
    installed (or, cached, checked: a damaged one is refused, UsageError), another recipe
    found in the cache; None for each that is still to be trained. In this process, in
    about a second: what ``race sweep`` and ``race pilot`` check before anything else."""
    task, warmstart = dict(task or {}), dict(warmstart or {})
    ready = {n: _policy(n, task, warmstart, False, train=False) for n in names}
    return ready | {n: family_prm(n, task, warmstart, train=False) for n in prms}


def build_family(names: list[str], *, workers: int = 2, rebuild: bool = False,
                 prms: list[str] = (), task: dict | None = None,
                 warmstart: dict | None = None) -> dict[str, Path]:
    """Build tiny policies (and tiny PRMs) at once, one single-threaded process per core.

    ``task`` and ``warmstart`` are a cell's task entry and ``warmstart.*`` knobs (default:
    the embedded defaults); every model is built for them. The largest policy starts
    first, so on 2 cores tiny-l runs beside tiny-s then tiny-m. Each PRM in ``prms``
    starts as soon as the policy its body starts from is built (never before: two
    processes would build the same policy). Shipped or cached models
    (:mod:`race.warmstart.shipped`) need no pool: when every one is, they are installed
    or found in this process. Returns every name's folder.
    """
    task, warmstart = dict(task or {}), dict(warmstart or {})
    if not rebuild:  # shipped or cached: in this process, in a second (no pool to start)
        ready = ready_family(names, prms=prms, task=task, warmstart=warmstart)
        if all(ready.values()):
            return ready
    order = sorted(names, key=lambda n: load_model_shape(n).total_params, reverse=True)
    if workers <= 1 or len(order) + len(prms) == 1:
        folders = {n: _policy(n, task, warmstart, rebuild) for n in order}
        return folders | {n: family_prm(n, task, warmstart, rebuild=rebuild) for n in prms}
    context = multiprocessing.get_context("spawn")
    folders: dict[str, Path] = {}
    with ProcessPoolExecutor(min(workers, len(order) + len(prms)),
                             mp_context=context) as pool:
        running = {pool.submit(_policy, n, task, warmstart, rebuild): n for n in order}
        waiting = list(prms)
        while running or waiting:
            for name in list(waiting):  # its init policy is built, or not ours to build
                if INIT_FROM.get(name, "") in folders or INIT_FROM.get(name) not in order:
                    waiting.remove(name)
                    running[pool.submit(family_prm, name, task, warmstart,
                                        rebuild=rebuild)] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                folders[running.pop(future)] = future.result()  # a failed build raises
    return folders
