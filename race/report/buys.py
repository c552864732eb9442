"""What one budget buys at each policy size (:func:`race.analysis.size_buys.budget_buys`),
rendered: the leaderboard's and compute card's table, ``race plan``'s lines, and a small
bar chart.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from race.analysis.size_buys import budget_buys
from race.core.fmt import CHARGED_PHASES, fmt_flops, model_label
from race.core.fmt import md_table as _md_table
from race.core.fmt import params as _params
from race.core.specs import RunSpec
from race.report.plots import FONT, PANEL_IN, PHASE_COLORS, pyplot, save

TOKENS_TEXT = ("tokens trained = completions x (prompt + completion tokens) x mu: what "
               "the learner's forward and backward passes read")


def count(value) -> str:
    """A count as ``9,512``, or ``6.05M`` from ten thousand up."""
    value = int(value)
    return f"{value:,}" if value < 10_000 else _params(value)


def recipe_text(frame: pd.DataFrame) -> str:
    """The recipe the rows share: ``rule, 8 prompts x G4, mu1, 16 + 40 tokens``."""
    row = frame[frame["same_recipe"]].iloc[0] if frame["same_recipe"].any() else frame.iloc[0]
    return (f"{row['reward']}, {row['prompts_per_step']} prompts x G{row['group_size']}, "
            f"mu{row['update_epochs']}, {row['prompt_tokens']} + {row['completion_tokens']} "
            f"tokens")


def split_text(row) -> str:
    """``rollout 31% / learning 69% / feedback 0%``."""
    return " / ".join(f"{p} {row[f'share_{p}']:.0%}" for p in CHARGED_PHASES)


def _versus(row, first) -> str:
    if row["model"] == first["model"] or not row["steps"]:
        return "-"
    return f"{first['steps'] / row['steps']:.1f}x fewer"


def buys_markdown(frame: pd.DataFrame, budget_flops: float, *, whose: str = "") -> str:
    """The table (one row per size) with one sentence above it; ``whose``: where the
    recipe comes from (e.g. "the pick's"). A single size says what it buys alone."""
    if frame.empty:
        return "No cell to solve."
    first = frame.iloc[0]
    rows = [[model_label(r["model"]) + ("" if r["same_recipe"] else " *"),
             _params(r["params"]), fmt_flops(r["step_flops"]), f"{r['steps']:,}",
             _versus(r, first), count(r["completions"]), count(r["tokens_trained"]),
             *(f"{r[f'share_{p}']:.1%}" for p in CHARGED_PHASES)]
            for _, r in frame.iterrows()]
    head = (f"The same {fmt_flops(budget_flops)} FLOPs at each policy size, with "
            f"{whose + ' ' if whose else ''}recipe ({recipe_text(frame)}), solved as "
            f"`race plan` solves a cell (nominal token counts; whole steps). A larger "
            f"policy costs more per token in every phase, so it buys fewer updates and "
            f"fewer rollouts; {TOKENS_TEXT}." + (" `sizes.png` draws it." if len(frame) > 1
                                                 else ""))
    text = [head, _md_table(["size", "params", "FLOPs / step", "GRPO steps", "steps vs "
                             f"{model_label(first['model'])}", "completions",
                             "tokens trained", *CHARGED_PHASES], rows, "lrrrrrrrrr")]
    if not frame["same_recipe"].all():
        text.append("\\* no cell of this size runs that recipe: solved at its own first "
                    "cell's.")
    return "\n\n".join(text)


def buys_lines(frame: pd.DataFrame, budget_flops: float) -> str:
    """``race plan``'s lines: what the budget buys at each size, one line a size."""
    if frame.empty:
        return ""
    first = frame.iloc[0]
    width = max(len(model_label(m)) for m in frame["model"])
    lines = [f"what F = {fmt_flops(budget_flops)} FLOPs buys per size at one recipe "
             f"({recipe_text(frame)}; tokens trained = completions x (prompt + "
             f"completion) x mu):"]
    for _, r in frame.iterrows():
        versus = _versus(r, first)
        lines.append(
            f"  {model_label(r['model']):<{width}} ({_params(r['params'])}): "
            f"{r['steps']:,} GRPO steps"
            + (f" ({versus} than {model_label(first['model'])})" if versus != "-" else "")
            + f", {count(r['completions'])} completions, {count(r['tokens_trained'])} "
            f"tokens trained; {split_text(r)}"
            + ("" if r["same_recipe"] else " (its own first cell's recipe)"))
    return "\n".join(lines)


def budget_buys_text(budget_flops: float, specs: Iterable[RunSpec], *,
                     completion_tokens: int | None = None) -> str:
    """``race plan``'s per-size lines for a plan's cells (``""`` for a single size, whose
    table row already says it)."""
    frame = budget_buys(budget_flops, specs, completion_tokens=completion_tokens)
    return buys_lines(frame, budget_flops) if len(frame) > 1 else ""


def buys_figure(path: Path, frame: pd.DataFrame, budget_flops: float, title: str) -> None:
    """``sizes.png``: per size, the GRPO steps the budget buys (labelled with its
    completions and tokens trained, which scale with the steps at one recipe) beside one
    step's FLOPs split by phase: a larger policy pays more per step, so buys fewer."""
    plt = pyplot()
    names = [f"{model_label(m)}\n({_params(p)})" for m, p in zip(frame["model"],
                                                                 frame["params"])]
    x = list(range(len(frame)))
    with plt.rc_context(FONT):
        fig, (left, right) = plt.subplots(1, 2, figsize=(PANEL_IN[0], PANEL_IN[1] * 0.85))
        bars = left.bar(x, frame["steps"], color="0.45", width=0.6)
        for bar, (_, r) in zip(bars, frame.iterrows()):
            left.annotate(f"{r['steps']:,} steps\n{count(r['completions'])} compl.\n"
                          f"{count(r['tokens_trained'])} tok.",
                          (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                          xytext=(0, 2), textcoords="offset points", ha="center",
                          va="bottom", fontsize=8)
        left.set_ylim(0, frame["steps"].max() * 1.45)
        left.set_xticks(x, names)
        left.set_ylabel("GRPO steps bought")
        left.set_title(f"What {fmt_flops(budget_flops)} FLOPs buys", fontsize=10)
        bottom = [0.0] * len(frame)
        for phase in CHARGED_PHASES:
            values = (frame["step_flops"] * frame[f"share_{phase}"]).tolist()
            right.bar(x, values, bottom=bottom, width=0.6, label=phase,
                      color=PHASE_COLORS[phase])
            bottom = [b + v for b, v in zip(bottom, values)]
        right.set_ylim(0, max(bottom) * 1.15)
        right.set_xticks(x, names)
        right.set_ylabel("FLOPs per GRPO step")
        right.set_title("What one step costs, by phase", fontsize=10)
        right.legend(loc="upper left", framealpha=0.9, fontsize=8)
        for ax in (left, right):
            ax.grid(True, axis="y", alpha=0.3)
        fig.suptitle(f"{title}: {recipe_text(frame)}", fontsize=10)
        save(fig, path)
