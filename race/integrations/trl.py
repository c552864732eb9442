"""RACE's exact FLOP ledger and compute card for TRL ``GRPOTrainer`` runs (TRL >= 1.16).

::

    from race.integrations.trl import track

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), ...)
    ledger = track(trainer, "results/trl")   # refuses, in one line, what it cannot count
    trainer.train()                          # then: race report results/trl

:func:`track` attaches a :class:`RaceCallback` (:mod:`race.integrations.trl_ledger`)
and wraps the few trainer calls where tokens are processed, so the ledger counts the
tokens each step really generated and trained on (docs/integrations.md):

* rollout: each ``generate`` call, prefill and decode, per sequence (``model``) and as the
  padded batch ran, finished rows decoding until the longest stops (``executed``);
* learning: every log-prob pass TRL runs -- the policy forward and backward of each
  optimizer step (``num_iterations`` passes over a generation), the old-policy pass when
  TRL computes one, the reference pass when ``beta > 0`` (adapters disabled, or a separate
  reference model) -- LoRA-aware; ``executed`` follows TRL's chunked log-prob head, which
  scores positions ``1..T-1`` (only the completion positions on Triton devices) and
  recomputes its logits in the backward pass;
* feedback: reward functions that are models (``nn.Module``), on the tokens they score;
  Python reward functions cost 0 FLOPs (their seconds are recorded);
* gradient checkpointing (TRL's default): ``executed`` adds each decoder layer's forward,
  rerun in the backward pass; ``model`` does not (it counts the maths, not recomputation);
* eval: the same passes during ``trainer.evaluate()``, counted but not charged.

Both conventions are kept (``measure=True`` adds FlopCounterMode around each of those
calls). The cumulative FLOPs by phase and their shares go into every ``trainer.log`` as
``race/flops/<phase>``, ``race/flops_executed/<phase>`` and ``race/share/<phase>``, so they
reach whatever ``report_to`` is set to. The run is written in RACE's results contract:
``<out>/cells/<run_id>/{spec,metrics.jsonl,summary}.json``, which ``race report <out>``
reads (a compute card; the leaderboard and frontier need RACE's held-out evals).
"""

from __future__ import annotations

import time
from pathlib import Path

from race.integrations.trl_checks import refuse
from race.integrations.trl_ledger import RaceCallback

__all__ = ["RaceCallback", "track"]


def track(trainer, out_dir: str | Path | None = None, *, run_id: str | None = None,
          budget_flops: float | None = None, measure: bool = False) -> RaceCallback:
    """Keep RACE's ledger for ``trainer`` (a TRL ``GRPOTrainer``) and write its results.

    Args:
        trainer: a ``GRPOTrainer``, before ``train()``.
        out_dir: results folder (default ``<args.output_dir>/race``); the run goes to
            ``<out_dir>/cells/<run_id>/``, and ``race report <out_dir>`` reads it.
        run_id: the run's folder name (default: a hash of its settings).
        budget_flops: stop training after the step whose charged (model-convention)
            FLOPs reach it; also the run's budget in its results (default: what it spent).
        measure: also count every pass with FlopCounterMode (``measured``; slower).

    Returns:
        The :class:`RaceCallback`, already added to the trainer.

    Raises:
        UsageError: a configuration the ledger cannot count exactly (one line, naming the
            setting and the fix).
    """
    if getattr(trainer, "_race_callback", None) is not None:
        raise refuse("track(trainer)", type(trainer).__name__, "this trainer is tracked "
                      "already (a second ledger would count every pass twice)",
                      "call track once per trainer")
    out_dir = Path(out_dir) if out_dir is not None else Path(trainer.args.output_dir) / "race"
    cb = RaceCallback(trainer, out_dir, run_id=run_id, budget_flops=budget_flops,
                      measure=measure)
    _wrap(trainer.model, "generate", _counted_generate(cb))
    _wrap(trainer, "_get_per_token_logps_and_entropies", _counted_logprobs(cb))
    _wrap(trainer.accelerator, "backward", _timed(cb, "learning"))
    _wrap(trainer, "_calculate_rewards", _counted_rewards(cb, trainer))
    _wrap(trainer, "log", _logged(cb))
    _wrap(trainer, "train", _recorded_train(cb))
    for func in trainer.reward_funcs:
        if id(func) in cb.reward_shapes:
            func.register_forward_pre_hook(_reward_model_hook(cb, func), with_kwargs=True)
    trainer.add_callback(cb)
    trainer._race_callback = cb
    return cb


