"""Datasets named by hub id (``openai/gsm8k``, ``HuggingFaceH4/MATH-500``), read from their
snapshot in the Hugging Face cache, the files ``race prefetch`` leaves there.

``datasets.load_dataset`` run offline reads its own cache (``$HF_DATASETS_CACHE``), not the
hub snapshot, so a check that finds the snapshot cannot promise that ``load_dataset`` will
load it. Tasks therefore read a cached snapshot's files themselves, with the readers they
use for a local folder: a config subfolder (GSM8K's ``main/``) and a split's files
(``test.jsonl``, ``main/test-00000-of-00001.parquet``, or every shard of
``data/train-0000i-of-0000n.parquet``). The plan's check
(:func:`race.preflight.open_task`) reads the same files, so a source it accepts loads in the
pilot. Only a name with no cached snapshot goes to ``datasets``, which downloads it, and
only where the hub is on and ``datasets`` is installed; elsewhere it is refused, naming
``race prefetch``.

No network and no huggingface_hub import: the cache is laid out as
``<cache>/datasets--<org>--<name>/refs/<branch>`` (a file holding a commit hash) beside
``snapshots/<hash>/`` (the repository's files at that commit).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from race.errors import UsageError, WeightsMissing
from race.tasks.task_base import is_local


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_offline() -> bool:
    """Whether the hub is switched off for this process (``HF_HUB_OFFLINE=1``, or
    ``TRANSFORMERS_OFFLINE=1`` as huggingface_hub also reads it)."""
    return _flag("HF_HUB_OFFLINE") or _flag("TRANSFORMERS_OFFLINE")


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as huggingface_hub finds it, read now (not at import):
    ``$HF_HUB_CACHE``, ``$HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, then
    ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache`` when unset)."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    cache = (os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
             or os.path.join(os.path.expandvars(home), "hub"))
    return Path(os.path.expandvars(cache)).expanduser()


def snapshot_folder(repo_id: str, revision: str = "", *, repo_type: str = "dataset"
                    ) -> Path | None:
    """The cached snapshot of ``repo_id`` at ``revision`` (a branch or tag named in
    ``refs/``, or a commit hash; "": main), or None when the cache does not hold it."""
    repo = hub_cache_dir() / f"{repo_type}s--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else revision
    folder = repo / "snapshots" / commit if commit else None
    return folder if folder is not None and folder.is_dir() else None


def fetch_blocker() -> str:
    """"" when ``datasets`` can download a dataset the cache lacks, else why it cannot
    (one short phrase)."""
    if hub_offline():
        return "HF_HUB_OFFLINE=1"
    if _flag("HF_DATASETS_OFFLINE"):
        return "HF_DATASETS_OFFLINE=1"
    try:
        installed = importlib.util.find_spec("datasets") is not None
    except ValueError:  # imported already, without a spec
        installed = True
    return "" if installed else "the `datasets` library that would download it is not installed"


def dataset_source(source: str, *, key: str = "source") -> str:
    """What a task reads for ``source``: a local path as given, a dataset name as its
    cached snapshot folder, or the name itself where ``datasets`` can download it.

    Raises:
        WeightsMissing: a dataset name the cache lacks and nothing here can download,
            naming ``key`` and ``race prefetch``.
    """
    if not source or is_local(source):
        return source
    folder = snapshot_folder(source)
    if folder is not None:
        if broken := sorted(p for p in folder.rglob("*") if p.is_symlink() and not p.exists()):
            raise UsageError(f"{key}={source}: the Hugging Face cache's snapshot {folder} is "
                             f"damaged: {broken[0].relative_to(folder)} points to a blob that "
                             f"is gone ({len(broken)} such file(s)); download it again with "
                             f"`race prefetch` (or huggingface-cli download {source} --repo-type "
                             f"dataset), or remove {folder.parent.parent} and fetch it afresh")
        return str(folder)
    why = fetch_blocker()
    if why:
        raise WeightsMissing(key, source, "", why)
    return source
