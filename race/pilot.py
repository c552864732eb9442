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

import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from race import flops, results
from race.catalog import load_model_shape
from race.specs import LoraShape, ModelShape, RewardShape, RunSpec

PHASES = ("rollout", "learning", "feedback", "eval")
STATE_FORMAT = 1  # bump when the layout of state/ changes: older states are then refused


@dataclass
class Ledger:
    """Cumulative FLOPs by phase (per convention) and wall seconds by phase."""

    flops: dict[str, dict[str, float]] = field(default_factory=lambda: {
        c: dict.fromkeys(PHASES, 0.0) for c in (*flops.CONVENTIONS, "measured")})
    wall_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        (*PHASES, "load", "other"), 0.0))

    def charged(self, convention: str) -> float:
        f = self.flops[convention]
        return f["rollout"] + f["learning"] + f["feedback"]

    def add(self, phase: str, model: float, executed: float, measured: float = 0.0) -> None:
        self.flops["model"][phase] += model
        self.flops["executed"][phase] += executed
        self.flops["measured"][phase] += measured


def last_step_cap(spec: RunSpec, prompt_tokens: int, remaining_flops: float) -> int:
    """The largest generation cap whose worst-case step fits ``remaining_flops`` (0: none).

    The final step of a pilot shortens its completions rather than leaving the budget
    unspent, which keeps underspend to a fraction of one short step.
    """
    low, high = 0, spec.max_new_tokens
    while low < high:
        mid = (low + high + 1) // 2
        if worst_step_flops(spec, prompt_tokens, mid) <= remaining_flops:
            low = mid
        else:
            high = mid - 1
    return low


class BudgetTooSmall(ValueError):
    """The budget cannot buy one GRPO step of this cell."""


@lru_cache(maxsize=64)
def _shapes(spec: RunSpec) -> tuple[ModelShape, RewardShape]:
    reward = dict(spec.reward)
    model = load_model_shape(reward["model"]) if reward.get("model") else None
    # the tiny PRM scores the completion's lines plus one closing newline: one extra token
    tags = 1 if reward["kind"] == "prm" else 0
    return load_model_shape(spec.model), RewardShape(reward["name"], reward["kind"], model,
                                                     steps_per_trace=tags)


def worst_step_flops(spec: RunSpec, prompt_tokens: int, max_new_tokens: int = 0) -> float:
    """A step's cost with every completion at the cap (an upper bound), in FLOPs."""
    policy, reward_shape = _shapes(spec)
    cap = max_new_tokens or spec.max_new_tokens
    step = flops.grpo_step_flops(
        policy, reward_shape, prompts_per_step=spec.prompts_per_step,
        group_size=spec.group_size, prompt_tokens=prompt_tokens,
        completion_tokens=cap, max_new_tokens=cap,
        update_epochs=spec.update_epochs, minibatch_size=spec.minibatch_size or None,
        kl_coef=spec.kl_coef, lora=LoraShape(spec.lora_rank, spec.lora_targets),
        convention=spec.convention)
    return step.total


