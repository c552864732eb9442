"""task=reasoning-gym (race.tasks.reasoning_gym): splits, the ood setting, the generator's
scorer as the rule reward, registry misses, a plan with a dataset axis, and a pilot of a
stand-in policy on CPU whose measured FLOPs equal the ledger. Offline: the generators are
procedural."""

import json
import sys

import pytest

pytest.importorskip("reasoning_gym", reason="task=reasoning-gym needs reasoning-gym: "
                                            "pip install 'race-rl[tasks]' (make test installs it)")

from race import cli  # noqa: E402
from race.config import compose_config, task_entry, to_run_spec  # noqa: E402
from race.core.specs import RunSpec  # noqa: E402
from race.errors import MissingExtra, UnknownName, UsageError  # noqa: E402
from race.rewards import build_reward  # noqa: E402
from race.run.grid import plan_grid  # noqa: E402
from race.tasks import build_task, task_targets, with_chat_template  # noqa: E402
from race.tasks.reasoning_gym import (  # noqa: E402
    SEED_STRIDE,
    config_problems,
    final_answer,
)

CHAIN = {"name": "reasoning-gym", "dataset": "chain_sum",
         "config": json.dumps({"size": 40, "max_digits": 1})}


def questions(task, split):
    return {ex.question for ex in task.rows(split)}


def test_splits_are_disjoint_and_seeded_apart():
    # two one-digit terms: 200 distinct questions, so 40 draws per split repeat some
    small = {"size": 40, "min_terms": 2, "max_terms": 2, "max_digits": 1}
    task = build_task(CHAIN | {"config": json.dumps(small)})
    seeds = [task.split_config(s)["seed"] for s in ("train", "val", "test", "ood")]
    assert seeds == [0, SEED_STRIDE, 2 * SEED_STRIDE, 3 * SEED_STRIDE]
    train, val, test, ood = (questions(task, s) for s in ("train", "val", "test", "ood"))
    assert all(len(task.rows(s)) == len(q) for s, q in (("train", train), ("val", val)))
    assert len(train) + len(val) + len(test) < 120 and val and test and ood  # repeats gone
    assert not (train & val or train & test or val & test or train & ood)
    again = build_task(CHAIN | {"config": json.dumps(small)})
    assert [ex.question for ex in again.sample("train", 8, seed=3)] == \
        [ex.question for ex in task.sample("train", 8, seed=3)]


def test_ood_is_the_curriculum_above_training_or_the_given_setting():
    task = build_task(CHAIN)
    train, ood = task.split_config("train"), task.split_config("ood")
    # chain_sum's curriculum: num_terms 2..12 and num_digits 1..10, one level per step
    assert (ood["min_terms"], ood["max_terms"]) == (7, 8)  # training: 2..6 (the default)
    assert (ood["min_digits"], ood["max_digits"]) == (2, 3)  # training: 1..1
    terms = [e["metadata"]["num_terms"] for _, e in task._entries("ood")]
    assert min(terms) > train.get("max_terms", 6)
    given = build_task(CHAIN | {"ood_config": json.dumps({"min_terms": 10, "max_terms": 10})})
    assert {e["metadata"]["num_terms"] for _, e in given._entries("ood")} == {10}
    assert task_targets(CHAIN) == ("val", "test", "ood")
    # gsm_symbolic has one difficulty and no curriculum: no ood target, said so if asked
    symbolic = {"name": "reasoning-gym", "dataset": "gsm_symbolic"}
    assert task_targets(symbolic) == ("val", "test")
    with pytest.raises(UsageError, match="task.dataset=gsm_symbolic: no harder setting"):
        build_task(symbolic).split_config("ood")


def test_the_generators_scorer_is_the_rule_reward_at_0_flops():
    task = build_task(CHAIN)
    ex = task.rows("test")[0]
    right = f"Adding up step by step.\nAnswer: {ex.answer}"
    wrong = f"Answer: {int(ex.answer) + 1}"
    assert final_answer(right) == ex.answer and final_answer("no answer line") is None
    for wrapped in (task, with_chat_template(task, _ChatTokenizer())):
        reward = build_reward({"name": "rule", "kind": "rule"}, wrapped)
        assert reward([ex.problem] * 3, [right, wrong, "42"], answer=[ex.answer] * 3) == \
            [1.0, 0.0, 0.0]
        assert reward.pop_flops().model == 0
        assert wrapped.verify(right, ex.answer, ex.problem)
        assert not wrapped.verify(wrong, ex.answer, ex.problem)


def test_a_scorer_that_raises_scores_0(monkeypatch):
    task = build_task(CHAIN)
    ex = task.rows("test")[0]
    generator, _ = task._find(ex.problem, ex.answer)

    def broken(answer, entry):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(generator, "score_answer", broken)
    completion = "Answer: " + "7" * 4301
    assert task.score(completion, ex.answer, ex.problem) == 0.0
    assert task.verify(completion, ex.answer, ex.problem) is False


