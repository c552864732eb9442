"""Warm-started tiny policies: Qwen2-architecture models given a short supervised phase.

RACE's embedded default must show RL improving a policy on a laptop CPU, with no hub.
``build_tiny_policy("tiny-m")`` builds a ``Qwen2ForCausalLM`` of the shape in
``race/conf/model/tiny-m.yaml`` and trains it on reference solutions of the embedded task
(loss on the completion only) by one recipe common to every size: the same data, the
same number of steps, the same learning-rate schedule (linear warm-up, cosine decay to
zero). No size has an accuracy target: what each size reaches is its capacity under
that recipe, which is what the size axis of a sweep then shows. It saves model,
tokenizer and a ``build_info.json`` (its greedy accuracy on ``val`` along the way and at
the end, on ``test`` and ``ood``, wall seconds, and the warm-start FLOPs, which are
pre-training and never charged to a post-training budget).

Builds are deterministic for a recipe on one machine (another CPU's floating point can
give another build) and cached under ``$RACE_CACHE_DIR`` (default
``~/.cache/race``) in a folder keyed by a hash of the recipe: a second call loads it.
The default recipes' weights ship with RACE (:mod:`race.warmstart.shipped`): they are
installed, not trained, so every machine starts from the same weights.

torch, transformers and race.nn.measure (torch) are imported inside the functions that
build or evaluate a model (heavy: a cached warm start needs none of them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from race.catalog import load_model_shape
from race.core import flops
from race.core.specs import ModelShape
from race.errors import UsageError
from race.store.umask import share_like_umask
from race.tasks.arith import ArithTask, step_labels
from race.tasks.task_base import Example
from race.warmstart import shipped
from race.warmstart.cache import cache_dir, cache_writes
from race.warmstart.tokenizer import (
    FAMILY,
    build_char_tokenizer,
    in_family,
    pad_right,
    save_char_tokenizer,
)

# 2: one recipe for every size (fixed steps, cosine decay), no targets; 3: flawed
# demonstrations (``flip``)
RECIPE_VERSION = 3


@dataclass(frozen=True, slots=True)
class WarmStartRecipe:
    """Everything that determines a warm-started policy (its hash keys the cache).

    One recipe for every size: nothing here depends on the model but its name.
    """

    model: str
    steps: int = 600  # supervised steps, every size the same
    batch_size: int = 32
    lr: float = 3e-3  # peak AdamW learning rate
    warmup_steps: int = 30  # linear warm-up, then cosine decay to 0 at ``steps``
    curve_every: int = 100  # steps between greedy checks on ``val`` (the build's curve)
    curve_examples: int = 256
    val_examples: int = 1000  # the final ``val`` accuracy (SE <= 0.016)
    eval_examples: int = 512  # ``test`` and ``ood``, reported
    seed: int = 0
    # share of the demonstrations' subtraction steps computed as additions (0: clean)
    flip: float = 0.6
    task: dict = field(default_factory=lambda: asdict(ArithTask()))
    version: int = RECIPE_VERSION

    def lr_factor(self, step: int) -> float:
        """The learning rate at ``step`` as a fraction of ``lr``."""
        warm = (step + 1) / self.warmup_steps
        decay = 0.5 * (1 + math.cos(math.pi * min(1.0, step / self.steps)))
        return min(warm, decay)


def warm_start_recipe(model: str, task: Mapping[str, Any] = (),
                      warmstart: Mapping[str, Any] = ()) -> WarmStartRecipe:
    """The recipe of ``model``'s warm start for a cell's task entry and ``warmstart.*``
    knobs (a ``RunSpec``'s ``task`` and ``warmstart`` as dicts): the embedded task's knobs
    when the cell runs it, else its defaults."""
    task, warmstart = dict(task), dict(warmstart)
    knobs = {k: v for k, v in task.items() if k != "name"} if task.get("name") == "arith" \
        else {}
    fields = {k: warmstart[k] for k in ("steps", "batch_size", "lr", "flip", "seed")
              if k in warmstart}
    return WarmStartRecipe(model=model, task=asdict(ArithTask(**knobs)), **fields)


@contextlib.contextmanager
def single_thread():
    """Run torch on one thread inside, restoring the caller's count after (even on error).

    Builds of models this small are fastest and deterministic on one thread (docs/design.md,
    environment facts).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def cache_folder(kind: str, name: str, payload: dict) -> Path:
    """Where :func:`cached_build` keeps ``kind/name`` built from ``payload``:
    ``cache_dir()/kind/name-<hash of payload>`` (``kind/name-<hash>`` is the name
    :mod:`race.warmstart.shipped` ships it under)."""
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / kind / f"{name}-{key}"


def cached_build(kind: str, name: str, payload: dict, build: Callable[[Path], dict], *,
                 rebuild: bool = False, train: bool = True) -> Path | None:
    """``cache_dir()/kind/name-<hash of payload>``, built once by ``build(staging)``.

    A folder RACE ships (:mod:`race.warmstart.shipped`: the recipes the docs ran from) is
    installed from its archive and checked, never trained, unless ``rebuild`` asks for a
    local build (then marked ``local_build``, and warned about at each load). Any other
    recipe is built on this machine, saying so. ``build`` trains into a staging folder, on
    one torch thread, and returns the build info; the folder is renamed into place only
    when complete, so a crash never leaves a half-built model. ``train=False``: None
    where the folder would have to be trained (shipped and cached folders are returned).
    """
    folder = cache_folder(kind, name, payload)
    key = folder.name.rsplit("-", 1)[1]
    shipped_name = f"{kind}/{folder.name}"
    if shipped.archive_of(shipped_name) and not rebuild:
        with cache_writes(folder.parent):
            return shipped.install(shipped_name, folder)
    if (folder / "build_info.json").is_file() and not rebuild:
        return folder
    if not train:  # the caller trains it elsewhere (build_family's pool)
        return None
    print(f"warm start {name}-{key}: " + (
        "rebuilt on this machine at your request" if shipped.archive_of(shipped_name) else
        "not a warm start RACE ships (the warmstart.* knobs or the task differ from a "
        "shipped one's), built on this machine") + "; results from it will differ from "
        "the docs", file=sys.stderr, flush=True)
    with cache_writes(folder.parent):
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        with single_thread():
            info = build(staging) | {"cache_key": key}
        if shipped.archive_of(shipped_name):
            info["local_build"] = True  # not the shipped weights: say so at each load
        (staging / "build_info.json").write_text(json.dumps(info, indent=2))
        share_like_umask(staging)  # mkdtemp's 0700, safetensors' 0600 files
        if folder.is_symlink() or folder.is_file():  # a file where the folder goes
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def encode_example(tokenizer, example: Example) -> tuple[list[int], int]:
    """Token ids of prompt + reference trace + EOS, and the prompt's length in tokens."""
    prompt = tokenizer(example.prompt, add_special_tokens=False)["input_ids"]
    completion = tokenizer(example.trace, add_special_tokens=False)["input_ids"]
    return prompt + completion + [tokenizer.eos_token_id], len(prompt)


def _sft_batch(tokenizer, examples: list[Example]):
    import torch

    encoded = [encode_example(tokenizer, ex) for ex in examples]
    ids, mask = pad_right([tokens for tokens, _ in encoded], tokenizer.pad_token_id)
    labels = torch.full(ids.shape, -100)
    for row, (tokens, prompt_len) in enumerate(encoded):
        labels[row, prompt_len:len(tokens)] = torch.tensor(tokens[prompt_len:])
    return ids, mask, labels, [len(t) for t, _ in encoded]


def greedy_accuracy(model, tokenizer, task: ArithTask, examples: list[Example], *,
                    max_new_tokens: int = 64, batch_size: int = 64) -> float:
    """Fraction of ``examples`` whose greedy completion has the right final answer."""
    import torch

    correct = 0
    model.eval()
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        batch = tokenizer([ex.prompt for ex in chunk], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens,
                                 eos_token_id=tokenizer.eos_token_id,
                                 pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:],
                                       skip_special_tokens=True)
        correct += sum(task.verify(text, ex.answer) for text, ex in zip(texts, chunk))
    return correct / len(examples)


