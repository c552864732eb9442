"""Validation of a composed config: every problem at once, each one line naming the key,
its value, the rule broken and the fix (:class:`~race.errors.UsageError`); and the
checks of this machine a run needs (paths, a CUDA device, the named GPUs).

torch is imported only by the device checks, and only when a GPU is named.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
from pathlib import Path, PurePath

from race import catalog
from race.config.schema import (
    ACCOUNTED_REWARD_KINDS,
    LAUNCHERS,
    RaceConfig,
    SelectionConfig,
    SweepConfig,
    task_entry,
)
from race.core.flops import CONVENTIONS
from race.core.ladder import KEEP_SIZES, PROMOTE_BY
from race.core.specs import AGGREGATIONS, HEADS, TRACKERS
from race.core.stats import BASES
from race.errors import UsageError
from race.nn.devices import DEVICES, DTYPES, resolve_device, visible_gpus
from race.rewards import REWARD_KINDS as BUILT_REWARDS
from race.rewards.rule import CHECKS
from race.tasks import task_targets
from race.tasks.arith import ArithTask
from race.tasks.base import is_local
from race.tasks.math import eval_entries
from race.tasks.reasoning_gym import as_text, config_problems


def _finite_problems(cfg: RaceConfig) -> list[str]:
    """Every float field that is NaN or infinite (``budget=1e400`` overflows to inf)."""
    fields = {"budget": cfg.budget, "grid.lr": cfg.grid.lr, "grid.kl_coef": cfg.grid.kl_coef,
              "pilot.fraction": cfg.pilot.fraction,
              "pilot.temperature": cfg.pilot.temperature,
              "pilot.clip_eps": cfg.pilot.clip_eps, "report.level": cfg.report.level,
              "launcher.poll_s": cfg.launcher.poll_s,
              "launcher.lost_after_s": cfg.launcher.lost_after_s,
              "selection.share": cfg.selection.share, "selection.z": cfg.selection.z,
              "selection.pilot_budget": cfg.selection.pilot_budget}
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
    if cfg.grid.aggregation not in AGGREGATIONS:
        problems.append(f"grid.aggregation={cfg.grid.aggregation!r}: use one of "
                        f"{list(AGGREGATIONS)}")
    return problems


def validate(cfg: RaceConfig) -> None:
    """Check the whole config and raise one UsageError listing every problem."""
    problems = _finite_problems(cfg)
    broken = {p.split("=", 1)[0] for p in problems}
    grid, task = cfg.grid, cfg.task
    if grid.group_size < 2:
        problems.append(f"grid.group_size={grid.group_size}: GRPO needs >= 2 samples per "
                        f"prompt for a group baseline; use e.g. grid.group_size=8")
    for key, value in (("grid.prompts_per_step", grid.prompts_per_step),
                       ("grid.max_new_tokens", grid.max_new_tokens),
                       ("grid.update_epochs", grid.update_epochs),
                       ("task.prompt_tokens", task.prompt_tokens),
                       ("task.completion_tokens", task.completion_tokens)):
        if value < 1:
            problems.append(f"{key}={value}: must be >= 1")
    if grid.completion_tokens is not None and grid.completion_tokens < 1:
        problems.append(f"grid.completion_tokens={grid.completion_tokens}: must be >= 1 "
                        f"(or null for the task's mean)")
    rows = grid.prompts_per_step * grid.group_size
    if grid.minibatch_size is not None and (grid.minibatch_size < 1 or rows % grid.minibatch_size):
        problems.append(f"grid.minibatch_size={grid.minibatch_size}: must divide the rollout "
                        f"batch prompts_per_step x group_size = {rows}")
    if grid.micro_batch_size < 0:
        problems.append(f"grid.micro_batch_size={grid.micro_batch_size}: must be >= 0 (0: "
                        f"each minibatch in one pass)")
    if "grid.lr" not in broken and not grid.lr > 0:
        problems.append(f"grid.lr={grid.lr}: the learning rate must be a positive number; "
                        f"use e.g. grid.lr=5e-5")
    if grid.lora_rank < 0:
        problems.append(f"grid.lora_rank={grid.lora_rank}: must be >= 0 (0: full fine-tuning)")
    if grid.kl_coef < 0:
        problems.append(f"grid.kl_coef={grid.kl_coef}: must be >= 0")
    if cfg.reward.overhead_tokens < 0 or cfg.reward.max_steps < 0:
        problems.append(f"reward.overhead_tokens={cfg.reward.overhead_tokens}, "
                        f"reward.max_steps={cfg.reward.max_steps}: must be >= 0")
    if cfg.reward.kind not in ACCOUNTED_REWARD_KINDS:
        problems.append(f"reward.kind={cfg.reward.kind!r}: use one of "
                        f"{list(ACCOUNTED_REWARD_KINDS)}")
    elif cfg.reward.kind != "rule" and not cfg.reward.model:
        problems.append(f"reward.model=null: reward.kind={cfg.reward.kind} needs a model "
                        f"name under conf/model/, e.g. reward.model=qwen2.5-math-prm-7b")
    if cfg.convention not in CONVENTIONS:
        problems.append(f"convention={cfg.convention!r}: use one of {list(CONVENTIONS)}")
    if cfg.format not in ("text", "json"):
        problems.append(f"format={cfg.format!r}: use format=text or format=json")
    if cfg.budget is not None and "budget" not in broken and cfg.budget <= 0:
        problems.append(f"budget={cfg.budget:.3g}: must be > 0 FLOPs; use e.g. budget=1e15")
    if cfg.steps is not None and cfg.steps < 1:
        problems.append(f"steps={cfg.steps}: must be >= 1")
    pilot = cfg.pilot
    if "pilot.fraction" not in broken and not 0 < pilot.fraction <= 1:
        problems.append(f"pilot.fraction={pilot.fraction}: must be in (0, 1]; e.g. 0.0625")
    if pilot.backend not in ("hf", "vllm"):
        problems.append(f"pilot.backend={pilot.backend!r}: use pilot.backend=hf or vllm")
    if pilot.eval_examples < 1 or pilot.select_examples < 1:
        problems.append(f"pilot.eval_examples={pilot.eval_examples}, pilot.select_examples="
                        f"{pilot.select_examples}: must be >= 1")
    if pilot.temperature <= 0:
        problems.append(f"pilot.temperature={pilot.temperature}: must be > 0")
    if pilot.tis_cap < 0 or (pilot.tis_cap > 0 and pilot.backend != "vllm"):
        problems.append(f"pilot.tis_cap={pilot.tis_cap}: must be >= 0, and corrects vLLM "
                        f"rollouts only; use pilot.backend=vllm or pilot.tis_cap=0")
    share = pilot.gpu_memory_utilization
    if share is not None and not 0 < share <= 1:
        problems.append(f"pilot.gpu_memory_utilization={share}: vLLM's share of the GPU must "
                        f"be in (0, 1], e.g. 0.4 (null: derived from the memory plan)")
    for key, value, choices in (("pilot.device", pilot.device, DEVICES),
                                ("pilot.dtype", pilot.dtype, DTYPES)):
        if value not in choices:
            problems.append(f"{key}={value!r}: use one of {'|'.join(choices)}")
    peak = cfg.accounting.peak_flops
    if peak is not None and peak <= 0:
        problems.append(f"accounting.peak_flops={peak}: must be > 0 FLOP/s (null: measure "
                        f"it), e.g. accounting.peak_flops=989e12 for an H100's dense bf16")
    launcher = cfg.launcher
    if launcher.name not in LAUNCHERS:
        problems.append(f"launcher.name={launcher.name!r}: use launcher=local, slurm or inline")
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
                f"pip install 'race[{tracker}]', or use report.tracker=none"]
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
    grid = cfg.grid
    need(grid.lora_alpha > 0, "grid.lora_alpha", grid.lora_alpha, "must be > 0, e.g. 32")
    need(bool(grid.lora_targets), "grid.lora_targets", list(grid.lora_targets),
         "name at least one module, e.g. grid.lora_targets=[q_proj,v_proj]")
    pilot = cfg.pilot
    need(pilot.clip_eps > 0, "pilot.clip_eps", pilot.clip_eps, "must be > 0, e.g. 0.2")
    need(pilot.seed >= 0, "pilot.seed", pilot.seed, "must be >= 0")
    need(pilot.max_steps >= 1, "pilot.max_steps", pilot.max_steps, "must be >= 1")
    need(pilot.max_hours > 0, "pilot.max_hours", pilot.max_hours, "must be > 0 hours")
    checkpoints = list(pilot.checkpoints)
    need(all(0 < c <= 1 for c in checkpoints) and checkpoints == sorted(set(checkpoints)),
         "pilot.checkpoints", checkpoints, "need ascending, distinct budget fractions in "
         "(0, 1], e.g. pilot.checkpoints=[0.25,0.5,0.75,1.0]")
    if cfg.task.name == "math":
        try:  # task.eval.<name>: names and entries (every problem at once, as below)
            eval_entries(as_text(cfg.task.eval) if cfg.task.eval else "",
                         has_source=bool(cfg.task.source))
        except UsageError as error:
            return problems + [str(error)]
    has = task_targets(task_entry(cfg.task))
    if pilot.eval_targets is not None:
        targets = list(pilot.eval_targets)
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
    elif any(len(part.encode()) > MAX_NAME_BYTES for part in parts):
        problems.append(f"sweep.name={name[:40]}...: {len(name.encode())} bytes, past the "
                        f"{MAX_NAME_BYTES} a folder name may have here (file systems allow "
                        f"255, and a budget list adds a subfolder); give a shorter name")
    return problems


def check_paths(cfg: RaceConfig) -> None:
    """Local files the pilot will read must exist (before anything is launched)."""
    for key, value in (("task.source", cfg.task.source), ("task.ood_source", cfg.task.ood_source),
                       ("model.hf_id", cfg.model.hf_id)):
        if value and is_local(value) and not Path(value).expanduser().exists():
            raise UsageError(f"{key}={value}: no such file or folder; check the path (a "
                             f"local {'model folder' if key == 'model.hf_id' else 'data file'}"
                             f"), or leave {key} empty for the default")
    folder = cfg.model.hf_id
    if folder and Path(folder).expanduser().is_dir() and not catalog.has_tokenizer(folder):
        raise UsageError(f"model={cfg.model.name}: no tokenizer in {folder} (none of "
                         f"{', '.join(catalog.TOKENIZER_FILES)}); save it beside the weights "
                         f"with tokenizer.save_pretrained('{folder}')")


def check_device(cfg: RaceConfig) -> None:
    """``pilot.device=cuda`` on a machine where no CUDA device is visible: a UsageError
    before anything runs (torch is imported only for that value)."""
    if cfg.pilot.device == "cuda":
        resolve_device("cuda")


def check_gpus(cfg: RaceConfig) -> None:
    """``launcher.gpus`` under the local launcher names GPUs this machine has: a
    UsageError otherwise (the pilots would silently run on CPU). Torch is imported only
    when GPUs are named."""
    gpus = list(cfg.launcher.gpus)
    if not gpus or cfg.launcher.name != "local":
        return
    count = visible_gpus()
    missing = [g for g in gpus if g >= count]
    if missing:
        have = (f"{count} visible GPU(s), indices 0..{count - 1}" if count
                else "no visible CUDA GPU")
        fix = (f"use launcher.gpus=[{','.join(str(g) for g in range(min(count, len(gpus))))}]"
               if count else "run on a GPU machine, or leave launcher.gpus=[] to run on CPU")
        raise UsageError(f"launcher.gpus={gpus}: this machine has {have}, so GPU(s) "
                         f"{missing} do not exist; {fix}")


def check_reward_built(cfg: RaceConfig) -> None:
    """A reward kind the accounting knows but no pilot can run: UsageError (checked before
    the rest of the cell, so that this is what a user hears first)."""
    if cfg.reward.kind not in BUILT_REWARDS:
        raise UsageError(f"reward.kind={cfg.reward.kind!r}: no {cfg.reward.kind} reward is "
                         f"built in this version, so no pilot can run it (race flops and "
                         f"race plan account for it); use reward.kind=rule or prm")