def check_budget(spec: RunSpec, prompt_tokens: int) -> None:
    """Refuse, before any model loads, a budget that cannot buy one step."""
    cheapest = worst_step_flops(spec, prompt_tokens)
    if spec.budget_flops < cheapest:
        raise BudgetTooSmall(
            f"budget={spec.budget_flops:.3g}: this cell's pilot cannot buy one GRPO step "
            f"(the cheapest costs up to {cheapest:.3g} FLOPs, {spec.convention} "
            f"convention); raise budget or pilot.fraction, or shrink grid.group_size / "
            f"grid.prompts_per_step / grid.max_new_tokens")


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
    else the warm-started tiny policy or the model's ``hf_id``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.learner import LearnerConfig, LoraLearner
    from race.policies import build_tiny_policy
    from race.rewards import build_reward
    from race.tasks import build_task

    shape = load_model_shape(spec.model)
    folder = policy_folder or spec.policy_path or (
        build_tiny_policy(spec.model) if shape.tokenizer == "race-char" else shape.hf_id)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.padding_side = "left"
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise OSError(f"model.hf_id={folder}: could not load the policy ({first}); point "
                      f"model.hf_id at a Hugging Face model folder or id") from error
    config = LearnerConfig(lora_rank=spec.lora_rank, lora_alpha=spec.lora_alpha,
                           lora_targets=spec.lora_targets, lr=spec.lr,
                           update_epochs=spec.update_epochs,
                           minibatch_size=spec.minibatch_size, clip_eps=spec.clip_eps,
                           kl_coef=spec.kl_coef, temperature=spec.temperature)
    learner = LoraLearner(model, shape, config, pad_id=tokenizer.pad_token_id,
                          seed=spec.seed, measure=spec.measure)
    if spec.backend == "hf":
        from race.rollout.hf import HFBackend

        backend = HFBackend(learner.model, tokenizer, shape, learner.lora,
                            measure=spec.measure)
    elif spec.backend == "vllm":
        from race.rollout.vllm import VLLMBackend

        backend = VLLMBackend(folder, shape, learner.lora, seed=spec.seed)
    else:
        raise ValueError(f"pilot.backend={spec.backend!r}: use hf or vllm")
    task = build_task(dict(spec.task))
    return Components(task, build_reward(dict(spec.reward), task), learner, backend,
                      tokenizer)


def evaluate(spec: RunSpec, parts: Components, ledger: Ledger, fraction: float) -> list[dict]:
    """Greedy accuracy and mean reward on every held-out target (eval FLOPs, uncharged)."""
    rows = []
    start = time.perf_counter()
    for target in spec.eval_targets:
        examples = parts.task.sample(target, spec.eval_examples, seed=10_000)
        prompts = [ex.prompt for ex in examples]
        out = parts.backend.generate(prompts, n=1, max_new_tokens=spec.max_new_tokens,
                                     greedy=True)
        answers = [ex.answer for ex in examples]
        rewards = parts.reward(prompts, list(out.texts), answer=answers)
        spent = parts.reward.pop_flops()
        ledger.add("eval", out.flops_model + spent.model, out.flops_executed + spent.executed,
                   (out.flops_measured or 0.0))
        correct = [parts.task.verify(t, a) for t, a in zip(out.texts, answers)]
        rows.append({"kind": "eval", "checkpoint": fraction, "target": target,
                     "accuracy": sum(correct) / len(correct),
                     "mean_reward": sum(rewards) / len(rewards),
                     "correct": [int(c) for c in correct]})
    ledger.wall_s["eval"] += time.perf_counter() - start
    return rows


def _summary(spec: RunSpec, ledger: Ledger, steps: int, evals: list[dict], status: str,
             error: str | None, resumed_from_step: int | None) -> dict:
    final = {}
    for row in evals:  # the last checkpoint of each target
        final[row["target"]] = {"accuracy": row["accuracy"], "mean_reward": row["mean_reward"],
                                "checkpoint": row["checkpoint"]}
    initial = {r["target"]: {"accuracy": r["accuracy"], "mean_reward": r["mean_reward"]}
               for r in evals if r["checkpoint"] == 0.0}
    model = ledger.flops[spec.convention]
    return {"status": status, "error": error, "cell_id": spec.cell_id,
            "budget_flops": spec.budget_flops, "convention": spec.convention,
            "total_flops": ledger.charged(spec.convention),
            "flops": dict(model), "flops_model": ledger.flops["model"],
            "flops_executed": ledger.flops["executed"],
            "flops_measured": ledger.flops["measured"] if spec.measure else None,
            "wall_s": ledger.wall_s, "steps": steps, "final_eval": final,
            "initial_eval": initial, "resumed_from_step": resumed_from_step}


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
        torch.save(state.learner, tmp / "learner.pt")
        torch.save(state.torch_rng, tmp / "rng.pt")

    state_dir = Path(state_dir)
    folder = state_dir / f"step-{state.steps:06d}"
    results.write_folder(folder, fill)
    for old in state_dir.iterdir():  # older states and temp folders of interrupted saves
        if old.is_dir() and old != folder:
            shutil.rmtree(old)
    return folder


