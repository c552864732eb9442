"""How often the interval a report prints for the pick at the full budget holds the score
a full run reaches there.

A report extrapolates the pick's curve to the full budget F: a ladder's sigmoid through
its rungs, a flat sweep's through its pilot's checkpoints, with a 90% interval
(:func:`race.analysis.curves.full_budget_interval`). This bench replays that on the curve
banks (``bench/curve_bank.py``: the embedded grid run to F with dense checkpoints, several
seeds), cell by cell: one cell is one config's seed, the lineage a one-seed ladder runs.
It reads the cell's ``val`` curve where the default ladder reads it: the warm start and
the rung ends F/48, F/24, F/12, F/6 (:data:`race.core.rungs.DEFAULT_RUNGS`; a bank without
a checkpoint at a rung end: its last checkpoint below it), each on the first 200 problems
(the pilots' ``pilot.select_examples``; a bank without per-problem scores: all it scored),
fits the sigmoid through them with the report's own code
(:func:`race.analysis.ladder_curves.lineage_fits`), and checks whether the interval holds
the cell's own score at F (on every problem the bank scored there; ``race validate``
scores 1,000). A fit that falls back (too few points, a flat curve) makes no prediction
and is not counted. The same is done for a flat sweep's 1/16 pilot (checkpoints F/64 ...
F/16, the default ``pilot.fraction`` and ``pilot.checkpoints``).

The interval is the prediction plus the 5th and 95th percentiles of the sigmoid's error
(score at F minus prediction) per decade of extrapolation, calibrated on every cell of the
testbed's world 1 (``bench/worlds.py``: the four banks run before world 2) and shipped in
``race/analysis/curves.py`` (``EXTRAPOLATION_ERROR``), frozen before world 2's bank ran.
The percentiles world 1 gives are printed beside the shipped ones, with the in-sample
coverage (not a test). The test is forward: the shipped interval on world 2's bank, which
nothing was calibrated on (target: at least 0.85), with a 90% interval from a bootstrap
over configs (a config's seeds are not independent outcomes). Each bank's line also gives
the coverage on the alternating halves of its configs within each (size, reward) (the
earlier check; the halves are no longer held out). Before the calibrated band, a report
printed the sigmoid's own interval (its parameters' uncertainty), whose coverage is
printed as ``before``.

Usage: ``python bench/prediction_coverage.py [--bank PATH ...] [--check PATH ...]``
(default: world 1's banks ``curve_bank.json.gz``, ``curve_bank_v3.json.gz``,
``curve_bank_v3_4x.json.gz``, ``curve_bank_v4.json.gz``; checked on world 2's
``curve_bank_w2.json.gz`` where it exists).
Last line: ``coverage_90_forward=... coverage_90_world1=... before=... width=...
cells=...``: the shipped interval's coverage on world 2 (``n/a`` before its bank exists),
in sample on world 1, the sigmoid's own interval's on world 1, the mean width of the
interval and world 1's cells with a prediction.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import add_quick
from bench.curve_bank import read_bank
from bench.worlds import WORLDS, frozen_note
from race.analysis.curves import EXTRAPOLATION_ERROR, fit_curve, full_budget_interval
from race.analysis.ladder_curves import lineage_fits
from race.config.schema import PilotConfig
from race.core.rungs import DEFAULT_RUNGS
from race.core.specs import RunSpec

BANKS = [*WORLDS[1].earlier_banks, WORLDS[1].f_bank]  # world 1: the calibration
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunSpec)}
TARGET = _DEFAULTS["select_target"]  # what selection reads and the report predicts
PROBLEMS = _DEFAULTS["select_examples"]  # problems a pilot scores on it
FLAT = tuple(PilotConfig.fraction * c for c in _DEFAULTS["checkpoints"])  # a 1/16 pilot's
PERCENTILES = (5, 95)


def curve(cell: dict, reads: tuple[float, ...]) -> tuple[list, list, float, int]:
    """A cell's ``TARGET`` curve as a pilot reads it: the warm start and the last
    checkpoint at or below each fraction of ``reads``, on the first ``PROBLEMS`` problems
    (FLOPs charged, accuracies); its score at F and the problems that scored."""
    evals = sorted((e for e in cell["evals"] if e["target"] == TARGET),
                   key=lambda e: e["checkpoint"])
    chosen = {0}
    for fraction in reads:
        chosen.add(max(i for i, e in enumerate(evals) if e["checkpoint"] <= fraction + 1e-9))
    flops = [evals[i]["flops"] for i in sorted(chosen)]
    accuracy = [_accuracy(evals[i]) for i in sorted(chosen)]
    end = evals[-1]
    assert abs(end["checkpoint"] - 1.0) < 1e-9, f"{cell['cell_id']}: no score at F"
    return flops, accuracy, end["accuracy"], end["n"]


def _accuracy(row: dict) -> float:
    if "correct" not in row:
        return row["accuracy"]
    scored = row["correct"][:PROBLEMS]
    return sum(map(int, scored)) / len(scored)


def halves(cells: list[dict]) -> dict[str, int]:
    """config -> 0 (calibration half) or 1 (check half): alternating in id order within
    each (size, reward) of the bank."""
    groups = defaultdict(set)
    for cell in cells:
        groups[cell["model"], cell["reward"]].add(cell["config"])
    return {config: i % 2 for ids in groups.values() for i, config in enumerate(sorted(ids))}


def ladder_rows(cells: list[dict], full: float) -> pd.DataFrame:
    """Each cell's sigmoid through its rungs, as a report fits it, with its score at F."""
    points, truth = [], {}
    for cell in cells:
        flops, accuracy, truth[cell["cell_id"]], _ = curve(cell, DEFAULT_RUNGS)
        points += [{"config_id": cell["config"], "lineage": cell["cell_id"], "flops": x,
                    "accuracy": y} for x, y in zip(flops, accuracy)]
    fits = lineage_fits(pd.DataFrame(points), predict_at=full)
    return fits.assign(truth=fits["lineage"].map(truth))


