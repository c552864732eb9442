"""Validation of a composed config: every problem at once, each one line naming the key,
its value, the rule broken and the fix (:class:`~race.errors.UsageError`). The checks
of this machine a run needs are in :mod:`race.config.machine`.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
from pathlib import Path, PurePath
from typing import Any

from race import DISTRIBUTION, catalog
from race.config.schema import (
    ACCOUNTED_REWARD_KINDS,
    RaceConfig,
    SelectionConfig,
    SweepConfig,
)
from race.config.task_fields import task_entry
from race.core.flops import minibatch_problem
from race.core.knobs import config_values, knob_problems
from race.core.rungs import KEEP_SIZES, PROMOTE_BY
from race.core.specs import HEADS, TRACKERS, RunSpec
from race.core.stats import BASES
from race.errors import UsageError
from race.rewards import REWARD_KINDS as BUILT_REWARDS
from race.rewards.rule import CHECKS
from race.tasks import task_targets
from race.tasks.arith import ArithTask
from race.tasks.math import eval_entries
from race.tasks.reasoning_gym import as_text, config_problems

# seeds torch.manual_seed takes as given (a negative one is folded onto these)
SEED_LIMIT = 2 ** 64


def _finite_problems(cfg: RaceConfig, knob_values: dict[str, Any]) -> list[str]:
    """Every float field that is NaN or infinite (``budget=1e400`` overflows to inf): the
    float cell knobs (``knob_values``, config key -> value) and the run's own."""
    fields = {"budget": cfg.budget, "pilot.fraction": cfg.pilot.fraction,
              "report.level": cfg.report.level, "launcher.poll_s": cfg.launcher.poll_s,
              "launcher.lost_after_s": cfg.launcher.lost_after_s,
              "selection.share": cfg.selection.share, "selection.z": cfg.selection.z,
              "selection.pilot_budget": cfg.selection.pilot_budget}
    fields |= knob_values
    fields |= {f"selection.rungs[{i}]": v for i, v in enumerate(cfg.selection.rungs)}
    fields |= {f"selection.rung_checkpoints[{i}]": v
               for i, v in enumerate(cfg.selection.rung_checkpoints)}
    fields |= {f"pilot.checkpoints[{i}]": v for i, v in enumerate(cfg.pilot.checkpoints)}
    return [f"{key}={value}: "
            + ("not a number" if math.isnan(value) else
               "not finite (a value beyond 1.8e308, such as 1e400, overflows to inf)")
            + f"; give a finite number, e.g. {EXAMPLES.get(key, key + '=1')}"
            for key, value in fields.items()
            if isinstance(value, float) and not math.isfinite(value)]


# examples in messages about a key's value
EXAMPLES = {"budget": "budget=1e15", "grid.lr": "grid.lr=5e-5", "grid.kl_coef": "grid.kl_coef=0",
            "pilot.fraction": "pilot.fraction=0.0625", "pilot.temperature":
            "pilot.temperature=1.0", "pilot.clip_eps": "pilot.clip_eps=0.2",
            "report.level": "report.level=0.9"}


