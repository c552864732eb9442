"""What ``race pilot`` and ``race sweep`` print about pilots: one pilot's summary
(:func:`pilot_summary_text`), its live progress bar (:class:`PilotProgress`), and the table
of a sweep whose every cell failed (:func:`failures_table`).
"""

from __future__ import annotations

import sys

import pandas as pd

from race.core.fmt import fmt_flops


class PilotProgress:
    """A one-line progress bar on stderr: FLOPs spent and remaining, steps, train reward."""

    def __init__(self, budget_flops: float, width: int = 30):
        self.budget, self.width = budget_flops, width

    def __call__(self, row: dict) -> None:
        done = min(1.0, row["charged_flops"] / self.budget)
        bar = "#" * int(done * self.width) + "." * (self.width - int(done * self.width))
        print(f"\r[{bar}] {done:6.1%}  step {row['step']:>4}  spent "
              f"{fmt_flops(row['charged_flops'])}  left "
              f"{fmt_flops(self.budget - row['charged_flops'])}  train reward "
              f"{row['train_reward']:.3f}", end="", file=sys.stderr, flush=True)


def pilot_summary_text(summary: dict) -> str:
    """A pilot's status, steps, FLOPs by phase, seconds, MFU and accuracies, one per line."""
    shares = {k: summary["flops"][k] / summary["total_flops"] if summary["total_flops"] else 0
              for k in ("rollout", "learning", "feedback")}
    lines = [f"status     {summary['status']}"
             + (f": {summary['error']}" if summary["error"] else ""),
             f"steps      {summary['steps']}",
             f"FLOPs      {fmt_flops(summary['total_flops'])} of "
             f"{fmt_flops(summary['budget_flops'])} "
             f"({summary['total_flops'] / summary['budget_flops']:.1%}); "
             + ", ".join(f"{k} {v:.1%}" for k, v in shares.items())
             + f"; eval {fmt_flops(summary['flops']['eval'])} (not charged)",
             "wall s     " + ", ".join(f"{k} {v:.1f}" for k, v in summary["wall_s"].items()),
             f"MFU        on {summary['device']} ({summary['dtype']}): " + ", ".join(
                 f"{phase} {use['mfu']:.1%}" for phase, use in summary["throughput"].items()
                 if use["mfu"] is not None and summary["flops"].get(phase))]
    for target, final in summary["final_eval"].items():
        start = summary["initial_eval"].get(target, {}).get("accuracy", float("nan"))
        lines.append(f"{target:<10} accuracy {start:.3f} -> {final['accuracy']:.3f}, mean "
                     f"reward {final['mean_reward']:.3f}")
    return "\n".join(lines)


def failures_table(frame: pd.DataFrame) -> str:
    """Every cell of a sweep with no ok cell: its knobs, status, steps and FLOPs."""
    targets = [c for c in frame.columns if c.startswith("final_") and not c.endswith("_reward")]
    columns = ["cell_id", "model", "reward", "group_size", "update_epochs", "seed",
               "status", "steps", "total_flops", *targets]
    table = frame[[c for c in columns if c in frame.columns]].copy()
    if "total_flops" in table:
        table["total_flops"] = table["total_flops"].map(fmt_flops)
    return table.to_string(index=False, float_format=lambda v: f"{v:.3f}")
