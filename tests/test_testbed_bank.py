"""bench/testbed_bank.py's stage rules: which configs the prompts-per-step and 4F stages
run, from the F grid's leaders (on a made-up table of seed means)."""

import json
from pathlib import Path

import pytest

from bench.science import bank_runs as bank


def means_where(leader_at):
    """Seed means at every checkpoint: each (size, reward)'s (G, mu) scores G/100 + mu/1000,
    except ``leader_at(size, reward, fraction)``, which scores 1."""
    out = {}
    for f in bank.FRACTIONS:
        at = {}
        for m in bank.SIZES:
            for r in bank.REWARDS:
                for g in bank.GROUPS:
                    for mu in bank.EPOCHS:
                        lead = leader_at(m, r, f) == (g, mu)
                        at[(m, r, g, mu, bank.DEFAULT_PROMPTS, bank.F_FLOPS)] = (
                            1.0 if lead else g / 100 + mu / 1000)
        out[round(f, 6)] = at
    return out


def test_the_later_stages_run_the_leaders_at_f_and_below_plus_the_largest_search(
        monkeypatch, tmp_path):
    # tiny-m/rule: G2 mu1 leads below F/4, G4 mu2 from there; everything else: its default
    def leader_at(m, r, f):
        if (m, r) == ("tiny-m", "rule"):
            return (2, 1) if f < 0.25 else (4, 2)
        return (8, 4)
    monkeypatch.setattr(bank, "seed_means", lambda folder, seeds=3: means_where(leader_at))
    (tmp_path / bank.BANK).mkdir()
    prompts, wide = bank.later_stages(tmp_path / bank.BANK)
    # prompts per step 4, 8 (again) and 16 at each (size, reward)'s leader at F, 3 seeds
    # each, in the stage's own folder
    assert {(c.model, c.reward, c.group_size, c.update_epochs) for c in prompts.cells} == {
        ("tiny-m", "rule", 4, 2), ("tiny-m", "prm-tiny-s", 8, 4),
        ("tiny-l", "rule", 8, 4), ("tiny-l", "prm-tiny-s", 8, 4)}
    assert len(prompts.cells) == 4 * 3 * 3
    assert {c.prompts_per_step for c in prompts.cells} == {4, 8, 16}
    assert prompts.folder == bank.BANK_PROMPTS
    assert {c.folder for c in prompts.cells} == {bank.BANK_PROMPTS}
    # 4F, rule only: the leader at F, every smaller checkpoint's leader, and G16 mu1
    picks = {(c.model, c.group_size, c.update_epochs) for c in wide.cells}
    assert picks == {("tiny-m", 4, 2), ("tiny-m", 2, 1), ("tiny-m", 16, 1),
                     ("tiny-l", 8, 4), ("tiny-l", 16, 1)}
    assert all(c.reward == "rule" and c.budget_flops == 4 * bank.F_FLOPS for c in wide.cells)
    assert len(wide.cells) == 5 * 3 and wide.folder == bank.BANK_4X
    # one command per config and seed, seed by seed: a stage stopped early is balanced
    assert [{c.seed for c in cells} for _, cells in prompts.commands] == [
        {s} for s in bank.SEEDS for _ in range(4)]
    assert [len(cells) for _, cells in prompts.commands] == [3] * 12
    assert [cells[0].seed for _, cells in wide.commands] == [s for s in bank.SEEDS
                                                             for _ in range(5)]
    assert all(f"pilot.seed={cells[0].seed}" in command for command, cells in wide.commands)


def test_the_later_stages_wait_for_every_f_grid_config(monkeypatch, tmp_path):
    full = means_where(lambda m, r, f: (2, 1))
    one_short = {f: dict(list(at.items())[1:]) for f, at in full.items()}
    monkeypatch.setattr(bank, "seed_means", lambda folder, seeds=3: one_short)
    (tmp_path / bank.BANK).mkdir()
    assert bank.later_stages(tmp_path / bank.BANK) is None


