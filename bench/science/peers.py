"""The field's multi-fidelity schedulers, replayed on one replicate of the curve bank.

A replicate is a one-seed sweep (``bench/selection_replay.py``, leave-one-seed-out): each
config's curve from the replicate's read seed, cut from the bank's Syne Tune blackbox
(``bench/science/blackbox.py``, ``one_seed``). Each peer runs on it until a budget is spent and
returns its ranking (best first), the charged FLOPs it spent and the eval FLOPs of the
``val`` problems it scored, as shares of one full run F.

How a replay runs (``simulate``): ``workers`` workers (one per config: every config
starts at once, as the ladder's first rung does), each running one trial at a time.
Time is compute: a worker moving a trial from one checkpoint to the next spends the
training between them (the checkpoints' fractions of F), then the eval of that
checkpoint's ``val`` (its problems times the replicate's eval FLOPs per problem, the
rate ``bench/selection_replay.py`` charges RACE's pilots). Every trial reports at every
checkpoint of the bank it reaches, as a training script reports each epoch. Reports are
handled in the order of their simulated time (ties in the order of scheduling). The
replay stops when the workers' total compute reaches the budget: the compute of trials
still running is counted up to there, and reads past it are never seen. So a peer
spends at most its budget.

The drivers call the libraries' own scheduling code:

- ``asha``: Syne Tune's ``ASHA`` (``syne_tune.optimizer.baselines``, stopping type,
  one bracket), through its ``suggest`` / ``on_trial_add`` / ``on_trial_result`` /
  ``on_trial_complete``, as ``syne_tune.Tuner`` calls them. The simulator backend
  (``UserBlackboxBackend`` on the one-seed blackbox, ``SimulatorCallback``) runs the same
  calls, with a thread pool, files and a wall-clock stop criterion a per-replicate
  replay does not need (0.25 s a replicate against 7 ms here); ``simulator_asha`` runs it,
  and a test checks that both read the same checkpoints of the same configs.
- ``hyperband``: the same class with every bracket of Hyperband
  (``brackets = floor(log_eta(max_t / grace)) + 1``): Syne Tune 0.16's asynchronous
  Hyperband (its synchronous ``SyncHyperband`` and ``HyperbandScheduler`` were removed
  in 0.16; 0.14, the last release with them, needs numpy < 1.27).
- ``pasha``: PASHA (Bohdal et al. 2023). Syne Tune 0.16 no longer ships it, so
  ``bench/science/pasha.py`` is Syne Tune 0.14.2's ``PASHARungSystem`` (promotion-type ASHA
  whose maximum resource grows only when the ranking of the top two rungs changes,
  beyond an epsilon estimated from noisy pairs) ported onto 0.16's ``TrialScheduler``.
- ``optuna-sh``, ``optuna-hyperband``: an Optuna study over the grid's categorical
  configs (every config enqueued once, in a random order), each trial calling
  ``trial.report(value, step)`` at every checkpoint and stopping when
  ``trial.should_prune()``, with ``SuccessiveHalvingPruner`` or ``HyperbandPruner``.
- ``top-k``: Egele et al. 2023's null model: every config to a short budget, the best K
  to a long one; K as large as the budget allows.

Defaults are the libraries' documented ones, in the bank's resource unit F/D (one unit is
the bank's first checkpoint): grace period / min resource 1, reduction factor 3 (Optuna's
SuccessiveHalvingPruner: 4), max resource F; Optuna's ``min_resource="auto"`` and
``max_resource="auto"`` are given the values they resolve to after one trial run to F
(``max(D // 100, 1)`` and D), since with parallel workers no trial completes before the
pruners must decide. A peer's ranking: configs by the largest resource read, then by the
value read there (Optuna's ``best_trial`` is the best completed trial, the same pick when
one completed); configs never started come last.

Needs the ``bench`` extra (``pip install 'race-rl[bench]'``): syne-tune and optuna (imported
lazily).
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import logging
import math
from dataclasses import dataclass, field

import numpy as np

from bench.science.blackbox import AXES, FIDELITY, BankBlackbox
from bench.science.pasha import pasha_scheduler

METRIC = "val_accuracy"


@dataclass(frozen=True)
class Curves:
    """What a peer reads of one replicate.

    Attributes:
        ids: config ids, one per row.
        knobs: each row's grid values (``AXES``).
        space: each axis's values.
        resource: (K,) the checkpoints, in units of F/``units``.
        units: D.
        accuracy: (rows, K) ``val`` accuracy at each checkpoint.
        problems: (rows, K) ``val`` problems scored at each checkpoint.
        eval_share_per_problem: eval FLOPs per problem, as a share of F.
    """

    ids: tuple[str, ...]
    knobs: tuple[dict, ...]
    space: dict
    resource: np.ndarray
    units: int
    accuracy: np.ndarray
    problems: np.ndarray
    eval_share_per_problem: float

    def snap(self, fraction: float) -> int:
        """The first checkpoint at or above ``fraction`` of F (the last one above all)."""
        at = self.resource >= fraction * self.units - 1e-9
        return int(self.resource[at][0] if at.any() else self.resource[-1])

    def index(self, resource: int) -> int:
        return int(np.searchsorted(self.resource, resource))


def curves(bank: BankBlackbox, eval_flops_per_problem: float) -> Curves:
    """The replicate's curves from its one-seed blackbox (``blackbox.one_seed``)."""
    bb = bank.blackbox
    names = list(bb.objectives_names)
    values = bb.objectives_evaluations[:, 0]
    knobs = tuple({a: _plain(v) for a, v in row.items()}
                  for row in bb.hyperparameters.to_dict("records"))
    space = {a: sorted({k[a] for k in knobs}) for a in AXES}
    return Curves(bank.config_ids, knobs, space, np.asarray(bb.fidelity_values, int),
                  bank.units, values[..., names.index(METRIC)],
                  values[..., names.index("val_problems")],
                  eval_flops_per_problem / bank.full_flops)


