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
  comparison (:func:`value_digits`); and all sympy work runs in one child process
  (:mod:`race.tasks.bounded`) that is killed when one comparison outlives
  ``VERIFY_TIMEOUT_S``. Each of these compares the two texts only, whitespace ignored:
  a wrong answer is never paid, a right one written as the gold is. (A gold that is too
  large is refused by :func:`gold_parses`.)

Safe in worker threads. Where no child process can start, the comparison runs in-process,
bounded by the text and size rules only. math_verify is imported by the child on start
(heavy: it loads sympy).
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal

from race.tasks.bounded import BoundedWorker, TimedOut, Unavailable, serve_lines

# Longest answer or gold text handed to math_verify/sympy; longer ones compare as strings.
MAX_VERIFY_CHARS = 200
# Most decimal digits a parsed value may reach (a bound read off the unevaluated
# expression): sympy evaluates numbers whole, so 10^{10^{10}} would never finish. 2^{10000}
# (3011 digits) is graded; 10^{100000} and 2^{2^{2^{2^{2}}}} (19729 digits) are not.
MAX_VALUE_DIGITS = 10_000
# Wall-clock bound on one comparison's sympy work, seconds (the child process is killed).
VERIFY_TIMEOUT_S = 5.0

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
# The relations a stated answer may hold, by kind. Only "=" (also written "\in") can
# state a value; the other kinds never do. math-verify reads "~" and "->" as nothing
# (``3 \approx 100`` parses as 3), so a gold holding one is compared side by side.
_RELATIONS = {
    "=": ("==", ":=", "=", "\\in", "∈"),
    "<": ("<", ">", "\\lt", "\\gt"),
    "<=": ("<=", ">=", "=<", "=>", "\\leqslant", "\\geqslant", "\\leqq", "\\geqq",
           "\\leq", "\\geq", "\\le", "\\ge", "≤", "≥", "⩽", "⩾"),
    "!=": ("!=", "\\neq", "\\ne", "\\notin", "\\not", "≠", "∉"),
    "~": ("\\approx", "\\thickapprox", "\\simeq", "\\sim", "\\doteq", "\\cong",
          "\\equiv", "\\propto", "≈", "∼", "≃", "≅", "≡"),
    "->": ("\\to", "\\rightarrow", "\\Rightarrow", "\\implies", "\\iff",
           "\\Leftrightarrow", "\\leftrightarrow", "\\mapsto", "\\subseteq", "\\subset",
           "\\supseteq", "\\supset", "\\ll", "\\gg", "→", "⇒", "⟹", "⊂", "⊆"),
}
_RELATION_KIND = {symbol: kind for kind, symbols in _RELATIONS.items() for symbol in symbols}
# longest first, so "<=" is not read as "<" and "\leq" not as "\le"; a command must end
_RELATION_RE = re.compile("|".join(
    re.escape(symbol) + ("(?![A-Za-z])" if symbol.startswith("\\") else "")
    for symbol in sorted(_RELATION_KIND, key=len, reverse=True)))
# What separates the answers of a list: a comma (not a thousands one), ";", \quad, and
# "or"/"and", bare or in a \text{...}.
_LIST_SEPARATOR_RE = re.compile(
    r",(?!\d{3}(?!\d))|;|\\q?quad(?![A-Za-z])"
    r"|\\(?:text|textrm|mbox|mathrm)\s*\{[^{}]*\b(?:or|and)\b[^{}]*\}|\b(?:or|and)\b")
# A LaTeX token, and the ones that open or close a group (a relation inside one, as in
# "\{x : x > 0\}" or "\text{so 2 = 2}", is not the answer's own).
_TOKEN_RE = re.compile(r"\\[A-Za-z]+|\\.|.", re.DOTALL)
_OPENERS = frozenset({"{", "(", "[", "\\{", "\\lbrace", "\\langle", "\\lbrack"})
_CLOSERS = frozenset({"}", ")", "]", "\\}", "\\rbrace", "\\rangle", "\\rbrack"})


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
    :func:`normalize_number`, else the content as written); ``is_number`` says which;
    ``hash_line`` whether it came after ``####`` (where unit words may follow a number)."""

    text: str
    is_number: bool
    hash_line: bool = False


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
    if number is None:
        return _Answer(text, is_number=False, hash_line=is_hash_line)
    return _Answer(number, is_number=True, hash_line=is_hash_line)


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
    parsed = parse(f"\\boxed{{{text}}}", extraction_config=_extraction_config(is_gold, units),
                   fallback_mode="no_fallback", extraction_mode="first_match",
                   parsing_timeout=None)
    # a value too large to compute (10^{10^{10}}) is read as no answer: never evaluated
    if any(value_digits(expr) > MAX_VALUE_DIGITS for expr in parsed):
        return []
    return parsed


# functions whose value at n has about n log10(n) digits
_FACTORIALS = frozenset({"factorial", "factorial2", "subfactorial", "gamma", "RisingFactorial",
                         "FallingFactorial", "binomial"})


