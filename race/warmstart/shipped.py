"""The warm starts RACE ships: the tiny family's weights the documented results ran from.

A warm start is a random draw: the same recipe gives other weights with another seed, and
(floating point differs between CPUs) on another machine. So the weights every number in
the docs ran from ship with RACE, one archive per ``warmstart.seed``, as a hub checkpoint
would: the first use of a shipped recipe installs its folder into the model cache
(``$RACE_CACHE_DIR``) instead of training it, each archive and each weight file checked by
sha256. The recipe that built them stays in :mod:`race.warmstart.policies` and
:mod:`race.warmstart.prm`; any other recipe (``warmstart.seed=2``, another ``flip``, ...)
is built on the machine, and says that its results will differ from the docs.

- seed 0 (world 1): tiny-s, tiny-m, tiny-l and prm-tiny-s, built 2026-12-04; the v4 curve
  bank and the README's numbers ran from them.
- seed 1 (world 2): tiny-m, tiny-l and prm-tiny-s, built 2026-12-07 for the second
  world's curve bank.
- seed 2 (world 3): tiny-m, tiny-l and prm-tiny-s, built 2026-12-07 for the third
  world's curve bank (built before the freeze it is judged after; its scores unread).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from race.errors import UsageError
from race.store.umask import share_like_umask

WEIGHTS = Path(__file__).parent / "weights"


@dataclass(frozen=True, slots=True)
class Archive:
    """One shipped archive: its file under ``race/warmstart/weights``, its sha256, and
    per cache folder (``policies/tiny-m-<key>``) the sha256 of each weight file in it."""

    file: str
    sha256: str
    folders: dict[str, dict[str, str]]

    @property
    def path(self) -> Path:
        return WEIGHTS / self.file


ARCHIVES = (
    Archive("warmstart-seed0.tar.gz",
            "380daebc8e12cdc18e7aff0fe8062c37c8e3e04d8c1c6ee3ed5803ea8c61e0f5", {
                "policies/tiny-s-0064e1877d91": {"model.safetensors": "5ac8e25a31062e7ff67317c0"
                                                 "b7f188c250eee5c3cd8b6bac14505e7271fc5678"},
                "policies/tiny-m-afdd1e22f30f": {"model.safetensors": "8f9064eb6f18060f32757bab"
                                                 "0fc975bfee23aff4038d9e5fe85ae4190aaa7de5"},
                "policies/tiny-l-4f32e5a590fc": {"model.safetensors": "77b7fbecf92f4310a0b8d937"
                                                 "259a90f7e806643e2c0c3aa825077e171fab5aeb"},
                "prms/prm-tiny-s-e24f5a302c6b": {
                    "model.safetensors": "4a91f60da8c1aac893a478a3043eaa7ca471a7a2869cdd027fd7"
                                         "dcb84bd10fd3",
                    "verifier_head.safetensors": "3271de269502316649f72fc3e13cfd05bfd6175d39e9"
                                                 "2038ec9cb0dad75f89c6"},
            }),
    Archive("warmstart-seed1.tar.gz",
            "3bb5e59b123c44ff8dfa2f5f0ccad85f76fd969231015ef332c47f15b0ead141", {
                "policies/tiny-m-fadcb9939f75": {"model.safetensors": "9602bee3d5c66d5b98cbe092"
                                                 "a5b00a7c3f2c9d3899ba05616c500fe840802a79"},
                "policies/tiny-l-4e553bff8763": {"model.safetensors": "6fd198ae51e68e40163c0d68"
                                                 "5cee0360238239036c6f2ab7aeee614be8f85800"},
                "prms/prm-tiny-s-54d9e5bc9699": {
                    "model.safetensors": "80dfd0ccc869ce1aab43bec5483ec95ee44ebacd1a911e6663d8"
                                         "c23972cce284",
                    "verifier_head.safetensors": "6f9cf19a7d33ca0e6c948d1afdaf963ef78460a8d6da"
                                                 "ae239d517bdd1154cffb"},
            }),
    Archive("warmstart-seed2.tar.gz",
            "d72192da9925026d7a5f370287f59e1964bd117e2fa84eeb21e13a34b1f02705", {
                "policies/tiny-m-7571b419ad64": {"model.safetensors": "7c5d1b3e76e34df72d550e41"
                                                 "bd76008d5164486c46aea46973099868429dccbf"},
                "policies/tiny-l-198ae3791d44": {"model.safetensors": "cb5845dffd4832b6d42f6db9"
                                                 "d84f32a906749718a1077872990b8dd91c6324bf"},
                "prms/prm-tiny-s-57846787a6c4": {
                    "model.safetensors": "14412fda62689ba0e6c3ebacaaa41facb0025cb09b5fa679121927"
                                         "ce082decfa",
                    "verifier_head.safetensors": "299c4330184572cd3503e1f5fd9bd60dc5976f59b42f"
                                                 "4fdc82a75c7f047a3970"},
            }),
)


def archive_of(folder_name: str) -> Archive | None:
    """The archive that ships cache folder ``folder_name`` (``kind/name-key``), if any."""
    return next((a for a in ARCHIVES if folder_name in a.folders), None)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def differing(folder: Path, folder_name: str) -> list[str]:
    """The weight files of a cached ``folder`` whose sha256 is not the shipped one's."""
    files = archive_of(folder_name).folders[folder_name]
    return [f for f, digest in files.items()
            if not (folder / f).is_file() or _sha256(folder / f) != digest]