def load_state(state_dir: Path, spec: RunSpec) -> PilotState | None:
    """The newest state in ``state_dir``, or None when there is none or it is another spec's.

    Raises:
        ValueError: the newest state of this spec cannot be read; the message names the
            folder to delete to start the cell afresh.
    """
    import torch

    saved = sorted(p for p in Path(state_dir).glob("step-*") if p.is_dir())
    if not saved:
        return None
    folder = saved[-1]
    try:
        meta = results.read_json(folder / "state.json")
        if meta.get("cell_id") != spec.cell_id:
            return None  # another spec's state: never resumed into this one
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"format {meta.get('format')}, expected {STATE_FORMAT}")
        # on the CPU: load_state_dict moves every tensor to its parameter's device
        learner = torch.load(folder / "learner.pt", map_location="cpu", weights_only=True)
        torch_rng = torch.load(folder / "rng.pt", map_location="cpu", weights_only=True)
    except Exception as error:
        raise ValueError(f"{folder}: unreadable pilot state ({type(error).__name__}: "
                         f"{error}); delete {state_dir} to rerun the cell from the start"
                         ) from error
    return PilotState(meta["steps"], Ledger(**meta["ledger"]), meta["rows"], meta["evals"],
                      meta["timing"], meta["pending"], learner, torch_rng)


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
                                                 - claimed})


