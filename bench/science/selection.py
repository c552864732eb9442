"""Replay pilot selection policies on each world's curve bank, leave one seed out, and
score their picks.

A bank (each world's F bank, ``bench/science/worlds.py``: ``WORLDS[1].f_bank``, the testbed's v4
bank ``bench/data/curve_bank_v4.json.gz``, and ``WORLDS[2].f_bank``; the F grid of
``bench/testbed_bank.py``; see ``bench/curve_bank.py``) holds every config of a testbed grid
run to the full budget F with dense checkpoints, several seeds each. A policy sees only
what its pilots would have seen (the curves truncated at its pilot budgets) and picks one
config.

The replay is leave-one-seed-out. A replicate is (read seed s, grid g): a sweep of g run
on one seed, every config's curve read from seed s, and each config's truth its ``val``
accuracy at F averaged over the bank's other seeds, on every problem the bank scored (500
per seed in the testbed's bank; ``replay_bank.judged``). The pick's regret is the best
truth in g minus the pick's truth. The seed a policy reads is never part of the truth it
is judged by: a truth that averaged every seed, the read one included (``--truth
all-seeds``, on the same replicates, kept for comparison: the earlier replay's truth, whose
replicates drew each config's seed independently), flatters every policy by the noise it
read (on v4, ladder+guards' regret 0.0149 leave-one-seed-out, 0.0138 with every seed in
the truth; asha 0.0130 and 0.0124). A bank too wide for RACE's default ladder to replay as one sweep
(``whole_replayable``: the v4 bank's 48 configs would put the first rung below its first
checkpoint at the default pilot compute of one full run) is replayed as its default-shaped
grids (``replay_bank.subgrids``: every pair of G values x every pair of mu values x all
sizes and rewards, 18 grids of 16 configs in the v4 bank, the shape ``race sweep``'s default
grid has): 3 read seeds x 18 grids = 54 replicates on v4. A bank with fewer than 2 seeds
that every config ran cannot be replayed leave-one-seed-out; the script says so and goes
on to the next world.

Standard errors: a two-way cluster bootstrap over the (read seed x grid) matrix of
per-replicate regrets (``replay_stats.cluster_bootstrap_se``: each of ``--boot`` draws,
2,000 by default with a fixed RNG seed, resamples the seeds with replacement and,
independently, the grids with replacement, and takes the mean over the resampled cells).
Replicates that share a seed or a grid are not independent, so this SE counts the bank's
few seeds as a sample, where a Monte Carlo SE over replicates would treat them as fixed.
Each policy's regret minus ladder+guards', replicate by replicate, gets its SE from the
same draws (paired).

Every policy, RACE's and the peers', reads ``val`` as a default pilot scores it: on
the first ``pilot.select_examples`` (200) of those problems at each checkpoint it reads (a
pilot's problems are a prefix of one seeded draw, so these are the very problems it would
score; ``SELECT_PROBLEMS``), and pays for that many. Before the policies it prints the
four best configs' ``val`` by window of the budget (seed means on every problem, F itself
apart): whether their order at F can be seen at all at the budgets pilots read.

The peers (``bench/science/peers.py``) replay the same replicates through the bank exported as a
Syne Tune tabular blackbox (``bench/science/blackbox.py``: the grid's axes as its configuration
space, the checkpoints in units of F/D as its fidelity, FLOPs and ``val`` per checkpoint
as its objectives, the bank's seeds as its seed axis), cut per replicate to the
one-seed blackbox of its read seed (``blackbox.one_seed``):

- ``asha``, ``hyperband``, ``pasha`` (Syne Tune), ``optuna-sh``, ``optuna-hyperband``
  (Optuna's ``SuccessiveHalvingPruner``, ``HyperbandPruner``) and ``top-k`` (Egele et al.
  2023: every config to a short budget, the best K on to a long one).
- How they run: the schedulers' own ``suggest`` / ``on_trial_result`` (Syne Tune) and
  ``trial.report`` / ``should_prune`` (Optuna) are driven directly over the replicate's
  curves by an event loop: one worker per config, time in FLOPs, a report at every
  checkpoint of the bank, each config run at most once. Syne Tune's simulator backend
  (``Tuner`` with ``UserBlackboxBackend`` and ``SimulatorCallback``) can replay a
  one-seed blackbox too, and on one worker it reads exactly the same checkpoints
  (``peers.simulator_asha``, checked by a test). It is not the default for three
  reasons: it is some 30 times slower; it stops on wall-clock time, which with parallel
  workers is not total compute; and its searcher repeats configs once the grid is done.
- Syne Tune 0.16 (the release that installs beside numpy 2) has no ``PASHA`` and no
  synchronous Hyperband. ``hyperband`` is its ``ASHA`` with all of Hyperband's brackets
  (asynchronous Hyperband). ``pasha`` is Syne Tune 0.14.2's PASHA rung system ported onto
  0.16's scheduler API.
- Equal cost: on each replicate a peer is given ladder+guards' pilot compute on that
  replicate, eval included (``matched_budget``: its charged share plus RACE's pilot eval
  plan). Its workers stop when their total compute, charged and eval, reaches that
  budget. So a peer's cost with eval is never above the ladder's, and ``best_peer``
  needs no further filter (it checks anyway).
- A peer's charged compute is the training of the checkpoints it ran to, counted as
  fractions of F, as the ladder's is. Its eval is the ``val`` problems it scored at the
  checkpoints it read (``SELECT_PROBLEMS`` each), at the same eval FLOPs per
  problem as RACE's pilots. It pays nothing for ``test`` or ``ood``, which RACE's pilot
  plan scores for the report.
- Knobs: the libraries' documented defaults (grace period / min resource one unit, the
  bank's first checkpoint; Optuna's ``min_resource="auto"`` as it resolves after a run to
  F; reduction 3, Optuna's SH pruner 4; max resource F). Top-k's defaults: the short
  budget is the ladder's first rung, the long one F. On the tuning half, each peer also
  tries a few settings (``peers.PEERS``: grace F/48 and reduction 2; top-k: short F/16,
  long F/6), under the rule RACE's thresholds follow: the lowest regret on the tuning
  half, ties to the earlier setting, the defaults first.

RACE's policies:
- ``flat``: every config piloted to F/16; pick the best last value (val at F/16).
- ``flat+sigmoid``: the same pilots; a sigmoid fitted to each curve and extrapolated to
  F when its interval is at most 0.3 wide, else the last value (RACE's flat default).
- ``ladder``: successive halving on RACE's default rungs and reduction
  (``race.config.SelectionConfig``: F/48 -> F/24 -> F/12 -> F/6, halving; promotion by
  a lower confidence bound, ``selection.promote_by``: of the rung end's score, or of
  the score predicted at the next rung; a size keeps a config while its best's
  upper bound reaches the leader's lower bound, ``selection.keep_sizes=close``), shrunk by
  ``plan_ladder`` when it would cost more than the flat grid's pilot compute, or, with
  its eval, more than ``selection.pilot_budget`` (as ``race plan`` shrinks it), each rung
  read at the bank's last checkpoint at or below it, and only there (a sweep's ladder
  scores its rung ends, ``selection.rung_checkpoints``). It is climbed by
  ``race.core.climb.climb``, the engine ``race sweep`` runs, over the bank's curves
  (``race.core.bank_source.BankSource``; ``race sweep``'s source launches cells); the
  pick is ``race.core.rungs.final_ranking``'s first, as in a sweep.
- ``ladder+guards``: the ladder, with ``race.core.guards`` on every rung's curve (a guarded
  config is neither promoted nor picked while an unguarded one is left).
- ``ladder+guards@1``: the same at ``race sweep``'s default pilot compute, one full run
  (the rungs shrink only when they would cost more).
- ``random``: a uniformly random config (the expectation over configs).
- ``oracle``: the truth's best (regret 0 by definition).

Printed per world, per policy: top-1 regret (best truth of the grid minus the pick's,
averaged over replicates) with its SE, its regret minus ladder+guards' (paired) with that
SE, the same regret on ``test`` at F (problems selection never read; other seeds' too),
Kendall and Spearman between the policy's ranking and the truth's *within each policy
size* (averaged over sizes and replicates, with a 90% bootstrap interval over configs),
the rate of catastrophic picks (the pick ends at F below its warm start, both over the
other seeds), the pilot compute as a share of one full run, charged FLOPs only and with
the evaluation a real pilot of that policy runs (``+eval``: RACE's pilot eval plan,
``pilot_eval_share``, costed at the bank's measured eval FLOPs per problem; a ladder
scores each (size, reward) warm start once and its rungs below the last on ``val``
alone, as ``race plan`` plans it; a peer's own ``val`` reads), and how often each config
was picked. Then the verdicts (``replay_tables.verdict_lines``): each peer "ties
ladder+guards" where its paired difference +- 1.645 SE (a 90% interval) holds 0, else is
"above" (more regret) or "below" it.

Then the response surface's leave-one-config-out check per (size, reward)
(``race.analysis.regime_check``: how often the recommended regime, or the fallback's best
pilot cell, holds the group's best config at F; pilot scores are each seed's ``val`` at
F/16, rho as ``race plan`` solves it), beside ladder+guards' pick rate in the group (the
share of replicates whose ranking puts the group's best config first among the group's).

On world 1 only (world 2 is a test set: nothing is tuned on it), tuned on half of the
configs, reported on the other half (beside the all-config table with RACE's defaults and
the peers' documented defaults): first the ladder's geometry (``GEOMETRIES``: 2 to 4
rungs, each 2 to 4 times the one before, every config halved, thirded or quartered at
each; the first rung as late as the flat grid's compute allows; a geometry with a rung
the bank cannot read, below its first checkpoint, is listed and skipped) with the
promotion score (``PROMOTE_BY``: ``trend``, the score predicted at the next rung, or
``last``, the rung end's own; ``selection.promote_by``), then the guard thresholds with
that geometry, then each peer's knobs at that ladder's budget on the tuning half, each on
the tuning half's leave-one-seed-out replicates. The halves: by group size when the bank
has an even number of G values (tuned on the larger half: v3's G8, whose configs ran
first; v4's G 8, 16), else the configs in the order of a hash of their ids, alternating;
with subgrids, each half is replayed as its own default-shaped grids (v4: 3 per half, its
two G values x each pair of mu values).

After the worlds, the default's line: ``default selection.policy=ladder: <world 1>; on
world 2: <world 2>``, where a world's verdict is "stays" when no peer is below
ladder+guards there, and names the peers that are (``replay_tables.default_verdict``).
World 1 decides; world 2 reports. Nothing here changes a default in ``race/``.

Usage: ``python bench/selection_replay.py [--bank PATH] [--truth all-seeds] [--boot 2000]
[--grids N] [--jobs N]`` (needs the ``bench`` extra, ``pip install 'race-rl[bench]'``;
``--bank PATH``: that bank alone, as one world named "given"; ``--grids 2`` for a quick
look, as ``--quick`` with 50 bootstrap draws and the response surface's check on the first
(size, reward) group only; ``--jobs 2``: each policy's replicates over
two processes, the same numbers sooner). Last lines: world 1's held-out half's
``held-out: policy=ladder+guards ...``, then ``worlds=N replay=leave-one-seed-out
policy=ladder+guards top1_regret=R se=S within_size_kendall=K catastrophes=C
pilot_cost_share=P cost_with_eval=E best_peer=NAME best_peer_regret=R2
asha_diff_w1=D asha_diff_se_w1=SE`` (world 1's, all configs at the defaults; ``worlds``:
the worlds replayed; world 2's ``ladder_regret_w2``, ``asha_diff_w2`` and
``asha_diff_se_w2`` follow where it was). ``best_peer`` is the peer (``asha``,
``hyperband``, ``pasha``, ``optuna-sh``, ``optuna-hyperband``, ``top-k``) with the lowest
regret among those whose cost with eval is at most the ladder's; ``asha_diff``: asha's
regret minus ladder+guards', paired.

Per world, after the policies: the reliability verdict each replicate's own report would
give (``bench/reliability.py``: ``race.core.reliability``'s thresholds, frozen before
world 3), the share of replicates given each verdict, ladder+guards' regret within each,
and random's. The very last line: ``worlds=N regret_ladder_w1=... regret_random_w1=...
cannot_rank_share_w1=...``, the same for ``w2`` and ``w3`` (``n/a`` for a world with no
bank yet).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common import add_quick
from bench.science import bank, blackbox, peers, reliability, replay_policies
from bench.science.replay_bank import (
    ALL_SEEDS,
    FLAT,
    GRID_PROMPTS,
    LOSO,
    ORDER_BUDGETS,
    Curve,  # noqa: F401  (tests read the bank's names from this script)
    budget_windows,
    common_seeds,
    fmt_window,
    halves,
    judged,  # noqa: F401
    load_bank,
    loso_replicates,
    order_by_budget,
    subgrids,
    truth_over,
)
from bench.science.replay_policies import (  # noqa: F401  (tests read the policies from here)
    DEFAULTS,
    OWN_POLICIES,
    POLICIES,
    SELECT_PROBLEMS,
    bank_reads,
    ladder,
    ladder_plan,
    matched_budget,
    random_policy,
    replayable,
    score_policy,
    sweep_of,
)
from bench.science.replay_stats import (  # noqa: F401  (tests read them from here)
    _within_size,
    cell_matrix,
    cluster_bootstrap_se,
    kendall,
    spearman,
    within_size_counts,
)
from bench.science.replay_tables import (
    default_verdict,
    fmt_knobs,
    regime_section,
    summary,
    table,
    verdict_lines,
    with_cluster_se,
)
from bench.science.worlds import WORLDS
from race.core import guards
from race.core.reliability import VERDICTS
from race.core.rungs import geometric_rungs

# ladder geometries tuned on the tuning half: (rungs, reduction), each rung `reduction`
# times the one before, the first as late as the flat grid's compute allows; each with
# both promotion scores, the earlier rule (trend) first
GEOMETRIES = [(n, r) for r in (4, 3, 2) for n in (3, 2, 4)]
PROMOTE_BY = ("trend", "last")


def geometry(n_rungs: int, reduction: int) -> dict:
    """A ladder geometry as ``ladder``'s keyword arguments (first rung as late as the share
    allows)."""
    return {"rungs": geometric_rungs(n_rungs, reduction), "reduction": reduction,
            "fill": True}


def tune_ladder(configs, draws) -> tuple[dict, list[dict]]:
    """The geometry (of ``GEOMETRIES``) and promotion score (of ``PROMOTE_BY``) with the
    lowest ladder+guards regret on ``configs`` (the tuning half) at the flat grid's
    compute; ties to fewer catastrophes, then to the order of ``GEOMETRIES`` (the first
    design, three rungs of quartering, first) and of ``PROMOTE_BY`` (the earlier rule,
    ``trend``, first). A geometry whose rungs the bank cannot read (``replayable``) is
    listed, not scored. Returns the choice and every candidate's scores."""
    rows = []
    for i, ((n_rungs, reduction), promote_by) in enumerate(
            itertools.product(GEOMETRIES, PROMOTE_BY)):
        shape = geometry(n_rungs, reduction)
        kw = shape | {"promote_by": promote_by}
        grid = sweep_of(configs, draws[0])  # every replicate's grid has its size
        plan = ladder_plan(grid, share=len(grid) * FLAT, **shape)
        row = {"n_rungs": n_rungs, "reduction": reduction, "promote_by": promote_by,
               "kw": kw, "order": i, "first": plan.rungs[0],
               "replayable": replayable(bank_reads(grid, plan.rungs))}
        if row["replayable"]:
            row |= score_policy("ladder+guards", configs, draws, boot=1, **kw)
        rows.append(row)
    best = min((r for r in rows if r["replayable"]),
               key=lambda r: (round(r["top1_regret"], 6), r["catastrophes"], r["order"]))
    return best["kw"], rows


