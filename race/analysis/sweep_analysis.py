"""One sweep folder analysed: every decision a report renders, made here once.

:func:`analyse_sweep` reads the cells, ranks them on every evaluation target (a ladder:
on its first rung, where every config ran), fits their curves, draws the frontier, runs
the guards, and chooses the configs for validation by the sweep's own policy (the
ladder's picks, or the flat selection); :class:`SweepAnalysis` holds the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from race.analysis.aggregate import (
    check_consistent,
    frontier,
    guard_cells,
    rank_regimes,
    split_status,
    targets,
)
from race.analysis.curves import fit_cells
from race.analysis.forecast import config_forecasts
from race.analysis.headline import (
    best_by_target,
    flat_answer,
    full_run,
    ladder_answer,
    pick_profile,
    scored_problems,
)
from race.analysis.ladder_curves import ladder_points, lineage_fits
from race.analysis.learning import Learning, check_learning
from race.analysis.load import load_results, run_specs
from race.analysis.reliability import sweep_reliability
from race.analysis.response import ResponseSurface
from race.analysis.select import (
    ladder_guards,
    ladder_selection,
    ranked_reads,
    select_for_validation,
    warm_starts,
)
from race.analysis.size_buys import budget_buys
from race.analysis.spend import pilot_spend
from race.analysis.surfaces import response_surfaces
from race.core.guards import DEFAULT, GuardThresholds
from race.core.stats import BASES, REPORT
from race.errors import UsageError
from race.store.io import SWEEP_JSON_FIX, read_result
from race.store.pilots import counts_text
from race.store.sweep_files import SweepDir


@dataclass
class SweepAnalysis:
    """What a sweep's pilots say, as the analysis decided it (report renders this).

    ``every_cell``: each cell of every rung; ``cells``: the ranked ones (a ladder: its
    first rung); ``ok`` / ``excluded``: the ranked cells that finished ok, and the others;
    ``targets``: the evaluated targets, the ``primary`` one (selection's) first;
    ``ranked``: target -> (configs with their fits, regimes); ``fits``: target -> each
    cell's fit; ``fronts``: target -> the frontier; ``order``: the ok cells in rank order
    on the primary target; ``basis``: what selection read (``ladder``, or the flat
    ``extrapolated`` / ``observed``); ``checks``: every guard on every cell (flat only:
    the ladder checked its rungs as it ran); ``guards_fired``: the guards that fired.
    ``surfaces``: the response surface of the pilot score in rho per (model, reward,
    primary target), fitted to the ranked ok cells (:mod:`race.analysis.surfaces`).
    ``card_only``: runs of another trainer, with RACE's ledger but none of its evals
    (nothing to rank: the compute card only).
    ``unranked``: target -> why it has no ranking here: no ranked cell was scored on it
    past its warm start (a ladder's reported targets at its first rung), and a warm start
    ranks nothing trained. ``problems``: target -> (fewest, most) problems a read past
    the warm start scored (:func:`race.analysis.headline.scored_problems`, every rung).

    The answer a report opens with (:mod:`race.analysis.headline`): ``pick`` (the first
    selected config with its regime, rho and FLOP split), ``runner_up`` (with the
    pick's lead over it), ``findings`` (the best allocation by size, reward, target and,
    on a ladder, rung budget; ``by_target``: its target rows in one line), ``buys``
    (what the full budget buys at each size with the pick's recipe,
    :func:`race.analysis.size_buys.budget_buys`; ``buys_note``: why it is empty) and
    ``full`` (the pick's size's row of it, with its measured FLOP/s).
    ``learning``: per config, whether it learned (:mod:`race.analysis.learning`); where
    none did, ``no_pick`` says so with the likely causes, and nothing is selected.
    ``spend``: the pilot compute as spent beside the plan
    (:func:`race.analysis.spend.pilot_spend`). ``reliability``: whether the pilots can
    rank the configs, read from their own reads (:mod:`race.analysis.reliability`).
    ``every_eval``: every rung's checkpoint evals; a ladder's ``points`` (target ->
    :func:`race.analysis.ladder_curves.ladder_points`) and ``lineage_fits`` (its
    lineages' curve fits on the primary target) are what its figures draw, and its
    ``fronts`` span every rung.
    """

    sweep_dir: Path
    every_cell: pd.DataFrame
    cells: pd.DataFrame
    ok: pd.DataFrame
    excluded: pd.DataFrame
    evals: pd.DataFrame
    level: float
    top_k: int
    card_only: bool = False
    targets: list[str] = field(default_factory=list)
    primary: str | None = None
    ranked: dict = field(default_factory=dict)
    fits: dict = field(default_factory=dict)
    fronts: dict = field(default_factory=dict)
    by_target: dict = field(default_factory=dict)
    unranked: dict[str, str] = field(default_factory=dict)
    problems: dict[str, tuple[int, int]] = field(default_factory=dict)
    starts: dict = field(default_factory=dict)
    ladder: dict | None = None
    basis: str = ""
    checks: pd.DataFrame | None = None
    guards_fired: list = field(default_factory=list)
    selected: list = field(default_factory=list)
    reliability: dict = field(default_factory=dict)
    order: list = field(default_factory=list)
    surfaces: dict[tuple, ResponseSurface] = field(default_factory=dict)
    every_eval: pd.DataFrame | None = None
    pick: dict = field(default_factory=dict)
    runner_up: dict | None = None
    findings: pd.DataFrame | None = None
    buys: pd.DataFrame | None = None
    buys_note: str = ""
    full: dict = field(default_factory=dict)
    points: dict = field(default_factory=dict)
    lineage_fits: pd.DataFrame | None = None
    learning: Learning | None = None
    no_pick: str = ""
    spend: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.sweep_dir.resolve().name

    @property
    def primary_configs(self) -> pd.DataFrame:
        """The configs ranked on the primary target, with their fits."""
        return self.ranked[self.primary][0]

    @property
    def predictions(self) -> dict[str, dict]:
        """config_id -> its prediction at the full budget on the primary target, with
        its calibrated 90% interval (:func:`race.analysis.forecast.config_forecasts`:
        the last read plus what the testbed's banks added after a read that far from
        F): a ladder's lineages read at their highest rung, a flat sweep's pilots at
        their last checkpoint."""
        if self.ladder is not None:
            points = self.points.get(self.primary) if self.points else None
            reads = (points[points["rung"] > 0] if points is not None and len(points)
                     else pd.DataFrame())
            key = "lineage"
        else:
            evals = self.evals
            reads = (evals[(evals["target"] == self.primary) & (evals["checkpoint"] > 0)]
                     if len(evals) else pd.DataFrame())
            key = "cell_id"
        if reads.empty or self.ok.empty:
            return {}
        last = reads.sort_values("flops").groupby(key).tail(1)
        return config_forecasts(last, float(self.ok["full_budget_flops"].iloc[0]))


def analyse_sweep(sweep_dir: Path | str, *, n_boot: int = REPORT.n_boot,
                  level: float = REPORT.level, top_k: int = REPORT.top_k,
                  basis: str = REPORT.basis) -> SweepAnalysis:
    """Rank, fit, guard and select one sweep folder's pilots (the arguments as
    ``write_report``'s, :mod:`race.report.write`).

    Raises:
        UsageError: no ok cell, results that mix tasks or budgets, a corrupt metrics line
            (naming file:line), or a bad argument.
    """
    if basis not in BASES:
        raise UsageError(f"report.basis={basis!r}: unknown; use 'extrapolated' or 'observed'")
    if top_k < 1:
        raise UsageError(f"report.top_k={top_k}: select at least 1 config for validation")
    sweep_dir = Path(sweep_dir)
    folder = SweepDir(sweep_dir)
    if not folder.cells.is_dir():
        raise UsageError(f"{sweep_dir}: no cells/ folder; pass a sweep folder "
                         "(results/<sweep_id>) written by `race sweep`")
    every_cell, evals, examples, steps = load_results(sweep_dir, with_steps=True)
    if every_cell.empty:
        raise no_ok_cells(sweep_dir, every_cell)
    check_consistent(every_cell)
    ladder = (read_result(folder.ladder, SWEEP_JSON_FIX) if folder.ladder.is_file() else None)
    cells, every_eval, every_step, every_example = every_cell, evals, steps, examples
    if ladder is not None:  # rank on the first rung: every config at one budget
        first = set(ladder["rungs"][0]["cells"])
        cells = every_cell[every_cell["cell_id"].isin(first)]
        evals = evals[evals["cell_id"].isin(first)] if len(evals) else evals
        examples = examples[examples["cell_id"].isin(first)] if len(examples) else examples
        steps = steps[steps["cell_id"].isin(first)] if len(steps) else steps
    ok, excluded = split_status(cells)
    if ok.empty:
        raise no_ok_cells(sweep_dir, cells)
    result = SweepAnalysis(sweep_dir, every_cell, cells, ok, excluded, evals, level, top_k,
                           ladder=ladder, every_eval=every_eval)
    # final_<target>_reward columns also start with final_: keep the evaluated targets.
    evaluated = set(evals["target"]) if "target" in evals else set()
    names = [t for t in targets(ok) if t in evaluated]
    if not names and from_other_trainers(ok):
        result.card_only = True
        return result
    if not names:
        raise UsageError(f"{sweep_dir}: the ok cells have no checkpoint evals; check "
                         "pilot.eval_targets and the cells' metrics.jsonl")
    # selection reads the cells' pilot.select_target (val by default; test and ood are only
    # reported); older sweeps, without it in spec.json, ranked on test
    chosen = ok["select_target"].dropna().unique().tolist() if "select_target" in ok else []
    primary = next((t for t in (*chosen[:1], "val", "test") if t in names), names[0])
    result.primary = primary
    result.targets = [primary, *(t for t in names if t != primary)]  # the primary first
    raw = _rank_targets(result, examples)
    if primary in result.unranked:
        raise UsageError(f"{sweep_dir}: no ok cell was scored on {primary} past its warm "
                         f"start, so nothing trained can be ranked; check the cells' "
                         f"metrics.jsonl (eval rows at checkpoint > 0)")
    result.problems = scored_problems(every_eval)
    result.starts = warm_starts(evals, cells, target=primary)
    result.reliability = sweep_reliability(every_cell, every_eval, every_example,
                                           target=primary, starts=result.starts,
                                           ladder=ladder)
    result.surfaces = response_surfaces(ok, evals, target=primary, level=level, boot=n_boot)
    result.spend = pilot_spend(every_cell, ladder, _record(sweep_dir))
    result.learning = check_learning(every_cell, every_eval, every_step, target=primary,
                                     starts=result.starts, ladder=ladder, level=level)
    _select(result, raw[primary], evals, examples, steps, basis)
    _answer_or_none(result)
    config_order = {cid: i for i, cid in enumerate(result.primary_configs["config_id"])}
    result.order = ok.assign(_o=ok["config_id"].map(config_order)).sort_values(
        ["_o", "seed", "cell_id"], kind="stable")["cell_id"].tolist()
    return result


def _rank_targets(result: SweepAnalysis, examples: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Rank the ok cells on each of ``result.targets``, fit their curves and draw each
    target's frontier, into ``result``; a target no ok cell was scored on past its warm
    start goes to ``result.unranked``. Returns target -> its ranked configs, before their
    fit columns are merged in (what selection reads)."""
    evals, cells, ok, ladder = result.evals, result.cells, result.ok, result.ladder
    raw, trained = {}, ranked_reads(evals)
    for target in result.targets:
        # a ladder's frontier spans every rung's checkpoints
        result.fronts[target] = (frontier(evals, cells, target=target) if ladder is None
                                 else frontier(result.every_eval, result.every_cell,
                                               target=target))
        scored = set(trained.loc[trained["target"] == target, "cell_id"])
        if not ok["cell_id"].isin(scored).any():
            result.unranked[target] = _unranked(target, ladder is not None)
            continue
        # a ladder's reads carry the problems' pooled SE, as its rungs did
        configs, regimes = rank_regimes(ok[ok["cell_id"].isin(scored)], examples,
                                        target=target, level=result.level,
                                        over_seeds=ladder is None)
        fits = fit_cells(evals, cells, target=target)
        raw[target], result.fits[target] = configs, fits
        result.ranked[target] = (configs.merge(_fit_columns(fits), on="config_id",
                                               how="left"), regimes)
    return raw


def _select(result: SweepAnalysis, configs: pd.DataFrame, evals: pd.DataFrame,
            examples: pd.DataFrame, steps: pd.DataFrame, basis: str) -> None:
    """Choose the configs for validation by the sweep's policy: a ladder's picks from its
    rungs (it checked every rung's guards as it ran), else the flat selection on the
    primary target with every cell's guards checked now."""
    primary, k = result.primary, result.top_k
    if result.ladder is not None:
        result.basis, result.checks = "ladder", None
        result.guards_fired = ladder_guards(result.ladder)
        result.selected = ladder_selection(result.ladder, configs, k=k, level=result.level,
                                           starts=result.starts)
        return
    checks = guard_cells(evals, examples, steps, target=primary,
                         thresholds=_guard_thresholds(result.sweep_dir))
    fired = checks[checks["fired"]]
    guarded = {cid: "; ".join(f"{g} ({c}: {e})" for g, c, e in
                              zip(group["guard"], group["cell_id"], group["evidence"]))
               for cid, group in fired.groupby("config_id")}
    result.basis, result.checks = basis, checks
    result.guards_fired = fired.to_dict("records")
    result.selected = select_for_validation(configs, result.fits[primary], k=k, basis=basis,
                                            guarded=guarded)


def _answer_or_none(result: SweepAnalysis) -> None:
    """The answer (:func:`_answer`) and the best allocation by target; where nothing
    learned, no selection, no pick and no best allocation, saying why."""
    if result.learning.nothing:  # no best allocation: nothing to validate
        result.selected, result.no_pick = [], result.learning.reason()
    else:
        _answer(result)
    result.by_target = best_by_target(result.findings, result.targets, result.problems,
                                      result.level)
    if result.no_pick:
        result.by_target["message"] = f"{result.no_pick}; no target has a best allocation"


def _answer(result: SweepAnalysis) -> None:
    """The pick, its runner-up, the conditional findings, what the full budget buys per
    size, and a ladder's figure data (:mod:`race.analysis.headline`)."""
    if not result.selected:
        return
    configs, level, starts = result.primary_configs, result.level, result.starts
    every_cell, every_eval = result.every_cell, result.every_eval
    pick = result.selected[0]
    candidate = next((c for r in (result.ladder or {}).get("rungs", [])
                      for c in r["candidates"] if c["config"] == pick["config_id"]), {})
    result.pick = pick_profile(pick, every_cell, configs, starts=starts, level=level,
                               fallback={k: candidate[k] for k in ("group_size",
                                         "update_epochs") if k in candidate})
    full = float(result.ok["full_budget_flops"].iloc[0])
    if result.ladder is not None:
        result.runner_up, result.findings = ladder_answer(
            result.ladder, configs, every_cell, every_eval, result.targets, level=level,
            starts=starts)
        pick = result.pick["config_id"]
        result.points = {t: ladder_points(result.ladder, every_cell, every_eval, target=t,
                                          pick=pick) for t in result.targets}
        result.lineage_fits = lineage_fits(result.points[result.primary], predict_at=full)
    else:
        result.runner_up, result.findings = flat_answer(
            result.ranked, result.selected, result.targets, level=level, starts=starts,
            evals=result.evals, cells=result.cells)
    try:
        specs = run_specs(result.sweep_dir)
        reference = specs.get(result.pick["cell_ids"][0])
        result.buys = budget_buys(full, [specs[c] for c in result.ok["cell_id"]
                                         if c in specs], reference=reference)
    except (KeyError, ValueError) as error:  # a spec the catalog cannot complete
        result.buys = None
        result.buys_note = f"the cells' specs cannot be solved again ({error})"
    if result.buys is not None:
        result.full = full_run(result.buys, result.pick, every_cell)


def _unranked(target: str, ladder: bool) -> str:
    """Why ``target`` has no ranking among the ranked cells."""
    return (f"no config was scored on `{target}` past its warm start "
            + ("at the first rung (a ladder scores its reported targets at its last rung "
               "only); the best allocation by condition reads it where it was scored"
               if ladder else "(each read of it is a warm start, before any update)"))


def _fit_columns(fits: pd.DataFrame) -> pd.DataFrame:
    """Per config: the seeds' mean prediction, its calibrated interval at the full budget
    (:func:`race.analysis.curves.full_budget_interval`), R^2 and their fit methods."""
    columns = ["config_id", "prediction", "prediction_lo", "prediction_hi", "fit_method",
               "fit_r2", "predict_at", "fit_reason"]
    if fits.empty:
        return pd.DataFrame(columns=columns)

    def methods(series: pd.Series) -> str:
        counts = series.value_counts()
        if len(counts) == 1:
            return str(counts.index[0])
        return ", ".join(f"{m} x{n}" for m, n in sorted(counts.items()))

    def reasons(series: pd.Series) -> str:
        return "; ".join(sorted({str(r) for r in series if isinstance(r, str) and r}))

    return fits.groupby("config_id", as_index=False).agg(
        prediction=("prediction", "mean"), prediction_lo=("full_lo", "mean"),
        prediction_hi=("full_hi", "mean"), fit_method=("method", methods), fit_r2=("r2", "mean"),
        predict_at=("predict_at", "mean"), fit_reason=("reason", reasons))[columns]


def _record(sweep_dir: Path) -> dict:
    """The sweep's ``sweep.json`` ({} where there is none)."""
    path = SweepDir(sweep_dir).record
    return read_result(path, SWEEP_JSON_FIX) if path.is_file() else {}


def _guard_thresholds(sweep_dir: Path):
    """The guard thresholds the sweep ran with (``sweep.json``), else the defaults."""
    record = _record(sweep_dir)
    given = record.get("config", {}).get("selection", {}).get("guards")
    return GuardThresholds(**given) if given else DEFAULT


def no_ok_cells(sweep_dir: Path, cells: pd.DataFrame) -> UsageError:
    status = cells["status"] if len(cells) else pd.Series(dtype=str)
    counts = counts_text(status).split(", ", 1)[1]  # "0 ok" goes without saying
    return UsageError(f"{sweep_dir}: no ok cells to rank ({counts}); "
                      "rerun `race sweep` with the same overrides to resume them, or check the "
                      "errors in pilots.csv")


def from_other_trainers(ok: pd.DataFrame) -> bool:
    """Whether every ok cell is a run another trainer made (race.integrations: TRL)."""
    return "backend" in ok and bool((ok["backend"] == "trl").all())
