"""The tiny PRMs (``prm-tiny-s``, ``prm-tiny-m``): how they are trained and scored.

The reward that scores with one is :class:`race.rewards.tiny_prm.TinyPRM`; this module
builds the model (cached like the warm-started policies) and holds its scoring pass.

A Qwen2-architecture body with a token-classification head, trained on step-labelled
traces: reference traces (every step positive) and corrupted ones (one step's result or
operand is wrong and the chain continues from the wrong value, so that step and every
later one are negative, as in Math-Shepherd). A PRM scores each step at the newline that
ends the step's line and aggregates the positive-class probabilities into one reward
(min, product or last). Its FLOPs are counted through :mod:`race.core.flops` on the tokens it
actually scored (no extra tag tokens: the newline is the tag).

What a model this small needs (measured; see bench/prm_quality.py): a plain
``Linear(d, 2)`` head on the last hidden state stayed near ROC-AUC 0.75 after 600 steps,
because checking token ``t`` needs the prediction the network formed at ``t - 1``, which
a causal stack only exposes at its output. So the head (``lm_verifier``) also reads that
prediction: the log-likelihood of each written token under the body's tied lm_head, and
its running minimum over the completion. It is trained jointly with dense labels ("the
trace is still correct up to this token": at each step's newline exactly the step label)
and a language-modelling loss on the reference continuation; the body starts from the
warm-started policy of the same shape, as real PRMs start from a policy family.

torch, transformers and safetensors are imported inside the functions that build, load
or score a PRM (heavy: a cached PRM's folder needs none of them).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from race.catalog import load_model_shape
from race.core import flops
from race.core.specs import ModelShape
from race.errors import RewardInputTooLong, UsageError
from race.nn.devices import torch_dtype
from race.tasks.arith import ArithTask, split_lines, step_labels
from race.tasks.task_base import Example
from race.warmstart.policies import (
    build_tiny_policy,
    cache_folder,
    cached_build,
    policy_payload,
    warm_start_recipe,
)
from race.warmstart.tokenizer import FAMILY, in_family, pad_right

RECIPE_VERSION = 2
# Each PRM's body starts from the warm-started policy of the same shape.
INIT_FROM = {"prm-tiny-s": "tiny-m", "prm-tiny-m": "tiny-l"}


@dataclass(frozen=True, slots=True)
class PRMRecipe:
    """Everything that determines a trained tiny PRM (its hash keys the cache)."""

    model: str
    train_steps: int = 150
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 30
    corrupt_fraction: float = 0.6
    init_from: str = ""  # warm-started policy whose body the PRM starts from
    seed: int = 0
    eval_examples: int = 512
    task: dict = field(default_factory=lambda: asdict(ArithTask()))
    version: int = RECIPE_VERSION


def corrupt(task: ArithTask, example: Example, rng: random.Random) -> tuple[str, list[int]]:
    """A trace with one wrong step (result or operand), continued from the wrong value.

    Returns the trace and its step labels (1 before the error, 0 from it on).
    """
    numbers = [int(n) for n in example.prompt.rstrip("=?\n").replace("-", "+").split("+")]
    signs = [c for c in example.prompt if c in "+-"]
    wrong_at = rng.randrange(len(signs) + 1)  # the final-answer line can be the error too
    lines, total = [], numbers[0]
    for i, (sign, value) in enumerate(zip(signs, numbers[1:])):
        shown = value
        if i == wrong_at and rng.random() < 0.3:  # copied the wrong operand
            shown = value + rng.choice([-2, -1, 1, 2])
        new = total + shown if sign == "+" else total - shown
        if i == wrong_at and shown == value:  # miscomputed the result
            new += rng.choice([-10, -2, -1, 1, 2, 10])
        lines.append(f"{total}{sign}{shown}={new}")
        total = new
    final = total + (rng.choice([-2, -1, 1, 2]) if wrong_at == len(signs) else 0)
    lines.append(f"#### {final}")
    trace = "\n".join(lines)
    return trace, step_labels(example.steps, trace)


def labelled_traces(task: ArithTask, split: str, n: int, seed: int,
                    corrupt_fraction: float) -> list[tuple[Example, str, list[int]]]:
    """``n`` (example, trace, step labels): reference traces and corrupted ones."""
    rng = random.Random(f"prm/{split}/{seed}")
    out = []
    for example in task.sample(split, n, seed=seed):
        if rng.random() < corrupt_fraction:
            trace, labels = corrupt(task, example, rng)
        else:
            trace, labels = example.trace, [1] * len(example.steps)
        out.append((example, trace, labels))
    return out


def roc_auc(scores: list[float], labels: list[int]) -> float:
    """Area under the ROC curve (Mann-Whitney U with averaged ranks for ties)."""
    pairs = sorted(zip(scores, labels))
    positives = sum(labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        raise ValueError("roc_auc: needs both positive and negative labels")
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        average_rank = (i + 1 + j) / 2
        rank_sum += average_rank * sum(label for _, label in pairs[i:j])
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def prefix_labels(reference: str, completion: str) -> list[int]:
    """Per character of ``"\n".join(lines) + "\n"``: 1 while it matches the reference."""
    text = "\n".join(split_lines(completion) or [""]) + "\n"
    target = reference + "\n"
    labels, ok = [], True
    for i, char in enumerate(text):
        ok = ok and i < len(target) and char == target[i]
        labels.append(int(ok))
    return labels


def encode_for_scoring(tokenizer, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """Token ids of prompt + the completion's lines (each ending in a newline), and the
    positions of those newlines: one scored position per step."""
    lines = split_lines(completion) or [""]
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    body = tokenizer("\n".join(lines) + "\n", add_special_tokens=False)["input_ids"]
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"][0]
    ids = prompt_ids + body
    positions = [len(prompt_ids) + k for k, token in enumerate(body) if token == newline]
    return ids, positions


def _batch(tokenizer, rows: list[tuple[list[int], list[int]]]):
    return pad_right([tokens for tokens, _ in rows], tokenizer.pad_token_id)


def verifier_logits(lm, head, ids, mask, starts: list[int]):
    """Class logits (B, T, 2) and lm logits (B, T, V) of the ``lm_verifier`` head.

    The head reads, at every position ``t``: the hidden state, the log-likelihood of the
    written token ``x_t`` given ``x_<t`` (0 before the completion starts), and its running
    minimum from the completion's first token to ``t``.
    """
    import torch

    hidden = lm.model(input_ids=ids, attention_mask=mask).last_hidden_state
    lm_logits = lm.lm_head(hidden)
    token_logp = lm_logits[:, :-1].float().log_softmax(-1).gather(
        -1, ids[:, 1:, None])[..., 0]
    token_logp = torch.nn.functional.pad(token_logp, (1, 0))
    positions = torch.arange(ids.shape[1], device=ids.device)[None, :]
    in_completion = positions >= torch.tensor(starts, device=ids.device)[:, None]
    token_logp = torch.where(in_completion, token_logp, torch.zeros_like(token_logp))
    running_min = torch.cummin(token_logp, dim=1).values
    features = torch.cat([hidden.to(token_logp.dtype), token_logp[..., None],
                          running_min[..., None]], dim=-1)
    return head(features), lm_logits


def load_prm(folder: Path, device: str = "cpu", dtype: str = "float32"):
    """Tokenizer, body in ``dtype`` and fp32 head of a built tiny PRM, on ``device``."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype(dtype))
    head = torch.nn.Linear(lm.config.hidden_size + 2, 2)
    head.load_state_dict(load_file(str(folder / "verifier_head.safetensors")))
    return AutoTokenizer.from_pretrained(folder), lm.to(device).eval(), head.to(device).eval()


