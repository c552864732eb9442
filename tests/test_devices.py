"""Device and precision: pilot.device/pilot.dtype, bf16 pilots on CPU whose measured FLOPs
agree with the ledger, a guard that catches tensors created off the model's device, MFU
in the summary, every SDPA kernel counted (grouped-query attention included), local
stand-ins of real checkpoints, and bench/device_check.py --smoke."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch runs the pilots")

from race.catalog import load_model_shape  # noqa: E402
from race.core.specs import RunSpec  # noqa: E402
from race.errors import UsageError  # noqa: E402
from race.nn.devices import (  # noqa: E402
    HostTensorGuard,
    OffDeviceTensor,
    resolve_device,
    resolve_dtype,
)
from race.nn.measure import SDPA_FLOPS, flop_counter, sdpa_backward_flops, sdpa_forward_flops  # noqa: E402
from race.pilot.budget import worst_step_flops  # noqa: E402
from race.pilot.components import build_components  # noqa: E402
from race.pilot.loop import run_pilot  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RULE = (("kind", "rule"), ("name", "rule"))
TASK = (("name", "arith"),)
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
TOL = 1e-3


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """A random Qwen2 with grouped-query attention and a BPE tokenizer, saved as a folder."""
    from race.tasks import build_task
    from race.warmstart.standin import build_standin

    shape = dataclasses.replace(load_model_shape("qwen2.5-0.5b"), hidden_size=64,
                                intermediate_size=128, num_layers=2, num_heads=4,
                                num_kv_heads=2, head_dim=16, vocab_size=512)
    texts = [ex.prompt + ex.trace for ex in build_task({"name": "arith"}).sample(
        "train", 300, seed=1)]
    return build_standin(tmp_path_factory.mktemp("standin") / "qwen-mini", shape, texts)


def standin_spec(folder: Path, worst_steps: float = 2.5, **kw) -> RunSpec:
    knobs = dict(prompts_per_step=2, group_size=2, max_new_tokens=8, checkpoints=(1.0,),
                 eval_examples=4, eval_targets=("val",), select_examples=4) | kw
    spec = RunSpec(str(folder), knobs.pop("reward", RULE), TASK, 1.0, **knobs)
    return dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 16) * worst_steps)


# --------------------------------------------------------------------------- device, dtype


@NO_CUDA
def test_cuda_without_cuda_is_refused():
    with pytest.raises(UsageError, match="pilot.device=cuda: no CUDA device is visible"):
        resolve_device("cuda")
    assert resolve_device("auto") == "cpu"


@NO_CUDA
def test_race_pilot_on_cuda_without_cuda_exits_2_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "race.cli", "pilot", "pilot.device=cuda"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == ["race pilot: pilot.device=cuda: no CUDA device is visible on this "
                     "machine; use pilot.device=auto or cpu, or run on a GPU node"]
    assert not (tmp_path / "results").exists()


def test_dtype_follows_the_device_unless_given():
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(UsageError, match="pilot.dtype='float16': use one of"):
        resolve_dtype("float16", "cpu")


# --------------------------------------------------------------------------- the guard


def test_guard_catches_a_host_tensor_mixed_with_model_tensors():
    from race.warmstart.tokenizer import pad_right

    weight = torch.randn(8, 4)
    with HostTensorGuard() as guard:
        ids, _ = pad_right([[1, 2], [3]], 0)  # created by race code without device=
        torch.nn.functional.embedding(ids, weight)
        torch.nn.functional.embedding(ids.to(weight.device), weight)  # placed: fine
    assert len(guard.offences) == 1
    assert "tokenizer.py" in guard.offences[0] and "embedding" in guard.offences[0]
    with pytest.raises(OffDeviceTensor), HostTensorGuard(strict=True):
        ids, _ = pad_right([[1, 2], [3]], 0)
        torch.nn.functional.embedding(ids, weight)


def test_a_pilot_step_creates_no_tensor_off_the_model_device(tmp_path, standin):
    # every pass a step runs: old-policy log-probs (mu=2), reference pass (kl), two
    # minibatches, sampling, greedy eval
    spec = standin_spec(standin, update_epochs=2, kl_coef=0.1, minibatch_size=2,
                        dtype="bfloat16")
    with HostTensorGuard(strict=True) as guard:
        summary = run_pilot(spec, tmp_path / "cell", checkpoint_every=0)
    assert summary["status"] == "ok", summary["error"]
    assert summary["steps"] >= 2
    assert guard.offences == []


def test_a_prm_pilot_step_creates_no_tensor_off_the_model_device(tmp_path, policy, tiny_prm):
    from race.rewards.tiny_prm import TinyPRM

    reward = (("aggregate", "min"), ("kind", "prm"), ("model", "prm-tiny-s"),
              ("name", "prm-tiny-s"), ("overhead_tokens", 1))
    spec = RunSpec("tiny-s", reward, TASK, 1.0, prompts_per_step=2, group_size=2,
                   max_new_tokens=8, checkpoints=(1.0,), eval_examples=4,
                   eval_targets=("val",), select_examples=4)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * 2)
    with HostTensorGuard(strict=True) as guard:
        parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
        parts.reward = TinyPRM("prm-tiny-s", "prm-tiny-s", folder=tiny_prm)
        summary = run_pilot(spec, tmp_path / "cell", components=parts)
    assert summary["status"] == "ok", summary["error"]
    assert guard.offences == []


def test_the_guard_sees_a_planted_off_device_batch_in_a_pilot(tmp_path, standin, monkeypatch):
    from race.pilot.learner import LoraLearner
    from race.warmstart.tokenizer import pad_right

    def unplaced(self, batch, rows):  # the learner's batch without .to(self.device)
        seqs = [batch.prompt_ids[r] + batch.completion_ids[r] for r in rows]
        ids, attention = pad_right(seqs, self.pad_id)
        mask = torch.zeros((len(rows), ids.shape[1] - 1))
        for i, (r, seq) in enumerate(zip(rows, seqs)):
            mask[i, len(batch.prompt_ids[r]) - 1:len(seq) - 1] = 1
        return ids, attention, mask, [len(s) for s in seqs]

    monkeypatch.setattr(LoraLearner, "_padded", unplaced)
    with HostTensorGuard() as guard:
        run_pilot(standin_spec(standin), tmp_path / "cell", checkpoint_every=0)
    assert any("tokenizer.py" in offence for offence in guard.offences), guard.offences


# --------------------------------------------------------------------------- bf16 and MFU


def test_bf16_cpu_pilot_keeps_its_budget_and_measures_what_the_ledger_says(tmp_path, standin):
    spec = standin_spec(standin, dtype="bfloat16", measure=True, update_epochs=2,
                        kl_coef=0.1)
    summary = run_pilot(spec, tmp_path / "cell", checkpoint_every=0)
    assert summary["status"] == "ok", summary["error"]
    assert summary["dtype"] == "bfloat16" and summary["device"] == "cpu"
    assert 0 < summary["total_flops"] <= spec.budget_flops
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in ("rollout", "learning", "eval"):
        assert measured[phase] > 0, phase
        assert abs(measured[phase] - executed[phase]) / measured[phase] <= TOL, phase


def test_bf16_prm_feedback_is_measured_as_the_ledger_says(tmp_path, policy, tiny_prm):
    from race.rewards.tiny_prm import TinyPRM

    reward = (("aggregate", "min"), ("kind", "prm"), ("model", "prm-tiny-s"),
              ("name", "prm-tiny-s"), ("overhead_tokens", 1))
    spec = RunSpec("tiny-s", reward, TASK, 1.0, prompts_per_step=2, group_size=2,
                   max_new_tokens=8, checkpoints=(1.0,), eval_examples=4,
                   eval_targets=("val",), select_examples=4, dtype="bfloat16", measure=True)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * 2)
    parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
    parts.reward = TinyPRM("prm-tiny-s", "prm-tiny-s", folder=tiny_prm, dtype="bfloat16")
    summary = run_pilot(spec, tmp_path / "cell", components=parts)
    assert summary["status"] == "ok", summary["error"]
    assert summary["total_flops"] <= spec.budget_flops
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in ("rollout", "learning", "feedback", "eval"):
        assert measured[phase] > 0, phase
        assert abs(measured[phase] - executed[phase]) / measured[phase] <= TOL, phase


def test_summary_reports_mfu_and_hfu_per_phase_against_the_given_peak(tmp_path, standin):
    spec = dataclasses.replace(standin_spec(standin), peak_flops=1e12)
    summary = run_pilot(spec, tmp_path / "cell", checkpoint_every=0)
    assert summary["peak_flops"] == 1e12 and summary["peak_measured"] is False
    rollout = summary["throughput"]["rollout"]
    rate = summary["flops_model"]["rollout"] / summary["wall_s"]["rollout"]
    assert rollout["flops_per_s"] == pytest.approx(rate)
    assert rollout["mfu"] == pytest.approx(rate / 1e12)
    assert rollout["hfu"] >= rollout["mfu"] * 0.999  # executed FLOPs >= model FLOPs here
    assert rollout["peak_gib"] is None  # no memory counter on CPU
    assert spec.cell_id == dataclasses.replace(spec, peak_flops=0.0).cell_id


# --------------------------------------------------------------------------- SDPA counting


def test_every_fused_sdpa_kernel_is_counted_one_way():
    names = {op.__name__ if hasattr(op, "__name__") else str(op) for op in SDPA_FLOPS}
    for kernel in ("flash_attention", "efficient_attention", "cudnn_attention",
                   "flash_attention_for_cpu"):
        assert any(kernel in name and "backward" not in name for name in names), kernel
        assert any(kernel in name and "backward" in name for name in names), kernel


def test_grouped_query_attention_is_counted_with_every_query_head():
    q = torch.randn(2, 14, 9, 64, requires_grad=True)  # Qwen2.5-0.5B: 14 query, 2 KV heads
    k = torch.randn(2, 2, 9, 64, requires_grad=True)
    v = torch.randn(2, 2, 9, 64, requires_grad=True)
    with flop_counter() as forward:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                               enable_gqa=True)
    assert forward.get_total_flops() == sdpa_forward_flops(q.shape, k.shape, v.shape)
    assert forward.get_total_flops() == 2 * 2 * (2 * 14) * 9 * 64 * 9
    with flop_counter() as backward:
        out.sum().backward()
    assert backward.get_total_flops() == sdpa_backward_flops(out.shape, q.shape, k.shape,
                                                             v.shape)
    assert backward.get_total_flops() == forward.get_total_flops() * 5 // 2


# --------------------------------------------------------------------------- stand-ins


def test_a_standin_folder_loads_as_a_checkpoint(standin):
    from transformers import AutoTokenizer

    shape = load_model_shape(str(standin))
    assert (shape.num_heads, shape.num_kv_heads, shape.vocab_size) == (4, 2, 512)
    assert shape.hf_id == str(standin)
    tokenizer = AutoTokenizer.from_pretrained(standin)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "2+3=?"}],
                                         tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\n2+3=?<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(UsageError, match="model=/nonexistent/qwen: no config.json"):
        load_model_shape("/nonexistent/qwen")


@pytest.mark.slow
def test_device_check_smoke_passes_on_cpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "device_check.py"), "--smoke",
                          "--out", str(tmp_path / "check.json"), "--work",
                          str(tmp_path / "work")],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "device_check: ok on cpu (smoke)"
    assert (tmp_path / "check.json").is_file()


# --------------------------------------------------------------------------- memory


def test_micro_batches_accumulate_the_same_update_with_less_padding(standin):
    """Passes of 2 completions, grouped by length, give the minibatch's gradient (token-mean
    weights) while the padded work the executed ledger counts shrinks."""
    from transformers import AutoModelForCausalLM

    from race.pilot.learner import Batch, LearnerConfig, LoraLearner

    shape = load_model_shape(str(standin))
    batch = Batch(prompt_ids=((1, 2, 3),) * 4,
                  completion_ids=((5, 6), (7, 8, 9, 10, 11, 12, 13, 14), (15,), (16, 17, 18)),
                  advantages=(1.0, -1.0, 0.5, -0.5))
    learners, spent = [], []
    for micro in (0, 2):
        model = AutoModelForCausalLM.from_pretrained(standin)
        config = LearnerConfig(lora_rank=4, lr=1e-2, micro_batch_size=micro, kl_coef=0.1,
                               update_epochs=2)
        learner = LoraLearner(model, shape, config, pad_id=0, seed=3)
        learner.update(batch, step=0)
        learners.append(dict(learner.model.named_parameters()))
        spent.append(dict(learner.flops))
    whole, micro = learners
    for name, param in whole.items():
        if param.requires_grad:
            # gradients agree to ~5e-8 before the optimizer; two Adam steps divide by
            # sqrt(v), which turns that float noise into ~1e-4 relative on a few weights
            torch.testing.assert_close(micro[name], param, rtol=1e-3, atol=1e-6)
    assert spent[1]["model"] == spent[0]["model"]  # the same real tokens
    assert spent[1]["executed"] < spent[0]["executed"]  # less padding


def test_memory_plan_by_hand_and_race_plan_refuses_what_cannot_fit(tmp_path):
    from race.core.memory import GIB, kv_bytes_per_token, lora_params, plan_memory
    from race.core.specs import LoraShape

    shape = load_model_shape("qwen2.5-0.5b")
    lora = LoraShape(16)
    plan = plan_memory(shape, lora, dtype="bfloat16", rows=64, micro_rows=8,
                       prompt_tokens=100, max_new_tokens=156)
    d, i, L, V = 896, 4864, 24, 151936
    assert kv_bytes_per_token(shape, "bfloat16") == 2 * L * 2 * 64 * 2
    assert lora_params(shape, lora) == L * 16 * (2 * d + 2 * (d + 128) + 2 * d
                                                 + 2 * (d + i) + (i + d))
    assert plan.resident == shape.total_params * 2 + 16 * lora_params(shape, lora)
    assert plan.rollout == 64 * 256 * 12288 + 64 * 156 * V * 2 + 64 * V * 4
    per_layer = 6 * d + 3 * 896 + 3 * 128 + 4 * i
    # activations, the hidden states the chunked head reads and its gradient (bf16 and
    # fp32), and one chunk of fp32 logits plus its bf16 matmul output (never [B, T, V])
    chunk = 2**28 // (4 * V)
    assert plan.learning == (L * 8 * 256 * per_layer * 2 + 8 * 256 * d * (3 * 2 + 4)
                             + chunk * V * (4 + 2))
    assert plan.peak == plan.resident + max(plan.rollout, plan.learning)  # the larger phase
    smaller = plan_memory(shape, lora, dtype="bfloat16", rows=64, micro_rows=2,
                          prompt_tokens=100, max_new_tokens=156)
    assert smaller.learning < plan.learning and smaller.rollout == plan.rollout

    out = subprocess.run([sys.executable, "-m", "race.cli", "plan", "budget=1e18",
                          "model=qwen2.5-0.5b,qwen2.5-7b", "task=gsm8k",
                          "launcher.gpus_per_node=1", "launcher.gpu_mem_gb=40"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "mem GiB" in out.stdout
    assert "model=qwen2.5-7b" in out.stdout and "> launcher.gpu_mem_gb=40" in out.stdout
    assert plan.peak / GIB < 40


# --------------------------------------------------------------------------- TIS


def test_truncated_importance_weights_scale_each_tokens_surrogate():
    from race.core.grpo import grpo_loss, truncated_is_weights

    old = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.2, 0.9, 0.0]]))
    sampler = torch.log(torch.tensor([[0.5, 0.1, 0.25], [0.4, 0.9, 0.3]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    weights = truncated_is_weights(old, sampler, mask, cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 2.0, 2.0], [0.5, 1.0, 1.0]]))
    logp = old.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    plain, _ = grpo_loss(logp, old, None, adv, mask)
    doubled, stats = grpo_loss(logp, old, None, adv, mask,
                               token_weights=torch.full((2, 3), 2.0))
    torch.testing.assert_close(doubled, 2 * plain)
    assert stats["is_weight_mean"] == 2.0


def test_tis_with_the_samplers_own_logprobs_changes_nothing(standin):
    """When the sampler's log-probs are the learner's own, every weight is 1 and the update
    is the one without the correction."""
    from transformers import AutoModelForCausalLM

    from race.pilot.learner import Batch, LearnerConfig, LoraLearner

    shape = load_model_shape(str(standin))
    batch = Batch(((1, 2, 3),) * 2, ((5, 6, 7), (8, 9)), (1.0, -1.0))
    params = []
    for tis in (0.0, 2.0):
        model = AutoModelForCausalLM.from_pretrained(standin)
        learner = LoraLearner(model, shape, LearnerConfig(lora_rank=4, lr=1e-2,
                                                          update_epochs=2, tis_cap=tis),
                              pad_id=0, seed=5)
        own = tuple(tuple(row.tolist()) for row in learner.logprobs(batch))
        stats = learner.update(dataclasses.replace(batch, sampling_logprobs=own), step=0)
        assert ("is_weight_mean" in stats) == (tis > 0)
        params.append({n: p.detach().clone() for n, p in learner.model.named_parameters()
                       if p.requires_grad})
    for name, value in params[0].items():
        torch.testing.assert_close(params[1][name], value)
