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
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from race import flops, results
from race.catalog import load_model_shape
from race.specs import LoraShape, ModelShape, RewardShape, RunSpec

PHASES = ("rollout", "learning", "feedback", "eval")


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

    ``policy_folder`` overrides where the policy loads from (default: the warm-started
    tiny policy, or the model's ``hf_id``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.learner import LearnerConfig, LoraLearner
    from race.policies import build_tiny_policy
    from race.rewards import build_reward
    from race.tasks import build_task

    shape = load_model_shape(spec.model)
    folder = policy_folder or (build_tiny_policy(spec.model) if shape.tokenizer == "race-char"
                               else shape.hf_id)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
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
             error: str | None) -> dict:
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
            "initial_eval": initial}


def run_pilot(spec: RunSpec, cell_dir: Path, *, components: Components | None = None,
              progress: Callable[[dict], None] | None = None) -> dict:
    """Run one cell to its budget; write spec.json, metrics.jsonl, summary.json.

    Returns the summary. Failures are recorded (``status: failed``) and re-raised only
    for bad input detected before anything ran (a budget that cannot buy one step).
    """
    import torch

    from race.grpo import group_advantages
    from race.learner import Batch

    cell_dir = Path(cell_dir)
    check_budget(spec, prompt_tokens=1)  # before any model loads or any file is written
    results.write_json(cell_dir / "spec.json", spec.to_dict())
    ledger, rows, evals, steps, timing, written = Ledger(), [], [], 0, [], 0
    for stale in ("metrics.jsonl", "timing.jsonl"):  # a rerun starts the cell afresh
        (cell_dir / stale).unlink(missing_ok=True)
    wall_start = time.perf_counter()
    try:
        load_start = time.perf_counter()
        parts = components or build_components(spec)
        ledger.wall_s["load"] = time.perf_counter() - load_start
        evals += evaluate(spec, parts, ledger, 0.0)
        rows += evals[-len(spec.eval_targets):]
        pending = sorted(spec.checkpoints)
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
    ledger.wall_s["other"] = (time.perf_counter() - wall_start
                              - sum(v for k, v in ledger.wall_s.items() if k != "other"))
    results.write_jsonl(cell_dir / "metrics.jsonl", rows)  # the whole file, atomically
    summary = _summary(spec, ledger, steps, evals, status, error)
    results.write_json(cell_dir / "summary.json", summary)
    return summary
