"""Each cell knob is declared once (a RunSpec field with its race.core.knobs.Knob): the
schema, the learner's view, validation and the id contract are derived from it, and no
YAML under race/conf/ restates a default."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from race.core import knobs
from race.core.specs import RunSpec

CONF = Path(__file__).resolve().parents[1] / "conf"


def _yaml_settings(path: Path) -> dict:
    """Config key -> value of every setting a YAML under race/conf/ writes (``axes`` aside: an
    axis lists values to sweep, not a default)."""
    data = yaml.safe_load(path.read_text()) or {}
    group = path.parent.name if path.parent != CONF else ""
    flat = {}

    def walk(prefix: str, node) -> None:
        for key, value in node.items():
            if key in ("defaults", "axes"):
                continue
            dotted = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and dotted.count(".") < 1 and not group:
                walk(dotted, value)
            else:
                flat[dotted] = value

    walk(group, data)
    return flat


def repeated_defaults(settings: dict) -> list[str]:
    """The settings (config key -> value) that write a cell knob's own default."""
    declared = {spec.key: default for spec, default in knobs.knobs(RunSpec).values()}
    out = []
    for key, value in settings.items():
        if key not in declared:
            continue
        default = declared[key]
        spec = knobs.knob_named(RunSpec, key)[1]
        same = (value is None and bool(spec.null)) or (
            (tuple(value) if isinstance(value, list) else value) == default)
        if same:
            out.append(f"{key}={value}")
    return out


@pytest.mark.parametrize("path", sorted(CONF.rglob("*.yaml")),
                         ids=lambda p: str(p.relative_to(CONF)))
def test_no_yaml_under_conf_repeats_a_cell_default(path):
    assert repeated_defaults(_yaml_settings(path)) == [], (
        f"{path.relative_to(CONF)} restates a default declared in RunSpec; delete the line "
        f"(or change it on purpose)")


def test_the_grid_yaml_holds_axes_and_deviations_only():
    from race.config.schema import GridConfig

    defaults = {f.name: f for f in fields(GridConfig)}
    for path in (CONF / "grid").glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for key, value in data.items():
            if key == "axes":
                continue
            assert key in defaults, f"{path.name}: unknown grid key {key}"
            assert value != defaults[key].default, f"{path.name}: {key}={value} is the default"


def test_the_repeat_check_catches_a_restated_default():
    assert repeated_defaults({"grid.lr": 3e-4, "grid.lora_targets": list(
        RunSpec.__dataclass_fields__["lora_targets"].default), "grid.minibatch_size": None,
        "pilot.seed": 1, "launcher.slots": 0}) == [
        "grid.lr=0.0003",
        "grid.lora_targets=['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', "
        "'down_proj']",
        "grid.minibatch_size=None"]


def test_every_knob_reaches_the_composed_config_with_its_declared_default():
    from race.config import compose_config
    from race.config.spec import cell_knobs

    cfg = compose_config(["grid.max_new_tokens=40"])  # the arith task's cap: the spec default
    values = knobs.config_values(RunSpec, cfg)
    for spec, default in knobs.knobs(RunSpec).values():
        if spec.null and values[spec.key] is None:
            continue
        value = values[spec.key]
        shown = tuple(value) if isinstance(value, list) else value
        assert shown == default, (spec.key, shown, default)
    assert set(cell_knobs(cfg)) == set(knobs.knobs(RunSpec)) - {"eval_targets"}


def test_every_knob_is_documented_and_grouped():
    for name, (spec, _) in knobs.knobs(RunSpec).items():
        assert spec.doc and spec.group in knobs.GROUPS, name
        assert spec.key.rsplit(".", 1)[-1] == name, "the config key ends in the field name"
        assert (spec.check is None) == (not spec.rule), name


def test_the_learner_reads_its_knobs_from_the_declaration():
    from race.pilot.learner import LearnerConfig

    spec = RunSpec(model="m", reward=(), task=(), budget_flops=1.0, lr=1e-3, kl_coef=0.1)
    view = LearnerConfig.from_spec(spec)
    assert (view.lr, view.kl_coef, view.lora_rank) == (1e-3, 0.1, 16)
    assert {f.name for f in fields(LearnerConfig)} == {
        "temperature", "update_epochs", "minibatch_size", "micro_batch_size", "tis_cap", "lr",
        "lora_rank", "lora_alpha", "lora_targets", "kl_coef", "clip_eps", "aggregation"}


def test_the_id_contract_is_derived_and_unchanged():
    from race.core.specs import ID_EXCLUDED, ID_OMITTED_DEFAULTS

    # the table as it stood when it was written by hand (cells keep their ids)
    assert ID_OMITTED_DEFAULTS == {
        "continues": "", "device": "auto", "dtype": "auto", "micro_batch_size": 0,
        "tis_cap": 0.0, "score_start": True, "report_from_flops": 0.0, "policy_revision": ""}
    assert set(ID_EXCLUDED) == {"peak_flops", "policy", "reward_model",
                                "gpu_memory_utilization", "tracker", "tracker_project"}
    # golden ids, computed before the knobs were declared this way
    spec = RunSpec(model="tiny-s", reward=(("name", "rule"),), task=(("name", "arith"),),
                   budget_flops=1e12)
    assert (spec.cell_id, spec.config_id, spec.lineage_id) == (
        "8819b5fc4147", "1e1aae6f67ed", "e19cb96c9907")


@pytest.mark.parametrize("override, message", [
    ("grid.group_size=1", "grid.group_size=1: GRPO needs >= 2 samples per prompt for a group "
                          "baseline; use e.g. grid.group_size=8"),
    ("grid.kl_coef=-1", "grid.kl_coef=-1.0: must be >= 0 (0 disables the KL term)"),
    ("grid.minibatch_size=5", "grid.minibatch_size=5: must divide the rollout batch "
                              "prompts_per_step x group_size = 64; use a divisor such as 32"),
])
def test_validation_and_the_flop_core_share_one_rule(override, message):
    """The config's validation and race.core.flops (called without a config) raise the
    same message from the same declaration."""
    from race.config import compose_config, to_specs
    from race.core import flops
    from race.errors import UsageError

    with pytest.raises(UsageError) as from_config:
        to_specs(compose_config([override]))
    assert message in str(from_config.value)
    from race import catalog
    from race.core.specs import ModelShape

    shape = ModelShape.from_dict(catalog.load_entry("model", "tiny-s"))
    reward = catalog.reward_shape(catalog.load_entry("reward", "rule"), steps=0)
    key, value = override.split("=")
    kwargs = dict(prompts_per_step=8, group_size=8, prompt_tokens=16, completion_tokens=20,
                  max_new_tokens=40) | {key.split(".")[1]: float(value) if "kl" in key
                                        else int(value)}
    with pytest.raises(UsageError) as from_core:
        flops.grpo_step_flops(shape, reward, **kwargs)
    assert str(from_core.value) == message