def tune_guards(configs, draws, **kw) -> guards.GuardThresholds:
    """The guard thresholds with the lowest ladder+guards regret on ``configs`` (the
    tuning half), ties to the defaults' side (fewer guards firing)."""
    grid = [replace(guards.DEFAULT, floor=floor, z=z, reward_rise=rise)
            for floor in (0.02, 0.03, 0.05) for z in (1.0, 2.0, 3.0)
            for rise in (0.05, 0.1)]
    scored = [(score_policy("ladder+guards", configs, draws, boot=1, thresholds=t, **kw)
               ["top1_regret"], -t.floor, -t.z, -t.reward_rise, i)
              for i, t in enumerate(grid)]
    return grid[min(scored)[-1]]


def tune_peers(configs, draws, exported, **kw) -> tuple[dict, list[dict]]:
    """Each peer's knobs (of its ``peers.PEERS`` grid, the defaults first) with the lowest
    regret on ``configs`` (the tuning half), at the budget of ladder+guards with ``kw``
    there; ties to fewer catastrophes, then to the earlier setting. Returns {peer: knobs}
    and every candidate's scores."""
    chosen, rows = {}, []
    for name, peer in peers.PEERS.items():
        scored = []
        for i, knobs in enumerate(peer.grid):
            row = score_policy(name, configs, draws, boot=1, exported=exported,
                               peer_knobs={name: knobs}, **kw)
            scored.append((round(row["top1_regret"], 6), row["catastrophes"], i))
            rows.append(row | {"knobs": knobs})
        chosen[name] = peer.grid[min(scored)[-1]]
    return chosen, rows


