"""The budgeted GRPO pilot: one allocation cell run until its FLOP budget is spent.

::

    while the next step fits in the budget:
        prompts <- task sampler                      (P prompts)
        completions <- rollout backend, G per prompt (rollout FLOPs from real token counts)
        rewards <- rule verifier | PRM               (feedback FLOPs)
        advantages <- group-normalised rewards
        mu epochs of clipped-ratio updates           (learning FLOPs, incl. old/ref passes)
        at FLOP checkpoints: evaluate every held-out target (eval FLOPs, not charged)

The ledger counts FLOPs from the tokens that happened, in both conventions, and charges
the budget in ``spec.convention``. ``metrics.jsonl`` holds only what is deterministic for a
seed (FLOPs, rewards, losses, evals), so two runs give identical files; wall seconds by
phase go to ``timing.jsonl`` beside it and to the summary. A step runs only if its worst
case (every completion at ``max_new_tokens``) fits, so a pilot never overspends.
``summary.json`` is written at the end, and also when the pilot fails (``status:
failed``, the error, and everything spent until then).

Every ``checkpoint_every`` steps the pilot saves its state under ``state/`` (LoRA weights,
optimizer, RNGs, ledger and rows). A rerun of the same spec -- a SLURM requeue after a
timeout or preemption, or a rerun after a crash -- continues from there, and its FLOPs,
steps and ``metrics.jsonl`` equal those of a run that was never interrupted: work done
after the last save is redone, never charged twice. ``state/`` is deleted once the pilot
finishes ok, and kept when it fails.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from race import flops, preflight, results
from race.budget import check_budget, last_step_cap, trace_token_limit, worst_step_flops
from race.catalog import load_model_shape
from race.devices import PhaseMeter, measure_peak_flops, resolve_device, resolve_dtype, throughput
from race.errors import PromptTooLong, RewardFormatTooLong, UsageError
from race.specs import RunSpec

PHASES = ("rollout", "learning", "feedback", "eval")
# the ledger's conventions: the two formulas, and FlopCounterMode when accounting.measure
LEDGER_CONVENTIONS = (*flops.CONVENTIONS, "measured")
STATE_FORMAT = 2  # bump when the layout of state/ changes: older states are then refused


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

    def charged(self, convention: str) -> float:
        f = self.flops[convention]
        return f["rollout"] + f["learning"] + f["feedback"]

    def add(self, phase: str, model: float, executed: float, measured: float = 0.0) -> None:
        self.flops["model"][phase] += model
        self.flops["executed"][phase] += executed
        self.flops["measured"][phase] += measured

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


@dataclass
class Components:
    """What a pilot runs with (built by :func:`build_components`, or given by tests)."""

    task: Any
    reward: Any
    learner: Any
    backend: Any
    tokenizer: Any


def build_components(spec: RunSpec, policy_folder: Path | None = None) -> Components:
    """Load the policy, wrap it in the LoRA learner, and build backend, task and reward.

    ``policy_folder`` overrides where the policy loads from (default: ``spec.policy_path``,
    else the warm-started tiny policy or the model's ``hf_id``). The base weights load in
    the pilot's dtype; the adapters are initialised on CPU in fp32 and only then moved to
    the pilot's device, so a seed gives the same adapters on every device.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.devices import resolve_device, resolve_dtype, torch_dtype
    from race.learner import LearnerConfig, LoraLearner
    from race.policies import build_tiny_policy, warm_start_recipe
    from race.rewards import build_reward
    from race.tasks import prompt_bound, with_chat_template

    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    shape = spec.policy or load_model_shape(spec.model)
    # the plan's own checks (race.preflight), so that the two never disagree
    inner_task = preflight.open_task(dict(spec.task), spec.eval_targets)
    folder = policy_folder or spec.policy_path or (
        build_tiny_policy(spec.model, recipe=warm_start_recipe(spec.model, dict(spec.task),
                                                               dict(spec.warmstart)))
        if shape.tokenizer == "race-char" else shape.hf_id)
    if preflight.is_local(str(folder)):
        preflight.check_policy_folder(folder, key=preflight.policy_key(spec))
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:  # many base checkpoints pad with their EOS
            tokenizer.pad_token = tokenizer.eos_token
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(dtype))
    except Exception as error:  # OSError, ValueError, safetensors' own error, ...
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise UsageError(f"model.hf_id={folder}: could not load the policy ({first}); point "
                      f"model.hf_id at a Hugging Face model folder or id") from error
    config = LearnerConfig(lora_rank=spec.lora_rank, lora_alpha=spec.lora_alpha,
                           lora_targets=spec.lora_targets, lr=spec.lr,
                           update_epochs=spec.update_epochs,
                           minibatch_size=spec.minibatch_size,
                           micro_batch_size=spec.micro_batch_size, tis_cap=spec.tis_cap,
                           clip_eps=spec.clip_eps, aggregation=spec.aggregation,
                           kl_coef=spec.kl_coef, temperature=spec.temperature)
    learner = LoraLearner(model, shape, config, pad_id=tokenizer.pad_token_id,
                          seed=spec.seed, measure=spec.measure, device=device)
    task = with_chat_template(inner_task, tokenizer)
    if spec.backend == "hf":
        from race.rollout.hf import HFBackend

        # on a GPU, evaluation generates in batches no larger than a step's (the memory
        # plan's); on CPU in one batch (memory is plentiful, each call costs overhead)
        rows = spec.prompts_per_step * spec.group_size if device != "cpu" else 0
        backend = HFBackend(learner.model, tokenizer, shape, learner.lora, batch_rows=rows,
                            measure=spec.measure)
    elif spec.backend == "vllm":
        from race.rollout.vllm import VLLMBackend, engine_size

        # sized from the cell: its longest prompt plus the cap, one step's P x G sequences
        size = engine_size(shape, dtype, max_new_tokens=spec.max_new_tokens,
                           prompt_tokens=prompt_bound(task, tokenizer,
                                                      ("train", *spec.eval_targets)),
                           sequences=spec.prompts_per_step * spec.group_size)
        backend = VLLMBackend(folder, shape, learner.lora, seed=spec.seed, dtype=dtype, **size)
    else:
        raise UsageError(f"pilot.backend={spec.backend!r}: use hf or vllm")
    reward = build_reward(dict(spec.reward), task, device=device, dtype=dtype,
                          shape=spec.reward_model,
                          family=(dict(spec.task), dict(spec.warmstart)))
    return Components(task, reward, learner, backend, tokenizer)


