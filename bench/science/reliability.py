"""Calibrate (worlds 1, 2) and check (world 3) the reliability verdict a sweep's report
gives (``race.core.reliability``), on the leave-one-seed-out replicates of each world's
bank, with the ladder ``race sweep`` runs.

Each replicate is one default-shaped grid read on one seed (``bench/science/replay_bank.py``), the
ladder climbed over it with its guards (``bench/science/replay_policies.py``). From the climb, as a
live sweep would: the first rung's problem reliability (per-problem ``correct`` lists on
the ``pilot.select_examples`` problems a pilot reads, random split halves, within size),
the first two rungs' agreement (Kendall within size over the configs that ran both), the
share of configs past their warm start at the first rung, and the verdict. Beside them,
what the verdict cannot see: the replicate's regret (the best truth of its grid minus the
pick's truth, the truth over the other seeds at F).

Printed per world: each diagnostic's median and quartiles, the AUC with which world 2's
replicates lie below world 1's, the share given each verdict, and the mean regret within
each verdict (with its replicate count). The thresholds in
``race.core.reliability.THRESHOLDS`` were chosen from worlds 1 and 2 only, before world
3's bank existed, and are frozen for it:

- ``can`` 0.84: the first rung's reliability that best separates the worlds' replicates
  (Youden's J 0.74: 80% of world 1's at or above it, 6% of world 2's); medians 0.899
  (world 1, 54 replicates) and 0.655 (world 2, 18), AUC 0.91.
- ``cannot`` 0.70: below world 2's median-to-upper range and world 1's 6th percentile;
  ``agreement`` 0.30 (rung 1 to rung 2 Kendall within size; medians 0.625 and 0.286,
  AUC 0.82): below ``can`` with agreement under it reads ``cannot``.
- Verdicts so calibrated: world 1 can rank 35, weakly 16, cannot 3 of 54 (regret within
  them 0.013, 0.021, 0.000); world 2 can rank 1, weakly 4, cannot 13 of 18 (0.080,
  0.185, 0.069). The verdict tells a world whose pilots cannot rank from one whose can;
  within a world it does not say which replicate's pick fails (world 2's ``cannot``
  replicates did not regret more than its ``weakly`` ones).
- The share past the warm start at the first rung did not separate the worlds here
  (medians 0.75 and 0.78, AUC 0.47): reported, not used.

``--selection`` replays the item-3 candidate, a ladder that keeps a survivor per reward
system as the default keeps one per size, against the default (leave-one-seed-out,
paired, two-way bootstrap SE): world 1 +0.0226 (SE 0.0099) more regret, world 2 +0.1185
(SE 0.1051): worse in both, so the default ladder stays.

Last line: ``reliability_w1=<median> cannot_share_w1=... reliability_w2=...
cannot_share_w2=...`` (and world 3's where its bank exists).

Usage: ``python bench/reliability.py [--world N ...] [--selection] [--quick]``.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from bench.common import add_quick
from bench.science import replay_policies
from bench.science.bank import correct_index
from bench.science.replay_bank import judged, load_bank, loso_replicates, subgrids
from bench.science.replay_stats import cell_matrix, cluster_bootstrap_se
from bench.science.worlds import WORLDS
from race.core import reliability as rel

SELECT_PROBLEMS = replay_policies.SELECT_PROBLEMS


def replicate_diagnostics(configs: dict, draw: dict, correct: dict) -> dict:
    """The ladder's climb over one replicate, and what the sweep itself would read."""
    configs = {c: configs[c] for c in draw}
    rungs, reads = replay_policies.ladder(configs, draw, use_guards=True, with_rungs=True)
    first = rungs[0]
    ids = [c["config"] for c in first]
    groups = {c: configs[c]["model"] for c in ids}
    keys = [(c, draw[c], round(reads[0], 6)) for c in ids]
    reliability = math.nan  # a bank without per-problem scores there: unknown
    if all(k in correct for k in keys) and len({len(correct[k]) for k in keys}) == 1:
        reliability = rel.problem_reliability(np.stack([correct[k] for k in keys]),
                                              [groups[c] for c in ids])
    agreement = math.nan
    if len(rungs) > 1:
        agreement = rel.rung_agreement({c["config"]: c["score"] for c in first},
                                       {c["config"]: c["score"] for c in rungs[1]}, groups)
    starts = {c: float(configs[c]["curves"][draw[c]].read[0]) for c in ids}
    past = rel.share_past_start({c["config"]: c["score"] for c in first}, starts)
    pick = replay_policies.pick_order(rungs)[0]
    truth = judged(configs, draw)
    regret = max(t["truth"] for t in truth.values()) - truth[pick]["truth"]
    return {"reliability": reliability, "agreement": agreement, "past": past,
            "verdict": rel.verdict(reliability, agreement), "regret": regret,
            "random": float(np.mean([max(t["truth"] for t in truth.values()) - t["truth"]
                                     for t in truth.values()]))}


def per_reward(configs: dict) -> dict:
    """``configs`` with each config's size read as (size, reward): a ladder over it keeps
    a survivor per reward system as the default keeps one per size."""
    return {c: v | {"model": f"{v['model']}/{v['reward']}"} for c, v in configs.items()}


