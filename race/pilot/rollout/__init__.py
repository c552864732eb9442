"""Rollout backends: Hugging Face ``generate`` (``hf``) and vLLM (``vllm``)."""

from race.pilot.rollout.base import RolloutBackend, Rollouts

__all__ = ["RolloutBackend", "Rollouts"]