def _measuring(spec: RunSpec):
    """A FlopCounterMode when ``spec.measure`` (read ``get_total_flops()``), else None."""
    if not spec.measure:
        return None
    from race.measure import flop_counter

    return flop_counter()


def score(spec: RunSpec, parts: Components, ledger: Ledger, phase: str, out,
          prompts: list[str], answers: list[str]) -> list[float]:
    """Reward every completion of ``out``; charge what the reward model ran to ``phase``.

    Each trace may be scored on at most :func:`race.budget.trace_token_limit` tokens (the
    rewards refuse longer inputs before their model runs), which keeps the worst-case step
    a bound. What was scored is charged even when the reward fails midway.
    """
    limits = [trace_token_limit(spec, len(p), len(c))
              for p, c in zip(out.prompt_ids, out.completion_ids)]
    counter = _measuring(spec)
    try:
        with counter or contextlib.nullcontext():
            return parts.reward(prompts, list(out.texts), answer=answers,
                                token_limits=limits)
    finally:
        spent = parts.reward.pop_flops()
        ledger.add(phase, spent.model, spent.executed,
                   counter.get_total_flops() if counter is not None else 0.0)


def _longest_prompt(parts: Components, spec: RunSpec, prompts: list[str]) -> int:
    """Tokens of the longest prompt; PromptTooLong when it and the generation cap do not
    fit the policy's context window."""
    longest = max(len(parts.tokenizer(p, add_special_tokens=False)["input_ids"])
                  for p in prompts)
    context = getattr(getattr(parts.learner.model, "config", None),
                      "max_position_embeddings", None)
    if context and longest + spec.max_new_tokens > context:
        raise PromptTooLong(spec.model, longest, spec.max_new_tokens, context)
    return longest


