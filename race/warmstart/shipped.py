"""The warm starts RACE ships: the tiny family's weights the documented results ran from.

A warm start is a random draw: the same recipe gives other weights with another seed, and
(floating point differs between CPUs) on another machine. So the weights every number in
the docs ran from ship with RACE, one archive per ``warmstart.seed``, as a hub checkpoint
would: the first use of a shipped recipe installs its folder into the model cache
(``$RACE_CACHE_DIR``) instead of training it, each archive and every file of each folder
(weights, ``config.json``, the tokenizer's files, ``build_info.json``) checked by sha256,
there and at each later use. The recipe that built them stays in :mod:`race.warmstart.policies` and
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

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from race.errors import UsageError
from race.store.umask import share_like_umask
from race.warmstart.cache import not_a_folder

WEIGHTS = Path(__file__).parent / "weights"


@dataclass(frozen=True, slots=True)
class Archive:
    """One shipped archive: its file under ``race/warmstart/weights``, its sha256, and
    per cache folder (``policies/tiny-m-<key>``) the sha256 of every file in it: weights,
    ``config.json``, the tokenizer's files, ``build_info.json``, all that a pilot reads
    (computed from the archive itself)."""

    file: str
    sha256: str
    folders: dict[str, dict[str, str]]

    @property
    def path(self) -> Path:
        return WEIGHTS / self.file


# what every tiny policy ships alike: its tokenizer and generation settings
_POLICY_FILES = {
    "generation_config.json": "93aa453666a68ec3cd07cedc293066fc5b34c46a4684007d9e9fa629569ab214",
    "merges.txt": "215a6aba00d27bcd42b8ad1dccc4b4d23f40decc150bdbf0d5ce6bb2410708df",
    "tokenizer.json": "2b7c6e61dfc3b5ac66f8ed6ca2be3737aa1f9120b2cad61f71ac0353fa5fd90f",
    "tokenizer_config.json": "d60e977c0c738c5c04c3f067ff427ea8f3114e677de3059fa024850560d36400",
    "vocab.json": "f183fc9da1b6612c7b35c114453a7d4378813c8dd0b06d3fb0b9d545064d08d4",
}
# what every tiny PRM ships alike (its tokenizer holds the step tag)
_PRM_FILES = {
    "generation_config.json": "93aa453666a68ec3cd07cedc293066fc5b34c46a4684007d9e9fa629569ab214",
    "tokenizer.json": "5a372084216a9901976504dbf06f42ded6a48574630ccd2516fd108be2618714",
    "tokenizer_config.json": "5ce24b37f8d77b87bcd2df582445071ed8cdcefb0306e2f01b766653387f27ef",
}
# config.json by architecture (prm-tiny-s's body is a tiny-m)
_CONFIGS = {
    "tiny-s": "166c80630e4ed93a4befed18571308ed6bc8c7ddaf474ba14f74e21a364b91d0",
    "tiny-m": "891571cd7e9b6667a629133ea43ae49960c87fbc710ac7582b76d7447134f00a",
    "tiny-l": "adfb13f1fc504ece74c44d362fb1ed65ece088ceef6a84471066ec6975993636",
}


def _policy(size: str, *, build_info: str, weights: str) -> dict[str, str]:
    return _POLICY_FILES | {"config.json": _CONFIGS[size], "build_info.json": build_info,
                            "model.safetensors": weights}


def _prm(*, build_info: str, weights: str, head: str) -> dict[str, str]:
    return _PRM_FILES | {"config.json": _CONFIGS["tiny-m"], "build_info.json": build_info,
                         "model.safetensors": weights, "verifier_head.safetensors": head}


ARCHIVES = (
    Archive("warmstart-seed0.tar.gz",
            "380daebc8e12cdc18e7aff0fe8062c37c8e3e04d8c1c6ee3ed5803ea8c61e0f5", {
                "policies/tiny-s-0064e1877d91": _policy(
                    "tiny-s",
                    build_info="cef43ecaa1bbda5fa29472af8afcc9103f6995dc05b1777eae74475a0560c6f5",
                    weights="5ac8e25a31062e7ff67317c0b7f188c250eee5c3cd8b6bac14505e7271fc5678"),
                "policies/tiny-m-afdd1e22f30f": _policy(
                    "tiny-m",
                    build_info="caaf91353ee613d03843bd37d840a68b5680d00435e8474ccf22a7b35abfea18",
                    weights="8f9064eb6f18060f32757bab0fc975bfee23aff4038d9e5fe85ae4190aaa7de5"),
                "policies/tiny-l-4f32e5a590fc": _policy(
                    "tiny-l",
                    build_info="79ef7697a7e75eb40ecabff7d9a75056e054a0a5ab35400cdb88dc23cfa014e5",
                    weights="77b7fbecf92f4310a0b8d937259a90f7e806643e2c0c3aa825077e171fab5aeb"),
                "prms/prm-tiny-s-e24f5a302c6b": _prm(
                    build_info="241a3773a5a5bd21aaf9d2af249ae17fc6362058b46c13379735fe49fb7126ca",
                    weights="4a91f60da8c1aac893a478a3043eaa7ca471a7a2869cdd027fd7dcb84bd10fd3",
                    head="3271de269502316649f72fc3e13cfd05bfd6175d39e92038ec9cb0dad75f89c6"),
            }),
    Archive("warmstart-seed1.tar.gz",
            "3bb5e59b123c44ff8dfa2f5f0ccad85f76fd969231015ef332c47f15b0ead141", {
                "policies/tiny-m-fadcb9939f75": _policy(
                    "tiny-m",
                    build_info="05410134d709afae8b064fa6d3bf3fdaa6f41b8f95a9d16fcb43935c9a6276e3",
                    weights="9602bee3d5c66d5b98cbe092a5b00a7c3f2c9d3899ba05616c500fe840802a79"),
                "policies/tiny-l-4e553bff8763": _policy(
                    "tiny-l",
                    build_info="10f1feec13148f8bec776422dd4e4706b3892a0b83efff9c1038672d4ce9cb93",
                    weights="6fd198ae51e68e40163c0d685cee0360238239036c6f2ab7aeee614be8f85800"),
                "prms/prm-tiny-s-54d9e5bc9699": _prm(
                    build_info="4dc2afb2c97a5fd3eea375b0325f34e755c3e7545ca3a2afa6123d6d47bf760e",
                    weights="80dfd0ccc869ce1aab43bec5483ec95ee44ebacd1a911e6663d8c23972cce284",
                    head="6f9cf19a7d33ca0e6c948d1afdaf963ef78460a8d6daae239d517bdd1154cffb"),
            }),
    Archive("warmstart-seed2.tar.gz",
            "d72192da9925026d7a5f370287f59e1964bd117e2fa84eeb21e13a34b1f02705", {
                "policies/tiny-m-7571b419ad64": _policy(
                    "tiny-m",
                    build_info="2c69cf3fb82ea296649c4fecb8f974ecab1995640037a1781a2a5a1b0cf067a1",
                    weights="7c5d1b3e76e34df72d550e41bd76008d5164486c46aea46973099868429dccbf"),
                "policies/tiny-l-198ae3791d44": _policy(
                    "tiny-l",
                    build_info="c368ae8b707f50508ac812ca6ee14bd800675e8d02a8ec09fd47acccba33bd4f",
                    weights="cb5845dffd4832b6d42f6db9d84f32a906749718a1077872990b8dd91c6324bf"),
                "prms/prm-tiny-s-57846787a6c4": _prm(
                    build_info="7dd47f3afa364e195ea0b5d6dfeff698f67e0ed1f2faafdba2c43c40833fba4f",
                    weights="14412fda62689ba0e6c3ebacaaa41facb0025cb09b5fa679121927ce082decfa",
                    head="299c4330184572cd3503e1f5fd9bd60dc5976f59b42f4fdc82a75c7f047a3970"),
            }),
)


def archive_of(folder_name: str) -> Archive | None:
    """The archive that ships cache folder ``folder_name`` (``kind/name-key``), if any."""
    return next((a for a in ARCHIVES if folder_name in a.folders), None)


def _sha256(path: Path) -> str | None:
    """A regular file's sha256; None where ``path`` is no readable regular file."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    except OSError:
        return None


