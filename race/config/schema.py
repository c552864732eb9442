"""The Hydra structured-config schema: plain (mutable) dataclasses, so that command-line
overrides work; ``race/conf/`` YAML sets their values. A comment above each field says what
it means, with its unit.

Each default is written once, in the frozen dataclass of the lowest layer that uses it,
and read from there: a cell's knobs from :class:`~race.core.specs.RunSpec`, the guards'
thresholds from :class:`~race.core.guards.GuardThresholds`, the ladder's from
:mod:`race.core.rungs`, the report's from :data:`race.core.stats.REPORT`, the regime
thresholds from :class:`~race.core.regime.RegimeThresholds`, the embedded task's knobs
from :class:`~race.tasks.arith.ArithTask`, the warm start's from
:class:`~race.warmstart.policies.WarmStartRecipe`, the pilots' checkpoint interval from
:data:`race.pilot.state.CHECKPOINT_EVERY` (``tests/test_config.py`` checks that schema
and spec agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from omegaconf import MISSING

from race.core import guards, knobs
from race.core.regime import RegimeThresholds
from race.core.rungs import DEFAULT_PROMOTE_BY, DEFAULT_REDUCTION, DEFAULT_RUNGS
from race.core.specs import RunSpec
from race.core.stats import REPORT
from race.pilot.budget import MAX_PILOT_HOURS, MAX_PILOT_STEPS
from race.pilot.state import CHECKPOINT_EVERY
from race.tasks.arith import ArithTask
from race.warmstart.policies import WarmStartRecipe

GROUPS = ("model", "reward", "task", "grid", "launcher")
# The embedded default's full-run budget (FLOPs), what a null ``budget`` means for the
# tiny family: sized so that the default grid's pilots each buy tens of GRPO steps
# (docs/pilots.md gives the sizes and the sweep's wall clock).
EMBEDDED_BUDGET = 3.5e12
# reward kinds the accounting knows (race flops, race plan); pilots run the kinds
# race.rewards.REWARD_KINDS builds
ACCOUNTED_REWARD_KINDS = ("rule", "orm", "prm")
# the defaults' owners (see the module docstring)
_ARITH = ArithTask()
_RECIPE = WarmStartRecipe(model="")
_REGIME = RegimeThresholds()


def with_knobs(section: str, *, first: bool = True):
    """A schema dataclass with RunSpec's knobs of ``section`` added (``grid``, ``pilot``,
    ...; "" for the top level), before its own fields (``first``) or after them: each
    knob's default, type and help come from its one declaration
    (:func:`race.core.knobs.schema_fields`)."""

    def build(cls: type) -> type:
        own = [(f.name, f.type, field(default=f.default, default_factory=f.default_factory,
                                      metadata=f.metadata)) for f in fields(cls)]
        declared = knobs.schema_fields(RunSpec, section)
        made = make_dataclass(cls.__name__, declared + own if first else own + declared,
                              namespace={"__module__": cls.__module__, "__doc__": cls.__doc__})
        return made

    return build


@dataclass
class ModelConfig:
    # registry name (the YAML's file name)
    name: str = MISSING
    # Hugging Face id or local path of the weights ("" for models RACE builds itself)
    hf_id: str = ""
    # a hub id's revision: a branch, tag or commit hash ("": main); the snapshot a pilot
    # loads is recorded with its results (race prefetch fetches it)
    revision: str = ""
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
    # q/k/v projections carry biases (Qwen2; config.json's attention_bias elsewhere)
    qkv_bias: bool = True
    # config.json's model_type ("": Qwen2), and attention: a sliding-window layer's query
    # attends the last sliding_window tokens; layer_types: each layer's kind ([]: all full)
    model_type: str = ""
    sliding_window: int = 0
    layer_types: list[str] = field(default_factory=list)
    # tokenizer family: models that exchange token ids must share it
    tokenizer: str = ""
    # token a process reward model scores at
    step_tag: str = ""
    # context window, tokens (config.json's max_position_embeddings; 0: unknown): race
    # plan refuses a generation cap that cannot fit beside the task's prompts
    context_tokens: int = 0


@dataclass
class RewardConfig:
    # registry name
    name: str = MISSING
    # rule (verifier, 0 FLOPs) | orm (one score per completion) | prm (one per step)
    kind: str = "rule"
    # reward model's architecture, a name under race/conf/model/ (null for rule)
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
    # the reward model's hub revision (branch, tag or commit; "": main)
    revision: str = ""
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
    # the task's generation cap, tokens: what grid.max_new_tokens=null (the default) means,
    # fitted to the policy's context (compose.fitted_cap)
    max_new_tokens: int = MISSING
    # reasoning steps per completion (PRM step tags)
    steps_per_trace: int = 0
    # data files (a .jsonl/.json/.parquet file or a folder of them); "" for the embedded
    # task or the hub
    source: str = ""
    # GSM8K-format: a file of out-of-distribution problems (the ood target; "": none)
    ood_source: str = ""
    # math: the dataset's config (subset, e.g. main) and the split training reads; val and
    # test from their own sources ("": cut from source by a hash of each problem)
    subset: str = ""
    train_split: str = ""
    val_source: str = ""
    test_source: str = ""
    # math: the fields a row's problem, answer and solution are read from ("": the public
    # formats' own: problem or question; answer, else the last \boxed{} of solution)
    problem_key: str = ""
    answer_key: str = ""
    solution_key: str = ""
    # math: evaluation-only targets by name, each a source (a file, a folder or a dataset
    # name) or {source, subset, split, problem_key, answer_key}: task.eval.math500=<file>
    eval: dict[str, Any] = field(default_factory=dict)
    # GSM8K-format and reasoning-gym prompts in the policy's chat template: a system
    # message ("": none) and the instruction after each question ("": the task's own)
    system_prompt: str = ""
    answer_format: str = ""
    # reasoning-gym (pip install 'race-rl[tasks]'): the generator's name, its config fields
    # (size, seed, difficulty knobs: task.config.max_terms=4) for train/val/test, and
    # those the ood split changes ({}: the generator's curriculum one level above training)
    dataset: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    ood_config: dict[str, Any] = field(default_factory=dict)
    # embedded task (arith): digits per operand, digits of the first number (0: digits),
    # operations per chain in train/val/test; in ood (0: as training), where every
    # operation that can subtract does with probability ood_minus_share (training: 0.5)
    digits: int = _ARITH.digits
    first_digits: int = _ARITH.first_digits
    min_ops: int = _ARITH.min_ops
    max_ops: int = _ARITH.max_ops
    ood_min_ops: int = _ARITH.ood_min_ops
    ood_max_ops: int = _ARITH.ood_max_ops
    ood_minus_share: float = _ARITH.ood_minus_share


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


@with_knobs("grid")
@dataclass
class GridConfig:
    """``grid.*``: the cell's search and learning knobs (declared in RunSpec), and:"""

    # mean completion length, tokens (null: the task's, capped at max_new_tokens)
    completion_tokens: int | None = None
    # sweep axes: config key -> values (race plan/sweep expand their product; a key given
    # on the command line, as one value or a comma list, replaces its axis)
    axes: dict[str, list[Any]] = field(default_factory=dict)


