"""Rule-based verifiers: pure functions of the completion and the problem. 0 FLOPs.

Three of the five reward systems of the source paper's protocol are verifiers (the other
two are reward models, :mod:`race.rewards.tiny_prm` and :mod:`race.rewards.qwen_prm`).
Each costs no FLOPs; the pilot times its seconds under ``feedback``.

- ``answer`` (``reward=rule``, sparse): 1 when the final answer is right, else 0. On the
  embedded task the verifier reads ``#### N``; on GSM8K-format data it compares numbers
  with ``math-verify`` (:mod:`race.tasks.verify`); on a reasoning-gym task it is the
  generator's own scorer, which some generators let give partial credit (the task's
  ``score``).
- ``structured`` (``reward=structured``): format and final answer,
  ``(1 - FORMAT_CREDIT) * right answer + FORMAT_CREDIT * well-formed trace``, so a
  well-formed wrong trace earns partial credit and a right answer in a malformed trace
  loses the format's share.
- ``steps`` (``reward=dense``): credit per correct step, from the task's own step checker:
  the share of the reference lines (final-answer line included) that the completion gets
  right before its first wrong line (Math-Shepherd's "still correct" labels).

``structured`` and ``steps`` need a task that knows its solution's form and steps (the
embedded arithmetic chains); the config refuses them for other tasks.
"""

from __future__ import annotations

import logging
from typing import Any

from race.rewards.reward_base import FlopLedger, check_rewards
from race.tasks.arith import step_labels

# structured: the share of the reward a well-formed trace earns, right or wrong
FORMAT_CREDIT = 0.2
CHECKS = ("answer", "structured", "steps")


def answer_reward(task: Any, problem: str, completion: str, answer: str) -> float:
    """The task's own score of the final answer where it has one (reasoning-gym's
    scorers, in [0, 1]), else 1.0 when it verifies against ``answer`` and 0.0 (sparse)."""
    if hasattr(task, "score"):
        return task.score(completion, answer, problem)
    return float(task.verify(completion, answer, problem))


def structured_reward(task: Any, problem: str, completion: str, answer: str) -> float:
    """Format and final answer: ``0.8 * right + 0.2 * well_formed``."""
    return ((1 - FORMAT_CREDIT) * float(task.verify(completion, answer))
            + FORMAT_CREDIT * float(task.well_formed(completion)))


def step_reward(task: Any, problem: str, completion: str, answer: str) -> float:
    """Share of the reference lines right before the first wrong one (dense)."""
    reference = task.reference_steps(problem)
    labels = step_labels(reference, completion)
    return sum(labels[:len(reference)]) / len(reference)


SCORERS = {"answer": answer_reward, "structured": structured_reward, "steps": step_reward}


class RuleReward(FlopLedger):
    """A verifier reward (``check``: answer | structured | steps), in [0, 1], 0 FLOPs.

    A verifier that raises on a completion scores it 0 and counts it (``pop_errors()``):
    one degenerate completion never ends a pilot."""

    kind = "rule"
    value_range = (0.0, 1.0)

    def __init__(self, name: str, task: Any, check: str = "answer"):
        self.name, self.task, self.check = name, task, check
        self._score = SCORERS[check]
        self._errors = 0

    def __call__(self, prompts: list[str], completions: list[str], *,
                 answer: list[str], **task_fields: Any) -> list[float]:
        if len(answer) != len(completions) or len(prompts) != len(completions):
            raise ValueError(f"reward={self.name}: {len(prompts)} prompts and {len(answer)} "
                             f"answers for {len(completions)} completions; pass one prompt and "
                             f"one answer per completion")
        rewards = [self._guarded(p, c, a) for p, c, a in zip(prompts, completions, answer)]
        return check_rewards(self, completions, rewards)

    def _guarded(self, problem: str, completion: str, answer: str) -> float:
        try:
            return self._score(self.task, problem, completion, answer)
        except Exception as error:  # a verifier's bug must not end the pilot: reward 0
            self._errors += 1
            logging.getLogger(__name__).warning(
                "reward=%s: the verifier raised %s: %s on the completion %.80r; scored 0",
                self.name, type(error).__name__, str(error)[:120], completion)
            return 0.0

    def pop_errors(self) -> int:
        """How many completions the verifier raised on since the last call (each scored 0)."""
        errors, self._errors = self._errors, 0
        return errors
