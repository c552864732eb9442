"""The checks of this machine a run needs before anything is launched: the local files
a pilot will read, a CUDA device for ``pilot.device=cuda``, the GPUs ``launcher.gpus``
names. Each raises one :class:`~race.errors.UsageError` naming the key and the fix.

torch is imported only by the device checks, and only when a GPU is named.
"""

from __future__ import annotations

from pathlib import Path

from race import catalog
from race.config.schema import RaceConfig
from race.errors import UsageError
from race.nn.devices import resolve_device, visible_gpus
from race.tasks.task_base import is_local


def check_paths(cfg: RaceConfig) -> None:
    """Local files the pilot will read must exist (before anything is launched)."""
    for key, value in (("task.source", cfg.task.source), ("task.ood_source", cfg.task.ood_source),
                       ("model.hf_id", cfg.model.hf_id)):
        if value and is_local(value) and not Path(value).expanduser().exists():
            raise UsageError(f"{key}={value}: no such file or folder; check the path (a "
                             f"local {'model folder' if key == 'model.hf_id' else 'data file'}"
                             f"), or leave {key} empty for the default")
    folder = cfg.model.hf_id
    if folder and Path(folder).expanduser().is_dir() and not catalog.has_tokenizer(folder):
        raise UsageError(f"model={cfg.model.name}: no tokenizer in {folder} (none of "
                         f"{', '.join(catalog.TOKENIZER_FILES)}); save it beside the weights "
                         f"with tokenizer.save_pretrained('{folder}')")


def check_device(cfg: RaceConfig) -> None:
    """``pilot.device=cuda`` on a machine where no CUDA device is visible: a UsageError
    before anything runs (torch is imported only for that value)."""
    if cfg.pilot.device == "cuda":
        resolve_device("cuda")


def check_gpus(cfg: RaceConfig) -> None:
    """``launcher.gpus`` names GPUs this machine has, under a launcher that pins them here
    (one whose ``race/conf/launcher/<name>.yaml`` sets ``gpus``: local): a UsageError otherwise
    (the pilots would silently run on CPU). Torch is imported only when GPUs are named."""
    gpus = list(cfg.launcher.gpus)
    if not gpus or "gpus" not in _launcher_entry(cfg.launcher.name):
        return
    count = visible_gpus()
    missing = [g for g in gpus if g >= count]
    if missing:
        have = (f"{count} visible GPU(s), indices 0..{count - 1}" if count
                else "no visible CUDA GPU")
        fix = (f"use launcher.gpus=[{','.join(str(g) for g in range(min(count, len(gpus))))}]"
               if count else "run on a GPU machine, or leave launcher.gpus=[] to run on CPU")
        raise UsageError(f"launcher.gpus={gpus}: this machine has {have}, so GPU(s) "
                         f"{missing} do not exist; {fix}")


def _launcher_entry(name: str) -> dict:
    """The keys ``race/conf/launcher/<name>.yaml`` sets ({} for a name with no YAML, which
    :func:`validate` reports)."""
    return catalog.load_entry("launcher", name) if name in catalog.names("launcher") else {}