class _ChatTokenizer:
    chat_template = "qwen-style"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


def test_prompts_state_the_answer_format_in_the_chat_template():
    task = with_chat_template(build_task(CHAIN), _ChatTokenizer())
    ex = task.sample("train", 1)[0]
    assert ex.prompt.startswith("<|user|>" + ex.question + "\n")
    assert "'Answer:'" in ex.prompt and ex.prompt.endswith("<|assistant|>")


def test_unknown_generator_and_bad_knobs_exit_2_with_one_line(capsys):
    assert cli.main(["plan", "task=reasoning-gym", "task.dataset=chain_summ"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "did you mean chain_sum?" in err
    assert cli.main(["plan", "task=reasoning-gym", "task.config.max_termz=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "task.config.max_termz=3: not a setting" in err
    assert "valid keys: min_terms, max_terms" in err
    with pytest.raises(UnknownName, match="did you mean chain_sum"):
        build_task(CHAIN | {"dataset": "chain_summ"})
    assert config_problems("chain_sum", {"min_terms": 5, "max_terms": 3}, {})[0].startswith(
        "task.config: chain_sum refuses")


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # an import that fails
    with pytest.raises(MissingExtra, match=r"pip install 'race-rl\[tasks\]'"):
        config_problems("chain_sum", {}, {})


def test_plan_sweeps_datasets_as_an_axis_and_flops_accounts_it(capsys):
    plan = plan_grid(["task=reasoning-gym", "task.dataset=chain_sum,basic_arithmetic",
                      "model=tiny-m", "reward=rule", "grid.group_size=4",
                      "grid.update_epochs=1", "grid.max_new_tokens=40"], runnable=False)
    assert dict(plan.axes)["task.dataset"] == ("chain_sum", "basic_arithmetic")
    datasets = [dict(c.spec.task)["dataset"] for c in plan.cells]
    assert datasets == ["chain_sum", "basic_arithmetic"]
    assert len({c.spec.cell_id for c in plan.cells}) == 2 and all(c.steps for c in plan.cells)
    # basic_arithmetic's defaults sit at its curriculum's top: no ood target there
    assert [c.spec.eval_targets for c in plan.cells] == [("val", "test", "ood"),
                                                         ("val", "test")]
    assert cli.main(["flops", "task=reasoning-gym", "task.dataset=gsm_symbolic",
                     "model=qwen2.5-0.5b"]) == 0
    assert "rollout" in capsys.readouterr().out


def test_knobs_survive_the_spec_round_trip():
    cfg = compose_config(["task=reasoning-gym", "task.config.size=12",
                          "task.ood_config.max_terms=9", "task.ood_config.min_terms=9"])
    assert cfg.task.config == {"size": 12}
    entry = task_entry(cfg.task)
    assert entry["config"] == '{"size": 12}'
    spec = to_run_spec(cfg, 1e10, runnable=False)
    back = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back.cell_id == spec.cell_id and hash(back.task) == hash(spec.task)
    assert build_task(dict(back.task)).split_config("ood")["max_terms"] == 9


def test_the_tiny_family_is_refused_for_reasoning_gym(capsys):
    assert cli.main(["pilot", "task=reasoning-gym", "budget=1e12"]) == 2
    assert "the embedded tiny policies read and write only" in capsys.readouterr().err


def test_a_standin_pilot_keeps_its_budget_and_measures_what_the_ledger_says(
        tmp_path, standin, capsys):
    from race.warmstart.policies import single_thread

    args = ["pilot", f"model={standin['policy']}", "task=reasoning-gym",
            "task.dataset=gsm_symbolic", "task.config.size=20", "reward=rule",
            "budget=6e9", "pilot.fraction=1.0", "grid.prompts_per_step=2",
            "grid.group_size=2", "grid.max_new_tokens=8", "pilot.eval_examples=2",
            "pilot.select_examples=2", "pilot.checkpoints=[1.0]", "accounting.measure=true",
            f"pilot.out_dir={tmp_path}"]
    with single_thread():
        assert cli.main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "status     ok" in out
    summary = json.loads(next(tmp_path.glob("cells/*/summary.json")).read_text())
    assert summary["steps"] >= 2
    assert 0 < summary["total_flops"] <= summary["budget_flops"] == 6e9
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in ("rollout", "learning", "eval"):
        assert measured[phase] > 0, phase
        assert abs(measured[phase] - executed[phase]) / measured[phase] <= 1e-3, phase
    # the generator's scorer: 0 FLOPs, its seconds recorded
    assert measured["feedback"] == executed["feedback"] == summary["flops"]["feedback"] == 0
    assert summary["wall_s"]["feedback"] > 0
    assert set(summary["final_eval"]) == {"val", "test"}
