"""Frozen dataclasses shared by the pure core: shapes, LoRA settings, phase FLOPs.

Plain numbers only: no tensors, no config objects, no IO. Everything here is picklable
so that launchers can ship it to remote jobs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from race.errors import UsageError

# Heads a transformer body can carry. The head decides how many FLOPs each position whose
# output is computed costs (see flops.head_flops_per_position).
HEADS = ("lm", "prm_value", "token_classification", "sequence_score", "lm_verifier")
# lm_verifier (RACE's tiny PRM): the tied lm_head on every position, whose log-likelihood
# of each written token feeds a Linear(d + 2, labels) classifier with the hidden state.

# Linear modules of one Qwen2/Llama decoder layer, in execution order.
LAYER_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Architecture numbers of a decoder-only transformer (Qwen2 family).

    Attributes:
        name: registry name, e.g. ``qwen2.5-1.5b``.
        hidden_size: d, width of the residual stream.
        intermediate_size: I, width of the SwiGLU MLP.
        num_layers: L, decoder layers.
        num_heads: query heads.
        num_kv_heads: key/value heads (grouped-query attention).
        vocab_size: V, rows of the embedding (padded vocabulary).
        tied_embeddings: lm_head shares the embedding matrix.
        head_dim: per-head width; ``hidden_size // num_heads`` when 0.
        head: output head, one of ``HEADS``.
        num_labels: outputs of a classification/value head.
        qkv_bias: q/k/v projections carry biases (Qwen2 does).
        tokenizer: tokenizer family; models that exchange token ids must share it.
        hf_id: Hugging Face id or local path of the weights, if any.
        step_tag: token a process reward model scores at (PRMs only).
    """

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    tied_embeddings: bool = True
    head_dim: int = 0
    head: str = "lm"
    num_labels: int = 2
    qkv_bias: bool = True
    tokenizer: str = ""
    hf_id: str = ""
    step_tag: str = ""

    def __post_init__(self) -> None:
        for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                    "num_kv_heads", "vocab_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise UsageError(f"model.{key}={value!r}: must be a positive integer "
                                 f"(model {self.name!r}); fix conf/model/{self.name}.yaml")
        if self.head_dim == 0:
            if self.hidden_size % self.num_heads:
                raise UsageError(f"model.num_heads={self.num_heads}: does not divide "
                                 f"hidden_size={self.hidden_size}; set model.head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise UsageError(f"model.num_kv_heads={self.num_kv_heads}: must divide "
                             f"num_heads={self.num_heads} for grouped-query attention")
        if self.head not in HEADS:
            raise UsageError(f"model.head={self.head!r}: unknown head; use one of {HEADS}")

    @property
    def d_attn(self) -> int:
        """Query width: query heads x head_dim."""
        return self.num_heads * self.head_dim

    @property
    def d_kv(self) -> int:
        """Key (and value) width: kv heads x head_dim."""
        return self.num_kv_heads * self.head_dim

    def linear_dims(self) -> tuple[tuple[str, int, int], ...]:
        """(module, d_in, d_out) of each linear of one decoder layer, in execution order."""
        d, i = self.hidden_size, self.intermediate_size
        return (("q_proj", d, self.d_attn), ("k_proj", d, self.d_kv), ("v_proj", d, self.d_kv),
                ("o_proj", self.d_attn, d), ("gate_proj", d, i), ("up_proj", d, i),
                ("down_proj", i, d))

    @property
    def layer_linear_params(self) -> int:
        """Weights of the linears of one decoder layer (no biases, no norms)."""
        return sum(d_in * d_out for _, d_in, d_out in self.linear_dims())

    @property
    def linear_params(self) -> int:
        """N: linear weight parameters of all decoder layers (the FLOP-relevant count)."""
        return self.num_layers * self.layer_linear_params

    @property
    def head_params(self) -> int:
        """Parameters of the output head (0 for an lm_head tied to the embedding)."""
        d = self.hidden_size
        if self.head == "lm":
            return 0 if self.tied_embeddings else self.vocab_size * d
        if self.head == "prm_value":  # Linear(d, d) -> ReLU -> Linear(d, labels), with biases
            return d * d + d + d * self.num_labels + self.num_labels
        if self.head == "lm_verifier":  # Linear(d + 2, labels) with bias; lm_head tied
            lm = 0 if self.tied_embeddings else self.vocab_size * d
            return lm + (d + 2) * self.num_labels + self.num_labels
        return d * self.num_labels  # token/sequence classification: Linear(d, labels), no bias

    @property
    def non_embedding_params(self) -> int:
        """Decoder layers + final norm: the count Qwen2.5's model card calls non-embedding."""
        d = self.hidden_size
        bias = (self.d_attn + 2 * self.d_kv) if self.qkv_bias else 0
        norms = 2 * d
        return self.num_layers * (self.layer_linear_params + bias + norms) + d

    @property
    def total_params(self) -> int:
        """Every parameter: embedding, layers, final norm and head."""
        return self.vocab_size * self.hidden_size + self.non_embedding_params + self.head_params

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> ModelShape:
        """Build from a ``conf/model/*.yaml`` entry (unknown keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in entry.items() if k in names and v is not None})

    @classmethod
    def from_hf_config(cls, config: Any, name: str = "", head: str = "lm") -> ModelShape:
        """Build from a Hugging Face config object, a ``config.json`` path, or its dict."""
        if isinstance(config, (str, Path)):
            path = Path(config)
            path = path / "config.json" if path.is_dir() else path
            config = json.loads(path.read_text())
        get = config.get if isinstance(config, Mapping) else (lambda k, default=None:
                                                              getattr(config, k, default))
        heads = get("num_attention_heads")
        hidden = get("hidden_size")
        return cls(
            name=name or get("_name_or_path", "") or get("model_type", "model"),
            hidden_size=hidden,
            intermediate_size=get("intermediate_size"),
            num_layers=get("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=get("num_key_value_heads") or heads,
            vocab_size=get("vocab_size"),
            tied_embeddings=bool(get("tie_word_embeddings", False)),
            head_dim=get("head_dim") or hidden // heads,
            head=head,
            num_labels=get("num_labels", 2) or 2,
        )


@dataclass(frozen=True, slots=True)
class LoraShape:
    """LoRA adapters: rank and the decoder-layer modules they wrap (base weights frozen)."""

    rank: int
    targets: tuple[str, ...] = LAYER_MODULES  # every linear of a decoder layer

    def validate(self, shape: ModelShape) -> None:
        """Raise ValueError when the adapters do not fit ``shape``."""
        if self.rank <= 0:
            raise UsageError(f"grid.lora_rank={self.rank}: must be >= 1; "
                             f"use e.g. grid.lora_rank=16")
        unknown = [t for t in self.targets if t not in LAYER_MODULES]
        if unknown or not self.targets:
            raise UsageError(f"grid.lora_targets={list(self.targets)}: unknown module(s) "
                             f"{unknown}; choose from {list(LAYER_MODULES)}")
        for module, d_in, d_out in shape.linear_dims():
            if module in self.targets and self.rank > min(d_in, d_out):
                raise UsageError(f"grid.lora_rank={self.rank}: larger than {module}'s width "
                                 f"min({d_in}, {d_out}) in model {shape.name!r}; use a rank "
                                 f"<= {min(d_in, d_out)}")


@dataclass(frozen=True, slots=True)
class PhaseFlops:
    """FLOPs of GRPO post-training by phase. ``eval`` is reported but not charged."""

    rollout: float = 0.0
    learning: float = 0.0
    feedback: float = 0.0
    eval: float = 0.0

    @property
    def total(self) -> float:
        """Charged FLOPs: rollout + learning + feedback (eval is not charged)."""
        return self.rollout + self.learning + self.feedback

    def shares(self) -> dict[str, float]:
        """Each charged phase's fraction of ``total`` (zeros when total is 0)."""
        total = self.total
        return {k: (getattr(self, k) / total if total else 0.0)
                for k in ("rollout", "learning", "feedback")}

    def __add__(self, other: PhaseFlops) -> PhaseFlops:
        return PhaseFlops(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def scale(self, factor: float) -> PhaseFlops:
        """Every phase multiplied by ``factor`` (e.g. a step's FLOPs times N steps)."""
        return PhaseFlops(*(a * factor for a in self.as_tuple()))

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.rollout, self.learning, self.feedback, self.eval)

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"total": self.total}


