"""The ``race`` command: the only module that reads ``sys.argv``.

Bad input (unknown names, impossible knobs, malformed overrides: a
:class:`~race.errors.UsageError` or Hydra's own override errors) prints one line naming
the key, the value and the fix, and exits with code 2; never a traceback. Anything else
is a bug in RACE: its traceback, one line asking to report it, and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from race.core.fmt import fmt_flops
from race.errors import UsageError

USAGE_ERROR = 2
INTERNAL_ERROR = 1

SUBCOMMANDS = {
    "flops": "print a compute card: FLOPs per phase, shares and totals (runs nothing)",
    "plan": "expand the allocation grid and solve each cell's steps and FLOPs (runs nothing)",
    "sweep": "plan, launch every pilot (local, slurm, inline), wait, resume, summarise",
    "pilot": "run one allocation cell as a budgeted GRPO pilot (pilot.fraction x budget)",
    "report": "rank regimes, fit curves, draw the frontier, write the compute card",
    "validate": "run the selected cells at the full budget; report predicted vs realized",
}

EPILOG = """\
overrides are Hydra-style key=value pairs, e.g.
  race flops model=qwen2.5-1.5b reward=qwen2.5-math-prm-7b grid.group_size=8 \\
             grid.max_new_tokens=512 steps=100
  race plan  budget=1e18 model=qwen2.5-0.5b,qwen2.5-1.5b reward=rule,qwen2.5-math-prm-7b
  race sweep                                  # the embedded default grid on this CPU
  race sweep budget=1e18 model=qwen2.5-0.5b,qwen2.5-1.5b launcher=slurm \\
             launcher.partition=gpu launcher.gpus_per_node=1
