"""The tables, verdicts and summary lines ``bench/selection_replay.py`` prints (SEs by the
two-way cluster bootstrap over read seeds and grids), and the response surface's
leave-one-config-out check beside the ladder's pick rate."""

from __future__ import annotations

import collections
import math

import numpy as np

from bench.science import peers
from bench.science.replay_bank import FLAT
from bench.science.replay_stats import cell_matrix, cluster_bootstrap_se
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


REFERENCE = "ladder+guards"  # the policy every other is paired with: RACE's default
TIE_Z = 1.645  # a peer ties the reference where its paired difference +- 1.645 SE (90%) holds 0


def with_cluster_se(rows: list[dict], draws: list[dict], boot: int,
                    name: str = REFERENCE) -> list[dict]:
    """Each row with its regret's SE (``se``), and its regret minus ``name``'s, paired
    replicate by replicate (``diff``), with that difference's SE (``diff_se``): both from
    the two-way cluster bootstrap over the (read seed x grid) matrix of per-replicate
    values (``replay_stats.cluster_bootstrap_se``), ``boot`` draws shared by every
    policy."""
    ref = next(r for r in rows if r["policy"] == name)
    regrets = np.array([cell_matrix(r["regrets"], draws) for r in rows])
    paired = regrets - cell_matrix(ref["regrets"], draws)
    se, diff_se = cluster_bootstrap_se(regrets, boot), cluster_bootstrap_se(paired, boot)
    return [r | {"se": float(s), "diff": float(np.mean(d)), "diff_se": float(ds)}
            for r, s, d, ds in zip(rows, se, paired, diff_se)]


def table(rows: list[dict], configs: dict) -> str:
    """One line per policy: its mean regret with its SE, its regret minus ladder+guards'
    (paired) with that SE (``with_cluster_se``), then test regret, rank agreement,
    catastrophes, cost and picks."""
    lines = [f"{'policy':<18}{'regret':>8}{'se':>8}{'- l+g':>9}{'se':>8}{'test':>8}"
             f"{'kendall [90% CI]':>24}"
             f"{'spearman [90% CI]':>24}{'catastr.':>10}{'cost':>7}{'+eval':>7}  picks"]
    for r in rows:
        counts = collections.Counter(configs[p]["label"] for p in r["picks"])
        picks = ", ".join(f"{label} {n / len(r['picks']):.0%}"
                          for label, n in counts.most_common())
        lines.append(f"{r['policy']:<18}{r['top1_regret']:>8.4f}{r['se']:>8.4f}"
                     f"{r['diff']:>+9.4f}{r['diff_se']:>8.4f}{r['test_regret']:>8.4f}"
                     f"{r['kendall']:>8.2f} [{r['kendall_ci'][0]:5.2f},{r['kendall_ci'][1]:5.2f}]"
                     f"{r['spearman']:>8.2f} [{r['spearman_ci'][0]:5.2f},"
                     f"{r['spearman_ci'][1]:5.2f}]{r['catastrophes']:>10.2f}"
                     f"{r['pilot_cost_share']:>7.3f}{r['with_eval']:>7.3f}  {picks}")
    return "\n".join(lines)


def verdict(row: dict) -> str:
    """``ties`` where the row's paired difference with the reference, +- ``TIE_Z`` SE,
    holds 0; else ``above`` (more regret) or ``below`` (less)."""
    if abs(row["diff"]) <= TIE_Z * row["diff_se"]:
        return "ties"
    return "above" if row["diff"] > 0 else "below"


def verdict_lines(rows: list[dict], world: str, name: str = REFERENCE) -> str:
    """Each peer's verdict against ``name`` on one world (``verdict``)."""
    lines = [f"{world}: each peer's regret minus {name}' (paired, SE over seeds and "
             f"grids); it ties {name} where +-{TIE_Z} SE holds 0:"]
    for r in rows:
        if r["policy"] in peers.PEERS:
            v = verdict(r)
            lines.append(f"  {r['policy']:<18}{r['diff']:+.4f} (se {r['diff_se']:.4f})  "
                         + (f"ties {name}" if v == "ties" else f"{v} {name}"))
    return "\n".join(lines)


def default_verdict(rows: list[dict] | None, name: str = REFERENCE) -> str:
    """What one world says of the default (``selection.policy=ladder``, replayed as
    ``name``): it stays where no peer is below it (``verdict``); None: the world has no
    replay."""
    if rows is None:
        return "no replay"
    by = collections.defaultdict(list)
    for r in rows:
        if r["policy"] in peers.PEERS:
            by[verdict(r)].append(r["policy"])
    rest = "; ".join(f"{k}: {', '.join(by[k])}" for k in ("ties", "above") if by[k])
    if by["below"]:
        return f"a peer is below {name} ({', '.join(by['below'])}; {rest}): reconsider it"
    return f"stays: no peer below {name} ({rest})"


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


def planned_rho(config: dict, budget: float) -> float:
    """A bank config's rho as ``race plan`` solves it at the bank's full budget."""
    cell, = plan_grid(["selection.policy=flat", f"budget={budget:g}",
                       f"model={config['model']}", f"reward={config['reward']}",
                       f"grid.group_size={config['group_size']}",
                       f"grid.update_epochs={config['update_epochs']}"],
                      runnable=False).cells
    return planned_update_fraction(cell)


def regime_section(configs: dict, budget: float, ladder_row: dict,
                   most: int | None = None) -> str:
    """The response surface's leave-one-config-out check (``race.analysis.regime_check``)
    per (size, reward) on the bank, the pilot scores being each seed's ``val`` at F/16 (a
    flat pilot's), beside the ladder's pick rate there: the share of replicates in which
    the ladder ranks the group's best config at F first among the group's configs.
    ``most``: the first that many groups only (``--quick``: planning each config's rho
    composes its plan, about a second each)."""
    groups: dict[tuple, list[str]] = {}
    for cid, config in sorted(configs.items()):
        groups.setdefault((config["model"], config["reward"]), []).append(cid)
    lines = [f"response surface in rho, leave one config out (pilot scores: val at F/{1 / FLAT:.0f}"
             f", every seed; rho as planned), against ladder+guards' pick rate within the "
             f"group:"]
    for (model, reward), ids in list(groups.items())[:most]:
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
                     f"ladder+guards pick rate "
                     + (f"{np.mean(picks):.2f}" if picks else "n/a (in no replayed grid)"))
    return "\n".join(lines)

