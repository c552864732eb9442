"""Replay pilot selection policies on the curve bank and score their picks.

The bank (the testbed's, ``bench/data/curve_bank_v3.json.gz``, by default; see
``bench/curve_bank.py``) holds every
config of the embedded default grid run at the full budget F with dense checkpoints,
several seeds each. A policy sees only what its pilots would have seen (the curves
truncated at its pilot budgets) and picks one config. Each replicate is a one-seed sweep:
every config's curve is read from one of its seeds, drawn independently per config (the
configs' runs are independent), every combination when there are at most 4,096, else
4,096 drawn at random. A pick is scored against the truth: each config's ``val`` accuracy at
F, averaged over the seeds, on every problem the bank scored (500 per seed in the
testbed's bank). Every policy, RACE's and the peers', reads ``val`` as a default pilot
scores it: on the first ``pilot.select_examples`` (200) of those problems at each
checkpoint it reads (a pilot's problems are a prefix of one seeded draw, so these are
the very problems it would score; ``SELECT_PROBLEMS``), and pays for that many. Before
the policies it prints the four best configs' ``val`` by window of the budget (seed
means on every problem, F itself apart): whether their order at F can be seen at all at
the budgets pilots read.

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
  scores its rung ends, ``selection.rung_checkpoints``); the
  pick is ``race.core.ladder.final_ranking``'s first, as in a sweep.
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
budget on the tuning half. The halves: by group size when the bank has two (tuned on the larger G,
whose configs ran first), else the configs in the order of a hash of their ids,
alternating.

Below each table: the guarded ladder's regret minus the best peer's, replicate by
replicate, with its Monte Carlo standard error over the replicates (``paired_difference``:
how far the sampled replicates alone could move the comparison; the truth's SE, shared by
both, is the table's ``se``).

Usage: ``python bench/selection_replay.py [--bank PATH] [--boot 2000] [--replicates
4096]`` (needs the ``bench`` extra, ``pip install 'race[bench]'``; ``--replicates 32``
for a quick look). Last lines: the held-out half's ``held-out: policy=ladder+guards
...``, then all configs at the defaults, ``policy=ladder+guards top1_regret=R se=S
within_size_kendall=K catastrophes=C pilot_cost_share=P cost_with_eval=E best_peer=NAME
best_peer_regret=R2``. ``best_peer`` is the peer (``asha``, ``hyperband``, ``pasha``,
``optuna-sh``, ``optuna-hyperband``, ``top-k``) with the lowest regret among those whose
cost with eval is at most the ladder's.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib.util
import itertools
import json
import math
import zlib
from dataclasses import replace
from pathlib import Path

import blackbox
import numpy as np
import peers
from scipy import stats
from testbed import DEFAULT_BANK

from race.analysis.curves import fit_curve
from race.analysis.regime_check import regime_check
from race.analysis.response import planned_update_fraction
from race.config import PilotConfig, SelectionConfig
from race.core import guards
from race.core.ladder import (
    final_ranking,
    fmt_fraction,
    geometric_rungs,
    next_rung_bound,
    plan_ladder,
    promote,
    rank_last_rung,
)
from race.run.grid import plan_grid

# one-seed sweeps per table: at 512, the Monte Carlo SE of the ladder's regret minus the
# best peer's (paired on the replicates) was 0.0016 on the testbed's bank, larger than
# the difference itself; at 4,096 it is a third of that (paired_difference)
REPLICATES = 4096
TARGET = "val"
FLAT = 1 / 16
SIGMOID_MAX_WIDTH = 0.3
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
# ladder geometries tuned on the tuning half: (rungs, reduction), each rung `reduction`
# times the one before, the first as late as the flat grid's compute allows; each with
# both promotion scores, the earlier rule (trend) first
GEOMETRIES = [(n, r) for r in (4, 3, 2) for n in (3, 2, 4)]
PROMOTE_BY = ("trend", "last")
# windows of the budget in which the best configs' order is shown (up to F/6: a pilot's)
ORDER_BUDGETS = (1 / 32, 1 / 16, 1 / 6, 1 / 3, 1 / 2, 1.0)


class Curve:
    """One cell of the bank on the selection target, readable up to a budget.

    ``accuracy``/``n``: on every problem the bank scored (the truth at F, the warm start a
    pick is held against); ``read``/``read_n``: on the first ``read_problems`` of them
    (``blackbox.first_problems``), what a pilot scoring that many reads.
    """

    def __init__(self, cell: dict, full: float, read_problems: int | None = None):
        rows = sorted((r for r in cell["evals"] if r["target"] == TARGET),
                      key=lambda r: (r["flops"], r["checkpoint"]))
        self.full = full
        self.fraction = np.array([r["checkpoint"] for r in rows])
        self.flops = np.array([r["flops"] for r in rows])
        self.accuracy = np.array([r["accuracy"] for r in rows])
        self.n = np.array([r["n"] for r in rows])
        seen = [blackbox.first_problems(r, read_problems) for r in rows]
        self.read = np.array([a for a, _ in seen])
        self.read_n = np.array([n for _, n in seen])
        self.reward = np.array([r["mean_reward"] for r in rows])
        self.eval_flops = np.array([r["eval_flops"] for r in rows])
        self.steps = cell["steps"]
        self._guards: dict = {}
        self._scores: dict = {}
        all_rows = [r for r in cell["evals"]]
        problems = sum(r["n"] for r in all_rows)
        self.eval_flops_per_problem = (max(r["eval_flops"] for r in all_rows) / problems
                                       if problems else 0.0)

    def upto(self, fraction: float) -> np.ndarray:
        """Checkpoints at or below ``fraction`` of F (a pilot of that budget saw them)."""
        return self.fraction <= fraction + 1e-9

    def at(self, fraction: float) -> float:
        return float(self.read[self.upto(fraction)][-1])

    def at_rungs(self, reads: tuple[float, ...]) -> np.ndarray:
        """The warm start and the checkpoints at the rung ends ``reads``: what a ladder's
        pilots score at the default ``selection.rung_checkpoints=[1.0]``."""
        return np.isin(self.fraction, (0.0, *reads))

    def guard(self, fraction: float, t: guards.GuardThresholds,
              reads: tuple[float, ...] | None = None) -> str | None:
        if (fraction, t, reads) not in self._guards:
            self._guards[fraction, t, reads] = self._guard(fraction, t, reads)
        return self._guards[fraction, t, reads]

    def flat_score(self, sigmoid: bool) -> float:
        """A flat 1/16 pilot's score: its last value, or (``sigmoid``) the fitted
        sigmoid at F when its interval is at most ``SIGMOID_MAX_WIDTH`` wide."""
        if sigmoid not in self._scores:
            score = self.at(FLAT)
            if sigmoid:
                keep = self.upto(FLAT)
                fit = fit_curve(self.flops[keep], self.read[keep], predict_at=self.full)
                if fit.method == "sigmoid" and fit.hi - fit.lo <= SIGMOID_MAX_WIDTH:
                    score = fit.prediction
            self._scores[sigmoid] = score
        return self._scores[sigmoid]

    def _guard(self, fraction: float, t: guards.GuardThresholds,
               reads: tuple[float, ...] | None) -> str | None:
        keep = self.upto(fraction) if reads is None else self.at_rungs(reads)
        steps = [s for s in self.steps if s["flops"] <= fraction * self.full * (1 + 1e-9)]
        caps = [s["max_new_tokens"] for s in steps]
        entropy, truncated = (guards.at_full_cap([s[key] for s in steps], caps)
                              for key in ("entropy", "truncation_rate"))
        fired = [v for v in guards.check_cell(
            self.read[keep].tolist(), self.reward[keep].tolist(),
            self.read_n[keep].astype(int).tolist(), entropy, truncated, t) if v.fired]
        return "; ".join(f"{v.guard}: {v.evidence}" for v in fired) or None


def load_bank(path: Path, read_problems: int | None = None) -> tuple[dict, dict[str, dict]]:
    """The bank and its configs: config id -> knobs, seeds' curves (read by the policies
    on their first ``read_problems`` ``val`` problems; None: all), truth at F (all)."""
    with gzip.open(path, "rt") as f:
        bank = json.load(f)
    full = bank["budget_flops"]
    configs: dict[str, dict] = {}
    for cell in bank["cells"]:
        config = configs.setdefault(cell["config"], {
            "config": cell["config"], "model": cell["model"], "reward": cell["reward"],
            "group_size": cell["group_size"], "update_epochs": cell["update_epochs"],
            "label": f"{cell['model']}/{cell['reward']} G{cell['group_size']} "
                     f"mu{cell['update_epochs']}", "curves": {}})
        config["curves"][cell["seed"]] = Curve(cell, full, read_problems)
    tests = {}
    for cell in bank["cells"]:
        rows = [r for r in cell["evals"] if r["target"] == "test" and r["checkpoint"] == 1.0]
        if rows:
            tests.setdefault(cell["config"], []).append(rows[-1]["accuracy"])
    for config in configs.values():
        config["truth_test"] = (float(np.mean(tests[config["config"]]))
                                if config["config"] in tests else math.nan)
        finals = [c.accuracy[-1] for c in config["curves"].values()]
        starts = [c.accuracy[0] for c in config["curves"].values()]
        config["truth"] = float(np.mean(finals))
        config["truth_se"] = (float(np.std(finals, ddof=1) / math.sqrt(len(finals)))
                              if len(finals) > 1 else 0.0)
        config["start"] = float(np.mean(starts))
    return bank, configs


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
           fill=False, keep_sizes=DEFAULTS.keep_sizes, promote_by=DEFAULTS.promote_by, **_):
    share = len(configs) * FLAT if share is None else share
    plan = ladder_plan(configs, rungs=rungs, reduction=reduction, share=share, fill=fill)
    # as race plan does: the rungs shrink until charged and eval fit selection.pilot_budget
    room = DEFAULTS.pilot_budget - pilot_eval_share(configs, draw,
                                                    dict(zip(plan.rungs, plan.counts)))
    if 0 < room < plan.cost_share:
        plan = ladder_plan(configs, rungs=rungs, reduction=reduction, share=room, fill=fill)
    read = bank_reads(configs, plan.rungs)
    if not replayable(read):
        raise ValueError(f"rungs {plan.rungs} read the bank at {read}: a rung below the "
                         "bank's first checkpoint, or two rungs on one checkpoint")
    alive = list(configs)
    ranked_rungs: list[list[dict]] = []
    charged, pilots, before = 0.0, {}, 0.0
    for index, fraction in enumerate(read):
        charged += len(alive) * (fraction - before)
        pilots[fraction] = len(alive)
        before = fraction
        candidates = []
        for cid in alive:
            curve = configs[cid]["curves"][draw[cid]]
            keep = curve.at_rungs(tuple(read[:index + 1]))
            nxt = read[index + 1] if index + 1 < len(read) else fraction
            bound = next_rung_bound(curve.flops[keep].tolist(), curve.read[keep].tolist(),
                                    curve.read_n[keep].astype(int).tolist(), nxt * curve.full, z=z,
                                    promote_by=promote_by)
            candidates.append({"config": cid, "model": configs[cid]["model"],
                               "lcb": bound["lcb"], "score": bound["score"],
                               "ucb": bound["predicted"] + z * bound["predicted_se"],
                               "guard": curve.guard(fraction, thresholds,
                                                    tuple(read[:index + 1]))
                               if use_guards else None})
        if index + 1 == len(read):
            ranked_rungs.append(rank_last_rung(candidates))
            break
        ranked = promote(candidates, plan.counts[index + 1], keep_sizes=keep_sizes)
        ranked_rungs.append(ranked)
        alive = [c["config"] for c in ranked if c["promoted"]]
    return [c["config"] for c in final_ranking(ranked_rungs)], charged, pilots


def bank_reads(configs, rungs) -> list[float]:
    """Where the bank is read for each rung: its last checkpoint at or below the rung."""
    checkpoints = next(iter(next(iter(configs.values()))["curves"].values())).fraction
    return [float(checkpoints[checkpoints <= r + 1e-9].max()) for r in rungs]


def replayable(reads: list[float]) -> bool:
    """Whether a ladder's rungs can be replayed on the bank: each reads a checkpoint of its
    own after the warm start. A rung below the bank's first checkpoint would read the
    warm start (every config of a size ties there, and ids would pick), two rungs on one
    checkpoint would decide twice on one read."""
    return reads[0] > 0 and len(set(reads)) == len(reads)


def ladder_plan(configs, *, rungs, reduction, share, fill):
    """The ladder ``race.core.ladder.plan_ladder`` plans for ``configs`` (one cell each)."""
    return plan_ladder(len(configs), n_sizes=len({c["model"] for c in configs.values()}),
                       rungs=rungs, reduction=reduction, share=share, fill=fill)


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
        _, charged, pilots = ladder(configs, draw, use_guards=True, **knobs)
        _MATCHED[key] = charged + pilot_eval_share(configs, draw, pilots), min(pilots)
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
    """Peer ``name`` (``bench/peers.py``) on the replicate's one-seed blackbox, at
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