def print_bank(bank: dict, configs: dict) -> None:
    """The bank's header: its configs, commands, truth at F, and the best configs' order by
    window of the budget."""
    seeds = collections.Counter(len(c["curves"]) for c in configs.values())
    sizes = sorted({c["model"] for c in configs.values()})
    print(f"bank: {len(configs)} configs ("
          + ", ".join(f"{n} x {k} seeds" for k, n in sorted(seeds.items(), reverse=True))
          + f"; {', '.join(sizes)}), full budget F = {bank['budget_flops']:.3g} FLOPs, git "
          f"{bank['git_sha'][:10]}")
    if bank.get("left_out"):
        print(f"{bank['left_out']} cells at other prompts per step than the grid's "
              f"{GRID_PROMPTS} left out (a probe of the leaders, not a grid to choose in)")
    for run in bank.get("runs") or [bank]:
        # a run's cells are those its sweep folder described when it finished: with
        # sweep.extend=true, earlier commands' cells too, not only the ones it ran
        cells = (f" (its folder then described {len(run['cells'])} cells)"
                 if "cells" in run else "")
        print(f"command{cells}: {run['command']}")
    print("truth (val at F, mean of seeds, SE over seeds; warm start in brackets):")
    for c in sorted(configs.values(), key=lambda c: -c["truth"]):
        print(f"  {c['label']:<24} {c['truth']:.3f} +- {c['truth_se']:.3f}  "
              f"[start {c['start']:.3f}]  ({len(c['curves'])} seeds)")
    order = order_by_budget(configs)
    print(f"\nthe {len(order)} best at F: val by window of the budget, the mean of the "
          f"window's checkpoints and of the seeds (a pilot sees up to F/6), and at F:")
    print(f"  {'':<24}" + "".join(f"{fmt_window(lo, hi):>12}"
                                 for lo, hi in budget_windows(ORDER_BUDGETS)) + f"{'F':>8}")
    for row in order:
        print(f"  {row['label']:<24}" + "".join(f"{v:>12.4f}" for v in row["windows"])
              + f"{row['truth']:>8.4f}")


