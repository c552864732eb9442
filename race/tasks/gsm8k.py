"""GSM8K-format loader: grade-school word problems whose solutions end in ``#### N``.

A row has ``question`` and ``answer``; ``answer`` holds the worked solution, one step per
line, then ``#### N`` (N may carry thousands commas, a sign or decimals). Sources:

* a local ``.jsonl`` file (GSM8K's original release), or ``.json`` (JSON lines or one
  JSON array of rows);
* a local ``.parquet`` file (the Hugging Face dataset's layout), read with pandas;
* a local folder holding such files, one per split (``data/test.jsonl``, or a Hugging
  Face snapshot's ``main/test-00000-of-00001.parquet``); a split sharded the hub's way
  (``data/train-00000-of-00002.parquet``, ``data/train-00001-of-00002.parquet``) is read
  whole, shard by shard, and one with a shard absent is refused (:class:`MissingShard`);
* anything else is a dataset name (``openai/gsm8k``), read as such a folder from its
  snapshot in the Hugging Face cache (:mod:`race.tasks.hub_data`), or, where the cache
  lacks it and the hub is reachable, with ``datasets.load_dataset(name, "main",
  split=...)``.

Bad rows are never silent: by default the first one raises, naming the file (the shard),
its 1-based line (or row) and how many rows are bad (the message asks to fix or delete them: no
config key skips them); called from Python, ``skip_invalid=True`` drops them and reports
them in ``GSM8KLoad.invalid_rows`` (and in a logged warning from ``load_gsm8k``). A file
that is not UTF-8 text (a binary) is refused, named.

pandas (parquet sources) and datasets (a hub dataset the cache lacks) are imported only
when such a source is read (heavy, and datasets is optional).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from race.errors import UsageError
from race.tasks.hub_data import dataset_source
from race.tasks.task_base import FILE_SUFFIXES, Example
from race.tasks.verify import normalize_number

logger = logging.getLogger(__name__)

# The policy sees the question and is asked for GSM8K's own answer format, which the
# rule-based verifier reads first (race.tasks.verify.extract_final_answer).
PROMPT_TEMPLATE = ("{question}\n"
                   "Solve it step by step, then give the final answer on its own line "
                   "as '#### <number>'.")


# GSM8K's calculator annotations, "48/2 = <<48/2=24>>24": tool markup, not reasoning text.
_CALCULATOR_RE = re.compile(r"<<[^<>]*>>")
_FINAL_RE = re.compile(r"^\s*####\s*(.*?)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class GSM8KLoad:
    """What a load produced, and what it refused.

    Attributes:
        examples: the parsed problems, in source order.
        invalid_rows: 1-based line (JSON lines) or row numbers of the rows skipped (each
            within its own file, for a split read from several shards).
        first_error: why the first invalid row was refused ("" when none was).
        source: the file, shards or dataset name read.
    """

    examples: list[Example]
    invalid_rows: tuple[int, ...] = ()
    first_error: str = ""
    source: str = ""

    @property
    def invalid_count(self) -> int:
        """How many rows were skipped."""
        return len(self.invalid_rows)


def parse_solution(answer: str, *, strip_calculator: bool = True
                   ) -> tuple[str, tuple[str, ...], str]:
    """Split a GSM8K ``answer`` field into (final answer, steps, trace).

    Args:
        answer: the worked solution ending with ``#### N``.
        strip_calculator: drop ``<<expr=value>>`` calculator annotations.

    Returns:
        ``(number, steps, trace)``: the normalised final answer (``"1,234" -> "1234"``),
        the non-empty solution lines before ``####``, and those lines followed by the
        ``#### number`` line.

    Raises:
        ValueError: no ``#### N`` line, or N is not a number.
    """
    matches = list(_FINAL_RE.finditer(answer))
    if not matches:
        raise ValueError("no '#### <number>' final-answer line")
    final = matches[-1]
    number = normalize_number(final.group(1))
    if number is None:
        raise ValueError(f"final answer {final.group(1)!r} after '####' is not a number")
    body = answer[:final.start()]
    if strip_calculator:
        body = _CALCULATOR_RE.sub("", body)
    steps = tuple(line.strip() for line in body.splitlines() if line.strip())
    trace = "\n".join((*steps, f"#### {number}"))
    return number, steps, trace


def _example(row: Any, *, split: str, template: str, strip_calculator: bool) -> Example:
    if not isinstance(row, Mapping):
        raise ValueError(f"row is a {type(row).__name__}, not an object with "
                         f"'question' and 'answer'")
    missing = [key for key in ("question", "answer") if not isinstance(row.get(key), str)]
    if missing:
        raise ValueError(f"missing or non-text key(s) {missing}")
    number, steps, trace = parse_solution(row["answer"], strip_calculator=strip_calculator)
    question = row["question"].strip()
    return Example(prompt=template.format(question=question), answer=number, trace=trace,
                   steps=steps, split=split, question=question)


def _not_text(path: Path, error: UnicodeDecodeError) -> UsageError:
    """A data file that is not UTF-8 text (a binary, or another encoding), named."""
    return UsageError(f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x} at "
                      f"offset {error.start}); task.source needs a .jsonl/.json/.parquet "
                      f"file of GSM8K rows (question, answer '#### N') in UTF-8")


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line, text) of a UTF-8 file; a binary file is a UsageError naming it."""
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                yield line_no, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise _not_text(path, error) from None


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(1-based line, row) for each non-blank line; malformed JSON raises at once."""
    for line_no, line in _text_lines(path):
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}:{line_no}: malformed JSON ({error.msg} at column "
                             f"{error.colno}); fix or delete that line (one JSON object "
                             f"per line)") from error


def _json_rows(path: Path) -> tuple[Iterable[tuple[int, Any]], str]:
    """A ``.json`` file: one JSON array of rows (numbered as rows), else JSON lines."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_text(path, error) from None
    if not text.lstrip().startswith("["):
        return _json_lines(path), "line"
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}:{error.lineno}: malformed JSON ({error.msg} at column "
                         f"{error.colno}); fix the file or write it as JSON lines") from error
    return enumerate(rows, start=1), "row"


