"""The embedded task: chains of additions and subtractions, solved step by step.

A problem is a chain such as ``23+45-17=?``. Its solution writes one step per line, each
applying the next operation to the running total, then the final answer::

    23+45-17=?          <- prompt (ends with a newline)
    23+45=68            <- step 1
    68-17=51            <- step 2
    #### 51             <- final answer (the last step)

Every line is checkable on its own: a step is correct when it equals the reference line,
which is fixed by the prompt. Step labels follow Math-Shepherd: a step is positive when
it and every step before it are correct. That gives a process reward model its labels.

Difficulty: ``digits`` per operand and the number of operations. Splits: ``train``, ``val``
(for early stopping) and the in-distribution held-out ``test`` come from the same chains
and are disjoint (a prompt's hash decides its split); ``ood`` shifts the chains: every
operation that can subtract does (``ood_minus_share=1``, where training flips a fair coin),
and optionally longer chains (``ood_min_ops``/``ood_max_ops``).
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass

from race.errors import UsageError
from race.tasks.task_base import Example

FINAL_PREFIX = "#### "
SPLITS = ("train", "val", "test", "ood")
_FINAL = re.compile(r"####\s*(-?\d+)")
_STEP = re.compile(r"-?\d+[+-]\d+=-?\d+")
_FINAL_LINE = re.compile(r"####\s*-?\d+")


@dataclass(frozen=True, slots=True)
class ArithTask:
    """Seeded generator of step-by-step arithmetic chains.

    Attributes:
        digits: maximum digits per operand (difficulty).
        first_digits: maximum digits of the chain's first number (0: ``digits``); a wide
            first number with narrow operands gives wide answers (hard to guess) from
            steps that each stay easy.
        min_ops, max_ops: operations per chain in ``train`` and ``test``.
        ood_min_ops, ood_max_ops: operations per chain in ``ood`` (0: as training).
        ood_minus_share: the probability that an ``ood`` operation subtracts where the
            running total allows it (training draws a fair coin: 0.5 draws as training).
            At 1, the shift lands on the step the flawed warm start gets wrong, so the
            target moves with what post-training fixes. Chains longer than training do not:
            trained policies stay at the warm start's 0.06 on 4-operation chains.
        test_buckets: one prompt in ``test_buckets`` (by hash) is held out as ``test``,
            another as ``val``.
    """

    digits: int = 1
    first_digits: int = 0
    min_ops: int = 2
    max_ops: int = 3
    ood_min_ops: int = 0
    ood_max_ops: int = 0
    ood_minus_share: float = 1.0
    test_buckets: int = 8
    name: str = "arith"

    def __post_init__(self) -> None:
        if self.digits < 1:
            raise UsageError(f"task.digits={self.digits}: must be >= 1")
        if self.first_digits < 0:
            raise UsageError(f"task.first_digits={self.first_digits}: must be >= 0 (0: "
                             f"task.digits)")
        if not 1 <= self.min_ops <= self.max_ops:
            raise UsageError(f"task.min_ops={self.min_ops}, task.max_ops={self.max_ops}: "
                             f"need 1 <= min_ops <= max_ops")
        low, high = self.ood_ops
        if not 1 <= low <= high:
            raise UsageError(f"task.ood_min_ops={self.ood_min_ops}, task.ood_max_ops="
                             f"{self.ood_max_ops}: need 1 <= ood_min_ops <= ood_max_ops "
                             f"(0 for both: as training)")
        if not 0 <= self.ood_minus_share <= 1:
            raise UsageError(f"task.ood_minus_share={self.ood_minus_share}: a probability, "
                             f"use a value in [0, 1], e.g. 1")
        if (low, high) == (self.min_ops, self.max_ops) and self.ood_minus_share == 0.5:
            raise UsageError("task.ood_minus_share=0.5 with ood chains as long as "
                             "training's: the ood split would draw the training chains; "
                             "set task.ood_minus_share=1 or longer ood chains, e.g. "
                             f"task.ood_min_ops={self.max_ops + 1}")

    @property
    def ood_ops(self) -> tuple[int, int]:
        """Operations per ``ood`` chain, low and high (0: as training)."""
        return self.ood_min_ops or self.min_ops, self.ood_max_ops or self.max_ops

    def _chain(self, rng: random.Random, ops: int, minus_share: float = 0.5
               ) -> tuple[list[int], list[str]]:
        top = 10 ** self.digits - 1
        first = 10 ** (self.first_digits or self.digits) - 1
        numbers, signs, total = [rng.randint(0, first)], [], 0
        total = numbers[0]
        for _ in range(ops):
            value = rng.randint(0, top)
            if total < value:
                sign = "+"
            elif minus_share == 0.5:  # training's fair coin (its draws, kept as they were)
                sign = rng.choice("+-")
            else:
                sign = "-" if rng.random() < minus_share else "+"
            total = total + value if sign == "+" else total - value
            numbers.append(value)
            signs.append(sign)
        return numbers, signs

    def _split_of(self, prompt: str) -> str:
        bucket = zlib.crc32(prompt.encode()) % self.test_buckets
        return {0: "test", 1: "val"}.get(bucket, "train")

    def example(self, numbers: list[int], signs: list[str], split: str) -> Example:
        """The problem, reference steps and answer for one chain."""
        prompt = str(numbers[0]) + "".join(s + str(n) for s, n in zip(signs, numbers[1:]))
        steps, total = [], numbers[0]
        for sign, value in zip(signs, numbers[1:]):
            new = total + value if sign == "+" else total - value
            steps.append(f"{total}{sign}{value}={new}")
            total = new
        steps.append(f"{FINAL_PREFIX}{total}")
        return Example(prompt=f"{prompt}=?\n", answer=str(total), trace="\n".join(steps),
                       steps=tuple(steps), split=split)

    def demonstration(self, example: Example, rng: random.Random, flip: float) -> Example:
        """``example`` with a flawed reference trace: each ``-`` step is computed as ``+``
        with probability ``flip`` (the line still reads ``a-b=c``; later steps follow from
        the wrong total). Warm starts imitate such demonstrations, so the right procedure
        is in the policy's support without being its mode (what RL can then sharpen).
        """
        if not flip:
            return example
        numbers, signs = parse_chain(example.prompt)
        steps, total = [], numbers[0]
        for sign, value in zip(signs, numbers[1:]):
            wrong = sign == "-" and rng.random() < flip
            new = total + value if sign == "+" or wrong else total - value
            steps.append(f"{total}{sign}{value}={new}")
            total = new
        steps.append(f"{FINAL_PREFIX}{total}")
        return Example(example.prompt, str(total), "\n".join(steps), tuple(steps),
                       example.split)

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` problems of ``split``, deterministic for (task, split, seed)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r}: use one of {list(SPLITS)}")
        rng = random.Random(f"{self.name}/{split}/{seed}")
        ood = split == "ood"
        low, high = self.ood_ops if ood else (self.min_ops, self.max_ops)
        share = self.ood_minus_share if ood else 0.5
        out: list[Example] = []
        while len(out) < n:
            numbers, signs = self._chain(rng, rng.randint(low, high), share)
            example = self.example(numbers, signs, split)
            if split == "ood" or self._split_of(example.prompt) == split:
                out.append(example)
        return out

    def verify(self, completion: str, answer: str, problem: str = "") -> bool:
        """Exact check of the final answer line (``#### N``); ``problem`` is not needed."""
        return final_answer(completion) == answer.strip()

    def step_labels(self, example: Example, completion: str) -> list[int]:
        """Math-Shepherd labels of each written line: 1 while every line so far is right."""
        return step_labels(example.steps, completion)

    def reference_steps(self, problem: str) -> tuple[str, ...]:
        """The reference steps (final-answer line last) of a chain prompt."""
        numbers, signs = parse_chain(problem)
        return self.example(numbers, signs, "train").steps

    def well_formed(self, completion: str) -> bool:
        """Whether ``completion`` has the solution's form: one or more ``a+b=c`` /
        ``a-b=c`` lines, then a ``#### N`` line, and nothing else."""
        lines = split_lines(completion)
        return (len(lines) >= 2 and all(_STEP.fullmatch(line) for line in lines[:-1])
                and _FINAL_LINE.fullmatch(lines[-1]) is not None)


def parse_chain(prompt: str) -> tuple[list[int], list[str]]:
    """The numbers and signs of a chain prompt such as ``23+45-17=?``."""
    body = prompt.strip().removesuffix("=?")
    return [int(n) for n in re.split(r"[+-]", body)], re.findall(r"[+-]", body)


def final_answer(completion: str) -> str | None:
    """The number after the first ``####``, or None."""
    match = _FINAL.search(completion)
    return match.group(1) if match else None


def split_lines(completion: str) -> list[str]:
    """The completion's non-empty lines: its steps, the final-answer line last."""
    return [line.strip() for line in completion.strip().split("\n") if line.strip()]


def step_labels(reference: tuple[str, ...], completion: str) -> list[int]:
    """1 for each line that matches the reference and follows only correct lines, else 0."""
    labels, ok = [], True
    for i, line in enumerate(split_lines(completion)):
        ok = ok and i < len(reference) and line == reference[i]
        labels.append(int(ok))
    return labels
