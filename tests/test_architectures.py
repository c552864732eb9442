"""Architectures read from config.json, not assumed: model_type, attention biases, sliding
windows and layer types, head_dim, tied embeddings; experts and unknown attention refused
with one line (exit 2) before anything runs; sliding-window FLOPs by hand."""

import dataclasses
import json
import subprocess
import sys

import pytest

from race.catalog import load_model_shape
from race.core import flops
from race.core.flop_terms import Pairs, causal_keys, window_keys
from race.core.shapes import EXPERT_KEYS, ModelShape
from race.errors import UncountedArchitecture, UsageError

# the config.json fields RACE reads, as transformers 5 saves them
LLAMA = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
         "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
         "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": True,
         "attention_bias": False, "max_position_embeddings": 8192}
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048,
          "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1,
          "head_dim": 256, "vocab_size": 262144, "tie_word_embeddings": True,
          "attention_bias": False, "sliding_window": 512,
          "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
          "use_bidirectional_attention": False}
QWEN2 = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
         "num_hidden_layers": 2, "num_attention_heads": 14, "num_key_value_heads": 2,
         "vocab_size": 151936, "tie_word_embeddings": True, "sliding_window": None,
         "use_sliding_window": False, "layer_types": ["full_attention"] * 2}


def architecture(shape):
    return dataclasses.replace(shape, name="", hf_id="", tokenizer="", step_tag="")


def test_llama_has_no_attention_bias_and_the_catalog_entry_is_its_config():
    shape = ModelShape.from_hf_config(LLAMA, name="smollm2-135m")
    assert shape.qkv_bias is False and shape.model_type == "llama"
    assert shape.layer_types == () and shape.sliding_window == 0
    assert architecture(shape) == architecture(load_model_shape("smollm2-135m"))
    assert shape.total_params == 134_515_008  # SmolLM2-135M-Instruct: 134.5M


def test_gemma3_reads_its_sliding_window_layers_and_head_dim():
    shape = ModelShape.from_hf_config(GEMMA3, name="gemma-3-270m")
    assert (shape.sliding_window, shape.sliding_layers, shape.head_dim) == (512, 15, 256)
    assert shape.is_sliding(0) and not shape.is_sliding(5)
    assert architecture(shape) == architecture(load_model_shape("gemma-3-270m"))
    # Gemma 3 270M: ~170M embedding + ~100M transformer parameters
    assert shape.vocab_size * shape.hidden_size == 167_772_160
    assert shape.total_params == pytest.approx(268.1e6, rel=1e-3)


def test_qwen2_keeps_its_biases_and_an_unused_window_is_dropped():
    shape = ModelShape.from_hf_config(QWEN2)
    assert shape.qkv_bias is True and shape.layer_types == () and shape.sliding_window == 0
    # the key warm starts are cached under is the one made before these fields existed
    assert not {"sliding_window", "layer_types"} & set(shape.key())
    tiny = load_model_shape("tiny-s")
    assert tiny.key() == {k: v for k, v in dataclasses.asdict(tiny).items()
                          if k not in ("model_type", "sliding_window", "layer_types")}


def test_a_mistral_style_window_without_layer_types_slides_on_every_layer():
    config = LLAMA | {"model_type": "mistral", "sliding_window": 64}
    del config["attention_bias"]
    shape = ModelShape.from_hf_config(config)
    assert shape.sliding_layers == 30 and shape.sliding_window == 64
    assert shape.qkv_bias is False


@pytest.mark.parametrize("key", EXPERT_KEYS)
def test_experts_are_refused_not_counted_as_dense(key):
    with pytest.raises(UncountedArchitecture) as error:
        ModelShape.from_hf_config(LLAMA | {key: 4}, name="moe")
    assert (error.value.key, error.value.value) == (key, 4)
    assert "mixture of experts" in str(error.value) and "use a dense model" in str(error.value)