def flat_rows(cells: list[dict], full: float) -> pd.DataFrame:
    """Each cell's sigmoid through a flat 1/16 pilot's checkpoints (what
    :func:`race.analysis.curves.fit_cells` fits), with its score at F."""
    rows = []
    for cell in cells:
        flops, accuracy, truth, _ = curve(cell, FLAT)
        fit = fit_curve(flops, accuracy, predict_at=full)
        lo, hi = full_budget_interval(fit, full)
        rows.append({"config_id": cell["config"], "method": fit.method,
                     "prediction": fit.prediction, "lo": fit.lo, "hi": fit.hi,
                     "full_lo": lo, "full_hi": hi, "last_flops": fit.last_flops,
                     "truth": truth})
    return pd.DataFrame(rows)


def coverage(rows: pd.DataFrame, lo: str = "full_lo", hi: str = "full_hi") -> tuple:
    """(share of ``truth`` inside [lo, hi], mean width, count) over the sigmoid fits."""
    fits = rows[rows["method"] == "sigmoid"]
    if fits.empty:
        return math.nan, math.nan, 0
    inside = (fits[lo] <= fits["truth"]) & (fits["truth"] <= fits[hi])
    return float(inside.mean()), float((fits[hi] - fits[lo]).mean()), len(fits)


def errors_per_decade(rows: pd.DataFrame, full: pd.Series) -> np.ndarray:
    """(score at F - prediction) / decades of extrapolation, per sigmoid fit."""
    fits = rows["method"] == "sigmoid"
    decades = np.log10(full[fits] / rows.loc[fits, "last_flops"])
    return ((rows.loc[fits, "truth"] - rows.loc[fits, "prediction"]) / decades).to_numpy()