def evaluate(spec: RunSpec, parts: Components, ledger: Ledger, fraction: float,
             meter: PhaseMeter | None = None) -> list[dict]:
    """Greedy accuracy and mean reward on every held-out target (eval FLOPs, uncharged).

    Each row carries the ledger's cumulative FLOPs after it (``flops``), as step rows do.
    Every checkpoint scores the same fixed problems of each target (the first ``n`` of
    its ``seed=10_000`` draw), so any two checkpoints compare paired, problem by problem:
    the target selection reads (``spec.select_target``) on ``spec.select_examples``
    problems, so rankings, promotions, guards and a pick's gain over the warm start rest
    on a small standard error; the other targets on ``eval_examples``.
    """
    rows = []
    with (meter or PhaseMeter()).phase("eval", ledger.wall_s):
        for target in spec.eval_targets:
            n = (max(spec.select_examples, spec.eval_examples)
                 if target == spec.select_target else spec.eval_examples)
            examples = parts.task.sample(target, n, seed=10_000)
            prompts = [ex.prompt for ex in examples]
            _longest_prompt(parts, spec, prompts)
            out = parts.backend.generate(prompts, n=1, max_new_tokens=spec.max_new_tokens,
                                         greedy=True)
            ledger.add("eval", out.flops_model, out.flops_executed, out.flops_measured or 0.0)
            answers = [ex.answer for ex in examples]
            problems = [ex.problem for ex in examples]
            rewards = score(spec, parts, ledger, "eval", out, problems, answers)
            correct = [parts.task.verify(t, a, p)
                       for t, a, p in zip(out.texts, answers, problems)]
            rows.append({"kind": "eval", "checkpoint": fraction, "target": target,
                         "problems": problem_set_id(prompts),
                         "accuracy": sum(correct) / len(correct),
                         "mean_reward": sum(rewards) / len(rewards),
                         "correct": [int(c) for c in correct], "flops": ledger.snapshot()})
    return rows


def problem_set_id(prompts: list[str]) -> str:
    """A short hash of the problems an evaluation scored, in order: two checkpoints with
    the same id scored the same problems (their ``correct`` lists pair up)."""
    import hashlib

    return hashlib.sha256("\0".join(prompts).encode()).hexdigest()[:12]


def _summary(spec: RunSpec, ledger: Ledger, steps: int, evals: list[dict], status: str,
             error: str | None, resumed_from_step: int | None, **extra) -> dict:
    """What ``summary.json`` holds; the only builder of it (lost jobs included)."""
    final = {}
    for row in evals:  # the last checkpoint of each target
        final[row["target"]] = {"accuracy": row["accuracy"], "mean_reward": row["mean_reward"],
                                "checkpoint": row["checkpoint"]}
    initial = {r["target"]: {"accuracy": r["accuracy"], "mean_reward": r["mean_reward"]}
               for r in evals if r["checkpoint"] == 0.0}
    charged = ledger.flops[spec.convention]
    redone = ledger.redone[spec.convention]
    return {"status": status, "error": error, "cell_id": spec.cell_id,
            "budget_flops": spec.budget_flops, "convention": spec.convention,
            "total_flops": ledger.charged(spec.convention),
            "flops": dict(charged), "flops_model": ledger.flops["model"],
            "flops_executed": ledger.flops["executed"],
            "flops_measured": ledger.flops["measured"] if spec.measure else None,
            "redone": dict(redone), "redone_flops": sum(redone.values()),
            "wall_s": ledger.wall_s, "steps": steps, "final_eval": final,
            "initial_eval": initial, "resumed_from_step": resumed_from_step} | extra


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


