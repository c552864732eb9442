"""Grid expansion and the budget solver: overrides -> allocation cells -> steps and FLOPs.

A grid is the product of its axes. Axes come from ``grid.axes`` in ``race/conf/grid/*.yaml``
and from comma lists on the command line (Hydra's multirun syntax, parsed with Hydra's
own override parser): ``model=tiny-s,tiny-m grid.group_size=4,16``. A key given on the
command line replaces the axis of the same key; a single value fixes it.

Each cell is composed like a single run (``compose_config``), frozen into a
:class:`~race.core.specs.RunSpec` at the pilot budget ``pilot.fraction x budget``, and solved:
the GRPO steps its budget buys at nominal token counts, FLOPs by phase, and its regime.
A cell whose pilot budget cannot buy one worst-case step is refused, with the reason.
Nothing here loads weights; the data files and model folders the cells name are opened
and checked once (:func:`race.preflight.check_plan`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from race import preflight
from race.config import (
    Overrides,
    check_reward_built,
    compose_config,
    compose_many,
    full_budget,
    selection_problems,
    to_run_spec,
    to_specs,
)
from race.config.compose import once
from race.core import flops
from race.core.fmt import fmt_flops
from race.core.knobs import default_of
from race.core.memory import GIB, MemoryPlan, plan_memory
from race.core.regime import regime_label
from race.core.rungs import LadderPlan
from race.core.specs import LoraShape, PhaseFlops, RunSpec, pilot_flops
from race.errors import RewardTokenizerMismatch, UsageError
from race.pilot.budget import eval_problems, planned_evaluations, worst_step_flops
from race.pilot.rollout.vllm_settings import check_cell as check_vllm_cell
from race.run.bounds import check_bounds, pilot_device, uses_gpus
from race.run.rung_plan import fit_ladder_to_eval, grid_ladder, ladder_eval_flops, ladder_eval_plan

# Axes print in this order (then any other key, then seeds last).
AXIS_ORDER = ("model", "grid.group_size", "grid.prompts_per_step", "grid.max_new_tokens",
              "grid.update_epochs", "grid.lr", "grid.lora_rank", "reward")


@dataclass(frozen=True, slots=True)
class Cell:
    """One allocation cell of a plan.

    Attributes:
        knobs: axis key -> value (as typed), the cell's coordinates in the grid.
        overrides: the full override list that composes the cell.
        spec: the frozen pilot spec (``spec.budget_flops``: the pilot budget).
        steps: GRPO steps the pilot budget buys at nominal token counts (0: refused).
        planned: FLOPs by phase of those steps (model convention unless configured).
        regime: the regime label from the planned shares.
        refused: why the cell cannot run ("" when it can).
        memory: its estimated pilot memory (:func:`race.core.memory.plan_memory`).
        eval_each_flops: one evaluation of every target at one checkpoint, FLOPs
            (:func:`race.core.flops.eval_flops`: every completion at the cap).
        eval_select_flops: the part of it the selection target takes (what a ladder's
            rungs below the last score).
    """

    knobs: tuple[tuple[str, str], ...]
    overrides: tuple[str, ...]
    spec: RunSpec | None  # None: the cell cannot exist (a PRM of another tokenizer)
    steps: int
    planned: PhaseFlops
    regime: str
    refused: str = ""
    memory: MemoryPlan | None = None
    eval_each_flops: float = 0.0
    eval_select_flops: float = 0.0

    def shown_knobs(self) -> dict[str, str]:
        """Its model, reward and axis values, as a plan's table and messages show them."""
        if self.spec is None:
            return dict(self.knobs)
        return {"model": self.spec.model, "reward": self.spec.reward_name} | dict(self.knobs)

    @property
    def eval_flops(self) -> float:
        """Its pilot's planned eval FLOPs, started fresh at its budget (checkpoint 0 and
        every one of ``spec.checkpoints``; uncharged)."""
        if self.spec is None:
            return 0.0
        return self.eval_each_flops * planned_evaluations(self.spec.checkpoints,
                                                          self.spec.budget_flops)


@dataclass(frozen=True, slots=True)
class Plan:
    """An expanded, solved grid: the budget, the axes, the cells and the base config."""

    budget_flops: float
    pilot_fraction: float
    axes: tuple[tuple[str, tuple[str, ...]], ...]
    cells: tuple[Cell, ...]
    task: str
    base: Any = None  # the RaceConfig composed from the fixed overrides (launcher, report)
    ladder: LadderPlan | None = None  # selection.policy=ladder: its rungs (cells: rung 1)

    @property
    def runnable(self) -> list[Cell]:
        return [c for c in self.cells if not c.refused]

    @property
    def pilot_flops(self) -> float:
        """What the runnable cells' pilots may spend in all, FLOPs (a ladder: every rung)."""
        if self.ladder is not None:
            return self.ladder.cost_share * self.budget_flops
        return sum(c.spec.budget_flops for c in self.runnable)

    @property
    def share_of_full_run(self) -> float:
        """The grid's pilot FLOPs as a share of one full-budget run."""
        return self.pilot_flops / self.budget_flops

    @property
    def eval_flops(self) -> float:
        """The runnable cells' planned eval FLOPs in all (uncharged; an upper-ish bound,
        :func:`race.core.flops.eval_flops`).

        A ladder, like :attr:`pilot_flops`, counts ``counts[i] x seeds`` cells at rung
        ``i`` (:func:`race.run.rung_plan.ladder_eval_flops`).
        """
        if self.ladder is None:
            return sum(c.eval_flops for c in self.runnable)
        return ladder_eval_flops(self.runnable, self.ladder, self.budget_flops)

    @property
    def share_with_eval(self) -> float:
        """Charged and planned eval FLOPs together, as a share of one full-budget run."""
        return (self.pilot_flops + self.eval_flops) / self.budget_flops