def _parquet_rows(path: Path) -> Iterable[tuple[int, Any]]:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, ImportError) as error:  # pyarrow's ArrowInvalid included
        first = str(error).strip().splitlines()[0][:120] if str(error).strip() else ""
        raise UsageError(f"{path}: not a readable parquet file ({type(error).__name__}: "
                         f"{first}); give a GSM8K-format .parquet, .jsonl or .json file"
                         ) from None
    return enumerate(frame.to_dict(orient="records"), start=1)


def _file_rows(path: Path) -> Iterator[tuple[str, int, Any]]:
    """(where, number, row) of each row of one data file: ``where`` is ``file:line`` (JSON
    lines) or ``file row N`` (parquet, a JSON array), what a bad row's message names."""
    if path.suffix == ".jsonl":
        rows, unit = _json_lines(path), "line"
    elif path.suffix == ".json":
        rows, unit = _json_rows(path)
    else:
        rows, unit = _parquet_rows(path), "row"
    for number, row in rows:
        yield (f"{path}:{number}" if unit == "line" else f"{path} row {number}"), number, row


def _files_rows(paths: list[Path]) -> Iterator[tuple[str, int, Any]]:
    """:func:`_file_rows` of each file in turn: a sharded split's rows, shard by shard."""
    for path in paths:
        yield from _file_rows(path)


def _dataset_rows(name: str, split: str, subset: str | None = "main"
                  ) -> Iterator[tuple[str, int, Any]]:
    """(where, row number, row) of ``datasets.load_dataset(name, subset, split=split)``
    (GSM8K's config is ``main``; task=math passes its own ``task.subset``, None for none):
    a name the cache lacks, where :func:`race.tasks.hub_data.dataset_source` found
    ``datasets`` able to download it."""
    import datasets

    label = f"dataset {name} (split {split})"
    for number, row in enumerate(datasets.load_dataset(name, subset, split=split), start=1):
        yield f"{label} row {number}", number, row