def step_scores(lm, head, tokenizer, prompts: list[str], completions: list[str],
                batch_size: int = 64, token_limits: list[int] | None = None,
                name: str = "prm-tiny") -> tuple[list[list[float]], list[list[int]]]:
    """P(step correct) at every step of every completion, and each batch's token counts.

    A trace longer than its ``token_limits`` entry is refused before the model runs
    (:class:`~race.errors.RewardInputTooLong`).
    """
    import torch

    scores, batches = [], []
    for start in range(0, len(prompts), batch_size):
        prompt_chunk = prompts[start:start + batch_size]
        rows = [encode_for_scoring(tokenizer, p, c) for p, c in
                zip(prompt_chunk, completions[start:start + batch_size])]
        for (tokens, _), limit in zip(rows, (token_limits or [])[start:start + batch_size]):
            if len(tokens) > limit:
                raise RewardInputTooLong(name, len(tokens), limit)
        starts = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompt_chunk]
        ids, mask = _batch(tokenizer, rows)
        device = lm.lm_head.weight.device
        ids, mask = ids.to(device), mask.to(device)
        with torch.no_grad():
            logits, _ = verifier_logits(lm, head, ids, mask, starts)
        probs = logits.float().softmax(-1)[..., 1]
        for row, (_, positions) in enumerate(rows):
            scores.append(probs[row, positions].tolist())
        batches.append([len(tokens) for tokens, _ in rows])
    return scores, batches


