"""The ``hf`` backend's static-cache path against today's eager path: same greedy tokens,
same sampled tokens for a seed (log-probs within float rounding), and an executed ledger
that equals FlopCounterMode for the path that ran (race.pilot.rollout.static)."""

import dataclasses

import pytest

torch = pytest.importorskip("torch", reason="torch runs generation")
pytest.importorskip("peft", reason="the backend generates through LoRA adapters")

from race.catalog import load_model_shape  # noqa: E402
from race.core import flops  # noqa: E402
from race.core.specs import LoraShape  # noqa: E402
from race.errors import UsageError  # noqa: E402
from race.pilot.rollout import static  # noqa: E402
from race.pilot.rollout.hf import HFBackend  # noqa: E402

TOL = 1e-3
PROMPTS = ["3+4=?\n", "12+30+7=?\n", "5+5+5+5=?\n", "8+1=?\n"]


def _adapted(folder, seed: int = 0):
    """(LoRA learner, tokenizer) over the model in ``folder``, its adapters off zero (as after
    training), so that they change what is generated."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race.pilot.learner import LearnerConfig, LoraLearner

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder)
    learner = LoraLearner(model, load_model_shape(str(folder)), LearnerConfig(lora_rank=8),
                          pad_id=tokenizer.pad_token_id, device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return learner, tokenizer


@pytest.fixture(scope="module")
def qwen_standin(tmp_path_factory):
    """A Qwen2.5-shaped stand-in (GQA 4/2, tied, random weights) with a BPE tokenizer."""
    from race.tasks.arith import ArithTask
    from race.warmstart.standin import build_standin

    shape = dataclasses.replace(load_model_shape("qwen2.5-0.5b"), name="qwen-mini",
                                hidden_size=64, intermediate_size=128, num_layers=2,
                                num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=512)
    texts = [ex.prompt + ex.trace for ex in ArithTask().sample("train", 300, seed=1)]
    return build_standin(tmp_path_factory.mktemp("standin") / "qwen-mini", shape, texts)


@pytest.fixture(scope="module", params=["tiny-s", "qwen-mini"])
def adapted(request, policy, qwen_standin):
    folder = policy if request.param == "tiny-s" else qwen_standin
    learner, tokenizer = _adapted(folder)
    return learner, tokenizer, load_model_shape(str(folder))


def _pair(adapted, **kw):
    learner, tokenizer, shape = adapted
    return {path: HFBackend(learner.model, tokenizer, shape, learner.lora, generation=path,
                            **kw) for path in ("eager", "static")}


def test_greedy_tokens_equal_and_model_flops_unchanged(adapted):
    outs = {path: b.generate(PROMPTS, n=2, max_new_tokens=24, greedy=True)
            for path, b in _pair(adapted).items()}
    eager, fast = outs["eager"], outs["static"]
    assert fast.completion_ids == eager.completion_ids
    assert fast.texts == eager.texts and fast.finished == eager.finished
    assert fast.flops_model == eager.flops_model  # the tokens the ledger counts
    assert fast.flops_executed > eager.flops_executed  # attention over the whole cache


def test_sampled_tokens_equal_for_a_seed_logprobs_within_rounding(adapted):
    outs = {path: b.generate(PROMPTS, n=4, max_new_tokens=24, seed=11, temperature=0.7)
            for path, b in _pair(adapted).items()}
    eager, fast = outs["eager"], outs["static"]
    assert fast.completion_ids == eager.completion_ids
    diffs = [abs(a - b) for x, y in zip(eager.logprobs, fast.logprobs) for a, b in zip(x, y)]
    assert len(diffs) == eager.completion_tokens and max(diffs) < 1e-5


@pytest.mark.parametrize("greedy", [True, False])
def test_static_executed_ledger_equals_flop_counter(adapted, greedy):
    """Left-padded prompts, rows that stop early (the warm start emits EOS), and a cache
    rounded up past what the batch needs: the ledger still equals the counter."""
    learner, tokenizer, shape = adapted
    backend = HFBackend(learner.model, tokenizer, shape, learner.lora, measure=True,
                        generation="static")
    out = backend.generate(PROMPTS, n=2, max_new_tokens=20, seed=3, greedy=greedy)
    assert abs(out.flops_executed - out.flops_measured) / out.flops_measured <= TOL
    assert out.flops_model == flops.generate_flops(
        shape, [len(p) for p in out.prompt_ids], [len(c) for c in out.completion_ids],
        lora=learner.lora)


def test_batches_each_with_their_own_cache(adapted):
    """batch_rows splits a call; each batch's cache is sized from its own prompt width and
    kept for the next call of the same shape (no new tensors: a CUDA graph can replay)."""
    learner, tokenizer, shape = adapted
    backend = HFBackend(learner.model, tokenizer, shape, learner.lora, batch_rows=4,
                        measure=True, generation="static")
    out = backend.generate(PROMPTS, n=2, max_new_tokens=12, greedy=True)
    assert abs(out.flops_executed - out.flops_measured) / out.flops_measured <= TOL
    kept = dict(backend._caches._caches)
    assert 1 <= len(kept) <= static.KEEP_CACHES
    again = backend.generate(PROMPTS, n=2, max_new_tokens=12, greedy=True)
    assert again.completion_ids == out.completion_ids
    assert all(backend._caches._caches[key] is cache for key, cache in kept.items())


def test_the_static_path_creates_no_tensor_off_the_model_device(adapted):
    """The guard that catches GPU-only placement bugs on CPU (race.nn.devices)."""
    from race.nn.devices import HostTensorGuard

    learner, tokenizer, shape = adapted
    backend = HFBackend(learner.model, tokenizer, shape, learner.lora, generation="static")
    with HostTensorGuard(strict=True) as guard:
        backend.generate(PROMPTS, n=2, max_new_tokens=8, seed=1)
        backend.generate(PROMPTS, n=1, max_new_tokens=8, greedy=True)
    assert guard.offences == []


def test_a_generation_config_processor_is_in_the_static_logprobs(qwen_standin):
    """Documented difference: with a processor from the checkpoint's generation_config
    (here repetition_penalty), both paths draw the same tokens; the eager path reports
    raw-logit log-probs, the static path those of the distribution it drew from."""
    learner, tokenizer = _adapted(qwen_standin)
    shape = load_model_shape(str(qwen_standin))
    learner.model.generation_config.repetition_penalty = 1.5
    try:
        outs = {path: b.generate(PROMPTS, n=2, max_new_tokens=16, seed=5)
                for path, b in _pair((learner, tokenizer, shape)).items()}
    finally:
        learner.model.generation_config.repetition_penalty = None
    assert outs["static"].completion_ids == outs["eager"].completion_ids
    diffs = [abs(a - b) for x, y in zip(outs["eager"].logprobs, outs["static"].logprobs)
             for a, b in zip(x, y)]
    assert max(diffs) > 1e-3


# --------------------------------------------------------------------------- pure pieces


def test_static_generate_flops_by_hand():
    """tiny-s, one adapter on q_proj: 2 rows, prompts 3 and 5 (padded to 5), 4 decode
    columns, a 16-token cache. Every prompt and decode query attends 16 keys."""
    shape, lora = load_model_shape("tiny-s"), LoraShape(2, ("q_proj",))
    d, i, layers, v = 80, 240, 3, 64
    d_attn, d_kv = 4 * 20, 2 * 20
    linear = layers * (2 * (d * d_attn + 2 * d * d_kv + d_attn * d + 3 * d * i)
                       + 2 * 2 * (d + d_attn))
    head = 2 * v * d
    attention = 4 * layers * d_attn * 2 * (5 + 3) * 16
    expected = 2 * 5 * linear + 2 * head + 2 * 3 * (linear + head) + attention
    assert static.static_generate_flops(shape, [3, 5], [2, 4], cache_tokens=16, lora=lora,
                                        decode_steps=4) == expected


def test_static_generate_flops_refuses_impossible_counts():
    shape = load_model_shape("tiny-s")
    with pytest.raises(UsageError, match="decode_steps=3"):
        static.static_generate_flops(shape, [4], [5], cache_tokens=64, decode_steps=3)
    with pytest.raises(UsageError, match="16-token cache"):
        static.static_generate_flops(shape, [10], [8], cache_tokens=16)
    with pytest.raises(UsageError, match="one count per sequence"):
        static.static_generate_flops(shape, [4, 4], [5], cache_tokens=64)


def test_cache_tokens_round_up_to_the_bucket():
    assert static.cache_tokens(30, 34) == 64
    assert static.cache_tokens(30, 35) == 128
    assert static.cache_tokens(100, 512) == 640


def test_auto_is_static_on_cuda_eager_elsewhere():
    assert static.resolve("auto", "cuda") == "static"
    assert static.resolve("auto", "cpu") == "eager"
    assert static.resolve("static", "cpu") == "static"
    with pytest.raises(UsageError, match="generation='paged': use one of auto|eager|static"):
        static.resolve("paged", "cpu")


@pytest.mark.slow
def test_compiled_decode_step_gives_the_same_tokens(qwen_standin):
    """What CUDA runs, forced on CPU: transformers compiles the static path's decode step
    (here without CUDA graphs). Greedy and sampled tokens still equal the eager path's, and
    a second batch shape reuses the compiled step after one recompile (dynamic shapes).

    On the 2-layer Qwen-shaped stand-in. Inductor's CPU kernels stay as configured: its
    precompiled C++ header outlives a test, and one built for scalar kernels fails every
    later vectorized compile in the process (vLLM's CPU engine compiles with Inductor)."""
    from transformers import CompileConfig

    learner, tokenizer = _adapted(qwen_standin)
    shape = load_model_shape(str(qwen_standin))
    config = CompileConfig(mode="default")
    config._compile_all_devices = True  # transformers compiles only on accelerators otherwise
    learner.model.generation_config.compile_config = config
    try:
        pair = _pair((learner, tokenizer, shape))
        for n in (2, 4):
            outs = {path: (b.generate(PROMPTS, n=n, max_new_tokens=16, greedy=True),
                           b.generate(PROMPTS, n=n, max_new_tokens=16, seed=2))
                    for path, b in pair.items()}
            for eager, fast in zip(outs["eager"], outs["static"]):
                assert fast.completion_ids == eager.completion_ids
        assert learner.model.base_model.model._compiled_call is not None
    finally:
        learner.model.generation_config.compile_config = None
        torch._dynamo.reset()
