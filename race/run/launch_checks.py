"""What a command checks of its planned pilots before it writes anything, beyond their
files (:func:`race.preflight.check_plan`, run as the cells are planned): ``race sweep``
and ``race pilot`` call the one function here, so the two refuse the same input.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from race.run.cells import check_warm_starts, needs_warm_start
from race.run.launch.launcher_base import launcher_for
from race.run.prefetch import check_needs, hub_needs
from race.warmstart.cache import check_cache_writable


def check_launch(specs: Iterable[Any], launcher: Any = None) -> None:
    """Refuse (UsageError: the CLI's exit 2 and one line) what would make the pilots of
    ``specs`` (RunSpecs) fail once launched: the launcher's own check (``launcher``: its
    config; e.g. a SLURM partition the cluster lacks; None: the pilot runs here), a hub
    model or dataset that is neither whole in the Hugging Face cache nor reachable (a
    missing shard or split, a snapshot with refs only), a model cache the tiny family
    cannot be built into, and a damaged cached copy of a warm start RACE ships
    (:func:`race.run.cells.check_warm_starts`).
    """
    specs = list(specs)
    if launcher is not None:
        launcher_for(launcher.name).check(launcher)  # e.g. SLURM against sinfo
    check_needs(hub_needs(specs))  # hub weights and datasets, before any folder
    if any(needs_warm_start(spec) for spec in specs):
        check_cache_writable()  # the tiny family is built into the cache
        check_warm_starts(specs)  # a damaged shipped one: refused before anything is written
