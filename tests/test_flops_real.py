"""``executed`` equals FlopCounterMode on the real SmolLM2-135M-Instruct and Gemma 3 270M
folders (the snapshots tools/real_models.py lays out from PyPI's GGUF files), for forward,
LoRA forward + backward and ``generate``; for Gemma 3 one ``generate`` whose prompt and
completion pass its 512-token sliding window. Short inputs; ``real_models`` tests skip
without ``RACE_REAL_HUB_CACHE`` (.ci/run sets it)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to measure FLOPs")
peft = pytest.importorskip("peft", reason="peft is needed for the LoRA measurements")

from conftest import real_snapshot  # noqa: E402  (tests/conftest.py)

from race.catalog import load_model_shape  # noqa: E402
from race.core import flops  # noqa: E402
from race.core.specs import LoraShape  # noqa: E402
from race.nn.measure import (  # noqa: E402
    count_forward,
    count_generate,
    count_train,
    left_padded_batch,
)

pytestmark = pytest.mark.real_models
LENGTHS = [9, 14, 6]
LORA = LoraShape(rank=8)


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma-3-270m"])
def real(request):
    from transformers import AutoModelForCausalLM

    _, snapshot = real_snapshot(request.param)
    model = AutoModelForCausalLM.from_pretrained(snapshot, attn_implementation="sdpa",
                                                 dtype=torch.float32).eval()
    return load_model_shape(request.param), model


def exact(measured, predicted):
    assert measured > 0 and predicted == measured, (measured, predicted)


def test_forward_and_lora_forward_backward(real):
    shape, model = real
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    exact(count_forward(model, ids, mask),
          flops.forward_flops(shape, LENGTHS, convention="executed"))
    config = peft.LoraConfig(r=LORA.rank, lora_alpha=16, target_modules=list(LORA.targets))
    lora_model = peft.get_peft_model(model, config)
    try:
        exact(count_train(lora_model, ids, mask),
              flops.lora_train_flops(shape, LENGTHS, LORA, convention="executed"))
    finally:
        lora_model.unload()


def test_generate_with_early_eos(real):
    shape, model = real
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    measured, new_tokens, steps = count_generate(model, ids, mask, max_new_tokens=6,
                                                 stops=[2, 5, 3])
    exact(measured, flops.generate_flops(shape, LENGTHS, new_tokens, convention="executed",
                                         decode_steps=steps))


def test_gemma3_generate_past_its_sliding_window(real):
    shape, model = real
    if not shape.sliding_layers:
        pytest.skip(f"{shape.name} has no sliding-window layers")
    lengths = [shape.sliding_window - 4, shape.sliding_window + 3]  # 508 and 515 tokens
    ids, mask = left_padded_batch(lengths, shape.vocab_size)
    measured, new_tokens, steps = count_generate(model, ids, mask, max_new_tokens=8,
                                                 stops=[99, 99])
    assert lengths[0] + steps > shape.sliding_window
    predicted = flops.generate_flops(shape, lengths, new_tokens, convention="executed",
                                     decode_steps=steps)
    exact(measured, predicted)
    print(f"gemma-3-270m generate past the window: measured {measured:.6e} "
          f"executed {predicted:.6e}")