class MissingShard(UsageError):
    """A split sharded the hub's way (``train-00000-of-00003.parquet``, ...) with shards
    absent: reading the others would train or score on part of the data.

    Attributes:
        missing: the absent files (paths, as the shards present name them).
        total: how many shards the names promise.
        where: the setting that named the folder (``task.source=...``; "": none).
    """

    def __init__(self, missing: tuple[str, ...], total: int, where: str = ""):
        self.missing, self.total, self.where = tuple(missing), total, where
        named = ", ".join(self.missing[:3]) + (f" and {len(self.missing) - 3} more"
                                                if len(self.missing) > 3 else "")
        one = len(self.missing) == 1
        super().__init__(f"{where + ': ' if where else ''}shard{'' if one else 's'} {named} "
                         f"{'is' if one else 'are'} missing "
                         f"({len(self.missing)} of the split's {total}); a split is read "
                         f"whole: put all {total} shards in that folder (for a dataset named "
                         f"by hub id, `race prefetch` downloads them) and rerun")

    def __reduce__(self):  # raised in pilot processes, pickled back to the sweep
        return (MissingShard, (self.missing, self.total, self.where))


# a split's file: "<split>.jsonl", or shard i of n, "<split>-0000i-of-0000n.parquet" (older
# hub uploads add "-<hex>" after the shard numbers)
_SPLIT_NAME = (r"{split}(?:-(?P<index>\d+)-of-(?P<total>\d+)(?:-[0-9a-f]+)?)?"
               r"(?P<ext>\.jsonl|\.json|\.parquet)")


def _split_files(folder: Path, split: str) -> list[Path]:
    """The data files of ``split`` inside a local dataset folder, in order.

    Matches ``<split>.jsonl`` (GSM8K's release) and a hub snapshot's shards
    ``<split>-0000i-of-0000n.parquet`` (any n; every shard of the split, in index order);
    where both configs are present, ``main/`` wins over ``socratic/``.

    Raises:
        FileNotFoundError: no file for ``split``, or several that are not one split's
            shards (files in two subfolders, ``test.jsonl`` beside ``test.parquet``).
        MissingShard: shards named ``-of-0000n`` with some of the n absent.
    """
    name = re.compile(_SPLIT_NAME.format(split=re.escape(split)))
    found = sorted(p for p in folder.rglob("*") if p.is_file() and name.fullmatch(p.name))
    if len(found) > 1 and any("main" in p.relative_to(folder).parts for p in found):
        found = [p for p in found if "main" in p.relative_to(folder).parts]
    names = {p: name.fullmatch(p.name) for p in found}
    shards = {int(m["index"]): p for p, m in names.items() if m["index"]}
    one_split = len(found) == 1 or (len({p.parent for p in found}) == 1
                                    and len(shards) == len(found)
                                    and len({m["total"] for m in names.values()}) == 1)
    if not found or not one_split:
        what = "no file" if not found else f"{len(found)} files {[str(p) for p in found]}"
        raise FileNotFoundError(f"source={str(folder)!r}: found {what} for split={split!r} "
                                f"(named '{split}.jsonl' or '{split}-*-of-*.parquet', the "
                                f"shards of one split in one folder); pass the data file "
                                f"itself")
    if not shards:
        return found
    first = names[found[0]]
    total, width = int(first["total"]), len(first["index"])
    missing = [str(found[0].parent / f"{split}-{i:0{width}d}-of-{first['total']}"
                   f"{first['ext']}") for i in range(total) if i not in shards]
    if missing:
        raise MissingShard(tuple(missing), total)
    if max(shards) >= total:
        raise FileNotFoundError(f"source={str(folder)!r}: {shards[max(shards)]} is shard "
                                f"{max(shards)} of a split of {total}; remove it or pass the "
                                f"data files of one split")
    return [shards[i] for i in sorted(shards)]


def _label(files: list[Path], split: str) -> str:
    """What messages call a split's files: the file, or its folder and shard count."""
    return str(files[0]) if len(files) == 1 else \
        f"{files[0].parent} (split {split}, {len(files)} shards)"


