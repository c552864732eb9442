"""The selection policies ``bench/selection_replay.py`` replays, and how a policy is scored
over the replicates. RACE's ladder is the engine ``race sweep`` climbs
(:func:`race.core.climb.climb` over a :class:`race.core.bank_source.BankSource`); the peers
run on the bank's Syne Tune blackbox (``bench/science/peers.py``)."""

from __future__ import annotations

import itertools
import math
import multiprocessing
import zlib
from dataclasses import replace

import numpy as np

from bench.science import blackbox, peers
from bench.science.replay_bank import FLAT, LOSO, bank_full, eval_flops_per_problem, judged
from bench.science.replay_stats import (
    _within_size,
    bootstrap_within_size,
    kendall,
    resample_counts,
    spearman,
    within_size_counts,
)
from race.config import PilotConfig, SelectionConfig
from race.core import guards
from race.core.bank_source import BankSource, replayable
from race.core.bank_source import bank_reads as read_checkpoints
from race.core.climb import climb, fit_to_eval, ladder_eval_cost, pick_order, rung_eval_costs
from race.core.rungs import ladder_cost, plan_ladder

BOOT_RANKINGS = 16  # replicates' rankings the bootstrap of Kendall/Spearman resamples
DEFAULTS = SelectionConfig()  # the ladder `race sweep` runs
# RACE's pilot evaluation plan (race.config's defaults): at each checkpoint, val on
# pilot.select_examples problems and test, ood on pilot.eval_examples each; a ladder's
# pilot scores its rung's end (selection.rung_checkpoints), a flat pilot each of
# pilot.checkpoints; a pilot that starts from the warm start (not a ladder rung
# continuing one below) scores it the same way first
SELECT_PROBLEMS = PilotConfig().select_examples
EVAL_PROBLEMS_PER_CHECKPOINT = SELECT_PROBLEMS + 2 * PilotConfig().eval_examples
# every policy, RACE's and the peers', reads val on the first SELECT_PROBLEMS problems of
# the bank's (a pilot's problems are a prefix of one seeded draw) and pays for that many;
# the truth at F reads them all
LADDER_EVALS = len(DEFAULTS.rung_checkpoints)
FLAT_EVALS = len(PilotConfig().checkpoints)

# ------------------------------------------------------------------ policies
# Each takes the configs and a replicate (config id -> the seed whose curve it reads),
# and returns (ranking best first, charged share, pilots run to each budget
# {fraction: pilots}).


def flat(configs, draw, *, sigmoid=False, **_):
    scores = {cid: config["curves"][draw[cid]].flat_score(sigmoid)
              for cid, config in configs.items()}
    ranking = sorted(configs, key=lambda c: (-scores[c], c))
    return ranking, len(configs) * FLAT, {FLAT: len(configs)}


def ladder(configs, draw, *, use_guards=False, thresholds=guards.DEFAULT, z=DEFAULTS.z,
           rungs=tuple(DEFAULTS.rungs), reduction=DEFAULTS.reduction, share=None,
           fill=False, keep_sizes=DEFAULTS.keep_sizes, promote_by=DEFAULTS.promote_by,
           replicates=None, match=None, with_rungs=False, **_):
    """RACE's ladder (``with_rungs``: the climb's rungs and where each was read instead
    of the ranking); ``replicates`` (config -> the other seeds it is read on at the last
    rung, ``selection.replicates``) pools them there, paid for within the same compute.
    ``match`` (a cost with eval, share of F): the rungs instead are the bank checkpoints
    whose ladder costs the most without passing it (``matched_reads``)."""
    k = 1 + len(next(iter(replicates.values()))) if replicates else 1
    share = len(configs) * FLAT if share is None else share
    plan = ladder_plan(configs, rungs=rungs, reduction=reduction, share=share, fill=fill,
                       replicates=k)
    # as race plan does: the rungs shrink until charged and eval fit selection.pilot_budget
    plan = fit_to_eval(plan, pilot_eval_share(configs, draw, dict(zip(plan.rungs, plan.counts)),
                                              replicates=k),
                       DEFAULTS.pilot_budget,
                       lambda room: ladder_plan(configs, rungs=rungs, reduction=reduction,
                                                share=room, fill=fill, replicates=k))
    read = bank_reads(configs, plan.rungs)
    if match is not None:
        read = matched_reads(configs, draw, plan, match)
        plan = replace(plan, rungs=tuple(read))
    if not replayable(read):
        raise ValueError(f"rungs {plan.rungs} read the bank at {read}: a rung below the "
                         "bank's first checkpoint, or two rungs on one checkpoint")
    # the engine race sweep climbs (race.core.climb), over the bank's curves
    source = BankSource({cid: configs[cid]["curves"][draw[cid]] for cid in configs},
                        {cid: configs[cid]["model"] for cid in configs}, read, z=z,
                        promote_by=promote_by,
                        guard=(lambda curve, fraction, reads: curve.guard(fraction, thresholds,
                                                                          reads))
                        if use_guards else None,
                        replicates={cid: [configs[cid]["curves"][s] for s in seeds]
                                    for cid, seeds in replicates.items()} if replicates else None)
    rungs = climb(source, plan, list(configs), keep_sizes=keep_sizes)
    if with_rungs:  # the climb itself (bench/reliability.py reads its rungs)
        return rungs, read
    return pick_order(rungs), source.charged, source.pilots


