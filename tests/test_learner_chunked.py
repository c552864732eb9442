"""The learner's chunked output head against today's full-logits path (``learner.head =
None``): log-probs, LoRA gradients and measured FLOPs agree, on a tiny Qwen2 with LoRA on
all seven targets and chunks that split rows."""

import copy

import pytest

torch = pytest.importorskip("torch", reason="the learner trains with torch")
pytest.importorskip("peft", reason="the learner wraps the model in PEFT LoRA")

from race.core import flops, memory  # noqa: E402
from race.core.specs import ModelShape  # noqa: E402

SHAPE = ModelShape("chunked", hidden_size=32, intermediate_size=64, num_layers=2,
                   num_heads=4, num_kv_heads=2, vocab_size=97)
# prompts and completions of different lengths, so rows pad differently
BATCH_ROWS = (((3, 4, 5), (6, 7, 8, 9)), ((10, 11), (12, 13, 14, 15, 16, 17)),
              ((18, 19, 20, 21, 22), (23,)), ((24, 25, 26), (27, 28)))


def _batch(rows=BATCH_ROWS):
    from race.pilot.learner import Batch

    return Batch(prompt_ids=tuple(p for p, _ in rows),
                 completion_ids=tuple(c for _, c in rows),
                 advantages=(1.0, -0.5, 0.25, -0.75))


