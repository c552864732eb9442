"""Build the tiny family a sweep needs: warm-started policies and the tiny PRMs trained
from them, at once, one single-threaded process per core (both cached, built once)."""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from race.catalog import load_model_shape
from race.warmstart import shipped
from race.warmstart.policies import (
    build_tiny_policy,
    cache_folder,
    policy_payload,
    warm_start_recipe,
)
from race.warmstart.prm import INIT_FROM, family_prm, family_prm_folders


def policy_folder(name: str, recipe) -> Path:
    """Where tiny policy ``name`` of ``recipe`` is cached (nothing built)."""
    return cache_folder("policies", name, policy_payload(name, recipe))


def _policy(name: str, task: dict, warmstart: dict, rebuild: bool,
            train: bool = True) -> Path | None:
    return build_tiny_policy(name, recipe=warm_start_recipe(name, task, warmstart),
                             rebuild=rebuild, train=train)


def ready_family(names: list[str], *, prms: list[str] = (), task: dict | None = None,
                 warmstart: dict | None = None) -> dict[str, Path | None]:
    """The tiny policies ``names`` and tiny PRMs ``prms`` that need no training, for a
    cell's ``task`` and ``warmstart`` knobs, in this process: each one RACE ships installed
    from its archive (or found) and checked (:mod:`race.warmstart.shipped`: a cached copy
    that differs is refused, UsageError), each other cached one found. None for each that
    would have to be trained (:func:`build_family` trains it)."""
    task, warmstart = dict(task or {}), dict(warmstart or {})
    ready = {n: _policy(n, task, warmstart, False, train=False) for n in names}
    return ready | {n: family_prm(n, task, warmstart, train=False) for n in prms}


def family_status(names: list[str], *, prms: list[str] = (), task: dict | None = None,
                  warmstart: dict | None = None) -> dict[str, tuple[str, Path, str]]:
    """What :func:`build_family` would do for each of ``names`` and ``prms``, read only
    (nothing installed, built or loaded): name -> (state, cache folder, detail), the
    state one of ``shipped`` (RACE ships it: installed on first use, or installed and
    whole), ``cached`` (a cached build of a recipe RACE does not ship), ``local build``
    (a shipped recipe rebuilt here at the user's request), ``damaged`` (a cached copy of a
    shipped one that differs; detail: the first file that does) or ``to train`` (not
    shipped, not cached: the sweep trains it here, once). A PRM whose policy must be
    trained is ``to train`` too."""
    task, warmstart = dict(task or {}), dict(warmstart or {})
    folders = {n: policy_folder(n, warm_start_recipe(n, task, warmstart)) for n in names}
    folders |= {n: family_prm_folders(n, task, warmstart)[0] for n in prms}
    return {n: _state(folder) for n, folder in folders.items()}


def _state(folder: Path) -> tuple[str, Path, str]:
    name = f"{folder.parent.name}/{folder.name}"
    info = folder / "build_info.json"
    if not shipped.archive_of(name):
        return ("cached" if info.is_file() else "to train"), folder, ""
    if not folder.exists():
        return "shipped", folder, ""
    bad = shipped.differing(folder, name) if folder.is_dir() else [folder.name]
    if not bad:
        return "shipped", folder, ""
    try:
        local = bool(json.loads(info.read_text()).get("local_build"))
    except (OSError, ValueError, AttributeError):
        local = False
    return ("local build" if local else "damaged"), folder, bad[0]


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
