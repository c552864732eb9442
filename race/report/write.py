"""Every file of one sweep's report (``race report``): the leaderboard, the compute card,
the plots and the selection, rendered from what :func:`race.analysis.sweep_analysis.analyse_sweep`
decided, each written atomically.

Files written into the sweep folder (docs/design.md, results contract): ``leaderboard.md``
/ ``.csv``, ``compute_card.md`` / ``.tex``, ``frontier.png``, ``curves.png``,
``phases.png``, ``sizes.png`` (what the full budget buys per size), ``selection.json``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from race.analysis.aggregate import increments, plain
from race.analysis.load import model_shapes
from race.analysis.surfaces import surface_records
from race.analysis.sweep_analysis import SweepAnalysis, analyse_sweep
from race.core.fmt import CHARGED_PHASES, fmt_flops
from race.core.fmt import md_table as _md_table
from race.core.fmt import share as _share
from race.core.stats import REPORT
from race.report import ladder_plots, plots
from race.report.answer import pick_tie
from race.report.buys import buys_figure, buys_markdown
from race.report.card import compute_card
from race.report.honesty import covers
from race.report.leaderboard import leaderboard_markdown, summary_text
from race.report.validation import validation_section
from race.store.io import read_result, write_csv, write_json, write_text
from race.store.pilots import counts_text
from race.store.sweep_files import SELECTION_JSON, SweepDir

# every file a report writes, by key
FILES = {"leaderboard_md": "leaderboard.md", "leaderboard_csv": "leaderboard.csv",
         "compute_card_md": "compute_card.md", "compute_card_tex": "compute_card.tex",
         "frontier_png": "frontier.png", "curves_png": "curves.png",
         "phases_png": "phases.png", "sizes_png": "sizes.png",
         "selection_json": SELECTION_JSON}


def write_report(sweep_dir: Path | str, *, n_boot: int = REPORT.n_boot,
                 level: float = REPORT.level, top_k: int = REPORT.top_k,
                 basis: str = REPORT.basis) -> dict:
    """Rank a sweep's pilots and write its leaderboard, compute card, plots and selection.

    Args:
        sweep_dir: a sweep folder (``results/<sweep_id>``, holding ``cells/``).
        n_boot: bootstrap resamples of each config's interval and of each response
            surface's optimum.
        level: interval coverage, e.g. 0.9.
        top_k: configs to select for full-budget validation.
        basis: "extrapolated" (sigmoid prediction at the full budget) or "observed"
            (pilot mean) for the selection.

    Returns:
        {"paths": {name: Path of each file written}, "summary": terminal summary (about 20
        lines), "target": the primary target, "selected": the selection, "totals": sweep
        FLOPs by phase (rollout, learning, feedback, eval) and "total" (charged)}.

    Raises:
        ValueError: no ok cell, results that mix tasks or budgets, a corrupt metrics line
            (naming file:line), or a bad argument.
    """
    result = analyse_sweep(sweep_dir, n_boot=n_boot, level=level, top_k=top_k, basis=basis)
    if result.card_only:
        return _card_only(result)
    sweep_dir, name, primary = result.sweep_dir, result.name, result.primary
    paths = {key: sweep_dir / file for key, file in FILES.items()}
    if result.buys is None or len(result.buys) < 2:  # no size comparison to draw
        paths.pop("sizes_png")
    board = pd.concat([c for c, _ in result.ranked.values()], ignore_index=True)
    if result.reliability:  # the ranking's verdict on every row, for a script to read
        board = board.assign(ranking_verdict=result.reliability["verdict"],
                             ranking_reliability=result.reliability["reliability"])
    write_csv(paths["leaderboard_csv"], board)
    write_text(paths["leaderboard_md"], leaderboard_markdown(result))
    full = float(result.ok["full_budget_flops"].iloc[0])
    buys = (buys_markdown(result.buys, full, whose="the pick's")
            if result.buys is not None and len(result.buys) else "")
    card, latex, totals = compute_card(name, increments(result.every_cell), result.ok,
                                       result.order, result.targets, model_shapes(sweep_dir),
                                       buys, refused=result.spend.get("refused", 0))
    write_text(paths["compute_card_md"], card)
    write_text(paths["compute_card_tex"], latex)
    _plots(result, paths)
    write_json(paths["selection_json"], _selection_record(result))
    comparison = SweepDir(sweep_dir).validate / "comparison.json"
    if comparison.is_file():  # a rerun of the report keeps the validation section
        validation_section(sweep_dir, read_result(
            comparison, "rerun `race validate` on the sweep folder to rewrite it"))
    every_cell = result.every_cell
    summary = summary_text(result, every_cell[every_cell["status"] == "ok"], totals, paths)
    return {"paths": paths, "summary": summary, "target": primary,
            "selected": result.selected, "totals": totals}


def _plots(result: SweepAnalysis, paths: dict[str, Path]) -> None:
    """frontier.png, curves.png (a ladder's: through every rung), phases.png and
    sizes.png (what the full budget buys per size)."""
    name, primary, configs = result.name, result.primary, result.primary_configs
    full = float(result.ok["full_budget_flops"].iloc[0])
    if result.ladder is not None and result.points:
        ladder_plots.frontier(paths["frontier_png"], result.fronts, result.points,
                              result.targets, primary, result.ladder, name)
        ladder_plots.curves(paths["curves_png"], result.points[primary], result.lineage_fits,
                            configs, result.ladder, primary, full, name,
                            predicted=result.predictions.get((result.pick or {}).get(
                                "config_id")))
    else:
        plots.frontier(paths["frontier_png"], result.fronts, result.evals, result.ok,
                       result.targets, primary, name)
        plots.curves(paths["curves_png"], configs, result.fits[primary], result.evals,
                     result.ok, primary, name)
    if "sizes_png" in paths:
        buys_figure(paths["sizes_png"], result.buys, full, name)
    ranks = dict(zip(configs["config_id"], configs["rank"]))
    plots.phases(paths["phases_png"], result.cells, result.order, ranks, name)


# what selection.json's ``rho`` says of every cell
RHO_KEYS = ("cell_id", "config_id", "model", "reward", "status", "rho_planned",
            "rho_realized")


def _no_nan(value):
    """``value`` with every NaN float None (strict JSON: a script's parser reads it)."""
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def _selection_record(result: SweepAnalysis) -> dict:
    """What selection.json holds: the pick (None, with ``pick_reason``, where nothing
    learned or the lead is a tie), the choices, why, and what was left out; each chosen
    config's prediction at the full budget; every cell's rho and the response surface's
    recommendation per (model, reward)."""
    excluded = [{"cell_id": str(r["cell_id"]), "status": str(r["status"]),
                 "error": None if pd.isna(r.get("error")) else str(r.get("error"))}
                for _, r in result.excluded.iterrows()]
    predicted, chosen = result.predictions, [c["config_id"] for c in result.selected]
    tie = pick_tie(result) if result.pick else []
    pick = None if result.no_pick or tie or not chosen else chosen[0]
    reason = (result.no_pick or (f"a tie of {', '.join(tie)} on {result.primary}: no "
                                 f"winner by order" if tie else "")
              or ("" if chosen else "no config selected"))
    return {"target": result.primary, "basis": result.basis, "k": result.top_k,
            "pick": pick, "pick_reason": reason,
            # whether the pilots can rank the configs (race.analysis.reliability)
            "reliability": _no_nan(result.reliability),
            "pick_provisional": result.reliability.get("verdict", "can rank") != "can rank",
            "intervals_cover": covers(result),
            "selected": result.selected, "by_target": result.by_target,
            # what race validate checks the full-budget runs against
            "predicted_at_full": {c: predicted[c] for c in chosen if c in predicted},
            "excluded": excluded, "warm_starts": result.starts,
            "guards_fired": result.guards_fired,
            "rho": [{key: plain(r.get(key)) for key in RHO_KEYS}
                    for r in result.every_cell.to_dict("records")],
            "response_surface": surface_records(result.surfaces)}


def write_failures(sweep_dir: Path | str, cells: pd.DataFrame) -> Path:
    """``leaderboard.md`` of a sweep with no ok cell: every cell with its status and
    error (nothing to rank), so that the failures are read where the ranking would be.
    Returns its path."""
    sweep_dir = Path(sweep_dir)
    columns = [c for c in ("cell_id", "model", "reward", "group_size", "update_epochs",
                           "seed", "budget_flops", "status", "error") if c in cells]
    rows = [[f"`{r['cell_id']}`" if c == "cell_id" else
             fmt_flops(r[c]) if c == "budget_flops" and pd.notna(r[c]) else
             str(r[c]).replace("|", "\\|").replace("\n", " ") for c in columns]
            for _, r in cells.iterrows()]
    status = cells["status"] if len(cells) else pd.Series(dtype=str)
    text = [f"# RACE leaderboard: {sweep_dir.resolve().name}",
            f"No ok cell to rank: {int((status != 'ok').sum())} of {len(cells)} cell(s) did "
            f"not finish ok ({counts_text(status).split(', ', 1)[1]}). Fix what the errors "
            f"say, then "
            f"rerun the same `race sweep` command: finished cells are kept, the others run "
            f"again.",
            _md_table(columns, rows, "l" * len(columns)) if rows else "No cells."]
    path = sweep_dir / FILES["leaderboard_md"]
    write_text(path, "\n\n".join(text) + "\n")
    return path


def _card_only(result: SweepAnalysis) -> dict:
    """The compute card of runs that carry RACE's ledger but no RACE held-out evals (TRL
    runs tracked by race.integrations.trl): ranking, frontier and selection need those."""
    sweep_dir, name, cells, ok = result.sweep_dir, result.name, result.every_cell, result.ok
    paths = {key: sweep_dir / FILES[key] for key in ("compute_card_md", "compute_card_tex")}
    card, latex, totals = compute_card(name, increments(cells), ok, ok["cell_id"].tolist(), [])
    write_text(paths["compute_card_md"], card)
    write_text(paths["compute_card_tex"], latex)
    charged = totals["total"]
    split = ", ".join(f"{p} {_share(totals[p], charged)}" for p in CHARGED_PHASES)
    summary = "\n".join([
        f"RACE report: {name}",
        f"runs: {len(ok)} ok of {len(cells)}; FLOPs {fmt_flops(charged)} charged ({split}) + "
        f"{fmt_flops(totals['eval'])} eval",
        "no RACE held-out evals (runs of another trainer): the compute card only; the "
        "leaderboard, frontier and selection need pilots' checkpoint evals",
        f"wrote {', '.join(p.name for p in paths.values())} in {sweep_dir}"])
    return {"paths": paths, "summary": summary, "target": None, "selected": [],
            "totals": totals}
