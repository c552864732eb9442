"""The PEFT LoRA learner: clipped-ratio GRPO updates over minibatches, mu epochs per batch.

The reference policy is the same model with its adapters disabled (no second copy).
FLOPs of every pass are counted from the padded minibatches that actually ran, in both
conventions, through :mod:`race.core.flops`.

torch, peft and the torch-importing race.core.grpo and race.nn.measure are imported
inside the methods (heavy: a sweep process imports this module without running a
learner).
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from pathlib import Path

from race.core import flops, knobs, memory
from race.core.specs import LoraShape, ModelShape, RunSpec
from race.errors import UsageError
from race.warmstart.tokenizer import pad_right


class TrainingDiverged(RuntimeError):
    """A NaN or infinite loss or gradient: the pilot stops with the step and the reason."""


# every update's gradients are clipped to this global norm (not a knob)
MAX_GRAD_NORM = 1.0
# decoder families whose causal LM's logits are exactly lm_head(last hidden state) (no
# soft-capping or logit scale), so the learner may run that head itself, in chunks
PLAIN_HEAD_TYPES = ("qwen2", "qwen3", "llama", "mistral")
# share of the free GPU memory that planned micro-batches may fill (the plan is an
# estimate: docs/gpus.md compares it with measured peaks)
PLAN_FILL = 0.6


# The learning knobs of one cell: its RunSpec's fields declared ``learner=True``, with
# their defaults (``LearnerConfig.from_spec(spec)`` reads them from a cell's spec).
LearnerConfig = knobs.spec_view(
    RunSpec, "LearnerConfig",
    [name for name, (knob, _) in knobs.knobs(RunSpec).items() if knob.learner],
    "Learning knobs of one cell: its RunSpec's fields of the same names (grid.* and "
    "pilot.* in the config), defaults included.", __name__)


@dataclass(frozen=True, slots=True)
class Batch:
    """One GRPO batch: token ids per completion (prompt-major) and their advantages."""

    prompt_ids: tuple[tuple[int, ...], ...]
    completion_ids: tuple[tuple[int, ...], ...]
    advantages: tuple[float, ...]
    # the sampler's log-prob of each completion token (None: not given)
    sampling_logprobs: tuple[tuple[float, ...], ...] | None = None


class LoraLearner:
    """A PEFT LoRA model trained with GRPO; ``model`` is shared with the HF rollout backend."""

    def __init__(self, model, shape: ModelShape, config: LearnerConfig, *, pad_id: int,
                 seed: int = 0, measure: bool = False, device: str = "cpu"):
        """Wrap ``model`` (on CPU) in fp32 LoRA adapters, then move it to ``device``:
        adapters are initialised before the move, so a seed gives the same ones anywhere."""
        import torch
        from peft import LoraConfig, get_peft_model

        self.shape, self.config, self.pad_id, self.measure = shape, config, pad_id, measure
        self.device = device
        self.lora = LoraShape(config.lora_rank, tuple(config.lora_targets))
        self.lora.validate(shape)
        torch.manual_seed(seed)
        peft_config = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                 lora_dropout=0.0,  # none: a seed gives one update
                                 target_modules=list(config.lora_targets))
        # autocast_adapter_dtype: adapters in fp32 under bf16 base weights
        self.model = get_peft_model(model, peft_config, autocast_adapter_dtype=True)
        self.model.to(device)
        # (decoder body, output head) to run the head in chunks; None: full logits
        self.head = _body_and_head(self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        from race.nn.measure import attention_backward_is_fused

        # which attention backward this model runs on this device (executed convention)
        self.fused_attention = attention_backward_is_fused(self.model, device=device)
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        self.rng = random.Random(seed)
        self.flops = {"model": 0.0, "executed": 0.0, "measured": 0.0}

    # ------------------------------------------------------------------ batches

    def _padded(self, batch: Batch, rows: list[int]):
        import torch

        seqs = [batch.prompt_ids[r] + batch.completion_ids[r] for r in rows]
        ids, attention = pad_right(seqs, self.pad_id)
        mask = torch.zeros((len(rows), ids.shape[1] - 1))  # over predicted positions 1..T-1
        for i, (r, seq) in enumerate(zip(rows, seqs)):
            mask[i, len(batch.prompt_ids[r]) - 1:len(seq) - 1] = 1
        return (ids.to(self.device), attention.to(self.device), mask.to(self.device),
                [len(s) for s in seqs])

    def _charge(self, lengths: list[int], kind: str, counter) -> None:
        """Add one pass over ``lengths`` to the ledger: ``train`` (forward + backward),
        ``policy`` or ``reference`` (forward), or ``diverged`` (the forward of a pass whose
        loss was not finite, plus the head's hidden-state gradient when the chunked head
        took it during that forward)."""
        for convention in flops.CONVENTIONS:
            if kind == "train":
                cost = flops.lora_train_flops(self.shape, lengths, self.lora,
                                              convention=convention,
                                              fused_attention=self.fused_attention)
            else:
                cost = flops.forward_flops(self.shape, lengths, convention=convention,
                                           lora=self.lora, adapters=kind != "reference")
            if kind == "diverged" and self.head is not None:
                positions = (sum(lengths) if convention == "model"
                             else len(lengths) * max(lengths))
                cost += flops.head_flops_per_position(self.shape) * positions
            self.flops[convention] += cost
        if counter is not None:
            self.flops["measured"] += counter.get_total_flops()

    def _counter(self):
        from race.nn.measure import flop_counter

        return flop_counter() if self.measure else None

    def _logprobs(self, ids, attention):
        """``[B, T - 1]`` float32 log-probs of ``ids[:, 1:]`` at the cell's temperature.

        The decoder body runs once; the output head runs on every position (as
        ``model(...).logits`` would, so both FLOP conventions are unchanged) in chunks of
        :func:`race.core.memory.head_chunk_positions`, never holding ``[B, T, V]`` logits
        (:func:`race.core.logprobs.head_token_logprobs`). A head it cannot run by itself
        (``self.head`` None) takes the full logits.
        """
        from race.core.logprobs import head_token_logprobs, token_logprobs

        temperature = self.config.temperature
        if self.head is None:
            logits = self.model(input_ids=ids, attention_mask=attention).logits
            if temperature != 1.0:  # no copy of [B, T, V] logits at temperature 1
                logits = logits / temperature
            return token_logprobs(logits, ids)
        body, head = self.head
        hidden = body(input_ids=ids, attention_mask=attention,
                      use_cache=False).last_hidden_state
        return head_token_logprobs(hidden, head.weight, ids, bias=head.bias,
                                   temperature=temperature,
                                   chunk_positions=memory.head_chunk_positions(
                                       head.weight.shape[0]))

    def logprobs(self, batch: Batch, *, adapters: bool = True) -> list:
        """Per-completion log-probs of ``batch`` (no gradients): old policy or reference."""
        import torch

        rows = list(range(len(batch.completion_ids)))
        out: list = [None] * len(rows)
        chunks = [part for minibatch in self._minibatches(rows, shuffle=False)
                  for part in self._micro_batches(batch, minibatch)]
        for chunk in chunks:
            ids, attention, mask, lengths = self._padded(batch, chunk)
            counter = self._counter()
            disable = contextlib.nullcontext() if adapters else self.model.disable_adapter()
            with torch.no_grad(), disable, counter or contextlib.nullcontext():
                logp = self._logprobs(ids, attention)
            self._charge(lengths, "policy" if adapters else "reference", counter)
            for i, r in enumerate(chunk):
                out[r] = logp[i][mask[i].bool()]
        return out

    def _minibatches(self, rows: list[int], shuffle: bool) -> list[list[int]]:
        size = self.config.minibatch_size or len(rows)
        if len(rows) % size:
            raise UsageError(f"grid.minibatch_size={size}: must divide the rollout batch "
                             f"of {len(rows)} completions")
        order = rows[:]
        if shuffle:
            self.rng.shuffle(order)
        return [order[i:i + size] for i in range(0, len(order), size)]

    def _micro_batches(self, batch: Batch, rows: list[int]) -> list[list[int]]:
        """``rows`` in passes of ``micro_batch_size`` completions, shortest sequences
        first so each pass pads little. When it is 0: on CUDA, as many as the memory
        plan fits (:meth:`_planned_micro_rows`); elsewhere one pass of ``rows`` as given."""
        size = self.config.micro_batch_size or self._planned_micro_rows(batch, rows)
        if not size or size >= len(rows):
            return [rows]
        by_length = sorted(rows, key=lambda r: (len(batch.prompt_ids[r])
                                                + len(batch.completion_ids[r]), r))
        return [by_length[i:i + size] for i in range(0, len(by_length), size)]

    def _planned_micro_rows(self, batch: Batch, rows: list[int]) -> int:
        """Completions per pass that the memory plan's learning term
        (:func:`race.core.memory.learning_bytes`) fits, at the longest sequence of
        ``rows``, in :data:`PLAN_FILL` of the GPU memory free now; 0 (one pass) off CUDA."""
        import torch

        if torch.device(self.device).type != "cuda":
            return 0
        free, _ = torch.cuda.mem_get_info(self.device)
        # blocks torch's caching allocator holds but no tensor uses are free to it too
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(
            self.device)
        dtype = str(self.model.get_base_model().dtype).removeprefix("torch.")
        longest = max(len(batch.prompt_ids[r]) + len(batch.completion_ids[r]) for r in rows)
        return memory.micro_rows_that_fit(self.shape, seq_tokens=longest,
                                          dtype=dtype if dtype in memory.DTYPE_BYTES
                                          else "float32", free_bytes=PLAN_FILL * free)

    # ------------------------------------------------------------------ update

    def update(self, batch: Batch, *, step: int) -> dict[str, float]:
        """``update_epochs`` passes of clipped-ratio updates over shuffled minibatches.

        Old-policy log-probs are computed first when the policy moves before a completion
        is used (mu > 1 or several minibatches); otherwise the ratio is exactly 1 and the
        detached current log-probs stand in for them. Reference log-probs (adapters
        disabled) only when ``kl_coef > 0``.
        """
        import torch

        cfg = self.config
        rows = list(range(len(batch.completion_ids)))
        minibatches = self._minibatches(rows, shuffle=False)
        moves = cfg.update_epochs > 1 or len(minibatches) > 1
        tis = cfg.tis_cap > 0 and batch.sampling_logprobs is not None
        old = self.logprobs(batch) if moves or tis else None
        sampler = ([torch.tensor(row, dtype=torch.float32, device=self.device)
                    for row in batch.sampling_logprobs] if tis else None)
        ref = self.logprobs(batch, adapters=False) if cfg.kl_coef > 0 else None
        advantages = torch.tensor(batch.advantages, dtype=torch.float32, device=self.device)
        stats: dict[str, float] = {}
        self.model.train()
        for _ in range(cfg.update_epochs):
            for chunk in self._minibatches(rows, shuffle=True):
                parts = self._micro_batches(batch, chunk)
                # each pass's share of the minibatch's loss: its tokens (token-mean) or
                # its completions (sequence-mean), so the summed gradient is the same
                weights = [len(part) / len(chunk) for part in parts]
                if cfg.aggregation == "token" and len(parts) > 1:
                    tokens = [sum(len(batch.completion_ids[r]) for r in part)
                              for part in parts]
                    weights = [n / max(1, sum(tokens)) for n in tokens]
                loss_sum, stats_sum = 0.0, {}
                for part, weight in zip(parts, weights):
                    loss, part_stats = self._backward(batch, part, old, ref, sampler,
                                                      advantages, weight, step)
                    loss_sum += weight * loss
                    for key, value in part_stats.items():
                        stats_sum[key] = stats_sum.get(key, 0.0) + weight * value
                norm = torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM)
                if not torch.isfinite(norm):
                    raise TrainingDiverged(f"step {step}: gradient norm is {float(norm)}")
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                stats = stats_sum | {"loss": loss_sum, "grad_norm": float(norm)}
        return stats

    def _backward(self, batch: Batch, part: list[int], old, ref, sampler, advantages,
                  weight: float, step: int) -> tuple[float, dict[str, float]]:
        """Forward and backward of one pass over ``part``, its loss scaled by ``weight``
        (gradients accumulate); returns its unscaled loss and stats. ``sampler``: the
        sampling engine's log-probs, for truncated importance weights (None: off)."""
        import torch

        from race.core.grpo import grpo_loss, truncated_is_weights

        cfg = self.config
        ids, attention, mask, lengths = self._padded(batch, part)
        counter = self._counter()
        with counter or contextlib.nullcontext():
            logp = self._logprobs(ids, attention)
            old_logp = self._stack(old, part, mask) if old is not None else logp.detach()
            ref_logp = self._stack(ref, part, mask) if ref is not None else None
            weights = (truncated_is_weights(old_logp, self._stack(sampler, part, mask), mask,
                                            cap=cfg.tis_cap) if sampler is not None else None)
            loss, stats = grpo_loss(logp, old_logp, ref_logp, advantages[part], mask,
                                    clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef,
                                    aggregation=cfg.aggregation, token_weights=weights)
            diverged = not torch.isfinite(loss)
            if not diverged:
                (loss * weight if weight != 1.0 else loss).backward()
        # a diverged pass ran its forward only (and the chunked head's gradient): that much
        self._charge(lengths, "diverged" if diverged else "train", counter)
        if diverged:
            raise TrainingDiverged(f"step {step}: loss is {float(loss.detach())}")
        return float(loss.detach()), stats

    def _stack(self, per_row: list, chunk: list[int], mask):
        import torch

        out = torch.zeros_like(mask)
        for i, r in enumerate(chunk):
            out[i, mask[i].bool()] = per_row[r]
        return out

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict:
        """What a resumed pilot needs to continue exactly where this learner stands.

        The trainable (LoRA) weights by parameter name, AdamW's moments and step counts,
        the minibatch-shuffle RNG and the FLOP counters. The frozen base is left out: it
        reloads from the policy folder. Tensors are live references (as in
        ``nn.Module.state_dict``): save them before the next update.
        """
        return {"adapter": {name: p.detach() for name, p in self.model.named_parameters()
                            if p.requires_grad},
                "optimizer": self.optimizer.state_dict(),
                "rng": self.rng.getstate(),
                "flops": dict(self.flops)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` into this learner.

        Weights are copied in place, so the optimizer keeps its parameters and a backend
        sampling from ``self.model`` (``hf``) sees the restored adapter at once.
        """
        import torch

        params = dict(self.model.named_parameters())
        trainable = {name for name, p in params.items() if p.requires_grad}
        if set(state["adapter"]) != trainable:
            missing, extra = trainable - set(state["adapter"]), set(state["adapter"]) - trainable
            raise UsageError(f"learner state does not fit this LoRA model (missing "
                             f"{sorted(missing)[:3]}, unexpected {sorted(extra)[:3]}); it was "
                             f"saved for another lora_rank/lora_targets: delete it to start "
                             f"afresh")
        with torch.no_grad():
            for name, value in state["adapter"].items():
                params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.flops = dict(state["flops"])

    def save_adapter(self, folder: Path) -> Path:
        """Write the adapter (PEFT format) so another backend can load it."""
        self.model.save_pretrained(str(folder))
        return Path(folder)


def _body_and_head(peft_model):
    """(decoder body, output head) of ``peft_model`` when the learner may run the head
    itself: a family in :data:`PLAIN_HEAD_TYPES` whose head is a plain, frozen
    ``nn.Linear`` (LoRA targets only decoder linears, ``LoraShape.validate``, so an
    adapted head is not expected, but one would be caught here). Else None."""
    import torch

    causal = peft_model.get_base_model()
    head = causal.get_output_embeddings()
    if (getattr(causal.config, "model_type", None) not in PLAIN_HEAD_TYPES
            or type(head) is not torch.nn.Linear
            or any(p.requires_grad for p in head.parameters())):
        return None
    return causal.get_decoder(), head
