"""The ``hf`` backend's fast generation path: a static KV cache, the decode step compiled.

``generate`` with a :class:`transformers.StaticCache` preallocates every layer's keys and
values at ``[rows, kv_heads, cache_tokens, head_dim]`` and writes each step in place, so the
one-token decode step has the same shapes every time. On CUDA, transformers then compiles
that step itself (``torch.compile`` with ``mode="reduce-overhead"``: a CUDA graph, one
launch per step instead of several per linear, LoRA adapters included, unmerged); the
prefill stays eager (its width varies). On CPU nothing is compiled.

What changes against the eager path (``DynamicCache``), measured in
``tests/test_generation_paths.py``:

* **Tokens**: greedy tokens equal the eager path's; sampled tokens for a seed equal them
  unless a draw falls within float rounding (~1e-7) of a probability boundary: attention
  over the longer, masked cache sums in another order (logits differ by ~1e-7 in fp32).
* **Executed FLOPs**: every query attends the whole cache (``cache_tokens`` keys, masked),
  prefill included; :func:`static_generate_flops` is that count and equals
  FlopCounterMode. The model convention (real tokens) is unchanged.
* **Log-probs** of sampled tokens come from the scores the sampler saw, one ``[B, V]``
  step at a time (:class:`SampledLogprobs`), never a ``[B, T, V]`` stack of logits. They
  equal the eager path's (raw logits) unless the checkpoint's ``generation_config`` adds a
  logits processor (e.g. ``repetition_penalty``): then they are the penalised
  distribution's, the one the tokens were drawn from.
* **Measured FLOPs**: with ``measure=True`` nothing is compiled (FlopCounterMode sees no
  op inside a compiled graph), so the count is exact and the speed is eager's.

Pure pieces (:func:`cache_tokens`, :func:`static_generate_flops`, :func:`resolve`) import
no torch; :class:`StaticCaches` imports transformers inside its method.
"""

from __future__ import annotations

from collections.abc import Sequence

from race.core import flops
from race.core.specs import LoraShape, ModelShape
from race.errors import UsageError

GENERATIONS = ("auto", "eager", "static")
# the cache length is rounded up to this many tokens, so that calls whose prompts differ by a
# few tokens share one compiled decode step (and one CUDA graph) instead of recompiling
CACHE_BUCKET_TOKENS = 64
KEEP_CACHES = 2  # static caches kept for reuse (rollout and eval shapes); older ones freed


def resolve(generation: str, device_type: str, shape: ModelShape | None = None) -> str:
    """``auto`` -> ``static`` on CUDA, ``eager`` elsewhere (on CPU the eager path keeps the
    executed ledger and sampling stream of every CPU result so far; see
    ``bench/generation_paths.py`` for the CPU speed of both). A model with sliding-window
    layers (``shape``) generates eagerly: a static cache sizes those layers' caches to the
    window, which :func:`static_generate_flops` does not count."""
    if generation not in GENERATIONS:
        raise UsageError(f"generation={generation!r}: use one of {'|'.join(GENERATIONS)}")
    sliding = shape is not None and shape.sliding_layers > 0
    if generation == "static" and sliding:
        raise UsageError(f"generation=static: model {shape.name!r} has sliding-window "
                         f"layers, whose static cache RACE does not count; use "
                         f"generation=eager (or auto)")
    if generation == "auto":
        return "static" if device_type == "cuda" and not sliding else "eager"
    return generation