comma lists are sweep axes (replacing the grid's own axes, grid.axes in conf/grid/);
groups: model, reward, task, grid, launcher (see conf/); FLOPs print as 3.2e+15.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="race", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="RACE: where should RL post-training compute go? FLOP accounting "
                    "and allocation pilots for GRPO post-training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        if name in ("report", "validate"):
            cmd.add_argument("sweep_dir", metavar="SWEEP_DIR",
                             help="a sweep folder, e.g. results/arith-3.5e12-1a2b3c4d")
        if name == "pilot":
            cmd.add_argument("-m", "--multirun", action="store_true",
                             help="Hydra multirun: comma lists sweep, hydra/launcher=... "
                                  "picks Hydra's launcher (e.g. submitit_slurm)")
        cmd.add_argument("overrides", nargs="*", metavar="key=value",
                         help="Hydra-style config overrides")
    return parser


def _params(count: int) -> str:
    return f"{count / 1e9:.4g}B" if count >= 1e8 else f"{count / 1e6:.3g}M"


def _card_text(cfg, specs, cards: dict) -> str:
    from race.core.flops import head_flops_per_position, linear_forward_flops_per_token

    policy, reward, lora, kw = specs.policy, specs.reward, specs.lora, specs.kwargs()
    model_card = cards["model"]
    rows = kw["prompts_per_step"] * kw["group_size"]
    adapter = (f"LoRA r={lora.rank} on {len(lora.targets)} module(s)/layer"
               if lora else "full fine-tuning")
    feedback = ("rule-based verifier, 0 FLOPs" if reward.kind == "rule" else
                f"{reward.kind.upper()} {reward.model.name} "
                f"({_params(reward.model.total_params)} params), "
                f"{reward.steps_per_trace if reward.kind == 'prm' else 0} step tags/trace")
    per_token = linear_forward_flops_per_token(policy) + head_flops_per_position(policy)
    lines = [
        f"RACE compute card  ({model_card.steps} GRPO step(s); budget convention: "
        f"{cfg.convention})",
        f"  policy    {policy.name}: {_params(policy.total_params)} params "
        f"({_params(policy.non_embedding_params)} non-embedding), "
        f"{fmt_flops(per_token)} FLOPs/token forward (no attention), {adapter}",
        f"  feedback  {reward.name}: {feedback}",
        f"  search    {kw['prompts_per_step']} prompts x G={kw['group_size']} = {rows} "
        f"completions/step; prompt {kw['prompt_tokens']} tok, completion "
        f"{kw['completion_tokens']} tok (cap {kw['max_new_tokens']})",
        f"  learning  mu={kw['update_epochs']} epoch(s), minibatch "
        f"{kw['minibatch_size'] or rows}, kl_coef={kw['kl_coef']}",
        "",
        f"  {'phase':<10}{'model FLOPs':>14}{'share':>8}{'executed FLOPs':>17}{'share':>8}",
    ]
    totals = {name: card.total for name, card in cards.items()}
    shares = {name: total.shares() for name, total in totals.items()}
    for phase in ("rollout", "learning", "feedback"):
        lines.append(f"  {phase:<10}{fmt_flops(getattr(totals['model'], phase)):>14}"
                     f"{shares['model'][phase]:>8.1%}"
                     f"{fmt_flops(getattr(totals['executed'], phase)):>17}"
                     f"{shares['executed'][phase]:>8.1%}")
    lines.append(f"  {'total':<10}{fmt_flops(totals['model'].total):>14}{'':>8}"
                 f"{fmt_flops(totals['executed'].total):>17}")
    lines.append(f"  per step  {fmt_flops(model_card.per_step.total):>12}{'':>8}"
                 f"{fmt_flops(cards['executed'].per_step.total):>17}")
    lines.append("  (model: real tokens, causal attention; executed: what Hugging Face runs, "
                 "padded to the cap, full-square attention)")
    return "\n".join(lines)


def cmd_flops(overrides: list[str]) -> int:
    """``race flops``: compose the config, account one cell, print its compute card."""
    from race.config import compose_config, to_specs
    from race.core import flops

    cfg = compose_config(overrides)
    specs = to_specs(cfg)
    step = {conv: flops.grpo_step_flops(specs.policy, specs.reward, convention=conv,
                                        lora=specs.lora, **specs.kwargs())
            for conv in flops.CONVENTIONS}
    if cfg.steps is not None:
        steps = cfg.steps
    elif cfg.budget is not None:
        steps = flops.steps_for_budget(step[cfg.convention], cfg.budget)
    else:
        steps = 1
    cards = {conv: flops.compute_card(specs.policy, specs.reward, step[conv],
                                      convention=conv, steps=steps)
             for conv in flops.CONVENTIONS}
    if cfg.format == "json":
        out = {"assumptions": {"model": specs.policy.name, "reward": specs.reward.name,
                               "task": cfg.task.name, "budget_flops": cfg.budget,
                               "budget_convention": cfg.convention,
                               "lora_rank": specs.lora.rank if specs.lora else 0,
                               **specs.kwargs()},
               "params": {"total": specs.policy.total_params,
                          "non_embedding": specs.policy.non_embedding_params},
               "cards": {conv: card.to_dict() for conv, card in cards.items()}}
        print(json.dumps(out, indent=2))
    else:
        print(_card_text(cfg, specs, cards))
    return 0


# Fixes appended to Hydra's own messages, matched on their first words.
HYDRA_HINTS = {
    "Could not override": "check the key against conf/ (e.g. grid.group_size, budget)",
    "Error merging override": "give the key a value of its schema type",
    "Ambiguous value": "this command takes one value per key; comma lists are sweep "
                       "axes for `race sweep`",
    "no viable alternative": "write overrides as key=value (Hydra override grammar)",
}


def _first_line(error: BaseException) -> str:
    text = str(error).strip().strip("'\"")
    return next((line.strip() for line in text.splitlines() if line.strip()), repr(error))


class _Progress:
    """A one-line progress bar on stderr: FLOPs spent and remaining, steps, train reward."""

    def __init__(self, budget_flops: float, width: int = 30):
        self.budget, self.width = budget_flops, width

    def __call__(self, row: dict) -> None:
        done = min(1.0, row["charged_flops"] / self.budget)
        bar = "#" * int(done * self.width) + "." * (self.width - int(done * self.width))
        print(f"\r[{bar}] {done:6.1%}  step {row['step']:>4}  spent "
              f"{fmt_flops(row['charged_flops'])}  left "
              f"{fmt_flops(self.budget - row['charged_flops'])}  train reward "
              f"{row['train_reward']:.3f}", end="", file=sys.stderr, flush=True)


def cmd_pilot(overrides: list[str]) -> int:
    """``race pilot``: run one cell at ``pilot.fraction x budget`` and print its summary."""
    from pathlib import Path

    from race.config import compose_config
    from race.pilot.budget import check_budget
    from race.pilot.loop import run_pilot

    cfg = compose_config(overrides)
    spec = _pilot_spec(cfg)
    check_budget(spec, prompt_tokens=1, key=_pilot_budget_key(cfg))  # before any model loads
    cell_dir = Path(cfg.pilot.out_dir) / "cells" / spec.cell_id
    print(f"race pilot: {spec.model} x {dict(spec.reward)['name']}, G={spec.group_size}, "
          f"mu={spec.update_epochs}, pilot budget {fmt_flops(spec.budget_flops)} FLOPs "
          f"({spec.convention}) -> {cell_dir}", file=sys.stderr)
    summary = run_pilot(spec, cell_dir, progress=_Progress(spec.budget_flops))
    print(file=sys.stderr)
    shares = {k: summary["flops"][k] / summary["total_flops"] if summary["total_flops"] else 0
              for k in ("rollout", "learning", "feedback")}
    print(f"status     {summary['status']}" + (f": {summary['error']}" if summary["error"]
                                                 else ""))
    print(f"steps      {summary['steps']}")
    print(f"FLOPs      {fmt_flops(summary['total_flops'])} of {fmt_flops(summary['budget_flops'])} "
          f"({summary['total_flops'] / summary['budget_flops']:.1%}); "
          + ", ".join(f"{k} {v:.1%}" for k, v in shares.items())
          + f"; eval {fmt_flops(summary['flops']['eval'])} (not charged)")
    print("wall s     " + ", ".join(f"{k} {v:.1f}" for k, v in summary["wall_s"].items()))
    print(f"MFU        on {summary['device']} ({summary['dtype']}): " + ", ".join(
        f"{phase} {use['mfu']:.1%}" for phase, use in summary["throughput"].items()
        if use["mfu"] is not None and summary["flops"].get(phase)))
    for target, final in summary["final_eval"].items():
        start = summary["initial_eval"].get(target, {}).get("accuracy", float("nan"))
        print(f"{target:<10} accuracy {start:.3f} -> {final['accuracy']:.3f}, mean reward "
              f"{final['mean_reward']:.3f}")
    print(f"results    {cell_dir}")
    return 0 if summary["status"] == "ok" else 1


def _pilot_spec(cfg):
    """The one pilot ``race pilot`` runs: its spec at ``pilot.fraction x budget``."""
    from race.config import check_device, to_run_spec

    check_device(cfg)  # the device before the budget: a GPU run's first mistake
    if cfg.budget is None:
        raise UsageError("budget=null: race pilot needs the full-run budget in FLOPs (the "
                         "pilot spends pilot.fraction of it); e.g. budget=2e12")
    return to_run_spec(cfg, cfg.budget * cfg.pilot.fraction)


def _pilot_budget_key(cfg) -> str:
    """How a too-small pilot budget is named: the budget, the fraction and their product."""
    return f"budget={cfg.budget:.3g} x pilot.fraction={cfg.pilot.fraction} = pilot budget"


def cmd_plan(overrides: list[str]) -> int:
    """``race plan``: expand the grid, solve each cell, print the table. Loads no weights.

    A budget list (``budget=1e12,4e12``) plans one grid (one ladder) per budget.
    """
    from race.run.grid import budget_axis, cost_warning, plan_grid, plan_summary, plan_table

    budgets, rest = budget_axis(overrides)
    plans = ([plan_grid([*rest, f"budget={b!r}"], runnable=False) for b in budgets]
             if budgets else [plan_grid(overrides, runnable=False)])
    for plan in plans:
        if budgets:
            print(f"== budget={plan.budget_flops:.3g} ==")
        print(plan_table(plan))
        print()
        print(plan_summary(plan))
        if cost_warning(plan):
            print(cost_warning(plan), file=sys.stderr)
        if budgets:
            print()
    return 0


def cmd_sweep(overrides: list[str]) -> int:
    """``race sweep``: plan, launch every cell without an ok summary, wait, summarise.

    A budget list (``budget=1e12,4e12,1.6e13``) runs one sweep (one ladder) per budget in
    ``<out_dir>/<name>/budget-<B>/``, then writes the budget-conditional report beside
    them: the selected allocation at each budget and where it changes.
    """
    from pathlib import Path

    from race.run.grid import budget_axis, plan_grid
    from race.run.launch.slurm import check_slurm
    from race.run.sweep import sweep_name

    budgets, rest = budget_axis(overrides)
    if not budgets:
        plan = plan_grid(overrides)
        base = plan.base
        if base.launcher.name == "slurm":
            check_slurm(base.launcher)
        sweep_dir = Path(base.sweep.out_dir) / (base.sweep.name or sweep_name(plan))
        return _sweep_one(plan, overrides, sweep_dir)
    plans = [plan_grid([*rest, f"budget={b!r}"]) for b in budgets]  # all checked first
    base = plans[0].base
    if base.launcher.name == "slurm":
        check_slurm(base.launcher)
    name = base.sweep.name or "-".join([plans[0].task, "budgets", *(
        sweep_name(p).rsplit("-", 1)[1] for p in plans)])[:80]
    parent = Path(base.sweep.out_dir) / name
    folders, failed = {}, 0
    for plan in plans:
        folder = parent / f"budget-{plan.budget_flops:.3g}".replace("+", "")
        print(f"race sweep: == budget={plan.budget_flops:.3g} -> {folder} ==", file=sys.stderr)
        failed += _sweep_one(plan, [*rest, f"budget={plan.budget_flops!r}"], folder) != 0
        folders[plan.budget_flops] = folder
    from race.report.write import write_budget_report

    print(write_budget_report(parent, folders, level=base.report.level))
    return 0 if failed == 0 else 1


def _sweep_one(plan, overrides: list[str], sweep_dir) -> int:
    """One budget's sweep of ``plan`` into ``sweep_dir``, then its report; the exit code."""
    from race.run.grid import cell_label, cost_warning, plan_summary
    from race.run.sweep import run_sweep

    base = plan.base
    refused = [c for c in plan.cells if c.refused]
    print(f"race sweep: {plan_summary(plan)}", file=sys.stderr)
    if cost_warning(plan):
        print(f"race sweep: {cost_warning(plan)}", file=sys.stderr)
    for cell in refused:
        print(f"race sweep: refused {cell_label(cell)} "
              f"({' '.join(f'{k}={v}' for k, v in cell.knobs)}): {cell.refused}",
              file=sys.stderr)
    print(f"race sweep: {len(plan.runnable)} pilot(s) via launcher={base.launcher.name} -> "
          f"{sweep_dir}", file=sys.stderr)
    outcome = run_sweep(plan, base, overrides, sweep_dir)
    import pandas as pd

    frame = pd.read_csv(sweep_dir / "pilots.csv")
    if outcome["ok"]:
        _report(sweep_dir, base)
    else:
        from race.report.write import write_failures

        write_failures(sweep_dir, frame)
        targets = [c for c in frame.columns
                   if c.startswith("final_") and not c.endswith("_reward")]
        columns = ["cell_id", "model", "reward", "group_size", "update_epochs", "seed",
                   "status", "steps", "total_flops", *targets]
        table = frame[[c for c in columns if c in frame.columns]].copy()
        if "total_flops" in table:
            table["total_flops"] = table["total_flops"].map(fmt_flops)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"\n{outcome['ok']} ok, {outcome['failed']} failed ({outcome['skipped']} already "
          f"done before this run); launch wall {outcome['wall_s']:.0f} s; results in "
          f"{sweep_dir}")
    if outcome["by_other"]:
        from race.run.sweep import held_text

        print(f"race sweep: {len(outcome['by_other'])} cell(s) were run by "
              f"{held_text(outcome['by_other'])}, not here: "
              f"{', '.join(sorted(outcome['by_other']))}", file=sys.stderr)
    for _, row in frame[frame["status"] != "ok"].iterrows():
        print(f"failed {row['cell_id']}: {row['error']}", file=sys.stderr)
    return 0 if outcome["failed"] == 0 else 1


