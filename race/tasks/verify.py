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
  ``%``), they compare as exact decimals without sympy, by their canonical text (so a
  number of any length, past Python's 4300-digit limit on ``int()``, compares too):
  ``72.0`` is 72, ``1,000`` is 1000, ``72.0000001`` is not 72. After ``####`` only, a
  number followed by plain words reads as the number (``#### 72 dollars``, GSM8K's
  convention), unless a word is maths, a number, a connective or a hedge (``#### 2
  million``, ``#### 5 pi``, ``#### 2 or three``, ``#### 3 at least`` are not 2, 5 or 3).
- **Form first** (:func:`~race.tasks.final_answer.same_shape`, text only). An answer that
  hedges or bounds its value where the gold does not (``maybe``, ``approximately``, ``at
  least``, ``at most``, ``or so``: ``\\boxed{3 \\text{ maybe}}``) is wrong; an interval or
  tuple is never a set (``(3, 4)`` is neither ``\\{3, 4\\}`` nor ``3, 4``, which
  math-verify would equate); and a list with a repeated item equals only a list of as
  many items (``3, 4, 4`` is not ``3, 4``, though the two sets are equal).
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
- **Relations.** math-verify reads ``999 = 3`` as 3 and drops ``\\approx`` (``3 \\approx
  100`` is 3), so an answer that holds a relation at its top level (outside braces and
  brackets: ``\\{x : x > 0\\}`` holds none) is judged here first. Against a gold without
  one, it is paid only when every relation is ``=`` (or ``\\in``), at least one side
  equals the gold, and every other side equals it too or is a label: an expression in
  symbols (``x``, ``f(2)``, ``x^2 + y^2``), or, when the gold holds symbols itself
  (``2x + 1``), a lone symbol or ``f(x)``. So for gold 3 ``x = 3``, ``3 = 3``, ``x = 2 +
  1 = 3`` and ``#### 1 + 2 = 3`` are paid; ``999 = 3``, ``3 = 999``, ``x = 4 = 3`` and
  ``2x = 6`` are not, nor is any ``\\approx``, ``<``, ``\\le``, ``\\ne``, ``\\equiv``
  or arrow, whose answer is not a value. A list (``x = 3, y = 4``, ``x = 3 \\text{ or }
  x = 4``) holds at most one ``label = value`` per item and is compared whole. Against a
  gold that is a relation itself (``x \\le 3``, ``y = 2x + 1``), the answer may hold no
  relation of a kind, or more of one, than the gold does (``x = 4 = 3`` is not ``x =
  3``), and math-verify compares the two whole; a gold with ``\\approx``, ``\\sim`` or
  an arrow, which math-verify reads as nothing, is compared side by side.
- **Unusable gold.** A gold that is neither a plain number nor parsed by math-verify
  (:func:`gold_parses` is False; a data loader should refuse such rows) is matched only by
  exact string equality, whitespace ignored.

- **Bounded.** Every call returns within a bound, whatever the text. math-verify's own
  timeouts use ``signal.alarm``, which works only in the main thread, so they are disabled
  (``parsing_timeout=None``, ``timeout_seconds=None``) and three bounds stand instead:
  an answer or gold longer than ``MAX_VERIFY_CHARS`` is never parsed; a parsed expression
  whose value could have more than ``MAX_VALUE_DIGITS`` digits (a power tower such as
  ``10^{10^{10}}``, ``9^{9^9}``, ``10^{1000000}``, ``(10^{10})!``: sympy would compute it
  whole, for ever) counts as unparsed, checked on the unevaluated expression before any
  comparison (:func:`value_digits`, which reads a matrix's entries; a ``\\binom`` is kept
  unevaluated while parsing, as latex2sympy would compute it there); and all sympy work
  runs in one child process (:mod:`race.tasks.bounded`) that is killed when one
  comparison outlives ``VERIFY_TIMEOUT_S``. Each of these compares the two texts only,
  whitespace ignored: a wrong answer is never paid, a right one written as the gold is.
  (A gold that is too large is refused by :func:`gold_parses`.)

A comparison that raises inside sympy or math-verify is graded by its text alone, as one
past the time bound is: :func:`answers_match` returns a bool for every input.

Safe in worker threads. Where no child process can start, the comparison runs in-process,
bounded by the text and size rules only. math_verify is imported by the child on start
(heavy: it loads sympy).

Reading what a text states (markers, plain numbers, relations and list items) is
:mod:`race.tasks.final_answer`; the size bound on a parsed value is
:mod:`race.tasks.value_size`. Both are pure, and their public names are importable here.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import Counter

from race.tasks.bounded import BoundedWorker, TimedOut, Unavailable, serve_lines
from race.tasks.final_answer import (  # noqa: F401  (its public names, importable here)
    _LIST_SEPARATOR_RE,
    _RELATION_RE,
    _Answer,
    _gold_answer,
    _relation_kinds,
    _sides,
    _split_top,
    _stated_answer,
    extract_final_answer,
    normalize_number,
    same_shape,
)
from race.tasks.value_size import value_digits

# Longest answer or gold text handed to math_verify/sympy; longer ones compare as strings.
MAX_VERIFY_CHARS = 200
# Most decimal digits a parsed value may reach (a bound read off the unevaluated
# expression): sympy evaluates numbers whole, so 10^{10^{10}} would never finish. 2^{10000}
# (3011 digits) is graded; 10^{100000} and 2^{2^{2^{2^{2}}}} (19729 digits) are not.
MAX_VALUE_DIGITS = 10_000
# Wall-clock bound on one comparison's sympy work, seconds (the child process is killed).
VERIFY_TIMEOUT_S = 5.0

# A \text{...} (or \mbox, \mathrm) with a digit after it: unit removal would cut there.
_TEXT_THEN_DIGIT_RE = re.compile(r"\\(?:text|mbox|mathrm)\s*\{.*\d", re.DOTALL)


class _QuietDisabledTimeout(logging.Filter):
    """Drops math-verify's "Timeout is disabled" warning: disabling them is deliberate here
    (they need the main thread) and the input length is capped instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


_QUIET = _QuietDisabledTimeout()


@functools.cache
def _math_verify():
    """math_verify's ``(parse, verify)``, imported once, its timeout warning silenced."""
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy
    from math_verify import parse, verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
    # latex2sympy computes \binom{n}{k} while it parses, before value_digits can bound it
    # (\binom{1000000}{500000} has 300,000 digits): kept unevaluated, as a factorial is
    if hasattr(_Latex2Sympy, "convert_binom"):
        _Latex2Sympy.convert_binom = _unevaluated_binom
    return parse, verify


def _unevaluated_binom(converter, binom):
    """latex2sympy's ``convert_binom``, with the binomial left unevaluated."""
    from sympy import binomial

    return binomial(converter.convert_expr(binom.upper), converter.convert_expr(binom.lower),
                    evaluate=False)


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
    parsed = parse(f"\\boxed{{{text}}}", extraction_config=_extraction_config(is_gold, units),
                   fallback_mode="no_fallback", extraction_mode="first_match",
                   parsing_timeout=None)
    # a value too large to compute (10^{10^{10}}) is read as no answer: never evaluated
    if any(value_digits(expr) > MAX_VALUE_DIGITS for expr in parsed):
        return []
    return parsed


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
        True when its answer is a plain number, or at most ``MAX_VERIFY_CHARS`` long,
        parsed by math-verify within ``VERIFY_TIMEOUT_S``, and no larger than
        ``MAX_VALUE_DIGITS`` digits (``10^{10^{10}}`` is False). A loader should refuse
        rows where this is False: a completion can then match them only by writing the
        same string.
    """
    answer = _gold_answer(gold)
    if answer is None:
        return False
    if answer.is_number:
        return True
    if len(answer.text) > MAX_VERIFY_CHARS:
        return False
    return bool(_bounded(["gold", answer.text], default=False))


def _same_text(a: str, b: str) -> bool:
    return "".join(a.split()) == "".join(b.split())


def _equivalent(answer: _Answer, target: _Answer) -> bool:
    """Whether two answers are equal: exact decimals when both are plain numbers, else
    math-verify (gold first), else exact text when the gold does not parse."""
    if answer.is_number and target.is_number:
        # canonical forms (normalize_number) are equal exactly when the values are: no
        # float rounding turns 72.0000001 into 72, and no digit limit applies
        return answer.text == target.text
    gold_parsed = _parsed_gold(target.text)
    if not gold_parsed:
        return _same_text(answer.text, target.text)
    verify = _math_verify()[1]
    answer_parsed = _parse(answer.text, is_gold=False)
    return bool(verify(list(gold_parsed), answer_parsed, timeout_seconds=None))


def _is_symbolic(target: _Answer) -> bool:
    """Whether the gold holds symbols (``2x + 1``), so only a lone name may label it."""
    return not target.is_number and any(getattr(expr, "free_symbols", None)
                                        for expr in _parsed_gold(target.text))


def _is_label(side: str, symbolic_gold: bool) -> bool:
    """Whether ``side`` names the answer rather than states a value: ``f(2)``, or an
    expression in symbols (``x``, ``x^2 + y^2``); a lone symbol (``y``) or ``f(x)`` only
    when the gold holds symbols itself. A number (``999``) is never a label."""
    from sympy import Symbol
    from sympy.core.function import AppliedUndef

    parsed = _parse(side, is_gold=False)
    if not parsed:
        return False
    if isinstance(parsed[0], AppliedUndef):
        return True
    if symbolic_gold:
        return isinstance(parsed[0], Symbol)
    return bool(getattr(parsed[0], "free_symbols", None))


def _states_gold(answer: _Answer, target: _Answer) -> bool:
    """Whether an answer holding relations, for a gold that holds none, states the gold:
    only "=" relations, each side a label or equal to the gold, at least one equal. A list
    (``x = 3, y = 4``) holds one ``label = value`` per item and is compared whole."""
    if any(kind != "=" for kind in _relation_kinds(answer)):
        return False
    symbolic = _is_symbolic(target)
    items = _split_top(_LIST_SEPARATOR_RE, answer.text)
    if len(items) > 1:
        for item in items:
            sides = _split_top(_RELATION_RE, item)
            if len(sides) > 2 or (len(sides) == 2 and not _is_label(sides[0], symbolic)):
                return False
        return _equivalent(answer, target)
    sides = _sides(answer)
    if any(side is None for side in sides):
        return False
    equal = [_equivalent(side, target) for side in sides]
    return any(equal) and all(is_equal or _is_label(side.text, symbolic)
                              for side, is_equal in zip(sides, equal))


def _states_gold_relation(answer: _Answer, target: _Answer, gold_kinds: list[str]) -> bool:
    """Whether an answer states the relation the gold states: no relation of a kind, or
    more of one, than the gold holds; then math-verify whole, or side by side (same kinds
    in the same order) when the gold's relation is one math-verify reads as nothing."""
    kinds = _relation_kinds(answer)
    if Counter(kinds) - Counter(gold_kinds):
        return False
    if not {"~", "->"} & set(gold_kinds):
        return _equivalent(answer, target)
    sides, gold_sides = _sides(answer), _sides(target)
    return (kinds == gold_kinds and None not in sides and None not in gold_sides
            and all(_equivalent(side, gold) for side, gold in zip(sides, gold_sides)))


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
        with whitespace ignored. An answer holding relations (``x = 3``) is paid only
        as the module's relation rule says.
    """
    answer, target = _stated_answer(completion), _gold_answer(gold)
    if answer is None or target is None or not same_shape(answer, target):
        return False
    if answer.is_number and target.is_number:  # no sympy, no child process
        return _equivalent(answer, target)
    if len(answer.text) > MAX_VERIFY_CHARS or len(target.text) > MAX_VERIFY_CHARS:
        return _same_text(answer.text, target.text)
    # sympy's work, in the child process: a comparison past VERIFY_TIMEOUT_S is unequal
    # unless the texts are the same
    request = ["match", [answer.text, answer.is_number, answer.hash_line],
               [target.text, target.is_number, target.hash_line]]
    return bool(_bounded(request, default=_same_text(answer.text, target.text)))


def _match(answer: _Answer, target: _Answer) -> bool:
    """:func:`answers_match` once both answers are read (runs where sympy runs)."""
    if not _relation_kinds(answer):
        return _equivalent(answer, target)
    gold_kinds = _relation_kinds(target)
    if gold_kinds:
        return _states_gold_relation(answer, target, gold_kinds)
    return _states_gold(answer, target)


# the child process that runs every sympy comparison (started on first use)
_WORKER = BoundedWorker("race.tasks.verify:serve")


def _handle(request: list) -> bool | str:
    """One request in the child: ``["gold", text]`` or ``["match", answer, target]``; the
    error as text when sympy or math-verify raises on it (the caller grades by text)."""
    try:
        if request[0] == "gold":
            return bool(_parsed_gold(request[1]))
        return bool(_match(_Answer(*request[1]), _Answer(*request[2])))
    except Exception as error:  # any input grades: a bool, never a raise
        return f"{type(error).__name__}: {error}"[:200] or "error"


def _bounded(request: list, *, default: bool) -> bool:
    """``_handle(request)`` in the child process within ``VERIFY_TIMEOUT_S`` (``default``
    past it, or when the comparison raised); in-process where no child can start."""
    log = logging.getLogger(__name__)
    try:
        answer = _WORKER.call(request, timeout_s=VERIFY_TIMEOUT_S)
    except TimedOut:
        log.warning("math-verify: a comparison took longer than %g s and was stopped; "
                    "graded by its text alone (%.80s)", VERIFY_TIMEOUT_S, request[1:])
        return default
    except Unavailable:
        answer = _handle(request)
    if isinstance(answer, str):
        log.warning("math-verify: a comparison raised %s; graded by its text alone (%.80s)",
                    answer, request[1:])
        return default
    return bool(answer)


def serve() -> None:
    """The child process's loop (:class:`race.tasks.bounded.BoundedWorker`)."""
    serve_lines(_handle, warm_up=_math_verify)
