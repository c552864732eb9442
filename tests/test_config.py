"""Every shipped conf/ combination composes and converts to specs."""

import itertools

import pytest

from race import catalog, flops
from race.config import compose_config, to_specs

PAIRS = [(m, r, t) for m, r, t in itertools.product(catalog.names("model"),
                                                      catalog.names("reward"),
                                                      catalog.names("task"))]


def _compatible(model: str, reward: str) -> bool:
    policy = catalog.load_model_shape(model)
    entry = catalog.load_entry("reward", reward)
    if entry.get("kind") == "rule":
        return policy.head == "lm"
    return policy.head == "lm" and (catalog.load_model_shape(entry["model"]).tokenizer
                                    == policy.tokenizer)


@pytest.mark.parametrize("model, reward, task", PAIRS)
def test_every_combination_composes(model, reward, task):
    cfg = compose_config([f"model={model}", f"reward={reward}", f"task={task}"])
    if not _compatible(model, reward):
        with pytest.raises(ValueError):
            specs = to_specs(cfg)
            flops.grpo_step_flops(specs.policy, specs.reward, lora=specs.lora,
                                  **specs.kwargs())
        return
    specs = to_specs(cfg)
    assert specs.policy.name == model
    assert specs.reward.name == reward
    step = flops.grpo_step_flops(specs.policy, specs.reward, lora=specs.lora, **specs.kwargs())
    assert step.rollout > 0 and step.learning > 0
    assert (step.feedback > 0) == (specs.reward.kind != "rule")


def test_validate_reports_every_problem_at_once():
    cfg = compose_config(["grid.group_size=1", "grid.max_new_tokens=0", "grid.kl_coef=-1"])
    with pytest.raises(ValueError) as info:
        to_specs(cfg)
    message = str(info.value)
    for key in ("grid.group_size=1", "grid.max_new_tokens=0", "grid.kl_coef=-1"):
        assert key in message


def test_unknown_group_option_suggests():
    with pytest.raises(KeyError, match="did you mean model=tiny-m"):
        compose_config(["model=tiny-mm"])
