"""One allocation cell as a pilot runs it (:class:`RunSpec`), each of its knobs declared
once (:mod:`race.core.knobs`), and the id contract.

Plain values only: no tensors, no config objects, no IO; picklable, so that launchers can
ship it to remote jobs. The shapes it carries live in :mod:`race.core.shapes` and are
importable from here too (``from race.core.specs import ModelShape``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from race.core import knobs
from race.core.knobs import knob
from race.core.shapes import (  # noqa: F401  (the shapes a spec carries, importable here)
    HEADS,
    LAYER_MODULES,
    LoraShape,
    ModelShape,
    PhaseFlops,
    RewardShape,
)

# Ways to fold per-token losses [B, T] into one scalar (race.core.grpo.masked_mean).
AGGREGATIONS: tuple[str, ...] = ("token", "sequence")
# FLOP conventions (race.core.flops): model FLOPs, or what the HF backend executes
CONVENTIONS: tuple[str, ...] = ("model", "executed")
# rollout backends, where a pilot runs (auto: CUDA when visible), its base weights' dtype
BACKENDS: tuple[str, ...] = ("hf", "vllm")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")


def _at_least(low: int):
    """A check: an integer >= ``low`` (a bool or a float is not a count)."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low

# Experiment trackers a pilot may log to (``report.tracker``), each with the package it
# needs ("": none); race.integrations.trackers has one class per name
TRACKERS: dict[str, str] = {"none": "", "wandb": "wandb", "trackio": "trackio",
                            "mlflow": "mlflow", "tensorboard": "tensorboard"}


def corrects_sampler(tis_cap: float, backend: str) -> bool:
    """Whether a step weights vLLM's rollouts by truncated importance sampling
    (``tis_cap`` > 0 on ``backend=vllm``): it then always runs, and pays for, the
    old-policy log-prob pass. The one rule the planner, the budget and the card share."""
    return tis_cap > 0 and backend == "vllm"


