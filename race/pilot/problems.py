"""How many problems a cell's task holds in each split and how many each evaluation
target scores at a checkpoint, as ``race plan`` states them before anything runs.

A target scores what the pilot asks of it (:func:`race.pilot.budget.eval_problems`) or,
where it holds fewer, every problem it holds: a held-out split never repeats a problem
(``sample`` gives ``min(n, rows)``), so a 20-problem target is scored on 20 problems
whatever ``pilot.eval_examples`` says. The training split is counted after the task drops
the problems that also appear in a target (``task=math``: :meth:`MathTask.dropped_overlap`).

Counting reads only what is on this machine: local files and datasets whose hub snapshot
is cached (what :func:`race.preflight.open_task` reads for the plan's check). A dataset
named by hub id that is not cached is "unknown until fetched"; the embedded task draws
its problems afresh and has no fixed split size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from race.core.specs import RunSpec
from race.errors import MissingExtra
from race.pilot.budget import eval_problems
from race.tasks import build_task, data_sources
from race.tasks.hub_data import snapshot_folder
from race.tasks.task_base import is_local


@dataclass(frozen=True, slots=True)
class SplitCounts:
    """The problems of one task setting, by split.

    Attributes:
        task: the task's name.
        asked: target -> problems a checkpoint asks for (the selection target first).
        held: split (``train`` and each target) -> problems it holds; empty when unknown.
        dropped: training problems dropped for appearing in a target (0: none, or a task
            whose splits are disjoint by construction).
        selection: the target selection reads.
        unknown: why ``held`` is empty ("" when counted): the task draws its problems
            afresh (``drawn``: each target then scores exactly what it asks), or a
            dataset is not on this machine yet.
    """

    task: str
    asked: dict[str, int]
    held: dict[str, int]
    dropped: int
    selection: str
    unknown: str = ""
    drawn: bool = False

    @property
    def scored(self) -> dict[str, int]:
        """Target -> problems a checkpoint scores: what it asks, or all it holds when it
        holds fewer (what it asks where its size is unknown: an upper bound)."""
        return {t: min(n, self.held.get(t, n)) for t, n in self.asked.items()}


def not_here(entry: dict) -> list[str]:
    """``key=source`` of each dataset a task entry reads that is neither a local path nor
    a cached hub snapshot (the plan fetches nothing: ``race prefetch`` does)."""
    return [f"{key}={source}" for key, source, _ in data_sources(entry)
            if not is_local(source) and snapshot_folder(source) is None]


def split_counts(spec: RunSpec) -> SplitCounts:
    """What ``spec``'s task holds in each split and what each target scores.

    Raises:
        UsageError: a split the task cannot give (as the pilot would raise it).
    """
    entry = dict(spec.task)
    asked = eval_problems(spec)
    asked = {spec.selection_target: asked[spec.selection_target]} | asked
    counts = SplitCounts(str(entry.get("name", "")), asked, {}, 0, spec.selection_target)
    if entry.get("name") not in ("arith", "reasoning-gym") and not entry.get("source"):
        return _unknown(counts, "unknown: no task.source given (a sweep needs one)")
    missing = not_here(entry)
    if missing:
        return _unknown(counts, f"unknown until fetched: {', '.join(missing)} not in the "
                                f"Hugging Face cache (`race prefetch` downloads it)")
    try:
        task = build_task(entry)
    except MissingExtra as error:
        return _unknown(counts, f"unknown: {error}")
    if not hasattr(task, "rows"):
        return _unknown(counts, "drawn afresh, no fixed split sizes", drawn=True)
    held = {split: len(task.rows(split)) for split in ("train", *asked)}
    dropped = task.dropped_overlap() if hasattr(task, "dropped_overlap") else 0
    return SplitCounts(counts.task, asked, held, dropped, spec.selection_target)


def _unknown(counts: SplitCounts, why: str, *, drawn: bool = False) -> SplitCounts:
    return SplitCounts(counts.task, counts.asked, {}, 0, counts.selection, why, drawn)


def plan_counts(specs: Iterable[RunSpec]) -> list[SplitCounts]:
    """:func:`split_counts` of each distinct task setting among ``specs`` (a grid's cells
    share one, unless a task knob or the problem counts are an axis), counted once."""
    seen: dict[tuple, SplitCounts] = {}
    for spec in specs:
        key = (spec.task, spec.eval_targets, spec.selection_target, spec.select_examples,
               spec.eval_examples)
        if key not in seen:
            seen[key] = split_counts(spec)
    return list(seen.values())
