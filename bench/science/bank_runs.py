"""Build the testbed's curve bank v4 in stages that survive sessions, with a status line.

The v4 bank widens the v3 grid (G in {4, 8} x mu in {1, 2}) to the axes the paper names,
so that the best allocation has room to change with budget, size, reward and target:

- search: G in {2, 4, 8, 16}; learning: mu in {1, 2, 4}; sizes tiny-m and tiny-l (tiny-s
  falls under GRPO on this task, see docs/pilots.md); feedback: rule and prm-tiny-s;
  3 seeds; to F = 3.5e12 FLOPs with 12 checkpoints (F/96 ... F), scored on ``val`` (500
  problems), ``test`` and ``ood`` (200 each). lr stays fixed per size (the default 3e-4).
- prompts per step in {4, 16} (the grid's 8 is the middle) at each size and reward's
  leading (G, mu), the one with the best seed-mean ``val`` at F in the first stages, with
  8 run again beside them: the stage has its own folder, and every value of the axis runs
  on one machine (runs from one warm start part across machines, docs/pilots.md).
  Priced with ``race plan`` and measured: the F grid alone is 144 pilots of 4-25 minutes
  each on one core (G2 is the slowest: 16 completions a step), far above the 6 hours the
  bank was planned at, so the prompts-per-step axis runs at the leading configs only.
- 4F = 1.4e13 for the rule reward (PRM cells cost the same to run and the rule cells'
  budget axis is the one compared with the literature): per size, the config leading at
  F, every config leading at a smaller checkpoint, and the largest search (G16 mu1);
  3 seeds, in its own folder (a bank holds one full budget).

The rules that pick the later stages' configs were written down before any cell of the
bank had finished; nothing in the task, targets or grid changes after its results.

Stages run in this order (seed-major, so a bank stopped early is balanced across configs):
F seed 0, F seed 1, F seed 2, prompts per step, 4F. Each stage is one or more
``race sweep`` commands into ``results/curve-bank-v4`` (``-prompts`` for prompts per
step, ``-4x`` for 4F) with
``sweep.extend=true``: a rerun skips every ok cell (and every command whose cells are all
ok) and resumes the rest, so ``run`` continues where a stopped session left it. A later
stage has one command per config and seed (prompts per step: the seed's 4, 8 and 16 in
one command, so they run side by side), run seed by seed, two at a time with one slot
each: a stage stopped early is balanced across its configs too, and no core waits.
The F grid's export (``bench/data/curve_bank_v4.json.gz``) stands for its folder's cells
where this machine has not got them: its cells count as done, and the later stages'
configs are picked from it, so a checkout whose tarball lacks some F cells does not run
them again.

Usage::

    python -m bench.testbed_bank status     # cells done / total, running / paused, hours
                                            # left (later stages provisional until known)
    python -m bench.testbed_bank run        # the next stages, in order (resumes)
    python -m bench.testbed_bank run --through "F seed 2"   # ... stopping after the F grid
    python -m bench.testbed_bank pack       # ok cells + warm starts -> bench/data tarball
    python -m bench.testbed_bank unpack     # a fresh checkout: the tarball back in place

The warm starts the cells start from ship with RACE (``race/warmstart/shipped.py``: the
v4 bank's are ``warmstart.seed=0``, world 2's ``warmstart.seed=1``), so a later session on
another machine resumes from the same weights (a build is deterministic on one machine
only). ``pack`` can still keep a bank's warm starts in a tarball of their own (``starts``)
for a bank whose warm starts are not shipped. On a fresh checkout: ``unpack``, then
``run``; ``--world 2`` for world 2's bank (``bench/science/worlds.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import DATA, REPO, add_quick, race, scratch, use_scratch_cache
from bench.science.worlds import WORLDS, World
from race.store import io as results
from race.store.cell import CellDir, cell_dirs
from race.store.claims import running_pilot
from race.warmstart.cache import cache_dir

RESULTS = REPO / "results"
BANK = "curve-bank-v4"
BANK_4X = "curve-bank-v4-4x"
BANK_PROMPTS = "curve-bank-v4-prompts"
BANK_W2 = "curve-bank-w2"
BANK_W3 = "curve-bank-w3"
# a results/ folder's cells exported: they count as done where the folder lacks them
EXPORTS = {BANK: WORLDS[1].f_bank, BANK_W2: WORLDS[2].f_bank, BANK_W3: WORLDS[3].f_bank}
TARBALL = DATA / "curve-bank-v4-cells.tar.gz"
WARM_STARTS = None  # the v4 bank's warm starts ship with RACE (race/warmstart/shipped.py)
F_FLOPS = 3.5e12
WORKERS = 2  # pilots at once (launcher=local: one per core here)
CHECKPOINTS = ("[0.0104166667,0.0208333333,0.0416666667,0.0625,0.0833333333,0.125,"
               "0.1666666667,0.25,0.3333333333,0.5,0.75,1]")
COMMON = ("selection.policy=flat", "pilot.fraction=1", f"pilot.checkpoints={CHECKPOINTS}",
          "pilot.eval_targets=[val,test,ood]", "pilot.select_examples=500",
          "pilot.eval_examples=200", "sweep.extend=true")
SIZES, REWARDS = ("tiny-m", "tiny-l"), ("rule", "prm-tiny-s")
DEFAULT_PROMPTS = 8
GROUPS, EPOCHS, PROMPTS, SEEDS = (2, 4, 8, 16), (1, 2, 4), (4, DEFAULT_PROMPTS, 16), (0, 1, 2)
SELECT = "val"
FRACTIONS = tuple(float(x) for x in CHECKPOINTS.strip("[]").split(","))


@dataclass(frozen=True)
class Plan:
    """One world's bank: its F grid's folder and axes, whether the prompts-per-step and
    4F stages follow it, and where its cells (and warm starts) are packed."""

    world: World
    bank: str
    groups: tuple[int, ...]
    epochs: tuple[int, ...]
    later: bool  # the prompts-per-step and 4F stages (world 1's v4 bank)
    tarball: Path
    warm_starts: Path | None  # None: the world's warm starts ship with RACE

    @property
    def common(self) -> tuple[str, ...]:
        seed = self.world.warmstart_seed
        return COMMON + ((f"warmstart.seed={seed}",) if seed else ())

    @property
    def folders(self) -> tuple[str, ...]:
        return (self.bank, BANK_PROMPTS, BANK_4X) if self.later else (self.bank,)

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(f"F seed {s}" for s in SEEDS) + (
            ("prompts per step", "4F") if self.later else ())

    @property
    def label(self) -> str:
        return f"bank {self.bank.removeprefix('curve-bank-')} ({self.world.name})"


# World 2's bank (priced with race plan, 2026-12-07: 96 pilots to F): G 2-16 x mu 1, 2
# holds six default-shaped grids per size and reward for the replay, and the configs of
# world 1's size x reward interaction (G8 mu1 against G2 mu1); 3 seeds, F only.
PLANS = {1: Plan(WORLDS[1], BANK, GROUPS, EPOCHS, True, TARBALL, WARM_STARTS),
         2: Plan(WORLDS[2], BANK_W2, (2, 4, 8, 16), (1, 2), False,
                 DATA / "curve-bank-w2-cells.tar.gz", None),
         # world 3, shaped as world 2's (the test set of the reliability verdict and the
         # prediction at F, frozen before it: bench/science/worlds.py)
         3: Plan(WORLDS[3], BANK_W3, (2, 4, 8, 16), (1, 2), False,
                 DATA / "curve-bank-w3-cells.tar.gz", None)}
V4 = PLANS[1]


@dataclass(frozen=True)
class Cell:
    """One bank cell by its knobs (what ``spec.json`` says), budget in FLOPs, and the
    bank folder it is run in (the prompts-per-step stage runs the F grid's 8 again in its
    own)."""

    model: str
    reward: str
    group_size: int
    update_epochs: int
    prompts_per_step: int
    seed: int
    budget_flops: float
    folder: str = BANK

    @property
    def config(self) -> tuple:
        return (self.model, self.reward, self.group_size, self.update_epochs,
                self.prompts_per_step, self.budget_flops)


@dataclass(frozen=True)
class Stage:
    name: str
    folder: str
    # one (race sweep overrides, the cells they describe) pair a command
    commands: tuple[tuple[tuple[str, ...], tuple[Cell, ...]], ...]

    @property
    def cells(self) -> tuple[Cell, ...]:
        return tuple(c for _, cells in self.commands for c in cells)


def cell_of(spec: dict, folder: str = BANK) -> Cell:
    return Cell(spec["model"], spec["reward"]["name"], spec["group_size"],
                spec["update_epochs"], spec["prompts_per_step"], spec["seed"],
                float(spec["budget_flops"]), folder)


def exported(folder: Path) -> list[dict]:
    """The cells of ``folder``'s export (``bench/curve_bank.py``'s cell dicts: knobs at
    the top, ``evals`` rows); none where it has none, or lies outside ``results/`` (a
    bank built elsewhere, such as ``--quick``'s, is not the exported one)."""
    path = EXPORTS.get(folder.name)
    if path is None or not path.exists() or folder.parent.resolve() != RESULTS.resolve():
        return []
    with gzip.open(path, "rt") as f:
        return json.load(f)["cells"]


def export_cell(curves: dict, folder: str = BANK) -> Cell:
    return Cell(curves["model"], curves["reward"], curves["group_size"],
                curves["update_epochs"], curves.get("prompts_per_step") or DEFAULT_PROMPTS,
                curves["seed"], float(curves["budget_flops"]), folder)


def ok_cells(folder: Path) -> dict[str, tuple[Cell, list[dict], float | None]]:
    """cell id -> (cell, its eval rows, wall seconds) for each ok cell of ``folder``, and
    of its export where the folder lacks the cell (wall seconds unknown: None)."""
    out = {}
    for path in cell_dirs(folder) if folder.is_dir() else []:
        if CellDir(path).is_ok():
            spec = results.read_json(path / "spec.json")
            rows = [r for r in results.read_jsonl(path / "metrics.jsonl") if r["kind"] == "eval"]
            summary = results.read_json(path / "summary.json")
            out[path.name] = (cell_of(spec, folder.name), rows,
                              sum(summary.get("wall_s", {}).values()))
    for curves in exported(folder):
        out.setdefault(curves["cell_id"], (export_cell(curves, folder.name),
                                           curves["evals"], None))
    return out


def f_stage(seed: int, plan: Plan = V4) -> Stage:
    grid = (f"model={','.join(SIZES)}", f"reward={','.join(REWARDS)}",
            f"grid.group_size={','.join(map(str, plan.groups))}",
            f"grid.update_epochs={','.join(map(str, plan.epochs))}", f"pilot.seed={seed}")
    cells = tuple(Cell(m, r, g, mu, DEFAULT_PROMPTS, seed, F_FLOPS, plan.bank) for m in SIZES
                  for r in REWARDS for g in plan.groups for mu in plan.epochs)
    return Stage(f"F seed {seed}", plan.bank,
                 (((*plan.common, f"budget={F_FLOPS:g}", *grid), cells),))


def seed_means(folder: Path, seeds: int = len(SEEDS)) -> dict[float, dict[tuple, float]]:
    """Checkpoint -> each config's seed-mean ``val`` accuracy there (configs with
    ``seeds`` seeds ok: all 3 by default; 1: the provisional means ``status`` prices the
    later stages with), read in one pass over the folder."""
    by: dict[float, dict[tuple, list[float]]] = {}
    for cell, rows, _ in ok_cells(folder).values():
        for row in rows:
            if row["target"] == SELECT:
                at = by.setdefault(round(row["checkpoint"], 6), {})
                at.setdefault(cell.config, []).append(row["accuracy"])
    return {f: {k: statistics.mean(v) for k, v in at.items() if len(v) >= seeds}
            for f, at in by.items()}


def leaders(means: dict[tuple, float]) -> dict[tuple[str, str], tuple[int, int]] | None:
    """(size, reward) -> the (G, mu) leading among ``means`` (one checkpoint's
    :func:`seed_means`) on the grid's prompts per step (None until every F-grid config
    has its 3 seeds)."""
    means = {k: v for k, v in means.items() if k[4] == DEFAULT_PROMPTS and k[5] == F_FLOPS}
    if len(means) < len(SIZES) * len(REWARDS) * len(GROUPS) * len(EPOCHS):
        return None
    best: dict[tuple[str, str], tuple[float, tuple[int, int]]] = {}
    for (model, reward, g, mu, _, _), mean in means.items():
        if mean > best.get((model, reward), (-1.0, None))[0]:
            best[(model, reward)] = (mean, (g, mu))
    return {k: v[1] for k, v in best.items()}


def later_stages(folder: Path, seeds: int = len(SEEDS)) -> list[Stage] | None:
    """The prompts-per-step and 4F stages, from the F grid's leaders (None until known):
    on every config's 3 seeds, or (``seeds=1``) provisionally on the seeds done so far."""
    means = seed_means(folder, seeds)
    at_f = leaders(means.get(1.0, {}))
    if at_f is None:
        return None
    prompts = [((*COMMON, f"budget={F_FLOPS:g}", f"model={m}", f"reward={r}",
                 f"grid.group_size={g}", f"grid.update_epochs={mu}",
                 f"grid.prompts_per_step={','.join(map(str, PROMPTS))}", f"pilot.seed={s}"),
                tuple(Cell(m, r, g, mu, p, s, F_FLOPS, BANK_PROMPTS) for p in PROMPTS))
               for s in SEEDS for (m, r), (g, mu) in sorted(at_f.items())]
    wide = []
    for model in SIZES:
        picks = {at_f[(model, "rule")], (max(GROUPS), 1)}
        for f in FRACTIONS:
            picks.add(leaders(means[round(f, 6)])[(model, "rule")])
        wide += [((*COMMON, f"budget={4 * F_FLOPS:g}", f"model={model}", "reward=rule",
                   f"grid.group_size={g}", f"grid.update_epochs={mu}", f"pilot.seed={s}"),
                  (Cell(model, "rule", g, mu, DEFAULT_PROMPTS, s, 4 * F_FLOPS, BANK_4X),))
                 for g, mu in sorted(picks) for s in SEEDS]
    wide.sort(key=lambda command: command[1][0].seed)
    return [Stage("prompts per step", BANK_PROMPTS, tuple(prompts)),
            Stage("4F", BANK_4X, tuple(wide))]


def stages(root: Path, plan: Plan = V4) -> tuple[list[Stage], bool]:
    """Every stage known so far, and whether the later ones are (they wait on the F grid)."""
    first = [f_stage(s, plan) for s in SEEDS]
    if not plan.later:
        return first, True
    later = later_stages(root / BANK)
    return first + (later or []), later is not None


@dataclass
class Progress:
    done: dict[Cell, float | None]  # ok cells -> wall seconds (None: known from an export)
    running: dict[Cell, float]      # started cells -> share of the budget spent
    live: set[Cell] = field(default_factory=set)  # started cells whose pilot runs now


def progress(root: Path, plan: Plan = V4) -> Progress:
    out = Progress({}, {})
    for name in plan.folders:
        out.done.update({cell: wall for cell, _, wall in ok_cells(root / name).values()})
        for path in cell_dirs(root / name) if (root / name).is_dir() else []:
            if not (path / "spec.json").is_file() or CellDir(path).is_ok():
                continue
            cell = cell_of(results.read_json(path / "spec.json"), name)
            if (path / "metrics.jsonl").is_file():
                rows = [r for r in results.read_jsonl(path / "metrics.jsonl")
                        if r["kind"] == "step"]
                spent = rows[-1].get("charged_flops", 0.0) if rows else 0.0
                out.running[cell] = min(1.0, spent / cell.budget_flops)
            if running_pilot(path) is not None:
                out.live.add(cell)
    return out


def seconds_per_cell(cell: Cell, done: dict[Cell, float]) -> float | None:
    """Wall seconds ``cell`` should take on one core, from the finished cells most like it:
    its own config's other seeds, else its size and G (per FLOP), else every cell."""
    like = [lambda c: c.config == cell.config,
            lambda c: (c.model, c.group_size, c.prompts_per_step) == (
                cell.model, cell.group_size, cell.prompts_per_step),
            lambda c: c.model == cell.model, lambda c: True]
    for rule in like:
        rates = [s / c.budget_flops for c, s in done.items() if s is not None and rule(c)]
        if rates:
            return statistics.median(rates) * cell.budget_flops
    return None


def status_line(root: Path, plan: Plan = V4) -> str:
    all_stages, known = stages(root, plan)
    state = progress(root, plan)
    planned = [c for s in all_stages for c in s.cells]
    left = [c for c in planned if c not in state.done]
    estimates = [seconds_per_cell(c, state.done) for c in left]
    known_s = [e * (1 - state.running.get(c, 0.0)) for c, e in zip(left, estimates) if e]
    hours = ("nothing left" if not left else
             f"{sum(known_s) / WORKERS / 3600:.1f} h left at the measured rate "
             f"({WORKERS} at once)" if any(s is not None for s in state.done.values())
             else "no cell's time known yet: no rate")
    per_stage = ", ".join(f"{s.name} {sum(c in state.done for c in s.cells)}/{len(s.cells)}"
                          for s in all_stages)
    tail = "" if known else "; prompts-per-step and 4F stages: after the F grid's 3 seeds"
    guess = None if known else later_stages(root / BANK, seeds=1)
    if guess and state.done:
        cells = [c for s in guess for c in s.cells]
        seconds = sum(seconds_per_cell(c, state.done) or 0.0 for c in cells)
        tail += (f" (about {len(cells)} cells, {seconds / WORKERS / 3600:.1f} h, from the "
                 f"leaders on the seeds done so far)")
    paused = len(set(state.running) - state.live)  # stopped mid-pilot: a rerun resumes them
    return (f"{plan.label}: {len(planned) - len(left)}/{len(planned)} cells done, "
            f"{len(state.live)} running, {paused} paused; {hours}; {per_stage}{tail}")


STAGE_NAMES = V4.stage_names


def run(root: Path, extra: tuple[str, ...] = (), through: str | None = None,
        plan: Plan = V4) -> None:
    """Each stage's sweeps in order; a stage whose cells are all ok is skipped. With
    ``through`` (a stage's name), stop once that stage and those before it are done (for
    an export of the F grid before the later stages add cells to its folder)."""
    names = plan.stage_names
    last = names.index(through) + 1 if through else len(names)
    while True:
        all_stages, known = stages(root, plan)
        state = progress(root, plan)
        todo = [s for s in all_stages if any(c not in state.done for c in s.cells)]
        if todo and names.index(todo[0].name) >= last:
            print(f"stages through {through} done: " + status_line(root, plan))
            return
        if not todo:
            print(status_line(root, plan) + ("" if known else "; waiting on nothing: done"))
            return
        stage = todo[0]
        print(f"stage {stage.name}: " + status_line(root, plan), flush=True)
        # a command whose cells are all ok is not rerun
        run_commands([(command, cells) for command, cells in stage.commands
                      if any(c not in state.done for c in cells)], stage.folder, root, extra,
                     plan)
        if all(c in progress(root, plan).done for c in stage.cells):
            continue
        sys.exit(f"stage {stage.name}: some cells failed; read {root / stage.folder}/"
                 f"pilots.csv, then rerun (it resumes)")


def run_commands(commands: list[tuple[tuple[str, ...], tuple[Cell, ...]]], folder: str,
                 root: Path, extra: tuple[str, ...] = (), plan: Plan = V4) -> None:
    """``race sweep`` of each command into ``root/folder``: one command with every slot;
    several (a later stage's, one per config and seed) ``WORKERS`` at a time with one slot
    and one thread each, seed by seed and within a seed longest first, so that a stop
    leaves the configs with equal seeds and no core idles on a command's last cell.
    Concurrent sweeps of one folder are safe: cells are claimed, and ``sweep.json``
    keeps both commands' cells. A cell's spec (its id) does not hold the launcher's slots,
    and one thread a pilot is what ``slots=0`` gives on this bank's 2 cores."""
    def sweep(command: tuple[str, ...], *more: str) -> None:
        race("sweep", *command, f"sweep.name={folder}", f"sweep.out_dir={root}", *extra,
             *more, check=False)

    if len(commands) == 1:
        sweep(commands[0][0])
        return
    done = progress(root, plan).done
    order = sorted(commands, key=lambda cc: (min(c.seed for c in cc[1]), -sum(
        seconds_per_cell(c, done) or 0.0 for c in cc[1] if c not in done)))
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda cc: sweep(cc[0], "launcher.slots=1",
                                       "launcher.threads_per_pilot=1"), order))