def target_problems(target: str, *, select_target: str, select_examples: int,
                    eval_examples: int) -> int:
    """Problems evaluation target ``target`` scores at a checkpoint: the selection target
    ``max(select_examples, eval_examples)``, every other target ``eval_examples``."""
    return max(select_examples, eval_examples) if target == select_target else eval_examples


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One allocation cell as a pilot runs it: picklable, plain values, hashable id.

    Budget and FLOPs are in the ``convention`` the budget is charged in. Each cell knob
    is declared here once, with :func:`race.core.knobs.knob`: its default, config key,
    group, unit, doc and check; the config's schema, the learner's view, validation and
    the id contract are derived from these declarations (:mod:`race.core.knobs`).

    The id contract (:attr:`cell_id`, :attr:`config_id`, :attr:`lineage_id`): a short
    sha256 of the fields as sorted JSON, leaving out

    - what does not change what runs (``in_id=False``): ``peak_flops`` (a reporting
      reference), the shapes ``policy`` and ``reward_model`` (the names determine them),
      ``gpu_memory_utilization`` (where vLLM's memory goes, not what it computes) and
      ``tracker``, ``tracker_project`` (where its metrics are watched);
    - a field added after ids were in use, while it holds the value it was added with
      (``id_since``, :data:`ID_OMITTED_DEFAULTS`): every cell planned before it existed
      keeps its id and its results folder. A new knob declares ``id_since`` with the
      date it joins.
    """

    model: str
    reward: tuple[tuple[str, Any], ...]  # the race/conf/reward entry as sorted items
    task: tuple[tuple[str, Any], ...]  # the race/conf/task entry as sorted items
    budget_flops: float
    # the tiny family's warm-start recipe (``warmstart.*``) as sorted items
    warmstart: tuple[tuple[str, Any], ...] = ()
    convention: str = knob(
        "model", key="convention", group="run", doc="FLOP convention of budgets and "
        "ledgers: model | executed", check=lambda v: v in CONVENTIONS,
        rule=f"use one of {list(CONVENTIONS)}")
    prompts_per_step: int = knob(
        8, key="grid.prompts_per_step", group="search", unit="prompts",
        doc="prompts sampled per GRPO step", check=_at_least(1), rule="must be >= 1")
    group_size: int = knob(
        8, key="grid.group_size", group="search", unit="completions",
        doc="G: completions per prompt (>= 2 for a group baseline)", check=_at_least(2),
        rule="GRPO needs >= 2 samples per prompt for a group baseline; use e.g. "
             "grid.group_size=8")
    max_new_tokens: int = knob(
        40, key="grid.max_new_tokens", group="search", unit="tokens",
        doc="generation cap of rollouts and eval", null="the task's own, "
        "task.max_new_tokens, fitted to the policy's context", check=_at_least(1),
        rule="must be >= 1")
    temperature: float = knob(
        1.0, key="pilot.temperature", group="search", learner=True,
        doc="sampling temperature of rollouts (evaluation is greedy)",
        check=lambda v: v > 0, rule="must be > 0")
    update_epochs: int = knob(
        1, key="grid.update_epochs", group="learning", learner=True, unit="passes",
        doc="mu: passes over each rollout batch", check=_at_least(1), rule="must be >= 1")
    minibatch_size: int = knob(
        0, key="grid.minibatch_size", group="learning", learner=True, unit="completions",
        doc="completions per optimizer step; must divide prompts_per_step x group_size",
        null="the whole rollout batch")
    micro_batch_size: int = knob(
        0, key="grid.micro_batch_size", group="learning", learner=True, unit="completions",
        doc="completions per forward/backward pass inside a minibatch, grouped by length; "
        "gradients accumulate over them (0: the whole minibatch in one pass)",
        check=_at_least(0), rule="must be >= 0 (0: each minibatch in one pass)",
        id_since="2026-12-01")
    tis_cap: float = knob(
        0.0, key="pilot.tis_cap", group="learning", learner=True,
        doc="pilot.backend=vllm: each token's surrogate times min(pi_old / pi_vllm, "
        "tis_cap), truncated importance sampling for the engine's own numerics (0: off)",
        id_since="2026-12-01")
    lr: float = knob(
        3e-4, key="grid.lr", group="learning", learner=True,
        doc="AdamW learning rate of the LoRA adapters (tuned on val, docs/pilots.md)",
        check=lambda v: v > 0, rule="the learning rate must be a positive number; use e.g. "
        "grid.lr=5e-5")
    lora_rank: int = knob(
        16, key="grid.lora_rank", group="learning", learner=True,
        doc="LoRA rank (0: full fine-tuning, race flops only)", check=_at_least(0),
        rule="must be >= 0 (0: full fine-tuning)")
    lora_alpha: int = knob(
        32, key="grid.lora_alpha", group="learning", learner=True,
        doc="LoRA scale numerator (the update is alpha / rank x BA)",
        check=lambda v: v > 0, rule="must be > 0, e.g. 32")
    lora_targets: tuple[str, ...] = knob(
        LAYER_MODULES, key="grid.lora_targets", group="learning", learner=True,
        doc="decoder-layer modules the adapters wrap (default: every linear)",
        check=bool, rule="name at least one module, e.g. grid.lora_targets=[q_proj,v_proj]")
    kl_coef: float = knob(
        0.0, key="grid.kl_coef", group="learning", learner=True,
        doc="KL penalty to the reference policy (adapters disabled); 0 skips its pass",
        check=lambda v: v >= 0, rule="must be >= 0 (0 disables the KL term)")
    clip_eps: float = knob(
        0.2, key="pilot.clip_eps", group="learning", learner=True,
        doc="PPO clip range of the importance ratio", check=lambda v: v > 0,
        rule="must be > 0, e.g. 0.2")
    aggregation: str = knob(
        "sequence", key="grid.aggregation", group="learning", learner=True,
        doc="per-token losses folded into one: sequence (each completion's mean, then the "
        "batch mean: GRPO) | token (every token alike: DAPO)",
        check=lambda v: v in AGGREGATIONS, rule=f"use one of {list(AGGREGATIONS)}")
    scale_rewards: bool = knob(
        True, key="grid.scale_rewards", group="learning",
        doc="advantages: group-centred rewards divided by the group's std (GRPO), or not "
        "(Dr. GRPO)")
    seed: int = knob(
        0, key="pilot.seed", group="run", doc="random seed of the pilot (rollouts, prompt "
        "order, adapter init)", check=_at_least(0), rule="must be >= 0")
    backend: str = knob(
        "hf", key="pilot.backend", group="device", doc="rollout backend: hf (transformers "
        "generate) | vllm", check=lambda v: v in BACKENDS,
        rule="use pilot.backend=hf or vllm")
    gpu_memory_utilization: float = knob(
        0.0, key="pilot.gpu_memory_utilization", group="device", in_id=False,
        doc="pilot.backend=vllm on a GPU: the share of the GPU's memory vLLM may take, 0-1 "
        "(docs/gpus.md)", null="derived from the memory plan so that what the learner "
        "needs stays free", check=lambda v: 0 < v <= 1,
        rule="vLLM's share of the GPU must be in (0, 1], e.g. 0.4 (null: derived from the "
             "memory plan)")
    checkpoints: tuple[float, ...] = knob(
        (0.25, 0.5, 0.75, 1.0), key="pilot.checkpoints", group="eval",
        doc="evaluate when these fractions of the pilot budget are spent (0 is always "
        "evaluated)", check=lambda v: all(0 < c <= 1 for c in v) and list(v) == sorted(set(v)),
        rule="need ascending, distinct budget fractions in (0, 1], e.g. "
             "pilot.checkpoints=[0.25,0.5,0.75,1.0]")
    eval_examples: int = knob(
        64, key="pilot.eval_examples", group="eval", unit="problems",
        doc="held-out problems per evaluation target and checkpoint (the targets "
        "selection does not read: reported only)", check=_at_least(1), rule="must be >= 1")
    eval_targets: tuple[str, ...] = knob(
        ("test", "ood"), key="pilot.eval_targets", group="eval",
        doc="evaluation targets (held-out splits of the task): val is what selection "
        "reads; test and ood are only reported", null="every target the task has; ood "
        "only where the task has out-of-distribution problems, e.g. task.ood_source")
    select_target: str = knob(
        "val", key="pilot.select_target", group="eval",
        doc="the target rankings and selection read (tuning and selection on val, never "
        "on test)")
    select_examples: int = knob(
        200, key="pilot.select_examples", group="eval", unit="problems",
        doc="the selection target's problems at every checkpoint, the same ones each time "
        "(paired comparisons): SE sqrt(p(1-p)/n) <= 0.035 at n=200",
        check=_at_least(1), rule="must be >= 1")
    measure: bool = knob(
        False, key="accounting.measure", group="run", doc="also count every HF phase with "
        "FlopCounterMode and record it beside the formulas")
    # where the policy's weights load from ("": the tiny family's cached warm start)
    policy_path: str = ""
    # a hub policy's revision (branch, tag or commit; "": main), resolved in the cache
    policy_revision: str = knob("", id_since="2026-12-03")
    # the cell (a sibling folder) whose final state this pilot continues: a ladder rung
    # resumes the rung below ("": starts from the warm start)
    continues: str = knob("", id_since="2026-12-01")
    # a fresh pilot scores its warm start (checkpoint 0); a ladder leaves that to one
    # cell of each START_FIELDS group, whose rows the analysis reads for all of them
    score_start: bool = knob(True, id_since="2026-12-02")
    # the targets other than the selection target are scored at the warm start and at
    # checkpoints from this many charged FLOPs on (0: at every checkpoint); a ladder sets
    # its last rung's budget, so its lower rungs score only what promotions read
    report_from_flops: float = knob(0.0, id_since="2026-12-02")
    device: str = knob(
        "auto", key="pilot.device", group="device", doc="auto (CUDA when visible) | cpu | "
        "cuda", check=lambda v: v in DEVICES, rule=f"use one of {'|'.join(DEVICES)}",
        id_since="2026-12-01")
    dtype: str = knob(
        "auto", key="pilot.dtype", group="device", doc="frozen base weights: auto (bf16 on "
        "CUDA, fp32 on CPU) | float32 | bfloat16; LoRA adapters and AdamW stay fp32",
        check=lambda v: v in DTYPES, rule=f"use one of {'|'.join(DTYPES)}",
        id_since="2026-11-29")
    peak_flops: float = knob(
        0.0, key="accounting.peak_flops", group="device", unit="FLOP/s", in_id=False,
        doc="what MFU and HFU are reported against", null="a bf16 matmul on the pilot's "
        "GPU, or an fp32 one on CPU, measures it when the pilot starts",
        check=lambda v: v > 0, rule="must be > 0 FLOP/s (null: measure it), e.g. "
        "accounting.peak_flops=989e12 for an H100's dense bf16")
    # the policy's and the reward model's shapes as the plan read them, so the pilot and
    # its budget never read the catalog again (None: read ``model``/``reward`` by name)
    policy: ModelShape | None = knob(None, in_id=False)
    reward_model: ModelShape | None = knob(None, in_id=False)
    tracker: str = knob(
        "none", key="report.tracker", group="run", in_id=False,
        doc="the experiment tracker every pilot (and the sweep's pick) logs to: none | "
        "wandb | trackio | mlflow | tensorboard (each an extra: pip install 'race-rl[wandb]')")
    tracker_project: str = knob(
        "race", key="report.tracker_project", group="run", in_id=False,
        doc="the tracker's project (W&B, trackio) or experiment (MLflow)")

    def _fields(self, *, lineage: bool = False) -> dict[str, Any]:
        """The fields an id hashes (the id contract, in the class docstring)."""
        values = asdict(self)
        for key, default in ID_OMITTED_DEFAULTS.items():
            if values[key] == default:
                del values[key]
        if lineage:
            values.pop("continues", None)
            values.pop("score_start", None)  # an eval plan shared within a config's seeds
        for key in ID_EXCLUDED:  # what does not change what runs (in_id=False)
            values.pop(key, None)
        return values

    @property
    def reward_name(self) -> str:
        """The reward system's name (``reward=<name>``)."""
        return dict(self.reward)["name"]

    @property
    def cell_id(self) -> str:
        """A stable short hash of every field."""
        return _short_hash(self._fields())

    @property
    def config_id(self) -> str:
        """A stable short hash of every field but the seed (and what a rung continues):
        the seeds of one allocation."""
        return _short_hash(self._fields(lineage=True) | {"seed": None})

    @property
    def selection_target(self) -> str:
        """The target selection reads: ``select_target`` when it is evaluated, else the
        first evaluated target."""
        return (self.select_target if self.select_target in self.eval_targets
                else self.eval_targets[0])

    @property
    def lineage_id(self) -> str:
        """Every field but the budget, its checkpoints and what it continues: the rungs of
        one cell on a ladder share it (a rung may continue only its own lineage)."""
        return _short_hash(self._fields(lineage=True) | {"budget_flops": None,
                                                         "checkpoints": None})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"reward": dict(self.reward), "task": dict(self.task),
                               "warmstart": dict(self.warmstart), "cell_id": self.cell_id,
                               "config_id": self.config_id}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RunSpec:
        """The inverse of :meth:`to_dict` (extra keys such as ``cell_id`` are ignored)."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in values.items() if k in names}
        for key in ("reward", "task", "warmstart"):
            if key in kept:
                kept[key] = tuple(sorted(dict(kept[key]).items()))
        for key in ("lora_targets", "checkpoints", "eval_targets"):
            if key in kept:
                kept[key] = tuple(kept[key])
        for key in ("policy", "reward_model"):
            if isinstance(kept.get(key), Mapping):
                kept[key] = ModelShape.from_dict(kept[key])
        return cls(**kept)


def pilot_flops(full_budget_flops: float, fraction: float) -> float:
    """A pilot's budget, FLOPs: ``fraction`` of the full-run budget (a flat grid's pilots
    at ``pilot.fraction``, a ladder's rungs at theirs). The one product of the two."""
    return full_budget_flops * fraction


