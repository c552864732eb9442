"""Hub weights and datasets before launch: what a plan needs from the Hugging Face hub,
what of it the cache holds, and ``race prefetch``, which fetches the rest.

On most clusters the compute nodes have no internet: every policy, reward model and
dataset a sweep reads by hub name must be in the Hugging Face cache (``$HF_HUB_CACHE``,
``$HF_HOME``) before its pilots start. ``race prefetch <the sweep's overrides>`` downloads
them on the node that submits; ``race sweep`` refuses, before any cell folder exists, a
plan whose needs are neither in the cache nor reachable (:func:`check_needs`); ``race plan``
only says what a sweep would still need (:func:`plan_needs_text`). A pilot loads a hub
model from its cache snapshot (:func:`race.preflight.resolve_weights`) and records the
snapshot's commit hash with its results.

A dataset is read from its snapshot's files (:mod:`race.tasks.hub_data`), not through
``datasets``' own cache, so the snapshot ``race prefetch`` downloads is what the pilots
read. huggingface_hub is imported inside the functions that use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from race.errors import UsageError, WeightsMissing
from race.preflight import WEIGHT_PATTERNS, hub_snapshot
from race.tasks import data_sources
from race.tasks.hub_data import fetch_blocker, hub_cache_dir, hub_offline, snapshot_folder
from race.tasks.task_base import is_local


@dataclass(frozen=True, slots=True)
class HubNeed:
    """One hub repository a plan reads: ``kind`` model or dataset, the config ``key`` that
    names it, its id, its revision ("": main) and, for a dataset, its subset."""

    kind: str
    key: str
    repo_id: str
    revision: str = ""
    subset: str = ""

    @property
    def label(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return f"{self.repo_id}{at} ({self.kind}, {self.key})"


def _task_needs(task: dict) -> list[HubNeed]:
    return [HubNeed("dataset", key, source, subset=subset)
            for key, source, subset in data_sources(task) if not is_local(source)]


def hub_needs(specs: Iterable) -> list[HubNeed]:
    """Every hub repository ``specs`` (RunSpecs) read: hub policies, hub reward models and
    datasets named by hub id (local paths and the tiny family are not needs), each once."""
    needs: dict[tuple, HubNeed] = {}
    for spec in specs:
        found = _task_needs(dict(spec.task))
        if spec.policy_path and not is_local(spec.policy_path):
            key = "model" if spec.model == spec.policy_path else "model.hf_id"
            found.append(HubNeed("model", key, spec.policy_path, spec.policy_revision))
        reward_id = getattr(spec.reward_model, "hf_id", "") if spec.reward_model else ""
        if reward_id and not is_local(reward_id):
            found.append(HubNeed("model", "reward.model", reward_id,
                                 str(dict(spec.reward).get("revision") or "")))
        for need in found:
            needs.setdefault((need.kind, need.repo_id, need.revision, need.subset), need)
    return list(needs.values())


def cached(need: HubNeed) -> Path | None:
    """``need``'s snapshot folder in the Hugging Face cache, or None (no network); a
    dataset's as its task reads it (:func:`race.tasks.hub_data.snapshot_folder`)."""
    if need.kind == "dataset":
        return snapshot_folder(need.repo_id, need.revision)
    return hub_snapshot(need.repo_id, need.revision, repo_type=need.kind)


def in_cache(need: HubNeed) -> bool:
    """Whether the Hugging Face cache holds ``need`` (no network)."""
    return cached(need) is not None


def reachable(need: HubNeed, timeout_s: float = 10.0) -> str:
    """"" when the hub answers for ``need``, else why not (one short phrase)."""
    if hub_offline():
        return "HF_HUB_OFFLINE=1"
    from huggingface_hub import HfApi

    api = HfApi()
    info = api.model_info if need.kind == "model" else api.dataset_info
    try:
        info(need.repo_id, revision=need.revision or None, timeout=timeout_s)
    except Exception as error:  # network errors, 401/404: any of them stops the pilots
        return f"the hub did not answer: {type(error).__name__}"
    return ""


def check_needs(needs: list[HubNeed]) -> None:
    """Refuse (:class:`~race.errors.WeightsMissing`) the first need that is neither in the
    cache nor reachable (a dataset: nor downloadable by ``datasets`` here, as the pilot
    would); ``race sweep`` calls it before any cell folder exists."""
    for need in needs:
        if in_cache(need):
            continue
        why = (need.kind == "dataset" and fetch_blocker()) or reachable(need)
        if why:
            raise WeightsMissing(need.key, need.repo_id, need.revision, why)


def plan_needs_text(needs: list[HubNeed]) -> str:
    """One line for ``race plan``: what of the hub the cache lacks ("" when nothing)."""
    missing = [n for n in needs if not in_cache(n)]
    if not missing:
        return ""
    return (f"note: a sweep of this plan reads {len(missing)} hub repo(s) not in the Hugging "
            f"Face cache: {', '.join(n.label for n in missing)}; run `race prefetch` with "
            f"the same overrides on a machine that reaches the hub (the node that submits)")


def prefetch(needs: list[HubNeed], report=print) -> list[tuple[HubNeed, str]]:
    """Download every need into the Hugging Face cache (models: only what loading reads,
    :data:`race.preflight.WEIGHT_PATTERNS`; a dataset: its whole snapshot, whose files
    the pilots read). Returns (need, local folder) pairs.

    Raises:
        UsageError: a need the hub refuses or cannot serve, naming it; with the hub off
            (``HF_HUB_OFFLINE=1``), the first need the cache lacks.
    """
    from huggingface_hub import snapshot_download

    if hub_offline():  # nothing can be downloaded: the cache holds every need, or refuse
        missing = next((n for n in needs if not in_cache(n)), None)
        if missing is not None:
            raise UsageError(f"{missing.key}={missing.repo_id}: not in the Hugging Face "
                             f"cache, and HF_HUB_OFFLINE=1 stops race prefetch from "
                             f"downloading it; run race prefetch without HF_HUB_OFFLINE on a "
                             f"machine that reaches the hub (the node that submits)")
        return [(n, str(cached(n))) for n in needs]
    fetched = []
    for need in needs:
        report(f"race prefetch: {need.label} ...")
        try:
            folder = snapshot_download(need.repo_id, repo_type=need.kind,
                                       revision=need.revision or None,
                                       cache_dir=hub_cache_dir(),
                                       allow_patterns=list(WEIGHT_PATTERNS)
                                       if need.kind == "model" else None)
        except Exception as error:  # the hub's own errors: name the repo and stop
            first = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
            kind = type(error).__name__
            raise UsageError(f"{need.key}={need.repo_id}: could not fetch it ({kind}: "
                             f"{first}); check the name and revision, your network and "
                             f"HF_TOKEN for gated repositories") from None
        fetched.append((need, folder))
    return fetched
