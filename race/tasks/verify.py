"""Final-answer extraction and equivalence: the rule-based verifier's core.

Under GRPO a policy learns whatever the reward pays, so ``answers_match`` pays a completion
only for the answer it states, compared whole:

- **What a completion states.** The content of its last answer marker by position: a
  ``#### ...`` line (GSM8K's format; it ends at the line's end or at the next marker on
  it) or a ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces). ``#### 7 ... \\boxed{10}``
  states 10, ``\\boxed{4} or \\boxed{5}`` states 5. A box inside a box is only grouping
  (``\\boxed{2 \\text{ or } \\boxed{3}}`` states ``2 or 3``). A text with no marker, or
  whose last marker is empty or unclosed, states nothing and is not paid: there is no
  "last number in the text" fallback, which would pay any text that happens to end on
  the gold number.
- **Plain numbers.** When both the stated answer and the gold are plain numbers
  (:func:`normalize_number`: sign, thousands commas, decimals, ``$``, a trailing period or
  ``%``), they compare as exact decimals without sympy: ``72.0`` is 72, ``1,000`` is 1000,
  ``72.0000001`` is not 72. After ``####`` only, a number followed by plain words reads as
  the number (``#### 72 dollars``, GSM8K's convention), unless a word is maths, a number
  or a connective (``#### 2 million``, ``#### 5 pi``, ``#### 2 or three`` are not 2 or 5).
- **Everything else** goes to math-verify whole, never cut to a leading number
  (``\\boxed{3\\sqrt{2}}`` is not 3, ``#### 2x+1`` is not 2); a plain number on one side
  reaches it in canonical form (``50\\%`` as 50). Both sides are read the way TRL's
  ``trl.rewards.accuracy_reward`` reads them, each handed over as ``\\boxed{answer}``. The
  answer: ``LatexExtractionConfig(normalization_config=NormalizationConfig(units=True),
  boxed_match_priority=0, try_extract_without_anchor=False)`` plus ``ExprExtractionConfig``,
  first match only; its LaTeX must be correct, as in TRL (``\\frac12`` is not repaired to
  ``\\frac{1}{2}``, so it is refused). The gold: math-verify's default LaTeX
  normalisation, parsed once per gold string. Then ``verify(gold, answer)``, gold first
  ("order here is important", math-verify's README: the comparison is not symmetric).
  Unit words are dropped (``\\boxed{18\\text{ dollars}}`` is 18) only when no number
  follows a ``\\text{...}``: math-verify's unit removal keeps what precedes the first unit,
  so it would read ``5\\text{ hours } 30\\text{ minutes}`` as 5. Several answers in one
  marker (``2, 3``, ``2 \\text{ or } 3``, ``\\pm 2``) are a set, equal only to the same
  set in any order, never to one of its members.
- **Unusable gold.** A gold that is neither a plain number nor parsed by math-verify
  (:func:`gold_parses` is False; a data loader should refuse such rows) is matched only by
  exact string equality, whitespace ignored.

Pure string functions, safe in worker threads. math-verify's own timeouts use
``signal.alarm``, which works only in the main thread, so they are disabled
(``parsing_timeout=None``, ``timeout_seconds=None``) and the work is bounded instead by the
text handed to it: an answer or gold longer than ``MAX_VERIFY_CHARS`` is never parsed and
matches only by exact string equality, whitespace ignored. math_verify is imported on the
first comparison that needs it (heavy: it loads sympy).
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from decimal import Decimal

# Longest answer or gold text handed to math_verify/sympy; longer ones compare as strings.
MAX_VERIFY_CHARS = 200

# "1,234", "-3.5", "+7", ".5": thousands groups must be exact so "1,2345" is not 12345,
# and a sign counts only where it cannot be a minus between two terms ("5-3").
_NUMBER = r"(?:(?<![\w)\]}])[-+])?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"
_NUMBER_RE = re.compile(_NUMBER)
# An answer marker: a "####" line, or the opening of \boxed{...} / \fbox{...}.
_MARKER_RE = re.compile(r"####|\\(?:boxed|fbox)\s*\{")
# The $ signs of inline maths at either end of an answer, not an escaped \$.
_MATH_DOLLARS_RE = re.compile(r"^\$+|(?<!\\)\$+$")
# What brace matching looks at: an escaped character (\{, \}, \\) or a brace.
_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)
# "#### 72 dollars": a number, then words of two or more letters and nothing else.
_UNIT_WORDS_RE = re.compile(r"(\S+)\s+([A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*)\.?")
# A \text{...} (or \mbox, \mathrm) with a digit after it: unit removal would cut there.
_TEXT_THEN_DIGIT_RE = re.compile(r"\\(?:text|mbox|mathrm)\s*\{.*\d", re.DOTALL)
# Words that make "#### N word" something other than N: maths, numbers and scales, and
# connectives that join N to another answer. A plural is checked without its "s".
_NOT_UNITS = frozenset("""
    pi sqrt root squared cubed power exp log ln sin cos tan mod cdot frac inf infty infinity
    and or plus minus times over divided not
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
    eighty ninety hundred thousand million billion trillion dozen grand half halve third
    quarter fourth fifth sixth seventh eighth ninth tenth
