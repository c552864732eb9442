"""The testbed's worlds, declared once: a world is one draw of the tiny family's warm start
(``warmstart.seed``) and the curve banks run from it.

A warm start is a random draw: the same recipe with another seed (or, before RACE shipped
its weights, on another machine) gives other weights, and another ranking of allocations.
A finding about the testbed is a finding about one world until it holds in two. World 1 is
the draw every earlier bank ran from (``warmstart.seed=0``, the weights RACE ships as its
default); world 2 (``warmstart.seed=1``) is a test set: its bank was started after what it
judges was frozen (``FROZEN``), and nothing is tuned on it.

``bench/testbed_bank.py`` builds a world's bank (``--world``), and ``bench/testbed.py``,
``bench/selection_replay.py`` and ``bench/prediction_coverage.py`` read each world's
banks from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parents[1] / "data"


@dataclass(frozen=True)
class World:
    """One warm-start draw and its banks (exports under ``bench/data``)."""

    number: int
    warmstart_seed: int
    f_bank: Path  # the F grid: every config of the bank's grid to F, 3 seeds
    more_banks: tuple[Path, ...] = ()  # other exports of this world (4F, prompts per step)
    # earlier banks of this world's warm start recipe, read for calibration only
    earlier_banks: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return f"world {self.number}"

    @property
    def banks(self) -> tuple[Path, ...]:
        """Every export of this world that exists, the F bank first."""
        return tuple(p for p in (self.f_bank, *self.more_banks) if p.exists())


WORLDS = {
    1: World(1, 0, DATA / "curve_bank_v4.json.gz",
             more_banks=(DATA / "curve_bank_v4_4x.json.gz",
                         DATA / "curve_bank_v4_prompts.json.gz"),
             earlier_banks=(DATA / "curve_bank.json.gz", DATA / "curve_bank_v3.json.gz",
                            DATA / "curve_bank_v3_4x.json.gz")),
    2: World(2, 1, DATA / "curve_bank_w2.json.gz"),
    3: World(3, 2, DATA / "curve_bank_w3.json.gz"),
}

# The commit that froze everything world 2 judges (selection defaults and guard
# thresholds, the prediction interval's calibration, bench/testbed.py's tests, the default
# grid and its rule) before world 2's first cell ran; world 2's bank export records it.
FROZEN = "e8563c952d56a29c89a6a94b9ebdde1135cbeb30"
# World 3's freeze (the commit that adds this line, before its first cell): the
# reliability thresholds (race.core.reliability.THRESHOLDS), the prediction at F
# (race.analysis.forecast.PERSISTENCE), the selection default (the ladder, unchanged) and
# everything FROZEN froze; world 3's export records the commit its cells ran from.
FROZEN_BY_WORLD = {2: FROZEN, 3: "fc5c35ca6c6398e717c0a43d48e06bc79d93e57c"}


def world(number: int) -> World:
    """``WORLDS[number]``, or exit with the worlds there are."""
    if number not in WORLDS:
        raise SystemExit(f"--world {number}: no such world; choose one of {sorted(WORLDS)}")
    return WORLDS[number]


def frozen_note(path: Path) -> str:
    """Whether the bank exported at ``path`` ran from the frozen commit (its export
    records the git sha of the code that ran each command)."""
    import gzip
    import json

    with gzip.open(path, "rt") as f:
        bank = json.load(f)
    shas = {bank.get("git_sha")} | {r.get("git_sha") for r in bank.get("runs", [])}
    shas.discard(None)
    ran = ", ".join(sorted(s[:10] for s in shas)) or "unknown"
    frozen = next((FROZEN_BY_WORLD.get(w.number, FROZEN) for w in WORLDS.values()
                   if w.f_bank.name == Path(path).name), FROZEN)
    verdict = "the frozen commit" if shas == {frozen} else f"NOT only the frozen {frozen[:10]}"
    return f"{path.name} ran from {ran}: {verdict}"
