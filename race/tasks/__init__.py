"""Tasks: the embedded arithmetic chains, GSM8K-format data, MATH-style problem/answer data
(``task=math``: MATH-500, Polaris, GSM8K layouts, with named evaluation targets) and
reasoning-gym's generators, behind one registry.

A task gives ``sample(split, n, seed) -> list[Example]``, ``verify(completion, answer,
problem="")`` (the problem is :attr:`Example.problem`; only tasks that score against the
problem's own entry read it) and its evaluation targets (held-out splits). A task whose
answers earn partial credit also gives ``score(completion, answer, problem) -> float``,
which the rule reward pays instead of ``verify``.

Each task owns its answer checker (:mod:`~race.tasks.verify` for GSM8K-format answers).

May import: catalog, core, errors.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from race.catalog import did_you_mean
from race.errors import UnknownName, UsageError
from race.tasks.arith import ArithTask
from race.tasks.gsm8k import load_gsm8k
from race.tasks.hub_data import dataset_source
from race.tasks.math import MathTask, eval_entries, unique_problems
from race.tasks.reasoning_gym import ReasoningGymTask, has_ood
from race.tasks.task_base import HELD_OUT, Example, sample_rows
from race.tasks.verify import answers_match

# GSM8K-format pilots: the instruction that follows the question (the rule verifier reads
# "#### N" first, then a final \\boxed{} or number)
ANSWER_FORMAT = ("Solve it step by step, then give the final answer on its own line as "
                 "'#### <number>'.")


@dataclass(frozen=True, slots=True)
class Gsm8kTask:
    """GSM8K-format problems from a local JSONL/JSON/parquet file or a reachable dataset.

    A single file is split by a hash of each question: 10% ``test``, 10% ``val``, the
    rest ``train`` (stable whatever the file's order). A folder (or dataset) with one
    file per split reads ``test`` from its test file and cuts ``val`` out of its train
    file the same way. ``ood`` reads ``ood_source`` whole.

    Attributes:
        source: a file, a folder of split files, or a ``datasets`` name.
        ood_source: a GSM8K-format file of out-of-distribution problems ("": none).
        system_prompt, answer_format: what :class:`ChatPrompts` wraps each question in.
    """

    source: str
    ood_source: str = ""
    system_prompt: str = ""
    answer_format: str = ANSWER_FORMAT
    name: str = "gsm8k"
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def rows(self, split: str) -> list[Example]:
        """Every problem of ``split`` (loaded once); a held-out split holds each problem
        once (a repeated question is scored once, :func:`race.tasks.math.unique_problems`)."""
        if split not in self._cache:
            rows = self._load(split)
            self._cache[split] = rows if split == "train" else unique_problems(rows)
        return self._cache[split]

    def _load(self, split: str) -> list[Example]:
        if split == "ood":
            if not self.ood_source:
                raise UsageError("task.ood_source: unset, but ood is an evaluation target; "
                                 "give a GSM8K-format file of out-of-distribution problems, "
                                 "or drop ood from pilot.eval_targets")
            ood = dataset_source(self.ood_source, key="task.ood_source")
            return [dataclasses.replace(ex, split="ood") for ex in load_gsm8k(ood, split="test")]
        if split not in ("train", "val", "test"):
            raise UsageError(f"split={split!r}: GSM8K-format tasks have train, val, test, ood")
        source = dataset_source(self.source, key="task.source")  # a name: its cached snapshot
        path = Path(source).expanduser()
        by_file = path.is_dir() or not path.suffix  # one file per split (or a dataset)
        if by_file and split == "test":
            return load_gsm8k(source, split="test")
        rows = load_gsm8k(source, split="train" if by_file else "test")
        if not rows:
            raise UsageError(f"task.source={self.source}: holds no GSM8K rows; give a file "
                             f"of rows with a question and an answer ending in #### N")
        kept = [ex for ex in rows if HELD_OUT.get(
            zlib.crc32(ex.problem.encode()) % 10, "train") == split]
        if not kept:
            raise UsageError(f"task.source={self.source}: no {split} problems (the split "
                             f"takes a tenth of the questions by hash); give more rows")
        return [dataclasses.replace(ex, split=split) for ex in kept]

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` problems of ``split`` in a seeded order: ``train`` cycles (GRPO steps may
        see a problem again); a held-out split never repeats one, so a split smaller
        than ``n`` gives each of its problems once (the evaluation's real ``n``)."""
        return sample_rows(self.rows(split), split, n, f"{self.name}/{split}/{seed}")

    def verify(self, completion: str, answer: str, problem: str = "") -> bool:
        return answers_match(completion, answer)



@dataclass(frozen=True)
class ChatPrompts:
    """A task whose prompts go through a tokenizer's chat template: an optional system
    message, then the user's question followed by ``answer_format``, then the assistant's
    turn. ``question`` keeps the bare problem (what a reward model reads)."""

    task: Any
    tokenizer: Any
    system_prompt: str = ""
    answer_format: str = ""

    @property
    def name(self) -> str:
        return self.task.name

    def format(self, question: str) -> str:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt \
            else []
        content = f"{question}\n{self.answer_format}" if self.answer_format else question
        messages.append({"role": "user", "content": content})
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=True)

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        return [dataclasses.replace(ex, prompt=self.format(ex.problem), question=ex.problem)
                for ex in self.task.sample(split, n, seed)]

    def verify(self, completion: str, answer: str, problem: str = "") -> bool:
        return self.task.verify(completion, answer, problem)

    def score(self, completion: str, answer: str, problem: str = "") -> float:
        """The task's own score where it has one, else 1.0 or 0.0 from ``verify``."""
        if hasattr(self.task, "score"):
            return self.task.score(completion, answer, problem)
        return float(self.task.verify(completion, answer, problem))


