"""Input checks of the GRPO tensor maths (:mod:`race.core.grpo`): shapes, masks and the
loss aggregation, each a ValueError that names the argument and the fix."""

from __future__ import annotations

import difflib

import torch
from torch import Tensor

from race.core.specs import AGGREGATIONS  # ways to fold per-token values into one


def check_aggregation(aggregation: str) -> None:
    if aggregation not in AGGREGATIONS:
        close = difflib.get_close_matches(str(aggregation), AGGREGATIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"aggregation={aggregation!r}: unknown loss aggregation; "
                         f"use one of {list(AGGREGATIONS)}{hint}")


def check_same_shape(name: str, x: Tensor, ref_name: str, ref: Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(f"{name}.shape={tuple(x.shape)}: must equal "
                         f"{ref_name}.shape={tuple(ref.shape)}; pass per-token values for "
                         f"the same [B, T] completion positions")


def check_2d(name: str, x: Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name}.shape={tuple(x.shape)}: must be 2-D [B, T] "
                         f"(completions x completion positions)")


def check_mask(mask: Tensor, logprobs: Tensor) -> None:
    check_same_shape("mask", mask, "logprobs", logprobs)
    if mask.dtype != torch.bool and bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("mask: values must be 0 or 1 (1 on real completion tokens); "
                         "pass a bool or 0/1 tensor")
    if not bool(mask.any()):
        raise ValueError(f"mask: no completion tokens (mask.sum() == 0 over shape "
                         f"{tuple(mask.shape)}); the loss would be 0/0. Check that mask "
                         f"marks the completion tokens, aligned with logprobs")
