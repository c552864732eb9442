"""Local stand-ins for real Hugging Face models: a randomly initialised Qwen2 of any shape
saved with ``save_pretrained``, beside a byte-level BPE tokenizer trained on your text
with a Qwen-style chat template.

A stand-in folder loads exactly as a downloaded checkpoint does (``model=<folder>``), so
the real-model path -- tokenizer from the folder, chat template, EOS and padding, shape
read from ``config.json``, bf16 on a GPU -- runs without a model hub: in tests, in
``bench/device_check.py``, and on a cluster before any weights are fetched. The weights
are random, so what a stand-in measures is cost (FLOPs, memory, throughput), never
accuracy.

torch, transformers, tokenizers and the torch-importing race.nn modules are imported
inside the builders (heavy).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from race.core.specs import ModelShape
from race.errors import UsageError
from race.nn.devices import torch_dtype

# Qwen2.5's special tokens and the layout of its chat template
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 512,
                    extra_tokens: tuple[str, ...] = (), chat_template: bool = True):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``.

    Its special tokens are Qwen2.5's (``<|endoftext|>`` pads, ``<|im_end|>`` ends a turn
    and is the EOS); ``extra_tokens`` (e.g. a PRM's step tag ``<extra_0>``) are added as
    single special tokens. With ``chat_template`` it carries a Qwen-style template.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *extra_tokens]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    core.train_from_iterator(list(texts), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS_TOKEN,
                                        pad_token=PAD_TOKEN,
                                        additional_special_tokens=list(extra_tokens))
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_standin(folder: str | Path, shape: ModelShape, texts: Iterable[str], *,
                  vocab_size: int = 512, dtype: str = "float32", seed: int = 0,
                  extra_tokens: tuple[str, ...] = (), chat_template: bool = True,
                  max_position_embeddings: int = 4096) -> Path:
    """Save a random ``Qwen2ForCausalLM`` of ``shape`` and a tokenizer trained on ``texts``
    into ``folder`` (created); returns it.

    The model keeps ``shape.vocab_size`` embedding rows (a real checkpoint's padded
    vocabulary is larger than its tokenizer too), so ``shape`` must have at least as many
    rows as the tokenizer has tokens.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from race.nn.measure import qwen2_config

    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, extra_tokens=extra_tokens,
                                chat_template=chat_template)
    if len(tokenizer) > shape.vocab_size:
        raise UsageError(f"model.vocab_size={shape.vocab_size}: smaller than the stand-in "
                         f"tokenizer's {len(tokenizer)} tokens; lower vocab_size")
    config = qwen2_config(shape, eos_token_id=tokenizer.eos_token_id,
                          pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=tokenizer.convert_tokens_to_ids(BOS_TOKEN),
                          max_position_embeddings=max_position_embeddings)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_prm_standin(folder: str | Path, shape: ModelShape, texts: Iterable[str], *,
                      vocab_size: int = 512, step_tag: str = "<extra_0>", seed: int = 0
                      ) -> Path:
    """Save a random Qwen2.5-Math-PRM-style model (``Qwen2ForProcessRewardModel``: the body
    and a value head scoring every position) of ``shape`` with a tokenizer trained on
    ``texts`` that holds ``step_tag`` as one token; returns ``folder``.

    With the same ``texts`` and ``vocab_size`` as a policy stand-in, its vocabulary is
    the policy's plus the step tag. Its config carries no ``auto_map``, so RACE loads it
    into its own copy of the architecture.
    """
    import torch

    from race.nn.measure import qwen2_config
    from race.nn.qwen_prm_modeling import Qwen2ForProcessRewardModel

    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, extra_tokens=(step_tag,))
    config = qwen2_config(shape, pad_token_id=tokenizer.pad_token_id,
                          eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    Qwen2ForProcessRewardModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