def prompt_bound(task: Any, tokenizer: Any, splits: tuple[str, ...], sample: int = 512) -> int:
    """Tokens of the longest prompt the pilot may send from ``splits``: over every problem
    of a task with fixed rows (GSM8K-format), else over ``sample`` drawn problems per
    split plus a quarter for the ones not drawn (the embedded task's chains)."""
    inner = getattr(task, "task", task)
    fixed = hasattr(inner, "rows")
    longest = 0
    for split in splits:
        n = len(inner.rows(split)) if fixed else sample
        longest = max(longest, *(len(tokenizer(ex.prompt, add_special_tokens=False)
                                     ["input_ids"]) for ex in task.sample(split, n, seed=0)))
    return longest if fixed else longest + longest // 4 + 1


def with_chat_template(task: Any, tokenizer: Any) -> Any:
    """``task`` with its prompts in the tokenizer's chat template, when the task asks for
    one (GSM8K-format and reasoning-gym tasks) and the tokenizer has one; else ``task``
    itself."""
    if not hasattr(task, "answer_format") or not getattr(tokenizer, "chat_template", None):
        return task
    return ChatPrompts(task, tokenizer, task.system_prompt, task.answer_format)


TASKS: dict[str, Callable[..., Any]] = {"arith": ArithTask, "gsm8k": Gsm8kTask,
                                        "math": MathTask, "reasoning-gym": ReasoningGymTask}


def task_targets(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The evaluation targets (held-out splits) of a task entry (``name`` and the task's
    fields): ``val`` and ``test``, and ``ood`` where it has out-of-distribution problems
    (the embedded task always; a GSM8K-format task when ``task.ood_source`` names a file;
    a reasoning-gym task when its generator has a harder setting). ``pilot.eval_targets=
    null`` evaluates all of them."""
    name = entry.get("name", "")
    if name == "math":  # the training source's val and test, then the named eval targets
        return build_task(entry).targets()
    if name == "gsm8k":
        return ("val", "test", "ood") if entry.get("ood_source") else ("val", "test")
    if name == "reasoning-gym":
        return ("val", "test", "ood") if has_ood(entry) else ("val", "test")
    return ("val", "test", "ood")


# task fields that name a data source (a math task's evaluation targets are in ``eval``)
SOURCE_KEYS = ("source", "val_source", "test_source", "ood_source")


def data_sources(entry: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(config key, source, subset) of every data source a task entry (``name`` and the
    task's fields) reads: ``task.source`` and its siblings, then each ``task.eval``
    target. The embedded arithmetic reads none; ``subset`` is ``task.source``'s own."""
    if entry.get("name") == "arith":
        return []
    found = [(f"task.{key}", str(entry[key]), str(entry.get("subset") or "")
              if key == "source" else "") for key in SOURCE_KEYS if entry.get(key)]
    evals = eval_entries(str(entry.get("eval") or ""), has_source=bool(entry.get("source")))
    return found + [(f"task.eval.{name}", e["source"], e["subset"])
                    for name, e in evals.items()]


def build_task(entry: Mapping[str, Any]) -> Any:
    """A task from its config entry (``name`` plus the task's own fields)."""
    name = entry.get("name", "")
    if name not in TASKS:
        raise UnknownName(did_you_mean("task", str(name)))
    factory = TASKS[name]
    fields = getattr(factory, "__dataclass_fields__", {})
    return factory(**{k: v for k, v in entry.items() if k in fields and k != "name"})
