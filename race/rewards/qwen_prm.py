"""Qwen2.5-Math-PRM-style process reward model as a ``Reward``, with its FLOP ledger.

Each completion is cut into steps at blank lines; the steps go into the chat layout of
Qwen2.5-Math-PRM's model card (system prompt, the user's problem, the assistant's steps
each followed by the step tag ``<extra_0>``), the model scores every position, and the
positive-class probability at each step tag is that step's score. One reward per
completion aggregates its step scores (``min``, ``prod`` or ``last``).

FLOPs are counted from the tokens actually scored, per batch, through
:func:`race.core.flops.reward_flops`: ``model`` on the real token counts, ``executed`` on the
batch as run (right-padded to its longest row). The step tags are already inside the
tokenised text, so no extra tag tokens are added on top.

Heavy imports (torch, transformers) happen inside the functions that need them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from race.core.flops import reward_flops
from race.core.specs import ModelShape, RewardShape
from race.errors import RewardInputTooLong, UsageError
from race.rewards.reward_base import FlopLedger, RewardFlops, check_rewards

# Qwen2.5-Math-PRM's model card: the system prompt its training data used.
SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULT_STEP_TAG = "<extra_0>"
AGGREGATES = ("min", "prod", "last")


def split_steps(completion: str, max_steps: int = 0) -> list[str]:
    """Steps of a completion: split at blank lines (``"\\n\\n"``), stripped, empties dropped.

    A completion without a blank line is one step; an empty one has no steps. With
    ``max_steps > 0`` the steps after the first ``max_steps - 1`` join the last one
    (separated by a blank line), so a trace never carries more than ``max_steps`` tags.
    """
    steps = [step.strip() for step in completion.split("\n\n") if step.strip()]
    if max_steps > 0 and len(steps) > max_steps:
        steps = steps[:max_steps - 1] + ["\n\n".join(steps[max_steps - 1:])]
    return steps


def aggregate_scores(scores: list[float], how: str) -> float:
    """One reward from per-step scores: their minimum, product, or the last one."""
    if how not in AGGREGATES:
        raise UsageError(f"reward.aggregate={how!r}: unknown aggregation; use one of "
                         f"{list(AGGREGATES)}")
    if not scores or any(math.isnan(score) for score in scores):
        # no scored step, or a broken one (min() would skip a NaN): check_rewards refuses
        # it, naming the completion
        return math.nan
    if how == "min":
        return min(scores)
    if how == "prod":
        return math.prod(scores)
    return scores[-1]


class QwenPRM(FlopLedger):
    """A process reward model scoring each blank-line-separated step of a completion.

    Attributes:
        name: reward name used in messages and ledgers.
        kind: ``"prm"``.
        value_range: ``(0.0, 1.0)``: aggregated probabilities.
        shape: the model's architecture numbers, for FLOP accounting.
        last_step_scores: per-completion step scores of the last call.
        last_token_counts: real token count of each sequence scored in the last call.
    """

    kind = "prm"
    value_range = (0.0, 1.0)

    def __init__(self, path_or_id: str | Path, shape: ModelShape | None = None, *,
                 aggregate: str = "min", step_tag: str = DEFAULT_STEP_TAG,
                 device: str = "cpu", batch_size: int = 8, name: str = "",
                 system_prompt: str = SYSTEM_PROMPT, dtype: Any = None,
                 trust_remote_code: bool = True, max_steps: int = 0) -> None:
        """Load the tokenizer and model (``trust_remote_code=True``) and check the tag.

        Args:
            path_or_id: local folder or hub id of a Qwen2.5-Math-PRM-style model.
            shape: architecture numbers for FLOP accounting; None reads them from the
                loaded model's config (value head ``prm_value``).
            aggregate: ``min``, ``prod`` or ``last`` of the step scores.
            step_tag: the token the model scores at, ending each step.
            device: torch device the model runs on.
            batch_size: completions per forward pass.
            name: reward name; defaults to ``shape.name`` or the folder name.
            system_prompt: the system message of the chat layout.
            dtype: torch dtype for ``from_pretrained`` (None: its default).
            max_steps: the most steps scored per completion (later ones join the last);
                0: no limit. It bounds the tags a trace adds (see :mod:`race.pilot.budget`).
            trust_remote_code: load the tokenizer and model with the checkpoint's own
                remote code (``AutoModel``); False loads the same weights into this package's copy,
                :class:`race.nn.qwen_prm_modeling.Qwen2ForProcessRewardModel`, for
                checkpoints whose remote code does not run on the installed transformers.

        Raises:
            ValueError: an unknown ``aggregate``, ``batch_size < 1``, or a tokenizer in
                which ``step_tag`` is not a single token.
        """
        if aggregate not in AGGREGATES:
            raise UsageError(f"reward.aggregate={aggregate!r}: unknown aggregation; use one "
                             f"of {list(AGGREGATES)}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise UsageError(f"reward.batch_size={batch_size!r}: must be an integer >= 1")
        from transformers import AutoModel, AutoTokenizer

        self.path = str(path_or_id)
        self.aggregate = aggregate
        self.step_tag = step_tag
        self.device = device
        self.batch_size = batch_size
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.tokenizer = AutoTokenizer.from_pretrained(self.path,
                                                       trust_remote_code=trust_remote_code)
        self.step_tag_id = self._tag_id(self.tokenizer, step_tag, self.path)
        kwargs = {} if dtype is None else {"dtype": dtype}
        if trust_remote_code:
            self.model = AutoModel.from_pretrained(self.path, trust_remote_code=True, **kwargs)
        else:
            from race.nn.qwen_prm_modeling import Qwen2ForProcessRewardModel

            self.model = Qwen2ForProcessRewardModel.from_pretrained(self.path, **kwargs)
        self.model.to(device).eval()
        if shape is None:
            shape = ModelShape.from_hf_config(self.model.config, name=name or
                                              Path(self.path).name, head="prm_value")
        self.shape = shape
        self.name = name or shape.name or Path(self.path).name
        self.reward_shape = RewardShape(self.name, "prm", shape)
        self.last_step_scores: list[list[float]] = []
        self.last_token_counts: list[int] = []

    @staticmethod
    def _tag_id(tokenizer: Any, step_tag: str, path: str) -> int:
        """The id of ``step_tag``, which must be one token of ``tokenizer``."""
        ids = tokenizer.encode(step_tag, add_special_tokens=False)
        tag_id = tokenizer.convert_tokens_to_ids(step_tag)
        if len(ids) != 1 or tag_id is None or tag_id == tokenizer.unk_token_id or ids != [tag_id]:
            raise UsageError(f"reward.step_tag={step_tag!r}: the tokenizer of {path!r} has no "
                             f"such token (it encodes to {len(ids)} tokens {ids[:8]}); a PRM "
                             f"scores at its step tag, so use the PRM's own tokenizer or set "
                             f"step_tag to the token it was trained with")
        return int(tag_id)

    def format_input(self, prompt: str, steps: list[str]) -> str:
        """The text the PRM scores: chat layout of the model card, each step + tag.

        The tag is removed from the prompt and the steps first, so the number of tags in
        the text equals the number of steps.
        """
        tag = self.step_tag
        steps = [step.replace(tag, "") for step in steps]
        prompt = prompt.replace(tag, "")
        assistant = tag.join(steps) + tag
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": self.system_prompt},
                        {"role": "user", "content": prompt},
                        {"role": "assistant", "content": assistant}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=False)
        return f"{self.system_prompt}\n{prompt}\n{assistant}"

    def overhead_tokens(self) -> int:
        """Tokens this PRM's input format adds to every trace whatever it says (system
        prompt, chat-template tokens), measured with its own tokenizer."""
        return len(self.tokenizer.encode(self.format_input("", [""]))) - 1  # less one tag

    def __call__(self, prompts: list[str], completions: list[str], *,
                 token_limits: list[int] | None = None, **task_fields: Any) -> list[float]:
        """One aggregated step score in [0, 1] per completion.

        Args:
            prompts: the problem each completion answers (one per completion).
            completions: the policy's outputs; steps are separated by blank lines.
            token_limits: the most tokens each trace may be scored on; a longer input is
                refused (:class:`~race.errors.RewardInputTooLong`) before the model runs.
            **task_fields: ignored (a PRM needs no gold answer).

        Returns:
            One float per completion; per-step scores stay in ``last_step_scores``.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"reward={self.name}: got {len(prompts)} prompts for "
                             f"{len(completions)} completions; pass one prompt per completion "
                             f"(repeat each prompt G times)")
        # an empty completion is one empty step: the PRM still judges it
        steps = [split_steps(completion, self.max_steps) or [""] for completion in completions]
        texts = [self.format_input(prompt, parts) for prompt, parts in zip(prompts, steps)]
        encoded = [self.tokenizer.encode(text) for text in texts]
        for ids, limit in zip(encoded, token_limits or []):
            if len(ids) > limit:
                raise RewardInputTooLong(self.name, len(ids), limit)
        step_scores: list[list[float]] = []
        token_counts: list[int] = []
        for start in range(0, len(texts), self.batch_size):
            scores, counts = self._score_batch(encoded[start:start + self.batch_size])
            step_scores += scores
            token_counts += counts
        for completion, parts, scores in zip(completions, steps, step_scores):
            if len(scores) != len(parts):
                raise ValueError(f"reward={self.name}: {len(parts)} steps but {len(scores)} "
                                 f"step tags {self.step_tag!r} in the scored text of completion "
                                 f"{completion[:120]!r}; the tokenizer or chat template of "
                                 f"{self.path!r} splits or drops the tag, so fix step_tag")
        self.last_step_scores = step_scores
        self.last_token_counts = token_counts
        rewards = [aggregate_scores(scores, self.aggregate) for scores in step_scores]
        return check_rewards(self, completions, rewards)

    def _score_batch(self, encoded: list[list[int]]) -> tuple[list[list[float]], list[int]]:
        """Step-tag scores and real token counts of one right-padded batch; charges FLOPs."""
        import torch

        counts = [len(ids) for ids in encoded]
        longest = max(counts)
        pad_id = self.tokenizer.pad_token_id
        pad_id = 0 if pad_id is None else pad_id
        # right padding: positions 0..n-1 of every row are exact without position_ids
        input_ids = torch.full((len(encoded), longest), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(encoded), longest), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, :len(ids)] = 1
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids.to(self.device),
                                attention_mask=attention_mask.to(self.device))[0]
        positive = torch.softmax(logits.float(), dim=-1)[..., 1].cpu()
        tags = (input_ids == self.step_tag_id) & attention_mask.bool()
        scores = [positive[row][tags[row]].tolist() for row in range(len(encoded))]
        model = reward_flops(self.reward_shape, counts, [0] * len(counts), convention="model")
        executed = reward_flops(self.reward_shape, counts, [0] * len(counts),
                                convention="executed")
        self._charge(RewardFlops(model=float(model), executed=float(executed),
                                 tokens=sum(counts)))
        return scores, counts