def headroom(model, tokenizer, task: ArithTask, examples: list[Example], *, k: int = 8,
             max_new_tokens: int = 64, batch_size: int = 25, seed: int = 0) -> dict:
    """How much room a warm start leaves RL, on ``examples``: greedy accuracy; pass@k
    counting only step-correct traces (every line equals the reference) and counting any
    right final answer, of ``k`` samples at temperature 1; the sampled accuracy; and the
    lucky-answer rate, the share of sampled right answers whose trace has a wrong step."""
    import torch

    model.eval()
    torch.manual_seed(seed)
    greedy = pass_step = pass_final = right = lucky = 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        batch = tokenizer([ex.prompt for ex in chunk], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        common = {"max_new_tokens": max_new_tokens, "eos_token_id": tokenizer.eos_token_id,
                  "pad_token_id": tokenizer.pad_token_id}
        with torch.no_grad():
            best = model.generate(**batch, do_sample=False, **common)
            sampled = model.generate(**batch, do_sample=True, temperature=1.0, top_k=0,
                                     num_return_sequences=k, **common)
        width = batch["input_ids"].shape[1]
        best = tokenizer.batch_decode(best[:, width:], skip_special_tokens=True)
        sampled = tokenizer.batch_decode(sampled[:, width:], skip_special_tokens=True)
        for i, ex in enumerate(chunk):
            greedy += task.verify(best[i], ex.answer)
            any_step = any_final = False
            for text in sampled[i * k:(i + 1) * k]:
                ok = task.verify(text, ex.answer)
                labels = step_labels(ex.steps, text)
                steps_ok = len(labels) == len(ex.steps) and all(labels)
                right += ok
                lucky += ok and not steps_ok
                any_step |= steps_ok
                any_final |= ok
            pass_step += any_step
            pass_final += any_final
    n = len(examples)
    return {"greedy": greedy / n, f"pass@{k}_steps": pass_step / n,
            f"pass@{k}_final": pass_final / n, "sampled": right / (n * k),
            "lucky_rate": lucky / max(1, right), "n": n, "k": k}


def demonstrations(recipe: WarmStartRecipe) -> list[Example]:
    """The recipe's supervised data: ``steps x batch_size`` training problems with their
    reference traces, a ``flip`` share of subtraction steps computed as additions."""
    task = ArithTask(**recipe.task)
    train = task.sample("train", recipe.steps * recipe.batch_size, seed=recipe.seed)
    noise = random.Random(f"demonstrations/{recipe.seed}")
    return [task.demonstration(ex, noise, recipe.flip) for ex in train]


def _train(recipe: WarmStartRecipe, shape: ModelShape, folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    from race.nn.measure import qwen2_config

    logging.disable_progress_bar()
    start = time.perf_counter()
    torch.manual_seed(recipe.seed)
    tokenizer = build_char_tokenizer(shape.vocab_size)
    config = qwen2_config(shape, eos_token_id=tokenizer.eos_token_id,
                          pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                          max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    task = ArithTask(**recipe.task)
    train = demonstrations(recipe)
    curve_set = task.sample("val", recipe.curve_examples, seed=recipe.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, recipe.lr_factor)
    pretrain = {"model": 0.0, "executed": 0.0}
    val_curve = []
    for step in range(recipe.steps):
        model.train()
        chunk = train[step * recipe.batch_size:(step + 1) * recipe.batch_size]
        ids, mask, labels, lengths = _sft_batch(tokenizer, chunk)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        for convention in flops.CONVENTIONS:
            pretrain[convention] += flops.train_flops(shape, lengths, convention=convention)
        if (step + 1) % recipe.curve_every == 0 and step + 1 < recipe.steps:
            val_curve.append((step + 1, greedy_accuracy(model, tokenizer, task, curve_set)))
    train_s = time.perf_counter() - start
    accuracy = {"val": greedy_accuracy(model, tokenizer, task,
                                       task.sample("val", recipe.val_examples, seed=10_000))}
    accuracy |= {split: greedy_accuracy(model, tokenizer, task,
                                        task.sample(split, recipe.eval_examples, seed=10_000))
                 for split in ("test", "ood")}
    val_curve.append((recipe.steps, accuracy["val"]))
    model.save_pretrained(folder)
    save_char_tokenizer(folder, shape.vocab_size)
    model.generation_config.save_pretrained(folder)
    return {"model": shape.name, "recipe": asdict(recipe), "sft_steps": recipe.steps,
            "val_curve": val_curve, "accuracy": accuracy, "train_s": train_s,
            "build_s": time.perf_counter() - start, "final_loss": float(loss.detach()),
            "params": shape.total_params,
            "pretrain_flops": pretrain,  # warm start: pre-training, never charged
            "torch_threads": 1}


def build_tiny_policy(name: str, *, seed: int = 0, rebuild: bool = False,
                      recipe: WarmStartRecipe | None = None, train: bool = True) -> Path | None:
    """Folder of the warm-started policy ``name`` (tiny-s/m/l), building it if not cached.

    The folder holds the model (``from_pretrained``-loadable), its tokenizer and
    ``build_info.json``. Writes are atomic: a half-built policy is never left behind.
    """
    shape = load_model_shape(name)
    if not in_family(shape.tokenizer):
        raise UsageError(f"model={name}: only the tiny family (tokenizer {FAMILY}) is built "
                         f"by RACE; {name} loads from {shape.hf_id or 'its hf_id'}")
    recipe = recipe or WarmStartRecipe(model=name, seed=seed)
    return cached_build("policies", name, policy_payload(name, recipe),
                        lambda folder: _train(recipe, shape, folder), rebuild=rebuild,
                        train=train)


def policy_payload(name: str, recipe: WarmStartRecipe) -> dict:
    """What keys the cache folder of warm-started policy ``name`` (:func:`cache_folder`):
    its recipe and its shape."""
    return {"recipe": asdict(recipe), "shape": load_model_shape(name).key()}


def build_info(folder: Path) -> dict:
    """The ``build_info.json`` of a built policy."""
    return json.loads((Path(folder) / "build_info.json").read_text())
