"""How large a parsed value could be, read off its unevaluated sympy tree.

sympy evaluates numbers whole, so a power tower (``10^{10^{10}}``) or ``(10^{10})!`` would
never finish: :func:`value_digits` bounds the digits of a value without computing it, and
:mod:`race.tasks.verify` refuses to compare one past its ``MAX_VALUE_DIGITS``.
"""

from __future__ import annotations

import math

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
    node at most the sum of its arguments' digits plus one; a matrix its largest entry's.
    Symbols and constants count 1.
    """
    if getattr(expr, "is_Rational", False):
        return max(_int_digits(expr.p), _int_digits(expr.q))
    if getattr(expr, "is_Float", False):
        _, mantissa, exponent, bits = expr._mpf_
        return 1.0 if not mantissa else abs(exponent + bits) * math.log10(2) + 1
    if getattr(expr, "is_Matrix", False) and not hasattr(expr, "args"):
        # a mutable matrix (a pmatrix parses to one) keeps its entries outside ``args``
        return max((value_digits(entry) for entry in expr), default=1.0)
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