# ------------------------------------------------------------------ scoring


def kendall(x, y) -> float:
    """Kendall's tau-b of two sequences (nan when either is constant)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    dx = np.sign(x[:, None] - x[None, :])[np.triu_indices(len(x), 1)]
    dy = np.sign(y[:, None] - y[None, :])[np.triu_indices(len(y), 1)]
    norm = math.sqrt(np.sum(dx != 0) * np.sum(dy != 0))
    return float(np.sum(dx * dy) / norm) if norm else math.nan


def spearman(x, y) -> float:
    """Spearman's rho: Pearson's r of the average ranks (nan when either is constant)."""
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    sx, sy = rx - rx.mean(), ry - ry.mean()
    norm = math.sqrt(np.sum(sx ** 2) * np.sum(sy ** 2))
    return float(np.sum(sx * sy) / norm) if norm else math.nan


def _within_size(configs, ranking, method) -> float | None:
    values = []
    for size in sorted({c["model"] for c in configs.values()}):
        members = [c for c in ranking if configs[c]["model"] == size]
        if len(members) < 3:
            continue
        policy_rank = list(range(len(members)))  # 0 = the policy's best
        value = method(policy_rank, [-configs[c]["truth"] for c in members])
        if not math.isnan(value):
            values.append(value)
    return float(np.mean(values)) if values else None


def within_size_counts(configs: dict, rankings: list[list[str]],
                       counts: np.ndarray) -> dict[str, np.ndarray]:
    """``_within_size`` Kendall and Spearman of resamples of the configs, given as counts.

    A resample holds ``counts[s, i]`` copies of config ``list(configs)[i]`` (each with its
    truth); a ranking orders the copies of a config together, where the config stands.
    Per resample: the mean over ``rankings`` of ``_within_size`` (nan where it is None for
    every ranking); the same numbers as building each resample and ranking it, computed
    from pair counts: copies of one config tie on the truth, so only pairs of configs
    ``a`` before ``b`` count, ``counts[a] * counts[b]`` times.

    Args:
        counts: (resamples, configs) copies of each config.

    Returns:
        {"kendall": (resamples,), "spearman": (resamples,)}.
    """
    ids = list(configs)
    truth = np.array([configs[c]["truth"] for c in ids])
    sizes = sorted({configs[c]["model"] for c in ids})
    totals = {key: np.zeros(len(counts)) for key in ("kendall", "spearman")}
    seen = {key: np.zeros(len(counts)) for key in totals}
    for ranking in rankings:
        position = {c: i for i, c in enumerate(ranking)}
        order = sorted(range(len(ids)), key=lambda i: position[ids[i]])
        values = {key: [] for key in totals}
        for size in sizes:
            members = [i for i in order if configs[ids[i]]["model"] == size]
            k, y = counts[:, members], -truth[members]  # y: as _within_size ranks the truth
            m = k.sum(axis=1)
            before = np.triu(np.ones((len(members), len(members))), 1)  # a before b
            # Kendall's tau-b: the policy's ranks never tie; sign(x_a - x_b) = -1
            concordant = np.einsum("sa,ab,sb->s", k, -np.sign(y[:, None] - y[None, :])
                                   * before, k)
            untied = np.einsum("sa,ab,sb->s", k, (y[:, None] != y[None, :]) * before, k)
            norm = np.sqrt(m * (m - 1) / 2 * untied)
            tau = np.divide(concordant, norm, out=np.full(len(k), np.nan), where=norm > 0)
            # Spearman: the copies of a config take consecutive policy ranks; average ranks
            # of y (ties: the copies, and configs of equal truth)
            start = np.cumsum(k, axis=1) - k
            x_sum = k * start + k * (k + 1) / 2
            rank_y = (k @ (y[:, None] < y[None, :]) + (k @ (y[:, None] == y[None, :]) + 1) / 2)
            mean = (m + 1) / 2
            cov = np.sum(x_sum * rank_y, axis=1) - m * mean ** 2
            var_x = m * (m + 1) * (2 * m + 1) / 6 - m * mean ** 2
            var_y = np.sum(k * rank_y ** 2, axis=1) - m * mean ** 2
            norm = np.sqrt(np.clip(var_x * var_y, 0, None))
            rho = np.divide(cov, norm, out=np.full(len(k), np.nan),
                            where=norm > 1e-9 * (m + 1) ** 3)
            for key, value in (("kendall", tau), ("spearman", rho)):
                values[key].append(np.where(m >= 3, value, np.nan))
        for key, per_size in values.items():
            per_size = np.array(per_size)
            n = np.sum(~np.isnan(per_size), axis=0)
            mean_of_sizes = np.divide(np.nansum(per_size, axis=0), n,
                                      out=np.full(len(counts), np.nan), where=n > 0)
            totals[key] += np.nan_to_num(mean_of_sizes)
            seen[key] += n > 0
    return {key: np.divide(totals[key], seen[key], out=np.full(len(counts), np.nan),
                           where=seen[key] > 0) for key in totals}


def bootstrap_within_size(configs: dict, rankings: list[list[str]], boot: int,
                          seed: int = 0) -> dict[str, list[float]]:
    """``within_size_counts`` on ``boot`` resamples of the configs (with replacement, each
    with its curves' truth; the replicates' rankings kept), the resamples with a value."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((boot, len(configs)))
    for row in counts:
        np.add.at(row, rng.integers(0, len(configs), len(configs)), 1)
    values = within_size_counts(configs, rankings, counts)
    return {key: [float(v) for v in value if not np.isnan(v)] for key, value in values.items()}


