"""``race pilot``'s planning side: the one cell it runs (:func:`pilot_spec`), how a
too-small pilot budget is named (:func:`pilot_budget_key`), the checks ``race sweep`` runs
on its cells, run on that one before anything is written (:func:`check_pilot`), and
``race pilot -m``, Hydra's own multirun over single pilots (:func:`pilot_multirun`).
"""

from __future__ import annotations

import itertools
import sys

import hydra
from omegaconf import OmegaConf

from race import catalog, preflight
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
from race.errors import UsageError
from race.pilot.budget import check_budget
from race.pilot.loop import run_pilot
from race.run.bounds import check_bounds, pilot_device
from race.run.grid import solve_cell
from race.run.launch.job import use_threads
from race.run.launch.local import local_threads, slots
from race.run.launch.slurm import check_sbatch
from race.run.launch_checks import check_launch
from race.store.cell import CellDir


def pilot_spec(cfg):
    """The one pilot ``race pilot`` runs: its spec at ``pilot.fraction x budget``."""
    check_device(cfg)  # the device before the budget: a GPU run's first mistake
    return to_run_spec(cfg, pilot_flops(full_budget(cfg), cfg.pilot.fraction))


def pilot_budget_key(cfg) -> str:
    """How a too-small pilot budget is named: the budget, the fraction and their product."""
    return (f"budget={full_budget(cfg):.3g} x pilot.fraction={cfg.pilot.fraction} = pilot "
            f"budget")


def check_pilot(cfg, spec) -> None:
    """What ``race sweep`` checks of each cell, for ``race pilot``'s one (``spec``, at
    ``pilot.fraction x budget``), before anything is written; UsageError (exit 2, one line)
    on the first problem.

    The same functions the sweep calls: the cell solved as a sweep solves it
    (:func:`race.run.grid.solve_cell`: the cap against the context, what vLLM cannot
    serve, the memory bound), its budget (one worst-case step), its steps and hours
    against ``pilot.max_steps`` and ``pilot.max_hours``, every file it reads
    (:func:`race.preflight.check_plan`: data, model folders, each problem's length) and
    the hub and model caches (:func:`race.run.launch_checks.check_launch`).
    """
    budget = full_budget(cfg)
    cell = solve_cell(cfg, budget, (), (), fraction=cfg.pilot.fraction)
    check_budget(spec, prompt_tokens=1, key=pilot_budget_key(cfg))
    if cell.refused:  # past the budget's own check: the memory bound
        raise UsageError(f"model={spec.model}: {cell.refused}")
    check_bounds([cell], cfg, budget, spec.budget_flops, device=pilot_device(cfg, True))
    preflight.check_plan([spec])
    check_launch([spec])


# the launcher.* keys race pilot reads: its torch threads, and the GPU memory its cell's
# estimated peak is checked against (race.run.grid.solve_cell)
PILOT_LAUNCHER_KEYS = ("launcher.threads_per_pilot", "launcher.gpu_mem_gb")


def check_pilot_overrides(overrides) -> None:
    """Refuse, never ignore, a launcher override ``race pilot`` does not read: it runs its
    one pilot in this process (``launcher=slurm``, ``launcher.slots``, ``launcher.gpus``,
    ... choose how a sweep launches its pilots); only :data:`PILOT_LAUNCHER_KEYS` apply."""
    keys = [(text, text.lstrip("+~").split("=", 1)[0]) for text in overrides]
    unused = [text for text, key in keys if key == "launcher" or (
        key.startswith("launcher.") and key not in PILOT_LAUNCHER_KEYS)]
    if unused:
        raise UsageError(f"{' '.join(unused)}: race pilot runs its one pilot in this process, "
                         f"with no launcher, and reads only {', '.join(PILOT_LAUNCHER_KEYS)} "
                         f"of launcher.*; drop {'it' if len(unused) == 1 else 'them'} (race "
                         f"sweep launches pilots through a launcher; race pilot -m through "
                         f"hydra/launcher=...; pilot.device=cuda runs this one on a GPU)")


def pilot_threads(cfg) -> tuple[int, str]:
    """The torch threads ``race pilot`` runs its pilot on, and why: the ones a local
    sweep gives each of its pilots (``launcher.threads_per_pilot``, else this machine's
    cores shared by one slot per core: :func:`race.run.launch.local.local_threads`), never
    torch's default of every core, whose threads spin beside any other busy process."""
    given = cfg.launcher.threads_per_pilot
    if given:
        return given, f"launcher.threads_per_pilot={given}"
    return local_threads(cfg.launcher), (
        f"as each pilot of a local race sweep: {slots(cfg.launcher)} pilot slot(s) share "
        f"this machine's cores; launcher.threads_per_pilot=N for another count")


def hydra_pilot(cfg) -> str:
    """One pilot as a Hydra task function (``race pilot -m``); returns its status."""
    typed = with_task_lengths(OmegaConf.to_object(cfg))
    use_threads(pilot_threads(typed)[0])
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
    check_hydra_launcher(overrides)
    ours = Overrides([t for t, _ in overrides.items() if not t.lstrip("+~").startswith("hydra")])
    check_pilot_overrides(ours)
    fixed, axes = ours.split()
    for values in itertools.product(*axes.values()):
        cfg = compose_config(fixed + [f"{k}={v}" for k, v in zip(axes, values)])
        check_pilot(cfg, pilot_spec(cfg))
    register_configs()
    argv = sys.argv  # hydra.main reads its overrides from sys.argv
    sys.argv = ["race-pilot", "--multirun", *overrides]
    try:
        hydra.main(config_path=str(catalog.conf_dir()), config_name="config",
                   version_base="1.3")(hydra_pilot)()
    finally:
        sys.argv = argv
    return 0



# Hydra launchers that submit to SLURM
SLURM_LAUNCHERS = ("submitit_slurm",)


def check_hydra_launcher(overrides: Overrides) -> None:
    """Refuse ``hydra/launcher=submitit_slurm`` where SLURM is absent, before Hydra's
    launcher starts and fails deep inside submitit ("Could not detect srun")."""
    for text, _ in overrides.items():
        key, _, value = text.lstrip("+~").partition("=")
        if key == "hydra/launcher" and value.strip() in SLURM_LAUNCHERS:
            check_sbatch(f"hydra/launcher={value.strip()}", fix="run on a SLURM login node, "
                         "or drop the hydra/launcher override (or use "
                         "hydra/launcher=submitit_local)")