def band(errors: np.ndarray, full: pd.Series, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the interval the percentiles of ``errors`` would give (a check of
    the calibration the other way round)."""
    low, high = np.percentile(errors, PERCENTILES)
    decades = np.log10(full / rows["last_flops"]).clip(lower=0)
    return rows.assign(full_lo=(rows["prediction"] + low * decades).clip(0, 1),
                       full_hi=(rows["prediction"] + high * decades).clip(0, 1))


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0%}"


def _quick(cells: list[dict]) -> list[dict]:
    """Two configs of each (size, reward), their first seed: the code path in seconds."""
    seen = defaultdict(list)
    for cell in sorted(cells, key=lambda c: c["config"]):
        group = seen[cell["model"], cell["reward"]]
        if cell["config"] not in group and len(group) < 2:
            group.append(cell["config"])
    keep = {c for group in seen.values() for c in group}
    first = {}
    for cell in cells:
        if cell["config"] in keep and first.get(cell["config"], math.inf) > cell["seed"]:
            first[cell["config"]] = cell["seed"]
    return [c for c in cells if first.get(c["config"]) == c["seed"]]


def one_bank(path: Path, quick: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A bank's ladder and flat fits, each row with its bank, F and half; printed."""
    bank = read_bank(path)
    cells = _quick(bank["cells"]) if quick else bank["cells"]
    full, half = bank["budget_flops"], halves(bank["cells"])
    ladder, flat = (rows.assign(bank=path.name, full=full, half=rows["config_id"].map(half))
                    for rows in (ladder_rows(cells, full), flat_rows(cells, full)))
    own, mine = coverage(ladder, "lo", "hi"), coverage(ladder)
    check, calib = coverage(ladder[ladder["half"] == 1]), coverage(ladder[ladder["half"] == 0])
    flat_check, flat_own = coverage(flat[flat["half"] == 1]), coverage(flat, "lo", "hi")
    print(f"bank {path.name}: {len(cells)} cells, F={full:.3g} FLOPs; {TARGET} on the "
          f"first {PROBLEMS} problems at the rung ends, {curve(cells[0], ())[3]} at F")
    print(f"  ladder: {own[2]} of {len(cells)} cells fitted; the sigmoid's own interval "
          f"covers {_pct(own[0])} (width {own[1]:.2f}); the calibrated one {_pct(mine[0])} "
          f"(width {mine[1]:.2f}): check half {_pct(check[0])} of {check[2]}, calibration "
          f"half {_pct(calib[0])} of {calib[2]}")
    print(f"  flat 1/16 pilot: check half {_pct(flat_check[0])} of {flat_check[2]} (width "
          f"{flat_check[1]:.2f}; the sigmoid's own interval {_pct(flat_own[0])})")
    return ladder, flat


def clustered_interval(rows: pd.DataFrame, draws: int = 2000) -> tuple[float, float]:
    """The 90% bootstrap interval of the coverage, resampling configs (a config's seeds
    share its curve, so they are not independent outcomes)."""
    fits = rows[rows["method"] == "sigmoid"]
    inside = ((fits["full_lo"] <= fits["truth"]) & (fits["truth"] <= fits["full_hi"]))
    by = inside.groupby(fits["config_id"]).agg(["sum", "count"]).to_numpy()
    rng = np.random.default_rng(0)
    pick = rng.integers(0, len(by), size=(draws, len(by)))
    shares = by[pick, 0].sum(axis=1) / by[pick, 1].sum(axis=1)
    return tuple(np.percentile(shares, PERCENTILES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bank", type=Path, action="append",
                        help="a calibration bank (repeat for several; default: world 1's, "
                             + ", ".join(p.name for p in BANKS) + ")")
    parser.add_argument("--check", type=Path, action="append",
                        help=f"a bank to check the shipped interval on (default: world 2's, "
                             f"{WORLDS[2].f_bank.name}, where it exists)")
    add_quick(parser, "two configs of each size and reward, one seed")
    args = parser.parse_args()
    ladders, flats = zip(*(one_bank(path, args.quick) for path in args.bank or BANKS))
    ladder, flat = pd.concat(ladders, ignore_index=True), pd.concat(flats, ignore_index=True)
    low, high = np.percentile(errors_per_decade(ladder, ladder["full"]), PERCENTILES)
    same = "same" if np.allclose((low, high), EXTRAPOLATION_ERROR, atol=5e-4) else \
        "a quick subset" if args.quick else "differ: the shipped band is frozen"
    print(f"calibration (every cell of world 1): error per decade of extrapolation, "
          f"{PERCENTILES[0]}th and {PERCENTILES[1]}th percentiles {low:+.3f}, {high:+.3f}; "
          f"race/analysis/curves.py ships {EXTRAPOLATION_ERROR[0]:+.3f}, "
          f"{EXTRAPOLATION_ERROR[1]:+.3f} ({same})")
    inside, before = coverage(ladder), coverage(ladder, "lo", "hi")
    print(f"  in sample (not a test): {_pct(inside[0])} of {inside[2]} (width "
          f"{inside[1]:.2f}); flat 1/16 pilots {_pct(coverage(flat)[0])}")
    checks = args.check or ([WORLDS[2].f_bank] if WORLDS[2].f_bank.exists() else [])
    forward = "n/a"
    if checks:
        rows = pd.concat([one_bank(path, args.quick)[0] for path in checks],
                         ignore_index=True)
        share, width, count = coverage(rows)
        lo, hi = clustered_interval(rows)
        forward = f"{share:.3f}"
        for path in checks:
            print(frozen_note(path))
        print(f"forward (calibrated on world 1, checked on {', '.join(p.name for p in checks)}"
              f", nothing refit): {_pct(share)} of {count} (width {width:.2f}); clustered by "
              f"config, 90% interval [{lo:.2f}, {hi:.2f}]; target >= 0.85")
    else:
        print("forward: world 2's bank is not here yet (python -m bench.testbed_bank "
              "--world 2 run, then bench/curve_bank.py)")
    print(f"coverage_90_forward={forward} coverage_90_world1={inside[0]:.3f} "
          f"before={before[0]:.3f} width={inside[1]:.3f} cells={inside[2]}")


if __name__ == "__main__":
    main()
