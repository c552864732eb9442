"""MATH-style problem/answer rows (MATH-500, Polaris-53K, GSM8K, ...) and ``task=math``.

A row's problem is ``problem_key``, else the first present of ``problem``, ``question``.
Its gold answer is ``answer_key``, else a non-empty ``answer``: a GSM8K answer (steps, then
``#### N``) gives N (:func:`race.tasks.gsm8k.parse_solution`), any other is kept whole as
written (``\\left( 3, \\frac{\\pi}{2} \\right)``, ``1,000``) less surrounding ``$``. With no
answer, the gold is the last ``\\boxed{...}`` of ``solution_key``'s text (balanced braces).
Every gold must pass :func:`race.tasks.verify.gold_parses`. Bad rows are never skipped: the
first raises a UsageError naming the file and its 1-based line (JSON lines) or row
(parquet, JSON array), the reason, and how many rows are bad in all.

Sources, read with race.tasks.gsm8k's file readers: a ``.jsonl``/``.json``/``.parquet``
file; a folder of split files (``test.jsonl``, a hub snapshot's
``data/test-00000-of-00001.parquet``; a split in n shards, ``-0000i-of-0000n``, is read
whole, and refused when a shard is absent) where ``subset`` picks a config subfolder
(``main/`` by default); else a dataset name, read as that folder from its snapshot in the
Hugging Face cache (:mod:`race.tasks.hub_data`), or, where the cache lacks it, with
``datasets.load_dataset(source, subset or None, split=split)``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import race.tasks.gsm8k as gsm8k
from race.errors import UsageError
from race.tasks.final_answer import _MATH_DOLLARS_RE, _last_marker
from race.tasks.hub_data import dataset_source
from race.tasks.task_base import FILE_SUFFIXES, HELD_OUT, Example, is_local
from race.tasks.verify import answers_match, gold_parses

logger = logging.getLogger(__name__)

# Qwen2.5-Math's chain-of-thought prompt, sent as the system message.
MATH_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
PROBLEM_KEYS = ("problem", "question")
# what an entry of task.eval may set, with its default
EVAL_DEFAULTS = {"source": "", "subset": "", "split": "test", "problem_key": "",
                 "answer_key": "", "solution_key": "solution"}
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")


def _split_paths(folder: Path, split: str, subset: str) -> list[Path]:
    """The files of ``split`` in a local dataset folder, every shard in order (``subset``:
    a config subfolder)."""
    subsets = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name[0] != ".")
    if subset and subset not in subsets:
        raise UsageError(f"subset={subset!r}: {folder} has no such subfolder (it has "
                         f"{subsets}); set task.subset to one of them")
    try:
        return gsm8k._split_files(folder / subset if subset else folder, split)
    except FileNotFoundError as error:  # a subset helps only where there are several
        hint = (f", or pick a config subfolder with task.subset (subfolders: {subsets})"
                if not subset and len(subsets) > 1 else "")
        raise UsageError(f"{error}{hint}") from None


def _locate(source: str | Path, split: str, subset: str
            ) -> Iterable[tuple[str, int, Any]]:
    """(where, number, row) of every row of a source's split, shard by shard: ``where``
    is what a bad row's message names (``file:line``, ``file row N``)."""
    text = dataset_source(str(source))
    path = Path(text).expanduser()
    if path.is_dir():
        return gsm8k._files_rows(_split_paths(path, split, subset))
    if not path.exists() and is_local(text):
        raise UsageError(f"source={text!r}: no such file or folder; check the path, or give "
                         f"a dataset name (e.g. 'HuggingFaceH4/MATH-500') for `datasets`")
    if not path.is_file():
        return gsm8k._dataset_rows(text, split, subset or None)
    if path.suffix not in FILE_SUFFIXES:
        raise UsageError(f"source={text!r}: unsupported file type {path.suffix!r}; convert it "
                         f"to one of {list(FILE_SUFFIXES)}")
    return gsm8k._files_rows([path])


def _text(row: Mapping[str, Any], key: str) -> str:
    """A row's field as text ("" when absent or null); an int reads as its digits."""
    value = row.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return "" if value is None else str(value)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} is a {type(value).__name__}, not text")
    return value.strip()