def _report(sweep_dir, cfg) -> dict:
    from race.report.write import write_report

    report = cfg.report
    written = write_report(sweep_dir, n_boot=report.n_boot, level=report.level,
                           top_k=report.top_k, basis=report.basis)
    print(written["summary"])
    return written


def _sweep_folder(path: str):
    from pathlib import Path

    folder = Path(path)
    if not (folder / "sweep.json").is_file() and not (folder / "cells").is_dir():
        raise UsageError(f"SWEEP_DIR={path}: not a sweep folder (no sweep.json or cells/); "
                         f"give the folder `race sweep` printed, e.g. results/<sweep>")
    return folder


def cmd_report(sweep_dir: str, overrides: list[str]) -> int:
    """``race report SWEEP_DIR``: leaderboard, compute card, plots, selection."""
    from race.config import compose_config, validate

    folder = _sweep_folder(sweep_dir)
    cfg = compose_config(overrides)
    validate(cfg)
    _report(folder, cfg)
    return 0


def cmd_validate(sweep_dir: str, overrides: list[str]) -> int:
    """``race validate SWEEP_DIR``: the selected cells at the full budget, then compare."""
    from race.config import compose_config, validate
    from race.report.write import validation_section
    from race.run.sweep import run_validation

    folder = _sweep_folder(sweep_dir)
    cfg = compose_config(overrides)
    validate(cfg)
    if cfg.launcher.name == "slurm":
        from race.run.launch.slurm import check_slurm

        check_slurm(cfg.launcher)
    if not (folder / "selection.json").is_file():
        _report(folder, cfg)
    comparison = run_validation(folder, cfg, top_k=cfg.validate.top_k)
    print(validation_section(folder, comparison))
    for row in comparison["failed"]:
        print(f"failed {row['cell_id']}: {row['error']}", file=sys.stderr)
    return 0 if not comparison["failed"] else 1