def _axis_key(key: str) -> tuple[int, str]:
    if key == "pilot.seed":
        return (len(AXIS_ORDER) + 1, key)
    return (AXIS_ORDER.index(key) if key in AXIS_ORDER else len(AXIS_ORDER), key)


def grid_axes(overrides: Overrides | list[str]):
    """The base config, the fixed overrides and the grid's axes after command-line rules."""
    fixed, cli_axes = Overrides.of(overrides).split()
    if "budget" in cli_axes:
        raise UsageError(f"budget={','.join(cli_axes['budget'])}: one budget per plan "
                         f"(pilots of different budgets are not ranked together); split the "
                         f"list with Overrides.budget_axis, as race plan and race sweep do")
    base = compose_config(fixed)
    given = fixed.keys()
    axes = {key: once(f"grid.axes.{key}", [str(v) for v in values])
            for key, values in base.grid.axes.items()
            if key not in given and key not in cli_axes}
    axes |= cli_axes
    for key, values in axes.items():
        if not values:
            raise UsageError(f"grid.axes.{key}=[]: an axis needs at least one value")
    ordered = dict(sorted(axes.items(), key=lambda kv: _axis_key(kv[0])))
    return base, fixed, ordered


def plan_grid(overrides: Overrides | list[str], *, runnable: bool = True) -> Plan:
    """Expand ``overrides`` into cells and solve each cell's steps at the pilot budget.

    ``runnable=False`` (``race plan``) plans cells this machine could not run (a vLLM
    backend that is not installed, a task the pilots do not support yet).
    Raises UsageError for bad input (the CLI's exit code 2).
    """
    overrides = Overrides.of(overrides)
    base, fixed, axes = grid_axes(overrides)
    budget = full_budget(base, models=axes.get("model", [base.model.name]))
    problems = selection_problems(base.selection)  # before the ladder is planned from it
    if problems:
        raise UsageError("; ".join(problems))
    ladder = grid_ladder(base, axes)
    from_conf = {k for k in axes if k in base.grid.axes} - set(overrides.split()[1])
    products = list(itertools.product(*axes.values()))
    variants = [[f"{k}={v}" for k, v in zip(axes, values)] for values in products]
    composed = list(zip(products, compose_many(fixed, variants)))

    def solve_all(fraction: float) -> list[Cell]:
        cells = []
        for values, cfg in composed:
            knobs = tuple(zip(axes, values))
            cell_overrides = tuple(fixed) + tuple(f"{k}={v}" for k, v in knobs)
            try:
                cells.append(solve_cell(cfg, budget, knobs, cell_overrides,
                                        runnable=runnable, fraction=fraction,
                                        ladder=ladder is not None))
            except RewardTokenizerMismatch as error:
                # The conf grid's reward axis may hold a PRM of another tokenizer family
                # than a policy the user chose: that cell cannot exist; refuse it, keep
                # the rest.
                if "reward" not in from_conf:
                    raise
                cells.append(Cell(knobs, cell_overrides, None, 0, PhaseFlops(), "",
                                  error.reason))
        return cells

    fraction = ladder.rungs[0] if ladder else base.pilot.fraction
    cells = solve_all(fraction)
    if ladder is not None:  # its evaluation comes out of selection.pilot_budget too
        cells = ladder_eval_plan(cells, ladder, budget)
        fitted = fit_ladder_to_eval(ladder, cells, base, axes, budget)
        shrunk = (ladder_eval_plan(solve_all(fitted.rungs[0]), fitted, budget)
                  if fitted != ladder else cells)
        # rungs so short that cells cannot buy a step: keep them (the plan warns instead)
        if sum(not c.refused for c in shrunk) == sum(not c.refused for c in cells):
            ladder, fraction, cells = fitted, fitted.rungs[0], shrunk
    _check_distinct(cells)
    if not any(not c.refused for c in cells):
        if all(c.spec is None for c in cells):
            raise UsageError(f"reward: {cells[0].refused}; pick rewards for this policy, "
                             f"e.g. reward=rule")
        cheapest = min((c for c in cells if c.spec is not None),
                       key=lambda c: worst_step_flops(c.spec, 1))
        knob = (f"the ladder's first rung {fraction:.3g}" if ladder
                else f"pilot.fraction={fraction}")
        fix = "selection.rungs (or selection.share)" if ladder else "pilot.fraction"
        raise UsageError(f"budget={budget:.3g}: no cell can buy one GRPO step with its pilot "
                         f"budget ({knob}; cheapest cell: {cheapest.refused}); raise budget "
                         f"or {fix}")
    check_bounds(cells, base, budget, budget * (ladder.rungs[-1] if ladder else fraction),
                 device=pilot_device(base, runnable))
    # every data file and model folder the pilots will read, opened before any runs
    preflight.check_plan(c.spec for c in cells if c.spec is not None)
    return Plan(budget, fraction, tuple((k, tuple(v)) for k, v in axes.items()),
                tuple(cells), base.task.name, base, ladder)


