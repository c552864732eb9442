"""Replay pilot selection policies on the curve bank and score their picks.

The bank (the testbed's v4 bank, ``bench/data/curve_bank_v4.json.gz``, by default: the F
grid of ``bench/testbed_bank.py``; see ``bench/curve_bank.py``) holds every config of a
testbed grid run to the full budget F with dense checkpoints, several seeds each. A policy
sees only what its pilots would have seen (the curves truncated at its pilot budgets) and
picks one config. Each replicate is a one-seed sweep: every config's curve is read from
one of its seeds, drawn independently per config (the configs' runs are independent),
every combination when there are at most 4,096, else 4,096 drawn at random. A bank too
wide for RACE's default ladder to replay as one sweep (``whole_replayable``: the v4 bank's
48 configs would put the first rung below its first checkpoint at the default pilot
compute of one full run) is replayed as sweeps of its default-shaped grids instead
(``replay_bank.subgrids``: every pair of G values x every pair of mu values x all sizes
and rewards, 18 grids of 16 configs in the v4 bank, the shape ``race sweep``'s default
grid has), taken in turn, 4,096 in all; a pick's regret is then against the best config of
its own grid. A pick is scored against the truth: each config's ``val`` accuracy at F,
averaged over the seeds, on every problem the bank scored (500 per seed in the testbed's
bank). Every policy, RACE's and the peers', reads ``val`` as a default pilot scores it: on
the first ``pilot.select_examples`` (200) of those problems at each checkpoint it reads (a
pilot's problems are a prefix of one seeded draw, so these are the very problems it would
score; ``SELECT_PROBLEMS``), and pays for that many. Before the policies it prints the
four best configs' ``val`` by window of the budget (seed means on every problem, F itself
apart): whether their order at F can be seen at all at the budgets pilots read.

The peers (``bench/peers.py``) replay the same replicates through the bank exported as a
Syne Tune tabular blackbox (``bench/blackbox.py``: the grid's axes as its configuration
space, the checkpoints in units of F/D as its fidelity, FLOPs and ``val`` per checkpoint
as its objectives, the bank's seeds as its seed axis), cut per replicate to a one-seed
blackbox that holds each config's drawn seed (Syne Tune's simulator draws one seed per
trial, or one for all: never one per config):

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

Printed per policy: top-1 regret (truth of the best minus truth of the pick, averaged
over replicates) with its standard error (the two configs' seed standard errors of the
truth, combined), the same regret on ``test`` at F (problems selection never read),
Kendall and Spearman between the policy's ranking and the truth's
*within each policy size* (averaged over sizes and replicates, with a 90% bootstrap
interval over configs), the rate of catastrophic picks (the pick ends at F below its
warm start), the pilot compute as a share of one full run, charged FLOPs only and
with the evaluation a real pilot of that policy runs (``+eval``: RACE's pilot eval plan,
``pilot_eval_share``, costed at the bank's measured eval FLOPs per problem; a ladder
scores each (size, reward) warm start once and its rungs below the last on ``val``
alone, as ``race plan`` plans it; a peer's own ``val`` reads), and
how often each config was picked.

Then the response surface's leave-one-config-out check per (size, reward)
(``race.analysis.regime_check``: how often the recommended regime, or the fallback's best
pilot cell, holds the group's best config at F; pilot scores are each seed's ``val`` at
F/16, rho as ``race plan`` solves it), beside ladder+guards' pick rate in the group (the
share of replicates whose ranking puts the group's best config first among the group's).

Tuned on half of the configs, reported on the other half (beside the all-config table
with RACE's defaults and the peers' documented defaults): first the ladder's geometry
(``GEOMETRIES``: 2 to 4 rungs, each 2 to 4 times the one before, every config halved,
thirded or quartered at each; the first rung as late as the flat grid's compute allows;
a geometry with a rung the bank cannot read, below its first checkpoint, is listed and
skipped) with the promotion score (``PROMOTE_BY``: ``trend``, the score predicted at the
next rung, or ``last``, the rung end's own; ``selection.promote_by``),
then the guard thresholds with that geometry, then each peer's knobs at that ladder's
budget on the tuning half. The halves: by group size when the bank has an even number of
G values (tuned on the larger half: v3's G8, whose configs ran first; v4's G 8, 16), else
the configs in the order of a hash of their ids, alternating; with subgrids, each half is
replayed as its own default-shaped grids (v4: 3 per half, its two G values x each pair of
mu values).

Below each table: the guarded ladder's regret minus the best peer's, replicate by
replicate, with its Monte Carlo standard error over the replicates (``paired_difference``:
how far the sampled replicates alone could move the comparison; the truth's SE, shared by
both, is the table's ``se``). After both tables, the default's test (``default_verdict``):
every rule at no more cost with eval, its regret minus ladder+guards' paired on all configs
and held out; one that is lower by more than 2 Monte Carlo SE on both should be RACE's
default, and the verdict line says whether one is.

Usage: ``python bench/selection_replay.py [--bank PATH] [--boot 2000] [--replicates
4096] [--jobs N]`` (needs the ``bench`` extra, ``pip install 'race-rl[bench]'``;
``--replicates 32`` for a quick look; ``--jobs 2``: each policy's replicates over two
processes, the same numbers sooner). Last lines: the held-out half's ``held-out:
policy=ladder+guards ...``, then all configs at the defaults, ``policy=ladder+guards
top1_regret=R se=S within_size_kendall=K catastrophes=C pilot_cost_share=P
cost_with_eval=E best_peer=NAME best_peer_regret=R2``. ``best_peer`` is the peer
(``asha``, ``hyperband``, ``pasha``, ``optuna-sh``, ``optuna-hyperband``, ``top-k``)
with the lowest regret among those whose cost with eval is at most the ladder's.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench import blackbox, peers, replay_policies
from bench.common import add_quick
from bench.replay_bank import (
    FLAT,
    GRID_PROMPTS,
    ORDER_BUDGETS,
    REPLICATES,
    Curve,  # noqa: F401  (tests read the bank's names from this script)
    budget_windows,
    fmt_window,
    halves,
    load_bank,
    order_by_budget,
    replicates,
    subgrids,
)
from bench.replay_policies import (  # noqa: F401  (tests read the policies from here)
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
from bench.replay_stats import (  # noqa: F401  (tests read them from here)
    _within_size,
    kendall,
    spearman,
    within_size_counts,
)
from bench.replay_tables import (
    default_verdict,
    fmt_knobs,
    paired_difference,
    regime_section,
    summary,
    table,
)
from race.core import guards
from race.core.rungs import geometric_rungs

# ladder geometries tuned on the tuning half: (rungs, reduction), each rung `reduction`
# times the one before, the first as late as the flat grid's compute allows; each with
# both promotion scores, the earlier rule (trend) first
# the v4 bank's F grid with its 3 seeds (a replay of a partial bank would judge rules on
# fewer seeds than the truth needs)
REPLAY_BANK = Path(__file__).parent / "data" / "curve_bank_v4.json.gz"
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


def tuned_and_held_out(configs: dict, exported, *, most: int, boot: int,
                       by_grid: bool = False) -> list[dict]:
    """Tune the ladder's geometry, the guard thresholds and the peers' knobs on the tuning
    half (printing each choice), then score every policy on the held-out half; returns
    the held-out rows (``most``: replicates per table, at most; ``by_grid``: each half
    replayed as sweeps of its default-shaped grids, ``subgrids``)."""
    tune, held = halves(configs)
    tune_draws = replicates(tune, most=most, grids=subgrids(tune) if by_grid else None)
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
    held_draws = replicates(held, most=most, grids=subgrids(held) if by_grid else None)
    print(f"\nthe held-out {len(held)} configs, tuned geometry, thresholds and peer knobs "
          f"({len(held_draws)} replicates):")
    held_rows = [score_policy(name, held, held_draws, boot=boot, exported=exported,
                              peer_knobs=tuned, thresholds=thresholds, **chosen)
                 for name in POLICIES]
    print(table(held_rows, configs))
    print(paired_difference(held_rows))
    return held_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bank", type=Path, default=REPLAY_BANK)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--replicates", type=int, default=REPLICATES,
                        help="most replicates per table (fewer: a quick look)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes each policy's replicates are spread over (the "
                             "numbers do not depend on it)")
    add_quick(parser, "8 replicates, 50 bootstrap draws")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.exit(2, f"--jobs={args.jobs}: give 1 or more processes\n")
    replay_policies.JOBS = args.jobs
    if args.quick:
        args.replicates, args.boot = 8, 50
    missing = [m for m in ("syne_tune", "optuna") if importlib.util.find_spec(m) is None]
    if missing:
        parser.exit(2, f"the peers need {', '.join(missing)}: pip install 'race-rl[bench]'\n")
    bank, configs = load_bank(args.bank, SELECT_PROBLEMS)
    exported = blackbox.bank_blackbox(bank, val_problems=SELECT_PROBLEMS)
    print_bank(bank, configs)
    grids = None if whole_replayable(configs) else subgrids(configs)
    draws = replicates(configs, most=args.replicates, grids=grids)
    if grids:
        print(f"\nreplicates: sweeps of the bank's {len(grids)} default-shaped grids "
              f"({len(grids[0])} configs each: two G values x two mu values x every size "
              f"and reward), in turn, each config's seed drawn; a pick's regret is against "
              f"the best config of its own grid")
    rungs = " -> ".join(f"{r:g}" for r in DEFAULTS.rungs)
    print(f"\nthe bank as a Syne Tune blackbox: {exported.blackbox}; resource unit F/"
          f"{exported.units}")
    budget = np.mean([matched_budget(configs, d)[0] for d in draws])
    print(f"\nall configs, RACE's defaults (rungs {rungs} F, shrunk until their charged and "
          f"eval compute fit selection.pilot_budget={DEFAULTS.pilot_budget:g}; reduction "
          f"{DEFAULTS.reduction}, "
          f"default guard thresholds), the peers' documented defaults at ladder+guards' "
          f"pilot compute with eval ({budget:.3f} of F), one worker per config; "
          f"{len(draws)} replicates: one-seed sweeps, each config's seed drawn independently")
    rows = [score_policy(name, configs, draws, boot=args.boot, exported=exported)
            for name in POLICIES]
    print(table(rows, configs))
    print(paired_difference(rows))
    print("\n" + regime_section(configs, bank["budget_flops"],
                                next(r for r in rows if r["policy"] == "ladder+guards")))

    held_rows = tuned_and_held_out(configs, exported, most=args.replicates, boot=args.boot,
                                   by_grid=grids is not None)
    print("\n" + default_verdict(rows, held_rows))
    print("\nheld-out: " + summary(held_rows))
    print(summary(rows))


if __name__ == "__main__":
    main()
