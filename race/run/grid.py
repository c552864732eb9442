"""Grid expansion and the budget solver: overrides -> allocation cells -> steps and FLOPs.

A grid is the product of its axes. Axes come from ``grid.axes`` in ``conf/grid/*.yaml``
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
from collections.abc import Mapping
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
from race.core.ladder import LadderPlan, fmt_fraction, plan_ladder
from race.core.memory import GIB, MemoryPlan, plan_memory
from race.core.regime import regime_label
from race.core.specs import LoraShape, PhaseFlops, RunSpec, pilot_flops, start_key
from race.errors import RewardTokenizerMismatch, UsageError
from race.pilot.budget import (
    checkpoints_after,
    eval_problems,
    planned_evaluations,
    reports_at,
    worst_step_flops,
)
from race.pilot.rollout.vllm_settings import check_cell as check_vllm_cell
from race.run.bounds import cell_knobs, check_bounds, pilot_device, uses_gpus

# the defaults' owner (a full fine-tuning cell's memory is planned at the default rank)
_CELL = RunSpec(model="", reward=(), task=(), budget_flops=0.0)
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
        ``i``, each at the runnable cells' mean cost: a continued cell evaluates only its
        checkpoints above the rung below (:func:`race.pilot.budget.checkpoints_after`, as
        the pilot), on the selection target alone below ``spec.report_from_flops``; the
        warm start is scored once per cell whose ``spec.score_start`` holds.
        """
        cells = self.runnable
        if self.ladder is None:
            return sum(c.eval_flops for c in cells)
        total = sum(c.eval_each_flops for c in cells if c.spec.score_start)
        below = 0.0
        for rung, count in zip(self.ladder.rungs, self.ladder.counts):
            budget, start = rung * self.budget_flops, below * self.budget_flops
            each = sum(sum(c.eval_each_flops if reports_at(c.spec, point * budget)
                           else c.eval_select_flops
                           for point in checkpoints_after(c.spec.checkpoints, budget, start))
                       for c in cells) / len(cells)
            total += count * self.ladder.seeds * each
            below = rung
        return total

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


def ladder_eval_plan(cells: list[Cell], ladder: LadderPlan, budget: float) -> list[Cell]:
    """A ladder's cells with their eval spent where decisions are made: below the last
    rung only the selection target is scored (``spec.report_from_flops`` is the last
    rung's budget), and each warm start once, by the first cell of its
    :func:`race.core.specs.start_key` group (the others read its rows)."""
    last = pilot_flops(budget, ladder.rungs[-1])
    seen, out = set(), []
    for cell in cells:
        if cell.spec is None:
            out.append(cell)
            continue
        key = start_key(cell.spec.to_dict())
        first = key not in seen and not cell.refused
        seen |= {key} if first else set()
        out.append(replace(cell, spec=replace(cell.spec, report_from_flops=last,
                                              score_start=first)))
    return out


def grid_ladder(base, axes: Mapping[str, list[str]], *,
                share: float | None = None) -> LadderPlan | None:
    """The ladder of a grid under ``selection.policy=ladder`` (None: flat), costing at
    most ``share`` full runs (default ``selection.share``).

    Configs are the grid's cells with the seeds folded together; the plan keeps room for
    a config of every size on the ``model`` axis at each rung (whether a size uses it is
    decided at each promotion, ``selection.keep_sizes``).
    """
    selection = base.selection
    if selection.policy != "ladder":
        return None
    seeds = len(axes.get("pilot.seed", [None]))
    configs = 1
    for key, values in axes.items():
        configs *= 1 if key == "pilot.seed" else len(values)
    return plan_ladder(configs, seeds=seeds, n_sizes=len(axes.get("model", [None])),
                       rungs=selection.rungs, reduction=selection.reduction,
                       share=selection.share if share is None else share)


def fit_ladder_to_eval(ladder: LadderPlan, cells: list[Cell], base, axes,
                       budget: float) -> LadderPlan:
    """The ladder with its rungs shrunk until its charged FLOPs and its planned eval
    FLOPs together fit ``selection.pilot_budget`` full runs (``ladder`` itself when they
    fit already, or when the eval alone exceeds it: :func:`eval_budget_warning` says so).

    A rung's eval does not depend on its budget (every checkpoint scores the same
    problems), so the eval share is read once, at the requested rungs.
    """
    runnable = [c for c in cells if not c.refused]
    if not runnable:
        return ladder
    selection = base.selection
    provisional = Plan(budget, ladder.rungs[0], (), tuple(runnable), "", base, ladder)
    room = selection.pilot_budget - provisional.eval_flops / budget
    if room <= 0 or ladder.cost_share <= room * (1 + 1e-9):
        return ladder
    return grid_ladder(base, axes, share=min(selection.share, room))


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
    return plan_memory(specs.policy, specs.lora or LoraShape(grid.lora_rank or _CELL.lora_rank),
                       dtype=dtype, rows=rows, micro_rows=micro,
                       prompt_tokens=cfg.task.prompt_tokens,
                       max_new_tokens=grid.max_new_tokens, reward_model=reward,
                       backend=cfg.pilot.backend)