""".split())


def _strip_decoration(text: str) -> str:
    """Drop what decorates an answer without changing it: spaces, ``$``, ``\\$``, a final
    period or ``%``."""
    text = text.replace("\\$", "").replace("\\%", "%").strip().strip("$").strip()
    return text.rstrip(".%").rstrip()


def normalize_number(text: str) -> str | None:
    """Canonical string of a plain number, or None when ``text`` is not one.

    Accepts a sign, thousands commas and decimals, and ignores surrounding ``$``,
    ``\\$``, a trailing period and a trailing ``%``: ``"1,234" -> "1234"``,
    ``"+72.50" -> "72.5"``, ``"72.0" -> "72"``, ``"-0" -> "0"``.
    """
    cleaned = _strip_decoration(text)
    if not _NUMBER_RE.fullmatch(cleaned):
        return None
    value = Decimal(cleaned.replace(",", ""))
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


@dataclass(frozen=True, slots=True)
class _Answer:
    """A stated answer: ``text`` is what is compared (a plain number in canonical form,
    :func:`normalize_number`, else the content as written); ``is_number`` says which."""

    text: str
    is_number: bool


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the brace that closes the group opened just before ``start``, or None."""
    depth = 1
    for match in _BRACE_RE.finditer(text, start):
        if match.group() == "{":
            depth += 1
        elif match.group() == "}":
            depth -= 1
            if depth == 0:
                return match.start()
    return None


def _last_marker(text: str) -> tuple[bool, str] | None:
    """``(is_hash_line, content)`` of the last outermost marker, or None when there is
    none; content is ``""`` when that marker is unclosed (everything after it is inside).

    A ``####`` line's content ends at the line's end or at the next marker on it, which
    is a later marker of its own (``#### 7 so \\boxed{10}`` states 10)."""
    last, position = None, 0
    while (match := _MARKER_RE.search(text, position)) is not None:
        if match.group() == "####":
            end = text.find("\n", match.end())
            end = len(text) if end < 0 else end
            following = _MARKER_RE.search(text, match.end(), end)
            end = end if following is None else following.start()
            last, position = (True, text[match.end():end]), end
        else:
            end = _closing_brace(text, match.end())
            if end is None:
                return False, ""
            last, position = (False, text[match.end():end]), end + 1
    return last


def _unit_number(content: str) -> str | None:
    """The number of ``N unit words`` after ``####`` (``72 dollars`` -> ``72``), or None."""
    match = _UNIT_WORDS_RE.fullmatch(content)
    if match is None:
        return None
    words = match.group(2).lower().split()
    if any(word in _NOT_UNITS or word.removesuffix("s") in _NOT_UNITS for word in words):
        return None
    return normalize_number(match.group(1))


def _read_answer(content: str, is_hash_line: bool) -> _Answer | None:
    """A marker's content as an answer; None when it is empty."""
    # a \boxed inside the answer only groups: "2 \text{ or } \boxed{3}" states "2 or 3"
    text = _MARKER_RE.sub(lambda m: "{" if m.group() != "####" else "", content).strip()
    # surrounding $...$ (an escaped \$ is the currency sign: normalize_number drops it)
    text = _MATH_DOLLARS_RE.sub("", text).strip().removesuffix(".").strip()
    if not text:
        return None
    number = normalize_number(text)
    if number is None and is_hash_line:
        number = _unit_number(text)
    return _Answer(text, is_number=False) if number is None else _Answer(number, True)


def _stated_answer(text: str) -> _Answer | None:
    """What ``text`` states by its last marker; None when it states nothing."""
    marker = _last_marker(text)
    return None if marker is None else _read_answer(marker[1], is_hash_line=marker[0])


def _gold_answer(gold: str) -> _Answer | None:
    """The gold answer: a reference solution's last marker, else the whole string."""
    if _MARKER_RE.search(gold):
        return _stated_answer(gold)
    return _read_answer(gold, is_hash_line=False)


def extract_final_answer(completion: str) -> str | None:
    """The answer a completion states, exactly what :func:`answers_match` grades.

    That is the content of its last answer marker by position, a ``#### ...`` line or a
    ``\\boxed{...}`` / ``\\fbox{...}``; None when it has no marker or the last one is empty
    or unclosed. Plain numbers come back normalised (``"1,234" -> "1234"``, and after
    ``####`` ``"72 dollars" -> "72"``); anything else comes back as written, without
    surrounding ``$`` or a final period.
    """
    answer = _stated_answer(completion)
    return None if answer is None else answer.text


