"""Formatting shared by the report, its figures and the CLI: numbers, FLOPs, phase names.

Pure strings from plain values: no pandas, no IO.
"""

from __future__ import annotations

import math

CHARGED_PHASES = ("rollout", "learning", "feedback")  # charged to the budget; eval is not
PHASE_NAMES = {"rollout": "rollout / search", "learning": "learning", "feedback": "feedback",
               "eval": "eval (not charged)"}


def fmt_flops(value: float) -> str:
    """FLOPs as ``3.2e+15`` (small counts as plain numbers)."""
    return f"{value:.3g}" if value < 1000 else f"{value:.2e}".replace("e+0", "e+")


def num(value) -> float:
    """A float, with None / NaN / missing as nan."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def int_text(value) -> str:
    v = num(value)
    return "-" if math.isnan(v) else str(int(v))


def acc(value, digits: int = 3) -> str:
    v = num(value)
    return "-" if math.isnan(v) else f"{v:.{digits}f}"


def interval(mean, lo, hi) -> str:
    if math.isnan(num(lo)) or math.isnan(num(hi)):
        return acc(mean)
    return f"{acc(mean)} [{acc(lo, 2)}, {acc(hi, 2)}]"


def flops_text(value) -> str:
    v = num(value)
    return "-" if math.isnan(v) else fmt_flops(v)


def share(part: float, total: float) -> str:
    return f"{part / total:.1%}" if total > 0 else "-"


def params(n) -> str:
    """Parameter counts as 152k, 494M, 1.54B."""
    n = num(n)
    if math.isnan(n):
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def model_label(model: str) -> str:
    """A model as labels show it: a catalog name as is, a local folder by its last part."""
    return model.rstrip("/").rsplit("/", 1)[-1] if "/" in model else model


def label(row) -> str:
    """A config's knobs in one short label: ``tiny-s/rule G4 mu1``."""
    return (f"{model_label(row['model'])}/{row['reward']} "
            f"G{int_text(row.get('group_size'))} mu{int_text(row.get('update_epochs'))}")


def cell_text(value) -> str:
    """A markdown table cell: no pipes or line breaks, long errors cut."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= 300 else text[:297] + "..."


def md_table(header: list[str], rows: list[list], align: str = "") -> str:
    """A GitHub markdown table; ``align`` holds one of l/r per column (default l)."""
    assert len(align) <= len(header), (align, header)
    align = align.ljust(len(header), "l")
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(cell_text(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
