"""What every task shares: examples with a verifiable final answer and explicit steps."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

# a held-out split cut from a file of problems: crc32(problem) % 10 -> split, the rest train
HELD_OUT = {0: "test", 1: "val"}
# data files a task reads (anything else that is not a path is a dataset name)
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


def is_local(path: str) -> bool:
    """Whether a source or model id names a local path rather than a hub or dataset name:
    it starts with ``/``, ``./``, ``../`` or ``~``, exists, or ends in a data file's
    suffix (``data/x.jsonl`` is a file that may be missing, never a dataset name)."""
    return bool(path) and (path.startswith(("/", "./", "../", "~")) or Path(path).exists()
                           or Path(path).suffix in FILE_SUFFIXES)


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


def sample_rows(rows: list[Example], split: str, n: int, seed: str) -> list[Example]:
    """How a task with fixed rows samples: shuffled by ``seed``,
    cycled to ``n`` for ``train``, at most ``len(rows)`` distinct problems otherwise."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    if split != "train":
        return rows[:n]
    return [rows[i % len(rows)] for i in range(n)]