def matched_reads(configs, draw, plan, target: float) -> list[float]:
    """The rungs, read on the bank's checkpoints, at which ``plan``'s ladder (its counts
    and replicates) costs, with its eval, the most without passing ``target``: a shrunk
    ladder's rungs fall between the bank's checkpoints and read the ones below, which
    would spend less than the ladder it is compared with."""
    checkpoints = next(iter(next(iter(configs.values()))["curves"].values())).fraction
    points = [float(c) for c in checkpoints if c > 0]
    eval_share = pilot_eval_share(configs, draw, dict(zip(range(len(plan.counts)),
                                                          plan.counts)),
                                  replicates=plan.replicates)
    best, best_cost = None, -1.0
    for reads in itertools.combinations(points, len(plan.counts)):
        cost = ladder_cost(reads, plan.counts, 1, plan.replicates) + eval_share
        if best_cost < cost <= target + 1e-9:
            best, best_cost = list(reads), cost
    if best is None:
        raise ValueError(f"no rungs on the bank's checkpoints cost at most {target:.3f}")
    return best


def bank_reads(configs, rungs) -> list[float]:
    """Where the bank is read for each rung: its last checkpoint at or below the rung
    (``race.core.bank_source.bank_reads``; ``replayable`` says whether a ladder can be)."""
    checkpoints = next(iter(next(iter(configs.values()))["curves"].values())).fraction
    return read_checkpoints(checkpoints, rungs)


def ladder_plan(configs, *, rungs, reduction, share, fill, replicates=1):
    """The ladder ``race.core.rungs.plan_ladder`` plans for ``configs`` (one cell each)."""
    return plan_ladder(len(configs), n_sizes=len({c["model"] for c in configs.values()}),
                       rungs=rungs, reduction=reduction, share=share, fill=fill,
                       replicates=replicates)


def replicate_seed(draw: dict) -> int:
    """A seed of the replicate (CRC32 of its draw), for what a policy draws at random: fed
    to a generator, since CRC32 keys of similar strings are far from uniform."""
    return zlib.crc32(",".join(f"{c}:{draw[c]}" for c in sorted(draw)).encode())


def random_policy(configs, draw, **_):
    # one uniformly random order per replicate
    order = np.random.default_rng(replicate_seed(draw)).permutation(sorted(configs))
    return [str(c) for c in order], 0.0, {}


def oracle(configs, draw, **_):
    return sorted(configs, key=lambda c: (-configs[c]["truth"], c)), 0.0, {}


LADDER_KEYS = ("thresholds", "z", "rungs", "reduction", "share", "fill", "keep_sizes",
               "promote_by")
_MATCHED: dict = {}  # (replicate, ladder knobs) -> (budget, first rung)


def matched_budget(configs, draw, **kw) -> tuple[float, float]:
    """What the peers are given on a replicate: ladder+guards' pilot compute there with its
    eval (share of F, as scored below), and its first rung as read on the bank."""
    knobs = {k: v for k, v in kw.items() if k in LADDER_KEYS}
    key = (tuple(sorted(draw.items())),
           tuple(sorted((k, repr(tuple(v) if isinstance(v, list) else v))
                        for k, v in knobs.items())))
    if key not in _MATCHED:
        grid = sweep_of(configs, draw)
        _, charged, pilots = ladder(grid, draw, use_guards=True, **knobs)
        _MATCHED[key] = charged + pilot_eval_share(grid, draw, pilots), min(pilots)
    return _MATCHED[key]


_CURVES: dict = {}  # replicate -> its curves as the peers read them


def replicate_curves(exported, configs, draw) -> peers.Curves:
    """The replicate's curves, cut from the bank's blackbox (``blackbox.one_seed``)."""
    key = (id(exported), tuple(sorted(draw.items())))
    if key not in _CURVES:
        _CURVES[key] = peers.curves(blackbox.one_seed(exported, draw),
                                    eval_flops_per_problem(configs, draw))
    return _CURVES[key]