def pack(root: Path, out: Path = TARBALL, starts: Path | None = WARM_STARTS,
         plan: Plan = V4) -> None:
    """Every ok cell's spec, summary and metrics into ``out``; the warm starts they used
    into ``starts`` once (they do not change while the bank is built, so later packs
    leave that file, and the repository's history, as they are; None: the world's warm
    starts ship with RACE)."""
    members: list[tuple[Path, str]] = []
    for name in plan.folders:
        folder = root / name
        for path in cell_dirs(folder) if folder.is_dir() else []:
            if CellDir(path).is_ok():
                members += [(path / f, f"{name}/cells/{path.name}/{f}")
                            for f in ("spec.json", "summary.json", "metrics.jsonl")]
    _write_tar(out, members)
    cells = sum(a.endswith("summary.json") for _, a in members)
    print(f"wrote {out}: {cells} ok cells ({out.stat().st_size / 1e6:.1f} MB)")
    if starts is None or starts.exists():
        return
    cache = cache_dir()  # race's own reading of RACE_CACHE_DIR (a ~ expanded)
    models = [(f, f"cache/{kind}/{model.name}/{f.name}") for kind in ("policies", "prms")
              for model in sorted((cache / kind).glob("*")) if (cache / kind).is_dir()
              for f in model.iterdir()]
    _write_tar(starts, models)
    print(f"wrote {starts}: the warm starts ({starts.stat().st_size / 1e6:.1f} MB)")