def _plain(value):
    return value.item() if hasattr(value, "item") else value


@dataclass
class Run:
    """A peer's replay: ranking (config ids, best first), the charged and eval compute it
    spent (shares of F), and its reads ``(config id, resource)`` in order."""

    ranking: list[str]
    charged: float
    eval: float
    reads: list[tuple[str, int]] = field(default_factory=list)
    wall: float = 0.0  # the simulated time it stopped at (compute per worker, share of F)


def simulate(driver, c: Curves, budget: float, workers: int) -> Run:
    """Run ``driver`` on ``c`` until the workers' compute reaches ``budget`` (share of F).

    ``driver.start()`` returns ``(key, row, last)``: a trial to run on a free worker from
    its checkpoint index ``last`` (-1: from the warm start), or None when it has none now.
    ``driver.result(key, index, value)`` returns "continue", "stop" or "pause".
    """
    heap: list = []
    running: dict = {}  # key -> (row, index, start time, train share, eval share)
    order = itertools.count()
    now = spent = charged = evals = 0.0
    best: dict[int, tuple[int, float]] = {}
    reads: list[tuple[str, int]] = []

    def schedule(key, row, last):
        start = c.resource[last] if last >= 0 else 0
        train = (c.resource[last + 1] - start) / c.units
        ev = c.problems[row, last + 1] * c.eval_share_per_problem
        running[key] = (row, last + 1, now, train, ev)
        heapq.heappush(heap, (now + train + ev, next(order), key))

    def launch():
        while len(running) < workers:
            job = driver.start()
            if job is None:
                return
            schedule(*job)

    launch()
    while heap:
        t, _, key = heap[0]
        if spent + len(running) * (t - now) > budget + 1e-12:
            stop = now + (budget - spent) / len(running)
            for _, _, begun, train, _ in running.values():  # trained first, then scored
                charged += min(stop - begun, train)
                evals += max(0.0, stop - begun - train)
            spent, now = budget, stop
            break
        heapq.heappop(heap)
        spent += len(running) * (t - now)
        now = t
        row, index, _, train, ev = running.pop(key)
        charged, evals = charged + train, evals + ev
        value = float(c.accuracy[row, index])
        reads.append((c.ids[row], int(c.resource[index])))
        best[row] = (index, value)
        if driver.result(key, index, value) == "continue" and index + 1 < len(c.resource):
            schedule(key, row, index)
        launch()
    read = sorted(best, key=lambda r: (-best[r][0], -best[r][1], c.ids[r]))
    rest = sorted((r for r in range(len(c.ids)) if r not in best), key=lambda r: c.ids[r])
    return Run([c.ids[r] for r in read + rest], charged, evals, reads, now)