def _example(row: Any, split: str, problem_key: str, answer_key: str,
             solution_key: str) -> Example:
    """One row as an Example; ValueError says why a row cannot be used."""
    if not isinstance(row, Mapping):
        raise ValueError(f"row is a {type(row).__name__}, not an object of fields")
    for key in (problem_key, answer_key):
        if key and key not in row:
            raise ValueError(f"no field {key!r} (the row has fields {list(row)})")
    key = problem_key or next((k for k in PROBLEM_KEYS if k in row), "")
    problem = _text(row, key) if key else ""
    if not problem:
        raise ValueError(f"no problem (field {key or ' or '.join(PROBLEM_KEYS)!r} is missing "
                         f"or empty; the row has fields {list(row)})")
    raw, solution = _text(row, answer_key or "answer"), _text(row, solution_key)
    steps: tuple[str, ...] = ()
    if raw and gsm8k._FINAL_RE.search(raw):  # GSM8K's worked answer, "#### N" last
        answer, steps, trace = gsm8k.parse_solution(raw)
    elif raw:
        answer, trace = _MATH_DOLLARS_RE.sub("", raw).strip(), solution
    elif answer_key:
        raise ValueError(f"field {answer_key!r} is empty")
    else:  # the solution's last \boxed{} (or "####" line), as written
        marker = _last_marker(solution)
        if marker is None or not marker[1].strip():
            raise ValueError(f"no answer: neither a non-empty 'answer' nor a {solution_key!r} "
                             f"with a closed \\boxed{{}} (the row has fields {list(row)})")
        answer, trace = _MATH_DOLLARS_RE.sub("", marker[1].strip()).strip(), solution
    if not gold_parses(answer):
        raise ValueError(f"answer {answer!r} cannot be graded (math-verify does not parse it)")
    return Example(prompt=problem, answer=answer, trace=trace, steps=steps, split=split,
                   question=problem)


def read_math(source: str | Path, split: str = "train", *, subset: str = "",
              problem_key: str = "", answer_key: str = "", solution_key: str = "solution",
              limit: int | None = None) -> list[Example]:
    """Problem/answer rows of ``source`` (module docstring) as Examples, in source order.

    ``split`` is the folder's or dataset's split to read (a file is read whole) and each
    ``Example.split``; ``subset`` a config ("": ``main/`` where a folder has it, else the
    dataset's default); ``limit`` the most examples (None: all). ``prompt`` and
    ``question`` are the problem, ``trace`` the solution ("" when none).

    Raises:
        UsageError: a missing path, a malformed file, or bad rows (the first named with
            its line or row, the reason, the count and the fix).
        WeightsMissing: a dataset name that is neither in the Hugging Face cache nor
            downloadable here (the hub off, or ``datasets`` not installed).
    """
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise UsageError(f"limit={limit!r}: must be a non-negative integer or None")
    rows = _locate(source, split, subset)
    examples: list[Example] = []
    bad: list[str] = []
    reason = ""
    for where, _, row in rows:
        if limit is not None and len(examples) >= limit:
            break
        try:
            examples.append(_example(row, split, problem_key, answer_key, solution_key))
        except ValueError as error:
            bad.append(where)
            reason = reason or str(error)
    if bad:
        raise UsageError(f"{bad[0]}: bad row ({reason}); {len(bad)} bad row(s) in all. Name "
                         f"the fields with task.problem_key / task.answer_key, or fix or "
                         f"delete those rows")
    return examples


def eval_entries(text: str, *, has_source: bool = True) -> dict[str, dict]:
    """Parse ``task.eval`` (JSON text) into ``{target: entry}`` in the order given.

    A string value is ``{"source": value}``; every entry gets ``EVAL_DEFAULTS`` for the
    fields it leaves out. Names take letters, digits, ``-`` and ``_``; ``train`` is
    refused, and ``val``/``test`` too unless the task has no source of its own
    (``has_source=False``). Every problem is reported at once, in one UsageError.
    """
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"task.eval={text!r}: not JSON ({error.msg}); give "
                         f"{{name: source}} or {{name: {{source, split, ...}}}}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"task.eval={text!r}: must map target names to sources")
    entries, problems = {}, []
    reserved = ("train", "val", "test") if has_source else ("train",)
    for name, value in raw.items():
        key = f"task.eval.{name}"
        if not _NAME_RE.fullmatch(name) or name in reserved:
            problems.append(f"{key}: a target name takes letters, digits, '-' and '_' and "
                            f"is not {' or '.join(reserved)} (the task's own splits)")
        entry = {"source": value} if isinstance(value, str) else value
        if not isinstance(entry, dict):
            problems.append(f"{key}: give a source or {{source, subset, split, ...}}")
            continue
        entry = {**EVAL_DEFAULTS, **{k: v for k, v in entry.items() if v is not None}}
        unknown = sorted(set(entry) - set(EVAL_DEFAULTS))
        if unknown:
            problems.append(f"{key}: unknown field(s) {unknown}; valid: {list(EVAL_DEFAULTS)}")
        if not all(isinstance(v, str) for v in entry.values()) or not entry["source"]:
            problems.append(f"{key}: needs a non-empty source, and text in every field")
        entries[name] = entry
    if problems:
        raise UsageError("; ".join(problems))
    return entries


