"""The ledger of one TRL ``GRPOTrainer`` run: :class:`RaceCallback` counts the FLOPs of
every pass :func:`race.integrations.trl.track` routes to it, by phase and convention, and
writes the run in RACE's results contract (the counting rules are in that module's
docstring and docs/integrations.md).
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
from race.integrations.trl_checks import check_trainer, lora_shape, model_shape
from race.pilot.state import Ledger
from race.store import io as results
from race.store.cell import CellDir
from race.store.records import ExternalRun, PilotSummary

PHASES = ("rollout", "learning", "feedback", "eval")
CHARGED = ("rollout", "learning", "feedback")


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

    def summary(self) -> PilotSummary:
        """What ``summary.json`` holds (the pilots' fields; docs/design.md): a run with
        no budget of its own, so no ``unspent_flops``."""
        ledger = self.ledger
        charged = ledger.charged("model")
        ledger.wall_s["other"] = max(0.0, time.perf_counter() - self.started - sum(
            v for k, v in ledger.wall_s.items() if k != "other"))
        return PilotSummary(
            status=self.status, error=self.error, cell_id=self.spec["cell_id"],
            budget_flops=self.spec["budget_flops"] or charged, convention="model",
            total_flops=charged, flops=dict(ledger.flops["model"]),
            flops_model=ledger.flops["model"], flops_executed=ledger.flops["executed"],
            flops_measured=ledger.flops["measured"] if self.measure else None,
            redone=dict.fromkeys(PHASES, 0.0), redone_flops=0.0,
            wall_s=dict(ledger.wall_s), steps=self.steps, resumed_from_step=None,
            external=ExternalRun("trl", str(self.trainer.args.device),
                                 str(self.trainer.model.dtype)))

    def finish(self, status: str = "ok", error: str | None = None) -> dict:
        """Write ``summary.json`` (and the spec with its realized budget); returns what
        it holds."""
        self.status, self.error = status, error
        summary = self.summary()
        self.spec["budget_flops"] = summary.budget_flops
        results.write_json(self.cell.spec, self.spec)
        results.write_jsonl(self.cell.metrics, self.rows)
        results.write_json(self.cell.summary, summary.to_json())
        return summary.to_json()

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