def _torch_rng() -> dict:
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
        results.write_json(tmp / "state.json", {
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
    results.write_folder(folder, fill)
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
        meta = results.read_json(folder / "state.json")
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
    cell_dir = Path(cell_dir)
    found = _state_meta(cell_dir / "state", spec)
    ledger = Ledger(**found[1]["ledger"]) if found else Ledger()
    steps, evals = (found[1]["steps"], found[1]["evals"]) if found else (0, [])
    rows = _rows(cell_dir / "metrics.jsonl")
    last = next((r for r in reversed(rows) if "flops" in r), None)
    if last is not None and len(rows) > (len(found[1]["rows"]) if found else 0):
        # rows written after the state was saved (a step or an evaluation): newer
        ledger.flops = {c: dict.fromkeys(PHASES, 0.0) | last["flops"].get(c, {})
                        for c in LEDGER_CONVENTIONS}
        steps = max(steps, *(r["step"] for r in rows if r.get("kind") == "step"), 0)
        evals = [r for r in rows if r.get("kind") == "eval"]
    return ledger, steps, evals


def _rows(path: Path) -> list[dict]:
    """The rows of a pilot's metrics.jsonl ([] when absent; a torn last line is skipped)."""
    return results.read_jsonl(path, skip_corrupt=True) if Path(path).is_file() else []


def unfinished_summary(spec: RunSpec, cell_dir: Path, error: str) -> dict:
    """The failed summary of a pilot that ended without writing one (killed, lost)."""
    ledger, steps, evals = spent_so_far(spec, cell_dir)
    return _summary(spec, ledger, steps, evals, "failed", error, None,
                    recovered_from="state/ and metrics.jsonl")


def _restore(parts: Components, state: PilotState, adapter_dir: Path) -> None:
    """Put a loaded state into the live learner, backend and torch RNG."""
    import torch

    parts.learner.load_state_dict(state.learner)
    torch.set_rng_state(state.torch_rng["cpu"])
    if state.torch_rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state.torch_rng["cuda"])
    if parts.backend.name != "hf":  # hf samples from the live model already
        parts.backend.load_adapter(parts.learner.save_adapter(adapter_dir))


def _settle_other(ledger: Ledger, prior_s: dict[str, float], session_s: float) -> Ledger:
    """A copy of ``ledger`` whose ``other`` wall seconds take the rest of this session.

    ``prior_s`` is the wall clock a resumed pilot started from (zeros on a fresh start):
    ``other`` grows by the session's seconds that no phase claimed, checkpoint saves
    included.
    """
    claimed = sum(ledger.wall_s[k] - prior_s[k] for k in ledger.wall_s if k != "other")
    return Ledger(ledger.flops, ledger.wall_s | {"other": prior_s["other"] + session_s
                                                 - claimed}, ledger.redone)


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
    below = Path(cell_dir).parent / spec.continues
    try:
        earlier = RunSpec.from_dict(results.read_json(below / "spec.json"))
    except (OSError, ValueError, TypeError) as error:
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, which has no "
                         f"readable spec.json in {below.parent} ({error}); rerun the sweep "
                         f"from its first rung") from error
    if earlier.lineage_id != spec.lineage_id or earlier.budget_flops >= spec.budget_flops:
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, another cell "
                         f"(different knobs, or a budget not below {spec.budget_flops:.3g})")
    state = load_state(below / "state", earlier) if _finished_ok(below) else None
    if state is None:
        raise UsageError(f"cell {spec.cell_id} continues {spec.continues}, which has no "
                         f"final state (not finished ok, or run without keeping it); rerun "
                         f"the sweep: the rung below runs again first")
    state.pending = [c for c in sorted(spec.checkpoints)
                     if c * spec.budget_flops > earlier.budget_flops * (1 + 1e-9)]
    return state


