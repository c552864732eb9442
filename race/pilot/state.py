"""A pilot's progress as data: the FLOP ledger, the state saved every few steps, what an
unfinished pilot spent, and the summary (the only builder of a pilot's ``summary.json``: a
:class:`~race.store.records.PilotSummary`).

A saved state (``<cell>/state/step-<steps>/``) is what exact resume rests on: a rerun of
the same spec continues from it, and its FLOPs, steps and ``metrics.jsonl`` equal those
of a run that was never interrupted. Torch is imported only where tensors are saved or
loaded, so a sweep process reads states (:func:`spent_so_far`) without it.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from race.core import flops
from race.core.specs import RunSpec
from race.errors import UsageError
from race.pilot.budget import checkpoints_after
from race.store.cell import SPEC, CellDir
from race.store.io import read_json, read_jsonl, write_folder, write_json
from race.store.records import EvalRow, EvalScore, PilotSession, PilotSummary

PHASES = ("rollout", "learning", "feedback", "eval")
# the ledger's conventions: the two formulas, and FlopCounterMode when accounting.measure
LEDGER_CONVENTIONS = (*flops.CONVENTIONS, "measured")
STATE_FORMAT = 2  # bump when the layout of state/ changes: older states are then refused
# GRPO steps between saved states when nobody says (launcher.checkpoint_every)
CHECKPOINT_EVERY = 5


def _zeros() -> dict[str, dict[str, float]]:
    return {c: dict.fromkeys(PHASES, 0.0) for c in LEDGER_CONVENTIONS}


@dataclass
class Ledger:
    """Cumulative FLOPs by phase (per convention), wall seconds by phase, redone FLOPs.

    ``flops`` is what this pilot's progress cost: a resumed pilot's equals an
    uninterrupted one's. ``redone`` is compute that was spent and then spent again: work an
    interrupted run did after its last saved state, which its resumption repeats.
    """

    flops: dict[str, dict[str, float]] = field(default_factory=_zeros)
    wall_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        (*PHASES, "load", "other"), 0.0))
    redone: dict[str, dict[str, float]] = field(default_factory=_zeros)
    # phases with work FlopCounterMode could not see (a vLLM engine runs outside torch's
    # dispatcher): their measured FLOPs are "not measured", never 0
    unmeasured: list[str] = field(default_factory=list)

    def charged(self, convention: str) -> float:
        f = self.flops[convention]
        return f["rollout"] + f["learning"] + f["feedback"]

    def add(self, phase: str, model: float, executed: float,
            measured: float | None = 0.0) -> None:
        """Count one piece of work; ``measured=None``: its FLOPs could not be measured."""
        self.flops["model"][phase] += model
        self.flops["executed"][phase] += executed
        if measured is None:
            if phase not in self.unmeasured:
                self.unmeasured.append(phase)
        else:
            self.flops["measured"][phase] += measured

    def measured(self) -> dict[str, float | None]:
        """Measured FLOPs by phase, None where some of the phase's work was not measured."""
        return {p: None if p in self.unmeasured else v
                for p, v in self.flops["measured"].items()}

    def snapshot(self) -> dict[str, dict[str, float]]:
        """A copy of ``flops`` (what a metrics row records)."""
        return {c: dict(v) for c, v in self.flops.items()}

    def add_redone(self, before: dict[str, dict[str, float]]) -> None:
        """Record as redone what an earlier run spent beyond this ledger (``before``: its
        cumulative FLOPs when it stopped)."""
        for convention, phases in before.items():
            for phase, value in phases.items():
                extra = value - self.flops.get(convention, {}).get(phase, 0.0)
                if extra > 0:
                    self.redone[convention][phase] += extra


class StopRequested(Exception):  # noqa: N818 (a request, not an error)
    """The pilot saved its state at a step boundary and stopped because it was asked to
    (a scheduler's time-limit warning or a preemption signal); rerun it to continue."""

    def __init__(self, steps: int):
        super().__init__(f"stopped on request after step {steps}; its state is saved")
        self.steps = steps


def pilot_summary(spec: RunSpec, ledger: Ledger, steps: int, evals: list[dict],
                  status: str, error: str | None, resumed_from_step: int | None, *,
                  session: PilotSession | None = None,
                  recovered_from: str | None = None) -> PilotSummary:
    """What a cell's summary holds; the only builder of a pilot's (lost jobs included).

    Args:
        evals: the pilot's eval rows of ``metrics.jsonl``, in order: the last of each
            target is its final score, checkpoint 0's its initial one.
        session: where and how a finished pilot ran (None: it did not finish).
        recovered_from: for a pilot that ended without a summary, what its FLOPs were
            read from.
    """
    rows = [EvalRow.from_json(r) for r in evals]
    final = {r.target: EvalScore(r.accuracy, r.mean_reward, r.checkpoint) for r in rows}
    initial = {r.target: EvalScore(r.accuracy, r.mean_reward)
               for r in rows if r.checkpoint == 0.0}
    charged = ledger.charged(spec.convention)
    redone = ledger.redone[spec.convention]
    return PilotSummary(
        status=status, error=error, cell_id=spec.cell_id, budget_flops=spec.budget_flops,
        convention=spec.convention, total_flops=charged,
        flops=dict(ledger.flops[spec.convention]), flops_model=ledger.flops["model"],
        flops_executed=ledger.flops["executed"],
        flops_measured=ledger.measured() if spec.measure else None,
        redone=dict(redone), redone_flops=sum(redone.values()),
        unspent_flops=max(0.0, spec.budget_flops - charged), wall_s=ledger.wall_s,
        steps=steps, final_eval=final, initial_eval=initial,
        resumed_from_step=resumed_from_step, session=session, recovered_from=recovered_from)


