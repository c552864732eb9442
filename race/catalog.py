"""Names shipped under ``race/conf/``: list them, load one, and answer a miss with "did you
mean".

YAML only (no Hydra, no torch), so ``race flops`` and the accounting core stay fast.

May import: core, errors.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from race.core.flops import reward_extra_tokens
from race.core.specs import ModelShape, RewardShape
from race.errors import UnknownName, UsageError

# the Hydra config groups ship inside the package (package data), so an installed wheel
# finds them wherever it is imported from; the checkout's top-level ``conf`` links here
PACKAGE_CONF = Path(__file__).resolve().parent / "conf"


def conf_dir() -> Path:
    """The config folder: ``$RACE_CONF_DIR`` or the package's own ``race/conf/``."""
    env = os.environ.get("RACE_CONF_DIR")
    return Path(env) if env else PACKAGE_CONF


def names(group: str) -> list[str]:
    """Sorted option names of a config group, e.g. ``names("model")``."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def closest(name: str, valid: list[str]) -> str | None:
    """The valid name closest to ``name`` (difflib's ratio >= 0.4), or None."""
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.4)
    return close[0] if close else None


def did_you_mean(group: str, name: str) -> str:
    """A one-line registry miss: the valid names and the closest match."""
    valid = names(group)
    match = closest(name, valid)
    hint = f"; did you mean {group}={match}?" if match else ""
    return f"{group}={name}: unknown {group}; valid names: {', '.join(valid)}{hint}"


def load_entry(group: str, name: str) -> dict[str, Any]:
    """The YAML mapping of ``race/conf/<group>/<name>.yaml``; KeyError with a suggestion if absent.

    A ``model`` that names a local folder (:func:`is_model_folder`) gets the entry its
    ``config.json`` describes (:func:`folder_entry`). Parsed once per file version (a plan
    of hundreds of cells reads each entry many times); every call returns its own copy.
    """
    if group == "model" and is_model_folder(name):
        return folder_entry(name)
    path = conf_dir() / group / f"{name}.yaml"
    if not path.is_file():
        raise UnknownName(did_you_mean(group, name), group=group, name=name)
    stat = path.stat()
    return copy.deepcopy(_parsed(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=256)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text()) or {}


def is_model_folder(name: str) -> bool:
    """Whether ``model=name`` names a local folder (a path: it holds a ``/`` or starts
    with ``.`` or ``~``) rather than a catalog entry."""
    return "/" in name or name.startswith((".", "~"))


def load_model_shape(name: str) -> ModelShape:
    """The :class:`ModelShape` of a shipped model (``load_model_shape("qwen2.5-7b")``) or
    of a local Hugging Face model folder (``load_model_shape("/models/my-qwen")``)."""
    return ModelShape.from_dict(load_entry("model", name))


# tokenizer classes whose vocabularies are one family (the catalog's ``tokenizer`` names)
TOKENIZER_FAMILIES = {"Qwen2Tokenizer": "qwen2.5", "Qwen2TokenizerFast": "qwen2.5"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def folder_entry(name: str) -> dict[str, Any]:
    """A ``race/conf/model`` entry for a local Hugging Face model folder: its shape from
    ``config.json``, ``hf_id`` the folder, and its tokenizer family when the folder's
    ``tokenizer_config.json`` names a known class (else "": reward models are then
    matched by vocabulary size)."""
    folder = Path(name).expanduser()
    if not (folder / "config.json").is_file():
        raise UsageError(f"model={name}: no config.json in that folder; point model= at a "
                         f"saved Hugging Face model folder or use a name from race/conf/model/ "
                         f"({', '.join(names('model'))})")
    config = read_config_json(folder, key="model")
    missing = [k for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "vocab_size")
               if not isinstance(config.get(k), int) or config.get(k) < 1]
    if missing:
        raise UsageError(f"model={name}: {folder / 'config.json'} lacks a positive "
                         f"{', '.join(missing)}; RACE reads the shape of a decoder "
                         f"transformer from it: save the folder with model.save_pretrained")
    shape = ModelShape.from_hf_config(config, name=name)
    family = ""
    if (folder / "tokenizer_config.json").is_file():
        family = TOKENIZER_FAMILIES.get(
            read_config_json(folder, "tokenizer_config.json", key="model").get(
                "tokenizer_class"), "")
    return dataclasses.asdict(shape) | {"hf_id": str(folder), "tokenizer": family,
                                        "context_tokens": config.get("max_position_embeddings")
                                        or 0}


def read_config_json(folder: str | Path, file: str = "config.json", *,
                     key: str = "model") -> dict[str, Any]:
    """A model folder's ``config.json`` (or another JSON file of it) as a dict; a file
    that is not a UTF-8 JSON object is a UsageError naming ``key``, the file and the fix."""
    path = Path(folder).expanduser() / file
    if not path.is_file():
        raise UsageError(f"{key}={folder}: no {file} in that folder; point {key} at a saved "
                         f"Hugging Face model folder (save_pretrained writes it)")
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"{key}={folder}: {path} is not valid JSON ({type(error).__name__}"
                         f"); save the folder again with save_pretrained, or fix the file"
                         ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{key}={folder}: {path} holds {json.dumps(value)[:40]}, not a JSON "
                         f"object; save the folder again with save_pretrained")
    return value


def has_tokenizer(folder: str | Path) -> bool:
    """Whether a model folder holds tokenizer files (a policy needs them)."""
    return any((Path(folder).expanduser() / f).is_file() for f in TOKENIZER_FILES)


def reward_shape(reward: Mapping[str, Any], steps: int | None = None,
                 model: ModelShape | None = None) -> RewardShape:
    """The reward as the accounting sees it, with ``steps`` reasoning steps per trace
    (default: the reward's ``max_steps``, the worst case); ``model``: its model's shape
    (default: read from the catalog by name). A PRM scores one step tag per step; the
    tokens it adds to each trace (its input format's overhead and the tags) are
    ``extra_tokens_per_trace``."""
    if model is None and reward.get("model"):
        model = load_model_shape(reward["model"])
    scores_steps = reward.get("kind") == "prm" and bool(reward.get("model"))
    steps_scored = (int(reward.get("max_steps") or 0) if steps is None else steps
                    ) if scores_steps else 0
    return RewardShape(reward["name"], reward["kind"], model,
                       extra_tokens_per_trace=reward_extra_tokens(reward, steps),
                       steps_per_trace=steps_scored)
