"""Every shipped race/conf/ combination composes and converts to specs."""

import itertools
import json
import re

import pytest

from race import catalog
from race.config import compose_config, compose_many, to_run_spec, to_specs
from race.core import flops

PAIRS = [(m, r, t) for m, r, t in itertools.product(catalog.names("model"),
                                                      catalog.names("reward"),
                                                      catalog.names("task"))]


def _reward_tokenizer(reward: str) -> str | None:
    """The tokenizer family a reward model reads (None for a rule verifier)."""
    entry = catalog.load_entry("reward", reward)
    if entry.get("kind") == "rule":
        return None
    return catalog.load_model_shape(entry["model"]).tokenizer


@pytest.mark.parametrize("model, reward, task", PAIRS)
def test_every_combination_composes(model, reward, task):
    if task == "reasoning-gym":
        pytest.importorskip("reasoning_gym", reason="task=reasoning-gym needs reasoning-gym: "
                                                    "pip install 'race-rl[tasks]'")
    cfg = compose_config([f"model={model}", f"reward={reward}", f"task={task}"])
    policy = catalog.load_model_shape(model)
    check = catalog.load_entry("reward", reward).get("check", "answer")
    if check != "answer" and task != "arith":
        # step and format checks need the embedded task's steps: refused, naming the fix
        with pytest.raises(ValueError, match=re.escape(f"reward.check={check}: checks the "
                                                       f"embedded task's steps")):
            to_specs(cfg)
        return
    if policy.head != "lm":
        # a reward model passed as the policy is refused by to_specs, naming the model
        with pytest.raises(ValueError, match=re.escape(f"model={model}: has a {policy.head} "
                                                       f"head, so it is a reward model")):
            to_specs(cfg)
        return
    specs = to_specs(cfg)
    theirs = _reward_tokenizer(reward)
    if theirs is not None and theirs != policy.tokenizer:
        # a PRM of another tokenizer family converts, but its step cannot be accounted
        with pytest.raises(ValueError, match=re.escape(
                f"reward={reward}: its tokenizer {theirs!r}")) as info:
            flops.grpo_step_flops(specs.policy, specs.reward, lora=specs.lora,
                                  **specs.kwargs())
        assert f"model={model}'s {policy.tokenizer!r}" in str(info.value)
        return
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


def test_run_spec_refuses_what_only_accounting_accepts():
    # lora_rank=0 (full fine-tuning) converts to specs for race flops, but a pilot needs LoRA
    full = compose_config(["grid.lora_rank=0"])
    assert to_specs(full).lora is None
    with pytest.raises(ValueError, match=re.escape("grid.lora_rank=0: pilots train LoRA")):
        to_run_spec(full, 1e12, runnable=False)
    # gsm8k is plannable without data (runnable=False); a pilot needs task.source
    gsm8k = compose_config(["task=gsm8k"])
    assert to_run_spec(gsm8k, 1e12, runnable=False).task == (("name", "gsm8k"),)
    with pytest.raises(ValueError, match=re.escape("task.source=: GSM8K-format pilots read")):
        to_run_spec(gsm8k, 1e12)


@pytest.mark.parametrize("fixed, variants", [
    ([], [["model=tiny-s", "grid.group_size=4", "grid.update_epochs=2", "reward=prm-tiny-s",
           "pilot.seed=1"], ["model=tiny-m", "grid.group_size=8", "grid.update_epochs=1",
                             "reward=rule", "pilot.seed=0"]]),
    (["model.hf_id=/tmp/policy", "budget=1e12", "pilot.checkpoints=[0.5,1.0]",
      "grid.lr=1e-3"],
     [["model=tiny-s", "launcher=slurm", "launcher.partition=gpu"],
      ["model=tiny-l", "grid.lr=2e-3", "pilot.eval_targets=[val,test]"],
      ["task=gsm8k", "selection.rungs=[0.1,0.2]", "selection.policy=flat"], []]),
])
def test_composing_once_gives_what_hydra_composes_per_cell(fixed, variants):
    from race.config import compose_config, compose_many

    assert compose_many(fixed, variants) == [compose_config(fixed + v) for v in variants]