def cache_tokens(prompt_width: int, max_new_tokens: int) -> int:
    """Static cache length for a batch left-padded to ``prompt_width`` that may decode
    ``max_new_tokens``: the positions it can fill, rounded up to
    :data:`CACHE_BUCKET_TOKENS`."""
    need = prompt_width + max_new_tokens
    return -(-need // CACHE_BUCKET_TOKENS) * CACHE_BUCKET_TOKENS


def static_generate_flops(shape: ModelShape, prompt_tokens: Sequence[int],
                          new_tokens: Sequence[int], *, cache_tokens: int,
                          lora: LoraShape | None = None,
                          decode_steps: int | None = None) -> int:
    """Executed FLOPs of one ``generate`` call with a static cache of ``cache_tokens``.

    As the ``executed`` convention of :func:`race.core.flops.generate_flops` (prompts
    left-padded to the longest, every row running ``decode_steps - 1`` decode steps, the
    head on one position per step), except attention: each of the padded prompt's
    queries and each decode query attends all ``cache_tokens`` keys of the static cache
    (the unfilled ones masked, which SDPA still multiplies), ``4 L d_attn`` FLOPs per pair.
    """
    if len(prompt_tokens) != len(new_tokens) or not prompt_tokens:
        raise UsageError(f"new_tokens: {len(new_tokens)} completions for "
                         f"{len(prompt_tokens)} prompts; pass one count per sequence (>= 1)")
    rows, width = len(prompt_tokens), max(prompt_tokens)
    steps = decode_steps if decode_steps is not None else max(new_tokens)
    if steps < max(new_tokens) or width + steps > cache_tokens + 1:
        raise UsageError(f"decode_steps={steps}: fewer than the longest completion "
                         f"({max(new_tokens)}) or more than a {cache_tokens}-token cache "
                         f"holds after a {width}-token prompt")
    linear = flops.linear_forward_flops_per_token(shape, lora)
    head = flops.head_flops_per_position(shape)
    prefill = rows * width * linear + rows * head
    decode = rows * (steps - 1) * (linear + head)
    pairs = rows * (width + steps - 1) * cache_tokens
    return prefill + decode + flops.attention_flops(shape, pairs)


class SampledLogprobs:
    """A logits processor that keeps the log-probability of each sampled token.

    At step ``t`` it computes ``log_softmax(scores / temperature)`` (a float32 ``[B, V]``),
    and at step ``t + 1`` gathers the token that was drawn from it (the last column of
    ``input_ids``); :meth:`finish` gathers the last step's token. Only one step's ``[B, V]``
    is alive at a time. It runs outside the compiled decode step, so it works under CUDA
    graphs. It sees the scores after any processor the model's ``generation_config`` adds
    and before the temperature warper (which ``generate`` appends last).
    """

    def __init__(self, temperature: float):
        self.temperature, self.columns, self._last = temperature, [], None

    def __call__(self, input_ids, scores):
        if self._last is not None:
            self.columns.append(self._last.gather(-1, input_ids[:, -1:])[:, 0])
        logits = scores.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        self._last = logits.log_softmax(-1)
        return scores

    def finish(self, new_ids):
        """``[B, T]`` log-probs of ``new_ids`` (the ``T`` generated columns)."""
        import torch

        if self._last is not None:
            self.columns.append(self._last.gather(-1, new_ids[:, -1:])[:, 0])
        self._last = None
        assert len(self.columns) == new_ids.shape[1], (len(self.columns), new_ids.shape)
        return torch.stack(self.columns, dim=1)


class StaticCaches:
    """Static KV caches kept between ``generate`` calls, one per ``(rows, cache_tokens)``.

    Reusing a cache (zeroed by ``reset()``) keeps its tensors at the same addresses, which
    a captured CUDA graph needs: a fresh cache each call would re-record the graph, and
    torch stops using graphs after too many re-records. At most :data:`KEEP_CACHES` are
    kept (2 x layers x kv_heads x head_dim x rows x cache_tokens elements each).
    """

    def __init__(self, config):
        self.config, self._caches = config, {}

    def get(self, rows: int, tokens: int):
        from transformers import StaticCache

        key = (rows, tokens)
        cache = self._caches.pop(key, None)
        if cache is None:
            cache = StaticCache(config=self.config, max_cache_len=tokens)
            while len(self._caches) >= KEEP_CACHES:
                self._caches.pop(next(iter(self._caches)))
        else:
            cache.reset()
        self._caches[key] = cache  # most recently used last
        return cache

    def clear(self) -> None:
        self._caches.clear()