def _train(recipe: PRMRecipe, shape: ModelShape, init: Path, folder: Path) -> dict:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    start = time.perf_counter()
    torch.manual_seed(recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(init)
    lm = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    head = torch.nn.Linear(shape.hidden_size + 2, 2)
    task = ArithTask(**recipe.task)
    data = labelled_traces(task, "train", recipe.train_steps * recipe.batch_size,
                           recipe.seed, recipe.corrupt_fraction)
    params = list(lm.parameters()) + list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
        1.0, (s + 1) / recipe.warmup_steps) * max(0.05, 1 - s / recipe.train_steps))
    pretrain = {"model": 0.0, "executed": 0.0}
    lm.train()
    for step in range(recipe.train_steps):
        chunk = data[step * recipe.batch_size:(step + 1) * recipe.batch_size]
        rows = [encode_for_scoring(tokenizer, ex.prompt, trace) for ex, trace, _ in chunk]
        ids, mask = _batch(tokenizer, rows)
        labels = torch.full(ids.shape, -100)
        targets = torch.full(ids.shape, -100)
        starts = []
        for row, ((tokens, positions), (ex, trace, step_labels_)) in enumerate(zip(rows, chunk)):
            dense = prefix_labels(ex.trace, trace)  # one label per completion character
            first = len(tokens) - len(dense)
            starts.append(first)
            labels[row, first:len(tokens)] = torch.tensor(dense)
            assert labels[row, positions].tolist() == step_labels_
            # language-modelling targets: the reference's next token, while the prefix is right
            reference = tokenizer(ex.trace + "\n", add_special_tokens=False)["input_ids"]
            for k in range(len(reference)):
                if k == 0 or (k - 1 < len(dense) and dense[k - 1]):
                    targets[row, first + k - 1] = reference[k]
        logits, lm_logits = verifier_logits(lm, head, ids, mask, starts)
        loss = (torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                                  ignore_index=-100)
                + torch.nn.functional.cross_entropy(lm_logits.flatten(0, 1), targets.flatten(),
                                                    ignore_index=-100))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        lengths = [len(tokens) for tokens, _ in rows]
        for convention in flops.CONVENTIONS:
            # full fine-tuning of body + head (the head's matmuls all need gradients)
            pretrain[convention] += flops.train_flops(shape, lengths, convention=convention)
    train_s = time.perf_counter() - start
    lm.eval()
    head.eval()
    held_out = labelled_traces(task, "test", recipe.eval_examples, 10_000, 0.5)
    scores, _ = step_scores(lm, head, tokenizer, [ex.prompt for ex, _, _ in held_out],
                            [trace for _, trace, _ in held_out])
    auc = roc_auc([s for row in scores for s in row],
                  [label for _, _, labels in held_out for label in labels])
    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_file(head.state_dict(), str(folder / "verifier_head.safetensors"))
    return {"model": shape.name, "recipe": asdict(recipe), "init": str(init),
            "heldout_step_auc": auc, "heldout_steps": sum(len(r) for r in scores),
            "train_s": train_s, "build_s": time.perf_counter() - start,
            "final_loss": float(loss.detach()), "params": shape.total_params,
            "pretrain_flops": pretrain}