def whole_replayable(configs: dict) -> bool:
    """Whether RACE's default ladder can replay the whole bank as one sweep: its rungs,
    shrunk to the default pilot compute, each read at a checkpoint of their own at or
    above the bank's first (the v4 bank's 48 configs cannot: the first rung would fall
    below F/96)."""
    try:
        ladder(configs, {c: min(configs[c]["curves"]) for c in configs})
    except ValueError:
        return False
    return True


def half_replicates(half: dict, most: int | None, by_grid: bool) -> list[dict]:
    """A half's leave-one-seed-out replicates: with ``by_grid``, its default-shaped grids
    (``subgrids``, the first ``most``), else the half as one grid."""
    return loso_replicates(half, (subgrids(half) or [sorted(half)])[:most] if by_grid else None)


def tuned_and_held_out(configs: dict, exported, *, most: int | None, boot: int,
                       by_grid: bool = False) -> list[dict]:
    """Tune the ladder's geometry, the guard thresholds and the peers' knobs on the tuning
    half (printing each choice), then score every policy on the held-out half; returns
    the held-out rows with their SEs (``most``: grids per half, at most; ``by_grid``:
    each half replayed as sweeps of its default-shaped grids, ``subgrids``)."""
    tune, held = halves(configs)
    tune_draws = half_replicates(tune, most, by_grid)
    chosen, candidates = tune_ladder(tune, tune_draws)
    print(f"\nladder geometry and promotion score tuned on {len(tune)} configs ("
          + ", ".join(sorted({f"G{configs[c]['group_size']}" for c in tune}))
          + f"), ladder+guards at the flat grid's compute "
          f"({len(sweep_of(tune, tune_draws[0])) * FLAT:.3g}), first "
          f"rung as late as that allows:")
    print(f"{'rungs':>6}{'reduction':>10}{'first rung':>12}{'promote by':>12}{'regret':>8}"
          f"{'catastr.':>10}{'cost':>7}")
    for r in candidates:
        head = (f"{r['n_rungs']:>6}{r['reduction']:>10}{'F/%.0f' % (1 / r['first']):>12}"
                f"{r['promote_by']:>12}")
        if not r["replayable"]:
            print(head + "  not replayable: a rung below the bank's first checkpoint "
                  "(it would read the warm start) or two rungs on one checkpoint")
            continue
        print(head + f"{r['top1_regret']:>8.3f}{r['catastrophes']:>10.2f}"
              f"{r['pilot_cost_share']:>7.3f}" + ("  <- chosen" if r["kw"] is chosen else ""))
    thresholds = tune_guards(tune, tune_draws, **chosen)
    print(f"guard thresholds tuned on the same configs with that geometry: floor "
          f"{thresholds.floor}, z {thresholds.z}, reward_rise {thresholds.reward_rise}")
    tuned, candidates = tune_peers(tune, tune_draws, exported, thresholds=thresholds,
                                   **chosen)
    print("peers' knobs tuned on the same configs, at ladder+guards' pilot compute with eval "
          "there (regret on them; defaults first):")
    for name in peers.PEERS:
        tried = [r for r in candidates if r["policy"] == name]
        print(f"  {name:<18}" + "; ".join(
            f"{fmt_knobs(r['knobs'])} {r['top1_regret']:.4f}"
            + (" <- chosen" if r["knobs"] == tuned[name] else "") for r in tried))
    held_draws = half_replicates(held, most, by_grid)
    print(f"\nthe held-out {len(held)} configs, tuned geometry, thresholds and peer knobs "
          f"({len(held_draws)} replicates, leave-one-seed-out):")
    held_rows = with_cluster_se([score_policy(name, held, held_draws, boot=boot,
                                              exported=exported, peer_knobs=tuned,
                                              thresholds=thresholds, **chosen)
                                 for name in POLICIES], held_draws, boot)
    print(table(held_rows, configs))
    print(verdict_lines(held_rows, "held out"))
    return held_rows