def write_cell(folder: Path, name: str, seed: int, accuracy: float, ok: bool = True):
    cell = folder / "cells" / name
    cell.mkdir(parents=True)
    spec = {"model": "tiny-m", "reward": {"name": "rule"}, "group_size": 2,
            "update_epochs": 1, "prompts_per_step": 8, "seed": seed,
            "budget_flops": bank.F_FLOPS}
    (cell / "spec.json").write_text(json.dumps(spec))
    (cell / "summary.json").write_text(json.dumps({"status": "ok" if ok else "failed"}))
    rows = [{"kind": "eval", "target": t, "checkpoint": 1.0, "accuracy": a}
            for t, a in (("val", accuracy), ("ood", 0.0))]
    (cell / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_seed_means_averages_val_over_ok_seeds_and_waits_for_three(tmp_path: Path):
    write_cell(tmp_path, "a", 0, 0.2)
    write_cell(tmp_path, "b", 1, 0.4)
    write_cell(tmp_path, "c", 2, 0.9, ok=False)  # failed: not a seed yet
    config = ("tiny-m", "rule", 2, 1, 8, bank.F_FLOPS)
    assert bank.seed_means(tmp_path) == {1.0: {}}  # 2 of 3 seeds: no mean
    assert bank.seed_means(tmp_path, seeds=1) == {1.0: {config: pytest.approx(0.3)}}
    write_cell(tmp_path, "d", 2, 0.6)
    assert bank.seed_means(tmp_path) == {1.0: {config: pytest.approx(0.4)}}


def fake_sweeps(monkeypatch, later: bank.Stage) -> list[tuple]:
    """The F grid done and ``later`` the only later stage; ``race sweep`` recorded (the
    list returned) and marking every cell of ``later`` done."""
    done = {c: 60.0 for s in map(bank.f_stage, bank.SEEDS) for c in s.cells}
    monkeypatch.setattr(bank, "later_stages", lambda folder, seeds=3: [later])
    monkeypatch.setattr(bank, "progress",
                        lambda root, plan=None: bank.Progress(dict(done), {}))
    swept = []

    def sweep(*args, **_):
        swept.append(args)
        done.update(dict.fromkeys(later.cells, 60.0))
    monkeypatch.setattr(bank, "race", sweep)
    return swept


def test_run_through_a_stage_stops_before_the_next_one_starts(monkeypatch, tmp_path):
    """The F grid done: ``--through 'F seed 2'`` returns without a sweep of the later
    stages; without it, the next stage's sweep starts."""
    later = bank.Stage("prompts per step", bank.BANK, (
        (("model=tiny-m",), (bank.Cell("tiny-m", "rule", 2, 1, 4, 0, bank.F_FLOPS),)),
        (("model=tiny-l",), (bank.Cell("tiny-l", "rule", 2, 1, 4, 0, bank.F_FLOPS),))))
    swept = fake_sweeps(monkeypatch, later)
    bank.run(tmp_path, through="F seed 2")
    assert swept == []
    bank.run(tmp_path)
    assert sorted(a[1] for a in swept) == ["model=tiny-l", "model=tiny-m"]


def test_run_skips_a_stage_command_whose_cells_are_all_done(monkeypatch, tmp_path):
    """After a stop in a stage's second command, a rerun starts at that command: the
    first one's sweep would count the second's unfinished cells as its failures."""
    first = bank.Cell("tiny-m", "rule", 2, 1, 4, 0, bank.F_FLOPS)
    second = bank.Cell("tiny-l", "rule", 2, 1, 4, 0, bank.F_FLOPS)
    done = {c: 60.0 for s in map(bank.f_stage, bank.SEEDS) for c in s.cells} | {first: 60.0}
    later = bank.Stage("prompts per step", bank.BANK, (
        (("model=tiny-m",), (first,)), (("model=tiny-l",), (second,))))
    monkeypatch.setattr(bank, "later_stages", lambda folder, seeds=3: [later])
    monkeypatch.setattr(bank, "progress",
                        lambda root, plan=None: bank.Progress(dict(done), {}))
    swept = []

    def sweep(*args, **_):
        swept.append(args)
        done[second] = 60.0
    monkeypatch.setattr(bank, "race", sweep)
    bank.run(tmp_path)
    assert len(swept) == 1 and "model=tiny-l" in swept[0]


def test_run_sweeps_a_stages_commands_two_at_a_time_with_one_slot_each(monkeypatch, tmp_path):
    """Several pending commands of a stage run ``WORKERS`` at once, one slot and one
    thread a pilot each; a lone command keeps every slot."""
    cells = [bank.Cell("tiny-m", "rule", g, 1, 8, 0, 4 * bank.F_FLOPS) for g in (2, 4, 16)]
    done = {c: 60.0 for s in map(bank.f_stage, bank.SEEDS) for c in s.cells}
    later = bank.Stage("4F", bank.BANK_4X, tuple(
        ((f"grid.group_size={c.group_size}",), (c,)) for c in cells))
    monkeypatch.setattr(bank, "later_stages", lambda folder, seeds=3: [later])
    monkeypatch.setattr(bank, "progress",
                        lambda root, plan=None: bank.Progress(dict(done), {}))
    swept = []

    def sweep(*args, **kwargs):
        assert kwargs == {"check": False}
        swept.append(args)
        done.update(dict.fromkeys(cells, 60.0))
    monkeypatch.setattr(bank, "race", sweep)
    bank.run(tmp_path)
    assert len(swept) == 3
    assert all(a[-2:] == ("launcher.slots=1", "launcher.threads_per_pilot=1") for a in swept)
    done.clear()
    done.update({c: 60.0 for s in map(bank.f_stage, bank.SEEDS) for c in s.cells})
    done.update(dict.fromkeys(cells[:2], 60.0))
    swept.clear()
    bank.run(tmp_path)
    assert len(swept) == 1 and "grid.group_size=16" in swept[0]
    assert not any(a.startswith("launcher.") for a in swept[0])


def test_the_f_grids_export_stands_for_its_cells_this_machine_lacks(monkeypatch, tmp_path):
    """A checkout with part of the F grid's cells: the export's cells count as done (its
    wall time unknown), the folder's own cell wins over the export's of the same id, and
    the prompts stage's 8 (another folder) is not done by the F grid's cell."""
    import gzip

    monkeypatch.setattr(bank, "RESULTS", tmp_path)
    write_cell(tmp_path / bank.BANK, "a", 0, 0.2)
    (tmp_path / bank.BANK / "cells" / "a" / "summary.json").write_text(
        json.dumps({"status": "ok", "wall_s": {"rollout": 50.0, "learning": 10.0}}))
    curves = {"model": "tiny-m", "reward": "rule", "group_size": 2, "update_epochs": 1,
              "prompts_per_step": 8, "budget_flops": bank.F_FLOPS,
              "evals": [{"target": "val", "checkpoint": 1.0, "accuracy": 0.6}]}
    export = tmp_path / "bank.json.gz"
    with gzip.open(export, "wt") as f:
        json.dump({"cells": [curves | {"cell_id": "a", "seed": 0},
                             curves | {"cell_id": "b", "seed": 1}]}, f)
    monkeypatch.setitem(bank.EXPORTS, bank.BANK, export)
    done = bank.progress(tmp_path).done
    here, there = (bank.Cell("tiny-m", "rule", 2, 1, 8, s, bank.F_FLOPS) for s in (0, 1))
    assert done == {here: 60.0, there: None}
    assert bank.seed_means(tmp_path / bank.BANK, seeds=2) == {
        1.0: {here.config: pytest.approx(0.4)}}
    assert bank.Cell("tiny-m", "rule", 2, 1, 8, 0, bank.F_FLOPS, bank.BANK_PROMPTS) not in done
    # a bank outside results/ (another --root) has no export
    other = tmp_path / "elsewhere"
    write_cell(other / bank.BANK, "a", 0, 0.2)
    assert set(bank.progress(other).done) == {here}


def test_run_sweeps_a_stage_seed_by_seed(monkeypatch, tmp_path):
    """A stage's seed-0 commands start before its seed-1 ones, whatever their length."""
    later = bank.Stage("4F", bank.BANK_4X, tuple(
        ((f"grid.group_size={g}", f"pilot.seed={s}"),
         (bank.Cell("tiny-m", "rule", g, 1, 8, s, 4 * bank.F_FLOPS),))
        for s, g in ((1, 2), (0, 16), (0, 4))))
    swept = fake_sweeps(monkeypatch, later)
    bank.run(tmp_path)
    assert swept[-1][:3] == ("sweep", "grid.group_size=2", "pilot.seed=1")


def test_progress_counts_a_cell_running_only_while_its_pilot_holds_the_run_lock(tmp_path):
    # two started cells of the 4F folder: one with its pilot alive (lock held), one whose
    # driver was stopped mid-pilot (saved progress, no lock): running 1, paused 1
    from race.store.claims import cell_lock

    def started(cell_id, seed):
        path = tmp_path / bank.BANK_4X / "cells" / cell_id
        path.mkdir(parents=True)
        spec = {"model": "tiny-m", "reward": {"name": "rule"}, "group_size": 2,
                "update_epochs": 1, "prompts_per_step": 8, "seed": seed,
                "budget_flops": 1.0e13}
        (path / "spec.json").write_text(json.dumps(spec))
        (path / "metrics.jsonl").write_text(
            json.dumps({"kind": "step", "charged_flops": 2.5e12}) + "\n")
        return path

    alive = started("a" * 12, 0)
    started("b" * 12, 1)
    with cell_lock(alive):
        state = bank.progress(tmp_path)
    assert {c.seed: share for c, share in state.running.items()} == {0: 0.25, 1: 0.25}
    assert [c.seed for c in state.live] == [0]
    assert bank.progress(tmp_path).live == set()  # lock released: both paused


def test_world_2s_bank_is_the_f_grid_alone_from_its_own_warm_start(tmp_path):
    """World 2 (bench/science/worlds.py): G 2-16 x mu 1, 2, both sizes and rewards, 3 seeds,
    every command with warmstart.seed=1, in its own folder; no later stages."""
    plan = bank.PLANS[2]
    all_stages, known = bank.stages(tmp_path, plan)
    assert known and [s.name for s in all_stages] == ["F seed 0", "F seed 1", "F seed 2"]
    assert sum(len(s.cells) for s in all_stages) == 96
    for stage in all_stages:
        (command, cells), = stage.commands
        assert "warmstart.seed=1" in command and stage.folder == "curve-bank-w2"
        assert "grid.group_size=2,4,8,16" in command and "grid.update_epochs=1,2" in command
        assert {c.folder for c in cells} == {"curve-bank-w2"}
    assert "warmstart.seed" not in " ".join(bank.f_stage(0).commands[0][0])
    assert bank.status_line(tmp_path, plan).startswith("bank w2 (world 2): 0/96 cells done")


def test_a_complete_bank_says_nothing_is_left(tmp_path, monkeypatch):
    """Every planned cell done (unpacked from the tarball: no wall times kept): the status
    says nothing is left, not that no cell has finished."""
    plan = bank.PLANS[2]
    cells = [c for s in bank.stages(tmp_path, plan)[0] for c in s.cells]
    monkeypatch.setattr(bank, "progress", lambda root, plan: bank.Progress(
        dict.fromkeys(cells), {}))
    line = bank.status_line(tmp_path, plan)
    assert line.startswith("bank w2 (world 2): 96/96 cells done") and "nothing left" in line