def selection_problems(selection: SelectionConfig) -> list[str]:
    """What is wrong with ``selection.*`` (the ladder is planned from it before any cell
    is composed), one message per problem."""
    problems = []
    if selection.policy not in ("ladder", "flat"):
        problems.append(f"selection.policy={selection.policy!r}: use selection.policy=ladder "
                        f"or selection.policy=flat")
    rungs = list(selection.rungs)
    if not rungs or rungs != sorted(set(rungs)) or not 0 < rungs[0] or rungs[-1] >= 1:
        problems.append(f"selection.rungs={rungs}: need ascending, distinct fractions of "
                        f"the full budget in (0, 1), e.g. selection.rungs=[0.015625,0.0625,0.25]")
    within = list(selection.rung_checkpoints)
    if not within or within != sorted(set(within)) or not 0 < within[0] or within[-1] != 1:
        problems.append(f"selection.rung_checkpoints={within}: need ascending, distinct "
                        f"fractions of a rung's budget in (0, 1] ending at 1 (the rung's end, "
                        f"which promotions read), e.g. selection.rung_checkpoints=[1.0]")
    if selection.reduction < 2:
        problems.append(f"selection.reduction={selection.reduction}: must be >= 2 (each rung "
                        f"keeps 1/reduction of the configs)")
    if not selection.share > 0:
        problems.append(f"selection.share={selection.share}: must be > 0 (the ladder's pilot "
                        f"compute as a share of one full run, e.g. 1.0)")
    if not selection.pilot_budget > 0:
        problems.append(f"selection.pilot_budget={selection.pilot_budget}: must be > 0 (the "
                        f"pilots' compute with their evaluation as a share of one full run, "
                        f"e.g. selection.pilot_budget=1.0)")
    if selection.z < 0:
        problems.append(f"selection.z={selection.z}: must be >= 0")
    if not (isinstance(selection.replicates, int) and selection.replicates >= 1):
        problems.append(f"selection.replicates={selection.replicates}: must be an integer "
                        f">= 1 (seeds each config of the last rung is read on, e.g. "
                        f"selection.replicates=2)")
    elif selection.replicates != 1 and selection.policy == "flat":
        seeds = ",".join(str(s) for s in range(selection.replicates))
        problems.append(f"selection.replicates={selection.replicates}: reads a ladder's last "
                        f"rung on more seeds, and selection.policy=flat has no rungs (it "
                        f"would be ignored); give the seeds as an axis, pilot.seed={seeds}, "
                        f"or use selection.policy=ladder")
    if selection.promote_by not in PROMOTE_BY:
        problems.append(f"selection.promote_by={selection.promote_by!r}: use "
                        + " or ".join(f"selection.promote_by={k}" for k in PROMOTE_BY))
    if selection.keep_sizes not in KEEP_SIZES:
        problems.append(f"selection.keep_sizes={selection.keep_sizes!r}: use "
                        + " or ".join(f"selection.keep_sizes={k}" for k in KEEP_SIZES))
    g = selection.guards
    for key in ("floor", "z", "reward_rise", "entropy_floor", "max_truncation"):
        if not getattr(g, key) >= 0:
            problems.append(f"selection.guards.{key}={getattr(g, key)}: must be >= 0")
    if g.window < 1:
        problems.append(f"selection.guards.window={g.window}: must be >= 1")
    return problems


def testbed_problems(cfg: RaceConfig) -> list[str]:
    """What is wrong with the task's knobs (the embedded task's, a reasoning-gym
    generator's), the warm start and the learning rule."""
    problems = []
    if cfg.task.name == "arith":
        entry = task_entry(cfg.task)
        entry.pop("name")
        try:
            ArithTask(**entry)
        except UsageError as error:
            problems.append(str(error))
    if cfg.task.name == "reasoning-gym":
        problems += config_problems(cfg.task.dataset, cfg.task.config, cfg.task.ood_config)
    if cfg.reward.check not in CHECKS:
        problems.append(f"reward.check={cfg.reward.check!r}: use one of {list(CHECKS)}")
    elif cfg.reward.check != "answer" and cfg.task.name != "arith":
        problems.append(f"reward.check={cfg.reward.check}: checks the embedded task's steps "
                        f"and form; task={cfg.task.name} has neither, so use reward=rule")
    warm = cfg.warmstart
    if warm.steps < 1 or warm.batch_size < 1:
        problems.append(f"warmstart.steps={warm.steps}, warmstart.batch_size="
                        f"{warm.batch_size}: must be >= 1")
    if not warm.lr > 0:
        problems.append(f"warmstart.lr={warm.lr}: must be > 0, e.g. warmstart.lr=3e-3")
    if not 0 <= warm.flip <= 1:
        problems.append(f"warmstart.flip={warm.flip}: a share of the demonstrations' "
                        f"subtraction steps, in [0, 1] (0: clean demonstrations)")
    if not 0 <= warm.seed < SEED_LIMIT:
        problems.append(f"warmstart.seed={warm.seed}: the warm start seeds torch's "
                        f"generator with it, which takes 0 to 2**64 - 1 ({SEED_LIMIT - 1}); "
                        f"use a seed in that range, e.g. warmstart.seed=1")
    return problems