def run_pilot(spec: RunSpec, cell_dir: Path, *, components: Components | None = None,
              progress: Callable[[dict], None] | None = None,
              checkpoint_every: int = 5, stop: Callable[[], bool] | None = None,
              keep_final_state: bool = False) -> dict:
    """Run one cell to its budget; write spec.json, metrics.jsonl, summary.json.

    Args:
        spec: the cell.
        cell_dir: its results folder.
        components: prebuilt task, reward, learner and backend (default: built from spec).
        progress: called with each step's metrics row.
        checkpoint_every: save a resumable state under ``cell_dir/state/`` every this many
            GRPO steps (0: never). A state of this spec found there is resumed, whatever
            this value.
        stop: asked after every step; when it answers True the pilot saves its state at
            that step boundary and raises :class:`StopRequested` without a summary (a
            scheduler's warning before a time limit or a preemption; a rerun continues).
        keep_final_state: keep the state at the end of the budget (a ladder rung that a
            later rung may continue: ``spec.continues`` of that rung names this cell).

    A spec that ``continues`` another cell starts from that cell's final state: its
    steps, ledger and metrics rows carry over, so no FLOP is spent twice, and its summary
    counts the lineage's FLOPs from the warm start (``continued_from``: that cell's id and
    steps).

    Returns the summary (``resumed_from_step``: the step a saved state was resumed from,
    or None; ``redone``: FLOPs by phase that earlier, interrupted runs spent after their
    last saved state, spent again here). Failures are recorded (``status: failed``, with
    every FLOP the failed step ran) and re-raised only for bad input detected before
    anything ran (a budget that cannot buy one step, an unreadable state).
    """
    import torch

    from race.grpo import group_advantages
    from race.learner import Batch

    if checkpoint_every < 0:
        raise UsageError(f"launcher.checkpoint_every={checkpoint_every}: must be >= 0 (0: "
                         f"never save a resumable state)")
    cell_dir, state_dir = Path(cell_dir), Path(cell_dir) / "state"
    check_budget(spec, prompt_tokens=1)  # before any model loads or any file is written
    device = resolve_device(spec.device)  # pilot.device=cuda without CUDA: refused here
    dtype = resolve_dtype(spec.dtype, device)
    meter = PhaseMeter(device)
    engine = None  # a vLLM engine's arguments, as sized from this cell
    wall_start = time.perf_counter()
    state = load_state(state_dir, spec)
    resumed_from = state.steps if state else None
    below = continued_state(spec, cell_dir) if state is None else None
    continued_from = ({"cell_id": spec.continues, "steps": below.steps}
                      if below is not None else None)
    state = state or below
    # what an earlier run of this cell spent (killed, lost or failed: not finished ok)
    earlier = None if _finished_ok(cell_dir) else spent_so_far(spec, cell_dir)[0]
    results.write_json(cell_dir / "spec.json", spec.to_dict())
    if state is None:  # a rerun without a state of this spec starts the cell afresh
        shutil.rmtree(state_dir, ignore_errors=True)
        state = PilotState(0, Ledger(), [], [], [], sorted(spec.checkpoints))
    ledger, rows, evals, timing = state.ledger, state.rows, state.evals, state.timing
    if earlier is not None:  # it is redone from the state on (from scratch without one)
        ledger.redone = {c: dict.fromkeys(PHASES, 0.0) | earlier.redone.get(c, {})
                         for c in LEDGER_CONVENTIONS}
        ledger.add_redone(earlier.flops)
    steps, pending, written = state.steps, state.pending, len(rows)
    prior_s = dict(ledger.wall_s)  # a resumed pilot's seconds carry over
    # drop whatever a crashed or preempted run wrote after its last save
    results.write_jsonl(cell_dir / "metrics.jsonl", rows)
    results.write_jsonl(cell_dir / "timing.jsonl", timing)
    (cell_dir / "summary.json").unlink(missing_ok=True)  # running: no verdict yet

    def save(parts: Components) -> None:
        session_s = time.perf_counter() - wall_start
        save_state(state_dir, spec, PilotState(
            steps, _settle_other(ledger, prior_s, session_s), rows, evals, timing,
            pending, parts.learner.state_dict(), _torch_rng()))

    try:
        parts = components or build_components(spec)
        engine = {k: v for k, v in getattr(parts.backend, "engine_args", {}).items()
                  if k in ("max_model_len", "kv_cache_memory_bytes", "dtype")} or None
        check_reward_format(spec, parts.reward)
        if resumed_from is not None or continued_from is not None:
            _restore(parts, state, cell_dir / "adapter")
            if sum(ledger.redone["model"].values()):
                save(parts)  # the redone FLOPs survive a second interruption
        ledger.wall_s["load"] += time.perf_counter() - wall_start
        if resumed_from is None and continued_from is None:
            evals += evaluate(spec, parts, ledger, 0.0, meter)
            rows += evals[-len(spec.eval_targets):]
        while True:
            examples = parts.task.sample("train", spec.prompts_per_step,
                                         seed=spec.seed * 1_000_003 + steps)
            prompts = [ex.prompt for ex in examples]
            longest = _longest_prompt(parts, spec, prompts)
            remaining = spec.budget_flops - ledger.charged(spec.convention)
            cap = spec.max_new_tokens
            if worst_step_flops(spec, longest) > remaining:
                if steps == 0:
                    check_budget(spec, longest)  # raises: recorded as a failed pilot
                cap = last_step_cap(spec, longest, remaining)
                if cap < 1:
                    break
            with meter.phase("rollout", ledger.wall_s):
                out = parts.backend.generate(prompts, n=spec.group_size, max_new_tokens=cap,
                                             temperature=spec.temperature,
                                             seed=spec.seed * 7919 + steps)
            ledger.add("rollout", out.flops_model, out.flops_executed,
                       out.flops_measured or 0.0)
            answers = [examples[i].answer for i in out.prompt_index]
            problems = [examples[i].problem for i in out.prompt_index]
            with meter.phase("feedback", ledger.wall_s):
                rewards = score(spec, parts, ledger, "feedback", out, problems, answers)
            advantages = group_advantages(torch.tensor(rewards), spec.group_size,
                                          scale=spec.scale_rewards)
            before = dict(parts.learner.flops)
            with meter.phase("learning", ledger.wall_s):
                try:
                    sampled = out.logprobs if parts.backend.name != "hf" else None
                    stats = parts.learner.update(Batch(out.prompt_ids, out.completion_ids,
                                                       tuple(advantages.tolist()), sampled),
                                                 step=steps)
                finally:  # a diverged update still ran its old/reference passes
                    ledger.add("learning", *(parts.learner.flops[k] - before[k]
                                             for k in ("model", "executed", "measured")))
                if parts.backend.name != "hf":  # hf samples from the live model already
                    parts.backend.load_adapter(parts.learner.save_adapter(cell_dir / "adapter"))
            steps += 1
            correct = [parts.task.verify(t, a, p)
                       for t, a, p in zip(out.texts, answers, problems)]
            row = {"kind": "step", "step": steps, "train_reward": sum(rewards) / len(rewards),
                   "train_accuracy": sum(correct) / len(correct),
                   "completion_tokens": out.completion_tokens, "max_new_tokens": cap,
                   **{k: round(v, 6) for k, v in precursors(out).items()},
                   "charged_flops": ledger.charged(spec.convention),
                   "flops": ledger.snapshot(),
                   } | {k: round(v, 6) for k, v in stats.items()}
            rows.append(row)
            timing.append({"step": steps, "wall_s": dict(ledger.wall_s)})
            fraction = ledger.charged(spec.convention) / spec.budget_flops
            while pending and fraction >= pending[0] and pending[0] < 1.0:
                evals += evaluate(spec, parts, ledger, pending.pop(0), meter)
                rows += evals[-len(spec.eval_targets):]
            for new in rows[written:]:
                results.append_jsonl(cell_dir / "metrics.jsonl", new)
            written = len(rows)
            results.append_jsonl(cell_dir / "timing.jsonl", timing[-1])
            asked_to_stop = stop is not None and stop()
            if asked_to_stop or (checkpoint_every and steps % checkpoint_every == 0):
                save(parts)
            if asked_to_stop:
                raise StopRequested(steps)
            if progress:
                progress(row)
        if pending:  # the end of the budget is the last checkpoint
            evals += evaluate(spec, parts, ledger, 1.0, meter)
            rows += evals[-len(spec.eval_targets):]
        status, error = "ok", None
        if keep_final_state:  # a later rung continues from here
            save(parts)
    except StopRequested:
        raise  # state saved at this step boundary; no summary: the cell is not finished
    except Exception as exc:  # a failed pilot is recorded, never lost
        full = results.no_space(exc, cell_dir)
        if full is not None:  # a full disk is not the cell's failure: stop, resume later
            raise full from exc
        status = "failed"
        error = f"{type(exc).__name__}: {exc}"
        results.write_text(cell_dir / "error.txt", traceback.format_exc())
        last = next((r["flops"] for r in reversed(rows) if "flops" in r), Ledger().flops)
        if ledger.snapshot() != last:
            # what the failed step ran before it stopped, so that the file's last
            # cumulative FLOPs are the summary's
            rows.append({"kind": "failed", "step": steps + 1, "error": error,
                         "charged_flops": ledger.charged(spec.convention),
                         "flops": ledger.snapshot()})
    ledger = _settle_other(ledger, prior_s, time.perf_counter() - wall_start)
    results.write_jsonl(cell_dir / "metrics.jsonl", rows)  # the whole file, atomically
    peak = spec.peak_flops or measure_peak_flops(device, dtype)
    summary = _summary(spec, ledger, steps, evals, status, error, resumed_from,
                       continued_from=continued_from, device=device, dtype=dtype, engine=engine,
                       peak_flops=peak, peak_measured=not spec.peak_flops,
                       throughput=throughput(ledger.flops["model"], ledger.flops["executed"],
                                             ledger.wall_s, peak, meter.peak_gib),
                       padding={p: ledger.flops["executed"][p] / ledger.flops["model"][p]
                                for p in PHASES if ledger.flops["model"][p]})
    results.write_json(cell_dir / "summary.json", summary)
    if status == "ok" and not keep_final_state:  # a failed pilot keeps its state (resume)
        shutil.rmtree(state_dir, ignore_errors=True)  # AdamW moments: twice the adapter
    parts = None  # noqa: F841 (the models go before the next pilot of this slot starts)
    release_memory(device)
    return summary