@with_knobs("pilot")
@dataclass
class PilotConfig:
    """``pilot.*``: the cell's run, eval and device knobs (declared in RunSpec), and:"""

    # each pilot gets fraction x budget FLOPs
    fraction: float = 0.0625
    # where `race pilot` writes cells/<cell_id>/
    out_dir: str = "results/pilots"
    # sanity bounds on one pilot, checked by race plan and race sweep before anything
    # runs: GRPO steps its budget buys, and its estimated wall hours on the chosen device
    max_steps: int = MAX_PILOT_STEPS
    max_hours: float = MAX_PILOT_HOURS


@dataclass
class RegimeConfig:
    # a cell's regime is named from its FLOP shares: the first threshold met wins, in
    # the order feedback, learning, search; otherwise "balanced"
    feedback_heavy: float = _REGIME.feedback_heavy
    learning_heavy: float = _REGIME.learning_heavy
    search_heavy: float = _REGIME.search_heavy


@dataclass
class LauncherConfig:
    # a race/conf/launcher/<name>.yaml: local (processes on this machine) | slurm (job arrays) |
    # inline (in-process, debugging); each is a module of race/run/launch/ setting LAUNCHER
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
    checkpoint_every: int = CHECKPOINT_EVERY
    # seconds between polls of running jobs
    poll_s: float = 2.0
    # a job that vanished from the scheduler without writing a result is reported lost
    # after this many seconds
    lost_after_s: float = 60.0
    # a launcher's own keys that no field above names (a new backend's knobs, set in its
    # race/conf/launcher/<name>.yaml: launcher.options.<key>; its module lists them)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepConfig:
    # folder under out_dir (null: <task>-<budget>-<hash of the cells>, stable across reruns)
    name: str | None = None
    out_dir: str = "results"
    # a folder already holding another plan's sweep is refused (two experiments would
    # mix in one report); true adds this plan's cells to it on purpose
    extend: bool = False