def _hydra_pilot(cfg) -> str:
    """One pilot as a Hydra task function (``race pilot -m``); returns its status."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from race.config import to_run_spec
    from race.pilot.loop import run_pilot

    typed = OmegaConf.to_object(cfg)
    spec = to_run_spec(typed, typed.budget * typed.pilot.fraction)
    summary = run_pilot(spec, Path(typed.pilot.out_dir) / "cells" / spec.cell_id)
    print(f"race pilot: {spec.cell_id} {summary['status']}, {summary['steps']} steps, "
          f"{fmt_flops(summary['total_flops'])} FLOPs", file=sys.stderr)
    return summary["status"]


def pilot_multirun(overrides: list[str]) -> int:
    """``race pilot -m ...``: Hydra's own multirun over single pilots.

    Every combination is composed and checked first (bad input exits 2 before Hydra
    launches anything); then ``hydra.main`` runs the sweep with whichever launcher
    ``hydra/launcher=`` names (basic, submitit_local, submitit_slurm).
    """
    import itertools

    import hydra

    from race import catalog
    from race.config import compose_config, register_configs
    from race.pilot.budget import check_budget
    from race.run.grid import split_overrides

    ours = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    fixed, axes = split_overrides(ours)
    for values in itertools.product(*axes.values()):
        cfg = compose_config(fixed + [f"{k}={v}" for k, v in zip(axes, values)])
        check_budget(_pilot_spec(cfg), prompt_tokens=1, key=_pilot_budget_key(cfg))
    register_configs()
    argv = sys.argv
    sys.argv = ["race-pilot", "--multirun", *overrides]
    try:
        hydra.main(config_path=str(catalog.conf_dir()), config_name="config",
                   version_base="1.3")(_hydra_pilot)()
    finally:
        sys.argv = argv
    return 0


def _one_line(error: BaseException) -> str:
    """Hydra's message, its cause, and the fix, on one line."""
    line = _first_line(error)
    if line.startswith("LexerNoViableAltException: "):  # Hydra's lexer on an override
        override = line.split(": ", 1)[1]
        return (f"{override}: Hydra cannot read this value unquoted (it holds a character "
                f"outside its unquoted grammar, e.g. a non-ASCII letter); quote the value as "
                f"Hydra documents, e.g. \"{override.split('=', 1)[0]}='"
                f"{override.split('=', 1)[-1]}'\" in the shell")
    if error.__cause__ is not None:
        line = f"{line.rstrip('.')}: {_first_line(error.__cause__)}"
    hint = next((fix for start, fix in HYDRA_HINTS.items() if line.startswith(start)), "")
    return f"{line}; {hint}" if hint else line


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return USAGE_ERROR
    commands = {"flops": cmd_flops, "pilot": cmd_pilot, "plan": cmd_plan, "sweep": cmd_sweep}
    try:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if args.command in ("report", "validate"):
            run = cmd_report if args.command == "report" else cmd_validate
            return run(args.sweep_dir, args.overrides)
        if args.command == "pilot" and args.multirun:
            return pilot_multirun(args.overrides)
        return commands[args.command](args.overrides)
    except (UsageError, HydraException, OmegaConfBaseException) as error:
        print(f"race {args.command}: {_one_line(error)}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as error:
        import errno

        from race.store.io import no_space

        full = no_space(error, error.filename or ".")
        if full is not None:  # a disk filled (results, submitit's logs)
            print(f"race {args.command}: {full}", file=sys.stderr)
            return USAGE_ERROR
        if error.errno in (errno.EACCES, errno.EROFS, errno.EPERM) and error.filename:
            print(f"race {args.command}: cannot write {error.filename} ({error.strerror}); "
                  f"make it writable, or write elsewhere with sweep.out_dir=<folder> "
                  f"(pilot.out_dir for race pilot)", file=sys.stderr)
            return USAGE_ERROR
        return _internal_error(args.command, error)
    except KeyboardInterrupt:
        print(f"\nrace {args.command}: interrupted; local pilots were stopped (SLURM jobs "
              f"keep running); rerun the same command to resume: finished cells are kept",
              file=sys.stderr)
        return 130
    except Exception as error:  # a bug: keep the traceback, ask for a report
        return _internal_error(args.command, error)


def _internal_error(command: str, error: BaseException) -> int:
    """A bug: its traceback, one line asking to report it, exit code 1."""
    import traceback

    traceback.print_exc()
    print(f"race {command}: internal error ({type(error).__name__}: "
          f"{_first_line(error)}); this is a bug in RACE, not in your input: please "
          f"report it with the traceback above", file=sys.stderr)
    return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
