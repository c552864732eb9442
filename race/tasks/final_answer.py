"""What a completion states: its final answer, read as text (no sympy).

The content of a text's last answer marker (a ``#### ...`` line, or a ``\\boxed{...}`` /
``\\fbox{...}``) as an answer (:func:`extract_final_answer`), plain numbers in canonical
form (:func:`normalize_number`), and an answer's top-level structure: the relations it
holds and the items of a list. :mod:`race.tasks.verify` states the rules these serve and
grades the answers read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
# Words that hedge or bound a value ("3 maybe", "#### 3 at least", "3 \text{ or so}"): an
# answer holding one that the gold does not hold states no value, and is not paid.
_HEDGE_RE = re.compile(
    r"(?<![A-Za-z\\])(?:maybe|perhaps|probably|possibly|likely|roughly|approx(?:imately)?"
    r"|about|around|nearly|almost|circa|estimated?|give\s+or\s+take|or\s+so|ish"
    r"|at\s+(?:least|most)|(?:more|less|fewer)\s+than|or\s+(?:more|less|fewer)|up\s+to)"
    r"(?![A-Za-z])", re.IGNORECASE)
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
    # as text, never through int() (Python refuses a string of more than 4300 digits) nor
    # Decimal.normalize() (which rounds to 28 significant digits)
    sign = "-" if cleaned.startswith("-") else ""
    whole, _, fraction = cleaned.lstrip("+-").replace(",", "").partition(".")
    whole, fraction = whole.lstrip("0") or "0", fraction.rstrip("0")
    if whole == "0" and not fraction:  # "-0" is 0
        sign = ""
    return sign + whole + ("." + fraction if fraction else "")


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
    if _HEDGE_RE.search(match.group(2)):  # "3 approximately" is not 3: kept whole
        return None
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


def _hedges(text: str) -> set[str]:
    """The hedges and bounds ``text`` holds (``"3 \\text{ or so}"``: ``{"or so"}``)."""
    return {" ".join(match.group().lower().split()) for match in _HEDGE_RE.finditer(text)}


# \left( and \right) size a delimiter without changing it
_SIZING_RE = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|big|Big)(?![A-Za-z])")


def _collection(answer: _Answer) -> tuple[str, list[str]] | None:
    """What collection an answer states, and its items: ``("set", items)`` for a list
    (``3, 4``, ``3 \\text{ or } 4``) or ``\\{3, 4\\}``; ``("tuple", items)`` for a tuple or
    an interval (``(3, 4)``, ``[3, 4)``, ``\\langle 3, 4 \\rangle``); None for one answer."""
    if answer.is_number:
        return None
    text = _SIZING_RE.sub("", answer.text).strip()
    tokens = list(_TOKEN_RE.finditer(text))
    kind, inner = None, text
    if tokens and tokens[0].group() in _OPENERS and tokens[-1].group() in _CLOSERS:
        depth = 0
        for token in tokens[:-1]:
            depth += (token.group() in _OPENERS) - (token.group() in _CLOSERS)
            if depth == 0:  # the first group closes before the end: "(1, 2) \cup (3, 4)"
                break
        else:  # one group spans the whole answer
            kind = "set" if tokens[0].group() in ("\\{", "\\lbrace") else (
                None if tokens[0].group() == "{" else "tuple")
            inner = text[tokens[0].end():tokens[-1].start()]
    items = _split_top(_LIST_SEPARATOR_RE, inner)
    if kind is None:  # bare (or only in TeX's grouping braces): a list when it has items
        return ("set", items) if len(items) > 1 else None
    if kind == "tuple" and len(items) < 2:  # "(3)" is only grouping
        return None
    return kind, items


def _item_keys(items: list[str]) -> list[str]:
    """Each item as compared for repeats: its canonical text, whitespace ignored."""
    keys = []
    for item in items:
        read = _read_answer(item, is_hash_line=False)
        keys.append("".join((read.text if read else "").split()))
    return keys


def same_shape(answer: _Answer, target: _Answer) -> bool:
    """Whether ``answer`` may equal ``target`` by its form alone: it holds no hedge the gold
    does not (``3 \\text{ maybe}``, ``#### 3 at least``); an interval or tuple and a set
    are never equal (``(3, 4)`` is not ``\\{3, 4\\}`` nor ``3, 4``; ``x = 3, y = 4`` may
    be either); and a list with a repeated item equals only a list of as many items
    (``3, 4, 4`` is not ``3, 4``)."""
    if _hedges(answer.text) - _hedges(target.text):
        return False
    mine, gold = _collection(answer), _collection(target)
    # labelled values ("x = 1, y = 2") are neither: they may state a point or a set
    labelled = bool(_relation_kinds(answer) or _relation_kinds(target))
    if mine is not None and gold is not None and mine[0] != gold[0] and not labelled:
        return False
    mine_items = mine[1] if mine else [answer.text]
    gold_items = gold[1] if gold else [target.text]
    repeats = any(len(set(keys)) < len(keys)
                  for keys in (_item_keys(mine_items), _item_keys(gold_items)))
    return not repeats or len(mine_items) == len(gold_items)
