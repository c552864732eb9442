"""The budgeted GRPO pilot: one allocation cell run until its FLOP budget is spent.

::

    while the next step fits in the budget:
        prompts <- task sampler                      (P prompts)
        completions <- rollout backend, G per prompt (rollout FLOPs from real token counts)
        rewards <- rule verifier | PRM               (feedback FLOPs)
        advantages <- group-normalised rewards
        mu epochs of clipped-ratio updates           (learning FLOPs, incl. old/ref passes)
        at FLOP checkpoints: evaluate every held-out target (eval FLOPs, not charged)

The ledger counts FLOPs from the tokens that happened, in both conventions, and charges
the budget in ``spec.convention``. ``metrics.jsonl`` holds only what is deterministic for a
seed (FLOPs, rewards, losses, evals), so two runs give identical files; wall seconds by
phase go to ``timing.jsonl`` beside it and to the summary. A step runs only if its worst
case (every completion at ``max_new_tokens``) fits, so a pilot never overspends; what is
left when the next full step no longer fits is reported as ``unspent_flops``.
The summary is written at the end, and also when the pilot fails (``status: failed``,
the error, and everything spent until then).

Every ``checkpoint_every`` steps the pilot saves its state under ``state/`` (LoRA weights,
optimizer, RNGs, ledger and rows). A rerun of the same spec -- a SLURM requeue after a
timeout or preemption, or a rerun after a crash -- continues from there, and its FLOPs,
steps and ``metrics.jsonl`` equal those of a run that was never interrupted: work done
after the last save is redone, never charged twice. ``state/`` is deleted once the pilot
finishes ok, and kept when it fails.

:func:`run_pilot` is the recipe, read top to bottom; its pieces live beside it: the
state and summary (:mod:`~race.pilot.state`), the components (:mod:`~race.pilot.components`),
scoring and evaluation (:mod:`~race.pilot.evaluate`), the budget rule
(:mod:`~race.pilot.budget`). torch is imported inside the functions that need tensors
(heavy: a sweep process imports this module to launch pilots).
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from race.core.specs import RunSpec
from race.errors import UsageError
from race.nn.devices import (
    PhaseMeter,
    measure_peak_flops,
    resolve_device,
    resolve_dtype,
    throughput,
)
from race.pilot.budget import check_budget, worst_step_flops
from race.pilot.components import (
    Components,
    build_components,
    check_reward_format,
    release_memory,
)
from race.pilot.evaluate import (
    error_count,
    evaluate,
    longest_prompt,
    precursors,
    score,
    verified,
)
from race.pilot.learner import Batch
from race.pilot.state import (
    CHECKPOINT_EVERY,
    LEDGER_CONVENTIONS,
    PHASES,
    Ledger,
    PilotState,
    StopRequested,
    build_summary,
    continued_state,
    load_state,
    save_state,
    settle_other,
    spent_so_far,
    torch_rng,
)
from race.store.cell import CellDir
from race.store.io import append_jsonl, no_space, write_json, write_jsonl, write_text


def run_pilot(spec: RunSpec, cell_dir: Path, *, components: Components | None = None,
              progress: Callable[[dict], None] | None = None,
              checkpoint_every: int = CHECKPOINT_EVERY, stop: Callable[[], bool] | None = None,
              keep_final_state: bool = False, log: Callable[[dict], None] | None = None
              ) -> dict:
    """Run one cell to its budget; write spec.json, metrics.jsonl, summary.json.

    Args:
        spec: the cell.
        cell_dir: its results folder.
        components: prebuilt task, reward, learner and backend (default: built from spec).
        progress: called with each step's metrics row.
        checkpoint_every: save a resumable state under ``cell_dir/state/`` every this many
            GRPO steps (0: never). A state of this spec found there is resumed, whatever
            this value.
        stop: asked after every step; when it answers True the pilot saves its state at
            that step boundary and raises :class:`StopRequested` without a summary (a
            scheduler's warning before a time limit or a preemption; a rerun continues).
        keep_final_state: keep the state at the end of the budget (a ladder rung that a
            later rung may continue: ``spec.continues`` of that rung names this cell).
        log: called with every metrics row as it is recorded (a step's row with its wall
            seconds by phase under ``wall_s``; each target's eval row), from the first row
            of the cell's history on: an experiment tracker's feed. It must not raise.

    A spec that ``continues`` another cell starts from that cell's final state: its
    steps, ledger and metrics rows carry over, so no FLOP is spent twice, and its summary
    counts the lineage's FLOPs from the warm start (``continued_from``: that cell's id and
    steps).

    Returns the summary (``resumed_from_step``: the step a saved state was resumed from,
    or None; ``redone``: FLOPs by phase that earlier, interrupted runs spent after their
    last saved state, spent again here). Failures are recorded (``status: failed``, with
    every FLOP the failed step ran) and re-raised only for bad input detected before
    anything ran (a budget that cannot buy one step, an unreadable state).
    """
    if checkpoint_every < 0:
        raise UsageError(f"launcher.checkpoint_every={checkpoint_every}: must be >= 0 (0: "
                         f"never save a resumable state)")
    check_budget(spec, prompt_tokens=1)  # before any model loads or any file is written
    device = resolve_device(spec.device)  # pilot.device=cuda without CUDA: refused here
    dtype = resolve_dtype(spec.dtype, device)
    run = _Session.begin(spec, CellDir(cell_dir), PhaseMeter(device), log)
    engine, status, error, parts = None, "ok", None, None
    try:
        parts = components or build_components(spec)
        engine = _engine_args(parts)
        check_reward_format(spec, parts.reward)
        run.restore_or_evaluate(parts)
        while (row := _grpo_step(run, parts)) is not None:
            asked_to_stop = stop is not None and stop()
            if asked_to_stop or (checkpoint_every and run.state.steps % checkpoint_every == 0):
                run.save(parts)
            if asked_to_stop:
                raise StopRequested(run.state.steps)
            if progress:
                progress(row)
        if run.state.pending:  # the end of the budget is the last checkpoint
            run.evaluate(parts, 1.0)
        if keep_final_state:  # a later rung continues from here
            run.save(parts)
    except StopRequested:
        raise  # state saved at this step boundary; no summary: the cell is not finished
    except Exception as exc:  # a failed pilot is recorded, never lost
        full = no_space(exc, run.cell.path)
        if full is not None:  # a full disk is not the cell's failure: stop, resume later
            raise full from exc
        status, error = "failed", run.record_failure(exc)
    summary = run.finish(status, error, device=device, dtype=dtype, engine=engine,
                         weights=getattr(parts, "weights", None) if parts else None)
    if status == "ok" and not keep_final_state:  # a failed pilot keeps its state (resume)
        shutil.rmtree(run.cell.state, ignore_errors=True)  # AdamW moments: twice the adapter
    parts = None  # the models go before the next pilot of this slot starts
    release_memory(device)
    return summary


def _grpo_step(run: _Session, parts: Components) -> dict | None:
    """One GRPO step of ``run``: sample prompts, roll out G completions each, score them,
    update the policy and log the step's row (None: the budget left cannot pay a step)."""
    import torch

    from race.core.grpo import group_advantages

    spec, ledger, meter = run.spec, run.state.ledger, run.meter
    examples = parts.task.sample("train", spec.prompts_per_step,
                                 seed=spec.seed * 1_000_003 + run.state.steps)
    prompts = [ex.prompt for ex in examples]
    cap = run.step_cap(longest_prompt(parts, spec, prompts))
    if cap < 1:
        return None
    with meter.phase("rollout", ledger.wall_s):
        out = parts.backend.generate(prompts, n=spec.group_size, max_new_tokens=cap,
                                     temperature=spec.temperature,
                                     seed=spec.seed * 7919 + run.state.steps)
    ledger.add("rollout", out.flops_model, out.flops_executed, out.flops_measured)
    answers = [examples[i].answer for i in out.prompt_index]
    problems = [examples[i].problem for i in out.prompt_index]
    with meter.phase("feedback", ledger.wall_s):
        rewards, errors = score(spec, parts, ledger, "feedback", out, problems, answers)
    advantages = group_advantages(torch.tensor(rewards), spec.group_size,
                                  scale=spec.scale_rewards)
    with meter.phase("learning", ledger.wall_s):
        stats = run.update(parts, out, tuple(advantages.tolist()))
    return run.log_step(parts, out, rewards, answers, problems, cap, stats, errors)


@dataclass
class _Session:
    """One process's run of a pilot: the state it started from (saved, continued or
    fresh), what it has done since, and the files it keeps up to date."""

    spec: RunSpec
    cell: CellDir
    state: PilotState
    meter: PhaseMeter
    wall_start: float
    resumed_from: int | None  # the step a saved state of this cell was resumed from
    continued_from: dict | None  # the cell below on a ladder, and its steps
    prior_s: dict[str, float]  # the wall clock a resumed pilot started from
    written: int  # rows of state.rows already in metrics.jsonl
    log: Callable[[dict], None] | None = None  # a tracker's feed (run_pilot's ``log``)
    logged: int = 0  # rows of state.rows already handed to ``log``

    @classmethod
    def begin(cls, spec: RunSpec, cell: CellDir, meter: PhaseMeter,
              log: Callable[[dict], None] | None = None) -> _Session:
        """Resume a saved state of this cell, continue the cell below it on a ladder, or
        start afresh; count what an earlier, unfinished run spent as redone; rewrite the
        cell's files to that state (whatever a crashed run wrote after it is dropped)."""
        wall_start = time.perf_counter()
        state = load_state(cell.state, spec)
        resumed_from = state.steps if state else None
        below = continued_state(spec, cell.path) if state is None else None
        continued_from = ({"cell_id": spec.continues, "steps": below.steps}
                          if below is not None else None)
        state = state or below
        # what an earlier run of this cell spent (killed, lost or failed: not finished ok)
        earlier = None if cell.is_ok() else spent_so_far(spec, cell.path)[0]
        write_json(cell.spec, spec.to_dict())
        if state is None:  # a rerun without a state of this spec starts the cell afresh
            shutil.rmtree(cell.state, ignore_errors=True)
            state = PilotState(0, Ledger(), [], [], [], sorted(spec.checkpoints))
        ledger = state.ledger
        if earlier is not None:  # it is redone from the state on (from scratch without one)
            ledger.redone = {c: dict.fromkeys(PHASES, 0.0) | earlier.redone.get(c, {})
                             for c in LEDGER_CONVENTIONS}
            ledger.add_redone(earlier.flops)
        write_jsonl(cell.metrics, state.rows)
        write_jsonl(cell.timing, state.timing)
        cell.summary.unlink(missing_ok=True)  # running: no verdict yet
        return cls(spec, cell, state, meter, wall_start, resumed_from, continued_from,
                   dict(ledger.wall_s), len(state.rows), log)

    def restore_or_evaluate(self, parts: Components) -> None:
        """Put a resumed or continued state into the live learner (and save it when it
        carries redone FLOPs, which then survive a second interruption); a fresh pilot
        evaluates its warm start instead (checkpoint 0)."""
        ledger = self.state.ledger
        fresh = self.resumed_from is None and self.continued_from is None
        if not fresh:
            _restore(parts, self.state, self.cell.adapter)
            if sum(ledger.redone["model"].values()):
                self.save(parts)
        ledger.wall_s["load"] += time.perf_counter() - self.wall_start
        if fresh and self.spec.score_start:  # else its group's scoring cell has it
            self.evaluate(parts, 0.0)
        self.emit()

    def step_cap(self, longest: int) -> int:
        """The next step's generation cap: ``max_new_tokens`` when its worst case fits the
        budget left, else 0 (the pilot ends; the rest is reported as ``unspent_flops``).
        A first step that cannot fit raises :class:`~race.errors.BudgetTooSmall`.

        A last step at a shorter cap would be no step at all: with completions cut below
        their natural length every reward, hence every advantage, is 0, and the adapters
        move through AdamW's momentum alone while the truncation guard reads a cut batch.
        """
        spec, steps = self.spec, self.state.steps
        remaining = spec.budget_flops - self.state.ledger.charged(spec.convention)
        if worst_step_flops(spec, longest) <= remaining:
            return spec.max_new_tokens
        if steps == 0:
            check_budget(spec, longest)  # raises: recorded as a failed pilot
        return 0

    def update(self, parts: Components, out, advantages: tuple[float, ...]) -> dict:
        """The learner's mu epochs on this batch, charged to learning (a diverged update
        still ran its old and reference passes); a non-HF engine then loads the new
        adapter."""
        ledger, before = self.state.ledger, dict(parts.learner.flops)
        try:
            sampled = out.logprobs if parts.backend.name != "hf" else None
            stats = parts.learner.update(Batch(out.prompt_ids, out.completion_ids,
                                               advantages, sampled), step=self.state.steps)
        finally:
            ledger.add("learning", *(parts.learner.flops[k] - before[k]
                                     for k in ("model", "executed", "measured")))
        if parts.backend.name != "hf":  # hf samples from the live model already
            parts.backend.load_adapter(parts.learner.save_adapter(self.cell.adapter))
        return stats

    def log_step(self, parts: Components, out, rewards: list[float], answers: list[str],
                 problems: list[str], cap: int, stats: dict, reward_errors: int = 0) -> dict:
        """Count the step, record its row (and its wall seconds), evaluate at every
        checkpoint it passed, and append what is new to the cell's files. Returns the
        step's row (``verifier_errors``: the verifier calls that raised, if any)."""
        spec, state = self.spec, self.state
        ledger = state.ledger
        state.steps += 1
        correct, errors = verified(parts.task, list(out.texts), answers, problems)
        row = {"kind": "step", "step": state.steps,
               "train_reward": sum(rewards) / len(rewards),
               "train_accuracy": sum(correct) / len(correct),
               "completion_tokens": out.completion_tokens, "max_new_tokens": cap,
               **{k: round(v, 6) for k, v in precursors(out).items()},
               "charged_flops": ledger.charged(spec.convention),
               "flops": ledger.snapshot(),
               } | {k: round(v, 6) for k, v in stats.items()} | error_count(reward_errors + errors)
        state.rows.append(row)
        state.timing.append({"step": state.steps, "wall_s": dict(ledger.wall_s)})
        fraction = ledger.charged(spec.convention) / spec.budget_flops
        while state.pending and fraction >= state.pending[0] and state.pending[0] < 1.0:
            self.evaluate(parts, state.pending.pop(0))
        for new in state.rows[self.written:]:
            append_jsonl(self.cell.metrics, new)
        self.written = len(state.rows)
        append_jsonl(self.cell.timing, state.timing[-1])
        self.emit()
        return row

    def emit(self) -> None:
        """Hand ``log`` the rows it has not seen (a step's row with its wall seconds)."""
        if self.log is None:
            return
        wall = {t["step"]: t["wall_s"] for t in self.state.timing}
        for row in self.state.rows[self.logged:]:
            timed = row.get("kind") == "step" and row.get("step") in wall
            self.log(row | {"wall_s": wall[row["step"]]} if timed else row)
        self.logged = len(self.state.rows)

    def evaluate(self, parts: Components, fraction: float) -> None:
        """Evaluate every held-out target at the checkpoint ``fraction`` of the budget."""
        self.state.evals += evaluate(self.spec, parts, self.state.ledger, fraction, self.meter)
        self.state.rows += self.state.evals[-len(self.spec.eval_targets):]

    def save(self, parts: Components) -> None:
        """Save a resumable state at this step boundary."""
        state, session_s = self.state, time.perf_counter() - self.wall_start
        save_state(self.cell.state, self.spec, PilotState(
            state.steps, settle_other(state.ledger, self.prior_s, session_s), state.rows,
            state.evals, state.timing, state.pending, parts.learner.state_dict(),
            torch_rng()))

    def record_failure(self, exc: Exception) -> str:
        """Write the traceback beside the results, and a last row with what the failed
        step ran before it stopped (so that the file's last cumulative FLOPs are the
        summary's). Returns the error as the summary states it."""
        spec, state = self.spec, self.state
        error = f"{type(exc).__name__}: {exc}"
        write_text(self.cell.error, traceback.format_exc())
        last = next((r["flops"] for r in reversed(state.rows) if "flops" in r), Ledger().flops)
        if state.ledger.snapshot() != last:
            state.rows.append({"kind": "failed", "step": state.steps + 1, "error": error,
                               "charged_flops": state.ledger.charged(spec.convention),
                               "flops": state.ledger.snapshot()})
        return error

    def finish(self, status: str, error: str | None, *, device: str, dtype: str,
               engine: dict | None, weights: dict | None = None) -> dict:
        """Write the whole metrics file and the summary, with the session's throughput.
        Returns the summary."""
        spec, state = self.spec, self.state
        ledger = settle_other(state.ledger, self.prior_s, time.perf_counter() - self.wall_start)
        write_jsonl(self.cell.metrics, state.rows)  # the whole file, atomically
        self.emit()
        peak = spec.peak_flops or measure_peak_flops(device, dtype)
        summary = build_summary(
            spec, ledger, state.steps, state.evals, status, error, self.resumed_from,
            continued_from=self.continued_from, device=device, dtype=dtype, engine=engine,
            weights=weights or {},
            peak_flops=peak, peak_measured=not spec.peak_flops,
            throughput=throughput(ledger.flops["model"], ledger.flops["executed"],
                                  ledger.wall_s, peak, self.meter.peak_gib),
            padding={p: ledger.flops["executed"][p] / ledger.flops["model"][p]
                     for p in PHASES if ledger.flops["model"][p]})
        write_json(self.cell.summary, summary)
        return summary


def _engine_args(parts: Components) -> dict | None:
    """A vLLM engine's arguments, as sized from this cell (None for other backends)."""
    return {k: v for k, v in getattr(parts.backend, "engine_args", {}).items()
            if k in ("max_model_len", "kv_cache_memory_bytes", "dtype")} or None


def _restore(parts: Components, state: PilotState, adapter_dir: Path) -> None:
    """Put a loaded state into the live learner, backend and torch RNG."""
    import torch

    parts.learner.load_state_dict(state.learner)
    torch.set_rng_state(state.torch_rng["cpu"])
    if state.torch_rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state.torch_rng["cuda"])
    if parts.backend.name != "hf":  # hf samples from the live model already
        parts.backend.load_adapter(parts.learner.save_adapter(adapter_dir))