def _check_distinct(cells: list[Cell]) -> None:
    """Two cells with one id would share a folder: refuse, naming both knob sets."""
    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.spec is None:
            continue
        other = seen.setdefault(cell.spec.cell_id, cell)
        if other is not cell:
            differ = [k for (k, a), (_, b) in zip(other.knobs, cell.knobs) if a != b]
            mine, theirs = (" ".join(f"{k}={v}" for k, v in c.knobs if k in differ)
                            for c in (cell, other))
            raise UsageError(f"{mine}: the same cell as {theirs} (id {cell.spec.cell_id}: "
                             f"the pilot runs them identically); list only one of them")


def solve_cell(cfg, budget: float, knobs, overrides, *, runnable: bool = True,
               fraction: float | None = None, ladder: bool = False) -> Cell:
    """Freeze one composed cell and solve its steps at ``fraction x budget`` (default:
    ``pilot.fraction``; a ladder's cells: its first rung, evaluated at
    ``selection.rung_checkpoints`` of it)."""
    fraction = cfg.pilot.fraction if fraction is None else fraction
    if runnable:
        check_reward_built(cfg)
    specs = to_specs(cfg)  # validated once, for the spec and the step alike
    spec = to_run_spec(cfg, pilot_flops(budget, fraction), runnable=runnable, specs=specs)
    if ladder:
        spec = replace(spec, checkpoints=tuple(float(c) for c in cfg.selection.rung_checkpoints))
    # a cap that cannot fit the context is no budget question: refused before "raise budget"
    preflight.check_context(cfg.model.name, cfg.task.prompt_tokens, spec.max_new_tokens,
                            cfg.model.context_tokens, nominal=True)
    if spec.backend == "vllm":  # what the engine cannot serve, refused before it loads
        check_vllm_cell(specs.policy, cuda=uses_gpus(cfg), lora_rank=spec.lora_rank)
    step = flops.grpo_step_flops(specs.policy, specs.reward, convention=cfg.convention,
                                 lora=specs.lora, **specs.kwargs())
    steps = int(spec.budget_flops // step.total)
    refused = ""
    worst = worst_step_flops(spec, cfg.task.prompt_tokens)  # the pilot's own refusal rule
    if worst > spec.budget_flops:
        refused = (f"one worst-case step costs {fmt_flops(worst)} FLOPs > its pilot budget "
                   f"{fmt_flops(spec.budget_flops)}")
        steps = 0
    planned = step.scale(steps)
    regime = regime_label(step.shares(), cfg.regime)
    memory = cell_memory(cfg, specs)
    by_target = {t: flops.eval_flops(specs.policy, specs.reward, problems=n,
                                     prompt_tokens=cfg.task.prompt_tokens,
                                     max_new_tokens=spec.max_new_tokens, lora=specs.lora,
                                     convention=cfg.convention)
                 for t, n in eval_problems(spec).items()}
    limit = cfg.launcher.gpu_mem_gb
    if limit and not refused and memory.peak / GIB > limit:
        refused = (f"estimated peak GPU memory {memory.peak / GIB:.1f} GiB > "
                   f"launcher.gpu_mem_gb={limit:g}; lower grid.micro_batch_size or "
                   f"grid.group_size, or use a larger GPU")
        steps = 0
    return Cell(tuple(knobs), tuple(overrides), spec, steps, planned, regime, refused,
                memory, sum(by_target.values()), by_target.get(spec.selection_target, 0.0))


def cell_memory(cfg, specs) -> MemoryPlan:
    """A cell's estimated pilot memory, in the dtype it will run in."""
    dtype = cfg.pilot.dtype
    if dtype == "auto":
        dtype = "bfloat16" if uses_gpus(cfg) else "float32"
    grid = cfg.grid
    rows = grid.prompts_per_step * grid.group_size
    micro = min(grid.micro_batch_size or rows, grid.minibatch_size or rows, rows)
    reward = specs.reward.model if specs.reward.kind != "rule" else None
    # a full fine-tuning cell's memory is planned at the default rank
    lora = specs.lora or LoraShape(grid.lora_rank or default_of(RunSpec, "lora_rank"))
    return plan_memory(specs.policy, lora,
                       dtype=dtype, rows=rows, micro_rows=micro,
                       prompt_tokens=cfg.task.prompt_tokens,
                       max_new_tokens=grid.max_new_tokens, reward_model=reward,
                       backend=cfg.pilot.backend)