def selection_rows(number: int) -> tuple[list[dict], list[dict]]:
    """Per replicate, the default ladder's regret and a survivor-per-reward ladder's
    (both with guards, each at the compute its plan fits in one F with eval)."""
    w = WORLDS[number]
    _, configs = load_bank(w.f_bank, read_problems=SELECT_PROBLEMS)
    draws = loso_replicates(configs, subgrids(configs))
    out = []
    for draw in draws:
        view = {c: configs[c] for c in draw}
        truth = judged(configs, draw)
        best = max(t["truth"] for t in truth.values())
        row = {}
        for name, cs in (("ladder", view), ("per-reward", per_reward(view))):
            ranking, charged, _ = replay_policies.ladder(cs, draw, use_guards=True)
            row[name], row[f"{name}_cost"] = best - truth[ranking[0]]["truth"], charged
        out.append(row)
    return out, draws


def selection_section(numbers) -> dict:
    """Item 3's candidate against the default, leave-one-seed-out, paired, two-way SE."""
    out = {}
    for n in numbers:
        rows, draws = selection_rows(n)
        a = cell_matrix([r["ladder"] for r in rows], draws)
        b = cell_matrix([r["per-reward"] for r in rows], draws)
        se = cluster_bootstrap_se(np.stack([a, b, b - a]))
        out[n] = (a.mean(), b.mean(), (b - a).mean(), se)
        print(f"world {n} selection: ladder+guards regret {a.mean():.4f} (SE {se[0]:.4f}), "
              f"a survivor per reward {b.mean():.4f} (SE {se[1]:.4f}); difference "
              f"{(b - a).mean():+.4f} (SE {se[2]:.4f}); charged "
              f"{np.mean([r['ladder_cost'] for r in rows]):.3f} vs "
              f"{np.mean([r['per-reward_cost'] for r in rows]):.3f} of F")
    return out


def world_rows(number: int, grids: int | None = None) -> list[dict]:
    """Every leave-one-seed-out replicate of world ``number``'s F bank (``grids``: its
    first few default-shaped grids only)."""
    w = WORLDS[number]
    _, configs = load_bank(w.f_bank, read_problems=SELECT_PROBLEMS)
    correct = correct_index(w.f_bank, SELECT_PROBLEMS)
    return [replicate_diagnostics(configs, draw, correct)
            for draw in loso_replicates(configs, (subgrids(configs) or [])[:grids] or None)]


def auc_below(low: list[float], high: list[float]) -> float:
    """P(a value of ``low`` < a value of ``high``), ties half."""
    low, high = [x for x in low if not math.isnan(x)], [x for x in high if not math.isnan(x)]
    wins = sum((a < b) + 0.5 * (a == b) for a in low for b in high)
    return wins / (len(low) * len(high)) if low and high else math.nan


def quartiles(values: list[float]) -> str:
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return "n/a"
    q1, q2, q3 = np.percentile(v, [25, 50, 75])
    return f"{q2:.3f} [{q1:.3f}, {q3:.3f}]"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, nargs="*", default=None,
                        help="worlds to read (default: every world whose bank exists)")
    parser.add_argument("--selection", action="store_true",
                        help="also replay a survivor per reward system against the default")
    add_quick(parser, "the first 2 default-shaped grids of each world")
    args = parser.parse_args(argv)
    numbers = args.world or [n for n, w in WORLDS.items() if w.f_bank.exists()]
    rows = {n: world_rows(n, 2 if args.quick else None) for n in numbers}
    t = rel.THRESHOLDS
    print(f"thresholds (race.core.reliability.THRESHOLDS): can rank >= {t.can}, cannot < "
          f"{t.cannot} (or < {t.can} with rung agreement < {t.agreement})")
    for n, rs in rows.items():
        print(f"world {n}: {len(rs)} replicates (read seed x default-shaped grid), ladder+guards")
        for key in ("reliability", "agreement", "past"):
            print(f"  {key:<12} median [quartiles] {quartiles([r[key] for r in rs])}")
        mean_regret = np.mean([r["regret"] for r in rs])
        print(f"  regret {mean_regret:.4f} (random {np.mean([r['random'] for r in rs]):.4f})")
        for v in rel.VERDICTS:
            mine = [r for r in rs if r["verdict"] == v]
            regret = f"regret {np.mean([r['regret'] for r in mine]):.4f}" if mine else "-"
            print(f"  {v:<9} {len(mine):>3} of {len(rs)} ({len(mine) / len(rs):.0%}); {regret}")
    if 1 in rows and 2 in rows:
        for key in ("reliability", "agreement", "past"):
            print(f"AUC world 2 below world 1, {key}: "
                  f"{auc_below([r[key] for r in rows[2]], [r[key] for r in rows[1]]):.2f}")
    if args.selection:
        selection_section(numbers)
    summary = {}
    for n, rs in rows.items():
        summary[f"reliability_w{n}"] = float(np.nanmedian([r["reliability"] for r in rs]))
        summary[f"cannot_share_w{n}"] = float(np.mean([r["verdict"] == "cannot" for r in rs]))
    print(" ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    return {"rows": rows, "summary": summary}


if __name__ == "__main__":
    main()
