"""The typed records of a cell's results files: :class:`PilotSummary` (``summary.json``)
and :class:`EvalRow` (one ``kind: eval`` row of ``metrics.jsonl``).

Each is a frozen dataclass whose ``to_json()`` gives exactly the dict the file holds (the
same keys, in the same order, the same values: ``write_json`` of it is byte for byte what
the writers wrote before these records existed), and whose ``from_json()`` reads any such
dict, older files included: a key an older writer left out reads as its default (None,
or an empty mapping), and a key this version does not know is kept, in order, in
``extra`` and written back.

Three writers fill a summary, each with its own tail after ``resumed_from_step``:

- a finished RACE pilot (``race.pilot.loop``): :class:`PilotSession`, where and how it ran;
- a pilot that ended without writing one (killed, lost; ``race.pilot.state``):
  ``recovered_from``, what its FLOPs were read from;
- another trainer's run (``race.integrations.trl``): :class:`ExternalRun`, its source,
  device and dtype (such a run has no budget of its own: no ``unspent_flops``).

Plain values only: no IO (``race.store.io`` reads and writes), no torch, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from race.core.specs import PhaseFlops

CHARGED = ("rollout", "learning", "feedback")


def phase_flops_from(values: Mapping[str, Any], name: str = "flops") -> PhaseFlops:
    """FLOPs by phase as a results file holds them (``{phase: FLOPs}``) as a
    :class:`~race.core.shapes.PhaseFlops`; None (a failed cell's empty cell) reads as nan.

    Raises:
        ValueError: a charged phase (rollout, learning, feedback) is missing; ``name``
            says which mapping lacked it.
    """
    missing = [p for p in CHARGED if p not in values]
    if missing:
        raise ValueError(f"{name} lacks the phase(s) {missing}: every charged phase "
                         f"(rollout, learning, feedback) is needed for rho")
    return PhaseFlops(*(_num(values.get(p, 0.0)) for p in (*CHARGED, "eval")))


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


# ---------------------------------------------------------------- evaluation


@dataclass(frozen=True, slots=True)
class EvalScore:
    """One target's score at a checkpoint, as a summary's ``final_eval`` / ``initial_eval``
    hold it (``checkpoint``: the budget fraction, final scores only)."""

    accuracy: float | None
    mean_reward: float | None
    checkpoint: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"accuracy": self.accuracy, "mean_reward": self.mean_reward}
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalScore:
        return cls(data.get("accuracy"), data.get("mean_reward"), data.get("checkpoint"))


@dataclass(frozen=True, slots=True)
class EvalRow:
    """One held-out evaluation of one target at one checkpoint (a ``kind: eval`` row of
    ``metrics.jsonl``, written by ``race.pilot.evaluate``).

    Attributes:
        checkpoint: the budget fraction it was scored at (0.0: the warm start).
        target: the held-out split (val, test, ood).
        accuracy: the share of ``correct`` problems.
        mean_reward: the reward's mean over the problems.
        correct: [problems] 1 or 0 per problem, in the problem set's order.
        problems: a hash of the problems scored (None: a row from before it was kept).
        flops: the ledger's cumulative FLOPs after it, ``{convention: {phase: FLOPs}}``
            (None: a row from before it was kept).
    """

    checkpoint: float
    target: str
    accuracy: float
    mean_reward: float
    correct: tuple[int, ...] = ()
    problems: str | None = None
    flops: Mapping[str, Mapping[str, float]] | None = None

    @property
    def n(self) -> int:
        """The problems it was scored on (0: unknown)."""
        return len(self.correct)

    def charged_flops(self, convention: str) -> float | None:
        """The charged FLOPs (rollout + learning + feedback) it was scored at, from its own
        ledger snapshot; None when it has none in ``convention``."""
        own = (self.flops or {}).get(convention)
        if not own:
            return None
        return float(sum(own.get(p, 0.0) or 0.0 for p in CHARGED))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "eval", "checkpoint": self.checkpoint,
                               "target": self.target}
        if self.problems is not None:
            out["problems"] = self.problems
        out |= {"accuracy": self.accuracy, "mean_reward": self.mean_reward,
                "correct": list(self.correct)}
        if self.flops is not None:
            out["flops"] = {c: dict(v) for c, v in self.flops.items()}
        return out

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> EvalRow:
        """An eval row of ``metrics.jsonl`` (``kind`` must be ``eval``)."""
        if row.get("kind") != "eval":
            raise ValueError(f"kind={row.get('kind')!r}: not an eval row of metrics.jsonl")
        return cls(row["checkpoint"], row["target"], row["accuracy"], row["mean_reward"],
                   tuple(row.get("correct", ())), row.get("problems"), row.get("flops"))


# ---------------------------------------------------------------- the summary's tails


@dataclass(frozen=True, slots=True)
class PilotSession:
    """Where and how a finished RACE pilot ran (its summary's keys after
    ``resumed_from_step``, in this order).

    Attributes:
        continued_from: ``{"cell_id", "steps"}`` of the ladder rung it continued, or None.
        device, dtype: where it ran and its base weights' dtype.
        engine: a vLLM engine's arguments as sized for the cell (None: another backend).
        weights: the weights each model loaded, ``{"policy": {"source", "revision"}}``.
        peak_flops: the FLOP/s MFU is measured against.
        peak_measured: whether ``peak_flops`` was measured (False: configured).
        throughput: per phase, ``{"flops_per_s", "mfu", "hfu", "peak_gib"}``.
        padding: per phase, executed over model FLOPs.
    """

    continued_from: dict[str, Any] | None = None
    device: str | None = None
    dtype: str | None = None
    engine: dict[str, Any] | None = None
    weights: dict[str, Any] | None = None
    peak_flops: float | None = None
    peak_measured: bool | None = None
    throughput: dict[str, dict[str, float | None]] | None = None
    padding: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PilotSession:
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class ExternalRun:
    """A run another trainer made, recorded in RACE's results contract (``source``:
    ``trl``)."""

    source: str
    device: str | None = None
    dtype: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "device": self.device, "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExternalRun:
        return cls(data["source"], data.get("device"), data.get("dtype"))


SESSION_KEYS = tuple(f.name for f in fields(PilotSession))


# ---------------------------------------------------------------- the summary


@dataclass(frozen=True, slots=True)
class PilotSummary:
    """What a cell's ``summary.json`` holds: the verdict, FLOPs and seconds by phase,
    steps and evals (docs/design.md, results contract).

    Attributes:
        status: ``ok`` or ``failed``.
        error: why it failed (None: ok).
        cell_id: the cell's id.
        budget_flops: its budget, in ``convention``.
        convention: the convention charged (``model`` or ``executed``).
        total_flops: charged FLOPs (rollout + learning + feedback) in ``convention``.
        flops: FLOPs by phase in ``convention`` (eval included, not charged).
        flops_model, flops_executed: FLOPs by phase in each formula's convention.
        flops_measured: FlopCounterMode's FLOPs by phase (a phase it could not see: None);
            None when not measured.
        redone: FLOPs by phase spent twice (work after the last saved state of an
            interrupted run), in ``convention``; ``redone_flops`` their sum.
        unspent_flops: the budget left (None: not recorded, a run without a budget).
        wall_s: wall seconds by phase (``load`` and ``other`` too).
        steps: GRPO steps taken.
        final_eval: per target, the last checkpoint's score.
        initial_eval: per target, the warm start's score (checkpoint 0).
        resumed_from_step: the step a saved state was resumed from (None: none).
        session: a finished pilot's tail (None: another writer).
        recovered_from: a pilot that ended without a summary: where its FLOPs were read.
        external: another trainer's run (None: a RACE pilot).
        extra: keys this version does not know, as read (written back after the rest).
    """

    status: str
    error: str | None = None
    cell_id: str = ""
    budget_flops: float = 0.0
    convention: str = "model"
    total_flops: float = 0.0
    flops: dict[str, float] = field(default_factory=dict)
    flops_model: dict[str, float] = field(default_factory=dict)
    flops_executed: dict[str, float] = field(default_factory=dict)
    flops_measured: dict[str, float | None] | None = None
    redone: dict[str, float] = field(default_factory=dict)
    redone_flops: float = 0.0
    unspent_flops: float | None = None
    wall_s: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    final_eval: dict[str, EvalScore] = field(default_factory=dict)
    initial_eval: dict[str, EvalScore] = field(default_factory=dict)
    resumed_from_step: int | None = None
    session: PilotSession | None = None
    recovered_from: str | None = None
    external: ExternalRun | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str | None:
        """Where it ran (None: not recorded)."""
        tail = self.session or self.external
        return tail.device if tail else None

    @property
    def dtype(self) -> str | None:
        """Its base weights' dtype (None: not recorded)."""
        tail = self.session or self.external
        return tail.dtype if tail else None

    def to_json(self) -> dict[str, Any]:
        """The dict ``summary.json`` holds (``race.store.io.write_json`` writes it)."""
        out: dict[str, Any] = {
            "status": self.status, "error": self.error, "cell_id": self.cell_id,
            "budget_flops": self.budget_flops, "convention": self.convention,
            "total_flops": self.total_flops, "flops": self.flops,
            "flops_model": self.flops_model, "flops_executed": self.flops_executed,
            "flops_measured": self.flops_measured, "redone": self.redone,
            "redone_flops": self.redone_flops}
        if self.unspent_flops is not None:
            out["unspent_flops"] = self.unspent_flops
        out |= {"wall_s": self.wall_s, "steps": self.steps,
                "final_eval": {t: s.to_json() for t, s in self.final_eval.items()},
                "initial_eval": {t: s.to_json() for t, s in self.initial_eval.items()},
                "resumed_from_step": self.resumed_from_step}
        if self.session is not None:
            out |= self.session.to_json()
        if self.recovered_from is not None:
            out["recovered_from"] = self.recovered_from
        if self.external is not None:
            out |= self.external.to_json()
        return out | self.extra

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PilotSummary:
        """A ``summary.json`` as read (any of its writers', older versions included)."""
        known = {f.name for f in fields(cls)} - {"session", "external", "extra"}
        values = {k: data[k] for k in known if k in data}
        for when in ("final_eval", "initial_eval"):
            values[when] = {t: EvalScore.from_json(s) for t, s in
                            (data.get(when) or {}).items()}
        tail = set(SESSION_KEYS)
        if "source" in data:
            values["external"] = ExternalRun.from_json(data)
            tail = {"source", "device", "dtype"}
        elif any(k in data for k in SESSION_KEYS):
            values["session"] = PilotSession.from_json(data)
        values["extra"] = {k: v for k, v in data.items() if k not in known and k not in tail}
        return cls(**values)
