"""Checks of the files a command will read, run before any compute, and again by the pilot.

``race plan`` and ``race sweep`` call :func:`check_plan` once the grid is composed: every
data file and model folder the pilots will open is opened here first, so bad input exits
2 with one line before any cell folder is written. The pilot builds its task with
:func:`open_task` and checks its policy folder with :func:`check_policy_folder`, the same
functions, so the plan and the pilot can never disagree about what is valid.

- data (``task.source``, ``task.ood_source``, ``task.eval``): every split the pilot reads
  (train and each evaluation target) parses and is non-empty; a binary file is named; a
  dataset named by hub id is read from its cached snapshot's files, as the pilot reads it.
- a policy folder: ``config.json`` is a JSON object naming a causal-LM architecture,
  weights are present and whole (every shard an index names; each safetensors file as
  long as its header says), the embedding's rows equal ``vocab_size``, and the
  tokenizer's ids fit it.
- the generation cap: every problem's prompt plus ``grid.max_new_tokens`` fits the
  policy's context (a byte count first; the problems near the limit are tokenized): a
  policy folder's ``max_position_embeddings`` and tokenizer, or for the tiny family
  (built later, so no folder yet) ``context_tokens`` of ``race/conf/model/<name>.yaml`` and
  the character tokenizer the build saves.
- a reward-model folder: ``config.json`` is a JSON object and weights are present; a
  folder that ships its own modelling code (``auto_map``) is refused unless
  ``reward.trust_remote_code=true`` (no folder code ever runs without it).

Reads JSON, data files and safetensors headers (and a tokenizer, only for problems near
the context's end): no weights loaded.

May import: catalog, errors, tasks, warmstart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from race import catalog
from race.catalog import read_config_json
from race.errors import PromptTooLong, UsageError, WeightsMissing
from race.tasks import build_task, data_sources, with_chat_template
from race.tasks.hub_data import hub_cache_dir, snapshot_folder
from race.tasks.math import eval_entries
from race.tasks.task_base import is_local
from race.warmstart.tokenizer import build_char_tokenizer, in_family

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# architectures a policy may have: Hugging Face's causal-LM heads
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
REMOTE_CODE_FLAG = "reward.trust_remote_code=true"


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
    check_weight_files(folder, key=key, vocab_size=vocab)


def safetensors_header(path: Path) -> dict[str, Any]:
    """The tensor table of a ``.safetensors`` file (name -> dtype, shape, data_offsets),
    read from its header alone; ValueError when the file is cut short or its header is
    not what the format writes (8 bytes of header length, the JSON header, the data)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError(f"{size} bytes, shorter than the 8-byte header length")
        length = int.from_bytes(head, "little")
        if length > size - 8:
            raise ValueError(f"its header claims {length} bytes but the file has {size}")
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ValueError("its header is not valid JSON") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    end = max((v["data_offsets"][1] for v in tensors.values()), default=0)
    if 8 + length + end > size:
        raise ValueError(f"its tensors need {8 + length + end} bytes but the file has "
                         f"{size} (cut short: a copy or download that did not finish)")
    return tensors


def check_weight_files(folder: Path, *, key: str, vocab_size: int | None = None) -> None:
    """Every weight shard an index names is present, every ``.safetensors`` file is whole,
    and the embedding's rows equal ``config.json``'s ``vocab_size`` (read from the
    safetensors headers: no weights loaded).

    Raises:
        UsageError: naming ``key``, the file and the fix.
    """
    fix = "copy or download the folder again (huggingface-cli download, or save_pretrained)"
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            shards = sorted(set((read_config_json(folder, index, key=key).get("weight_map")
                                 or {}).values()))
            missing = [s for s in shards if not (folder / s).is_file()]
            if missing:
                raise UsageError(f"{key}={folder}: {index} names {len(shards)} weight "
                                 f"file(s) and {len(missing)} are missing ({missing[0]}"
                                 f"{', ...' if len(missing) > 1 else ''}); {fix}")
    for path in sorted(folder.glob("*.safetensors")):
        try:
            tensors = safetensors_header(path)
        except (ValueError, KeyError, TypeError, IndexError) as error:
            raise UsageError(f"{key}={folder}: {path.name} is damaged ({error}); {fix}"
                             ) from None
        rows = next((v["shape"][0] for k, v in tensors.items()
                     if k.endswith("embed_tokens.weight") and v.get("shape")), None)
        if isinstance(vocab_size, int) and rows is not None and rows != vocab_size:
            raise UsageError(f"{key}={folder}: config.json says vocab_size={vocab_size} but "
                             f"the weights' embedding has {rows} rows ({path.name}); the "
                             f"config belongs to another checkpoint: save the folder again "
                             f"with save_pretrained")