# RunSpec fields left out of its ids while they hold their defaults (``id_since``: added
# after ids were in use), and fields no id hashes (``in_id=False``): the id contract
ID_OMITTED_DEFAULTS = knobs.id_omitted_defaults(RunSpec)
ID_EXCLUDED = knobs.id_excluded(RunSpec)

# The fields that determine a warm start's evaluation (the same model greedily on the same
# problems, scored by the same reward): cells that agree on them score one warm start
START_FIELDS = ("model", "reward", "task", "warmstart", "policy_path", "policy_revision",
                "max_new_tokens",
                "select_target", "select_examples", "eval_examples", "eval_targets",
                "backend", "device", "dtype", "convention")


def start_key(spec: Mapping[str, Any]) -> str:
    """The warm-start group of a cell (its ``spec.json`` or ``RunSpec.to_dict()``): a
    short hash of its :data:`START_FIELDS`."""
    return _short_hash({k: spec.get(k) for k in START_FIELDS})


# What a warm start's accuracy depends on: START_FIELDS but the reward (accuracy is the
# task's verifier's, whatever reward the cell trains on, and the reward's model is no part
# of the policy's weights). A cell's gain is read against the cells that agree on them
BASELINE_FIELDS = tuple(f for f in START_FIELDS if f != "reward")


def baseline_key(spec: Mapping[str, Any]) -> str:
    """The group whose checkpoint 0 a cell's gain is read against (its ``spec.json`` or
    ``RunSpec.to_dict()``): a short hash of its :data:`BASELINE_FIELDS` (the same weights
    scored greedily on the same problems of the same task, knobs and cap)."""
    return _short_hash({k: spec.get(k) for k in BASELINE_FIELDS})


def _short_hash(fields: dict[str, Any]) -> str:
    blob = json.dumps(fields, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