class _QuietDisabledTimeout(logging.Filter):
    """Drops math-verify's "Timeout is disabled" warning: disabling them is deliberate here
    (they need the main thread) and the input length is capped instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


_QUIET = _QuietDisabledTimeout()


@functools.cache
def _math_verify():
    """math_verify's ``(parse, verify)``, imported once, its timeout warning silenced."""
    from math_verify import parse, verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
    return parse, verify


@functools.cache
def _extraction_config(is_gold: bool, units: bool) -> tuple:
    """What math-verify extracts with: TRL's accuracy_reward configs, ``units`` aside."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    # both sides arrive as \boxed{...}, so the boxed pattern (priority 0) is the match
    if is_gold:  # math-verify's default normalisation: malformed operators repaired
        normalization = NormalizationConfig(basic_latex=True, units=units,
                                            malformed_operators=True, nits=True)
        return (LatexExtractionConfig(normalization_config=normalization,
                                      boxed_match_priority=0,
                                      try_extract_without_anchor=False),)
    # the answer must be correct LaTeX: no repair of malformed operators
    return (LatexExtractionConfig(normalization_config=NormalizationConfig(units=units),
                                  boxed_match_priority=0, try_extract_without_anchor=False),
            ExprExtractionConfig())


def _parse(text: str, is_gold: bool) -> list:
    """math-verify's parse of ``\\boxed{text}``: sympy objects only, no string fallback."""
    # Unit removal keeps what precedes the first unit word, so with a number after a
    # \text{...} it would read "5\text{ hours } 30\text{ minutes}" as 5 and
    # "3 \text{ apples or } 4 \text{ apples}" as 3: units are dropped only when none does.
    units = _TEXT_THEN_DIGIT_RE.search(text) is None
    parse = _math_verify()[0]
    # first_match: the first matching pattern decides, no later pattern picks a fragment
    return parse(f"\\boxed{{{text}}}", extraction_config=_extraction_config(is_gold, units),
                 fallback_mode="no_fallback", extraction_mode="first_match",
                 parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def _parsed_gold(text: str) -> tuple:
    """The gold answer parsed once per string; empty when math-verify cannot parse it."""
    return tuple(_parse(text, is_gold=True))


def gold_parses(gold: str) -> bool:
    """Whether ``gold`` can be graded beyond exact string equality.

    Args:
        gold: a bare answer (``"72"``, ``"3\\sqrt{2}"``) or a reference solution whose last
            marker (``#### 72``, ``\\boxed{...}``) holds the answer.

    Returns:
        True when its answer is a plain number, or at most ``MAX_VERIFY_CHARS`` long and
        parsed by math-verify. A loader should refuse rows where this is False: a
        completion can then match them only by writing the same string.
    """
    answer = _gold_answer(gold)
    if answer is None:
        return False
    if answer.is_number:
        return True
    return len(answer.text) <= MAX_VERIFY_CHARS and bool(_parsed_gold(answer.text))


def _same_text(a: str, b: str) -> bool:
    return "".join(a.split()) == "".join(b.split())


def answers_match(completion: str, gold: str) -> bool:
    """Whether the answer ``completion`` states equals the gold (the module's rules).

    Args:
        completion: model output; its last ``#### ...`` line or ``\\boxed{...}`` is its
            answer (see :func:`extract_final_answer`).
        gold: the gold answer (``"72"``, ``"\\frac{1}{2}"``) or a reference solution whose
            last marker holds it (``"... #### 72"``).

    Returns:
        False when the completion states no answer or the gold has none. Else True when
        both are plain numbers of equal value; when math-verify finds them equivalent
        (``\\frac{1}{2}`` vs ``0.5``, ``1+2x`` vs ``2x + 1``); when a side is longer than
        ``MAX_VERIFY_CHARS`` or the gold does not parse, only when the texts are equal
        with whitespace ignored.
    """
    answer, target = _stated_answer(completion), _gold_answer(gold)
    if answer is None or target is None:
        return False
    if len(answer.text) > MAX_VERIFY_CHARS or len(target.text) > MAX_VERIFY_CHARS:
        return _same_text(answer.text, target.text)
    if answer.is_number and target.is_number:
        # exact decimal equality: no float rounding turns 72.0000001 into 72
        return Decimal(answer.text) == Decimal(target.text)
    gold_parsed = _parsed_gold(target.text)
    if not gold_parsed:
        return _same_text(answer.text, target.text)
    verify = _math_verify()[1]
    answer_parsed = _parse(answer.text, is_gold=False)
    return bool(verify(list(gold_parsed), answer_parsed, timeout_seconds=None))
