"""Final-answer extraction and equivalence: the rule-based verifier's core.

Pure string functions, safe in worker threads. ``extract_final_answer`` reads what a
completion claims as its answer (GSM8K's ``#### N``, else the last ``\\boxed{...}``, else
the last number). ``answers_match`` compares it with the gold answer: exact normalised
strings first, then exact decimal arithmetic for plain numbers, then ``math_verify`` for
LaTeX (``\\frac{1}{2}`` vs ``0.5``). math-verify's own timeouts use ``signal.alarm``,
which only works in the main thread, so they are disabled here (``parsing_timeout=None``,
``timeout_seconds=None``); instead the text handed to it is capped at
``MAX_VERIFY_CHARS``, which keeps sympy's work bounded.

math_verify is imported on the first check it makes (heavy: it loads sympy).
"""

from __future__ import annotations

import logging
import re
from decimal import Decimal

# Longest extracted answer handed to math_verify/sympy; longer ones compare as strings.
MAX_VERIFY_CHARS = 200

# "1,234", "-3.5", "+7", ".5": thousands groups must be exact so "1,2345" is not 12345,
# and a sign counts only where it cannot be a minus between two terms ("5-3").
_NUMBER = r"(?:(?<![\w)\]}])[-+])?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"
_NUMBER_RE = re.compile(_NUMBER)
_HASH_RE = re.compile(r"####[ \t]*([^\n]*)")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


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


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    starts = [m.end() for m in _BOXED_RE.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for index in range(start, len(text)):
            if text[index] == "{":
                depth += 1
            elif text[index] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:index].strip()
    return None


def _clean_answer(raw: str) -> str | None:
    """A number in canonical form, else a leading number, else the raw text (LaTeX)."""
    number = normalize_number(raw)
    if number is not None:
        return number
    text = _strip_decoration(raw)
    leading = _NUMBER_RE.match(text)
    if leading and not text[leading.end():].lstrip().startswith(("/", "^", "{", "\\frac")):
        # "72 dollars", "18\\text{ apples}" -> the number; "3/4" stays whole for math_verify
        return normalize_number(leading.group())
    return text or None


def extract_final_answer(completion: str) -> str | None:
    """The answer a completion states, or None when it states none.

    Preference order: the last ``#### N`` line (GSM8K's format), else the content of the
    last ``\\boxed{...}``, else the last number anywhere in the text. Plain numbers come
    back normalised (``"1,234" -> "1234"``); LaTeX comes back as written.
    """
    for match in reversed(list(_HASH_RE.finditer(completion))):
        answer = _clean_answer(match.group(1))
        if answer is not None:
            return answer
    boxed = _last_boxed(completion)
    if boxed is not None:
        answer = _clean_answer(boxed)
        if answer is not None:
            return answer
    numbers = _NUMBER_RE.findall(completion)
    return normalize_number(numbers[-1]) if numbers else None


def _gold_answer(gold: str) -> str:
    """The gold answer as a string; a whole reference solution is reduced to its answer."""
    if "####" in gold or "\\boxed" in gold:
        extracted = extract_final_answer(gold)
        if extracted is not None:
            return extracted
    return normalize_number(gold) or _strip_decoration(gold)


class _QuietDisabledTimeout(logging.Filter):
    """Drops math-verify's "Timeout is disabled" warning: disabling them is deliberate here
    (they need the main thread) and the input length is capped instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


_QUIET = _QuietDisabledTimeout()


def _math_verify_equal(gold: str, pred: str) -> bool | None:
    """math_verify's verdict; None when it cannot parse a side (or is not installed)."""
    if len(gold) > MAX_VERIFY_CHARS or len(pred) > MAX_VERIFY_CHARS:
        return None
    try:
        from math_verify import parse, verify
    except ImportError:  # optional: without it only exact comparisons are made
        return None
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
    # $...$ makes math_verify read the text as LaTeX; no timeouts: they need the main thread
    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = parse(f"${pred}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return None
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def answers_match(completion: str, gold: str) -> bool:
    """Whether the answer stated in ``completion`` equals ``gold``.

    Args:
        completion: model output (or any text ending in an answer).
        gold: the gold answer (``"72"``) or a reference solution ending in ``#### 72``.

    Returns:
        True when the normalised strings are equal, when both are plain numbers of equal
        value (``"72.0"`` vs ``"72"``, ``"1,234"`` vs ``"1234"``), or when math_verify
        finds them equivalent (``"\\frac{1}{2}"`` vs ``"0.5"``). If math_verify cannot
        parse either side, only the exact normalised comparison counts.
    """
    pred = extract_final_answer(completion)
    target = _gold_answer(gold)
    if pred is None or not target:
        return False
    if pred == target:
        return True
    pred_number, gold_number = normalize_number(pred), normalize_number(target)
    if pred_number is not None and gold_number is not None:
        # exact decimal equality: no float rounding turns 72.0000001 into 72
        return Decimal(pred_number) == Decimal(gold_number)
    verdict = _math_verify_equal(target, pred)
    if verdict is None:
        return "".join(pred.split()) == "".join(target.split())
    return verdict