def release_memory(device: str) -> None:
    """Free what a finished pilot held: collect its models and, on CUDA, return the cached
    blocks to the driver (a slot's next pilot starts from the same memory). A vLLM
    engine stays open for the next pilot; ``race.rollout.vllm.close_engine`` ends it."""
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def precursors(out) -> dict[str, float]:
    """Per-step signals that often come before a collapse (race.guards reads them):
    ``truncation_rate``, the share of completions cut at the cap, and ``entropy``, the
    mean negative log-likelihood of the sampled tokens (nats/token, an estimate of the
    sampling policy's entropy)."""
    tokens = [lp for row in out.logprobs for lp in row]
    return {"truncation_rate": 1 - sum(out.finished) / max(1, len(out.finished)),
            "entropy": -sum(tokens) / len(tokens) if tokens else 0.0}


def _finished_ok(cell_dir: Path) -> bool:
    try:
        return results.read_json(Path(cell_dir) / "summary.json").get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        return False


def check_reward_format(spec: RunSpec, reward: Any) -> None:
    """Refuse a reward model whose real input format adds more tokens per trace than the
    budget's worst case assumes (:class:`~race.errors.RewardFormatTooLong`)."""
    measure = getattr(reward, "overhead_tokens", None)
    if measure is None:
        return
    configured = int(dict(spec.reward).get("overhead_tokens") or 0)
    measured = measure()
    if measured > configured:
        raise RewardFormatTooLong(dict(spec.reward)["name"], configured, measured)