def differing(folder: Path, folder_name: str) -> list[str]:
    """The files of a cached ``folder`` that are not the shipped ones: a shipped file that
    is missing or whose sha256 differs, and any file or folder the archive does not hold
    (a pilot's loader would read it too: a tokenizer's ``special_tokens_map.json``)."""
    files = archive_of(folder_name).folders[folder_name]
    bad = [f for f, digest in files.items() if _sha256(folder / f) != digest]
    try:
        extra = sorted(p.name for p in folder.iterdir() if p.name not in files)
    except OSError:  # not a folder (the caller says so), or unreadable
        extra = []
    return bad + extra


def _why(folder: Path, folder_name: str, file: str) -> str:
    """What is wrong with ``file`` of a cached shipped folder, in a few words."""
    if file not in archive_of(folder_name).folders[folder_name]:
        return f"{file} is not one of its files"
    if not (folder / file).is_file():
        return f"{file} is missing"
    return f"{file}'s sha256 differs"


def _refusal(folder: Path, why: str) -> UsageError:
    """The one line that refuses a damaged cached warm start, with its fix."""
    return UsageError(f"RACE_CACHE_DIR: the cached warm start {folder} is not the one RACE "
                      f"ships ({why}: built by an earlier RACE on this machine, or changed "
                      f"since?), so its results would differ from the docs; remove it "
                      f"(rm -r {folder}) and RACE installs the shipped weights")


