"""GSM8K-format loader: grade-school word problems whose solutions end in ``#### N``.

A row has ``question`` and ``answer``; ``answer`` holds the worked solution, one step per
line, then ``#### N`` (N may carry thousands commas, a sign or decimals). Sources:

* a local ``.jsonl`` file (GSM8K's original release), or ``.json`` (JSON lines or one
  JSON array of rows);
* a local ``.parquet`` file (the Hugging Face dataset's layout), read with pandas;
* a local folder holding such files, one per split (``data/test.jsonl``, or a Hugging
  Face snapshot's ``main/test-00000-of-00001.parquet``);
* anything else is a dataset name (``openai/gsm8k``), read as such a folder from its
  snapshot in the Hugging Face cache (:mod:`race.tasks.hub_data`), or, where the cache
  lacks it and the hub is reachable, with ``datasets.load_dataset(name, "main",
  split=...)``.

Bad rows are never silent: by default the first one raises, naming the file, its 1-based
line (or row) and how many rows are bad (the message asks to fix or delete them: no
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
        invalid_rows: 1-based line (JSON lines) or row numbers of the rows skipped.
        first_error: why the first invalid row was refused ("" when none was).
        source: the file or dataset name read.
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


def _dataset_rows(name: str, split: str, subset: str | None = "main"
                  ) -> Iterable[tuple[int, Any]]:
    """Rows of ``datasets.load_dataset(name, subset, split=split)`` (GSM8K's config is
    ``main``; task=math passes its own ``task.subset``, None for none): a name the cache
    lacks, where :func:`race.tasks.hub_data.dataset_source` found ``datasets`` able to
    download it."""
    import datasets

    return enumerate(datasets.load_dataset(name, subset, split=split), start=1)


def _split_file(folder: Path, split: str) -> Path:
    """The data file for ``split`` inside a local dataset folder.

    Matches ``<split>.jsonl`` (GSM8K's release) and ``<split>-00000-of-00001.parquet``
    (the Hugging Face snapshot; older uploads add ``-<hex>`` after the shard numbers);
    where both configs are present, ``main/`` wins over ``socratic/``.
    """
    name = re.compile(rf"{re.escape(split)}(?:-\d+-of-\d+(?:-[0-9a-f]+)?)?"
                      rf"(?:\.jsonl|\.json|\.parquet)")
    found = sorted(p for p in folder.rglob("*") if p.is_file() and name.fullmatch(p.name))
    if len(found) > 1 and any("main" in p.relative_to(folder).parts for p in found):
        found = [p for p in found if "main" in p.relative_to(folder).parts]
    if len(found) != 1:
        what = "no file" if not found else f"{len(found)} files {[str(p) for p in found]}"
        raise FileNotFoundError(f"source={str(folder)!r}: found {what} for split={split!r} "
                                f"(named '{split}.jsonl' or '{split}-*-of-*.parquet'); pass "
                                f"the data file itself")
    return found[0]


def _resolve(source: str | Path, split: str) -> tuple[str, Iterable[tuple[int, Any]], str]:
    """(label used in messages, numbered rows, 'line' or 'row')."""
    source = dataset_source(str(source))  # a dataset name: its cached snapshot folder
    path = Path(source).expanduser()
    if path.is_dir():
        path = _split_file(path, split)
    if path.suffix in FILE_SUFFIXES:
        if not path.is_file():
            raise FileNotFoundError(f"source={str(source)!r}: no such file; check the path, "
                                    f"or pass a dataset name (e.g. 'openai/gsm8k') to read "
                                    f"it with `datasets`")
        if path.suffix == ".jsonl":
            return str(path), _json_lines(path), "line"
        if path.suffix == ".json":
            return (str(path), *_json_rows(path))
        return str(path), _parquet_rows(path), "row"
    if path.is_file():
        raise UsageError(f"source={str(source)!r}: unsupported file type {path.suffix!r}; "
                         f"convert it to one of {list(FILE_SUFFIXES)}")
    return f"dataset {source!s} (split {split})", _dataset_rows(str(source), split), "row"


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
    label, rows, unit = _resolve(source, split)
    examples: list[Example] = []
    invalid: list[int] = []
    first_reason = ""
    for number, row in rows:
        if limit is not None and len(examples) >= limit:
            break
        try:
            examples.append(_example(row, split=split, template=template,
                                     strip_calculator=strip_calculator))
        except ValueError as error:
            invalid.append(number)
            first_reason = first_reason or str(error)
    where = ""
    if invalid:
        where = f"{label}:{invalid[0]}" if unit == "line" else f"{label} row {invalid[0]}"
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
