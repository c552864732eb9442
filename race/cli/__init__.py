"""The ``race`` command: argv to commands, and printing; the only module that parses
``sys.argv`` (``race pilot -m`` hands it to Hydra: :mod:`race.run.pilot_command`).

Each command parses its overrides once (:class:`~race.config.Overrides`) and hands them
down. Bad input (unknown names, impossible knobs, malformed overrides: a
:class:`~race.errors.UsageError` or Hydra's own override errors) prints one line naming
the key, the value and the fix, and exits with code 2; never a traceback. Anything else
is a bug in RACE: its traceback, one line asking to report it, and exit code 1.

``race sweep`` and ``race report`` live in :mod:`race.cli.sweep_commands`;
``python -m race.cli`` runs :mod:`race.cli.__main__`.

Nothing imports it. May import: analysis, catalog, config, core, errors, integrations,
pilot, report, run, store.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
import traceback
from importlib import metadata

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

import race
from race import DISTRIBUTION
from race.cli.sweep_commands import _report, _sweep_folder, cmd_report, cmd_sweep
from race.config import Overrides, compose_config, to_specs, validate
from race.core.fmt import fmt_flops
from race.core.run_flops import cell_cards
from race.errors import UsageError
from race.pilot.loop import run_pilot
from race.pilot.problems import plan_counts
from race.report.buys import budget_buys_text
from race.report.card import cell_card_json, cell_card_text
from race.report.pilot_text import PilotProgress, pilot_summary_text
from race.report.plan import (
    cost_warning,
    eval_budget_warning,
    plan_summary,
    plan_table,
    problems_text,
)
from race.report.validation import validation_section
from race.run.bounds import cap_given, cap_warning, length_warning
from race.run.cells import warm_start_notes
from race.run.full_runs import CONFIRM_ABOVE_H, plan_validation, run_validation
from race.run.grid import plan_grid
from race.run.launch.job import use_threads
from race.run.launch.launcher_base import launcher_for, launchers
from race.run.pilot_command import (
    check_pilot,
    check_pilot_overrides,
    pilot_multirun,
    pilot_spec,
    pilot_threads,
)
from race.run.prefetch import hub_needs, plan_needs_text, prefetch
from race.store.cell import CellDir
from race.store.io import no_space
from race.store.sweep_files import SweepDir

USAGE_ERROR = 2
INTERNAL_ERROR = 1

SUBCOMMANDS = {
    "flops": "print a compute card: FLOPs per phase, shares and totals (runs nothing)",
    "plan": "expand the allocation grid and solve each cell's steps and FLOPs (runs nothing)",
    "prefetch": "download every hub model and dataset a sweep of these overrides reads into "
                "the Hugging Face cache (run it on the node that submits)",
    "sweep": f"plan, launch every pilot ({', '.join(launchers())}), wait, resume, "
             f"summarise",
    "pilot": "run one allocation cell as a budgeted GRPO pilot (pilot.fraction x budget)",
    "report": "rank regimes, fit curves, draw the frontier, write the compute card",
    "validate": "run the selected cells at the full budget (each a full run: it states "
                "the runs, FLOPs and hours first, and asks before more than 1 h unless "
                "--yes or validate.confirm=false); report predicted vs realized",
}

EPILOG = """\
overrides are Hydra-style key=value pairs, e.g.
  race flops model=qwen2.5-1.5b reward=qwen2.5-math-prm-7b grid.group_size=8 \\
             grid.max_new_tokens=512 steps=100
  race plan  budget=1e18 model=qwen2.5-0.5b,qwen2.5-1.5b reward=rule,qwen2.5-math-prm-7b
  race sweep                                  # the embedded default grid on this CPU
  race sweep budget=1e18 model=qwen2.5-0.5b,qwen2.5-1.5b launcher=slurm \\
             launcher.partition=gpu launcher.gpus_per_node=1
