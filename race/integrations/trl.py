"""RACE's exact FLOP ledger and compute card for TRL ``GRPOTrainer`` runs (TRL >= 1.16).

::

    from race.integrations.trl import track

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), ...)
    ledger = track(trainer, "results/trl")   # refuses, in one line, what it cannot count
    trainer.train()                          # then: race report results/trl

:func:`track` attaches a :class:`RaceCallback` and wraps the few trainer calls where
tokens are processed, so the ledger counts the tokens each step really generated and
trained on (docs/integrations.md):

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

import contextlib
import hashlib
import json
import time
from pathlib import Path

from transformers import TrainerCallback

from race.core import flops
from race.core.specs import LoraShape, ModelShape
from race.integrations.trl_checks import check_trainer, lora_shape, model_shape, refuse
from race.pilot.state import Ledger
from race.store import io as results
from race.store.cell import CellDir

PHASES = ("rollout", "learning", "feedback", "eval")
CHARGED = ("rollout", "learning", "feedback")
CONVENTIONS = ("model", "executed", "measured")


# --------------------------------------------------------------------------- the callback


class RaceCallback(TrainerCallback):
    """Keeps the ledger of one ``GRPOTrainer`` run and writes its results (see module doc).

    Build it with :func:`track`. ``flops[convention][phase]``: cumulative FLOPs.
    """

    def __init__(self, trainer, out_dir: Path, *, run_id: str | None = None,
                 budget_flops: float | None = None, measure: bool = False):
        from race.nn.measure import attention_backward_is_fused

        check_trainer(trainer)
        self.trainer, self.measure, self.budget_flops = trainer, measure, budget_flops
        model = trainer.model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.shape = model_shape(base.config)
        self.lora = lora_shape(model, self.shape)
        self.ref_shape = (model_shape(trainer.ref_model.config)
                          if getattr(trainer, "ref_model", None) is not None else None)
        self.reward_shapes = {}
        for func in trainer.reward_funcs:
            if hasattr(func, "config"):  # a reward model (nn.Module)
                self.reward_shapes[id(func)] = model_shape(func.config, head="sequence_score")
        # which attention backward a training pass runs here (executed convention)
        self.fused_attention = attention_backward_is_fused(model, device=str(trainer.args.device))
        # whether the residual stream entering layer 0 needed a gradient in the last policy
        # forward (an embedding hook sets it for gradient checkpointing under PEFT)
        self.stream_grad = False
        base.get_decoder().layers[0].register_forward_pre_hook(self._see_stream)
        self.ledger = Ledger()
        self.steps, self.rows, self.last_reward = 0, [], None
        self.completion_tokens = 0
        self.spec = self._spec(trainer, run_id)
        self.cell = CellDir.of(out_dir, self.spec["cell_id"])
        self.cell_dir = self.cell.path
        self._save_policy_config(base)
        self.started = time.perf_counter()
        self.status, self.error = "running", None
        results.write_json(self.cell.spec, self.spec)
        results.write_jsonl(self.cell.metrics, [])
        (self.cell.summary).unlink(missing_ok=True)

    def _see_stream(self, module, args, kwargs=None):
        hidden = args[0] if args else None
        if torch_is_tensor(hidden):
            self.stream_grad = bool(hidden.requires_grad)

    # ---------------------------------------------------------------- spec and files

    def _spec(self, trainer, run_id: str | None) -> dict:
        args = trainer.args
        group = args.num_generations
        rewards = [getattr(f, "__name__", None) or type(f).__name__ for f in trainer.reward_funcs]
        kind = "orm" if self.reward_shapes else "rule"
        knobs = {"model": "", "seed": args.seed,
                 "prompts_per_step": args.generation_batch_size // group, "group_size": group,
                 "max_new_tokens": args.max_completion_length,
                 "update_epochs": args.num_iterations,
                 "minibatch_size": (args.per_device_train_batch_size
                                    * args.gradient_accumulation_steps),
                 "lr": args.learning_rate, "lora_rank": self.lora.rank if self.lora else 0,
                 "lora_targets": list(self.lora.targets) if self.lora else [],
                 "kl_coef": args.beta, "temperature": args.temperature,
                 "backend": "trl", "convention": "model", "continues": None,
                 "reward": {"name": "+".join(rewards), "kind": kind},
                 "task": {"name": "trl"},
                 "trl": {"loss_type": args.loss_type, "scale_rewards": args.scale_rewards,
                         "steps_per_generation": args.steps_per_generation,
                         "max_steps": args.max_steps, "policy": self.shape.name}}
        digest = hashlib.sha256(json.dumps(knobs, sort_keys=True, default=str).encode())
        config = dict(knobs, seed=None)
        config_id = hashlib.sha256(json.dumps(config, sort_keys=True,
                                              default=str).encode()).hexdigest()[:10]
        return knobs | {"cell_id": run_id or f"trl-{digest.hexdigest()[:10]}",
                        "config_id": config_id, "budget_flops": self.budget_flops or 0.0}

    def _save_policy_config(self, base) -> None:
        """``spec.model`` names a folder holding the policy's ``config.json`` (its own when
        local, else a copy beside the run), so reports read the shape without weights."""
        name = getattr(base.config, "_name_or_path", "")
        if name and (Path(name) / "config.json").is_file():
            self.spec["model"] = str(Path(name).resolve())
        else:
            folder = self.cell_dir / "policy"
            folder.mkdir(parents=True, exist_ok=True)
            base.config.to_json_file(str(folder / "config.json"))
            self.spec["model"] = str(folder.resolve())

    def summary(self) -> dict:
        """What ``summary.json`` holds (the pilots' fields; docs/design.md)."""
        ledger = self.ledger
        charged = ledger.charged("model")
        ledger.wall_s["other"] = max(0.0, time.perf_counter() - self.started - sum(
            v for k, v in ledger.wall_s.items() if k != "other"))
        return {"status": self.status, "error": self.error, "cell_id": self.spec["cell_id"],
                "budget_flops": self.spec["budget_flops"] or charged, "convention": "model",
                "total_flops": charged, "flops": dict(ledger.flops["model"]),
                "flops_model": ledger.flops["model"], "flops_executed": ledger.flops["executed"],
                "flops_measured": ledger.flops["measured"] if self.measure else None,
                "redone": dict.fromkeys(PHASES, 0.0), "redone_flops": 0.0,
                "wall_s": dict(ledger.wall_s), "steps": self.steps, "final_eval": {},
                "initial_eval": {}, "resumed_from_step": None, "source": "trl",
                "device": str(self.trainer.args.device), "dtype": str(self.trainer.model.dtype)}

    def finish(self, status: str = "ok", error: str | None = None) -> dict:
        """Write ``summary.json`` (and the spec with its realized budget); returns it."""
        self.status, self.error = status, error
        summary = self.summary()
        self.spec["budget_flops"] = summary["budget_flops"]
        results.write_json(self.cell.spec, self.spec)
        results.write_jsonl(self.cell.metrics, self.rows)
        results.write_json(self.cell.summary, summary)
        return summary

    def log_values(self) -> dict[str, float]:
        """What each ``trainer.log`` gets: cumulative FLOPs by phase and their shares."""
        model, executed = self.ledger.flops["model"], self.ledger.flops["executed"]
        charged = self.ledger.charged("model")
        out = {f"race/flops/{p}": model[p] for p in PHASES}
        out |= {f"race/flops_executed/{p}": executed[p] for p in PHASES}
        out |= {f"race/share/{p}": model[p] / charged if charged else 0.0 for p in CHARGED}
        out["race/flops/total"] = charged
        if self.measure:
            out |= {f"race/flops_measured/{p}": self.ledger.flops["measured"][p] for p in PHASES}
        return out

    # ---------------------------------------------------------------- Trainer events

    def on_step_end(self, args, state, control, **kwargs):
        self.steps = state.global_step
        row = {"kind": "step", "step": self.steps, "train_reward": self.last_reward,
               "completion_tokens": self.completion_tokens,
               "charged_flops": self.ledger.charged("model"), "flops": self.ledger.snapshot()}
        self.rows.append(row)
        results.append_jsonl(self.cell.metrics, row)
        if self.budget_flops and self.ledger.charged("model") >= self.budget_flops:
            control.should_training_stop = True
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        """TRL's evaluation: a row with its metrics and the ledger (eval is not charged);
        after training ends, the summary is rewritten to include it."""
        row = {"kind": "trl_eval", "step": state.global_step,
               "metrics": {k: v for k, v in (metrics or {}).items()
                           if isinstance(v, (int, float))},
               "charged_flops": self.ledger.charged("model"), "flops": self.ledger.snapshot()}
        self.rows.append(row)
        results.append_jsonl(self.cell.metrics, row)
        if self.status == "ok":
            self.finish("ok")
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.steps = state.global_step
        self.finish("ok")
        return control

    # ---------------------------------------------------------------- counting

    def _phase(self, default: str) -> str:
        return default if self.trainer.model.training else "eval"

    def _counter(self):
        from race.nn.measure import flop_counter

        return flop_counter() if self.measure else contextlib.nullcontext()

    def _add(self, phase: str, model: float, executed: float, counter, start: float) -> None:
        measured = counter.get_total_flops() if self.measure else 0.0
        self.ledger.add(phase, float(model), float(executed), float(measured))
        self.ledger.wall_s[phase] += time.perf_counter() - start

    def count_generate(self, inputs, attention, sequences) -> tuple[float, float]:
        """(model, executed) FLOPs of one ``generate``: ``inputs`` ``[B, P]`` left-padded
        prompts, ``sequences`` ``[B, P + W]``; a completion ends at its first EOS."""
        rows, width = inputs.shape
        new = sequences[:, width:].tolist()
        eos = set(self.trainer.eos_token_ids)
        lengths = [next((i + 1 for i, t in enumerate(r) if t in eos), len(r)) for r in new]
        prompts = (attention.sum(1).tolist() if attention is not None else [width] * rows)
        model = flops.generate_flops(self.shape, prompts, lengths, lora=self.lora)
        executed = flops.generate_flops(self.shape, [width] * rows, lengths,
                                        convention="executed", lora=self.lora,
                                        decode_steps=len(new[0]))
        self.completion_tokens = sum(lengths)
        return model, executed

    def count_logprobs(self, model, input_ids, attention, logits_to_keep: int,
                       batch_size: int | None, train: bool) -> tuple[float, float]:
        """(model, executed) FLOPs of one ``_get_per_token_logps_and_entropies`` call:
        chunks of ``batch_size`` rows, forward (and backward when ``train``)."""
        from trl.kernels.chunked_logprob import _use_triton

        shape, lora, adapters = self.shape, self.lora, True
        if self.ref_shape is not None and model is self.trainer.ref_model:
            shape, lora = self.ref_shape, None
        elif self.lora is not None and _adapters_disabled(model):
            adapters = False
        rows, width = input_ids.shape
        chunk = batch_size or rows
        compact = _use_triton(input_ids.device)
        lengths = attention.sum(1).tolist()
        head = flops.head_flops_per_position(shape)
        full = lora is None and shape is self.shape  # the policy, every weight trained
        total_model = total_executed = 0.0
        for start in range(0, rows, chunk):
            part = lengths[start:start + chunk]
            n = len(part)
            # the head scores positions 1..T-1; on Triton devices only the labelled ones
            scored = (int(attention[start:start + chunk, width - logits_to_keep:].sum())
                      if compact else n * (width - 1))
            executed = (flops.linear_forward_flops_per_token(shape, lora, adapters) * n * width
                        + flops.attention_flops(shape, n * width * width) + head * scored)
            if train:
                # the head recomputes its logits, then the hidden (and weight) gradients;
                # gradient checkpointing reruns every decoder layer's forward
                executed += (flops.decoder_backward_flops(
                    shape, [width] * n, lora, convention="executed",
                    fused_attention=self.fused_attention,
                    input_grad=self.stream_grad and shape is self.shape)
                    + head * scored * (2 + int(full)))
                if _checkpointing(model):
                    executed += recompute_flops(shape, lora, n, width)
                model_flops = (flops.train_flops(shape, part) if full else
                               flops.lora_train_flops(shape, part, lora))
            else:
                model_flops = flops.forward_flops(shape, part, lora=lora, adapters=adapters)
            total_model += model_flops
            total_executed += executed
        return total_model, total_executed

    def count_reward_model(self, func, input_ids, attention) -> tuple[float, float]:
        """(model, executed) FLOPs of a reward model's forward over ``[B, T]`` right-padded
        traces (a sequence classifier scores every position, then reads the last real)."""
        shape = self.reward_shapes[id(func)]
        rows, width = input_ids.shape
        lengths = attention.sum(1).tolist() if attention is not None else [width] * rows
        return (flops.forward_flops(shape, lengths, outputs="last"),
                flops.forward_flops(shape, [width] * rows, convention="executed"))


def recompute_flops(shape: ModelShape, lora: LoraShape | None, rows: int, width: int) -> int:
    """What gradient checkpointing reruns in the backward pass of ``rows`` sequences padded
    to ``width``: every decoder layer's forward (full attention) except its last matmul,
    whose output no backward needs (torch's non-reentrant checkpoint stops early): the
    down_proj adapter's B, or down_proj itself when it has no adapter."""
    dims = {m: (d_in, d_out) for m, d_in, d_out in shape.linear_dims()}
    d_in, d_out = dims["down_proj"]
    rank = lora.rank if lora is not None and "down_proj" in lora.targets else 0
    last = 2 * rank * d_out if rank else 2 * d_in * d_out
    per_token = flops.linear_forward_flops_per_token(shape, lora) - shape.num_layers * last
    return per_token * rows * width + flops.attention_flops(shape, rows * width * width)


def torch_is_tensor(value) -> bool:
    import torch

    return torch.is_tensor(value)


def _checkpointing(model) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_gradient_checkpointing", False))


def _adapters_disabled(model) -> bool:
    from peft.tuners.tuners_utils import BaseTunerLayer

    layer = next((m for m in model.modules() if isinstance(m, BaseTunerLayer)), None)
    return layer is not None and bool(layer.disable_adapters)


# --------------------------------------------------------------------------- wiring


def _wrap(owner, name: str, make) -> None:
    """Replace the bound method ``owner.name`` by ``make(original)`` on this instance."""
    original = getattr(owner, name)
    setattr(owner, name, make(original))


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
    import torch

    if getattr(trainer, "_race_callback", None) is not None:
        raise refuse("track(trainer)", type(trainer).__name__, "this trainer is tracked "
                      "already (a second ledger would count every pass twice)",
                      "call track once per trainer")
    out_dir = Path(out_dir) if out_dir is not None else Path(trainer.args.output_dir) / "race"
    cb = RaceCallback(trainer, out_dir, run_id=run_id, budget_flops=budget_flops,
                      measure=measure)

    def generate(original):
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

    def logprobs(original):
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

    def backward(original):
        def wrapped(*args, **kwargs):
            start, counter = time.perf_counter(), cb._counter()
            with counter:
                out = original(*args, **kwargs)
            cb._add(cb._phase("learning"), 0.0, 0.0, counter, start)
            return out
        return wrapped

    def rewards(original):
        def wrapped(*args, **kwargs):
            start, counter = time.perf_counter(), cb._counter()
            with counter:
                per_func = original(*args, **kwargs)
            cb._add(cb._phase("feedback"), 0.0, 0.0, counter, start)  # models: hooks below
            weights = trainer.reward_weights.to(per_func.device)
            cb.last_reward = float((per_func * weights).nansum(dim=1).mean())
            return per_func
        return wrapped

    def log(original):
        def wrapped(logs, *args, **kwargs):
            logs.update(cb.log_values())
            return original(logs, *args, **kwargs)
        return wrapped

    def train(original):
        def wrapped(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except Exception as error:  # the run is recorded as failed, with what it spent
                cb.finish("failed", f"{type(error).__name__}: {error}")
                raise
        return wrapped

    _wrap(trainer.model, "generate", generate)
    _wrap(trainer, "_get_per_token_logps_and_entropies", logprobs)
    _wrap(trainer.accelerator, "backward", backward)
    _wrap(trainer, "_calculate_rewards", rewards)
    _wrap(trainer, "log", log)
    _wrap(trainer, "train", train)
    for func in trainer.reward_funcs:
        if id(func) in cb.reward_shapes:
            def hook(module, args, kwargs, func=func):
                ids = kwargs.get("input_ids", args[0] if args else None)
                model, executed = cb.count_reward_model(func, ids, kwargs.get("attention_mask"))
                cb.ledger.add(cb._phase("feedback"), float(model), float(executed), 0.0)
            func.register_forward_pre_hook(hook, with_kwargs=True)
    trainer.add_callback(cb)
    trainer._race_callback = cb
    return cb