def install(folder_name: str, folder: Path) -> Path:
    """``folder`` (the model cache's ``kind/name-key``) holding the shipped weights:
    extracted from its archive when absent (archive and weights checked by sha256, renamed
    into place when complete); a cached one is checked, never used silently when it
    differs. A local build (``build_info.json``'s ``local_build``, made by an explicit
    rebuild) is used with a warning; any other differing folder is refused."""
    if (folder / "build_info.json").is_file():
        return _checked(folder_name, folder)
    archive = archive_of(folder_name)
    if not archive.path.is_file() or _sha256(archive.path) != archive.sha256:
        raise RuntimeError(f"{archive.path}: missing or not the archive RACE ships (sha256 "
                           f"{archive.sha256[:12]}...); reinstall RACE")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        with tarfile.open(archive.path) as tar:
            for member in tar.getmembers():
                head, _, rest = member.name.partition("/")
                kind, _, tail = rest.partition("/")
                name, _, file = tail.partition("/")
                if member.isfile() and f"{kind}/{name}" == folder_name and "/" not in file:
                    with tar.extractfile(member) as src:
                        (staging / file).write_bytes(src.read())
        if bad := differing(staging, folder_name):
            raise RuntimeError(f"{archive.path}: {folder_name}/{bad[0]} does not match its "
                               f"sha256; reinstall RACE")
        share_like_umask(staging)
        try:
            staging.rename(folder)
        except OSError:  # another process installed it first
            if not (folder / "build_info.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _checked(folder_name, folder)


def _checked(folder_name: str, folder: Path) -> Path:
    bad = differing(folder, folder_name)
    if not bad:
        return folder
    info = json.loads((folder / "build_info.json").read_text())
    if info.get("local_build"):
        print(f"warning: warm start {folder.name} is a local build, not the weights RACE "
              f"ships: results will differ from the docs (rm -r {folder} to use the shipped "
              f"ones)", file=sys.stderr)
        return folder
    raise UsageError(f"RACE_CACHE_DIR: the cached warm start {folder} is not the one RACE "
                     f"ships ({bad[0]}'s sha256 differs: built by an earlier RACE on this "
                     f"machine?), so its results would differ from the docs; remove it "
                     f"(rm -r {folder}) and RACE installs the shipped weights")