def build_summary(spec: RunSpec, ledger: Ledger, steps: int, evals: list[dict], status: str,
                  error: str | None, resumed_from_step: int | None, **session) -> dict:
    """:func:`pilot_summary` of a finished pilot as ``summary.json`` holds it (what
    :func:`race.pilot.loop.run_pilot` writes and returns); ``session``: the fields of
    :class:`~race.store.records.PilotSession`."""
    return pilot_summary(spec, ledger, steps, evals, status, error, resumed_from_step,
                         session=PilotSession(**session) if session else None).to_json()


@dataclass
class PilotState:
    """A pilot after its last completed step: everything it needs to continue from there."""

    steps: int
    ledger: Ledger
    rows: list[dict]  # what metrics.jsonl holds at this step
    evals: list[dict]
    timing: list[dict]  # what timing.jsonl holds at this step
    pending: list[float]  # eval checkpoints (budget fractions) not reached yet
    learner: dict = field(default_factory=dict)  # LoraLearner.state_dict()
    torch_rng: dict = field(default_factory=dict)  # {"cpu": state, "cuda": [state per GPU]}


def torch_rng() -> dict:
    """Torch's global RNG states (the CPU's, and each initialised GPU's)."""
    import torch

    # is_initialized, not is_available: a CPU pilot on a GPU node must not open a context
    return {"cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []}


def save_state(state_dir: Path, spec: RunSpec, state: PilotState) -> Path:
    """Save ``state`` atomically as ``state_dir/step-<steps>/`` and delete older states.

    The folder holds ``state.json`` (cell_id, steps, the ledger's FLOPs and wall seconds,
    rows, evals, timing, pending eval checkpoints), ``learner.pt`` (LoRA weights, AdamW
    state, shuffle RNG) and ``rng.pt`` (torch's global RNG). Python's and numpy's global
    RNGs are left out: the pilot draws from neither (tasks and the learner own seeded
    ``random.Random`` instances). Returns the new folder.
    """
    import torch

    def fill(tmp: Path) -> None:
        # JSON keeps every float exactly (repr round-trips), so restored rows rewrite
        # metrics.jsonl byte for byte
        write_json(tmp / "state.json", {
            "format": STATE_FORMAT, "cell_id": spec.cell_id, "steps": state.steps,
            "ledger": asdict(state.ledger), "rows": state.rows, "evals": state.evals,
            "timing": state.timing, "pending": state.pending})
        for name, obj in (("learner.pt", state.learner), ("rng.pt", state.torch_rng)):
            # serialised in memory, then written: a full disk is then an OSError (ENOSPC),
            # not torch's "unexpected pos" RuntimeError
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            (tmp / name).write_bytes(buffer.getvalue())

    state_dir = Path(state_dir)
    folder = state_dir / f"step-{state.steps:06d}"
    write_folder(folder, fill)
    for old in state_dir.iterdir():  # older states and temp folders of interrupted saves
        if old.is_dir() and old != folder:
            shutil.rmtree(old)
    return folder


def _state_meta(state_dir: Path, spec: RunSpec) -> tuple[Path, dict] | None:
    """The newest saved state of ``spec`` under ``state_dir``: its folder and state.json.

    None when there is none, or when it is another spec's. Reads no tensors (no torch).
    """
    saved = sorted(p for p in Path(state_dir).glob("step-*") if p.is_dir())
    if not saved:
        return None
    folder = saved[-1]
    try:
        meta = read_json(folder / "state.json")
    except (OSError, ValueError) as error:
        raise UsageError(f"{folder}: unreadable pilot state ({type(error).__name__}: "
                         f"{error}); delete {state_dir} to rerun the cell from the start"
                         ) from error
    if meta.get("cell_id") != spec.cell_id:
        return None  # another spec's state: never resumed into this one
    if meta.get("format") != STATE_FORMAT:
        raise UsageError(f"{folder}: pilot state format {meta.get('format')}, this version "
                         f"reads {STATE_FORMAT}; delete {state_dir} to rerun the cell from "
                         f"the start")
    return folder, meta


def load_state(state_dir: Path, spec: RunSpec) -> PilotState | None:
    """The newest state in ``state_dir``, or None when there is none or it is another spec's.

    Raises:
        UsageError: the newest state of this spec cannot be read; the message names the
            folder to delete to start the cell afresh.
    """
    found = _state_meta(state_dir, spec)
    if found is None:
        return None
    import torch

    folder, meta = found
    try:
        # on the CPU: load_state_dict moves every tensor to its parameter's device
        learner = torch.load(folder / "learner.pt", map_location="cpu", weights_only=True)
        torch_rng = torch.load(folder / "rng.pt", map_location="cpu", weights_only=True)
    except Exception as error:  # any unreadable file: the fix is the same
        raise UsageError(f"{folder}: unreadable pilot state ({type(error).__name__}: "
                         f"{error}); delete {state_dir} to rerun the cell from the start"
                         ) from error
    return PilotState(meta["steps"], Ledger(**meta["ledger"]), meta["rows"], meta["evals"],
                      meta["timing"], meta["pending"], learner, torch_rng)


def spent_so_far(spec: RunSpec, cell_dir: Path) -> tuple[Ledger, int, list[dict]]:
    """What an unfinished pilot (killed, lost, crashed) spent: its ledger, steps, evals.

    The newest saved state gives the ledger (redone FLOPs and seconds included); the last
    row of ``metrics.jsonl`` with cumulative FLOPs, written after every step and every
    evaluation, gives what was spent after that state. Reads no tensors (no torch).
    """
    cell = CellDir(cell_dir)
    found = _state_meta(cell.state, spec)
    ledger = Ledger(**found[1]["ledger"]) if found else Ledger()
    steps, evals = (found[1]["steps"], found[1]["evals"]) if found else (0, [])
    rows = metrics_rows(cell)
    last = next((r for r in reversed(rows) if "flops" in r), None)
    if last is not None and len(rows) > (len(found[1]["rows"]) if found else 0):
        # rows written after the state was saved (a step or an evaluation): newer
        ledger.flops = {c: dict.fromkeys(PHASES, 0.0) | last["flops"].get(c, {})
                        for c in LEDGER_CONVENTIONS}
        steps = max(steps, *(r["step"] for r in rows if r.get("kind") == "step"), 0)
        evals = [r for r in rows if r.get("kind") == "eval"]
    return ledger, steps, evals


def metrics_rows(cell: CellDir) -> list[dict]:
    """The rows of a pilot's metrics.jsonl ([] when absent; a torn last line is skipped)."""
    return read_jsonl(cell.metrics, skip_corrupt=True) if cell.metrics.is_file() else []


def unfinished_summary(spec: RunSpec, cell_dir: Path, error: str) -> dict:
    """The failed summary of a pilot that ended without writing one (killed, lost), as
    ``summary.json`` holds it."""
    ledger, steps, evals = spent_so_far(spec, cell_dir)
    return pilot_summary(spec, ledger, steps, evals, "failed", error, None,
                         recovered_from="state/ and metrics.jsonl").to_json()


def settle_other(ledger: Ledger, prior_s: dict[str, float], session_s: float) -> Ledger:
    """A copy of ``ledger`` whose ``other`` wall seconds take the rest of this session.

    ``prior_s`` is the wall clock a resumed pilot started from (zeros on a fresh start):
    ``other`` grows by the session's seconds that no phase claimed, checkpoint saves
    included.
    """
    claimed = sum(ledger.wall_s[k] - prior_s[k] for k in ledger.wall_s if k != "other")
    return Ledger(ledger.flops, ledger.wall_s | {"other": prior_s["other"] + session_s
                                                 - claimed}, ledger.redone, ledger.unmeasured)


def continued_state(spec: RunSpec, cell_dir: Path) -> PilotState | None:
    """The final state of the cell ``spec`` continues (a ladder rung resumes the rung
    below from where it ended), or None when ``spec`` continues nothing.

    Its checkpoints still to come are this spec's above the budget of the cell below
    (whose end was evaluated already).

    Raises:
        UsageError: that cell is not of this lineage, not finished ok, or kept no final
            state; the message says what to rerun.
    """
    if not spec.continues:
        return None
    below = CellDir(Path(cell_dir).parent / spec.continues)
    try:
        earlier = RunSpec.from_dict(read_json(below.spec))
    except (OSError, ValueError, TypeError) as error:
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, which has no "
                         f"readable {SPEC} in {below.path.parent} ({error}); rerun the sweep "
                         f"from its first rung") from error
    if earlier.lineage_id != spec.lineage_id or earlier.budget_flops >= spec.budget_flops:
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, another cell "
                         f"(different knobs, or a budget not below {spec.budget_flops:.3g})")
    try:
        state = load_state(below.state, earlier) if below.is_ok() else None
    except UsageError as error:  # deleting its state alone would leave an ok cell stateless
        cause = error.__cause__ or error
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, whose final state "
                         f"in {below.state} cannot be read ({type(cause).__name__}: {cause}); "
                         f"remove the damaged cell folder "
                         f"{below.path} so that its rung reruns, then rerun the sweep"
                         ) from error
    if state is None:
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, which has no "
                         f"final state (not finished ok, or run without keeping it); rerun "
                         f"the sweep: the rung below runs again first")
    state.pending = checkpoints_after(spec.checkpoints, spec.budget_flops,
                                      earlier.budget_flops)
    return state
