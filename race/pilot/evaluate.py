"""Scoring and held-out evaluation inside a pilot: rewards charged to their phase, the
greedy accuracy on every target at a checkpoint, and the per-step collapse precursors.
A verifier that raises on a completion scores it 0 and counts it wrong; the row says how
many calls raised (``verifier_errors``), and the pilot goes on.

FlopCounterMode (race.nn.measure, which imports torch) is imported only when a pilot measures.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from typing import Any

from race.core.specs import RunSpec
from race.nn.devices import PhaseMeter
from race.pilot.budget import checkpoint_problems, trace_token_limit
from race.pilot.components import Components
from race.pilot.state import Ledger
from race.preflight import check_context


def _measuring(spec: RunSpec):
    """A FlopCounterMode when ``spec.measure`` (read ``get_total_flops()``), else None."""
    if not spec.measure:
        return None
    from race.nn.measure import flop_counter

    return flop_counter()


def score(spec: RunSpec, parts: Components, ledger: Ledger, phase: str, out,
          prompts: list[str], answers: list[str]) -> tuple[list[float], int]:
    """Reward every completion of ``out``; charge what the reward model ran to ``phase``.

    Each trace may be scored on at most :func:`race.pilot.budget.trace_token_limit` tokens (the
    rewards refuse longer inputs before their model runs), which keeps the worst-case step
    a bound. What was scored is charged even when the reward fails midway.

    Returns the rewards and how many completions a verifier raised on (a rule reward
    scores those 0: :class:`race.rewards.rule.RuleReward`).
    """
    limits = [trace_token_limit(spec, len(p), len(c))
              for p, c in zip(out.prompt_ids, out.completion_ids)]
    counter = _measuring(spec)
    pop_errors = getattr(parts.reward, "pop_errors", lambda: 0)
    pop_errors()  # only this call's count
    try:
        with counter or contextlib.nullcontext():
            rewards = parts.reward(prompts, list(out.texts), answer=answers,
                                   token_limits=limits)
        return rewards, pop_errors()
    finally:
        spent = parts.reward.pop_flops()
        ledger.add(phase, spent.model, spent.executed,
                   counter.get_total_flops() if counter is not None else 0.0)


def verified(task: Any, texts: list[str], answers: list[str], problems: list[str]
             ) -> tuple[list[bool], int]:
    """Whether each completion is right, and how many the task's verifier raised on (each
    counted wrong, with a warning): one degenerate completion never ends a pilot."""
    correct, errors = [], 0
    for text, answer, problem in zip(texts, answers, problems):
        try:
            correct.append(bool(task.verify(text, answer, problem)))
        except Exception as error:  # a verifier's bug is not the pilot's failure
            errors += 1
            correct.append(False)
            logging.getLogger(__name__).warning(
                "the verifier raised %s: %s on the completion %.80r; counted wrong",
                type(error).__name__, str(error)[:120], text)
    return correct, errors


def longest_prompt(parts: Components, spec: RunSpec, prompts: list[str]) -> int:
    """Tokens of the longest prompt; PromptTooLong when it and the generation cap do not
    fit the policy's context window."""
    longest = max(len(parts.tokenizer(p, add_special_tokens=False)["input_ids"])
                  for p in prompts)
    context = getattr(getattr(parts.learner.model, "config", None),
                      "max_position_embeddings", None)
    check_context(spec.model, longest, spec.max_new_tokens, context)  # as race plan does
    return longest


def evaluate(spec: RunSpec, parts: Components, ledger: Ledger, fraction: float,
             meter: PhaseMeter | None = None) -> list[dict]:
    """Greedy accuracy and mean reward on the held-out targets this checkpoint scores
    (:func:`race.pilot.budget.checkpoint_problems`; eval FLOPs, uncharged).

    Each row carries the ledger's cumulative FLOPs after it (``flops``), as step rows do.
    Every checkpoint scores the same fixed problems of each target (the first ``n`` of
    its ``seed=10_000`` draw), so any two checkpoints compare paired, problem by problem:
    the target selection reads (``spec.select_target``) on ``spec.select_examples``
    problems, so rankings, promotions, guards and a pick's gain over the warm start rest
    on a small standard error; the other targets on ``eval_examples``.
    """
    rows = []
    with (meter or PhaseMeter()).phase("eval", ledger.wall_s):
        for target, n in checkpoint_problems(spec, fraction).items():
            examples = parts.task.sample(target, n, seed=10_000)
            prompts = [ex.prompt for ex in examples]
            longest_prompt(parts, spec, prompts)
            out = parts.backend.generate(prompts, n=1, max_new_tokens=spec.max_new_tokens,
                                         greedy=True)
            ledger.add("eval", out.flops_model, out.flops_executed, out.flops_measured)
            answers = [ex.answer for ex in examples]
            problems = [ex.problem for ex in examples]
            rewards, reward_errors = score(spec, parts, ledger, "eval", out, problems,
                                           answers)
            correct, errors = verified(parts.task, list(out.texts), answers, problems)
            rows.append({"kind": "eval", "checkpoint": fraction, "target": target,
                         "problems": problem_set_id(prompts),
                         "accuracy": sum(correct) / len(correct),
                         "mean_reward": sum(rewards) / len(rewards),
                         "correct": [int(c) for c in correct], "flops": ledger.snapshot()}
                        | error_count(reward_errors + errors))
    return rows


def error_count(errors: int) -> dict[str, int]:
    """A row's ``verifier_errors``: the verifier calls that raised (each completion is
    checked once for its reward and once for accuracy: scored 0, counted wrong); absent
    when there were none, so such rows read as before."""
    return {"verifier_errors": errors} if errors else {}


def problem_set_id(prompts: list[str]) -> str:
    """A short hash of the problems an evaluation scored, in order: two checkpoints with
    the same id scored the same problems (their ``correct`` lists pair up)."""
    return hashlib.sha256("\0".join(prompts).encode()).hexdigest()[:12]


def precursors(out) -> dict[str, float]:
    """Per-step signals that often come before a collapse (race.core.guards reads them):
    ``truncation_rate``, the share of completions cut at the cap, and ``entropy``, the
    mean negative log-likelihood of the sampled tokens (nats/token, an estimate of the
    sampling policy's entropy)."""
    tokens = [lp for row in out.logprobs for lp in row]
    return {"truncation_rate": 1 - sum(out.finished) / max(1, len(out.finished)),
            "entropy": -sum(tokens) / len(tokens) if tokens else 0.0}