def replay_header(configs: dict, draws: list[dict], grids, truth: str, boot: int) -> str:
    """What a world's replicates are and what their picks are judged by."""
    seeds = sorted({next(iter(d.values())) for d in draws})
    n_grids = len(draws) // len(seeds)
    shape = (f"{n_grids} of the bank's {len(grids)} default-shaped grids ({len(grids[0])} "
             f"configs each: two G values x two mu values x every size and reward)"
             if grids else f"1 grid, the whole bank ({len(configs)} configs)")
    judge = ("leave-one-seed-out: each config's truth is its val at F over the bank's "
             "other seeds" if truth == LOSO else "all-seeds truth, NOT leave-one-seed-out "
             "(flattering: the truth includes the seed the policy read)")
    return (f"\nreplay: {judge}; {len(draws)} replicates = {len(seeds)} read seeds x "
            f"{shape}, every config of the grid read from one seed; regret against the "
            f"best config of its own grid; SE: two-way cluster bootstrap over read seeds "
            f"and grids ({boot} draws)")


def replay_world(name: str, path: Path, args, *, tune: bool) -> dict | str:
    """One world's replay: its bank, every policy at the defaults on its replicates, the
    verdicts, the response surface's check and (``tune``) the tuned and held-out halves.
    Returns {"rows", "held"}, or why the bank cannot be replayed."""
    bank, configs = load_bank(path, SELECT_PROBLEMS)
    seeds = common_seeds(configs)
    if args.truth == LOSO and len(seeds) < 2:
        return (f"{len(seeds)} seed(s) every config ran: leave-one-seed-out needs 2 or more "
                f"(--truth all-seeds replays it, flattering)")
    shown = path.resolve().relative_to(Path.cwd()) if path.resolve().is_relative_to(
        Path.cwd()) else path
    print(f"\n=== {name}: {shown} ===")
    exported = blackbox.bank_blackbox(bank, val_problems=SELECT_PROBLEMS)
    print_bank(bank, configs)
    grids = None if whole_replayable(configs) else subgrids(configs)
    draws = loso_replicates(configs, grids[:args.grids] if grids else None)
    print(replay_header(configs, draws, grids, args.truth, args.boot))
    print(f"\nthe bank as a Syne Tune blackbox: {exported.blackbox}; resource unit F/"
          f"{exported.units}")
    budget = np.mean([matched_budget(configs, d)[0] for d in draws])
    print(f"\n{name}, all configs, RACE's defaults (rungs "
          f"{' -> '.join(f'{r:g}' for r in DEFAULTS.rungs)} F, shrunk until their charged "
          f"and eval compute fit selection.pilot_budget={DEFAULTS.pilot_budget:g}; reduction "
          f"{DEFAULTS.reduction}, default guard thresholds), the peers' documented defaults "
          f"at ladder+guards' pilot compute with eval ({budget:.3f} of F), one worker per "
          f"config; {args.truth}:")
    rows = with_cluster_se([score_policy(policy, configs, draws, boot=args.boot,
                                         exported=exported) for policy in POLICIES],
                           draws, args.boot)
    print(table(rows, configs))
    print(verdict_lines(rows, name))
    print("\n" + regime_section(configs, bank["budget_flops"],
                                next(r for r in rows if r["policy"] == "ladder+guards"),
                                most=1 if args.quick else None))
    held = (tuned_and_held_out(configs, exported, most=args.grids, boot=args.boot,
                               by_grid=grids is not None) if tune else None)
    chosen = grids[:args.grids] if grids else None
    return {"rows": rows, "held": held,
            "replicates": replicates_section(name, configs, chosen, args.boot),
            "verdicts": verdict_section(name, path, configs, draws, args.boot)}