def peer_policy(name: str):
    """Peer ``name`` (``bench/science/peers.py``) on the replicate's one-seed blackbox, at
    ``matched_budget``, with ``peer_knobs[name]`` (default: its documented defaults)."""
    def policy(configs, draw, *, exported=None, peer_knobs=None, **kw):
        if exported is None:
            raise ValueError(f"policy {name!r} replays the bank's Syne Tune blackbox: pass "
                             "exported=blackbox.bank_blackbox(bank) to score_policy")
        budget, first = matched_budget(configs, draw, **kw)
        run = peers.replay(name, replicate_curves(exported, configs, draw), budget=budget,
                           seed=replicate_seed(draw), first_rung=first,
                           knobs=(peer_knobs or {}).get(name))
        return run.ranking, run.charged, {}, run.eval
    return policy


PEER_POLICIES = {name: peer_policy(name) for name in peers.PEERS}
OWN_POLICIES = {
    "random": random_policy,
    "oracle": oracle,
    "flat": flat,
    "flat+sigmoid": lambda configs, draw, **kw: flat(configs, draw, sigmoid=True, **kw),
    "ladder": ladder,
    "ladder+guards": lambda configs, draw, **kw: ladder(configs, draw, use_guards=True, **kw),
    "ladder+guards@1": lambda configs, draw, **kw: ladder(configs, draw, use_guards=True,
                                                         share=1.0, **kw),
}
POLICIES = PEER_POLICIES | OWN_POLICIES


def sweep_of(configs: dict, draw: dict) -> dict:
    """The configs replicate ``draw`` sweeps: all of ``configs``, or the subgrid it holds."""
    return configs if len(draw) == len(configs) else {c: configs[c] for c in draw}