def validate(cfg: RaceConfig) -> None:
    """Check the whole config and raise one UsageError listing every problem."""
    knob_values = config_values(RunSpec, cfg)
    problems = _finite_problems(cfg, knob_values)
    broken = {p.split("=", 1)[0] for p in problems}
    grid, task = cfg.grid, cfg.task
    # every cell knob's own rule, as RunSpec declares it (race.core.knobs)
    problems += knob_problems(RunSpec, knob_values, skip=broken)
    for key, value in (("task.prompt_tokens", task.prompt_tokens),
                       ("task.completion_tokens", task.completion_tokens)):
        if value < 1:
            problems.append(f"{key}={value}: must be >= 1")
    if grid.completion_tokens is not None and grid.completion_tokens < 1:
        problems.append(f"grid.completion_tokens={grid.completion_tokens}: must be >= 1 "
                        f"(or null for the task's mean)")
    if isinstance(grid.prompts_per_step, int) and isinstance(grid.group_size, int) and \
            grid.prompts_per_step >= 1 and grid.group_size >= 1:
        minibatch = minibatch_problem(grid.minibatch_size, grid.prompts_per_step,
                                      grid.group_size)
        problems += [minibatch] if minibatch else []
    if cfg.reward.overhead_tokens < 0 or cfg.reward.max_steps < 0:
        problems.append(f"reward.overhead_tokens={cfg.reward.overhead_tokens}, "
                        f"reward.max_steps={cfg.reward.max_steps}: must be >= 0")
    if cfg.reward.kind not in ACCOUNTED_REWARD_KINDS:
        problems.append(f"reward.kind={cfg.reward.kind!r}: use one of "
                        f"{list(ACCOUNTED_REWARD_KINDS)}")
    elif cfg.reward.kind != "rule" and not cfg.reward.model:
        problems.append(f"reward.model=null: reward.kind={cfg.reward.kind} needs a model "
                        f"name under race/conf/model/, e.g. reward.model=qwen2.5-math-prm-7b")
    if cfg.format not in ("text", "json"):
        problems.append(f"format={cfg.format!r}: use format=text or format=json")
    if cfg.budget is not None and "budget" not in broken and cfg.budget <= 0:
        problems.append(f"budget={cfg.budget:.3g}: must be > 0 FLOPs; use e.g. budget=1e15")
    if cfg.steps is not None and cfg.steps < 1:
        problems.append(f"steps={cfg.steps}: must be >= 1")
    pilot = cfg.pilot
    if "pilot.fraction" not in broken and not 0 < pilot.fraction <= 1:
        problems.append(f"pilot.fraction={pilot.fraction}: must be in (0, 1]; e.g. 0.0625")
    if pilot.tis_cap < 0 or (pilot.tis_cap > 0 and pilot.backend != "vllm"):
        problems.append(f"pilot.tis_cap={pilot.tis_cap}: must be >= 0, and corrects vLLM "
                        f"rollouts only; use pilot.backend=vllm or pilot.tis_cap=0")
    launcher = cfg.launcher
    # the launchers are the YAMLs of race/conf/launcher/ (each one's module registers itself in
    # the run layer's registry, which tests/test_launch.py holds to the same names)
    known = catalog.names("launcher")
    if launcher.name not in known:
        problems.append(f"launcher.name={launcher.name!r}: use launcher="
                        f"{', '.join(known[:-1])} or {known[-1]}")
    for key in ("cpus_per_task", "mem_gb", "timeout_min", "array_parallelism"):
        if getattr(launcher, key) is not None and getattr(launcher, key) < 1:
            problems.append(f"launcher.{key}={getattr(launcher, key)}: must be >= 1")
    if launcher.slots < 0:
        problems.append(f"launcher.slots={launcher.slots}: must be >= 0 (0: one per core)")
    problems += selection_problems(cfg.selection)
    problems += testbed_problems(cfg)
    if cfg.report.basis not in BASES:
        problems.append(f"report.basis={cfg.report.basis!r}: use observed or extrapolated")
    problems += tracker_problems(cfg.report.tracker)
    problems += [p for p in schema_problems(cfg) if p.split("=", 1)[0] not in broken]
    if problems:
        raise UsageError("; ".join(problems))


def tracker_problems(tracker: str) -> list[str]:
    """``report.tracker`` names a known tracker whose package is importable (found, never
    imported: the trackers' packages are heavy)."""
    if tracker not in TRACKERS:
        close = difflib.get_close_matches(tracker, list(TRACKERS), n=1, cutoff=0.4)
        hint = f"; did you mean report.tracker={close[0]}?" if close else ""
        return [f"report.tracker={tracker!r}: use one of {'|'.join(TRACKERS)}{hint}"]
    package = TRACKERS[tracker]
    if package and importlib.util.find_spec(package) is None:
        return [f"report.tracker={tracker}: the {package} package is not installed; "
                f"pip install '{DISTRIBUTION}[{tracker}]', or use report.tracker=none"]
    return []