def grid_order(c: Curves, seed: int) -> list[int]:
    """The rows in the replicate's random order (the order trials are started in)."""
    return [int(r) for r in np.random.default_rng(seed).permutation(len(c.ids))]


# ------------------------------------------------------------------ Syne Tune


class SyneTuneDriver:
    """Drives a Syne Tune ``TrialScheduler`` as ``syne_tune.Tuner`` does: ``suggest``
    (a new config, or a paused trial to resume), ``on_trial_add``, ``on_trial_result``
    at every checkpoint, ``on_trial_complete`` at the scheduler's max resource."""

    def __init__(self, scheduler, c: Curves, rows: list[int], max_t: int,
                 resumes: bool = False):
        self.scheduler, self.c, self.max_t, self.resumes = scheduler, c, max_t, resumes
        self.new_left = len(rows)
        self.rows = {tuple(str(c.knobs[r][a]) for a in AXES): r for r in rows}
        self.trials: dict[int, tuple] = {}  # trial id -> (Trial, row, last index read)

    def start(self):
        from syne_tune.backend.trial_status import Trial

        if self.new_left == 0 and not self.resumes:
            return None  # the grid is exhausted: the searcher would only repeat configs
        suggestion = self.scheduler.suggest()
        if suggestion is None:
            return None
        if not suggestion.spawn_new_trial_id:
            trial, row, last = self.trials[suggestion.checkpoint_trial_id]
            return trial.trial_id, row, last
        self.new_left -= 1
        row = self.rows[tuple(str(suggestion.config[a]) for a in AXES)]
        trial = Trial(trial_id=len(self.trials), config=suggestion.config,
                      creation_time=datetime.datetime.now())
        self.trials[trial.trial_id] = (trial, row, -1)
        self.scheduler.on_trial_add(trial)
        return trial.trial_id, row, -1

    def result(self, key, index, value):
        trial, row, _ = self.trials[key]
        self.trials[key] = (trial, row, index)
        result = {METRIC: value, FIDELITY: int(self.c.resource[index])}
        decision = self.scheduler.on_trial_result(trial, result)
        if result[FIDELITY] >= self.max_t:
            self.scheduler.on_trial_complete(trial, result)
            return "stop"
        return decision.lower()


def asha(c: Curves, rows: list[int], seed: int, *, grace: int, reduction: float, max_t: int,
         brackets: int = 1) -> SyneTuneDriver:
    from syne_tune.config_space import choice
    from syne_tune.optimizer.baselines import ASHA

    # ASHA hands points_to_evaluate to its searcher twice and the searcher warns of it
    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    space = {a: choice(v) for a, v in c.space.items()}
    scheduler = ASHA(space, metric=METRIC, do_minimize=False, time_attr=FIDELITY,
                     max_t=max_t, grace_period=grace, reduction_factor=reduction,
                     brackets=brackets, random_seed=seed,
                     points_to_evaluate=[dict(c.knobs[r]) for r in rows])
    return SyneTuneDriver(scheduler, c, rows, max_t)