def value_digits(expr) -> float:
    """An upper bound on the decimal digits of any number ``expr`` (an unevaluated sympy
    expression) evaluates to, read off its tree without evaluating anything; ``inf`` when
    there is none that small.

    Integers and rationals count their digits; ``b^e`` with a numeric exponent at most
    ``digits(b) x |e|`` (``|e| <= 10^digits(e)`` when ``e`` is itself an expression),
    ``exp(x)`` at most ``0.44 |x|``, ``n!`` (and gamma, binomials) at most ``n x
    digits(n)``, a sum or product over ``k = a..b`` its terms times ``digits(b)``; any other
    node at most the sum of its arguments' digits plus one. Symbols and constants count 1.
    """
    if getattr(expr, "is_Rational", False):
        return max(_int_digits(expr.p), _int_digits(expr.q))
    if getattr(expr, "is_Float", False):
        _, mantissa, exponent, bits = expr._mpf_
        return 1.0 if not mantissa else abs(exponent + bits) * math.log10(2) + 1
    args = getattr(expr, "args", ())
    if not args:  # a symbol, a constant (pi, E, I, oo), an unknown atom
        return 1.0
    name = type(expr).__name__
    if name == "Pow" or name == "exp":
        base, exponent = (args[0], args[1]) if name == "Pow" else (None, args[0])
        if getattr(exponent, "free_symbols", None):  # x^y is not a number to compute
            return sum(value_digits(a) for a in args) + 1
        base_digits = 0.44 if base is None else value_digits(base)
        return base_digits * _magnitude(exponent) + 1
    if name in _FACTORIALS:
        n = max(_magnitude(a) for a in args)
        return n * (math.log10(n) + 1 if n < math.inf else math.inf) + 1
    if name in ("Sum", "Product"):
        limits = [value_digits(bound) for limit in args[1:] for bound in limit.args[1:]]
        terms = 10.0 ** min(max(limits, default=0.0), 400)
        return terms * (value_digits(args[0]) + max(limits, default=1.0)) + 1
    return sum(value_digits(a) for a in args) + 1


def _int_digits(n: int) -> float:
    """About log10 of ``|n|`` (its bits x log10 2): 2 -> 0.6, 10 -> 1.2, 1000 -> 3.0."""
    return abs(int(n)).bit_length() * math.log10(2)


def _magnitude(expr) -> float:
    """An upper bound on ``|expr|``: its value for a literal, else ``10^digits``."""
    if getattr(expr, "is_Rational", False):
        return float(abs(expr.p) // abs(expr.q) + 1) if _int_digits(expr.p) < 300 else math.inf
    digits = value_digits(expr)
    return 10.0 ** digits if digits < 300 else math.inf


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
        # exact decimal equality: no float rounding turns 72.0000001 into 72
        return Decimal(answer.text) == Decimal(target.text)
    gold_parsed = _parsed_gold(target.text)
    if not gold_parsed:
        return _same_text(answer.text, target.text)
    verify = _math_verify()[1]
    answer_parsed = _parse(answer.text, is_gold=False)
    return bool(verify(list(gold_parsed), answer_parsed, timeout_seconds=None))


def _top_level(pattern: re.Pattern, text: str) -> list[re.Match]:
    """The matches of ``pattern`` that start outside every brace or bracket group."""
    top, depth = set(), 0
    for token in _TOKEN_RE.finditer(text):
        if token.group() in _CLOSERS:
            depth -= 1
        if depth <= 0:
            top.add(token.start())
        if token.group() in _OPENERS:
            depth += 1
    return [match for match in pattern.finditer(text) if match.start() in top]


def _split_top(pattern: re.Pattern, text: str) -> list[str]:
    """``text`` cut at the top-level matches of ``pattern``, each piece stripped."""
    pieces, start = [], 0
    for match in _top_level(pattern, text):
        pieces.append(text[start:match.start()].strip())
        start = match.end()
    return [*pieces, text[start:].strip()]


def _relation_kinds(answer: _Answer) -> list[str]:
    """The kinds of the top-level relations an answer states, in order (``[]``: none)."""
    if answer.is_number:
        return []
    return [_RELATION_KIND[match.group()] for match in _top_level(_RELATION_RE, answer.text)]


def _sides(answer: _Answer) -> list[_Answer | None]:
    """The sides of an answer's relations (``x = 4 = 3``: x, 4, 3); None for an empty one."""
    return [_read_answer(side, answer.hash_line) for side in _split_top(_RELATION_RE, answer.text)]


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
    if answer is None or target is None:
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


def _handle(request: list) -> bool:
    """One request in the child: ``["gold", text]`` or ``["match", answer, target]``."""
    if request[0] == "gold":
        return bool(_parsed_gold(request[1]))
    return _match(_Answer(*request[1]), _Answer(*request[2]))


def _bounded(request: list, *, default: bool) -> bool:
    """``_handle(request)`` in the child process within ``VERIFY_TIMEOUT_S`` (``default``
    past it); in-process where no child can start."""
    try:
        return bool(_WORKER.call(request, timeout_s=VERIFY_TIMEOUT_S))
    except TimedOut:
        logging.getLogger(__name__).warning(
            "math-verify: a comparison took longer than %g s and was stopped; graded by "
            "its text alone (%.80s)", VERIFY_TIMEOUT_S, request[1:])
        return default
    except Unavailable:
        return _handle(request)


def serve() -> None:
    """The child process's loop (:class:`race.tasks.bounded.BoundedWorker`)."""
    serve_lines(_handle, warm_up=_math_verify)
