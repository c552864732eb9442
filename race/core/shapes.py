"""Frozen shapes the pure core computes with: a transformer's architecture numbers
(:class:`ModelShape`), LoRA settings (:class:`LoraShape`), FLOPs by phase
(:class:`PhaseFlops`) and a reward system as the accounting sees it (:class:`RewardShape`).

Plain numbers only: no tensors, no config objects, no IO. Everything here is picklable
so that launchers can ship it to remote jobs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from race.errors import UncountedArchitecture, UsageError

# Heads a transformer body can carry. The head decides how many FLOPs each position whose
# output is computed costs (see flops.head_flops_per_position).
HEADS = ("lm", "prm_value", "token_classification", "sequence_score", "lm_verifier")
# lm_verifier (RACE's tiny PRM): the tied lm_head on every position, whose log-likelihood
# of each written token feeds a Linear(d + 2, labels) classifier with the hidden state.

# Linear modules of one Qwen2/Llama decoder layer, in execution order.
LAYER_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# config.json ``model_type`` values whose decoder layers RACE counts exactly: the seven
# linears of LAYER_MODULES (a gated MLP: SwiGLU, or GeGLU for Gemma 3), SDPA attention over
# full or sliding-window layers, and norms (elementwise: not counted). Checked against
# FlopCounterMode on random-weight models of each (tests/test_flops_architectures.py).
MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral", "gemma3_text")
# a decoder layer's attention (config.json ``layer_types``): every earlier key, or only
# the last ``sliding_window`` (the query's own position included)
ATTENTION_TYPES = ("full_attention", "sliding_attention")
# config.json keys that count the experts of mixture-of-experts layers (Mixtral, Qwen2-MoE
# / Qwen3-MoE, DeepSeek, ...): a model with any of them is refused, not priced as dense
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
               "num_experts_per_tok", "n_shared_experts")
# the fields added after warm starts were keyed by ``asdict(shape)``: left out of
# :meth:`ModelShape.key` at their defaults, so those keys (and shipped archives) stand
_LATER_FIELDS = {"model_type": "", "sliding_window": 0, "layer_types": ()}


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
        qkv_bias: q/k/v projections carry biases (Qwen2 does; Llama, Gemma 3 do not).
        tokenizer: tokenizer family; models that exchange token ids must share it.
        hf_id: Hugging Face id or local path of the weights, if any.
        step_tag: token a process reward model scores at (PRMs only).
        model_type: config.json's ``model_type`` (one of ``MODEL_TYPES``; "": Qwen2).
        sliding_window: tokens a sliding-window layer's query attends (itself included);
            0 when no layer slides.
        layer_types: each layer's attention (``ATTENTION_TYPES``); () when all are full.
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
    model_type: str = ""
    sliding_window: int = 0
    layer_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                    "num_kv_heads", "vocab_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise UsageError(f"model.{key}={value!r}: must be a positive integer "
                                 f"(model {self.name!r}); fix race/conf/model/{self.name}.yaml")
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
        self._check_attention()

    def _check_attention(self) -> None:
        types = tuple(self.layer_types)
        object.__setattr__(self, "layer_types", types)  # a YAML list arrives as a list
        unknown = sorted(set(types) - set(ATTENTION_TYPES))
        if unknown:
            raise UsageError(f"model.layer_types: unknown attention {unknown[0]!r} (model "
                             f"{self.name!r}); RACE counts {', '.join(ATTENTION_TYPES)}")
        if types and len(types) != self.num_layers:
            raise UsageError(f"model.layer_types: {len(types)} entries for num_layers="
                             f"{self.num_layers} (model {self.name!r}); give one per layer")
        if self.sliding_layers and self.sliding_window < 1:
            raise UsageError(f"model.sliding_window={self.sliding_window}: sliding-window "
                             f"layers need a window >= 1 token (model {self.name!r})")

    @property
    def sliding_layers(self) -> int:
        """Layers whose attention is a sliding window (``layer_types``)."""
        return sum(t == "sliding_attention" for t in self.layer_types)

    def is_sliding(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` (0-based) attends a sliding window."""
        return bool(self.layer_types) and self.layer_types[layer] == "sliding_attention"

    def key(self) -> dict[str, Any]:
        """The fields as a dict, for cache keys: the fields added later are left out at
        their defaults, so a key made before they existed is unchanged."""
        return {k: v for k, v in asdict(self).items()
                if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}

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
        """Decoder layers + final norm: the count Qwen2.5's model card calls non-embedding.

        Norms per layer: 2 of width d (Qwen2, Llama, Mistral); Qwen3 adds q and k norms of
        ``head_dim``; Gemma 3 has 4 of width d (before and after attention and MLP) and
        the q and k norms."""
        d = self.hidden_size
        bias = (self.d_attn + 2 * self.d_kv) if self.qkv_bias else 0
        norms = {"gemma3_text": 4 * d + 2 * self.head_dim,
                 "qwen3": 2 * d + 2 * self.head_dim}.get(self.model_type, 2 * d)
        return self.num_layers * (self.layer_linear_params + bias + norms) + d

    @property
    def total_params(self) -> int:
        """Every parameter: embedding, layers, final norm and head."""
        return self.vocab_size * self.hidden_size + self.non_embedding_params + self.head_params

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> ModelShape:
        """Build from a ``race/conf/model/*.yaml`` entry (unknown keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in entry.items() if k in names and v is not None})

    @classmethod
    def from_hf_config(cls, config: Any, name: str = "", head: str = "lm") -> ModelShape:
        """Build from a Hugging Face config object, a ``config.json`` path, or its dict.

        Read, not assumed: ``model_type``, ``attention_bias`` (Qwen2, which has no such
        key, has q/k/v biases), ``layer_types`` / ``sliding_window`` (a Mistral-style
        config without ``layer_types`` slides on every layer), ``head_dim``, tied
        embeddings. What RACE cannot count is refused (:func:`uncounted`).

        Raises:
            UncountedArchitecture: experts, an unknown ``model_type`` or attention kind.
        """
        if isinstance(config, (str, Path)):
            path = Path(config)
            path = path / "config.json" if path.is_dir() else path
            config = json.loads(path.read_text())
        get = config.get if isinstance(config, Mapping) else (lambda k, default=None:
                                                              getattr(config, k, default))
        heads = get("num_attention_heads")
        hidden = get("hidden_size")
        model_type = get("model_type") or ""
        label = name or get("_name_or_path", "") or model_type or "model"
        uncounted(get, label)
        bias = get("attention_bias")
        layer_types = tuple(get("layer_types") or ())
        window = get("sliding_window") or 0
        if not layer_types and window and get("use_sliding_window", True):
            layer_types = ("sliding_attention",) * (get("num_hidden_layers") or 0)
        if all(t == "full_attention" for t in layer_types):
            layer_types, window = (), 0  # nothing slides: the window is never used
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
            qkv_bias=bool(bias) if bias is not None else model_type in ("", "qwen2"),
            model_type=model_type,
            sliding_window=window,
            layer_types=layer_types,
        )


def uncounted(get: Any, model: str) -> None:
    """Refuse a config whose FLOPs RACE would get wrong: mixture-of-experts layers (any of
    ``EXPERT_KEYS``), a ``model_type`` outside ``MODEL_TYPES``, attention that is not
    causal full or sliding-window. ``get(key)``: the config's value or None."""
    for key in EXPERT_KEYS:
        value = get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            raise UncountedArchitecture(
                model, key, value, "a mixture of experts, whose FLOPs per token depend on "
                "the routing, which RACE does not count (it would price it as dense)",
                "use a dense model")
    model_type = get("model_type") or ""
    if model_type and model_type not in MODEL_TYPES:
        raise UncountedArchitecture(
            model, "model_type", model_type, f"RACE counts the decoders of "
            f"{', '.join(MODEL_TYPES)} only", "use one of those families (a text-only "
            "Gemma 3 is gemma3_text)")
    unknown = sorted(set(get("layer_types") or ()) - set(ATTENTION_TYPES))
    if unknown:
        raise UncountedArchitecture(model, "layer_types", unknown[0], "an attention kind "
                                    "RACE does not count", f"use a model whose layers are "
                                    f"{' or '.join(ATTENTION_TYPES)}")
    if get("use_bidirectional_attention"):
        raise UncountedArchitecture(model, "use_bidirectional_attention", True, "attention "
                                    "that is not causal", "use a causal decoder")


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
    # tokens the reward model scores per trace beyond its prompt and completion: its
    # input format's overhead plus the step tags (race.core.flops.reward_extra_tokens)
    extra_tokens_per_trace: int = 0
    # PRM: reasoning steps scored per trace, one step tag each (what cards print)
    steps_per_trace: int = 0
