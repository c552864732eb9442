"""Reward systems behind one registry, keyed by ``kind`` (rule | prm).

Every reward is called as ``reward(prompts, completions, **task_fields) -> rewards`` and
reports the FLOPs of what it scored through ``pop_flops()``.

May import: catalog, core, errors, nn, preflight, tasks, warmstart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from race.catalog import load_model_shape
from race.core.specs import ModelShape
from race.errors import UnknownName
from race.nn.devices import torch_dtype
from race.preflight import check_reward_folder, is_local, resolve_weights
from race.rewards.qwen_prm import QwenPRM
from race.rewards.reward_base import Reward, RewardFlops, check_rewards
from race.rewards.rule import RuleReward
from race.rewards.tiny_prm import TinyPRM
from race.warmstart.prm import family_prm

__all__ = ["REWARD_KINDS", "Reward", "RewardFlops", "build_reward", "check_rewards"]


def _rule(entry: Mapping[str, Any], task: Any, **_: Any) -> Reward:
    return RuleReward(entry["name"], task, entry.get("check", "answer"))


def _prm(entry: Mapping[str, Any], task: Any, *, device: str = "cpu",
         dtype: str = "float32", shape: ModelShape | None = None,
         family: tuple[Mapping[str, Any], Mapping[str, Any]] = ({}, {})) -> Reward:
    shape = shape or load_model_shape(entry["model"])
    aggregate = entry.get("aggregate", "min")
    if shape.head == "lm_verifier" and not shape.hf_id:  # the tiny PRM, built by RACE
        return TinyPRM(entry["name"], entry["model"], aggregate=aggregate, device=device,
                       dtype=dtype, shape=shape,
                       folder=family_prm(entry["model"], *family))
    folder, revision = resolve_weights(shape.hf_id, str(entry.get("revision") or ""),
                                       key="reward.model")  # a hub id: its cache snapshot
    prm = QwenPRM(folder, shape, aggregate=aggregate, name=entry["name"],
                  step_tag=shape.step_tag or "<extra_0>",
                  max_steps=int(entry.get("max_steps") or 0), device=device,
                  dtype=torch_dtype(dtype),
                  trust_remote_code=_trusts_code(entry, shape.hf_id))
    prm.revision = revision
    return prm


def _trusts_code(entry: Mapping[str, Any], path_or_id: str) -> bool:
    """Whether the reward model may run its checkpoint's own modelling code: only with
    ``reward.trust_remote_code=true`` (as in transformers, vLLM and TRL). Without it the
    weights load into RACE's copy of the architecture, and a local folder that ships code
    (``auto_map``) is refused (:func:`race.preflight.check_reward_folder`, also run by
    ``race plan`` and ``race sweep`` before any pilot)."""
    trusted = bool(entry.get("trust_remote_code", False))
    if is_local(path_or_id):
        check_reward_folder(path_or_id, trust_remote_code=trusted)
    return trusted


REWARD_KINDS: dict[str, Callable[..., Reward]] = {
    "rule": _rule, "prm": _prm}


def build_reward(entry: Mapping[str, Any], task: Any, *, device: str = "cpu",
                 dtype: str = "float32", shape: ModelShape | None = None,
                 family: tuple[Mapping[str, Any], Mapping[str, Any]] = ({}, {})) -> Reward:
    """The reward system of a ``race/conf/reward/*.yaml`` entry, for ``task``; a reward model
    runs on ``device`` in ``dtype`` (the pilot's), accounted with ``shape`` (default: its
    catalog entry's). ``family``: the cell's task entry and ``warmstart.*`` knobs, which a
    tiny PRM is trained for."""
    kind = entry.get("kind")
    if kind not in REWARD_KINDS:
        raise UnknownName(f"reward.kind={kind}: no reward of this kind is built; valid "
                          f"kinds: {', '.join(REWARD_KINDS)}", group="reward.kind",
                          name=str(kind))
    if kind == "rule":
        return REWARD_KINDS[kind](entry, task)
    return REWARD_KINDS[kind](entry, task, device=device, dtype=dtype, shape=shape,
                              family=family)
