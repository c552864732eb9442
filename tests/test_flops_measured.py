"""The ``executed`` convention equals FlopCounterMode, phase by phase (rel. error <= 1e-3).

Covers the three tiny policies and a model with Qwen2.5-0.5B's real width and vocabulary
(2 layers with real weights; the full 24 layers on the meta device).
"""

import dataclasses

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to measure FLOPs")
peft = pytest.importorskip("peft", reason="peft is needed for the LoRA measurements")

from race.catalog import load_model_shape  # noqa: E402
from race.core import flops  # noqa: E402
from race.core.specs import LoraShape  # noqa: E402
from race.nn.measure import (  # noqa: E402
    build_causal_lm,
    count_forward,
    count_generate,
    count_train,
    left_padded_batch,
)

TOL = 1e-3
SHAPES = {name: load_model_shape(name) for name in ("tiny-s", "tiny-m", "tiny-l")}
SHAPES["qwen-width-2l"] = dataclasses.replace(load_model_shape("qwen2.5-0.5b"), num_layers=2)
LENGTHS = [9, 14, 6]  # left padding: rows of different lengths
LORAS = {
    "qv": LoraShape(rank=4, targets=("q_proj", "v_proj")),
    "all": LoraShape(rank=8),
    "mlp": LoraShape(rank=2, targets=("up_proj", "down_proj")),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def shape_model(request):
    shape = SHAPES[request.param]
    return shape, build_causal_lm(shape)


def close(measured, predicted):
    assert measured > 0
    assert abs(predicted - measured) / measured <= TOL, (measured, predicted)


def test_forward(shape_model):
    shape, model = shape_model
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    close(count_forward(model, ids, mask),
          flops.forward_flops(shape, LENGTHS, convention="executed"))


def test_full_train(shape_model):
    shape, model = shape_model
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    close(count_train(model, ids, mask),
          flops.train_flops(shape, LENGTHS, convention="executed"))


@pytest.mark.parametrize("lora_name", list(LORAS))
def test_lora_train(shape_model, lora_name):
    shape, model = shape_model
    lora = LORAS[lora_name]
    config = peft.LoraConfig(r=lora.rank, lora_alpha=2 * lora.rank, lora_dropout=0.05,
                             target_modules=list(lora.targets))
    peft_model = peft.get_peft_model(model, config)
    try:
        ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
        close(count_train(peft_model, ids, mask),
              flops.lora_train_flops(shape, LENGTHS, lora, convention="executed"))
        # the reference policy: same weights, adapters disabled
        with peft_model.disable_adapter():
            close(count_forward(peft_model, ids, mask),
                  flops.forward_flops(shape, LENGTHS, convention="executed", lora=lora,
                                      adapters=False))
    finally:
        peft_model.unload()


@pytest.mark.parametrize("stops", [[2, 5, 3], [99, 99, 99], [0, 7, 1]])
def test_generate_left_padding_early_eos(shape_model, stops):
    shape, model = shape_model
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    measured, new_tokens, steps = count_generate(model, ids, mask, max_new_tokens=8,
                                                 stops=stops)
    predicted = flops.generate_flops(shape, LENGTHS, new_tokens, convention="executed",
                                     decode_steps=steps)
    close(measured, predicted)
    # the executed count depends only on the longest row: finished rows keep decoding
    assert steps == max(new_tokens)


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-1.5b"])
def test_full_real_shapes_on_meta(name):
    """Full layer counts on the meta device: no memory, math attention (backward 2x)."""
    shape = load_model_shape(name)
    model = build_causal_lm(shape, device="meta")
    lengths = [32, 32]
    ids, _ = left_padded_batch(lengths, shape.vocab_size, device="meta")
    close(count_forward(model, ids, None),
          flops.forward_flops(shape, lengths, convention="executed"))
    close(count_train(model, ids, None),
          flops.train_flops(shape, lengths, convention="executed", fused_attention=False))