def _write_tar(out: Path, members: list[tuple[Path, str]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    with tarfile.open(tmp, "w:gz") as tar:
        for path, arcname in members:
            tar.add(path, arcname=arcname)
    tmp.replace(out)


def unpack(root: Path, tarball: Path = TARBALL, starts: Path | None = WARM_STARTS) -> None:
    """The cells under ``root`` and the warm starts into the model cache (an existing file
    is kept: a cache or cell already here wins)."""
    cache = cache_dir()  # race's own reading of RACE_CACHE_DIR (a ~ expanded)
    for path in (tarball, starts):
        if path is None or not path.exists():
            continue
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                head, _, rest = member.name.partition("/")
                target = (cache / rest) if head == "cache" else (root / member.name)
                if member.isfile() and not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as src:
                        target.write_bytes(src.read())
    print(f"unpacked {tarball.name} into {root} and the warm starts into {cache}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("status", "run", "pack", "unpack"), nargs="?",
                        default="status")
    parser.add_argument("--root", type=Path, default=RESULTS, help="the results folder")
    parser.add_argument("--through", choices=STAGE_NAMES, default=None,
                        help="run: stop once this stage is done (default: run them all)")
    parser.add_argument("--world", type=int, choices=sorted(PLANS), default=1,
                        help="whose bank (bench/science/worlds.py): 1, the v4 bank (default), or 2")
    add_quick(parser, "status, pack and unpack of a one-cell bank of a 2-step tiny-s pilot")
    args = parser.parse_args(argv)
    if args.quick:
        quick()
        return
    plan = PLANS[args.world]
    {"status": lambda: print(status_line(args.root, plan)),
     "run": lambda: run(args.root, through=args.through, plan=plan),
     "pack": lambda: pack(args.root, plan.tarball, plan.warm_starts, plan),
     "unpack": lambda: unpack(args.root, plan.tarball, plan.warm_starts)}[args.action]()


def quick() -> None:
    """The status line, pack and unpack on a one-cell bank of a miniature pilot."""
    from bench.common import QUICK_PILOT, merged, quick_policy

    use_scratch_cache()
    root = scratch("testbed-bank")
    race("sweep", *merged(QUICK_PILOT, ["selection.policy=flat", "pilot.fraction=1",
                                       "launcher=inline", f"model.hf_id={quick_policy()}",
                                       f"sweep.out_dir={root}", f"sweep.name={BANK}"]),
         capture=True)
    print(status_line(root))
    tarball, starts = root / "bank.tar.gz", root / "starts.tar.gz"
    pack(root, tarball, starts)
    fresh = scratch("testbed-bank-fresh")
    unpack(fresh, tarball, starts)
    assert len(cell_dirs(fresh / BANK)) == 1, "unpack lost the cell"
    print(status_line(fresh))


if __name__ == "__main__":
    main()