def replicates(configs: dict, *, most: int = REPLICATES, seed: int = 0) -> list[dict]:
    """One-seed sweeps to replay: each config's curve from one of its seeds, drawn
    independently per config (the configs' runs are independent). Every combination when
    there are at most ``most``, else ``most`` of them drawn at random (seeded)."""
    ids = sorted(configs)
    seeds = [sorted(configs[c]["curves"]) for c in ids]
    if math.prod(map(len, seeds)) <= most:
        return [dict(zip(ids, combo)) for combo in itertools.product(*seeds)]
    rng = np.random.default_rng(seed)
    return [{c: int(rng.choice(s)) for c, s in zip(ids, seeds)} for _ in range(most)]


def eval_flops_per_problem(configs, draw) -> float:
    """The replicate's eval FLOPs per problem: the mean over configs of each curve's
    measured eval FLOPs over the problems it scored."""
    return float(np.mean([c["curves"][draw[cid]].eval_flops_per_problem
                          for cid, c in configs.items()]))


def pilot_eval_share(configs, draw, pilots, evaluations: int = LADDER_EVALS, *,
                     ladder: bool = True) -> float:
    """The eval compute (share of F) of RACE's pilot eval plan for ``pilots`` ({budget:
    pilots run to it}), ``evaluations`` checkpoints per pilot. Flat: every pilot scores
    its warm start and each checkpoint on ``EVAL_PROBLEMS_PER_CHECKPOINT``. A ladder (as
    ``race plan`` plans it, ``race.run.grid.ladder_eval_plan``): each (size, reward)
    group's warm start once on all of them, the rungs below the last on ``val`` alone,
    the last rung's end on all of them."""
    if not pilots:
        return 0.0
    if ladder:
        groups = len({(c["model"], c["reward"]) for c in configs.values()})
        last = pilots[max(pilots)]
        problems = (EVAL_PROBLEMS_PER_CHECKPOINT * (groups + last)
                    + SELECT_PROBLEMS * (sum(pilots.values()) * evaluations - last))
    else:
        problems = EVAL_PROBLEMS_PER_CHECKPOINT * (
            sum(pilots.values()) * evaluations + pilots[min(pilots)])
    return problems * eval_flops_per_problem(configs, draw) / bank_full(configs)


