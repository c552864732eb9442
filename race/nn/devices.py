"""Where a pilot runs: its device and dtype, phase clocks that wait for CUDA, peak memory
per phase, the peak FLOP/s that MFU is measured against, and a guard that catches
tensors our code creates off the model's device.

Torch is imported inside the functions, so configs are checked without it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from race.core.specs import DEVICES, DTYPES
from race.errors import UsageError


def check_choice(key: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a one-line UsageError naming the key."""
    if value not in choices:
        raise UsageError(f"{key}={value!r}: use one of {'|'.join(choices)}")
    return value


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is visible, else ``cpu``; ``cuda`` with
    none visible is a UsageError (the CLI exits 2)."""
    import torch

    check_choice("pilot.device", name, DEVICES)
    visible = torch.cuda.is_available()
    if name == "cuda" and not visible:
        raise UsageError("pilot.device=cuda: no CUDA device is visible on this machine; "
                         "use pilot.device=auto or cpu, or run on a GPU node")
    return "cuda" if name == "cuda" or (name == "auto" and visible) else "cpu"


@functools.cache
def visible_gpus() -> int:
    """CUDA devices torch sees on this machine (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_dtype(name: str, device: str) -> str:
    """``auto`` -> bfloat16 on CUDA, float32 on CPU (the dtype of the frozen base weights;
    LoRA adapters and AdamW stay float32)."""
    check_choice("pilot.dtype", name, DTYPES)
    if name == "auto":
        return "bfloat16" if device.startswith("cuda") else "float32"
    return name


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def synchronize(device: str) -> None:
    """Wait for queued CUDA work, so that a wall clock read after it is honest."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


@dataclass
class PhaseMeter:
    """Wall seconds and peak device memory of each phase a pilot enters.

    ``with meter.phase("rollout"): ...`` adds the block's seconds (CUDA synchronised at
    both ends) and raises the phase's peak memory (GiB allocated by torch on CUDA; None on
    CPU, where torch keeps no such counter).
    """

    device: str = "cpu"
    peak_gib: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str, wall_s: dict[str, float]) -> Iterator[None]:
        cuda = self.device.startswith("cuda")
        if cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            wall_s[name] = wall_s.get(name, 0.0) + time.perf_counter() - start
            if cuda:
                peak = torch.cuda.max_memory_allocated() / 2**30
                self.peak_gib[name] = max(self.peak_gib.get(name, 0.0), peak)


@functools.lru_cache(maxsize=8)
def measure_peak_flops(device: str, dtype: str, *, size: int = 4096, repeats: int = 10) -> float:
    """Achieved FLOP/s of a square matmul in ``dtype`` on ``device`` (the best of
    ``repeats``): what MFU is measured against when ``accounting.peak_flops`` is unset.

    On CPU the matmul is a 512 one in float32 whatever ``dtype`` (CPUs without bf16
    units emulate it, far below what the pilot's fp32 work reaches). The operands are
    constants, so torch's RNG (and with it a pilot's samples) is untouched; the answer is
    cached per process.
    """
    import torch

    if not device.startswith("cuda"):
        size, repeats, dtype = min(size, 512), min(repeats, 5), "float32"
    a = torch.full((size, size), 0.5, device=device, dtype=torch_dtype(dtype))
    best = float("inf")
    for _ in range(repeats + 1):  # the first call warms up kernels and caches
        synchronize(device)
        start = time.perf_counter()
        a @ a
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def throughput(flops_model: dict[str, float], flops_executed: dict[str, float],
               wall_s: dict[str, float], peak_flops: float,
               peak_gib: dict[str, float]) -> dict[str, dict[str, float | None]]:
    """Per phase: achieved model FLOP/s, MFU (model FLOPs / s / peak) and HFU (executed
    FLOPs / s / peak), and peak GiB (None where not measured)."""
    out = {}
    for phase in ("rollout", "learning", "feedback", "eval"):
        seconds = wall_s.get(phase, 0.0)
        rate = flops_model.get(phase, 0.0) / seconds if seconds > 0 else 0.0
        hardware = flops_executed.get(phase, 0.0) / seconds if seconds > 0 else 0.0
        out[phase] = {"flops_per_s": rate,
                      "mfu": rate / peak_flops if peak_flops > 0 else None,
                      "hfu": hardware / peak_flops if peak_flops > 0 else None,
                      "peak_gib": peak_gib.get(phase)}
    return out


# ---------------------------------------------------------------------- device guard

# factories that take a ``device=`` (a tensor from one of them without it lands on the
# default device, the host's CPU on a GPU machine)
_FACTORIES = ("tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "rand",
              "randn", "randint", "linspace", "eye", "from_numpy")
_PACKAGE = str(Path(__file__).resolve().parent.parent)  # race/


class OffDeviceTensor(RuntimeError):
    """A tensor our code created on the host was combined with the model's tensors."""