@pytest.mark.parametrize("change, key", [
    ({"model_type": "gpt2"}, "model_type"),
    ({"model_type": "gemma3"}, "model_type"),  # the multimodal wrapper, not the text model
    ({"layer_types": ["chunked_attention"] * 30}, "layer_types"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
])
def test_unknown_attention_or_model_type_is_refused(change, key):
    with pytest.raises(UncountedArchitecture) as error:
        ModelShape.from_hf_config(LLAMA | change, name="x")
    assert error.value.key == key and str(error.value).startswith("model=x: config.json has")


def test_a_shape_checks_its_layer_types():
    base = dict(name="s", hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
                num_kv_heads=1, vocab_size=10)
    with pytest.raises(UsageError, match="1 entries for num_layers=2"):
        ModelShape(**base, layer_types=("full_attention",), sliding_window=4)
    with pytest.raises(UsageError, match="window >= 1"):
        ModelShape(**base, layer_types=("sliding_attention", "full_attention"))
    with pytest.raises(UsageError, match="unknown attention"):
        ModelShape(**base, layer_types=("local", "full_attention"), sliding_window=4)
    assert ModelShape(**base, layer_types=["sliding_attention", "full_attention"],
                      sliding_window=4).layer_types == ("sliding_attention", "full_attention")


@pytest.mark.parametrize("cached", [0, 3, 11])
@pytest.mark.parametrize("window", [0, 1, 4, 9])
def test_window_keys_is_min_of_position_and_window(cached, window):
    for queries in range(0, 14):
        expected = sum(min(t, window) if window else t
                       for t in range(cached + 1, cached + queries + 1))
        assert window_keys(queries, cached, window) == expected
    assert window_keys(5, cached, 0) == causal_keys(5, cached)


# A 2-layer model: layer 0 slides (window 4), layer 1 is full; d_attn = 8.
SLIDE = ModelShape(name="w", hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
                   num_kv_heads=1, head_dim=4, vocab_size=10, model_type="gemma3_text",
                   qkv_bias=False, sliding_window=4,
                   layer_types=("sliding_attention", "full_attention"))


def test_model_flops_attend_at_most_the_window_on_sliding_layers():
    no_attention = flops.forward_flops(dataclasses.replace(SLIDE, layer_types=(),
                                                           sliding_window=0), [1])
    per_pair = 4 * SLIDE.d_attn
    # one row of 6 tokens: full layer 1+..+6 = 21 pairs, sliding layer 1+2+3+4+4+4 = 18
    linear_and_head = 6 * (no_attention - per_pair * 2 * 1)
    assert flops.forward_flops(SLIDE, [6]) == linear_and_head + per_pair * (21 + 18)
    # executed: SDPA multiplies the full 6 x 6 square on both layers
    assert flops.forward_flops(SLIDE, [6], convention="executed") == (
        linear_and_head + per_pair * 2 * 36)
    assert flops.attention_flops(SLIDE, Pairs(21, 18)) == per_pair * 39


def test_decode_steps_attend_the_window_in_both_conventions():
    # prompt 3, 5 new tokens: 4 decode steps at positions 4..7 (keys 4,5,6,7 full; 4,4,4,4)
    per_pair = 4 * SLIDE.d_attn
    base = dataclasses.replace(SLIDE, layer_types=(), sliding_window=0)
    linear = flops.decode_flops(base, [3], [5]) - per_pair * 2 * (4 + 5 + 6 + 7)
    for convention in ("model", "executed"):
        assert flops.decode_flops(SLIDE, [3], [5], convention=convention) == (
            linear + per_pair * ((4 + 5 + 6 + 7) + 16))


def _race(args, cwd):
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("command", ["plan", "flops"])
def test_a_folder_with_experts_exits_2_with_one_line_before_anything_runs(command, tmp_path):
    folder = tmp_path / "mixtral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        LLAMA | {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}))
    out = _race([command, f"model={folder}"], tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"race {command}: model={folder}: config.json has "
                               f"num_local_experts=4: a mixture of experts")
    assert not (tmp_path / "results").exists()


def test_sliding_window_models_generate_eagerly():
    from race.pilot.rollout import static

    assert static.resolve("auto", "cuda", SLIDE) == "eager"
    assert static.resolve("auto", "cuda", load_model_shape("smollm2-135m")) == "static"
    with pytest.raises(UsageError, match="generation=static: model 'w' has sliding"):
        static.resolve("static", "cuda", SLIDE)