def _learners(temperature: float):
    """Two learners on the same weights and adapters (B drawn at random so A gets a
    gradient): the chunked head, and today's full logits."""
    from race.nn.measure import build_causal_lm
    from race.pilot.learner import LearnerConfig, LoraLearner

    base = build_causal_lm(SHAPE)
    config = LearnerConfig(lora_rank=8, lora_alpha=16, temperature=temperature,
                           aggregation="token")
    out = []
    for _ in range(2):
        learner = LoraLearner(copy.deepcopy(base), SHAPE, config, pad_id=0, seed=0,
                              measure=True)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in learner.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
        out.append(learner)
    chunked, full = out
    assert chunked.head is not None
    full.head = None
    return chunked, full


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 5 positions: they split the 4 x 9 padded rows mid-row."""
    monkeypatch.setattr(memory, "LOGITS_CHUNK_BYTES", 5 * 4 * SHAPE.vocab_size)
    assert memory.head_chunk_positions(SHAPE.vocab_size) == 5


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_head_equals_full_logits_values_gradients_and_flops(small_chunks,
                                                                    temperature):
    chunked, full = _learners(temperature)
    batch = _batch()
    rows = list(range(len(batch.completion_ids)))
    ids, attention, _, _ = chunked._padded(batch, rows)
    with torch.no_grad():
        diff = (chunked._logprobs(ids, attention) - full._logprobs(ids, attention)).abs()
    assert float(diff.max()) <= 1e-6

    advantages = torch.tensor(batch.advantages)
    losses = [learner._backward(batch, rows, None, None, None, advantages, 1.0, step=0)[0]
              for learner in (chunked, full)]
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
    grads = [{n: p.grad for n, p in learner.model.named_parameters() if p.requires_grad}
             for learner in (chunked, full)]
    assert set(grads[0]) == set(grads[1]) and len(grads[0]) == 2 * 7 * SHAPE.num_layers
    for name, grad in grads[0].items():
        assert grad is not None and bool(grad.abs().sum() > 0), name
        torch.testing.assert_close(grad, grads[1][name], rtol=1e-5, atol=1e-7)
    # the head ran on every padded position, forward and hidden-state gradient, no more:
    # the measured FLOPs equal today's and the executed ledger
    assert chunked.flops["measured"] == full.flops["measured"]
    assert chunked.flops == full.flops
    lengths = [len(p) + len(c) for p, c in BATCH_ROWS]
    assert chunked.flops["executed"] == flops.lora_train_flops(
        SHAPE, lengths, chunked.lora, convention="executed",
        fused_attention=chunked.fused_attention)
    assert abs(chunked.flops["measured"] / chunked.flops["executed"] - 1) <= 1e-3


def test_old_and_reference_logprobs_equal_full_logits(small_chunks):
    chunked, full = _learners(1.0)
    batch = _batch()
    for adapters in (True, False):
        got = chunked.logprobs(batch, adapters=adapters)
        want = full.logprobs(batch, adapters=adapters)
        for row, (g, w) in enumerate(zip(got, want)):
            assert g.shape == (len(BATCH_ROWS[row][1]),)
            assert float((g - w).abs().max()) <= 1e-6
    assert chunked.flops == full.flops
    assert abs(chunked.flops["measured"] / chunked.flops["executed"] - 1) <= 1e-3
    # without gradients only the head's logits run: the forward FLOPs exactly
    lengths = [len(p) + len(c) for p, c in BATCH_ROWS]
    assert chunked.flops["executed"] == sum(
        flops.forward_flops(SHAPE, lengths, convention="executed", lora=chunked.lora,
                            adapters=adapters) for adapters in (True, False))


def test_a_diverged_pass_charges_the_forward_and_the_heads_gradient(small_chunks,
                                                                    monkeypatch):
    """The chunked head takes its gradient during the forward pass, so a pass whose loss
    is not finite has run it: the ledger charges it, and matches what was measured."""
    import race.core.grpo
    from race.pilot.learner import TrainingDiverged

    chunked, _ = _learners(1.0)
    batch = _batch()
    rows = list(range(len(batch.completion_ids)))
    real_loss = race.core.grpo.grpo_loss

    def nan_loss(*args, **kwargs):
        value, stats = real_loss(*args, **kwargs)
        return value * float("nan"), stats

    monkeypatch.setattr(race.core.grpo, "grpo_loss", nan_loss)
    with pytest.raises(TrainingDiverged, match="step 3"):
        chunked._backward(batch, rows, None, None, None, torch.tensor(batch.advantages), 1.0,
                          step=3)
    lengths = [len(p) + len(c) for p, c in BATCH_ROWS]
    head = flops.head_flops_per_position(SHAPE)
    for convention, positions in (("model", sum(lengths)),
                                  ("executed", len(lengths) * max(lengths))):
        assert chunked.flops[convention] == flops.forward_flops(
            SHAPE, lengths, convention=convention, lora=chunked.lora) + head * positions
    assert abs(chunked.flops["measured"] / chunked.flops["executed"] - 1) <= 1e-3


def test_an_adapted_or_unknown_head_takes_the_full_logits():
    from race.pilot.learner import _body_and_head

    chunked, _ = _learners(1.0)
    causal = chunked.model.get_base_model()
    assert _body_and_head(chunked.model) == (causal.model, causal.lm_head)
    causal.lm_head.weight.requires_grad_(True)
    assert _body_and_head(chunked.model) is None
    causal.lm_head.weight.requires_grad_(False)
    causal.config.model_type = "gemma2"  # soft-caps its logits
    assert _body_and_head(chunked.model) is None


def test_micro_batches_planned_on_cuda_only():
    """micro_batch_size=0 stays one pass on CPU; on CUDA the plan sizes it, by hand here."""
    chunked, _ = _learners(1.0)
    batch = _batch()
    assert chunked._micro_batches(batch, [0, 1, 2, 3]) == [[0, 1, 2, 3]]
    fixed = memory.learning_bytes(SHAPE, 0, "float32")
    per_row = memory.learning_bytes(SHAPE, 100, "float32") - fixed
    assert memory.micro_rows_that_fit(SHAPE, seq_tokens=100, dtype="float32",
                                      free_bytes=fixed + 3.5 * per_row) == 3
    assert memory.micro_rows_that_fit(SHAPE, seq_tokens=100, dtype="float32",
                                      free_bytes=0) == 1