def score_policy(name, configs, draws, *, boot=2000, **kw) -> dict:
    best = max(configs, key=lambda c: configs[c]["truth"])
    regrets, ses, kendalls, spearmans, catastrophes = [], [], [], [], []
    best_test = max(c["truth_test"] for c in configs.values())
    test_regrets = []
    charged_shares, eval_shares, rankings = [], [], []
    # a uniformly random pick, in expectation over the configs
    anyone = {"regret": configs[best]["truth"] - np.mean([c["truth"] for c in configs.values()]),
              "catastrophe": np.mean([c["truth"] < c["start"] for c in configs.values()]),
              "test": best_test - np.mean([c["truth_test"] for c in configs.values()])}
    for draw in draws:
        ranking, charged, pilots, *spent = POLICIES[name](configs, draw, **kw)
        rankings.append(ranking)
        pick = configs[ranking[0]]
        if name == "random":
            regrets.append(anyone["regret"])
            catastrophes.append(anyone["catastrophe"])
            test_regrets.append(anyone["test"])
        else:
            regrets.append(configs[best]["truth"] - pick["truth"])
            catastrophes.append(float(pick["truth"] < pick["start"]))
            test_regrets.append(best_test - pick["truth_test"])
        ses.append(math.hypot(configs[best]["truth_se"], pick["truth_se"]))
        kendalls.append(_within_size(configs, ranking, kendall))
        spearmans.append(_within_size(configs, ranking, spearman))
        charged_shares.append(charged)
        # a peer returns the eval it spent; RACE's policies are costed by the pilot plan
        flat_plan = name.startswith("flat")
        eval_shares.append(charged + (spent[0] if spent else pilot_eval_share(
            configs, draw, pilots, FLAT_EVALS if flat_plan else LADDER_EVALS,
            ladder=not flat_plan)))
    boots = bootstrap_within_size(configs, rankings[::max(1, len(rankings) // BOOT_RANKINGS)],
                                  boot)
    mean = lambda xs: float(np.mean([x for x in xs if x is not None])) if any(  # noqa: E731
        x is not None for x in xs) else float("nan")
    interval = {k: (np.percentile(v, [5, 95]) if v else (math.nan, math.nan))
                for k, v in boots.items()}
    return {"policy": name, "top1_regret": float(np.mean(regrets)), "regrets": regrets,
            "test_regret": float(np.mean(test_regrets)),
            "se": float(np.mean(ses)), "kendall": mean(kendalls),
            "kendall_ci": tuple(map(float, interval["kendall"])), "spearman": mean(spearmans),
            "spearman_ci": tuple(map(float, interval["spearman"])),
            "catastrophes": float(np.mean(catastrophes)),
            "pilot_cost_share": float(np.mean(charged_shares)),
            "with_eval": float(np.mean(eval_shares)),
            "picks": [r[0] for r in rankings], "rankings": rankings}


def order_by_budget(configs: dict, budgets=ORDER_BUDGETS, top: int = 4) -> list[dict]:
    """The ``top`` configs at F and what a pilot could see of their order before F: per
    window of the budget (between one of ``budgets`` and the one before it; F itself
    left out, whose ``val`` is scored on more problems), each config's ``val`` averaged
    over its checkpoints in the window and over its seeds.

    Returns one row per config, best at F first: ``label``, ``truth`` and ``windows``
    (one mean per budget, nan where the bank has no checkpoint in the window).
    """
    rows = []
    for config in sorted(configs.values(), key=lambda c: -c["truth"])[:top]:
        windows = []
        for lo, hi in budget_windows(budgets):
            means = []
            for curve in config["curves"].values():
                keep = (curve.fraction > lo + 1e-9) & curve.upto(min(hi, 1 - 1e-6))
                if keep.any():
                    means.append(curve.accuracy[keep].mean())
            windows.append(float(np.mean(means)) if means else math.nan)
        rows.append({"label": config["label"], "truth": config["truth"], "windows": windows})
    return rows


def budget_windows(budgets) -> list[tuple[float, float]]:
    """The windows ``(lo, hi]`` between each of ``budgets`` and the one before it (from 0)."""
    return list(zip((0.0, *budgets), budgets))


def fmt_window(lo: float, hi: float) -> str:
    """A window of the budget, ``(F/32,F/16]`` (``(F/2,F)``: F itself left out)."""
    def name(f):
        return "0" if f == 0 else "F" if f == 1 else fmt_fraction(f).replace(" ", "")
    return f"({name(lo)},{name(hi)}" + (")" if hi == 1 else "]")


def bank_full(configs: dict) -> float:
    return next(iter(next(iter(configs.values()))["curves"].values())).full


def halves(configs: dict) -> tuple[dict, dict]:
    """The tuning half and the held-out half. By group size when the bank has two (tuned on
    the larger G, whose configs ran first); else the configs in the order of a hash of
    their ids, alternating."""
    group_sizes = sorted({c["group_size"] for c in configs.values()})
    if len(group_sizes) == 2:
        tune = [c for c in configs if configs[c]["group_size"] == group_sizes[1]]
        held = [c for c in configs if configs[c]["group_size"] == group_sizes[0]]
    else:
        order = sorted(configs, key=lambda c: zlib.crc32(c.encode()))
        tune, held = order[0::2], order[1::2]
    return {c: configs[c] for c in tune}, {c: configs[c] for c in held}


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
        plan = ladder_plan(configs, share=len(configs) * FLAT, **shape)
        row = {"n_rungs": n_rungs, "reduction": reduction, "promote_by": promote_by,
               "kw": kw, "order": i, "first": plan.rungs[0],
               "replayable": replayable(bank_reads(configs, plan.rungs))}
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


def table(rows: list[dict], configs: dict) -> str:
    lines = [f"{'policy':<18}{'regret':>8}{'se':>8}{'test':>8}{'kendall [90% CI]':>24}"
             f"{'spearman [90% CI]':>24}{'catastr.':>10}{'cost':>7}{'+eval':>7}  picks"]
    for r in rows:
        counts = collections.Counter(configs[p]["label"] for p in r["picks"])
        picks = ", ".join(f"{label} {n / len(r['picks']):.0%}"
                          for label, n in counts.most_common())
        lines.append(f"{r['policy']:<18}{r['top1_regret']:>8.4f}{r['se']:>8.4f}"
                     f"{r['test_regret']:>8.4f}"
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


def paired_difference(rows: list[dict], name: str = "ladder+guards") -> str:
    """``name``'s regret minus the best peer's (``best_peer``), paired replicate by
    replicate, with the Monte Carlo SE of that mean over the replicates."""
    row = next(r for r in rows if r["policy"] == name)
    peer = best_peer(rows, row)
    if peer is None:
        return f"{name}: no peer at equal or lower cost"
    diff = np.subtract(row["regrets"], peer["regrets"])
    mc_se = float(np.std(diff, ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else math.nan
    return (f"{name} - {peer['policy']} (best peer): regret {np.mean(diff):+.4f}, Monte Carlo "
            f"SE {mc_se:.4f} over {len(diff)} replicates (paired); the truth's SE "
            f"{row['se']:.4f}")


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
        picks = [next(c for c in ranking if c in rho) == check.best
                 for ranking in ladder_row["rankings"]]
        lines.append(f"  {model}/{reward} ({len(ids)} configs, rho "
                     + ", ".join(f"{configs[c]['label'].split(' ', 1)[1]} {rho[c]:.2f}"
                                 for c in ids)
                     + f"): {check.line().replace(check.best, configs[check.best]['label'])}; "
                     f"ladder+guards pick rate {np.mean(picks):.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=Path, default=DEFAULT_BANK)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--replicates", type=int, default=REPLICATES,
                        help="most replicates per table (fewer: a quick look)")
    args = parser.parse_args()
    missing = [m for m in ("syne_tune", "optuna") if importlib.util.find_spec(m) is None]
    if missing:
        parser.exit(2, f"the peers need {', '.join(missing)}: pip install 'race[bench]'\n")
    bank, configs = load_bank(args.bank, SELECT_PROBLEMS)
    exported = blackbox.bank_blackbox(bank, val_problems=SELECT_PROBLEMS)
    seeds = collections.Counter(len(c["curves"]) for c in configs.values())
    sizes = sorted({c["model"] for c in configs.values()})
    print(f"bank: {len(configs)} configs ("
          + ", ".join(f"{n} x {k} seeds" for k, n in sorted(seeds.items(), reverse=True))
          + f"; {', '.join(sizes)}), full budget F = {bank['budget_flops']:.3g} FLOPs, git "
          f"{bank['git_sha'][:10]}")
    for run in bank.get("runs") or [bank]:
        cells = f" ({len(run['cells'])} cells)" if "cells" in run else ""
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
    draws = replicates(configs, most=args.replicates)
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

    tune, held = halves(configs)
    tune_draws = replicates(tune, most=args.replicates)
    chosen, candidates = tune_ladder(tune, tune_draws)
    print(f"\nladder geometry and promotion score tuned on {len(tune)} configs ("
          + ", ".join(sorted({f"G{configs[c]['group_size']}" for c in tune}))
          + f"), ladder+guards at the flat grid's compute ({len(tune) * FLAT:.3g}), first "
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
    held_draws = replicates(held, most=args.replicates)
    print(f"\nthe held-out {len(held)} configs, tuned geometry, thresholds and peer knobs "
          f"({len(held_draws)} replicates):")
    held_rows = [score_policy(name, held, held_draws, boot=args.boot, exported=exported,
                              peer_knobs=tuned, thresholds=thresholds, **chosen)
                 for name in POLICIES]
    print(table(held_rows, configs))
    print(paired_difference(held_rows))
    print("\nheld-out: " + summary(held_rows))
    print(summary(rows))


if __name__ == "__main__":
    main()