class HostTensorGuard:
    """Catch tensors RACE's own code creates without a device and then mixes with tensors
    that live on the model's device -- the bug that only shows on a GPU, caught on CPU.

    A TorchFunctionMode tags every tensor that a factory (``torch.zeros``, ``tensor``, ...)
    called from a file under ``race/`` creates without ``device=``; ``.to(device)``,
    ``.cuda()`` and ``.to(other_tensor)`` clear the tag, ops on tagged tensors only keep
    it. Any other op mixing a tagged tensor with an untagged one of more than one element
    is an offence: recorded in ``offences`` (op and the file:line that created the tensor),
    and raised at once with ``strict=True``. Code outside ``race/`` (transformers, peft) is
    trusted to place its own tensors.
    """

    def __init__(self, strict: bool = False):
        self.strict = strict
        self.offences: list[str] = []
        self._tags: dict[int, str] = {}  # id(tensor) -> where it was created

    def __enter__(self) -> HostTensorGuard:
        from torch.overrides import TorchFunctionMode

        guard = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                guard._observe(func, args, kwargs, out)
                return out

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)

    def _observe(self, func, args, kwargs, out) -> None:
        import torch

        name = getattr(func, "__name__", str(func))
        if name in _FACTORIES and "device" not in kwargs and isinstance(out, torch.Tensor):
            caller = _caller()
            if caller is not None:
                self._tag(out, caller)
            return
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        tagged = [self._tags[id(t)] for t in tensors if id(t) in self._tags]
        if not tagged or not isinstance(out, torch.Tensor):
            return
        if name in ("to", "cuda", "cpu") and (name != "to" or _moves(args[1:], kwargs)):
            self._tags.pop(id(out), None)  # placed where the code asked (may be itself)
            return
        mixed = [t for t in tensors if id(t) not in self._tags and t.numel() > 1]
        if mixed:
            offence = (f"{name} mixed a tensor created without device= at {tagged[0]} with "
                       f"a {tuple(mixed[0].shape)} tensor on {mixed[0].device}")
            self.offences.append(offence)
            if self.strict:
                raise OffDeviceTensor(offence)
            return
        self._tag(out, tagged[0])

    def _tag(self, tensor, where: str) -> None:
        self._tags[id(tensor)] = where
        weakref.finalize(tensor, self._tags.pop, id(tensor), None)


def _caller() -> str | None:
    """``file:line`` of the code that called into torch, when that file is under
    ``race/`` (None for torch's, transformers' or peft's own calls)."""
    import torch

    skip = (str(Path(torch.__file__).parent), __file__)
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.startswith(_PACKAGE):
        return None
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


def _moves(args, kwargs) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names a device (or a tensor to follow)."""
    import torch

    if "device" in kwargs:
        return True
    return any(isinstance(a, (torch.device, torch.Tensor)) or
               (isinstance(a, str) and not a.startswith("torch.")) for a in args)
