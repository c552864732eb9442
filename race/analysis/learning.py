"""Did anything learn? Per config, whether its train reward and its score on the
selection target ever left their start; when none did, the causes a report can see.

A sweep where nothing learned has no best allocation: every read sits at its warm start
(often 0.000 everywhere), so a ranking of them orders noise, or ties by config id. The
report then opens with "nothing learned at these budgets", lists no validation runs and
``selection.json`` holds no pick (:mod:`race.report.write`). Pure pandas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from race.analysis.select import ranked_reads
from race.core.guards import DEFAULT
from race.core.stats import binomial_se, z_of_level

NOTHING_LEARNED = "nothing learned at these budgets"


@dataclass
class Learning:
    """``configs``: one row per config (``config``, ``model``, ``reward``, ``train_flat``:
    its train reward never rose above its first step's, or its cells ran under 2 steps;
    ``score_flat``: no read of the selection target past the warm start beat the warm
    start by more than the difference's interval; ``learned``: neither; ``evidence``).
    ``causes``: what the report can see went wrong, where nothing learned."""

    configs: pd.DataFrame
    causes: list[str] = field(default_factory=list)

    @property
    def nothing(self) -> bool:
        """Whether no config learned (and there was a config to check)."""
        return bool(len(self.configs)) and not self.configs["learned"].any()

    def reason(self) -> str:
        """``nothing learned at these budgets: <causes>`` (empty where something learned)."""
        if not self.nothing:
            return ""
        return f"{NOTHING_LEARNED}: {'; '.join(self.causes)}"


def config_of_cells(cells: pd.DataFrame, ladder: dict | None) -> dict[str, str]:
    """cell_id -> the config it ran (a ladder's rung cells: the first rung's config)."""
    out = dict(zip(cells["cell_id"], cells["config_id"])) if len(cells) else {}
    for rung in (ladder or {}).get("rungs", []):
        for cand in rung["candidates"]:
            out |= {cell: cand["config"] for cell in cand["cell_ids"]}
    return out


def _train_flat(steps: pd.DataFrame, n_steps: list[float]) -> bool | None:
    """Whether no cell's train reward rose above its first step's (None: not logged)."""
    if any(s < 2 for s in n_steps if pd.notna(s)):
        return True
    if not len(steps) or "train_reward" not in steps or steps["train_reward"].isna().all():
        return None
    for _, rows in steps.dropna(subset=["train_reward"]).groupby("cell_id"):
        values = rows.sort_values("step")["train_reward"].tolist()
        if len(values) >= 2 and max(values[1:]) > values[0] + 1e-9:
            return False
    return True


def _score_flat(reads: pd.DataFrame, start: dict | None, z: float) -> tuple[bool, str]:
    """Whether no read beat the warm start by more than ``z`` SE of the difference."""
    if not len(reads):
        return True, "never scored past its warm start"
    base, base_se = (start["accuracy"], start["se"]) if start else (0.0, 0.0)
    gains = [(a - base, math.hypot(binomial_se(a, int(n)), base_se))
             for a, n in zip(reads["accuracy"], reads["n"])]
    best = max(gains, key=lambda g: g[0] - z * g[1])
    where = f"warm start {base:.3f}" if start else "0 (no warm start read)"
    flat = best[0] - z * best[1] <= 0
    return flat, (f"best read {best[0]:+.3f} (SE {best[1]:.3f}) vs {where}"
                  + (": within noise" if flat else ""))


def check_learning(cells: pd.DataFrame, evals: pd.DataFrame, steps: pd.DataFrame, *,
                   target: str, starts: dict[str, dict], ladder: dict | None = None,
                   level: float = 0.9) -> Learning:
    """Per config, whether it learned (:class:`Learning`).

    Args:
        cells: every rung's cells (status, config_id, model, reward, steps).
        evals: every rung's checkpoint evals; ``steps``: their step rows.
        target: the selection target; ``starts``: each config's warm start on it
            (:func:`race.analysis.select.warm_starts`, by the first rung's config).
    """
    ok = cells[cells["status"] == "ok"]
    config = config_of_cells(ok, ladder)
    reads = ranked_reads(evals)
    reads = reads[(reads["target"] == target) & reads["cell_id"].isin(ok["cell_id"])] \
        if len(reads) else reads
    z, rows = z_of_level(level), []
    for name in sorted({config[c] for c in ok["cell_id"]}):
        ids = [c for c in ok["cell_id"] if config[c] == name]
        mine = ok[ok["cell_id"].isin(ids)]
        model = str(mine["model"].iloc[0])
        train = _train_flat(steps[steps["cell_id"].isin(ids)] if len(steps) else steps,
                            mine["steps"].tolist() if "steps" in mine else [])
        flat, evidence = _score_flat(reads[reads["cell_id"].isin(ids)] if len(reads)
                                     else reads, starts.get(name), z)
        if train:
            evidence = "train reward never rose above its first step's; " + evidence
        rows.append({"config": name, "model": model, "reward": mine["reward"].iloc[0],
                     "train_flat": train, "score_flat": flat,
                     "learned": not (train or flat), "evidence": evidence})
    learning = Learning(pd.DataFrame(rows, columns=["config", "model", "reward",
                                                    "train_flat", "score_flat",
                                                    "learned", "evidence"]))
    if learning.nothing:
        learning.causes = likely_causes(ok, steps)
    return learning


def likely_causes(ok: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """What the cells show of why nothing learned: a reward never paid, completions cut
    at ``max_new_tokens``, a budget too small for 2 steps; else none of these."""
    causes = []
    step_rows = steps[steps["cell_id"].isin(ok["cell_id"])] if len(steps) else steps
    rewards = (step_rows["train_reward"].dropna() if "train_reward" in step_rows
               else pd.Series(dtype=float))
    if len(rewards) and (rewards == 0).all():
        causes.append(f"reward never paid: train reward 0 at every step of every cell "
                      f"({len(rewards)} steps)")
    cut = (step_rows["truncation_rate"].dropna() if "truncation_rate" in step_rows
           else pd.Series(dtype=float))
    if len(cut) and cut.mean() >= DEFAULT.max_truncation:
        causes.append(f"max_new_tokens cut the completions: truncation rate {cut.mean():.0%} "
                      f"on average (raise grid.max_new_tokens)")
    few = ok[ok["steps"] < 2] if "steps" in ok else ok.iloc[:0]
    if len(few):
        causes.append(f"budget too small for one step: {len(few)} of {len(ok)} cell(s) ran "
                      f"fewer than 2 GRPO steps (raise budget or the pilot fraction)")
    return causes or ["none of a reward never paid, completions cut at max_new_tokens or "
                      "a budget under 2 steps: every score stayed within noise of its warm "
                      "start (more budget, another lr or more problems per read)"]
