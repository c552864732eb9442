"""The curve bank as a Syne Tune tabular blackbox (``syne_tune.blackbox_repository``).

A bank (``bench/curve_bank.py``'s format) holds every config of a grid run to the full
budget F, several seeds each, with ``val`` (and ``test``, ``ood``) scored at checkpoints.
``bank_blackbox`` writes it as a ``BlackboxTabular``:

- configuration space: the grid's axes, ``model``, ``reward``, ``group_size`` and
  ``update_epochs``, each a ``choice`` over the values the bank holds; one row per config;
- fidelity: ``resource``, the checkpoint's budget in units of F/D (D the least common
  denominator of the checkpoints' fractions of F: 256 for checkpoints k/256, 96 for
  F/96 ... F), an integer from 1 to D, as Syne Tune's schedulers compare it with their
  rung levels; the warm start (checkpoint 0) is not a fidelity;
- objectives per checkpoint (``OBJECTIVES``): ``val`` accuracy and its number of problems
  (all the bank scored, or with ``val_problems`` the first that many, as a pilot scoring
  that many reads them: a pilot's problems are a prefix of one seeded draw),
  the charged FLOPs (rollout + learning + feedback) spent to reach it, the eval FLOPs of
  scoring that ``val`` (the problems times the cell's measured eval FLOPs per problem),
  ``test`` and ``ood`` accuracy (nan where the bank has none), all as numbers;
- seeds: the blackbox's seed axis, the bank's seeds in sorted order (a config with fewer
  seeds is padded with nan).

``one_seed`` cuts the blackbox a replicate of ``bench/selection_replay.py`` reads: each
config's curve from its own drawn seed, as a one-seed blackbox (Syne Tune's simulator
draws one seed per trial or uses one for all, never one per config). ``save``/``load``
write and read it with Syne Tune's own ``serialize``/``deserialize`` (a local folder:
nothing is fetched from a hub).

Needs the ``bench`` extra (``pip install 'race-rl[bench]'``): syne-tune (imported lazily).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

AXES = ("model", "reward", "group_size", "update_epochs")
OBJECTIVES = ("val_accuracy", "val_problems", "charged_flops", "val_eval_flops",
              "test_accuracy", "ood_accuracy")
FIDELITY = "resource"


@dataclass(frozen=True)
class BankBlackbox:
    """A bank as a Syne Tune blackbox, with what maps it back to the bank.

    Attributes:
        blackbox: the ``BlackboxTabular``; objectives shaped (configs, seeds, fidelities,
            ``len(OBJECTIVES)``).
        config_ids: the bank's config id of each hyperparameter row, in row order.
        seeds: the bank's seed of each index on the seed axis.
        full_flops: F, the full budget in FLOPs.
        units: D: a fidelity ``r`` is the checkpoint at ``r / D`` of F.
    """

    blackbox: object
    config_ids: tuple[str, ...]
    seeds: tuple[int, ...]
    full_flops: float
    units: int

    def fraction(self, resource) -> np.ndarray:
        """Fidelities as fractions of F."""
        return np.asarray(resource, float) / self.units


def checkpoint_units(fractions) -> int:
    """The least common denominator of checkpoints given as fractions of F (floats)."""
    units = 1
    for f in fractions:
        d = Fraction(float(f)).limit_denominator(4096).denominator
        units = units * d // math.gcd(units, d)
    return units


def first_problems(row: dict, most: int | None) -> tuple[float, int]:
    """An eval row's accuracy and problem count on its first ``most`` problems (None: all).

    A pilot scoring ``n`` problems of a target scores the first ``n`` of one seeded draw,
    so the first ``most`` of a bank row's per-problem ``correct`` are what a pilot with
    ``most`` problems would have read. Rows without ``correct``, or with at most ``most``
    problems, are read whole.
    """
    correct = row.get("correct")
    if most is None or not correct or row["n"] <= most:
        return float(row["accuracy"]), int(row["n"])
    return sum(int(c) for c in correct[:most]) / most, most


def bank_blackbox(bank: dict, val_problems: int | None = None) -> BankBlackbox:
    """The bank (``json.load`` of a curve bank) as a Syne Tune ``BlackboxTabular``;
    ``val`` read on its first ``val_problems`` problems (``first_problems``; None: all).

    Raises:
        ValueError: when the cells' ``val`` checkpoints differ (a tabular blackbox needs
            one fidelity grid).
    """
    import pandas as pd
    from syne_tune.blackbox_repository.blackbox_tabular import BlackboxTabular
    from syne_tune.config_space import choice, randint

    cells = bank["cells"]
    ids = sorted({c["config"] for c in cells})
    knobs = {c["config"]: {a: c[a] for a in AXES} for c in cells}
    seeds = tuple(sorted({c["seed"] for c in cells}))
    grids = {tuple(sorted(r["checkpoint"] for r in c["evals"]
                          if r["target"] == "val" and r["checkpoint"] > 0)) for c in cells}
    if len(grids) != 1:
        raise ValueError(f"bank cells have {len(grids)} different val checkpoint grids; "
                         "a tabular blackbox needs one: export cells of one sweep command")
    checkpoints = next(iter(grids))
    units = checkpoint_units(checkpoints)
    resource = np.array([round(f * units) for f in checkpoints])
    values = np.full((len(ids), len(seeds), len(checkpoints), len(OBJECTIVES)), np.nan)
    for cell in cells:
        row, seed = ids.index(cell["config"]), seeds.index(cell["seed"])
        problems = sum(r["n"] for r in cell["evals"])
        per_problem = max(r["eval_flops"] for r in cell["evals"]) / problems
        for r in cell["evals"]:
            if r["checkpoint"] <= 0:
                continue
            k = checkpoints.index(r["checkpoint"])
            if r["target"] == "val":
                accuracy, n = first_problems(r, val_problems)
                values[row, seed, k, :4] = (accuracy, n, r["flops"], n * per_problem)
            elif r["target"] in ("test", "ood"):
                values[row, seed, k, OBJECTIVES.index(f"{r['target']}_accuracy")] = (
                    r["accuracy"])
    hyperparameters = pd.DataFrame([knobs[c] for c in ids], columns=list(AXES))
    space = {a: choice(sorted({knobs[c][a] for c in ids})) for a in AXES}
    blackbox = BlackboxTabular(
        hyperparameters=hyperparameters, configuration_space=space,
        fidelity_space={FIDELITY: randint(1, units)}, objectives_evaluations=values,
        fidelity_values=resource, objectives_names=list(OBJECTIVES))
    return BankBlackbox(blackbox, tuple(ids), seeds, float(bank["budget_flops"]), units)


def one_seed(bank: BankBlackbox, draw: dict[str, int]) -> BankBlackbox:
    """The one-seed blackbox of a replicate: each config's curve from its seed
    ``draw[config id]`` (a bank seed), on seed index 0."""
    from syne_tune.blackbox_repository.blackbox_tabular import BlackboxTabular

    bb = bank.blackbox
    rows = [bank.config_ids.index(c) for c in draw]
    index = [bank.seeds.index(draw[c]) for c in draw]
    values = bb.objectives_evaluations[rows, index][:, None]
    cut = BlackboxTabular(
        hyperparameters=bb.hyperparameters.iloc[rows].reset_index(drop=True),
        configuration_space=bb.configuration_space, fidelity_space=bb.fidelity_space,
        objectives_evaluations=values, fidelity_values=bb.fidelity_values,
        objectives_names=bb.objectives_names)
    return BankBlackbox(cut, tuple(draw), (0,), bank.full_flops, bank.units)


def save(bank: BankBlackbox, path: Path) -> None:
    """Write the blackbox to ``path`` (a folder) with Syne Tune's ``serialize``."""
    from syne_tune.blackbox_repository.blackbox_tabular import serialize

    serialize({"bank": bank.blackbox}, str(path), metadata={
        "config_ids": list(bank.config_ids), "seeds": list(bank.seeds),
        "full_flops": bank.full_flops, "units": bank.units})


def load(path: Path) -> BankBlackbox:
    """Read a blackbox ``save`` wrote, with Syne Tune's ``deserialize``."""
    from syne_tune.blackbox_repository.blackbox_tabular import deserialize
    from syne_tune.blackbox_repository.serialize import deserialize_metadata

    meta = deserialize_metadata(Path(path))
    return BankBlackbox(deserialize(str(path))["bank"], tuple(meta["config_ids"]),
                        tuple(meta["seeds"]), float(meta["full_flops"]), int(meta["units"]))
