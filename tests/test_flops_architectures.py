"""``executed`` equals FlopCounterMode on every architecture RACE reads (random weights):
Llama (no attention biases), Qwen3, Mistral with a sliding window on every layer, and
Gemma 3 with sliding-window and full layers, for forward, LoRA forward + backward and
``generate`` whose prompts and completions pass the window; and a pilot on a random
Gemma 3 folder (window 8) whose rollout, learning and eval ledgers equal the counter's.
"""

import json
import shutil

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to measure FLOPs")
peft = pytest.importorskip("peft", reason="peft is needed for the LoRA measurements")

from race.core import flops  # noqa: E402
from race.core.shapes import ModelShape  # noqa: E402
from race.core.specs import LoraShape  # noqa: E402
from race.nn.measure import (  # noqa: E402
    build_causal_lm,
    count_forward,
    count_generate,
    count_train,
    left_padded_batch,
)

BASE = dict(name="arch", hidden_size=32, intermediate_size=64, num_layers=3, num_heads=4,
            num_kv_heads=2, head_dim=8, vocab_size=128, qkv_bias=False)
SHAPES = {
    "llama": ModelShape(**BASE, model_type="llama"),
    "qwen3": ModelShape(**BASE, model_type="qwen3"),
    "mistral-window-8": ModelShape(**BASE, model_type="mistral", sliding_window=8,
                                   layer_types=("sliding_attention",) * 3),
    "gemma3-window-8": ModelShape(**BASE, model_type="gemma3_text", sliding_window=8,
                                  layer_types=("sliding_attention", "sliding_attention",
                                               "full_attention")),
}
LENGTHS = [9, 14, 6]  # left-padded; 14 is past the window already in the prefill
LORA = LoraShape(rank=4)


@pytest.fixture(scope="module", params=list(SHAPES))
def shape_model(request):
    shape = SHAPES[request.param]
    return shape, build_causal_lm(shape)


def exact(measured, predicted):
    assert measured > 0 and predicted == measured, (measured, predicted)


def test_the_built_model_reads_back_as_its_shape(shape_model):
    shape, model = shape_model
    assert ModelShape.from_hf_config(model.config, name=shape.name) == shape


def test_forward_and_lora_train(shape_model):
    shape, model = shape_model
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    exact(count_forward(model, ids, mask),
          flops.forward_flops(shape, LENGTHS, convention="executed"))
    config = peft.LoraConfig(r=LORA.rank, lora_alpha=8, target_modules=list(LORA.targets))
    lora_model = peft.get_peft_model(model, config)
    try:
        exact(count_train(lora_model, ids, mask),
              flops.lora_train_flops(shape, LENGTHS, LORA, convention="executed"))
    finally:
        lora_model.unload()


@pytest.mark.parametrize("stops, cap", [([2, 5, 3], 8), ([99, 99, 99], 12)])
def test_generate_past_the_window(shape_model, stops, cap):
    shape, model = shape_model
    ids, mask = left_padded_batch(LENGTHS, shape.vocab_size)
    measured, new_tokens, steps = count_generate(model, ids, mask, max_new_tokens=cap,
                                                 stops=stops)
    exact(measured, flops.generate_flops(shape, LENGTHS, new_tokens, convention="executed",
                                         decode_steps=steps))
    if shape.sliding_layers:  # the window cut what full attention would have cost
        full = ModelShape(**BASE, model_type="llama")
        assert measured < flops.generate_flops(full, LENGTHS, new_tokens,
                                               convention="executed", decode_steps=steps)


@pytest.mark.slow
def test_a_pilot_on_a_random_gemma3_folder_measures_what_its_ledger_says(
        tmp_path, standin, capsys):
    """The issue's case: a Gemma 3 text model whose window (8 tokens) is shorter than its
    sequences; rollout and eval ``executed`` were 2.9% above the counter before."""
    import dataclasses

    from race import cli
    from race.warmstart.policies import single_thread

    shape = dataclasses.replace(SHAPES["gemma3-window-8"],
                                vocab_size=standin["shape"].vocab_size)
    folder = tmp_path / "gemma3"
    build_causal_lm(shape).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (standin["policy"] / name).is_file():
            shutil.copy2(standin["policy"] / name, folder / name)
    assert json.loads((folder / "config.json").read_text())["sliding_window"] == 8
    args = ["pilot", f"model={folder}", "task=gsm8k", f"task.source={standin['data']}",
            "reward=rule", "budget=2e9", "pilot.fraction=1.0", "grid.prompts_per_step=2",
            "grid.group_size=2", "grid.max_new_tokens=12", "pilot.eval_examples=2",
            "pilot.select_examples=2", "pilot.checkpoints=[1.0]", "accounting.measure=true",
            f"pilot.out_dir={tmp_path / 'out'}"]
    with single_thread():
        assert cli.main(args) == 0, capsys.readouterr().err
    summary = json.loads(next((tmp_path / "out").glob("cells/*/summary.json")).read_text())
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in ("rollout", "learning", "eval"):
        assert measured[phase] > 0, phase
        assert executed[phase] == pytest.approx(measured[phase], rel=1e-9), phase
    # model FLOPs count at most the window on the sliding layers: below executed
    assert summary["flops"]["rollout"] < executed["rollout"]