def run_pilot(spec: RunSpec, cell_dir: Path, *, components: Components | None = None,
              progress: Callable[[dict], None] | None = None,
              checkpoint_every: int = 5) -> dict:
    """Run one cell to its budget; write spec.json, metrics.jsonl, summary.json.

    Args:
        spec: the cell.
        cell_dir: its results folder.
        components: prebuilt task, reward, learner and backend (default: built from spec).
        progress: called with each step's metrics row.
        checkpoint_every: save a resumable state under ``cell_dir/state/`` every this many
            GRPO steps (0: never). A state of this spec found there is resumed, whatever
            this value.

    Returns the summary (``resumed_from_step``: the step a saved state was resumed from,
    or None). Failures are recorded (``status: failed``) and re-raised only for bad input
    detected before anything ran (a budget that cannot buy one step, an unreadable state).
    """
    import torch

    from race.grpo import group_advantages
    from race.learner import Batch

    if checkpoint_every < 0:
        raise ValueError(f"checkpoint_every={checkpoint_every}: must be >= 0 (0: never save "
                         f"a resumable state)")
    cell_dir, state_dir = Path(cell_dir), Path(cell_dir) / "state"
    check_budget(spec, prompt_tokens=1)  # before any model loads or any file is written
    results.write_json(cell_dir / "spec.json", spec.to_dict())
    wall_start = time.perf_counter()
    state = load_state(state_dir, spec)
    resumed_from = state.steps if state else None
    if state is None:  # a rerun without a state of this spec starts the cell afresh
        shutil.rmtree(state_dir, ignore_errors=True)
        state = PilotState(0, Ledger(), [], [], [], sorted(spec.checkpoints))
    ledger, rows, evals, timing = state.ledger, state.rows, state.evals, state.timing
    steps, pending, written = state.steps, state.pending, len(rows)
    prior_s = dict(ledger.wall_s)  # a resumed pilot's seconds carry over
    # drop whatever a crashed or preempted run wrote after its last save
    results.write_jsonl(cell_dir / "metrics.jsonl", rows)
    results.write_jsonl(cell_dir / "timing.jsonl", timing)
    try:
        parts = components or build_components(spec)
        if resumed_from is not None:
            _restore(parts, state, cell_dir / "adapter")
        ledger.wall_s["load"] += time.perf_counter() - wall_start
        if resumed_from is None:
            evals += evaluate(spec, parts, ledger, 0.0)
            rows += evals[-len(spec.eval_targets):]
        while True:
            examples = parts.task.sample("train", spec.prompts_per_step,
                                         seed=spec.seed * 1_000_003 + steps)
            prompts = [ex.prompt for ex in examples]
            longest = max(len(parts.tokenizer(p, add_special_tokens=False)["input_ids"])
                          for p in prompts)
            remaining = spec.budget_flops - ledger.charged(spec.convention)
            cap = spec.max_new_tokens
            if worst_step_flops(spec, longest) > remaining:
                if steps == 0:
                    check_budget(spec, longest)  # raises: recorded as a failed pilot
                cap = last_step_cap(spec, longest, remaining)
                if cap < 1:
                    break
            t0 = time.perf_counter()
            out = parts.backend.generate(prompts, n=spec.group_size, max_new_tokens=cap,
                                         temperature=spec.temperature,
                                         seed=spec.seed * 7919 + steps)
            ledger.add("rollout", out.flops_model, out.flops_executed,
                       out.flops_measured or 0.0)
            t1 = time.perf_counter()
            answers = [examples[i].answer for i in out.prompt_index]
            rewards = parts.reward([prompts[i] for i in out.prompt_index], list(out.texts),
                                   answer=answers)
            spent = parts.reward.pop_flops()
            ledger.add("feedback", spent.model, spent.executed)
            t2 = time.perf_counter()
            advantages = group_advantages(torch.tensor(rewards), spec.group_size)
            before = dict(parts.learner.flops)
            stats = parts.learner.update(Batch(out.prompt_ids, out.completion_ids,
                                               tuple(advantages.tolist())), step=steps)
            ledger.add("learning", *(parts.learner.flops[k] - before[k]
                                     for k in ("model", "executed", "measured")))
            if parts.backend.name != "hf":  # hf samples from the live model already
                parts.backend.load_adapter(parts.learner.save_adapter(cell_dir / "adapter"))
            t3 = time.perf_counter()
            ledger.wall_s["rollout"] += t1 - t0
            ledger.wall_s["feedback"] += t2 - t1
            ledger.wall_s["learning"] += t3 - t2
            steps += 1
            correct = [parts.task.verify(t, a) for t, a in zip(out.texts, answers)]
            row = {"kind": "step", "step": steps, "train_reward": sum(rewards) / len(rewards),
                   "train_accuracy": sum(correct) / len(correct),
                   "completion_tokens": out.completion_tokens,
                   "charged_flops": ledger.charged(spec.convention),
                   "flops": {c: dict(v) for c, v in ledger.flops.items()},
                   } | {k: round(v, 6) for k, v in stats.items()}
            rows.append(row)
            timing.append({"step": steps, "wall_s": dict(ledger.wall_s)})
            fraction = ledger.charged(spec.convention) / spec.budget_flops
            while pending and fraction >= pending[0] and pending[0] < 1.0:
                evals += evaluate(spec, parts, ledger, pending.pop(0))
                rows += evals[-len(spec.eval_targets):]
            for new in rows[written:]:
                results.append_jsonl(cell_dir / "metrics.jsonl", new)
            written = len(rows)
            results.append_jsonl(cell_dir / "timing.jsonl", timing[-1])
            if checkpoint_every and steps % checkpoint_every == 0:
                session_s = time.perf_counter() - wall_start
                save_state(state_dir, spec, PilotState(
                    steps, _settle_other(ledger, prior_s, session_s), rows, evals, timing,
                    pending, parts.learner.state_dict(), _torch_rng()))
            if progress:
                progress(row)
        if pending:  # the end of the budget is the last checkpoint
            evals += evaluate(spec, parts, ledger, 1.0)
            rows += evals[-len(spec.eval_targets):]
        status, error = "ok", None
    except Exception as exc:  # a failed pilot is recorded, never lost
        status = "failed"
        error = f"{type(exc).__name__}: {exc}"
        (cell_dir / "error.txt").write_text(traceback.format_exc())
    ledger = _settle_other(ledger, prior_s, time.perf_counter() - wall_start)
    results.write_jsonl(cell_dir / "metrics.jsonl", rows)  # the whole file, atomically
    summary = _summary(spec, ledger, steps, evals, status, error, resumed_from)
    results.write_json(cell_dir / "summary.json", summary)
    if status == "ok":  # a failed pilot keeps its state, so that a rerun resumes it
        shutil.rmtree(state_dir, ignore_errors=True)  # AdamW moments: twice the adapter
    return summary
