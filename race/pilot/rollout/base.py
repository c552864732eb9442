"""What every rollout backend returns, and the Protocol it implements.

A backend samples ``n`` completions for each prompt and reports exact token counts, the
sampling log-probabilities of every completion token, and the FLOPs of what it ran in
both conventions (computed by :mod:`race.core.flops` from the token counts that happened).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Rollouts:
    """Completions of one rollout call, one entry per completion (prompt-major order:
    the ``n`` completions of prompt 0 first).

    Attributes:
        prompt_index: which input prompt each completion answers.
        prompt_ids: token ids of that prompt (no padding).
        completion_ids: generated token ids, the EOS included when it was produced.
        logprobs: sampling log-probability of each completion token (same length); the
            HF backend's greedy calls (evaluation) report 0.0, keeping no logits.
        texts: decoded completions (special tokens removed).
        finished: the completion ended with EOS (False: cut at ``max_new_tokens``).
        flops_model: FLOPs of the call, model convention (real tokens).
        flops_executed: FLOPs as the backend ran them (HF: padded batches; vLLM: the
            unpadded, causal count, since its kernels do not pad).
        flops_measured: FlopCounterMode's count when the backend measured (HF only).
    """

    prompt_index: tuple[int, ...]
    prompt_ids: tuple[tuple[int, ...], ...]
    completion_ids: tuple[tuple[int, ...], ...]
    logprobs: tuple[tuple[float, ...], ...]
    texts: tuple[str, ...]
    finished: tuple[bool, ...]
    flops_model: float
    flops_executed: float
    flops_measured: float | None = None

    @property
    def completion_tokens(self) -> int:
        return sum(len(c) for c in self.completion_ids)


@runtime_checkable
class RolloutBackend(Protocol):
    """Samples completions from the current policy (base weights + LoRA adapter)."""

    name: str

    def generate(self, prompts: list[str], *, n: int, max_new_tokens: int,
                 temperature: float = 1.0, seed: int = 0, greedy: bool = False) -> Rollouts:
        """``n`` completions per prompt; ``greedy`` ignores temperature and seed."""
        ...

    def load_adapter(self, adapter_dir: Path | None) -> None:
        """Serve the PEFT adapter saved in ``adapter_dir`` from now on (None: base model)."""
        ...
