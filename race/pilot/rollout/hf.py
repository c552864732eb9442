"""``hf`` rollouts: Hugging Face ``generate`` with a KV cache on the live PEFT model.

The backend samples from the very model the learner updates, so a new adapter needs no
copy: ``load_adapter`` only matters for a standalone backend. FLOPs come from the token
counts that happened: the model convention on real tokens, the executed convention on
each padded ``generate`` batch exactly as it ran (left-padded prompts, every row decoding
until the longest one stops), optionally measured with FlopCounterMode.

Two generation paths (``generation``): ``eager`` (a growing ``DynamicCache``, per-step
logits kept for the sampled log-probs) and ``static`` (a static cache whose decode step
transformers compiles into a CUDA graph on GPUs: :mod:`race.pilot.rollout.static`, which
says what differs). ``auto`` takes ``static`` on CUDA and ``eager`` on CPU.

torch, peft and race.nn.measure (torch) are imported inside the methods (heavy: a sweep
process imports this module without generating).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from race.core import flops
from race.core.specs import LoraShape, ModelShape
from race.pilot.rollout import static
from race.pilot.rollout.base import Rollouts


class HFBackend:
    """Batched sampling with ``model.generate``; deterministic for a seed on CPU."""

    name = "hf"

    def __init__(self, model, tokenizer, shape: ModelShape, lora: LoraShape | None = None,
                 *, batch_rows: int = 0, measure: bool = False, generation: str = "auto"):
        """
        Args:
            model: a causal LM (a PEFT model when training LoRA adapters).
            tokenizer: its tokenizer (EOS doubles as padding).
            shape, lora: what FLOPs are counted for.
            batch_rows: completions per ``generate`` call (0: all in one call).
            measure: also count each call with FlopCounterMode (``flops_measured``); the
                static path then runs uncompiled, so the counter sees every op.
            generation: ``auto`` (``static`` on CUDA, ``eager`` elsewhere), ``eager`` or
                ``static``.
        """
        self.model, self.tokenizer, self.shape, self.lora = model, tokenizer, shape, lora
        self.batch_rows, self.measure = batch_rows, measure
        self.device = next(model.parameters()).device
        self.generation = static.resolve(generation, self.device.type, shape)
        self._caches = static.StaticCaches(model.config)

    def load_adapter(self, adapter_dir: Path | None) -> None:
        """Load a saved adapter into a standalone backend (the live model needs nothing)."""
        if adapter_dir is None:
            return
        from peft import PeftModel, set_peft_model_state_dict
        from peft.utils import load_peft_weights

        if isinstance(self.model, PeftModel):
            set_peft_model_state_dict(self.model, load_peft_weights(str(adapter_dir)))
        else:
            self.model = PeftModel.from_pretrained(self.model, str(adapter_dir))

    def _static_kwargs(self, rows: int, cache_len: int, greedy: bool, temperature: float):
        """``generate`` arguments of the static path, and the sampled log-prob recorder."""
        extra = {"past_key_values": self._caches.get(rows, cache_len),
                 # FlopCounterMode sees no op inside a compiled graph
                 "disable_compile": self.measure}
        if greedy:
            return extra, None
        recorder = static.SampledLogprobs(temperature)  # no [B, T, V] logits kept
        return extra | {"logits_processor": [recorder]}, recorder

    def generate(self, prompts: list[str], *, n: int, max_new_tokens: int,
                 temperature: float = 1.0, seed: int = 0, greedy: bool = False) -> Rollouts:
        import torch

        from race.nn.measure import flop_counter

        tok = self.tokenizer
        index = [i for i in range(len(prompts)) for _ in range(n)]
        rows = [prompts[i] for i in index]
        step = self.batch_rows or len(rows)
        prompt_ids, completion_ids, logprobs, finished = [], [], [], []
        executed, measured = 0.0, 0.0
        self.model.eval()
        torch.manual_seed(seed)
        fast = self.generation == "static"
        for start in range(0, len(rows), step):
            batch = tok(rows[start:start + step], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(self.device)
            width = batch["input_ids"].shape[1]
            cache_len = static.cache_tokens(width, max_new_tokens) if fast else 0
            extra, recorder = (self._static_kwargs(len(batch["input_ids"]), cache_len, greedy,
                                                   temperature) if fast else ({}, None))
            counter = flop_counter() if self.measure else contextlib.nullcontext()
            with torch.no_grad(), counter:
                out = self.model.generate(
                    **batch, max_new_tokens=max_new_tokens, do_sample=not greedy,
                    temperature=None if greedy else temperature, top_k=0 if not greedy else None,
                    top_p=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                    output_logits=not greedy and not fast, return_dict_in_generate=True,
                    **extra)
            if self.measure:
                measured += counter.get_total_flops()
            new = out.sequences[:, width:]
            # greedy calls (evaluation) keep no logits: their log-probs are not read
            if greedy:
                token_logp = new.new_zeros(new.shape, dtype=torch.float32)
            elif fast:
                token_logp = recorder.finish(new)
            else:
                token_logp = _sampled_logprobs(out.logits, new, temperature)
            del out
            lengths = []
            # one device-to-host copy per tensor, not one per row
            rows_new, rows_logp = new.tolist(), token_logp.tolist()
            rows_prompt = batch["input_ids"].tolist()
            rows_mask = batch["attention_mask"].tolist()
            for ids, logp, prompt, mask in zip(rows_new, rows_logp, rows_prompt, rows_mask):
                done = tok.eos_token_id in ids
                length = ids.index(tok.eos_token_id) + 1 if done else len(ids)
                prompt_ids.append(tuple(t for t, keep in zip(prompt, mask) if keep))
                completion_ids.append(tuple(ids[:length]))
                logprobs.append(tuple(logp[:length]))
                finished.append(done)
                lengths.append(length)
            batch_prompts = [len(p) for p in prompt_ids[-len(lengths):]]
            if fast:  # every query attends the whole static cache
                executed += static.static_generate_flops(
                    self.shape, batch_prompts, lengths, cache_tokens=cache_len, lora=self.lora,
                    decode_steps=len(rows_new[0]))
            else:
                executed += flops.generate_flops(
                    self.shape, batch_prompts, lengths, convention="executed", lora=self.lora,
                    decode_steps=len(rows_new[0]))
        model_flops = flops.generate_flops(self.shape, [len(p) for p in prompt_ids],
                                           [len(c) for c in completion_ids], lora=self.lora)
        texts = tok.batch_decode([list(c) for c in completion_ids], skip_special_tokens=True)
        return Rollouts(tuple(index), tuple(prompt_ids), tuple(completion_ids),
                        tuple(logprobs), tuple(texts), tuple(finished), float(model_flops),
                        float(executed), measured if self.measure else None)


def _sampled_logprobs(step_logits, new, temperature: float):
    """``[B, T]`` log-prob of each sampled token, one decode step at a time: a float32
    ``[B, V]`` slice at a time, never a stacked ``[B, T, V]`` copy of the logits."""
    import torch

    columns = []
    for t, logits in enumerate(step_logits):
        logits = logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        columns.append(logits.log_softmax(-1).gather(-1, new[:, t:t + 1])[:, 0])
    return torch.stack(columns, dim=1)