def family_prm(name: str, task: Mapping[str, Any] = (), warmstart: Mapping[str, Any] = (),
               *, rebuild: bool = False, train: bool = True) -> Path | None:
    """Folder of the tiny PRM ``name`` for a cell's task entry and ``warmstart.*`` knobs
    (a ``RunSpec``'s ``task`` and ``warmstart``): trained on that task's traces, its body
    from that recipe's warm-started policy."""
    init = INIT_FROM.get(name, "")
    policy_recipe = warm_start_recipe(init, task, warmstart)
    recipe = PRMRecipe(model=name, init_from=init, seed=policy_recipe.seed,
                       task=policy_recipe.task)
    return build_tiny_prm(name, recipe=recipe, policy_recipe=policy_recipe, rebuild=rebuild,
                          train=train)


def build_tiny_prm(name: str, *, seed: int = 0, rebuild: bool = False,
                   recipe: PRMRecipe | None = None, policy_recipe=None,
                   train: bool = True) -> Path | None:
    """Folder of the trained tiny PRM ``name`` (e.g. ``prm-tiny-m``), cached like policies.

    Its body starts from the warm-started policy of the same shape (``recipe.init_from``).
    """
    shape = load_model_shape(name)
    if shape.head != "lm_verifier" or not in_family(shape.tokenizer):
        raise UsageError(f"reward.model={name}: not a tiny PRM (needs head lm_verifier and "
                         f"tokenizer {FAMILY})")
    recipe = recipe or PRMRecipe(model=name, init_from=INIT_FROM.get(name, ""), seed=seed)
    init_shape = load_model_shape(recipe.init_from)
    body = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
            "head_dim", "vocab_size")
    if any(getattr(init_shape, k) != getattr(shape, k) for k in body):
        raise UsageError(f"reward.model={name}: its body differs from init policy "
                         f"{recipe.init_from}; give race/conf/model/{name}.yaml that "
                         f"policy's shape")
    init = build_tiny_policy(recipe.init_from, seed=recipe.seed, recipe=policy_recipe,
                             train=train)
    if init is None:
        return None
    return cached_build("prms", name, prm_payload(recipe, shape, init.name),
                        lambda folder: _train(recipe, shape, init, folder), rebuild=rebuild,
                        train=train)


def prm_payload(recipe: PRMRecipe, shape: ModelShape, init: str) -> dict:
    """What keys a tiny PRM's cache folder (:func:`race.warmstart.policies.cache_folder`):
    its recipe, its shape and the cache folder name of the policy its body starts from."""
    return {"recipe": asdict(recipe), "shape": shape.key(), "init": init}


def family_prm_folders(name: str, task: Mapping[str, Any] = (),
                       warmstart: Mapping[str, Any] = ()) -> tuple[Path, Path]:
    """Where :func:`family_prm` keeps tiny PRM ``name`` and the policy its body starts
    from, for a cell's task entry and ``warmstart.*`` knobs (nothing built)."""
    init = INIT_FROM.get(name, "")
    policy_recipe = warm_start_recipe(init, task, warmstart)
    policy = cache_folder("policies", init, policy_payload(init, policy_recipe))
    recipe = PRMRecipe(model=name, init_from=init, seed=policy_recipe.seed,
                       task=policy_recipe.task)
    return (cache_folder("prms", name, prm_payload(recipe, load_model_shape(name),
                                                    policy.name)), policy)