def plan_table(plan: Plan) -> str:
    """The plan as a fixed-width table, refused cells listed last with their reasons."""
    always = [k for k in ("model", "reward") if k not in dict(plan.axes)]
    keys = always + [k for k, _ in plan.axes]
    short = {k: k.split(".")[-1].replace("group_size", "G").replace("update_epochs", "mu")
             for k in keys}
    shown = [cell_knobs(c) for c in plan.cells]
    widths = {k: max(len(short[k]), *(len(str(kn.get(k, ""))) for kn in shown)) for k in keys}
    header = (f"{'cell':<13}" + "".join(f"{short[k]:<{widths[k] + 2}}" for k in keys)
              + f"{'steps':>6}{'rollout':>19}{'learning':>19}{'feedback':>19}"
              + f"{'mem GiB':>9}  regime")
    lines = [header]
    for cell in plan.runnable:
        knobs = cell_knobs(cell)
        shares = cell.planned.shares()
        phases = "".join(f"{fmt_flops(getattr(cell.planned, p)):>11} {shares[p]:>6.1%}"
                         for p in ("rollout", "learning", "feedback"))
        memory = f"{cell.memory.peak / GIB:>9.2f}" if cell.memory else f"{'-':>9}"
        lines.append(f"{cell.spec.cell_id:<13}"
                     + "".join(f"{knobs[k]:<{widths[k] + 2}}" for k in keys)
                     + f"{cell.steps:>6}{phases}{memory}  {cell.regime}")
    refused = [c for c in plan.cells if c.refused]
    if refused:
        lines.append("")
        lines.append(f"refused ({len(refused)} cell(s), not run):")
        for cell in refused:
            knobs = " ".join(f"{k}={v}" for k, v in cell.knobs)
            lines.append(f"  {cell_label(cell)}  {knobs}: {cell.refused}")
    return "\n".join(lines)


def cell_label(cell: Cell) -> str:
    """The cell id, or a dash for a cell that cannot exist."""
    return cell.spec.cell_id if cell.spec else "-" * 12


def flat_share(plan: Plan) -> float:
    """What a flat grid of these cells at ``pilot.fraction`` would cost, in full runs."""
    return len(plan.runnable) * plan.base.pilot.fraction if plan.base else 0.0


def cost_warning(plan: Plan) -> str:
    """A warning when the grid's pilots together cost more than one full-budget run
    ("" otherwise): under ``selection.policy=flat`` each cell gets ``pilot.fraction`` of
    the budget, whatever the grid (a ladder spends ``selection.share``)."""
    n = len(plan.runnable)
    if plan.ladder is not None or plan.share_of_full_run <= 1.0:
        return ""
    return (f"warning: these {n} pilots cost {plan.share_of_full_run:.2f} full-budget runs "
            f"(each gets pilot.fraction={plan.pilot_fraction:g} of the budget); to keep the "
            f"pilots within one full run, use selection.policy=ladder, "
            f"pilot.fraction<={1 / n:.3g} or fewer cells")


def eval_budget_warning(plan: Plan) -> str:
    """A warning when the pilots' charged and planned eval FLOPs together exceed
    ``selection.pilot_budget`` full-budget runs ("" otherwise)."""
    limit = plan.base.selection.pilot_budget if plan.base else 1.0
    if plan.share_with_eval <= limit:
        return ""
    return (f"warning: these pilots with their evaluation cost {plan.share_with_eval:.2f} "
            f"full-budget runs > selection.pilot_budget={limit:g}; score fewer problems "
            f"(pilot.select_examples, pilot.eval_examples), fewer checkpoints "
            f"(pilot.checkpoints) or targets (pilot.eval_targets), or raise "
            f"selection.pilot_budget")


def ladder_text(ladder: LadderPlan) -> str:
    """``16 configs at F/48 -> 8 at F/24 -> 4 at F/12 -> 2 at F/6``, with seeds."""
    rungs = " -> ".join(f"{count} at {fmt_fraction(rung)}"
                        for count, rung in zip(ladder.counts, ladder.rungs))
    seeds = f" (x{ladder.seeds} seeds)" if ladder.seeds > 1 else ""
    return f"{rungs} config(s){seeds}"


def plan_summary(plan: Plan) -> str:
    """One paragraph: the grid's size, budgets, and pilot cost vs one full run."""
    axes = " x ".join(f"{k}[{len(v)}]" for k, v in plan.axes) or "one cell"
    head = (f"grid {axes} = {len(plan.cells)} cell(s), {len(plan.runnable)} runnable; "
            f"full-run budget F = {fmt_flops(plan.budget_flops)} FLOPs")
    charged = (f"{fmt_flops(plan.pilot_flops)} FLOPs charged = {plan.share_of_full_run:.1%} "
               f"of one full-budget run, eval ~{fmt_flops(plan.eval_flops)} "
               f"({plan.eval_flops / plan.budget_flops:.1%}), {plan.share_with_eval:.1%} "
               f"with eval")
    if plan.ladder is not None:
        selection = plan.base.selection
        shrunk = (f"; rungs shrunk x{plan.ladder.scaled:.3g} to fit selection.share="
                  f"{selection.share:g} and, with eval, selection.pilot_budget="
                  f"{selection.pilot_budget:g}" if plan.ladder.scaled < 1 else "")
        return (f"{head}; ladder {ladder_text(plan.ladder)}, pilots {charged} (a flat grid "
                f"at pilot.fraction={plan.base.pilot.fraction:g}: {flat_share(plan):.1%} "
                f"charged){shrunk}")
    each = fmt_flops(plan.budget_flops * plan.pilot_fraction)
    return (f"{head}, pilots {plan.pilot_fraction:g} x budget = {each} each; all pilots "
            f"{charged}")
