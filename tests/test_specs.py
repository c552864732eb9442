"""Shapes, LoRA settings and phase FLOPs (race.core.specs) and the race/conf/ registry
(race.catalog)."""

import dataclasses
import json

import pytest

from race import catalog
from race.catalog import load_model_shape
from race.core.specs import LoraShape, ModelShape, PhaseFlops

REL = 5e-3  # 0.5 % relative: the official totals are quoted to three decimals

# Official Qwen2.5 parameter counts (model cards / technical report), in billions:
# (total, non-embedding).
OFFICIAL = {
    "qwen2.5-0.5b": (0.494, 0.358),
    "qwen2.5-1.5b": (1.544, 1.310),
    "qwen2.5-3b": (3.086, 2.775),
    "qwen2.5-7b": (7.616, 6.526),
}

# Qwen2.5-0.5B's public config.json (the fields RACE reads).
QWEN05_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
}


def tiny(**overrides):
    """d=8, I=16, L=2, 2 query heads, 1 kv head, head_dim 4, V=10, tied."""
    fields = dict(name="g", hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2,
                  num_kv_heads=1, head_dim=4, vocab_size=10, tied_embeddings=True)
    return ModelShape(**(fields | overrides))


def architecture(shape):
    """The fields a Hugging Face config determines (not registry metadata)."""
    return dataclasses.replace(shape, name="", hf_id="", tokenizer="", step_tag="")


# --------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("name", list(OFFICIAL))
def test_param_counts_match_official(name):
    shape = load_model_shape(name)
    total, non_embedding = OFFICIAL[name]
    assert shape.total_params == pytest.approx(total * 1e9, rel=REL)
    assert shape.non_embedding_params == pytest.approx(non_embedding * 1e9, rel=REL)


def test_param_counts_tiny_by_hand():
    shape = tiny()
    # per layer linears: q 8*8 + k 8*4 + v 8*4 + o 8*8 + gate 8*16 + up 8*16 + down 16*8
    layer_linear = 64 + 32 + 32 + 64 + 128 + 128 + 128  # = 576
    assert shape.layer_linear_params == layer_linear
    assert shape.linear_params == 2 * layer_linear
    # + q/k/v biases (8 + 4 + 4) + two RMSNorms (2 * 8) per layer, + final norm (8)
    non_embedding = 2 * (layer_linear + 16 + 16) + 8  # = 1224
    assert shape.non_embedding_params == non_embedding
    # + embedding 10 * 8; tied lm_head adds nothing
    assert shape.total_params == non_embedding + 80
    assert tiny(tied_embeddings=False).total_params == non_embedding + 80 + 80


def test_head_params():
    # PRM value head Linear(8, 8) + ReLU + Linear(8, 2), with biases
    assert tiny(head="prm_value", num_labels=2).head_params == 64 + 8 + 16 + 2
    # sequence score Linear(8, 1) without bias
    assert tiny(head="sequence_score", num_labels=1).head_params == 8


def test_derived_widths():
    shape = tiny()
    assert (shape.d_attn, shape.d_kv) == (8, 4)
    # head_dim defaults to hidden_size // num_heads
    assert tiny(head_dim=0).head_dim == 4


# --------------------------------------------------------------------------- from_hf_config


def test_from_hf_config_qwen2config_dict_and_file_agree_with_yaml(tmp_path):
    transformers = pytest.importorskip("transformers")
    yaml_shape = load_model_shape("qwen2.5-0.5b")
    assert (yaml_shape.hidden_size, yaml_shape.intermediate_size, yaml_shape.num_layers,
            yaml_shape.num_heads, yaml_shape.num_kv_heads, yaml_shape.vocab_size,
            yaml_shape.tied_embeddings) == (896, 4864, 24, 14, 2, 151936, True)

    config = transformers.Qwen2Config(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
        tie_word_embeddings=True)
    from_object = ModelShape.from_hf_config(config, name="qwen2.5-0.5b")

    from_dict = ModelShape.from_hf_config(dict(QWEN05_CONFIG), name="qwen2.5-0.5b")

    (tmp_path / "config.json").write_text(json.dumps(QWEN05_CONFIG))
    from_file = ModelShape.from_hf_config(tmp_path / "config.json", name="qwen2.5-0.5b")
    from_dir = ModelShape.from_hf_config(str(tmp_path), name="qwen2.5-0.5b")

    expected = architecture(yaml_shape)
    for shape in (from_object, from_dict, from_file, from_dir):
        assert shape.name == "qwen2.5-0.5b"
        assert architecture(shape) == expected
        assert shape.head_dim == 64
        assert shape.total_params == yaml_shape.total_params


