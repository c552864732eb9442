"""``race pilot``'s planning side: the one cell it runs (:func:`pilot_spec`), how a
too-small pilot budget is named (:func:`pilot_budget_key`), and ``race pilot -m``, Hydra's
own multirun over single pilots (:func:`pilot_multirun`).
"""

from __future__ import annotations

import itertools
import sys

import hydra
from omegaconf import OmegaConf

from race import catalog
from race.config import (
    Overrides,
    check_device,
    compose_config,
    full_budget,
    register_configs,
    to_run_spec,
    with_task_lengths,
)
from race.core.fmt import fmt_flops
from race.core.specs import pilot_flops
from race.pilot.budget import check_budget
from race.pilot.loop import run_pilot
from race.store.cell import CellDir


def pilot_spec(cfg):
    """The one pilot ``race pilot`` runs: its spec at ``pilot.fraction x budget``."""
    check_device(cfg)  # the device before the budget: a GPU run's first mistake
    return to_run_spec(cfg, pilot_flops(full_budget(cfg), cfg.pilot.fraction))


def pilot_budget_key(cfg) -> str:
    """How a too-small pilot budget is named: the budget, the fraction and their product."""
    return (f"budget={full_budget(cfg):.3g} x pilot.fraction={cfg.pilot.fraction} = pilot "
            f"budget")


def hydra_pilot(cfg) -> str:
    """One pilot as a Hydra task function (``race pilot -m``); returns its status."""
    typed = with_task_lengths(OmegaConf.to_object(cfg))
    spec = to_run_spec(typed, pilot_flops(full_budget(typed), typed.pilot.fraction))
    summary = run_pilot(spec, CellDir.of(typed.pilot.out_dir, spec.cell_id).path)
    print(f"race pilot: {spec.cell_id} {summary['status']}, {summary['steps']} steps, "
          f"{fmt_flops(summary['total_flops'])} FLOPs", file=sys.stderr)
    return summary["status"]


def pilot_multirun(overrides: Overrides) -> int:
    """``race pilot -m ...``: Hydra's own multirun over single pilots.

    Every combination is composed and checked first (bad input exits 2 before Hydra
    launches anything); then ``hydra.main`` runs the sweep with whichever launcher
    ``hydra/launcher=`` names (basic, submitit_local, submitit_slurm).
    """
    ours = Overrides([t for t, _ in overrides.items() if not t.lstrip("+~").startswith("hydra")])
    fixed, axes = ours.split()
    for values in itertools.product(*axes.values()):
        cfg = compose_config(fixed + [f"{k}={v}" for k, v in zip(axes, values)])
        check_budget(pilot_spec(cfg), prompt_tokens=1, key=pilot_budget_key(cfg))
    register_configs()
    argv = sys.argv  # hydra.main reads its overrides from sys.argv
    sys.argv = ["race-pilot", "--multirun", *overrides]
    try:
        hydra.main(config_path=str(catalog.conf_dir()), config_name="config",
                   version_base="1.3")(hydra_pilot)()
    finally:
        sys.argv = argv
    return 0
