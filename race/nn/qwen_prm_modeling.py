"""Qwen2.5-Math-PRM-style process reward model, as self-contained remote code.

This file imports only torch and transformers, so it can be copied next to a
``config.json`` and loaded with ``AutoModel.from_pretrained(folder, trust_remote_code=True)``:
the config's ``auto_map`` names ``"AutoModel": "qwen_prm_modeling.Qwen2ForProcessRewardModel"``
and transformers copies this one file into its dynamic-module cache (it has no relative
imports, so nothing else needs to travel with it).

The layout matches the published Qwen2.5-Math-PRM checkpoints (``model.*`` for the Qwen2
body, ``score.0`` / ``score.2`` for the value head), so their weights load into it: a
Qwen2 decoder, then ``Linear(d, d) -> ReLU -> Linear(d, 2)`` on every position. Logits
index 1 is the "step is correct" class; a reward wrapper softmaxes them and reads the
positive probability at each step-tag position. Inference only: no loss, no KV cache.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import Qwen2Model, Qwen2PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput

# The value head's outputs: (step is wrong, step is right).
NUM_PRM_LABELS = 2


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    """Qwen2 body + a two-class value head on every token.

    ``forward(input_ids, attention_mask)`` returns a ``TokenClassifierOutput`` whose
    ``[0]`` (and ``.logits``) is a float tensor of shape (batch, tokens, 2), as the
    real model's remote code does.
    """

    def __init__(self, config) -> None:
        super().__init__(config)
        self.num_labels = NUM_PRM_LABELS
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(
            nn.Linear(config.hidden_size, config.hidden_size),
            nn.ReLU(),
            nn.Linear(config.hidden_size, NUM_PRM_LABELS),
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed_tokens = value

    def forward(self, input_ids: torch.LongTensor | None = None,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.LongTensor | None = None,
                inputs_embeds: torch.FloatTensor | None = None,
                return_dict: bool | None = None, **kwargs) -> TokenClassifierOutput | tuple:
        """Value-head logits of every position.

        Args:
            input_ids: (batch, tokens) token ids; right padding keeps positions exact.
            attention_mask: (batch, tokens), 1 on real tokens, 0 on padding.
            position_ids: (batch, tokens), defaults to 0..tokens-1.
            inputs_embeds: (batch, tokens, d) instead of ``input_ids``.
            return_dict: ``False`` returns the tuple ``(logits,)``.
            **kwargs: passed to the Qwen2 body (e.g. ``output_hidden_states``).

        Returns:
            ``TokenClassifierOutput`` with ``logits`` of shape (batch, tokens, 2) at ``[0]``.
        """
        kwargs.pop("use_cache", None)
        kwargs.pop("past_key_values", None)
        outputs = self.model(input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, inputs_embeds=inputs_embeds,
                             use_cache=False, **kwargs)
        logits = self.score(outputs.last_hidden_state)
        if return_dict is False:
            return (logits,)
        return TokenClassifierOutput(logits=logits, hidden_states=outputs.hidden_states,
                                     attentions=outputs.attentions)