def test_from_hf_config_defaults():
    entry = {"model_type": "qwen2", "hidden_size": 8, "intermediate_size": 16,
             "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}
    shape = ModelShape.from_hf_config(entry)
    assert shape.name == "qwen2"  # falls back to model_type
    assert shape.num_kv_heads == 2  # no GQA key: multi-head attention
    assert shape.head_dim == 4
    assert shape.tied_embeddings is False  # HF's default
    assert ModelShape.from_hf_config(entry, head="prm_value").head == "prm_value"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("key", ["hidden_size", "intermediate_size", "num_layers",
                                 "num_heads", "num_kv_heads", "vocab_size"])
@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_sizes_rejected(key, value):
    with pytest.raises(ValueError, match=f"model.{key}="):
        tiny(**{key: value})


def test_non_integer_size_rejected():
    with pytest.raises(ValueError, match="model.hidden_size="):
        tiny(hidden_size=8.0)


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="model.num_kv_heads=3"):
        tiny(num_heads=4, num_kv_heads=3, head_dim=2)


def test_heads_must_divide_hidden_without_head_dim():
    with pytest.raises(ValueError, match="model.num_heads=3"):
        tiny(num_heads=3, num_kv_heads=1, head_dim=0)


def test_unknown_head_rejected():
    with pytest.raises(ValueError, match="model.head='softmax'"):
        tiny(head="softmax")


def test_lora_validate_ok():
    # q_proj is 8x8 and v_proj 8x4: rank 4 fits both
    LoraShape(rank=4, targets=("q_proj", "v_proj")).validate(tiny())
    LoraShape(rank=8, targets=("q_proj", "o_proj")).validate(tiny())


def test_lora_rank_larger_than_width_rejected():
    # v_proj is 8 -> 4, so rank 5 does not fit
    with pytest.raises(ValueError, match="grid.lora_rank=5") as exc:
        LoraShape(rank=5, targets=("q_proj", "v_proj")).validate(tiny())
    assert "v_proj" in str(exc.value)


def test_lora_rank_must_be_positive():
    with pytest.raises(ValueError, match="grid.lora_rank=0"):
        LoraShape(rank=0).validate(tiny())


def test_lora_unknown_target_rejected():
    with pytest.raises(ValueError, match="grid.lora_targets") as exc:
        LoraShape(rank=2, targets=("q_proj", "qkv_proj")).validate(tiny())
    assert "qkv_proj" in str(exc.value)
    with pytest.raises(ValueError, match="grid.lora_targets"):
        LoraShape(rank=2, targets=()).validate(tiny())


# --------------------------------------------------------------------------- catalog


def test_catalog_lists_shipped_models():
    assert {"qwen2.5-0.5b", "qwen2.5-7b", "tiny-s"} <= set(catalog.names("model"))


def test_catalog_miss_lists_names_and_suggests():
    with pytest.raises(KeyError) as exc:
        catalog.load_entry("model", "qwen2.5-8b")
    message = exc.value.args[0]
    assert "did you mean" in message
    for name in catalog.names("model"):
        assert name in message
    assert "model=qwen2.5-8b" in message


# --------------------------------------------------------------------------- PhaseFlops


def test_phase_total_excludes_eval():
    phase = PhaseFlops(rollout=6.0, learning=3.0, feedback=1.0, eval=100.0)
    assert phase.total == 10.0
    assert phase.to_dict() == {"rollout": 6.0, "learning": 3.0, "feedback": 1.0,
                               "eval": 100.0, "total": 10.0}


def test_phase_shares_sum_to_one():
    phase = PhaseFlops(rollout=6.0, learning=3.0, feedback=1.0, eval=100.0)
    shares = phase.shares()
    assert shares == pytest.approx({"rollout": 0.6, "learning": 0.3, "feedback": 0.1})
    assert sum(shares.values()) == pytest.approx(1.0)
    assert PhaseFlops().shares() == {"rollout": 0.0, "learning": 0.0, "feedback": 0.0}


def test_phase_add_and_scale():
    a = PhaseFlops(1.0, 2.0, 3.0, 4.0)
    b = PhaseFlops(10.0, 20.0, 30.0, 40.0)
    assert a + b == PhaseFlops(11.0, 22.0, 33.0, 44.0)
    assert (a + b).total == a.total + b.total
    assert a.scale(3) == PhaseFlops(3.0, 6.0, 9.0, 12.0)
    assert a.scale(3).total == 3 * a.total


def test_run_spec_carries_shapes_that_round_trip_and_stay_out_of_its_ids():
    import dataclasses

    from race.catalog import load_model_shape
    from race.core.specs import RunSpec

    bare = RunSpec("tiny-s", (("kind", "rule"), ("name", "rule")), (("name", "arith"),), 1e9)
    shaped = dataclasses.replace(bare, policy=load_model_shape("tiny-s"),
                                 reward_model=load_model_shape("prm-tiny-s"))
    assert (shaped.cell_id, shaped.config_id, shaped.lineage_id) == (
        bare.cell_id, bare.config_id, bare.lineage_id)
    import json

    assert RunSpec.from_dict(json.loads(json.dumps(shaped.to_dict()))) == shaped