# pilot.eval_targets=null means every target of the task (resolved per task by
# to_run_spec), where a bare RunSpec evaluates test and ood; the schema's other nulls
# stand for the spec's defaults (race.core.knobs.spec_nulls)
PER_TASK = {"eval_targets", "max_new_tokens"}  # null in the schema: the task resolves it


def _disagreements(sections) -> dict:
    """Knobs whose default in the schema ``sections`` (instances) differs from RunSpec's."""
    from dataclasses import MISSING, fields, is_dataclass

    from race.core.knobs import spec_nulls
    from race.core.specs import RunSpec

    nulls = spec_nulls(RunSpec)
    spec = {f.name: f.default for f in fields(RunSpec) if f.default is not MISSING}
    differ = {}
    for section in sections:
        for f in fields(section):
            value = getattr(section, f.name)
            if f.name not in spec or f.name in PER_TASK or is_dataclass(value):
                continue
            value = nulls.get(f.name) if value is None else value
            if (tuple(value) if isinstance(value, list) else value) != spec[f.name]:
                differ[f"{type(section).__name__}.{f.name}"] = (value, spec[f.name])
    return differ


def test_schema_and_spec_defaults_agree():
    """Every knob the schema and RunSpec (and LearnerConfig) both have defaults to the same
    value: a default written twice would drift."""
    from dataclasses import fields

    from race.config.schema import AccountingConfig, GridConfig, PilotConfig, RaceConfig
    from race.core.specs import RunSpec
    from race.pilot.learner import LearnerConfig

    sections = (GridConfig(), PilotConfig(), AccountingConfig(), RaceConfig())
    compared = {f.name for s in sections for f in fields(s)} & {f.name for f in fields(RunSpec)}
    assert {"lr", "lora_targets", "group_size", "clip_eps", "checkpoints", "select_examples",
            "convention", "measure", "peak_flops", "aggregation"} <= compared
    assert _disagreements(sections) == {}
    spec = {f.name: f.default for f in fields(RunSpec)}
    learner = {f.name: (f.default, spec[f.name]) for f in fields(LearnerConfig)
               if f.default != spec[f.name]}
    assert not learner, learner


def test_the_defaults_check_catches_a_drift():
    from race.config.schema import GridConfig, PilotConfig

    assert _disagreements([GridConfig(lr=5e-5), PilotConfig(checkpoints=[0.5, 1.0])]) == {
        "GridConfig.lr": (5e-5, 3e-4), "PilotConfig.checkpoints": ([0.5, 1.0],
                                                                  (0.25, 0.5, 0.75, 1.0))}


@pytest.mark.parametrize("task, cap", [("arith", 40), ("gsm8k", 512), ("math", 1024)])
def test_the_generation_cap_is_the_tasks_unless_the_grid_sets_one(task, cap):
    qwen = "model=qwen2.5-0.5b"  # a context of 32768 tokens holds every task's cap
    assert compose_config([qwen, f"task={task}"]).grid.max_new_tokens == cap
    assert compose_config([qwen, f"task={task}", "grid.max_new_tokens=64"]
                          ).grid.max_new_tokens == 64
    many = compose_many([qwen], [[f"task={task}"], ["task=arith"]])
    assert [c.grid.max_new_tokens for c in many] == [cap, 40]