def schema_problems(cfg: RaceConfig) -> list[str]:
    """The rules of the keys :func:`validate`'s older checks leave out, one message per
    problem (key, value, rule, fix). With those, every key whose value can be wrong has a
    rule (free text such as ``task.system_prompt`` has none; paths are opened by
    :mod:`race.preflight`), so ``race plan`` and ``race sweep`` refuse bad values before
    anything runs. A key added to the schema gets its rule here."""
    problems = []

    def need(ok: bool, key: str, value, rule: str) -> None:
        if not ok:
            problems.append(f"{key}={value}: {rule}")

    model = cfg.model
    for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                "num_kv_heads", "vocab_size", "num_labels"):
        value = getattr(model, key)
        need(isinstance(value, int) and value >= 1, f"model.{key}", value, "must be >= 1")
    need(model.head_dim >= 0, "model.head_dim", model.head_dim,
         "must be >= 0 (0: hidden_size // num_heads)")
    need(model.head in HEADS, "model.head", repr(model.head), f"use one of {'|'.join(HEADS)}")
    reward = cfg.reward
    need(reward.aggregate in ("min", "prod", "last"), "reward.aggregate",
         repr(reward.aggregate), "use one of min|prod|last")
    need(reward.tag_tokens_per_step >= 0, "reward.tag_tokens_per_step",
         reward.tag_tokens_per_step, "must be >= 0")
    need(cfg.task.steps_per_trace >= 0, "task.steps_per_trace", cfg.task.steps_per_trace,
         "must be >= 0")
    pilot = cfg.pilot
    need(pilot.max_steps >= 1, "pilot.max_steps", pilot.max_steps, "must be >= 1")
    need(pilot.max_hours > 0, "pilot.max_hours", pilot.max_hours, "must be > 0 hours")
    if cfg.task.eval and cfg.task.name != "math":
        problems.append(eval_elsewhere_problem(cfg))
    if cfg.task.name == "math":
        try:  # task.eval.<name>: names and entries (every problem at once, as below)
            eval_entries(as_text(cfg.task.eval) if cfg.task.eval else "",
                         has_source=bool(cfg.task.source))
        except UsageError as error:
            return problems + [str(error)]
    has = task_targets(task_entry(cfg.task))
    problems += eval_target_problems(cfg, has)
    need(pilot.select_target in (*has, "val", "test", "ood"), "pilot.select_target",
         pilot.select_target, f"use one of the task's targets [{','.join(has)}]: val "
         f"(selection reads a held-out split; never select on test), or a named "
         f"evaluation target (task.eval.<name>)")
    for key, value in (("regime.feedback_heavy", cfg.regime.feedback_heavy),
                       ("regime.learning_heavy", cfg.regime.learning_heavy),
                       ("regime.search_heavy", cfg.regime.search_heavy)):
        need(0 <= value <= 1, key, value, "a FLOP share: must be in [0, 1]")
    launcher = cfg.launcher
    gpus = list(launcher.gpus)
    need(all(isinstance(g, int) and g >= 0 for g in gpus) and len(set(gpus)) == len(gpus),
         "launcher.gpus", gpus, "need distinct GPU indices >= 0, e.g. launcher.gpus=[0,1]")
    for key in ("threads_per_pilot", "gpus_per_node", "signal_delay_s", "max_requeues",
                "checkpoint_every"):
        value = getattr(launcher, key)
        need(value >= 0, f"launcher.{key}", value, "must be >= 0")
    need(launcher.gpu_mem_gb is None or launcher.gpu_mem_gb > 0, "launcher.gpu_mem_gb",
         launcher.gpu_mem_gb, "must be > 0 GiB (null: no check)")
    need(launcher.poll_s > 0, "launcher.poll_s", launcher.poll_s,
         "seconds between polls: must be > 0, e.g. launcher.poll_s=2")
    need(launcher.lost_after_s > 0, "launcher.lost_after_s", launcher.lost_after_s,
         "must be > 0 seconds, e.g. launcher.lost_after_s=60")
    report = cfg.report
    need(report.n_boot >= 1, "report.n_boot", report.n_boot,
         "bootstrap resamples: must be >= 1, e.g. report.n_boot=1000")
    need(0 < report.level < 1, "report.level", report.level,
         "an interval's coverage: must be in (0, 1), e.g. report.level=0.9")
    need(report.top_k >= 1, "report.top_k", report.top_k,
         "select at least 1 config for validation")
    need(cfg.validate.top_k is None or cfg.validate.top_k >= 1, "validate.top_k",
         cfg.validate.top_k, "must be >= 1 (null: every selected config)")
    need(cfg.validate.select_examples >= 1, "validate.select_examples",
         cfg.validate.select_examples, "must be >= 1, e.g. validate.select_examples=1000")
    problems += sweep_name_problems(cfg.sweep)
    return problems