def _norm(problem: str) -> str:
    """The key problems are compared by (whitespace ignored): the training split's overlap
    with the targets, and a target's repeats."""
    return " ".join(problem.split())


def unique_problems(rows: list[Example]) -> list[Example]:
    """``rows`` less repeats: the first row of each problem (:func:`_norm`), in order."""
    first: dict[str, Example] = {}
    for ex in rows:
        first.setdefault(_norm(ex.problem), ex)
    return list(first.values())


# (task setting, message) of each note logged in this process: `race plan` opens a task once
# for its checks and again for its counts (two equal MathTasks, each loading its rows), and
# a note about the data is said once per command, not once per load
_SAID: set[tuple[Any, str]] = set()


def _say_once(task: MathTask, message: str) -> None:
    if (task, message) not in _SAID:
        _SAID.add((task, message))
        logger.warning("%s", message)


def _bucket(problem: str) -> str:
    """The split a problem's hash gives it (whitespace ignored, so copies agree)."""
    return HELD_OUT.get(zlib.crc32(_norm(problem).encode()) % 10, "train")


@dataclass(frozen=True, slots=True)
class MathTask:
    """Math problems with a gold answer, graded by :func:`race.tasks.verify.answers_match`.

    Own splits are disjoint by construction. A single ``source`` file is cut by a hash of
    each problem (whitespace ignored): 10% ``test``, 10% ``val``, the rest ``train``. A
    folder or dataset gives ``test`` from its test split and cuts ``val`` from
    ``train_split``. ``val_source``/``test_source`` (read whole; a folder's ``test``
    split) replace their cut. ``eval`` (JSON text, :func:`eval_entries`) names further
    targets; with ``source=""`` the task is evaluation-only and has only those. Training
    problems that appear in a target read from elsewhere are dropped from ``train``
    (:meth:`dropped_overlap`), and a target's repeated problems are kept once (both
    compared with whitespace ignored; each such drop is logged once per process).
    ``problem_key``/``answer_key``/``solution_key`` apply to source, val_source and
    test_source; ``system_prompt`` and ``answer_format`` are what the chat template wraps
    each problem in.
    """

    source: str = ""
    subset: str = ""
    train_split: str = "train"
    val_source: str = ""
    test_source: str = ""
    problem_key: str = ""
    answer_key: str = ""
    solution_key: str = "solution"
    system_prompt: str = MATH_SYSTEM_PROMPT
    answer_format: str = ""
    eval: str = ""
    name: str = "math"
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def targets(self) -> tuple[str, ...]:
        """Evaluation targets: ``val``, ``test`` (with a source), then ``eval``'s names."""
        own = ("val", "test") if self.source else ()
        return (*own, *eval_entries(self.eval, has_source=bool(self.source)))

    def rows(self, split: str) -> list[Example]:
        """Every problem of ``split`` (``train`` or a target), loaded once, in order; a
        target holds each problem once (its first row), as evaluation never repeats one."""
        if split not in self._cache:
            loaded = self._load(split)
            if not loaded:
                raise UsageError(f"task {self.name}: {split} holds no problems; give a source "
                                 f"with more rows (a hash cut takes a tenth of them)")
            unique = loaded if split == "train" else unique_problems(loaded)
            if len(unique) < len(loaded):
                _say_once(self, f"task {self.name}: dropped {len(loaded) - len(unique)} "
                                f"repeated problem(s) from {split}, which scores each of its "
                                f"{len(unique)} problems once")
            self._cache[split] = [dataclasses.replace(ex, split=split) for ex in unique]
        return self._cache[split]

    def dropped_overlap(self) -> int:
        """How many training problems were dropped for appearing in a target (0 when
        the task has no training source)."""
        if not self.source:
            return 0
        self.rows("train")
        return self._cache[("dropped",)]

    def sample(self, split: str, n: int, seed: int = 0) -> list[Example]:
        """``n`` problems of a seeded shuffle. ``train`` cycles it (GRPO steps draw with
        repeats); any other split never repeats: the first ``min(n, len(rows))``."""
        rows = list(self.rows(split))
        random.Random(f"{self.name}/{split}/{seed}").shuffle(rows)
        if split == "train":
            return [rows[i % len(rows)] for i in range(n)]
        return rows[:n]

    def verify(self, completion: str, answer: str, problem: str = "") -> bool:
        return answers_match(completion, answer)

    def _load(self, split: str) -> list[Example]:
        entries = eval_entries(self.eval, has_source=bool(self.source))
        if split in entries:
            entry = entries[split]
            keys = {k: entry[k] for k in ("subset", "problem_key", "answer_key",
                                          "solution_key")}
            return self._read(f"task.eval.{split}", entry["source"], entry["split"], keys)
        valid = ("train", *self.targets()) if self.source else tuple(entries)
        if not self.source and split in ("train", "val", "test"):
            raise UsageError(f"task.source: unset, so task {self.name} is evaluation-only and "
                             f"has no {split} split (it has {list(valid)}); give task.source "
                             f"a training file, folder or dataset name")
        if split not in valid:
            raise UsageError(f"split={split!r}: task {self.name} has {list(valid)}")
        return self._train() if split == "train" else self._own(split)

    def _keys(self) -> dict[str, str]:
        return {"problem_key": self.problem_key, "answer_key": self.answer_key,
                "solution_key": self.solution_key}

    def _read(self, key: str, source: str, split: str, keys: dict[str, str]
              ) -> list[Example]:
        """read_math, its errors prefixed with the config key that named the source."""
        readable = dataset_source(source, key=key)  # a dataset name: its cached snapshot
        try:
            return read_math(readable, split, **keys)
        except gsm8k.MissingShard as error:
            raise gsm8k.MissingShard(error.missing, error.total, f"{key}={source}") from None
        except UsageError as error:
            raise UsageError(f"{key}={source}: {error}") from None

    def _cut(self) -> tuple[str, ...]:
        """The own splits cut by hash from source's training rows."""
        path = Path(self.source).expanduser()
        single = path.is_file() or path.suffix in FILE_SUFFIXES
        return tuple(s for s, given in (("val", self.val_source), ("test", self.test_source))
                     if not given and (s == "val" or single))

    def _source_rows(self, split: str) -> list[Example]:
        """source's ``split`` (a file: the whole file), read once for every own split."""
        if ("source", split) not in self._cache:
            self._cache[("source", split)] = self._read(
                "task.source", self.source, split, {"subset": self.subset, **self._keys()})
        return self._cache[("source", split)]

    def _own(self, split: str) -> list[Example]:
        """``val`` or ``test``: a separate source, source's test split, or a hash cut."""
        given = self.val_source if split == "val" else self.test_source
        if given:
            return self._read(f"task.{split}_source", given, "test", self._keys())
        if split not in self._cut():
            return self._source_rows("test")
        return [ex for ex in self._source_rows(self.train_split) if _bucket(ex.problem) == split]

    def _train(self) -> list[Example]:
        """source's training rows, less the hash cuts and any problem of another target."""
        cut = self._cut()
        rows = [ex for ex in self._source_rows(self.train_split)
                if _bucket(ex.problem) not in cut]
        others = [t for t in self.targets() if t not in cut]  # cuts are disjoint already
        train = {_norm(ex.problem) for ex in rows}
        shared = {t: train & {_norm(ex.problem) for ex in self.rows(t)} for t in others}
        seen = set().union(*shared.values())
        kept = [ex for ex in rows if _norm(ex.problem) not in seen]
        self._cache[("dropped",)] = len(rows) - len(kept)
        overlapping = [t for t in others if shared[t]]
        if rows and not kept:
            labels = ", ".join(self._named(t) for t in overlapping)
            raise UsageError(f"task.source={self.source}: all {len(rows)} training problems "
                             f"also appear in evaluation target{'s' * (len(overlapping) > 1)} "
                             f"{labels} and were dropped (a model is not scored on problems "
                             f"it trained on); give a training source that differs from the "
                             f"targets")
        if len(kept) < len(rows):
            _say_once(self, f"task {self.name}: dropped {len(rows) - len(kept)} training "
                            f"problem(s) also in {', '.join(overlapping)}")
        return kept

    def _named(self, target: str) -> str:
        """A target and the setting its problems come from: ``m500 (task.eval.m500=...)``."""
        entries = eval_entries(self.eval, has_source=bool(self.source))
        given = self.val_source if target == "val" else self.test_source
        if target in entries:
            where = f"task.eval.{target}={entries[target]['source']}"
        else:
            where = f"task.{target}_source={given}" if given else \
                f"task.source={self.source}, split test"
        return f"{target} ({where})"