def verdict_section(name: str, path: Path, configs: dict, draws: list[dict],
                    boot: int) -> dict:
    """The reliability verdict a sweep's report would give on each replicate (its own
    reads only, ``bench/reliability.py``; thresholds frozen before world 3), the share of
    replicates given each verdict, and ladder+guards' regret within each, beside random's
    (the mean over the grid's configs)."""
    correct = bank.correct_index(path, SELECT_PROBLEMS)
    rows = [reliability.replicate_diagnostics(configs, d, correct) for d in draws]
    ladder = cell_matrix([r["regret"] for r in rows], draws)
    chance = cell_matrix([r["random"] for r in rows], draws)
    se = cluster_bootstrap_se(np.stack([ladder, chance]), boot)
    print(f"\n{name}: the reliability verdict each replicate's sweep would report "
          f"(race.core.reliability, frozen), ladder+guards' regret "
          f"{ladder.mean():.4f} (se {se[0]:.4f}), random's {chance.mean():.4f} "
          f"(se {se[1]:.4f}):")
    shares = {}
    for v in VERDICTS:
        mine = [r["regret"] for r in rows if r["verdict"] == v]
        shares[v] = len(mine) / len(rows)
        print(f"  {v:<9} {len(mine):>3} of {len(rows)} ({shares[v]:.0%})"
              + (f"; ladder+guards' regret within it {np.mean(mine):.4f}" if mine else ""))
    return {"regret_ladder": float(ladder.mean()), "regret_random": float(chance.mean()),
            "shares": shares}


