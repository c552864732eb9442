"""What a plan must not do, checked before anything runs, and the one-line warnings it
prints: where its pilots will run (:func:`pilot_device`), the bounds on one pilot's steps
and hours (:func:`check_bounds`), and a generation cap fitted to a policy's context or
below the task's typical completion (:func:`length_warning`). Pure but for asking torch
how many GPUs this machine has (a sweep only).
"""

from __future__ import annotations

from race.core.fmt import fmt_flops
from race.errors import UsageError
from race.pilot.budget import PILOT_FLOPS_PER_S, machine_device, pilot_hours


def uses_gpus(cfg) -> bool:
    """Whether the pilots will run on GPUs: pilot.device=cuda, or the config gives each
    pilot a GPU (``launcher.gpus`` or ``launcher.gpus_per_node``, whichever launcher
    reads it: a plan written for a GPU cluster is planned for GPUs wherever it is
    checked; ``race plan`` cannot ask torch, and must not import it)."""
    return (cfg.pilot.device == "cuda"
            or (cfg.pilot.device == "auto"
                and bool(cfg.launcher.gpus or cfg.launcher.gpus_per_node)))


def pilot_device(cfg, runnable: bool) -> str | None:
    """Where the pilots will run, as far as the command can tell: ``cuda`` when the launcher
    gives GPUs or ``pilot.device=cuda``; ``cpu`` when ``pilot.device=cpu``; for
    ``pilot.device=auto``, a sweep's own machine (torch asked), and None for ``race plan``,
    which plans for wherever the pilots will go and must not import torch."""
    if uses_gpus(cfg):
        return "cuda"
    if cfg.pilot.device == "cpu":
        return "cpu"
    return machine_device() if runnable else None


def check_bounds(cells: list, base, budget: float, longest_flops: float, *,
                 device: str | None) -> None:
    """Refuse a plan whose longest pilot (``longest_flops`` charged: a ladder's last rung)
    buys more GRPO steps than ``pilot.max_steps`` or, on a known ``device``, would run
    longer than ``pilot.max_hours`` (:func:`race.pilot.budget.pilot_hours`): a typo in the
    budget, not a pilot. One UsageError naming the first such cell."""
    pilot = base.pilot
    hours = pilot_hours(longest_flops, device) if device else 0.0  # the same for every cell
    for cell in (c for c in cells if not c.refused and c.steps):
        steps = cell.steps * longest_flops / cell.spec.budget_flops
        if steps <= pilot.max_steps and hours <= pilot.max_hours:
            continue
        knobs = " ".join(f"{k}={v}" for k, v in cell.shown_knobs().items())
        what = (f"{steps:.3g} GRPO steps, past pilot.max_steps={pilot.max_steps}"
                if steps > pilot.max_steps else
                f"about {hours:.3g} h on {device} at {PILOT_FLOPS_PER_S[device]:.2g} "
                f"FLOP/s, past pilot.max_hours={pilot.max_hours:g}")
        raise UsageError(f"budget={budget:.3g}: the cell {knobs} would run a pilot of "
                         f"{fmt_flops(longest_flops)} FLOPs, {what}; lower budget (or "
                         f"pilot.fraction, selection.rungs), or raise that bound on purpose")


CAP_KEY = "grid.max_new_tokens"


def cap_given(overrides: list[str]) -> bool:
    """Whether ``overrides`` (a cell's, or ``race pilot``'s) set ``grid.max_new_tokens``
    (one value or an axis's); ``null`` is the task's cap, fitted as if unset."""
    values = [text.split("=", 1)[1] for text in overrides
              if text.split("=", 1)[0].lstrip("+~") == CAP_KEY]
    return bool(values) and values[-1].strip() != "null"


def length_warning(plan) -> str:
    """:func:`cap_warning` for a plan's runnable cells."""
    return cap_warning(plan.base.task, [(c.spec.max_new_tokens, c.spec.model,
                                         cap_given(c.overrides)) for c in plan.runnable])


def cap_warning(task, caps: list[tuple[int, str, bool]]) -> str:
    """One line about the cells' generation cap, "" when none needs one.

    ``caps``: each cell's (cap, model, whether an override set the cap). A cap no override
    names that is below the task's own (``task.max_new_tokens``) was fitted to a policy's
    context (:func:`race.config.fitted_cap`): completions longer than it are cut.
    Otherwise, a cap below the task's typical completion (``task.completion_tokens``): most
    completions would be cut before their answer, and a cut completion states none (it
    earns 0).
    """
    fitted: dict[int, set[str]] = {}
    for cap, model, given in caps:
        if cap < task.max_new_tokens and not given:
            fitted.setdefault(cap, set()).add(model)
    if fitted:
        caps = ", ".join(f"{cap} for model={','.join(sorted(models))}"
                         for cap, models in sorted(fitted.items()))
        cut = ("most completions would be cut before their answer"
               if min(fitted) < task.completion_tokens else
               f"completions longer than {min(fitted)} tokens are cut")
        return (f"warning: {CAP_KEY} unset and task={task.name}'s cap of "
                f"{task.max_new_tokens} tokens after a prompt of about {task.prompt_tokens} "
                f"does not fit the policy's context, so {CAP_KEY} is fitted to {caps}: "
                f"{cut} (a cut completion earns 0); set {CAP_KEY} to choose the cap, or "
                f"pick a model with a longer context")
    short = sorted({cap for cap, _, _ in caps if cap < task.completion_tokens})
    if not short:
        return ""
    return (f"warning: {CAP_KEY}={short[0]} is below task={task.name}'s typical "
            f"completion of {task.completion_tokens} tokens: most completions would be cut "
            f"before their answer (a cut completion earns 0); raise {CAP_KEY}, or "
            f"leave it unset for the task's own cap ({task.max_new_tokens})")