@dataclass(frozen=True, slots=True)
class RewardShape:
    """A reward system as the accounting sees it: rule-based (no model) or a model."""

    name: str
    kind: str  # "rule" | "orm" | "prm"
    model: ModelShape | None = None
    steps_per_trace: int = 0  # PRM: step tags scored per completion (for plans and cards)


# Ways to fold per-token losses [B, T] into one scalar (race.core.grpo.masked_mean).
AGGREGATIONS: tuple[str, ...] = ("token", "sequence")

# Experiment trackers a pilot may log to (``report.tracker``), each with the package it
# needs ("": none); race.integrations.trackers has one class per name
TRACKERS: dict[str, str] = {"none": "", "wandb": "wandb", "trackio": "trackio",
                            "mlflow": "mlflow", "tensorboard": "tensorboard"}


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One allocation cell as a pilot runs it: picklable, plain values, hashable id.

    Budget and FLOPs are in the ``convention`` the budget is charged in. Its defaults are
    the cell knobs' defaults: the config's schema reads them from here.

    The id contract (:attr:`cell_id`, :attr:`config_id`, :attr:`lineage_id`): a short
    sha256 of the fields as sorted JSON, leaving out

    - what does not change what runs: ``peak_flops`` (a reporting reference), the
      shapes ``policy`` and ``reward_model`` (the names determine them),
      ``gpu_memory_utilization`` (where vLLM's memory goes, not what it computes) and
      ``tracker``, ``tracker_project`` (where its metrics are watched);
    - a field added after ids were in use, while it holds the value it was added with
      (:data:`ID_OMITTED_DEFAULTS`): every cell planned before it existed keeps its id
      and its results folder. A new knob joins that table with its default.
    """

    model: str
    reward: tuple[tuple[str, Any], ...]  # the conf/reward entry as sorted items
    task: tuple[tuple[str, Any], ...]  # the conf/task entry as sorted items
    budget_flops: float
    # the tiny family's warm-start recipe (``warmstart.*``) as sorted items
    warmstart: tuple[tuple[str, Any], ...] = ()
    convention: str = "model"
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 40
    temperature: float = 1.0
    update_epochs: int = 1
    minibatch_size: int = 0
    micro_batch_size: int = 0  # completions per forward/backward pass (0: the minibatch)
    tis_cap: float = 0.0  # truncated importance sampling of vLLM rollouts (0: off)
    lr: float = 3e-4
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = LAYER_MODULES  # every linear of a decoder layer
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    # how per-token losses fold into one: token (DAPO) | sequence (GRPO's 1/|o| mean)
    aggregation: str = "sequence"
    # divide group-centred rewards by the group's std (GRPO) or not (Dr. GRPO)
    scale_rewards: bool = True
    seed: int = 0
    backend: str = "hf"
    # backend=vllm on a GPU: vLLM's share of it (0: derived from the memory plan)
    gpu_memory_utilization: float = 0.0
    checkpoints: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    eval_examples: int = 64
    eval_targets: tuple[str, ...] = ("test", "ood")
    # the target selection reads, and its problems at every checkpoint (SE <= 0.035)
    select_target: str = "val"
    select_examples: int = 200
    measure: bool = False
    # where the policy's weights load from ("": the tiny family's cached warm start)
    policy_path: str = ""
    # a hub policy's revision (branch, tag or commit; "": main), resolved in the cache
    policy_revision: str = ""
    # the cell (a sibling folder) whose final state this pilot continues: a ladder rung
    # resumes the rung below ("": starts from the warm start)
    continues: str = ""
    # a fresh pilot scores its warm start (checkpoint 0); a ladder leaves that to one
    # cell of each START_FIELDS group, whose rows the analysis reads for all of them
    score_start: bool = True
    # the targets other than the selection target are scored at the warm start and at
    # checkpoints from this many charged FLOPs on (0: at every checkpoint); a ladder sets
    # its last rung's budget, so its lower rungs score only what promotions read
    report_from_flops: float = 0.0
    # where and in what dtype the pilot runs: auto (CUDA when visible) | cpu | cuda, and
    # auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16 for the frozen base weights
    device: str = "auto"
    dtype: str = "auto"
    # the FLOP/s MFU is measured against (0: a matmul on the pilot's device measures it)
    peak_flops: float = 0.0
    # the policy's and the reward model's shapes as the plan read them, so the pilot and
    # its budget never read the catalog again (None: read ``model``/``reward`` by name)
    policy: ModelShape | None = None
    reward_model: ModelShape | None = None
    # the experiment tracker the pilot logs to (TRACKERS: none | wandb | trackio | mlflow |
    # tensorboard) and the tracker's project: where it is watched, not what runs
    tracker: str = "none"
    tracker_project: str = "race"

    def _fields(self, *, lineage: bool = False) -> dict[str, Any]:
        """The fields an id hashes (the id contract, in the class docstring)."""
        values = asdict(self)
        for key, default in ID_OMITTED_DEFAULTS.items():
            if values[key] == default:
                del values[key]
        if lineage:
            values.pop("continues", None)
            values.pop("score_start", None)  # an eval plan shared within a config's seeds
        # a reporting reference, what the names determine, vLLM's share of a GPU, and
        # where the metrics are watched
        for key in ("peak_flops", "policy", "reward_model", "gpu_memory_utilization",
                    "tracker", "tracker_project"):
            values.pop(key, None)
        return values

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


# RunSpec fields left out of its ids while they hold these values: they were added after
# ids were in use (the id contract, RunSpec's docstring)
ID_OMITTED_DEFAULTS = {"continues": "", "device": "auto", "dtype": "auto",
                       "micro_batch_size": 0, "tis_cap": 0.0, "score_start": True,
                       "report_from_flops": 0.0, "policy_revision": ""}

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


def _short_hash(fields: dict[str, Any]) -> str:
    blob = json.dumps(fields, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