@dataclass
class GuardConfig:
    # drawdown: the smallest drop below the running best that counts, accuracy points
    floor: float = guards.DEFAULT.floor
    # drawdown: the drop must also exceed this many standard errors of the difference
    z: float = guards.DEFAULT.z
    # reward hacking: the proxy reward's rise over the window, reward points
    reward_rise: float = guards.DEFAULT.reward_rise
    # reward hacking: the last checkpoint is compared with this many before it (and with
    # the checkpoint of best accuracy)
    window: int = guards.DEFAULT.window
    # entropy collapse: last step's sampled-token NLL below this share of the first's
    entropy_floor: float = guards.DEFAULT.entropy_floor
    # truncation: share of the last step's completions cut at the cap
    max_truncation: float = guards.DEFAULT.max_truncation

    def thresholds(self) -> guards.GuardThresholds:
        return guards.GuardThresholds(**{f.name: getattr(self, f.name)
                                          for f in fields(guards.GuardThresholds)})


@dataclass
class SelectionConfig:
    # ladder: successive halving (every config to the first rung, the best continued from
    # their checkpoints to the next) | flat: every cell at pilot.fraction x budget
    policy: str = "ladder"
    # ladder rung budgets, fractions of the full budget (ascending; the last below 1):
    # F/48, F/24, F/12, F/6
    rungs: list[float] = field(default_factory=lambda: list(DEFAULT_RUNGS))
    # each rung keeps the best 1/reduction of the configs (at least one per policy size)
    reduction: int = DEFAULT_REDUCTION
    # the ladder's total pilot compute, as a share of one full run (rungs shrink to fit)
    share: float = 1.0
    # the pilots' total compute including their evaluation, as a share of one full run:
    # a ladder's rungs shrink until its charged and planned eval FLOPs fit; race plan
    # warns when they cannot (or when a flat grid exceeds it)
    pilot_budget: float = 1.0
    # a ladder's checkpoints within each rung, fractions of the rung's budget: promotions
    # read the rung's end, so by default only that is evaluated (with the warm start)
    rung_checkpoints: list[float] = field(default_factory=lambda: [1.0])
    # promotion ranks by a score minus z standard errors
    z: float = 1.0
    # what that score is: last = the rung end's accuracy | trend = the accuracy predicted
    # at the next rung from the trend of the rung ends (a line in log FLOPs)
    promote_by: str = DEFAULT_PROMOTE_BY
    # close: a policy size keeps its best config at each rung while that config's upper
    # bound (plus z SE) reaches the leader's lower bound | all: every size always does
    keep_sizes: str = "close"
    # seeds each config of a ladder's last rung is read on: 1 (the default) reads one;
    # k > 1 runs k - 1 more seeds afresh to the last rung within the same pilot compute
    # (the rungs shrink to pay for them) and ranks by the pooled seed mean, its interval
    # from the seeds' spread (seeds and problems) where that is wider than the problems'
    replicates: int = 1
    # when a config's guard fires (never promoted, extrapolated or preferred)
    guards: GuardConfig = field(default_factory=GuardConfig)


@with_knobs("report", first=False)
@dataclass
class ReportConfig:
    """``report.*``: intervals and validation picks, and the tracker pilots log to
    (``tracker``, ``tracker_project``: declared in RunSpec)."""

    # bootstrap resamples for intervals
    n_boot: int = REPORT.n_boot
    # interval level
    level: float = REPORT.level
    # cells chosen for validation
    top_k: int = REPORT.top_k
    # rank validation candidates on extrapolated (curve fit) or observed pilot scores
    basis: str = REPORT.basis


@dataclass
class ValidateConfig:
    # validate this many of selection.json's cells (null: all of them)
    top_k: int | None = None
    # problems of the selection target each validation run scores (at least the pilots'):
    # SE sqrt(p(1-p)/n) <= 0.016 at n=1000; eval is not charged to the budget
    select_examples: int = 1000
    # ask before starting more than 1 h of runs (y/N on a terminal; elsewhere race validate
    # exits 2 unless --yes); false: start without asking
    confirm: bool = True


@with_knobs("accounting")
@dataclass
class AccountingConfig:
    """``accounting.*``: measure (FlopCounterMode beside the formulas) and peak_flops (what
    MFU is reported against), both declared in RunSpec."""


@with_knobs("", first=False)
@dataclass
class RaceConfig:
    """The whole config; ``convention`` (the FLOP convention of budgets) is declared in
    RunSpec."""

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
    # race flops output: text | json
    format: str = "text"


GROUP_SCHEMAS = {"model": ModelConfig, "reward": RewardConfig, "task": TaskConfig,
                 "grid": GridConfig, "launcher": LauncherConfig}
