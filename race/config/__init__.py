"""config: the Hydra schema, composition from a command's overrides, validation, and the
only code that builds a :class:`~race.core.specs.RunSpec` from them.

Owns the knobs a user can set (``race/conf/`` and the command line) and the rules on their
values.

The modules: :mod:`~race.config.schema` (the dataclasses), :mod:`~race.config.compose`
(overrides parsed once, composed by Hydra), :mod:`~race.config.checks` (every problem
at once, each naming its key and fix), :mod:`~race.config.spec` (configs frozen into
specs). Their public names are importable from here.

May import: catalog, core, errors, nn, pilot, rewards, tasks, warmstart.
"""

from race.config.checks import (
    check_reward_built,
    schema_problems,
    selection_problems,
    validate,
)
from race.config.compose import (
    Overrides,
    check_group_choices,
    compose_config,
    compose_many,
    fitted_cap,
    hydra_overrides,
    register_configs,
    split_overrides,
    with_task_lengths,
)
from race.config.machine import check_device, check_gpus
from race.config.schema import (
    EMBEDDED_BUDGET,
    GROUPS,
    AccountingConfig,
    GridConfig,
    GuardConfig,
    LauncherConfig,
    ModelConfig,
    PilotConfig,
    RaceConfig,
    RegimeConfig,
    ReportConfig,
    RewardConfig,
    SelectionConfig,
    SweepConfig,
    TaskConfig,
    ValidateConfig,
    WarmStartConfig,
)
from race.config.spec import CellSpecs, eval_targets, full_budget, to_run_spec, to_specs
from race.config.task_fields import task_entry

__all__ = [
    "EMBEDDED_BUDGET", "GROUPS", "AccountingConfig", "CellSpecs", "GridConfig", "GuardConfig",
    "LauncherConfig", "ModelConfig", "Overrides", "PilotConfig", "RaceConfig", "RegimeConfig",
    "ReportConfig", "RewardConfig", "SelectionConfig", "SweepConfig", "TaskConfig",
    "ValidateConfig", "WarmStartConfig", "check_device", "check_gpus", "check_group_choices",
    "check_reward_built", "compose_config", "compose_many", "eval_targets", "fitted_cap",
    "full_budget", "hydra_overrides", "register_configs", "schema_problems",
    "selection_problems", "split_overrides", "task_entry", "to_run_spec", "to_specs",
    "validate", "with_task_lengths",
]