@pytest.mark.parametrize("task, prompt", [("gsm8k", 128), ("math", 160)])
def test_an_unset_cap_is_fitted_to_the_policys_context(task, prompt):
    # tiny-m's context is 512 tokens: the task's cap (512, 1024) after its prompt is not
    fitted = 512 - prompt
    assert compose_config([f"task={task}"]).grid.max_new_tokens == fitted
    assert [c.grid.max_new_tokens for c in compose_many([f"task={task}"], [[], ["model=tiny-s"]])
            ] == [fitted, fitted]
    assert compose_config([f"task={task}", "grid.max_new_tokens=null"]
                          ).grid.max_new_tokens == fitted
    # a cap the user sets is kept, even past the context (race plan refuses it)
    assert compose_config([f"task={task}", "grid.max_new_tokens=600"]
                          ).grid.max_new_tokens == 600
    # a context the prompt alone fills keeps the task's cap, for race plan to refuse
    full = compose_config([f"task={task}", f"model.context_tokens={prompt}"])
    assert full.grid.max_new_tokens == catalog.load_entry("task", task)["max_new_tokens"]


def test_the_embedded_default_budget_scales_with_the_tasks_sequences():
    from race.config import EMBEDDED_BUDGET, full_budget

    assert full_budget(compose_config([])) == EMBEDDED_BUDGET  # arith: 16 + 40 tokens
    # gsm8k on tiny-m: a prompt of 128 plus the cap fitted to 384 is 512 tokens, 512 / 56 x
    assert full_budget(compose_config(["task=gsm8k"])) == pytest.approx(
        EMBEDDED_BUDGET * 512 / 56)
    assert full_budget(compose_config(["task=gsm8k", "budget=1e12"])) == 1e12


def test_a_plan_with_a_fitted_cap_says_so_in_one_warning(capsys):
    from race import cli

    assert cli.main(["plan", "task=gsm8k"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "max_new_tokens" in line]
    assert lines == [
        "warning: grid.max_new_tokens unset and task=gsm8k's cap of 512 tokens after a prompt "
        "of about 128 does not fit the policy's context, so grid.max_new_tokens is fitted to "
        "384 for model=tiny-l,tiny-m: completions longer than 384 tokens are cut (a cut "
        "completion earns 0); set grid.max_new_tokens to choose the cap, or pick a model with "
        "a longer context"]
    # a cap the user sets is no fit: no warning (it is above the typical completion)
    assert cli.main(["plan", "task=gsm8k", "grid.max_new_tokens=384"]) == 0
    assert "max_new_tokens" not in capsys.readouterr().err
    # one past the context is refused, as before
    assert cli.main(["plan", "task=gsm8k", "grid.max_new_tokens=512"]) == 2
    assert "lower grid.max_new_tokens to 384 or less" in capsys.readouterr().err


def test_the_documented_reasoning_gym_axis_plans_on_the_default_model(capsys):
    pytest.importorskip("reasoning_gym", reason="task=reasoning-gym needs reasoning-gym: "
                                                "pip install 'race-rl[tasks]'")
    from race import cli

    assert cli.main(["plan", "task=reasoning-gym", "task.dataset=chain_sum,basic_arithmetic"]) == 0
    assert "grid.max_new_tokens is fitted to 416" in capsys.readouterr().err


def test_a_pilot_with_a_fitted_cap_says_so_before_it_runs(tmp_path, monkeypatch, capsys):
    """``race pilot`` warns as ``race plan`` does (before any model loads: the pilot itself
    is stubbed out here, the warning is what is tested)."""
    from race import cli

    ran = []

    def run_pilot(spec, *args, **kwargs):
        ran.append(spec.max_new_tokens)
        return {"status": "stubbed"}

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"})
                            + "\n" for i in range(40)))
    monkeypatch.setattr(cli, "run_pilot", run_pilot)
    monkeypatch.setattr(cli, "pilot_summary_text", str)
    for cap, warned in (([], True), (["grid.max_new_tokens=384"], False)):
        assert cli.main(["pilot", "task=gsm8k", f"task.source={data}", "model=tiny-m",
                         f"pilot.out_dir={tmp_path / 'out'}", *cap]) == 1  # not "ok"
        err = capsys.readouterr().err
        assert ("race pilot: warning: grid.max_new_tokens unset and task=gsm8k's cap of 512 "
                "tokens" in err) is warned, err
        if warned:
            assert "fitted to 384 for model=tiny-m" in err
    assert ran == [384, 384]  # the cap the warning names is the one the pilot runs with
