"""Whether this sweep's pilots can rank its configs, read from its own reads
(:mod:`race.core.reliability` holds the statistics and the frozen thresholds).

A ladder is read at its first rung (every config there, on the same problems) and between
its first two rungs; a flat sweep at its pilots' end and between its last two checkpoints.
Where the verdict is not ``can rank``, :func:`remedies` says what would make the ranking
reliable, each change sized from this sweep's own noise: the problems a read needs
(Spearman-Brown), how much later the first rung would have to read (from how the configs'
spread grew between the rungs it has), and a second seed.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from race.core import reliability as rel
from race.core.rungs import fmt_fraction


def _rung_matrix(members: dict[str, tuple[str, str]], examples: pd.DataFrame,
                 target: str) -> tuple[list[str], list[str], np.ndarray] | None:
    """(configs, their sizes, (configs, problems) mean correct over each config's cells)
    for the cells ``members`` (cell id -> (config, size)) on ``target``; None where the
    cells kept no per-problem scores or scored different problem counts."""
    if not len(examples):
        return None
    mine = examples[(examples["target"] == target) & examples["cell_id"].isin(members)]
    by: dict[str, list[np.ndarray]] = {}
    sizes: dict[str, str] = {}
    for cell_id, group in mine.groupby("cell_id", sort=True):
        config, size = members[cell_id]
        by.setdefault(config, []).append(group.sort_values("example")["correct"]
                                         .to_numpy(float))
        sizes[config] = size
    if not by or len({len(v) for vs in by.values() for v in vs}) != 1:
        return None
    configs = sorted(by)
    return configs, [sizes[c] for c in configs], np.stack([np.mean(by[c], axis=0)
                                                           for c in configs])


def _scores(configs: list[str], matrix: np.ndarray) -> dict[str, float]:
    return dict(zip(configs, matrix.mean(axis=1).tolist()))


def _signal(configs, sizes, matrix) -> float:
    """The configs' true-score variance within size: the centered scores' variance less
    the problems' (binomial) noise in it."""
    groups = np.asarray(sizes)
    scores = matrix.mean(axis=1)
    n = matrix.shape[1]
    spread = noise = 0.0
    counted = 0
    for g in np.unique(groups):
        s = scores[groups == g]
        if len(s) < 2:
            continue
        spread += float(((s - s.mean()) ** 2).sum())
        noise += float((s * (1 - s) / n).sum()) * (len(s) - 1) / len(s)
        counted += len(s) - 1
    return max(spread - noise, 0.0) / counted if counted else math.nan


def sweep_reliability(cells: pd.DataFrame, evals: pd.DataFrame, examples: pd.DataFrame, *,
                      target: str, starts: dict[str, dict], ladder: dict | None) -> dict:
    """The reliability record a report and ``selection.json`` carry.

    Args:
        cells: every ok cell (``cell_id``, ``config_id``, ``model``).
        evals: every checkpoint eval (flat sweeps: the last two checkpoints agree?).
        examples: per-problem scores at each cell's last checkpoint (``cell_id``,
            ``target``, ``example``, ``correct``).
        starts: each config's warm start on ``target`` (``accuracy``;
            :func:`race.analysis.select.warm_starts`).
        ladder: ``ladder.json`` or None (a flat sweep).

    Returns:
        {"verdict", "reliability", "agreement", "past_start", "problems", "configs",
        "read_at", "rungs": [{"rung", "fraction", "configs", "reliability"}],
        "thresholds", "remedies"}: reliability, agreement and past_start as
        :mod:`race.core.reliability` defines them (NaN where too few configs).
    """
    ok = cells[cells["status"] == "ok"] if "status" in cells else cells
    okay = set(ok["cell_id"])
    if ladder is not None:  # a rung's cells belong to its candidates' configs
        rungs = [(r["rung"], r["fraction"],
                  {cell: (c["config"], c["model"]) for c in r["candidates"]
                   for cell in c.get("cell_ids", ()) if cell in okay})
                 for r in ladder["rungs"]]
    else:
        rungs = [(1, None, {r["cell_id"]: (str(r["config_id"]), str(r["model"]))
                            for _, r in ok.iterrows()})]
    read = []
    for number, fraction, members in rungs:
        m = _rung_matrix(members, examples, target)
        if m is not None:
            read.append((number, fraction, *m))
    out = {"verdict": "weakly", "reliability": math.nan, "agreement": math.nan,
           "past_start": math.nan, "problems": 0, "configs": 0, "read_at": "",
           "rungs": [], "thresholds": {"can": rel.THRESHOLDS.can,
                                       "cannot": rel.THRESHOLDS.cannot,
                                       "agreement": rel.THRESHOLDS.agreement},
           "remedies": []}
    if not read:
        out["remedies"] = ["the cells kept no per-problem scores: rerun with this RACE"]
        return out
    for number, fraction, configs, sizes, matrix in read:
        out["rungs"].append({"rung": number, "fraction": fraction, "configs": len(configs),
                             "reliability": rel.problem_reliability(matrix, sizes)})
    _, fraction, configs, sizes, matrix = read[0]
    groups = dict(zip(configs, sizes))
    first = _scores(configs, matrix)
    if len(read) > 1:
        after = _scores(read[1][2], read[1][4])
        out["agreement"] = rel.rung_agreement(first, after, groups)
    else:
        out["agreement"] = _flat_agreement(evals, ok, target, groups)
    start = {c: starts[c]["accuracy"] for c in groups if c in starts}
    reliability = out["rungs"][0]["reliability"]
    out |= {"reliability": reliability, "past_start": rel.share_past_start(first, start),
            "problems": int(matrix.shape[1]), "configs": len(configs),
            "read_at": (f"rung 1 ({fmt_fraction(fraction)})" if fraction is not None
                        else "the pilots' end"),
            "verdict": rel.verdict(reliability, out["agreement"])}
    out["remedies"] = remedies(out, read) if out["verdict"] != "can rank" else []
    return out


def _flat_agreement(evals: pd.DataFrame, cells: pd.DataFrame, target: str,
                    groups: dict[str, str]) -> float:
    """A flat sweep's agreement: its configs' mean scores at the last two checkpoints."""
    if not len(evals):
        return math.nan
    mine = evals[(evals["target"] == target) & (evals["checkpoint"] > 0)
                 & evals["cell_id"].isin(cells["cell_id"])]
    points = sorted(mine["checkpoint"].unique())
    if len(points) < 2:
        return math.nan
    by = [mine[mine["checkpoint"] == p].groupby("config_id")["accuracy"].mean().to_dict()
          for p in points[-2:]]
    return rel.rung_agreement({str(k): v for k, v in by[0].items()},
                              {str(k): v for k, v in by[1].items()}, groups)


def remedies(record: dict, read: list) -> list[str]:
    """What would make the ranking reliable, each sized from the sweep's own noise."""
    target, out = rel.THRESHOLDS.target, []
    reliability, n = record["reliability"], record["problems"]
    needed = rel.problems_needed(reliability, n, target)
    if needed is not None and needed > n:
        out.append(f"pilot.select_examples={needed} (Spearman-Brown: {reliability:.2f} on "
                   f"{n} problems reaches {target:.2f} there)")
    elif needed is None:
        out.append("more problems cannot help: the configs' reads do not differ beyond "
                   "problem noise")
    if len(read) > 1 and read[0][1] and read[1][1]:
        later = _later_factor(read[0], read[1], target)
        if later is not None:
            out.append(f"a first rung read about {later:.1f}x later (pilot.fraction or "
                       f"budget x{later:.1f}, or about 1/{later:.1f} as many configs): the "
                       f"configs' spread grew from {fmt_fraction(read[0][1])} to "
                       f"{fmt_fraction(read[1][1])}, and at that rate reaches "
                       f"{target:.2f} there")
        else:
            out.append(f"reading later is not estimated to help: the configs' spread did "
                       f"not grow from {fmt_fraction(read[0][1])} to "
                       f"{fmt_fraction(read[1][1])}")
    out.append("selection.replicates=2 (a second seed at the last rung: problem "
               "reliability does not count seed noise, which is as large on the testbed)")
    return out


def _later_factor(first: tuple, second: tuple, target: float) -> float | None:
    """How many times later the first rung must read for its reliability to reach
    ``target``: the true-score variance of the configs that ran both rungs, grown as a
    power of the budget between them, against the first rung's noise."""
    _, f0, c0, s0, m0 = first
    _, f1, c1, s1, m1 = second
    common = [c for c in c1 if c in c0]
    if len(common) < 3:
        return None
    i0 = [c0.index(c) for c in common]
    i1 = [c1.index(c) for c in common]
    v0 = _signal(common, [s0[i] for i in i0], m0[i0])
    v1 = _signal(common, [s1[i] for i in i1], m1[i1])
    if not (v0 > 0 and v1 > v0):
        return None
    growth = math.log(v1 / v0) / math.log(f1 / f0)
    signal = _signal(c0, s0, m0)
    scores = m0.mean(axis=1)
    noise = float(np.mean(scores * (1 - scores))) / m0.shape[1]
    if not signal > 0:
        return None
    factor = (target / (1 - target) * noise / signal) ** (1 / growth)
    return max(1.0, factor)


def verdict_line(record: dict) -> str:
    """One line: the verdict and its numbers."""
    r, a, p = record["reliability"], record["agreement"], record["past_start"]

    def num(x):
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"

    words = {"can rank": "the pilots can rank these configs at this budget",
             "weakly": "the pilots rank these configs weakly at this budget",
             "cannot": "the pilots cannot rank these configs at this budget"}[record["verdict"]]
    return (f"ranking reliability: {words} (problem reliability {num(r)} at "
            f"{record['read_at']}, {record['configs']} configs x {record['problems']} "
            f"problems; rung-to-rung agreement {num(a)}; {num(p)} of configs past their "
            f"warm start; can rank at >= {record['thresholds']['can']:.2f}, cannot below "
            f"{record['thresholds']['cannot']:.2f})")