def simulator_asha(bank: BankBlackbox, c: Curves, *, until: float, seed: int,
                   workers: int = 1, poll: float = 1e-3, **knobs) -> list[tuple[str, int]]:
    """ASHA through Syne Tune's simulator on one worker: ``syne_tune.Tuner`` with a
    ``UserBlackboxBackend`` on the replicate's one-seed blackbox (``bank``), its time the
    trial's compute (training and ``val`` eval, shares of F), no simulated delays, a poll
    every ``poll``, stopped by ``StoppingCriterion(max_wallclock_time=budget)``. Returns
    the reads made by ``budget``, ``(config id, resource)`` in order: what ``replay`` with
    one worker reads (a test checks it). Writes the Tuner's files under a temp folder."""
    import contextlib
    import io
    import os
    import tempfile

    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_backend import SimulatorConfig
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository import UserBlackboxBackend
    from syne_tune.blackbox_repository.blackbox_tabular import BlackboxTabular

    bb = bank.blackbox
    train = np.diff(np.concatenate([[0], c.resource])) / c.units
    # in millionths of F: the backend keeps a trial's reports at least 0.01 apart
    elapsed = 1e6 * np.cumsum(train[None] + c.problems * c.eval_share_per_problem, axis=1)
    values = np.concatenate([bb.objectives_evaluations, elapsed[:, None, :, None]], axis=-1)
    timed = BlackboxTabular(bb.hyperparameters, bb.configuration_space, bb.fidelity_space,
                            values, bb.fidelity_values, [*bb.objectives_names, "elapsed"])
    rows = grid_order(c, seed)
    knobs = PEERS["asha"].defaults | knobs
    driver = asha(c, rows, seed, grace=1 if knobs["grace"] is None else c.snap(knobs["grace"]),
                  reduction=knobs["reduction"], max_t=c.snap(knobs["max"]))
    zero = SimulatorConfig(0.0, 0.0, 0.0, 0.0, 0.0)
    backend = UserBlackboxBackend(timed, elapsed_time_attr="elapsed", seed=0,
                                  simulator_config=zero, tuner_sleep_time=1e6 * poll)
    callback = SimulatorCallback()
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        before = os.environ.get("SYNETUNE_FOLDER")
        os.environ["SYNETUNE_FOLDER"] = folder
        try:
            Tuner(trial_backend=backend, scheduler=driver.scheduler,
                  stop_criterion=StoppingCriterion(max_wallclock_time=1e6 * until),
                  n_workers=workers,
                  sleep_time=0, callbacks=[callback], save_tuner=False,
                  results_update_interval=1e9, print_update_interval=1e9).run()
        finally:
            if before is None:
                os.environ.pop("SYNETUNE_FOLDER")
            else:
                os.environ["SYNETUNE_FOLDER"] = before
    results = callback.dataframe()
    results = results[results["st_tuner_time"] <= 1e6 * until]
    ids = {tuple(str(c.knobs[r][a]) for a in AXES): c.ids[r] for r in rows}
    return [(ids[tuple(str(row[f"config_{a}"]) for a in AXES)], int(row[FIDELITY]))
            for _, row in results.iterrows()]


def hyperband_brackets(grace: int, reduction: float, max_t: int) -> int:
    """Hyperband's brackets s = 0 ... s_max, s_max = floor(log_eta(max_t / grace))."""
    return int(math.floor(math.log(max_t / grace) / math.log(reduction) + 1e-9)) + 1


def hyperband(c, rows, seed, *, grace, reduction, max_t) -> SyneTuneDriver:
    return asha(c, rows, seed, grace=grace, reduction=reduction, max_t=max_t,
                brackets=hyperband_brackets(grace, reduction, max_t))


def rung_levels(c: Curves, grace: int, reduction: float, max_t: int) -> list[int]:
    """Rung levels below ``max_t`` (grace * eta^k), each at the first checkpoint at or
    above it (distinct, ascending)."""
    levels, level = [], grace
    while level < max_t:
        snapped = c.snap(level / c.units)
        if snapped < max_t and snapped not in levels:
            levels.append(snapped)
        level *= reduction
    return levels