# what a policy or reward model needs from a hub repository (no other checkpoints' files)
WEIGHT_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.py")


def hub_snapshot(repo_id: str, revision: str = "", *, repo_type: str = "model"
                 ) -> Path | None:
    """The folder of ``repo_id`` at ``revision`` (a branch, tag or commit; "": main) in the
    Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME``), or None when it is not there.
    Never touches the network; the folder's name is the snapshot's commit hash."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, repo_type=repo_type, revision=revision or None,
                                      cache_dir=hub_cache_dir(), local_files_only=True,
                                      allow_patterns=WEIGHT_PATTERNS))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError, OSError):
        return None


def resolve_weights(path_or_id: str, revision: str = "", *, key: str = "model"
                    ) -> tuple[str, str]:
    """Where a model loads from and the revision that is: a local folder as it is (no
    revision), a hub id as its snapshot folder in the cache and that snapshot's commit
    hash. Every pilot loads a hub model through this, so vLLM and transformers read the
    same files and the results can record them.

    Raises:
        WeightsMissing: a hub id that is not in the cache (naming ``race prefetch``).
    """
    if not path_or_id or is_local(path_or_id):
        return path_or_id, ""
    folder = hub_snapshot(path_or_id, revision)
    if folder is None:
        raise WeightsMissing(key, path_or_id, revision)
    return str(folder), folder.name


def check_context(model: str, prompt_tokens: int, max_new_tokens: int, context: int | None,
                  *, nominal: bool = False) -> None:
    """A prompt of ``prompt_tokens`` plus the generation cap fits the policy's context
    window of ``context`` tokens (its ``max_position_embeddings``; None or 0: unknown, not
    checked). ``race plan`` checks the task's nominal prompt (``nominal``), the pilot each
    step's longest one.

    Raises:
        PromptTooLong: naming the model, the lengths and the cap that would fit.
    """
    if context and prompt_tokens + max_new_tokens > context:
        raise PromptTooLong(model, prompt_tokens, max_new_tokens, context, nominal=nominal)


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
    check_weight_files(folder, key=key)


def open_task(entry: Mapping[str, Any], targets: Iterable[str], *, local_only: bool = False):
    """The task of ``entry`` (a spec's task fields), with every split the pilot reads
    (``train`` and each of ``targets``) loaded and non-empty.

    ``local_only``: check only data on this machine (local files, and datasets named by
    hub id whose snapshot is in the Hugging Face cache: the files the pilot will read) and
    return None when the task reads other data (``race plan`` fetches no dataset by name:
    ``race prefetch`` does). Raises UsageError naming the file or key and the fix.
    """
    if local_only and not _data_here(entry):
        return None  # a generated task, or a dataset that is not cached yet
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


def _data_here(entry: Mapping[str, Any]) -> bool:
    """Whether a task with a ``source`` reads only data on this machine: local paths and
    cached hub snapshots (every target counts: training drops the targets' problems)."""
    return bool(entry.get("source")) and all(
        is_local(source) or snapshot_folder(source) is not None
        for _, source, _ in data_sources(entry))


def check_plan(specs: Iterable[Any], *, trust_remote_code: bool = False) -> None:
    """Open every distinct data file and model folder ``specs`` (RunSpecs) will read, and
    check that every problem fits the policy's context with the cell's generation cap.

    Raises the first UsageError found (a folder or file shared by many cells is checked
    once).
    """
    seen: set = set()
    tasks: dict = {}
    for spec in specs:
        task_key = (spec.task, tuple(spec.eval_targets))
        if task_key not in tasks:
            tasks[task_key] = open_task(dict(spec.task), spec.eval_targets, local_only=True)
        if spec.policy_path and spec.policy_path not in seen and is_local(spec.policy_path):
            seen.add(spec.policy_path)
            check_policy_folder(spec.policy_path, key=policy_key(spec))
        fit_key = (task_key, spec.model, spec.policy_path, spec.max_new_tokens)
        if tasks[task_key] is not None and fit_key not in seen:
            seen.add(fit_key)
            check_prompt_lengths(tasks[task_key], spec)
        folder = getattr(spec.reward_model, "hf_id", "") if spec.reward_model else ""
        if folder and folder not in seen and is_local(folder):
            seen.add(folder)
            check_reward_folder(folder, trust_remote_code=bool(
                dict(spec.reward).get("trust_remote_code", trust_remote_code)))


# bytes a chat template may add around a problem (its markup, a default system message):
# with the system prompt's and the instruction's own, a bound on a prompt's tokens (no
# tokenizer makes more tokens than the text has bytes)
TEMPLATE_BYTES = 256


def check_prompt_lengths(task: Any, spec: Any) -> None:
    """Every problem a pilot of ``spec`` may send (``train`` and each evaluation target of
    ``task``, its rows loaded), in the policy's chat template, fits the policy's context
    with the generation cap (``spec.max_new_tokens``), as the pilot checks each batch.

    A byte count bounds each prompt's tokens, so only the problems near the limit are
    tokenized, with the policy's own tokenizer: a plan of short problems loads none. A
    policy that is not on this machine (or gives no context) is not checked here.

    Raises:
        UsageError: naming the source, the longest problem, its tokens and the fix.
    """
    policy = policy_context(spec)
    if policy is None:
        return
    context, load_tokenizer = policy
    room = context - spec.max_new_tokens
    frame = TEMPLATE_BYTES + sum(len(str(getattr(task, k, "")).encode())
                                 for k in ("system_prompt", "answer_format"))
    near = [(split, ex) for split in ("train", *spec.eval_targets)
            for ex in task.rows(split) if len(ex.prompt.encode()) + frame > room]
    if not near:
        return
    try:
        tokenizer = load_tokenizer()  # heavy: only for problems near the limit
    except (OSError, ValueError):  # no tokenizer here: the pilot says so when it loads
        return
    chat = with_chat_template(task, tokenizer)
    over = sorted(((len(tokenizer(chat.format(ex.problem) if chat is not task else ex.prompt,
                                  add_special_tokens=False)["input_ids"]), split, ex)
                   for split, ex in near), key=lambda t: t[0])
    over = [t for t in over if t[0] > room]
    if over:
        raise UsageError(_too_long(task, over[-1], len(over), spec, context))


def policy_context(spec: Any) -> tuple[int, Any] | None:
    """The context window (tokens) of ``spec``'s policy and a function that loads its
    tokenizer, or None when neither is known on this machine.

    A policy folder (local, or a hub snapshot in the cache): its ``config.json``'s
    ``max_position_embeddings`` and its tokenizer. The tiny family (``policy_path`` empty:
    RACE builds it when the pilot starts): ``context_tokens`` of its
    ``race/conf/model/<name>.yaml`` and the character tokenizer of its vocabulary.
    """
    shape = spec.policy
    if not spec.policy_path:
        entry = catalog.load_entry("model", spec.model)
        if not in_family(getattr(shape, "tokenizer", "") or entry.get("tokenizer")):
            return None
        context = entry.get("context_tokens")
        vocab = shape.vocab_size if shape is not None else int(entry["vocab_size"])
        if not isinstance(context, int) or context < 1:
            return None
        return context, lambda: build_char_tokenizer(vocab)
    folder = (Path(spec.policy_path).expanduser() if is_local(spec.policy_path)
              else hub_snapshot(spec.policy_path, spec.policy_revision))
    if folder is None or not (folder / "config.json").is_file():
        return None
    context = read_config_json(folder, key=policy_key(spec)).get("max_position_embeddings")
    if not isinstance(context, int) or context < 1:
        return None

    def load():
        from transformers import AutoTokenizer  # heavy: only for problems near the limit

        return AutoTokenizer.from_pretrained(str(folder))

    return context, load


def _too_long(task: Any, longest: tuple, count: int, spec: Any, context: int) -> str:
    """The message for ``count`` problems whose prompts and the cap do not fit the
    context, naming the ``longest`` (its tokens, split and example)."""
    n, split, ex = longest
    key, source = source_key(task, split)
    start = " ".join(ex.problem.split())[:48]
    fix = (f"drop or shorten the problems over {context - spec.max_new_tokens} tokens in "
           f"it, or use a policy with a longer context")
    if n < context:
        fix += f", or lower grid.max_new_tokens to {context - n} or less"
    alone = " (the problem alone fills it)" if n >= context else ""
    return (f"{key}={source}: {count} problem(s) too long for model={spec.model}; the "
            f"longest, a {split} problem (\"{start}...\"), is {n} tokens as the pilot "
            f"sends it, which with grid.max_new_tokens={spec.max_new_tokens} exceeds its "
            f"context of {context} tokens{alone}; {fix}")


def source_key(task: Any, split: str) -> tuple[str, str]:
    """The config key of the source ``split`` of ``task`` is read from, and its value."""
    named = eval_entries(getattr(task, "eval", "") or "", has_source=bool(task.source))
    if split in named:
        return f"task.eval.{split}", named[split]["source"]
    key = {"ood": "ood_source", "val": "val_source", "test": "test_source"}.get(split, "")
    if key and getattr(task, key, ""):
        return f"task.{key}", getattr(task, key)
    return "task.source", task.source


def policy_key(spec) -> str:
    """How the policy folder was given: ``model=<folder>`` or ``model.hf_id=<folder>``."""
    return "model" if spec.model == spec.policy_path else "model.hf_id"