comma lists are sweep axes (replacing the grid's own axes, grid.axes in race/conf/grid/);
groups: model, reward, task, grid, launcher (see race/conf/); FLOPs print as 3.2e+15.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="race", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="RACE: where should RL post-training compute go? FLOP accounting "
                    "and allocation pilots for GRPO post-training.")
    parser.add_argument("--version", action="store_true",
                        help=f"print the installed {DISTRIBUTION} version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        if name in ("report", "validate"):
            cmd.add_argument("sweep_dir", metavar="SWEEP_DIR",
                             help="a sweep folder, e.g. results/arith-3.5e12-1a2b3c4d")
        if name == "validate":
            cmd.add_argument("--yes", action="store_true",
                             help="start without asking, whatever the runs cost (without a "
                                  "terminal, race validate asks for this above 1 h)")
        if name == "pilot":
            cmd.add_argument("-m", "--multirun", action="store_true",
                             help="Hydra multirun: comma lists sweep, hydra/launcher=... "
                                  "picks Hydra's launcher (e.g. submitit_slurm)")
        cmd.add_argument("overrides", nargs="*", metavar="key=value",
                         help="Hydra-style config overrides")
    return parser


def cmd_flops(overrides: Overrides) -> int:
    """``race flops``: compose the config, account one cell, print its compute card."""
    cfg = compose_config(overrides)
    specs = to_specs(cfg)
    cards = cell_cards(specs.policy, specs.reward, lora=specs.lora,
                       step_kwargs=specs.kwargs(), convention=cfg.convention,
                       steps=cfg.steps, budget_flops=cfg.budget)
    if cfg.format == "json":
        print(json.dumps(cell_card_json(cfg, specs, cards), indent=2))
    else:
        print(cell_card_text(cfg, specs, cards))
    return 0


def cmd_plan(overrides: Overrides) -> int:
    """``race plan``: expand the grid, solve each cell, print the table. Loads no weights.

    A budget list (``budget=1e12,4e12``) plans one grid (one ladder) per budget.
    """
    budgets, rest = overrides.budget_axis()
    plans = ([plan_grid(rest.with_budget(b), runnable=False) for b in budgets]
             if budgets else [plan_grid(overrides, runnable=False)])
    for plan in plans:
        if budgets:
            print(f"== budget={plan.budget_flops:.3g} ==")
        print(plan_table(plan))
        print()
        print(plan_summary(plan))
        for counts in plan_counts(c.spec for c in plan.runnable):
            print(problems_text(counts))
        buys = budget_buys_text(plan.budget_flops, [c.spec for c in plan.runnable],
                                completion_tokens=plan.base.grid.completion_tokens)
        if buys.strip():  # one line per policy size: what the same budget buys each
            print(buys)
        if cost_warning(plan):
            print(cost_warning(plan), file=sys.stderr)
        if eval_budget_warning(plan):
            print(eval_budget_warning(plan), file=sys.stderr)
        if length_warning(plan):
            print(length_warning(plan), file=sys.stderr)
        needs = plan_needs_text(hub_needs(c.spec for c in plan.runnable))
        if needs:
            print(needs, file=sys.stderr)
        if budgets:
            print()
    for note in warm_start_notes(c.spec for plan in plans for c in plan.runnable):
        print(f"race plan: {note}", file=sys.stderr)
    return 0


def cmd_prefetch(overrides: Overrides) -> int:
    """``race prefetch``: plan like ``race plan``, then download what its cells read from
    the hub (policies, reward models, datasets) into the Hugging Face cache."""
    budgets, rest = overrides.budget_axis()
    plans = ([plan_grid(rest.with_budget(b), runnable=False) for b in budgets]
             if budgets else [plan_grid(overrides, runnable=False)])
    needs = hub_needs(c.spec for plan in plans for c in plan.runnable)
    if not needs:
        print("race prefetch: nothing to fetch (no hub model or dataset in this plan)")
        return 0
    for need, folder in prefetch(needs, report=lambda line: print(line, file=sys.stderr)):
        print(f"{need.label}: {folder}")
    print(f"race prefetch: {len(needs)} repo(s) in the Hugging Face cache; `race sweep` with "
          f"the same overrides reads them offline (HF_HUB_OFFLINE=1 on the compute nodes)")
    return 0


def cmd_validate(sweep_dir: str, overrides: Overrides, yes: bool = False) -> int:
    """``race validate SWEEP_DIR``: the selected cells at the full budget, then compare.
    Its first line states the runs, FLOPs and hours; above 1 h it asks (y/N on a
    terminal; elsewhere exit 2 unless ``--yes`` or ``validate.confirm=false``)."""
    folder = _sweep_folder(sweep_dir)
    cfg = compose_config(overrides)
    validate(cfg)
    launcher_for(cfg.launcher.name).check(cfg.launcher)  # e.g. SLURM against sinfo
    if not SweepDir(folder).selection.is_file():
        _report(folder, cfg)
    plan = plan_validation(folder, cfg, top_k=cfg.validate.top_k)
    print(f"race validate: {plan.cost}", file=sys.stderr, flush=True)
    if not yes and plan.needs_confirmation(cfg.validate.confirm):
        if not sys.stdin.isatty():
            raise UsageError(f"more than {CONFIRM_ABOVE_H:g} h of full-budget runs (or hours "
                             f"unknown) and no terminal to ask: rerun with --yes, or "
                             f"validate.confirm=false, to start them")
        if not _confirmed("race validate: start them? [y/N] "):
            print("race validate: not started", file=sys.stderr)
            return 1
    comparison = run_validation(folder, cfg, plan=plan)
    print(validation_section(folder, comparison))
    for row in comparison["failed"]:
        print(f"failed {row['cell_id']}: {row['error']}", file=sys.stderr)
    return 0 if not comparison["failed"] else 1


def _confirmed(question: str) -> bool:
    """A y/N answer on the terminal: yes only for y or yes; end of input (Ctrl-D) is no."""
    try:
        answer = input(question)
    except EOFError:
        print(file=sys.stderr)  # the prompt's line ends where the terminal left it
        return False
    return answer.strip().lower() in ("y", "yes")


# What to do when a command cannot write a file: the key that moves what it writes
RESULTS_FIX = ("make the sweep folder writable, or copy it to a writable place and run "
               "the command on the copy")
WRITE_FIXES = {
    "sweep": "make it writable, or write the results elsewhere with sweep.out_dir=<folder>",
    "pilot": "make it writable, or write the cell elsewhere with pilot.out_dir=<folder>",
    "report": RESULTS_FIX, "validate": RESULTS_FIX,
    "plan": "make it writable", "flops": "make it writable",
    "prefetch": "make the Hugging Face cache writable, or point HF_HOME at a writable folder",
}

# Fixes appended to Hydra's own messages, matched on their first words.
HYDRA_HINTS = {
    "Could not override": "check the key against race/conf/ (e.g. grid.group_size, budget)",
    "Error merging override": "give the key a value of its schema type",
    "Ambiguous value": "this command takes one value per key; comma lists are sweep "
                       "axes for `race sweep`",
    "no viable alternative": "write overrides as key=value (Hydra override grammar)",
}


def _first_line(error: BaseException) -> str:
    text = str(error).strip().strip("'\"")
    return next((line.strip() for line in text.splitlines() if line.strip()), repr(error))


def cmd_pilot(overrides: Overrides) -> int:
    """``race pilot``: run one cell at ``pilot.fraction x budget`` and print its summary."""
    check_pilot_overrides(overrides)  # launcher.*: what it reads, the rest refused
    cfg = compose_config(overrides)
    spec = pilot_spec(cfg)
    check_pilot(cfg, spec)  # what race sweep checks, before any model loads or file is written
    cell_dir = CellDir.of(cfg.pilot.out_dir, spec.cell_id).path
    print(f"race pilot: {spec.model} x {dict(spec.reward)['name']}, G={spec.group_size}, "
          f"mu={spec.update_epochs}, pilot budget {fmt_flops(spec.budget_flops)} FLOPs "
          f"({spec.convention}) -> {cell_dir}", file=sys.stderr)
    threads, why = pilot_threads(cfg)
    use_threads(threads)
    print(f"race pilot: {threads} torch thread(s) ({why})", file=sys.stderr)
    if warning := cap_warning(cfg.task, [(spec.max_new_tokens, spec.model,
                                          cap_given(overrides))]):
        print(f"race pilot: {warning}", file=sys.stderr)
    summary = run_pilot(spec, cell_dir, progress=PilotProgress(spec.budget_flops))
    print(file=sys.stderr)
    print(pilot_summary_text(summary))
    print(f"results    {cell_dir}")
    return 0 if summary["status"] == "ok" else 1


def _one_line(error: BaseException) -> str:
    """Hydra's message, its cause, and the fix, on one line."""
    line = _first_line(error)
    if line.startswith("LexerNoViableAltException: "):  # Hydra's lexer on an override
        # the whole override (the message's first line stops at a newline in it)
        key, _, value = getattr(error, "override", line.split(": ", 1)[1]).partition("=")
        if not value.isprintable():  # a newline, a tab: no folder or value should hold one
            return (f"{key}={value!r}: holds a control character "
                    f"({', '.join(sorted({repr(c) for c in value if not c.isprintable()}))}); "
                    f"give the value on one line without it, e.g. "
                    f"{key}={''.join(c for c in value if c.isprintable())}")
        return (f"{key}={value}: Hydra cannot read this value unquoted (it holds a character "
                f"outside its unquoted grammar, e.g. a non-ASCII letter); quote the value as "
                f"Hydra documents, e.g. \"{key}='{value}'\" in the shell")
    if error.__cause__ is not None:
        line = f"{line.rstrip('.')}: {_first_line(error.__cause__)}"
    hint = next((fix for start, fix in HYDRA_HINTS.items() if line.startswith(start)), "")
    return f"{line}; {hint}" if hint else line


def version_line() -> str:
    """``race --version``: the distribution's name and its installed version."""
    try:
        return f"{DISTRIBUTION} {race.__version__}"
    except metadata.PackageNotFoundError:  # a source tree pip has not installed
        return f"{DISTRIBUTION} (not installed; pip install -e . in the source tree)"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.version:
        print(version_line())
        return 0
    if args.command is None:
        _parser().print_help()
        return USAGE_ERROR
    commands = {"flops": cmd_flops, "pilot": cmd_pilot, "plan": cmd_plan, "sweep": cmd_sweep,
                "prefetch": cmd_prefetch}
    try:
        overrides = Overrides(args.overrides)  # parsed once; malformed: Hydra's error
        if args.command in ("report", "validate"):
            if args.command == "validate":
                return cmd_validate(args.sweep_dir, overrides, yes=args.yes)
            return cmd_report(args.sweep_dir, overrides)
        if args.command == "pilot" and args.multirun:
            return pilot_multirun(overrides)
        return commands[args.command](overrides)
    except (UsageError, HydraException, OmegaConfBaseException) as error:
        print(f"race {args.command}: {_one_line(error)}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as error:
        full = no_space(error, error.filename or ".")
        if full is not None:  # a disk filled (results, submitit's logs)
            print(f"race {args.command}: {full}", file=sys.stderr)
            return USAGE_ERROR
        if error.errno in (errno.EACCES, errno.EROFS, errno.EPERM) and error.filename:
            print(f"race {args.command}: cannot write {error.filename} ({error.strerror}); "
                  f"{WRITE_FIXES[args.command]}", file=sys.stderr)
            return USAGE_ERROR
        if error.errno == errno.ENAMETOOLONG and error.filename:
            print(f"race {args.command}: a path is too long for this file system "
                  f"({str(error.filename)[:60]}...); shorten sweep.name or sweep.out_dir",
                  file=sys.stderr)
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
    traceback.print_exc()
    print(f"race {command}: internal error ({type(error).__name__}: "
          f"{_first_line(error)}); this is a bug in RACE, not in your input: please "
          f"report it with the traceback above", file=sys.stderr)
    return INTERNAL_ERROR