def pasha(c, rows, seed, *, grace, reduction, max_t) -> SyneTuneDriver:
    levels = rung_levels(c, grace, reduction, max_t)
    if len(levels) < 2:
        raise ValueError(f"pasha needs at least 2 rung levels below max_t; grace={grace}, "
                         f"reduction={reduction}, max_t={max_t} give {levels}")
    scheduler = pasha_scheduler([dict(c.knobs[r]) for r in rows], levels=levels, max_t=max_t,
                                reduction=reduction, seed=seed, metric=METRIC,
                                time_attr=FIDELITY)
    return SyneTuneDriver(scheduler, c, rows, max_t, resumes=True)


# ------------------------------------------------------------------ Optuna


class OptunaDriver:
    """An Optuna study over the grid (each config enqueued once, in ``rows`` order);
    trials report every checkpoint and stop when ``should_prune``."""

    def __init__(self, pruner, c: Curves, rows: list[int], seed: int, max_t: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna, self.c, self.max_t = optuna, c, max_t
        self.study = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed),
            pruner=pruner, study_name=f"replicate-{seed}")
        for r in rows:
            self.study.enqueue_trial(dict(c.knobs[r]))
        self.left = len(rows)
        self.rows = {tuple(str(c.knobs[r][a]) for a in AXES): r for r in rows}
        self.trials: dict[int, object] = {}

    def start(self):
        if self.left == 0:
            return None
        self.left -= 1
        trial = self.study.ask()
        config = {a: trial.suggest_categorical(a, v) for a, v in self.c.space.items()}
        self.trials[trial.number] = trial
        return trial.number, self.rows[tuple(str(config[a]) for a in AXES)], -1

    def result(self, key, index, value):
        trial, step = self.trials[key], int(self.c.resource[index])
        trial.report(value, step)
        if step >= self.max_t:
            self.study.tell(trial, value)
            return "stop"
        if trial.should_prune():
            self.study.tell(trial, state=self.optuna.trial.TrialState.PRUNED)
            return "stop"
        return "continue"


def optuna_sh(c, rows, seed, *, grace, reduction, max_t) -> OptunaDriver:
    import optuna

    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=grace,
                                                    reduction_factor=reduction)
    return OptunaDriver(pruner, c, rows, seed, max_t)


def optuna_hyperband(c, rows, seed, *, grace, reduction, max_t) -> OptunaDriver:
    import optuna

    pruner = optuna.pruners.HyperbandPruner(min_resource=grace, max_resource=max_t,
                                            reduction_factor=reduction)
    return OptunaDriver(pruner, c, rows, seed, max_t)


# ------------------------------------------------------------------ top-k


