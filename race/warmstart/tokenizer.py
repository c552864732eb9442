"""A character-level tokenizer that survives ``AutoTokenizer`` and vLLM for ``qwen2`` models.

transformers 5 (and vLLM) rebuild a ``model_type: qwen2`` tokenizer as byte-level BPE from
``vocab.json`` and ``merges.txt``. A character vocabulary survives that only as byte-level
BPE with no merges: every character is one token spelled in the byte-to-unicode alphabet
(``Ġ`` for space, ``Ċ`` for newline), ByteLevel pre-tokenizer and decoder, and a
vocabulary padded to the model's ``vocab_size`` with real characters (vLLM samples from
every id; an id that decodes to nothing breaks it). See docs/design.md, environment facts.

torch, transformers and tokenizers are imported inside the functions that need them
(heavy: the family's name and in_family need none).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from race.errors import UsageError

# the tokenizer family of the models RACE builds (``tokenizer:`` in race/conf/model/tiny-*.yaml)
FAMILY = "race-char"
EOS = "<|endoftext|>"
STEP_TAG = "<extra_0>"
SPECIAL_TOKENS = (EOS, STEP_TAG)
# The embedded task's characters first (stable ids), then padding characters.
TASK_CHARS = "0123456789+-*=?#\n "
PAD_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,:;()[]/!<>_'\"%&@$^|~`{}\\"


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    # GPT-2's reversible byte -> printable unicode map (what ByteLevel BPE spells tokens in)
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    codes, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, codes)}


def char_vocab(vocab_size: int) -> dict[str, int]:
    """Byte-level spelling of each character -> id, specials last, ``vocab_size`` entries."""
    chars_needed = vocab_size - len(SPECIAL_TOKENS)
    chars = (TASK_CHARS + PAD_CHARS)[:chars_needed]
    if len(chars) < chars_needed:
        raise UsageError(f"model.vocab_size={vocab_size}: the character tokenizer has only "
                         f"{len(TASK_CHARS + PAD_CHARS) + len(SPECIAL_TOKENS)} tokens; use "
                         f"a vocab_size between {len(TASK_CHARS) + len(SPECIAL_TOKENS)} and that")
    if len(chars) < len(TASK_CHARS):
        raise UsageError(f"model.vocab_size={vocab_size}: too small for the task's "
                         f"{len(TASK_CHARS)} characters plus {len(SPECIAL_TOKENS)} specials")
    table = _byte_to_unicode()
    vocab = {table[ord(c)]: i for i, c in enumerate(chars)}
    for special in SPECIAL_TOKENS:
        vocab[special] = len(vocab)
    return vocab


def build_char_tokenizer(vocab_size: int):
    """A ``PreTrainedTokenizerFast`` over :func:`char_vocab`, EOS doubling as padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = char_vocab(vocab_size)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=EOS,
                                        additional_special_tokens=[STEP_TAG],
                                        padding_side="left", clean_up_tokenization_spaces=False)
    return tokenizer


def save_char_tokenizer(folder: str | Path, vocab_size: int) -> None:
    """Write the tokenizer beside a model: vocab.json, empty merges.txt, tokenizer.json."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer(vocab_size)
    tokenizer.save_pretrained(folder)
    # the files a qwen2 rebuild reads: every character is a token, no merges
    vocab = char_vocab(vocab_size)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.update(tokenizer_class="Qwen2Tokenizer", padding_side="left",
                  eos_token=EOS, pad_token=EOS, model_max_length=4096,
                  clean_up_tokenization_spaces=False)
    config_path.write_text(json.dumps(config, indent=2))


def pad_right(seqs: list, pad_id: int):
    """Token-id rows right-padded into ``(ids, attention_mask)``, both ``[B, T_max]``.

    Right padding keeps every real token at its own position (what training, teacher
    forcing and per-position scoring need); ``generate`` uses the tokenizer's left padding.
    """
    import torch

    longest = max(len(seq) for seq in seqs)
    ids = torch.full((len(seqs), longest), pad_id)
    attention = torch.zeros((len(seqs), longest), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, :len(seq)] = torch.tensor(list(seq))
        attention[row, :len(seq)] = 1
    return ids, attention


def in_family(tokenizer: str | None) -> bool:
    """Whether a model of this tokenizer family is one RACE builds and warm-starts (the
    tiny family), rather than one that loads its weights from elsewhere."""
    return tokenizer == FAMILY
