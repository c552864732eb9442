"""The tables and summary lines ``bench/selection_replay.py`` prints, and the response
surface's leave-one-config-out check beside the ladder's pick rate."""

from __future__ import annotations

import collections
import math

import numpy as np

from bench import peers
from bench.replay_bank import FLAT
from race.analysis.regime_check import regime_check
from race.analysis.response import planned_update_fraction
from race.core.rungs import fmt_fraction
from race.run.grid import plan_grid


def fmt_knobs(knobs: dict) -> str:
    """Peer knobs, shares of F as ``F/48`` (``grace`` None: one resource unit; top-k's
    ``short`` None: the ladder's first rung)."""
    def value(k, v):
        if k == "reduction" or isinstance(v, str):
            return str(v)
        if v is None:
            return "1st rung" if k == "short" else "1 unit"
        return "F" if v == 1 else fmt_fraction(v).replace(" ", "")
    return ", ".join(f"{k} {value(k, v)}" for k, v in knobs.items())


def mc_se(values) -> float:
    """The Monte Carlo SE of a mean over replicates: their spread over the root of their
    count (how far another draw of as many replicates would move it; the truth's SE, a
    row's ``se``, is how far the bank's own seeds could)."""
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 \
        else math.nan


def table(rows: list[dict], configs: dict) -> str:
    """One line per policy: its mean regret with its Monte Carlo SE and the truth's SE,
    then test regret, rank agreement, catastrophes, cost and picks."""
    lines = [f"{'policy':<18}{'regret':>8}{'mc se':>8}{'truth se':>9}{'test':>8}"
             f"{'kendall [90% CI]':>24}"
             f"{'spearman [90% CI]':>24}{'catastr.':>10}{'cost':>7}{'+eval':>7}  picks"]
    for r in rows:
        counts = collections.Counter(configs[p]["label"] for p in r["picks"])
        picks = ", ".join(f"{label} {n / len(r['picks']):.0%}"
                          for label, n in counts.most_common())
        lines.append(f"{r['policy']:<18}{r['top1_regret']:>8.4f}{mc_se(r['regrets']):>8.4f}"
                     f"{r['se']:>9.4f}{r['test_regret']:>8.4f}"
                     f"{r['kendall']:>8.2f} [{r['kendall_ci'][0]:5.2f},{r['kendall_ci'][1]:5.2f}]"
                     f"{r['spearman']:>8.2f} [{r['spearman_ci'][0]:5.2f},"
                     f"{r['spearman_ci'][1]:5.2f}]{r['catastrophes']:>10.2f}"
                     f"{r['pilot_cost_share']:>7.3f}{r['with_eval']:>7.3f}  {picks}")
    return "\n".join(lines)


def best_peer(rows: list[dict], ladder_row: dict) -> dict | None:
    """The peer row (of ``peers.PEERS``) with the lowest regret among those whose cost with
    eval is at most ``ladder_row``'s (each is given the ladder's budget, so all are)."""
    fair = [r for r in rows if r["policy"] in peers.PEERS
            and r["with_eval"] <= ladder_row["with_eval"] + 1e-9]
    return min(fair, key=lambda r: (r["top1_regret"], r["policy"])) if fair else None


def summary(rows: list[dict], name: str = "ladder+guards") -> str:
    """The table's line for ``name``, with the best peer at equal or lower cost."""
    row = next(r for r in rows if r["policy"] == name)
    peer = best_peer(rows, row)
    return (f"policy={row['policy']} top1_regret={row['top1_regret']:.4f} se={row['se']:.4f} "
            f"within_size_kendall={row['kendall']:.3f} catastrophes={row['catastrophes']:.2f} "
            f"pilot_cost_share={row['pilot_cost_share']:.4f} "
            f"cost_with_eval={row['with_eval']:.4f} "
            f"best_peer={peer['policy'] if peer else 'none'} "
            f"best_peer_regret={peer['top1_regret'] if peer else math.nan:.4f}")


def paired(a: dict, b: dict) -> tuple[float, float]:
    """``a``'s regret minus ``b``'s, replicate by replicate (the same replicates), and the
    Monte Carlo SE of that mean over the replicates."""
    diff = np.subtract(a["regrets"], b["regrets"])
    return float(np.mean(diff)), mc_se(diff)


def paired_difference(rows: list[dict], name: str = "ladder+guards") -> str:
    """``name``'s regret minus the best peer's (``best_peer``), paired replicate by
    replicate, with the Monte Carlo SE of that mean over the replicates."""
    row = next(r for r in rows if r["policy"] == name)
    peer = best_peer(rows, row)
    if peer is None:
        return f"{name}: no peer at equal or lower cost"
    diff, diff_se = paired(row, peer)
    return (f"{name} - {peer['policy']} (best peer): regret {diff:+.4f}, Monte Carlo "
            f"SE {diff_se:.4f} over {len(row['regrets'])} replicates (paired); the truth's SE "
            f"{row['se']:.4f}")