def _resolve(source: str | Path, split: str) -> tuple[str, Iterator[tuple[str, int, Any]]]:
    """(label used in messages, (where, number, row) of every row)."""
    source = dataset_source(str(source))  # a dataset name: its cached snapshot folder
    path = Path(source).expanduser()
    if path.is_dir():
        files = _split_files(path, split)
        return _label(files, split), _files_rows(files)
    if path.suffix in FILE_SUFFIXES:
        if not path.is_file():
            raise FileNotFoundError(f"source={str(source)!r}: no such file; check the path, "
                                    f"or pass a dataset name (e.g. 'openai/gsm8k') to read "
                                    f"it with `datasets`")
        return str(path), _files_rows([path])
    if path.is_file():
        raise UsageError(f"source={str(source)!r}: unsupported file type {path.suffix!r}; "
                         f"convert it to one of {list(FILE_SUFFIXES)}")
    return f"dataset {source!s} (split {split})", _dataset_rows(str(source), split)


def read_gsm8k(source: str | Path, split: str = "test", limit: int | None = None, *,
               skip_invalid: bool = False, template: str = PROMPT_TEMPLATE,
               strip_calculator: bool = True) -> GSM8KLoad:
    """Load GSM8K-format problems and report the rows that could not be used.

    Args:
        source: a local ``.jsonl``/``.json``/``.parquet`` file, a folder holding one file
            per split, or a dataset name for ``datasets.load_dataset(source, "main")``.
        split: which split to read (and to record in each ``Example.split``).
        limit: stop after this many valid examples (None: all).
        skip_invalid: skip rows without a usable ``#### N`` answer instead of raising;
            they are listed in ``invalid_rows``. Malformed JSON always raises.
        template: prompt format with a ``{question}`` field; ``"{question}"`` gives the
            bare question.
        strip_calculator: drop GSM8K's ``<<48/2=24>>`` annotations from steps and trace.

    Returns:
        ``GSM8KLoad`` with the examples and the skipped rows.

    Raises:
        FileNotFoundError: a file path that does not exist.
        ValueError: malformed JSON; an invalid row when ``skip_invalid`` is False (the
            message names the file, the first bad line and the count of bad rows).
        WeightsMissing: a dataset name that is neither in the Hugging Face cache nor
            downloadable here (the hub off, or ``datasets`` not installed).
    """
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r}: must be a non-negative integer or None")
    if "{question}" not in template:
        raise ValueError(f"template={template!r}: must contain '{{question}}'")
    label, rows = _resolve(source, split)
    examples: list[Example] = []
    invalid: list[int] = []
    first_reason = where = ""
    for at, number, row in rows:
        if limit is not None and len(examples) >= limit:
            break
        try:
            examples.append(_example(row, split=split, template=template,
                                     strip_calculator=strip_calculator))
        except ValueError as error:
            invalid.append(number)
            first_reason, where = first_reason or str(error), where or at
    if invalid and not skip_invalid:
        raise UsageError(f"{where}: invalid GSM8K row ({first_reason}); "
                         f"{len(invalid)} invalid row(s) in all. Each row needs 'question' "
                         f"and an 'answer' ending in '#### <number>'; fix or delete those "
                         f"rows")
    first_error = f"{where}: {first_reason}" if invalid else ""
    return GSM8KLoad(examples, tuple(invalid), first_error, label)


def load_gsm8k(source: str | Path, split: str = "test", limit: int | None = None, *,
               skip_invalid: bool = False, template: str = PROMPT_TEMPLATE,
               strip_calculator: bool = True) -> list[Example]:
    """Load GSM8K-format problems as ``Example``s (see ``read_gsm8k`` for the arguments).

    With ``skip_invalid=True`` the skipped rows are logged as a warning on this module's
    logger (count, first line and reason); call ``read_gsm8k`` to get them as data.
    """
    loaded = read_gsm8k(source, split, limit, skip_invalid=skip_invalid, template=template,
                        strip_calculator=strip_calculator)
    if loaded.invalid_rows:
        logger.warning("%s: skipped %d invalid GSM8K row(s) (first: %s)", loaded.source,
                       loaded.invalid_count, loaded.first_error)
    return loaded.examples
