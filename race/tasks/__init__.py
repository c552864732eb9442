"""Tasks: the embedded arithmetic chains and GSM8K-format data, behind one registry.

A task gives ``sample(split, n, seed) -> list[Example]``, ``verify(completion, answer)``
and its evaluation targets (held-out splits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from race.errors import UnknownName
from race.tasks.arith import ArithTask
from race.tasks.base import Example


@dataclass(frozen=True, slots=True)
class Gsm8kTask:
    """GSM8K-format problems from a local JSONL/parquet file or a reachable dataset.

    Attributes:
        source: a file, a folder of split files, or a ``datasets`` name.
        train_split, eval_splits: split names to read.
    """

    source: str
    train_split: str = "train"
    eval_splits: tuple[str, ...] = ("test",)
    name: str = "gsm8k"
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        import random

        from race.tasks.gsm8k import load_gsm8k

        if split not in self._cache:
            self._cache[split] = load_gsm8k(self.source, split=split)
        rows = list(self._cache[split])
        random.Random(f"{self.name}/{split}/{seed}").shuffle(rows)
        return [rows[i % len(rows)] for i in range(n)]

    def verify(self, completion: str, answer: str) -> bool:
        from race.rewards.verify import answers_match

        return answers_match(completion, answer)


TASKS: dict[str, Callable[..., Any]] = {"arith": ArithTask, "gsm8k": Gsm8kTask}


def build_task(entry: Mapping[str, Any]) -> Any:
    """A task from its config entry (``name`` plus the task's own fields)."""
    from race.catalog import did_you_mean

    name = entry.get("name", "")
    if name not in TASKS:
        raise UnknownName(did_you_mean("task", str(name)))
    factory = TASKS[name]
    fields = getattr(factory, "__dataclass_fields__", {})
    return factory(**{k: v for k, v in entry.items() if k in fields and k != "name"})