# --------------------------------------------------------------------------- wiring


def _wrap(owner, name: str, make) -> None:
    """Replace the bound method ``owner.name`` by ``make(original)`` on this instance."""
    original = getattr(owner, name)
    setattr(owner, name, make(original))


def _counted_generate(cb: RaceCallback):
    """``model.generate``: prefill and decode of the sequences it returns (rollout)."""
    import torch

    def make(original):
        def wrapped(*args, **kwargs):
            start, counter = time.perf_counter(), cb._counter()
            with counter:
                out = original(*args, **kwargs)
            inputs = kwargs.get("input_ids", args[0] if args else None)
            sequences = out if torch.is_tensor(out) else out.sequences
            model, executed = cb.count_generate(inputs, kwargs.get("attention_mask"),
                                                sequences)
            cb._add(cb._phase("rollout"), model, executed, counter, start)
            return out
        return wrapped
    return make


def _counted_logprobs(cb: RaceCallback):
    """TRL's log-prob passes (learning): forward, and backward when gradients flow."""
    import torch

    def make(original):
        def wrapped(model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                    *args, **kwargs):
            start, counter, train = time.perf_counter(), cb._counter(), torch.is_grad_enabled()
            with counter:
                out = original(model, input_ids, attention_mask, logits_to_keep, batch_size,
                               *args, **kwargs)
            model_flops, executed = cb.count_logprobs(model, input_ids, attention_mask,
                                                      logits_to_keep, batch_size, train)
            # a training pass's backward is counted here; FlopCounterMode sees it later
            cb._add(cb._phase("learning"), model_flops, executed, counter, start)
            return out
        return wrapped
    return make


def _timed(cb: RaceCallback, phase: str):
    """A call whose formula FLOPs are counted elsewhere: its seconds (and its measured
    FLOPs) go to ``phase``."""
    def make(original):
        def wrapped(*args, **kwargs):
            start, counter = time.perf_counter(), cb._counter()
            with counter:
                out = original(*args, **kwargs)
            cb._add(cb._phase(phase), 0.0, 0.0, counter, start)
            return out
        return wrapped
    return make


def _counted_rewards(cb: RaceCallback, trainer):
    """The reward functions (feedback): their seconds here, a model's FLOPs in its hook;
    the step's mean weighted reward for the metrics row."""
    def make(original):
        def wrapped(*args, **kwargs):
            start, counter = time.perf_counter(), cb._counter()
            with counter:
                per_func = original(*args, **kwargs)
            cb._add(cb._phase("feedback"), 0.0, 0.0, counter, start)  # models: hooks
            weights = trainer.reward_weights.to(per_func.device)
            cb.last_reward = float((per_func * weights).nansum(dim=1).mean())
            return per_func
        return wrapped
    return make


def _logged(cb: RaceCallback):
    """``trainer.log``: every log gets the cumulative FLOPs by phase and their shares."""
    def make(original):
        def wrapped(logs, *args, **kwargs):
            logs.update(cb.log_values())
            return original(logs, *args, **kwargs)
        return wrapped
    return make


def _recorded_train(cb: RaceCallback):
    """``trainer.train``: a run that raises is recorded as failed, with what it spent."""
    def make(original):
        def wrapped(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except Exception as error:
                cb.finish("failed", f"{type(error).__name__}: {error}")
                raise
        return wrapped
    return make


def _reward_model_hook(cb: RaceCallback, func):
    """A forward pre-hook on a reward model: its FLOPs on the tokens it scores."""
    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        model, executed = cb.count_reward_model(func, ids, kwargs.get("attention_mask"))
        cb.ledger.add(cb._phase("feedback"), float(model), float(executed), 0.0)
    return hook
