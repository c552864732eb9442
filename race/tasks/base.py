"""What every task shares: examples with a verifiable final answer and explicit steps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Example:
    """One problem.

    Attributes:
        prompt: the text the policy continues.
        answer: the gold final answer, as a string (e.g. ``"72"``).
        trace: a reference solution: steps, then the final-answer line.
        steps: the reference solution's steps, each checkable on its own.
        split: the split it came from (``train``, ``test``, ``ood``, ...).
        question: the bare problem when ``prompt`` wraps it (a chat template, an
            instruction); "" when the prompt is the problem itself.
    """

    prompt: str
    answer: str
    trace: str = ""
    steps: tuple[str, ...] = ()
    split: str = "train"
    question: str = ""

    @property
    def problem(self) -> str:
        """The problem as a reward model reads it: ``question``, else ``prompt``."""
        return self.question or self.prompt