def bootstrap_by_grid(views: list[dict], rankings: list[list[str]], boot: int) -> dict:
    """``bootstrap_within_size`` over a sample of the replicates' rankings
    (``BOOT_RANKINGS`` per grid and truth); ``views[i]``: the configs ranking ``i`` ranks,
    with the truth it is judged by (``judged``). With several grids or truths (subgrids,
    leave-one-seed-out), each one's configs resampled on their own and a resample's value
    the mean over them."""
    groups: dict[tuple, tuple[dict, list[list[str]]]] = {}
    for view, ranking in zip(views, rankings):
        key = tuple(sorted((c, v["truth"]) for c, v in view.items()))
        groups.setdefault(key, (view, []))[1].append(ranking)
    if len(groups) == 1:
        (view, some), = groups.values()
        return bootstrap_within_size(view, some[::max(1, len(some) // BOOT_RANKINGS)], boot)
    values = [within_size_counts(
        {c: view[c] for c in sorted(view)}, some[::max(1, len(some) // BOOT_RANKINGS)],
        resample_counts(len(view), boot, seed)) for seed, (_, (view, some)) in enumerate(
            sorted(groups.items()))]
    out = {}
    for key in ("kendall", "spearman"):
        stacked = np.array([v[key] for v in values])
        seen = np.sum(~np.isnan(stacked), axis=0)
        mean = np.divide(np.nansum(stacked, axis=0), seen, out=np.full(boot, np.nan),
                         where=seen > 0)
        out[key] = [float(v) for v in mean if not np.isnan(v)]
    return out


def pilot_eval_share(configs, draw, pilots, evaluations: int = LADDER_EVALS, *,
                     ladder: bool = True, replicates: int = 1) -> float:
    """The eval compute (share of F) of RACE's pilot eval plan for ``pilots`` ({budget:
    pilots run to it}), ``evaluations`` checkpoints per pilot. Flat: every pilot scores
    its warm start and each checkpoint on ``EVAL_PROBLEMS_PER_CHECKPOINT``. A ladder (as
    ``race plan`` plans it, ``race.run.grid.ladder_eval_plan``): each (size, reward)
    group's warm start once on all of them, the rungs below the last on ``val`` alone,
    the last rung's end on all of them."""
    if not pilots:
        return 0.0
    if ladder:  # in problems: race.core.climb's estimate, as race plan's
        groups = len({(c["model"], c["reward"]) for c in configs.values()})
        costs = rung_eval_costs(len(pilots), evaluations, select_cost=SELECT_PROBLEMS,
                                report_cost=EVAL_PROBLEMS_PER_CHECKPOINT)
        problems = ladder_eval_cost(list(pilots.values()), costs,
                                    start_cost=EVAL_PROBLEMS_PER_CHECKPOINT * groups,
                                    replicates=replicates)
    else:
        problems = EVAL_PROBLEMS_PER_CHECKPOINT * (
            sum(pilots.values()) * evaluations + pilots[min(pilots)])
    return problems * eval_flops_per_problem(configs, draw) / bank_full(configs)


JOBS = 1  # processes a policy's replicates are spread over (selection_replay.py --jobs)
TRUTH = LOSO  # the truth picks are scored against (selection_replay.py --truth; judged)
_TASK: tuple = ()  # the replay the forked workers read: (name, views, draws, kw)


def _run_one(i: int) -> tuple:
    name, views, draws, kw = _TASK
    return POLICIES[name](views[i], draws[i], **kw)


def run_policy(name, views, draws, **kw) -> list[tuple]:
    """``name`` run on each replicate (``views[i]``: the configs replicate ``draws[i]``
    sweeps, ``judged``): (ranking, charged, pilots, *eval spent) per draw, over ``JOBS``
    forked processes (a replicate's result depends on its draw alone: every policy seeds
    what it draws from it, ``replicate_seed``)."""
    global _TASK
    if JOBS < 2 or len(draws) < 4 * JOBS:
        return [POLICIES[name](v, d, **kw) for v, d in zip(views, draws)]
    _TASK = (name, views, draws, kw)
    try:
        with multiprocessing.get_context("fork").Pool(JOBS) as pool:
            return pool.map(_run_one, range(len(draws)),
                            chunksize=max(1, len(draws) // (8 * JOBS)))
    finally:
        _TASK = ()


def score_policy(name, configs, draws, *, boot=2000, truth=None, **kw) -> dict:
    """``name`` over the replicates ``draws``: each is a sweep of the configs it holds (all
    of ``configs``, or one of ``replay_bank.subgrids``), its pick scored against the best
    of those configs by the truth ``truth`` (``TRUTH`` by default: leave-one-seed-out,
    each config's val at F over the seeds the replicate did not read; ``judged``).
    Regrets are per replicate (``regrets``); their SE over seeds and grids is
    ``replay_stats.cluster_bootstrap_se``'s, taken over all policies at once."""
    views = [judged(configs, d, truth or TRUTH) for d in draws]
    regrets, kendalls, spearmans, catastrophes = [], [], [], []
    test_regrets = []
    charged_shares, eval_shares, rankings = [], [], []
    for grid, draw, (ranking, charged, pilots, *spent) in zip(
            views, draws, run_policy(name, views, draws, **kw)):
        best = max(grid, key=lambda c: grid[c]["truth"])
        rankings.append(ranking)
        pick = grid[ranking[0]]
        if name == "random":  # a uniformly random pick, in expectation over the configs
            pick = {k: np.mean([c[k] for c in grid.values()]) for k in ("truth", "truth_test")}
            catastrophes.append(np.mean([c["truth"] < c["start"] for c in grid.values()]))
        else:
            catastrophes.append(float(pick["truth"] < pick["start"]))
        regrets.append(grid[best]["truth"] - pick["truth"])
        test_regrets.append(max(c["truth_test"] for c in grid.values()) - pick["truth_test"])
        kendalls.append(_within_size(grid, ranking, kendall))
        spearmans.append(_within_size(grid, ranking, spearman))
        charged_shares.append(charged)
        # a peer returns the eval it spent; RACE's policies are costed by the pilot plan
        flat_plan = name.startswith("flat")
        eval_shares.append(charged + (spent[0] if spent else pilot_eval_share(
            grid, draw, pilots, FLAT_EVALS if flat_plan else LADDER_EVALS,
            ladder=not flat_plan)))
    boots = bootstrap_by_grid(views, rankings, boot)
    mean = lambda xs: float(np.mean([x for x in xs if x is not None])) if any(  # noqa: E731
        x is not None for x in xs) else float("nan")
    interval = {k: (np.percentile(v, [5, 95]) if v else (math.nan, math.nan))
                for k, v in boots.items()}
    return {"policy": name, "top1_regret": float(np.mean(regrets)), "regrets": regrets,
            "test_regret": float(np.mean(test_regrets)), "kendall": mean(kendalls),
            "kendall_ci": tuple(map(float, interval["kendall"])), "spearman": mean(spearmans),
            "spearman_ci": tuple(map(float, interval["spearman"])),
            "catastrophes": float(np.mean(catastrophes)),
            "pilot_cost_share": float(np.mean(charged_shares)),
            "with_eval": float(np.mean(eval_shares)),
            "picks": [r[0] for r in rankings], "rankings": rankings}