def eval_elsewhere_problem(cfg: RaceConfig) -> str:
    """``task.eval`` given to a task that reads no named targets (only task=math does):
    refused, rather than planned and run without them."""
    name, value = next(iter(cfg.task.eval.items()))
    if isinstance(value, dict):  # as Hydra's override grammar writes it
        value = "{" + ",".join(f"{k}:{v}" for k, v in value.items()) + "}"
    given = f"task.eval.{name}={value}"
    has = ",".join(task_targets(task_entry(cfg.task)))
    return (f"{given}: named evaluation targets are read by task=math only; "
            f"task={cfg.task.name} evaluates on its own targets [{has}] and would ignore "
            f"it; drop task.eval.{name}, or use task=math with your training rows "
            f"(task.source=<file>; GSM8K's layout reads too) and {given}")


def eval_target_problems(cfg: RaceConfig, has: tuple[str, ...]) -> list[str]:
    """What is wrong with ``pilot.eval_targets`` (null: every target the task ``has``)."""
    if cfg.pilot.eval_targets is None:
        return []
    problems = []
    targets = list(cfg.pilot.eval_targets)
    shown = f"[{','.join(map(str, targets))}]"
    unknown = [t for t in targets if t not in (*has, "val", "test", "ood")]
    if not targets:
        problems.append(f"pilot.eval_targets=[]: evaluate at least one target, e.g. "
                        f"pilot.eval_targets=[{','.join(has)}], or null for all the "
                        f"task's targets")
    elif unknown:
        problems.append(f"pilot.eval_targets={shown}: unknown target(s) {unknown}; use "
                        f"some of [{','.join(has)}] (held-out splits of task="
                        f"{cfg.task.name}), or null for all of them")
    elif len(set(targets)) < len(targets):
        problems.append(f"pilot.eval_targets={shown}: a target listed twice; list each "
                        f"once")
    elif "ood" in targets and "ood" not in has:
        give = ("task.ood_config.<knob>=<harder value>" if cfg.task.name ==
                "reasoning-gym" else "task.ood_source=<a GSM8K-format file>")
        why = ("its generator has no harder setting" if cfg.task.name == "reasoning-gym"
               else "task.ood_source is unset")
        problems.append(f"pilot.eval_targets={shown}: task={cfg.task.name} has no ood "
                        f"problems ({why}); give {give}, or drop ood, e.g. "
                        f"pilot.eval_targets=[{','.join(t for t in targets if t != 'ood')}]")
    return problems


# the longest folder name sweep.name may give (bytes; most file systems stop at 255)
MAX_NAME_BYTES = 200


def sweep_name_problems(sweep: SweepConfig) -> list[str]:
    """``sweep.name`` must name a folder inside ``sweep.out_dir`` (no ``..``, no absolute
    path, no part over :data:`MAX_NAME_BYTES`): a sweep never writes outside its results
    folder. ``sweep.out_dir`` must be (or lead to) a folder, not a file."""
    problems = []
    existing = next((p for p in (Path(sweep.out_dir).expanduser(),
                                 *Path(sweep.out_dir).expanduser().parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        problems.append(f"sweep.out_dir={sweep.out_dir}: {existing} is a file, not a folder; "
                        f"give a folder for the results, e.g. sweep.out_dir=results")
    name = sweep.name
    if name is None:
        return problems
    parts = PurePath(name).parts
    if not name.strip() or PurePath(name).is_absolute() or ".." in parts or name in (".",):
        problems.append(f"sweep.name={name}: must name a folder inside sweep.out_dir="
                        f"{sweep.out_dir} (no '..', no absolute path); e.g. "
                        f"sweep.name=my-sweep, or set sweep.out_dir to write elsewhere")
    elif not name.isprintable():  # a quoted newline or tab: a folder name nobody can type
        problems.append(f"sweep.name={name!r}: holds a control character "
                        f"({', '.join(sorted({repr(c) for c in name if not c.isprintable()}))})"
                        f"; give a name on one line without it, e.g. "
                        f"sweep.name={''.join(c for c in name if c.isprintable())}")
    elif any(len(part.encode()) > MAX_NAME_BYTES for part in parts):
        problems.append(f"sweep.name={name[:40]}...: {len(name.encode())} bytes, past the "
                        f"{MAX_NAME_BYTES} a folder name may have here (file systems allow "
                        f"255, and a budget list adds a subfolder); give a shorter name")
    return problems


def check_reward_built(cfg: RaceConfig) -> None:
    """A reward kind the accounting knows but no pilot can run: UsageError (checked before
    the rest of the cell, so that this is what a user hears first)."""
    if cfg.reward.kind not in BUILT_REWARDS:
        raise UsageError(f"reward.kind={cfg.reward.kind!r}: no {cfg.reward.kind} reward is "
                         f"built in this version, so no pilot can run it (race flops and "
                         f"race plan account for it); use reward.kind=rule or prm")
