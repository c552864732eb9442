"""Checks of the files a command will read, run before any compute, and again by the pilot.

``race plan`` and ``race sweep`` call :func:`check_plan` once the grid is composed: every
data file and model folder the pilots will open is opened here first, so bad input exits
2 with one line before any cell folder is written. The pilot builds its task with
:func:`open_task` and checks its policy folder with :func:`check_policy_folder`, the same
functions, so the plan and the pilot can never disagree about what is valid.

- data (``task.source``, ``task.ood_source``): every split the pilot reads (train and each
  evaluation target) parses and is non-empty; a binary file is named.
- a policy folder: ``config.json`` is a JSON object naming a causal-LM architecture,
  weights are present, and the tokenizer's ids fit the model's ``vocab_size``.
- a reward-model folder: ``config.json`` is a JSON object and weights are present; a
  folder that ships its own modelling code (``auto_map``) is refused unless
  ``reward.trust_remote_code=true`` (no folder code ever runs without it).

Reads JSON and data files only: no torch, no weights loaded.

May import: catalog, errors, tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from race.catalog import read_config_json
from race.errors import UsageError
from race.tasks import build_task

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# architectures a policy may have: Hugging Face's causal-LM heads
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
REMOTE_CODE_FLAG = "reward.trust_remote_code=true"


def is_local(path: str) -> bool:
    """Whether a source or model id names a local path (else a hub or dataset name)."""
    return bool(path) and (path.startswith(("/", "./", "../", "~")) or Path(path).exists())


def has_weights(folder: Path) -> bool:
    return any((folder / f).is_file() for f in WEIGHT_FILES) or any(folder.glob("*.safetensors"))


def tokenizer_size(folder: str | Path) -> int | None:
    """One more than the largest token id a folder's tokenizer files define (what
    ``len(tokenizer)`` gives), or None when the files do not say (read as JSON only)."""
    folder = Path(folder).expanduser()
    ids: list[int] = []
    if (folder / "tokenizer.json").is_file():
        data = read_config_json(folder, "tokenizer.json", key="model")
        vocab = (data.get("model") or {}).get("vocab")
        if isinstance(vocab, dict):
            ids += [i for i in vocab.values() if isinstance(i, int)]
        elif isinstance(vocab, list):  # Unigram: [token, score] pairs, ids by position
            ids.append(len(vocab) - 1)
        ids += [t["id"] for t in data.get("added_tokens") or [] if isinstance(t.get("id"), int)]
    elif (folder / "vocab.json").is_file():
        vocab = read_config_json(folder, "vocab.json", key="model")
        ids += [i for i in vocab.values() if isinstance(i, int)]
    if (folder / "tokenizer_config.json").is_file():
        added = read_config_json(folder, "tokenizer_config.json", key="model").get(
            "added_tokens_decoder") or {}
        ids += [int(i) for i in added if str(i).isdigit()]
    return max(ids) + 1 if ids else None


def check_policy_folder(folder: str | Path, *, key: str = "model") -> None:
    """A local policy folder loads as a causal LM whose tokenizer fits its vocabulary.

    Raises:
        UsageError: naming ``key``, the folder, what is wrong and the fix.
    """
    folder = Path(folder).expanduser()
    config = read_config_json(folder, key=key)
    architectures = config.get("architectures") or []
    if not any(str(a).endswith(CAUSAL_SUFFIXES) for a in architectures):
        raise UsageError(f"{key}={folder}: its config.json names "
                         f"{architectures or 'no architectures'}, not a causal language "
                         f"model (...ForCausalLM); a policy generates text: point {key} at a "
                         f"causal-LM checkpoint, e.g. one saved from Qwen2ForCausalLM")
    if not has_weights(folder):
        raise UsageError(f"{key}={folder}: no weights in that folder (none of "
                         f"{', '.join(WEIGHT_FILES)}); save them beside config.json with "
                         f"model.save_pretrained('{folder}')")
    vocab = config.get("vocab_size")
    tokens = tokenizer_size(folder)
    if isinstance(vocab, int) and tokens is not None and tokens > vocab:
        raise UsageError(f"{key}={folder}: its tokenizer has {tokens} tokens, more than the "
                         f"model's vocab_size={vocab} embedding rows (ids >= {vocab} cannot "
                         f"be embedded); save the tokenizer the model was trained with")


def check_reward_folder(folder: str | Path, *, trust_remote_code: bool,
                        key: str = "reward.model") -> None:
    """A local reward-model folder has a valid config.json and weights, and ships no
    modelling code unless ``trust_remote_code`` (``reward.trust_remote_code=true``)."""
    folder = Path(folder).expanduser()
    config = read_config_json(folder, key=key)
    if "auto_map" in config and not trust_remote_code:
        raise UsageError(f"{key}={folder}: its config.json has an auto_map, so loading it "
                         f"would run the Python files in that folder; RACE runs no folder "
                         f"code without consent: pass {REMOTE_CODE_FLAG} if you trust it")
    if not has_weights(folder):
        raise UsageError(f"{key}={folder}: no weights in that folder (none of "
                         f"{', '.join(WEIGHT_FILES)}); save them with save_pretrained")


def open_task(entry: Mapping[str, Any], targets: Iterable[str], *, local_only: bool = False):
    """The task of ``entry`` (a spec's task fields), with every split the pilot reads
    (``train`` and each of ``targets``) loaded and non-empty.

    ``local_only``: check only data in local files and return None when there are none
    (``race plan`` does not fetch a dataset by name; the pilot does). Raises UsageError
    naming the file or key and the fix.
    """
    if local_only and not is_local(str(entry.get("source", ""))):
        return None  # no local data: a generated task, or a dataset the pilot fetches
    task = build_task(dict(entry))
    if not hasattr(task, "rows"):  # generated tasks (the embedded arithmetic) have no files
        return task
    for split in ("train", *targets):
        try:
            rows = task.rows(split)
        except FileNotFoundError as error:
            raise UsageError(f"task.source={entry.get('source')}: {error}") from None
        if not rows:
            source = entry.get("ood_source" if split == "ood" else "source")
            key = "task.ood_source" if split == "ood" else "task.source"
            raise UsageError(f"{key}={source}: no {split} problems in it; give a GSM8K-format "
                             f"file with rows of a question and an answer ending in #### N")
    return task


def check_plan(specs: Iterable[Any], *, trust_remote_code: bool = False) -> None:
    """Open every distinct data file and model folder ``specs`` (RunSpecs) will read.

    Raises the first UsageError found (a folder or file shared by many cells is checked
    once).
    """
    seen: set = set()
    for spec in specs:
        task_key = (spec.task, tuple(spec.eval_targets))
        if task_key not in seen:
            seen.add(task_key)
            open_task(dict(spec.task), spec.eval_targets, local_only=True)
        if spec.policy_path and spec.policy_path not in seen and is_local(spec.policy_path):
            seen.add(spec.policy_path)
            check_policy_folder(spec.policy_path, key=policy_key(spec))
        folder = getattr(spec.reward_model, "hf_id", "") if spec.reward_model else ""
        if folder and folder not in seen and is_local(folder):
            seen.add(folder)
            check_reward_folder(folder, trust_remote_code=bool(
                dict(spec.reward).get("trust_remote_code", trust_remote_code)))


def policy_key(spec) -> str:
    """How the policy folder was given: ``model=<folder>`` or ``model.hf_id=<folder>``."""
    return "model" if spec.model == spec.policy_path else "model.hf_id"
