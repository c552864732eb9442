"""The character tokenizer survives AutoTokenizer's qwen2 rebuild, one token per char."""

import pytest

transformers = pytest.importorskip("transformers", reason="transformers builds tokenizers")

from race.catalog import load_model_shape  # noqa: E402
from race.nn.measure import qwen2_config  # noqa: E402
from race.tasks.arith import ArithTask  # noqa: E402
from race.warmstart.tokenizer import EOS, STEP_TAG, TASK_CHARS, char_vocab, save_char_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    save_char_tokenizer(folder, 64)
    qwen2_config(load_model_shape("tiny-s")).save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


def test_rebuilt_as_qwen2_with_full_vocab(tokenizer):
    assert type(tokenizer).__name__.startswith("Qwen2Tokenizer")
    assert len(tokenizer) == 64 == len(char_vocab(64))
    assert tokenizer.eos_token == tokenizer.pad_token == EOS
    assert tokenizer.padding_side == "left"


def test_one_token_per_character_roundtrip(tokenizer):
    for ex in ArithTask(digits=2).sample("train", 20):
        text = ex.prompt + ex.trace
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)
        assert tokenizer.decode(ids) == text


def test_every_id_decodes_to_something(tokenizer):
    # vLLM samples from every id of the padded vocabulary: none may decode to ""
    for i in range(64):
        assert tokenizer.decode([i]) != ""
    assert tokenizer.convert_tokens_to_ids(STEP_TAG) == 63
    assert [tokenizer.decode([i]) for i in range(len(TASK_CHARS))] == list(TASK_CHARS)


def test_vocab_size_too_small():
    with pytest.raises(ValueError, match="model.vocab_size=8"):
        char_vocab(8)