def install(folder_name: str, folder: Path) -> Path:
    """``folder`` (the model cache's ``kind/name-key``) holding the shipped warm start:
    extracted from its archive when absent (archive and every file checked by sha256,
    renamed into place when complete); a cached one is checked, every file of it, never
    used silently when it differs. A local build (``build_info.json``'s ``local_build``,
    made by an explicit rebuild) is used with a warning; any other differing folder, or a
    file where the folder (or its ``policies/``) should be, is refused (UsageError, with
    the fix). A staging folder a killed install left beside it is removed."""
    parent = folder.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file (or a link to nothing) on the way
        blocking = not_a_folder(parent) or parent
        raise UsageError(f"RACE_CACHE_DIR: {blocking} is not a folder, so the warm start "
                         f"{folder.name} cannot be installed under it; remove it (rm -r "
                         f"{blocking}) and RACE installs the shipped weights") from None
    if folder.exists() or folder.is_symlink():
        return _checked(folder_name, folder)
    archive = archive_of(folder_name)
    if _sha256(archive.path) != archive.sha256:
        raise RuntimeError(f"{archive.path}: missing or not the archive RACE ships (sha256 "
                           f"{archive.sha256[:12]}...); reinstall RACE")
    with _install_lock(folder):
        if not (folder.exists() or folder.is_symlink()):  # another process may have, meanwhile
            try:
                _extract(archive, folder_name, folder)
            except OSError:  # unlocked, another process installed it first: theirs is checked
                if not (folder / "build_info.json").is_file():
                    raise
    return _checked(folder_name, folder)


@contextlib.contextmanager
def _install_lock(folder: Path):
    """One install beside ``folder`` at a time (``fcntl.flock`` on the folder above it,
    which the kernel drops when a process dies, and which leaves no lock file in the
    cache), so that a staging folder found here was left by a killed install: removed."""
    handle = os.open(folder.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some NFS): installs as before
            locked = False
        else:
            locked = True
        for stale in folder.parent.glob(f".{folder.name}-*") if locked else ():
            shutil.rmtree(stale, ignore_errors=True)  # _extract's mkdtemp, of a dead install
        yield
    finally:
        os.close(handle)  # and with it the lock


def _extract(archive: Archive, folder_name: str, folder: Path) -> None:
    """Extract ``folder_name``'s files into a staging folder, check them, rename it."""
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
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _checked(folder_name: str, folder: Path) -> Path:
    if not folder.is_dir():  # a file, or a link to nothing
        raise _refusal(folder, "it is not a folder")
    bad = differing(folder, folder_name)
    if not bad:
        return folder
    if _local_build(folder):
        print(f"warning: warm start {folder.name} is a local build, not the weights RACE "
              f"ships: results will differ from the docs (rm -r {folder} to use the shipped "
              f"ones)", file=sys.stderr)
        return folder
    raise _refusal(folder, _why(folder, folder_name, bad[0]))


def _local_build(folder: Path) -> bool:
    """Whether ``build_info.json`` marks the folder an explicit rebuild (``local_build``);
    False where it is missing or not a JSON object."""
    try:
        info = json.loads((folder / "build_info.json").read_text())
    except (OSError, ValueError):  # missing, unreadable, not JSON (UnicodeDecodeError too)
        return False
    return isinstance(info, dict) and bool(info.get("local_build"))