class TopK:
    """Every config to ``short`` (a resource), then the best ``k`` by their value there
    on to ``long``; ``k`` as large as ``budget`` allows (Egele et al. 2023)."""

    def __init__(self, c: Curves, rows: list[int], *, short: int, long: int, budget: float):
        self.c, self.rows, self.left = c, rows, list(rows)
        self.short, self.long = c.index(short), c.index(long)
        n = len(rows)
        first = c.resource[self.short] / c.units + np.mean(
            c.problems[rows, self.short]) * c.eval_share_per_problem
        then = (c.resource[self.long] - c.resource[self.short]) / c.units + np.mean(
            c.problems[rows, self.long]) * c.eval_share_per_problem
        self.k = 0 if self.long <= self.short else int(
            np.clip((budget - n * first) // then if then > 0 else n, 0, n))
        self.values: dict[int, float] = {}
        self.promoted: list[int] | None = None

    def start(self):
        if self.left:
            row = self.left.pop(0)
            return row, row, -1
        if self.promoted is None and len(self.values) == len(self.rows):
            self.promoted = sorted(self.values, key=lambda r: (-self.values[r],
                                                               self.c.ids[r]))[:self.k]
        if self.promoted:
            row = self.promoted.pop(0)
            return row, row, self.short
        return None

    def result(self, key, index, value):
        if index == self.short:
            self.values[key] = value
            return "pause"
        return "continue" if index < self.long else "stop"


# ------------------------------------------------------------------ registry


@dataclass(frozen=True)
class Peer:
    """A peer: its driver, its documented defaults, and the knob settings tuned on the
    tuning half (first the defaults; ties go to the earlier setting). Knobs are shares
    of F (``grace``/``max``: snapped up to the bank's checkpoints; ``grace=None``: one
    resource unit, the libraries' default of 1)."""

    make: object
    defaults: dict
    grid: tuple[dict, ...]


def _grid(defaults: dict, **alternatives) -> tuple[dict, ...]:
    keys = list(alternatives)
    settings = [dict(zip(keys, values))
                for values in itertools.product(*(alternatives[k] for k in keys))]
    grid = [defaults | s for s in settings]
    return tuple(sorted(grid, key=lambda s: s != defaults))  # the defaults first, kept


SCHEDULER = {"grace": None, "reduction": 3, "max": 1.0}  # Syne Tune's defaults, max_t = F
TUNED_GRACE = 1 / 48  # the alternative to one unit: about RACE's first rung
PEERS = {
    "asha": Peer(asha, SCHEDULER, _grid(SCHEDULER, grace=(None, TUNED_GRACE), reduction=(3, 2))),
    "hyperband": Peer(hyperband, SCHEDULER,
                      _grid(SCHEDULER, grace=(None, TUNED_GRACE), reduction=(3, 2))),
    "pasha": Peer(pasha, SCHEDULER, _grid(SCHEDULER, grace=(None, TUNED_GRACE), reduction=(3, 2))),
    # Optuna's SuccessiveHalvingPruner: min_resource "auto", reduction_factor 4
    "optuna-sh": Peer(optuna_sh, SCHEDULER | {"grace": "auto", "reduction": 4},
                      _grid(SCHEDULER | {"grace": "auto", "reduction": 4},
                            grace=("auto", TUNED_GRACE), reduction=(4, 2))),
    # Optuna's HyperbandPruner: min_resource 1, max_resource "auto", reduction_factor 3
    "optuna-hyperband": Peer(optuna_hyperband, SCHEDULER,
                             _grid(SCHEDULER, grace=(None, TUNED_GRACE), reduction=(3, 2))),
    # short None: the ladder's first rung; long: F
    "top-k": Peer(None, {"short": None, "long": 1.0},
                  _grid({"short": None, "long": 1.0}, short=(None, 1 / 16), long=(1.0, 1 / 6))),
}


def replay(name: str, c: Curves, *, budget: float, seed: int, first_rung: float,
           knobs: dict | None = None) -> Run:
    """Peer ``name`` on the replicate ``c`` with ``knobs`` (default: its defaults), one
    worker per config, until ``budget`` (share of F) is spent. ``first_rung``: the
    ladder's first rung (share of F), top-k's default short budget."""
    peer = PEERS[name]
    knobs = peer.defaults | (knobs or {})
    rows = grid_order(c, seed)
    if name == "top-k":
        short = c.snap(first_rung if knobs["short"] is None else knobs["short"])
        driver = TopK(c, rows, short=short, long=c.snap(knobs["long"]), budget=budget)
        return simulate(driver, c, budget, workers=len(rows))
    max_t = c.snap(knobs["max"])
    if knobs["grace"] is None:
        grace = 1
    elif knobs["grace"] == "auto":  # what Optuna's "auto" resolves to after a run to F
        grace = max(c.units // 100, 1)
    else:
        grace = c.snap(knobs["grace"])
    state = np.random.get_state()  # Syne Tune draws ASHA's brackets from numpy's global
    np.random.seed(seed % 2 ** 32)
    try:
        driver = peer.make(c, rows, seed, grace=grace, reduction=knobs["reduction"],
                           max_t=max_t)
        return simulate(driver, c, budget, workers=len(rows))
    finally:
        np.random.set_state(state)