BEATS_SE = 2.0  # a rule beats the default where it is lower by more than this many MC SE


def default_verdict(rows: list[dict], held_rows: list[dict],
                    name: str = "ladder+guards") -> str:
    """Whether a rule should replace ``name`` as RACE's default: every other rule (not
    the oracle, which reads the truth) at equal or lower cost with eval, its regret minus
    ``name``'s paired on all configs and on the held-out half; it beats ``name`` where both
    are below zero by more than ``BEATS_SE`` Monte Carlo SE."""
    mine = {id(rs): next(r for r in rs if r["policy"] == name) for rs in (rows, held_rows)}
    lines = [f"the default's test: each rule's regret minus the default's ({name}), paired "
             f"(Monte Carlo SE), on all configs and held out; a rule beats the default where "
             f"both are below 0 by more than {BEATS_SE:g} SE at no more cost with eval"]
    winners = []
    for row in rows:
        held = next((r for r in held_rows if r["policy"] == row["policy"]), None)
        if row["policy"] in (name, "oracle") or held is None:
            continue
        (d_all, se_all), (d_held, se_held) = paired(row, mine[id(rows)]), paired(
            held, mine[id(held_rows)])
        fair = all(r["with_eval"] <= mine[id(rs)]["with_eval"] + 1e-9
                   for r, rs in ((row, rows), (held, held_rows)))
        beats = fair and d_all < -BEATS_SE * se_all and d_held < -BEATS_SE * se_held
        winners += [row["policy"]] if beats else []
        lines.append(f"  {row['policy']:<18}{d_all:+.4f} ({se_all:.4f})   held out "
                     f"{d_held:+.4f} ({se_held:.4f})   "
                     + ("beats it" if beats else "costs more" if not fair else "does not"))
    lines.append(f"verdict: {', '.join(winners)} beat{'s' if len(winners) == 1 else ''} "
                 f"{name}: make the best of them RACE's default" if winners else
                 f"verdict: no rule beats {name} on both: it stays RACE's default")
    return "\n".join(lines)


def planned_rho(config: dict, budget: float) -> float:
    """A bank config's rho as ``race plan`` solves it at the bank's full budget."""
    cell, = plan_grid(["selection.policy=flat", f"budget={budget:g}",
                       f"model={config['model']}", f"reward={config['reward']}",
                       f"grid.group_size={config['group_size']}",
                       f"grid.update_epochs={config['update_epochs']}"],
                      runnable=False).cells
    return planned_update_fraction(cell)


def regime_section(configs: dict, budget: float, ladder_row: dict) -> str:
    """The response surface's leave-one-config-out check (``race.analysis.regime_check``)
    per (size, reward) on the bank, the pilot scores being each seed's ``val`` at F/16 (a
    flat pilot's), beside the ladder's pick rate there: the share of replicates in which
    the ladder ranks the group's best config at F first among the group's configs."""
    groups: dict[tuple, list[str]] = {}
    for cid, config in sorted(configs.items()):
        groups.setdefault((config["model"], config["reward"]), []).append(cid)
    lines = [f"response surface in rho, leave one config out (pilot scores: val at F/{1 / FLAT:.0f}"
             f", every seed; rho as planned), against ladder+guards' pick rate within the "
             f"group:"]
    for (model, reward), ids in groups.items():
        rho = {cid: planned_rho(configs[cid], budget) for cid in ids}
        pilot = {cid: [curve.at(FLAT) for curve in configs[cid]["curves"].values()]
                 for cid in ids}
        n = int(next(iter(configs[ids[0]]["curves"].values())).read_n[0])
        check = regime_check(rho, pilot, {cid: configs[cid]["truth"] for cid in ids},
                             n_problems=n)
        # replicates whose grid holds the group's best (all of them without subgrids)
        picks = [next(c for c in ranking if c in rho) == check.best
                 for ranking in ladder_row["rankings"] if check.best in ranking]
        lines.append(f"  {model}/{reward} ({len(ids)} configs, rho "
                     + ", ".join(f"{configs[c]['label'].split(' ', 1)[1]} {rho[c]:.2f}"
                                 for c in ids)
                     + f"): {check.line().replace(check.best, configs[check.best]['label'])}; "
                     f"ladder+guards pick rate {np.mean(picks):.2f}")
    return "\n".join(lines)