REPLICATES = 2  # selection.replicates compared with the default (1)


def replicates_section(name: str, configs: dict, grids, boot: int) -> dict | None:
    """``selection.replicates=2`` against the default (1) at equal pilot compute, leave
    seeds out: for each ordered pair of seeds (s, r) and each grid, the default ladder
    reads every config on seed s; the replicated one reads s too, and at the last rung
    also r (run afresh to it), pooling the two, on the rungs (bank checkpoints) at which
    it spends the most compute with eval without passing the default's
    (``replay_policies.matched_reads``: the rungs shrunk to pay for the replicate would
    read the bank's checkpoints below them, and spend less). Both picks are judged by
    the seeds neither read (the bank's third seed), so the difference is paired. SE: the
    two-way cluster bootstrap over (seed pairs x grids). None (printed why) with fewer
    than 3 seeds."""
    seeds = common_seeds(configs)
    if len(seeds) < 3:
        print(f"\n{name}: selection.replicates={REPLICATES} needs 3 seeds a config (two "
              f"read, one the truth); this bank has {len(seeds)}")
        return None
    regrets = {1: [], REPLICATES: []}
    spent = {1: [], REPLICATES: []}
    draws = []
    for s, r in itertools.permutations(seeds, 2):
        for grid in grids or [sorted(configs)]:
            draw = {c: s for c in grid}
            rest = [x for x in seeds if x not in (s, r)]
            view = {c: configs[c] | truth_over(configs[c], rest) for c in grid}
            best = max(view[c]["truth"] for c in grid)
            for k, extra in ((1, None), (REPLICATES, {c: [r] for c in grid})):
                ranking, charged, pilots = replay_policies.ladder(
                    view, draw, use_guards=True, replicates=extra,
                    match=spent[1][-1] if k > 1 else None)  # the default's compute
                regrets[k].append(best - view[ranking[0]]["truth"])
                spent[k].append(charged + replay_policies.pilot_eval_share(
                    view, draw, pilots, replicates=k))
            draws.append({c: (s, r) for c in grid})
    pairs = sorted({next(iter(d.values())) for d in draws})
    shape = (len(pairs), len(draws) // len(pairs))
    stack = np.array([np.reshape(regrets[1], shape), np.reshape(regrets[REPLICATES], shape),
                      np.reshape(regrets[REPLICATES], shape) - np.reshape(regrets[1], shape)])
    se = cluster_bootstrap_se(stack, boot)
    diff = float(np.mean(stack[2]))
    verdict = ("ties the default" if abs(diff) <= 1.645 * se[2] else
               "below the default" if diff < 0 else "above the default")
    print(f"\n{name}: selection.replicates={REPLICATES} against the default (1), leave "
          f"seeds out ({len(draws)} replicates = {len(pairs)} ordered seed pairs x "
          f"{shape[1]} grids; the truth: the seed neither read), equal pilot compute:")
    print(f"  replicates=1  regret {np.mean(stack[0]):.4f} (se {se[0]:.4f})  cost with eval "
          f"{np.mean(spent[1]):.3f}")
    print(f"  replicates={REPLICATES}  regret {np.mean(stack[1]):.4f} (se {se[1]:.4f})  "
          f"cost with eval {np.mean(spent[REPLICATES]):.3f}")
    print(f"  paired difference {diff:+.4f} (se {se[2]:.4f}): {verdict}; the default stays "
          f"selection.replicates=1 (frozen before world 2)")
    return {"diff": diff, "se": float(se[2]), "verdict": verdict}


def last_line(results: dict, truth: str) -> str:
    """The summary line: the first replayed world's ladder+guards and asha's paired
    difference, then world 2's (``_w2``) where it was replayed."""
    done = {k: v for k, v in results.items() if isinstance(v, dict)}
    suffix = {"world 1": "w1", "world 2": "w2"}
    parts = [f"worlds={len(done)} replay={truth}"]
    for i, (name, result) in enumerate(done.items()):
        by = {r["policy"]: r for r in result["rows"]}
        tag = suffix.get(name, name)
        if i == 0:
            parts.append(summary(result["rows"]))
        else:
            parts.append(f"ladder_regret_{tag}={by['ladder+guards']['top1_regret']:.4f}")
        parts.append(f"asha_diff_{tag}={by['asha']['diff']:+.4f} "
                     f"asha_diff_se_{tag}={by['asha']['diff_se']:.4f}")
        if result.get("replicates"):
            parts.append(f"replicates{REPLICATES}_diff_{tag}="
                         f"{result['replicates']['diff']:+.4f} replicates{REPLICATES}_diff_se_"
                         f"{tag}={result['replicates']['se']:.4f}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bank", type=Path, default=None,
                        help="replay this bank alone, as one world named 'given' (default: "
                             "each world's F bank, bench/science/worlds.py)")
    parser.add_argument("--truth", choices=(LOSO, ALL_SEEDS), default=LOSO,
                        help="what a pick is judged by: its config's val at F over the seeds "
                             "the policy did not read, or over all of them (flattering)")
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap draws")
    parser.add_argument("--grids", type=int, default=None,
                        help="most default-shaped grids per world (fewer: a quick look)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes each policy's replicates are spread over (the "
                             "numbers do not depend on it)")
    add_quick(parser, "2 grids a world, 50 bootstrap draws, the response surface's check "
                      "on one (size, reward) group")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.exit(2, f"--jobs={args.jobs}: give 1 or more processes\n")
    replay_policies.JOBS, replay_policies.TRUTH = args.jobs, args.truth
    if args.quick:
        args.grids, args.boot = 2, 50
    missing = [m for m in ("syne_tune", "optuna") if importlib.util.find_spec(m) is None]
    if missing:
        parser.exit(2, f"the peers need {', '.join(missing)}: pip install 'race-rl[bench]'\n")
    worlds = ({"given": (args.bank, None)} if args.bank else
              {w.name: (w.f_bank, n) for n, w in WORLDS.items()})
    results: dict = {}
    for name, (path, number) in worlds.items():
        if not path.exists():
            results[name] = "no bank yet" + (
                f" (python -m bench.testbed_bank --world {number} run)" if number else "")
        else:
            results[name] = replay_world(name, path, args, tune=not results)
        if isinstance(results[name], str):
            print(f"\n{name}: {results[name]}")
    if not any(isinstance(v, dict) for v in results.values()):
        parser.exit(1, "no world could be replayed\n")
    verdicts = {k: default_verdict(v["rows"]) if isinstance(v, dict) else v.split(" (")[0]
                for k, v in results.items()}
    first, *rest = verdicts
    print(f"\ndefault selection.policy=ladder: {verdicts[first]}"
          + "".join(f"; on {k}: {verdicts[k]}" for k in rest))
    held = next((v["held"] for v in results.values() if isinstance(v, dict) and v["held"]),
                None)
    if held:
        print("\nheld-out: " + summary(held))
    print(last_line(results, args.truth))
    print(verdict_line(results))


def verdict_line(results: dict) -> str:
    """The last line: per world replayed, ladder+guards' and random's regret and the share
    of replicates whose report says the pilots cannot rank (``n/a``: no bank yet)."""
    suffix = {"world 1": "w1", "world 2": "w2", "world 3": "w3"}
    done = {k: v for k, v in results.items() if isinstance(v, dict)}
    parts = [f"worlds={len(done)}"]
    for name, result in results.items():
        tag = suffix.get(name, name)
        v = result.get("verdicts") if isinstance(result, dict) else None
        parts += ([f"regret_ladder_{tag}={v['regret_ladder']:.4f}",
                   f"regret_random_{tag}={v['regret_random']:.4f}",
                   f"cannot_rank_share_{tag}={v['shares']['cannot']:.3f}"] if v else
                  [f"regret_ladder_{tag}=n/a", f"regret_random_{tag}=n/a",
                   f"cannot_rank_share_{tag}=n/a"])
    return " ".join(parts)


if __name__ == "__main__":
    main()
