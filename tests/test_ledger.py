"""The pilot's FLOP ledger: every FLOP that ran is charged exactly once, whatever stops it.

A diverged minibatch, a reward that crashes midway, a killed job recorded as lost and then
resumed, a measured run with a process reward model, and a Qwen2.5-Math-PRM-style stand-in
whose input format the budget path must bound. Expected FLOPs are computed here, from
:mod:`race.core.flops` on token counts the tests control or read back, or from differences of
ledgers; never just "> 0".
"""

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="pilots train with torch")

import yaml  # noqa: E402
from conftest import Shaped  # noqa: E402  (tests/conftest.py)

from race import catalog  # noqa: E402
from race.catalog import load_model_shape  # noqa: E402
from race.core import flops  # noqa: E402
from race.core.specs import LoraShape, ModelShape, RewardShape, RunSpec  # noqa: E402
from race.errors import RewardInputTooLong  # noqa: E402
from race.pilot.budget import shapes, trace_token_limit, worst_step_flops  # noqa: E402
from race.pilot.components import build_components  # noqa: E402
from race.pilot.loop import run_pilot  # noqa: E402
from race.pilot.state import PHASES  # noqa: E402
from race.rewards.reward_base import FlopLedger, RewardFlops  # noqa: E402
from race.run.launch.launcher_base import Task, record_lost  # noqa: E402
from race.store import io as results  # noqa: E402

RULE = (("kind", "rule"), ("name", "rule"))
TASK = (("name", "arith"),)
# everything in a summary that must not depend on where a pilot was interrupted
DETERMINISTIC = ("status", "cell_id", "total_flops", "flops", "flops_model", "flops_executed",
                 "steps", "final_eval", "initial_eval")
TAG = "<extra_0>"
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
STANDIN_MAX_STEPS = 4
STANDIN_ARCH = dict(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                    num_kv_heads=2, vocab_size=72)  # 64 characters + 3 chat specials, padded


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Torch on one thread here, the caller's count restored after: models this small gain
    nothing from a second thread, and on busy cores OpenMP's spinning threads slow them
    several times over (race.warmstart.policies builds them the same way)."""
    from race.warmstart.policies import single_thread

    with single_thread():
        yield


def small_spec(worst_steps: float, **kw) -> RunSpec:
    """A cell whose budget buys ``worst_steps`` worst-case steps (10-token prompts)."""
    knobs = dict(prompts_per_step=2, group_size=4, max_new_tokens=12, lr=1e-3, lora_rank=4,
                 lora_alpha=8, eval_examples=4, checkpoints=(1.0,),
                 eval_targets=("test",)) | kw
    spec = RunSpec("tiny-s", knobs.pop("reward", RULE), TASK, 0.0, **knobs)
    return dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * worst_steps)


def metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def charged(phases: dict[str, float]) -> float:
    """What a budget is charged: rollout + learning + feedback (eval is not charged)."""
    return phases["rollout"] + phases["learning"] + phases["feedback"]


# --------------------------------------------------------------------------- learning


def test_diverged_minibatch_charges_what_ran_and_nothing_more(tmp_path, policy, monkeypatch):
    import race.core.grpo

    # 8 completions in minibatches of 4, two epochs: old log-probs (2 chunks), then 4
    # minibatch updates a step; step 2's second minibatch diverges
    spec = small_spec(4, update_epochs=2, minibatch_size=4)
    diverge_step, per_step, old_chunks = 2, 4, 2
    parts = build_components(spec, policy)
    learner = parts.learner
    passes: list[list[list[int]]] = []  # per update: the sequence lengths of every pass
    real_update, real_padded, real_loss = learner.update, learner._padded, race.core.grpo.grpo_loss

    def update(batch, *, step):
        passes.append([])
        return real_update(batch, step=step)

    def padded(batch, rows):
        out = real_padded(batch, rows)
        passes[-1].append(out[-1])  # the real (unpadded) lengths of this pass
        return out

    losses = []

    def loss(*args, **kwargs):
        losses.append(1)
        value, stats = real_loss(*args, **kwargs)
        if len(losses) == diverge_step * per_step + 2:
            return value * float("nan"), stats
        return value, stats

    monkeypatch.setattr(learner, "update", update)
    monkeypatch.setattr(learner, "_padded", padded)
    monkeypatch.setattr(race.core.grpo, "grpo_loss", loss)
    summary = run_pilot(spec, tmp_path, components=parts)

    assert summary["status"] == "failed"
    assert "TrainingDiverged" in summary["error"] and f"step {diverge_step}" in summary["error"]
    assert summary["steps"] == diverge_step
    assert [len(p) for p in passes] == [old_chunks + per_step] * diverge_step + [old_chunks + 2]
    shape, lora = load_model_shape("tiny-s"), LoraShape(spec.lora_rank, spec.lora_targets)
    for convention in flops.CONVENTIONS:
        expected = 0.0
        for k, step in enumerate(passes):
            old, minibatches = step[:old_chunks], step[old_chunks:]
            expected += sum(flops.forward_flops(shape, lengths, convention=convention,
                                                lora=lora) for lengths in old)
            trained = minibatches[:-1] if k == diverge_step else minibatches
            expected += sum(flops.lora_train_flops(shape, lengths, lora,
                                                   convention=convention)
                            for lengths in trained)
            if k == diverge_step:  # the diverged minibatch ran its forward pass, and the
                last = minibatches[-1]  # chunked head's gradient taken during that forward
                positions = sum(last) if convention == "model" else len(last) * max(last)
                expected += (flops.forward_flops(shape, last, convention=convention, lora=lora)
                             + flops.head_flops_per_position(shape) * positions)
        assert summary[f"flops_{convention}"]["learning"] == expected, convention
    assert summary["flops"] == summary[f"flops_{spec.convention}"]

    rows = metrics(tmp_path)
    last, before = rows[-1], rows[-2]
    assert last["kind"] == "failed" and last["step"] == diverge_step + 1
    assert before["kind"] == "step" and before["step"] == diverge_step
    for convention in flops.CONVENTIONS:
        assert last["flops"][convention] == summary[f"flops_{convention}"]
    # the failed step's rollout was charged too, and the budget was never exceeded
    assert last["flops"]["model"]["rollout"] > before["flops"]["model"]["rollout"]
    assert summary["total_flops"] == last["charged_flops"] <= spec.budget_flops


# --------------------------------------------------------------------------- feedback


class CrashingReward(FlopLedger):
    """Scores each call in two batches of known cost; the ``crash_on``-th call dies after
    its first batch, as a reward server that goes away mid-request."""

    name, kind, value_range = "flaky-prm", "prm", (0.0, 1.0)

    def __init__(self, crash_on: int):
        self.crash_on, self.charges = crash_on, []  # charges: (call, RewardFlops)

    def _batch(self, call: int, half: int, rows: int) -> None:
        spent = RewardFlops(model=1000.0 * call + half, executed=1500.0 * call + half,
                            tokens=rows)
        self._charge(spent)
        self.charges.append((call, spent))

    def __call__(self, prompts, completions, *, token_limits=None, **fields):
        call = 1 + len({c for c, _ in self.charges})
        half = len(completions) // 2
        self._batch(call, 0, half)
        if call == self.crash_on:
            raise RuntimeError("reward server went away")
        self._batch(call, 1, len(completions) - half)
        return [len(set(c)) / 40 for c in completions]


def test_reward_crash_charges_what_was_scored(tmp_path, policy):
    spec = small_spec(5)
    parts = build_components(spec, policy)
    # call 1: the evaluation at checkpoint 0; calls 2 and 3: steps 1 and 2; call 4: step 3
    parts.reward = reward = CrashingReward(crash_on=4)
    evals, real_generate = [], parts.backend.generate

    def generate(prompts, **kw):
        out = real_generate(prompts, **kw)
        if kw.get("greedy"):
            evals.append(out)
        return out

    parts.backend.generate = generate
    summary = run_pilot(spec, tmp_path, components=parts)

    assert summary["status"] == "failed" and "reward server went away" in summary["error"]
    assert summary["steps"] == 2
    assert [c for c, _ in reward.charges] == [1, 1, 2, 2, 3, 3, 4]  # call 4: one batch
    eval_spent = sum((s for c, s in reward.charges if c == 1), RewardFlops())
    feedback_spent = sum((s for c, s in reward.charges if c > 1), RewardFlops())
    # steps 1 and 2 scored both batches, step 3 its first: 2000 + 2001 + 3000 + 3001 + 4000
    assert summary["flops_model"]["feedback"] == feedback_spent.model == 14002.0
    assert summary["flops_executed"]["feedback"] == feedback_spent.executed == 21002.0
    # the evaluation's scoring is eval, not feedback (beside its greedy generation)
    assert len(evals) == 1
    assert summary["flops_model"]["eval"] == evals[0].flops_model + eval_spent.model
    assert summary["flops_executed"]["eval"] == evals[0].flops_executed + eval_spent.executed
    assert summary["flops"]["feedback"] == feedback_spent.model  # model convention
    rows = metrics(tmp_path)
    assert rows[-1]["kind"] == "failed"
    assert rows[-1]["flops"]["model"]["feedback"] == feedback_spent.model
    # the crashed step's partial charge is what the file adds after step 2
    step2 = next(r for r in rows if r.get("step") == 2 and r["kind"] == "step")
    assert (rows[-1]["flops"]["model"]["feedback"] - step2["flops"]["model"]["feedback"]
            == reward.charges[-1][1].model)
    assert summary["total_flops"] <= spec.budget_flops


# --------------------------------------------------------------------------- lost jobs


class Killed(BaseException):
    """A kill: not an ``Exception``, so run_pilot records nothing (no summary)."""


def kill_after(step: int):
    def progress(row):
        if row["step"] == step:
            raise Killed(f"killed after step {step}")

    return progress


def run_shaped(spec, path, policy, **kw):
    parts = build_components(spec, policy)
    parts.reward = Shaped(parts.reward)
    return run_pilot(spec, path, components=parts, **kw)


def test_lost_job_is_recorded_then_resumed_without_charging_twice(tmp_path, policy):
    spec = small_spec(5)
    cell = tmp_path / "cell"
    with pytest.raises(Killed):
        run_shaped(spec, cell, policy, checkpoint_every=2, progress=kill_after(3))
    assert not (cell / "summary.json").exists()
    last = metrics(cell)[-1]
    assert last["kind"] == "step" and last["step"] == 3
    saved = results.read_json(cell / "state" / "step-000002" / "state.json")["ledger"]["flops"]
    conv = spec.convention

    record_lost(Task(spec, str(cell)), "killed")
    lost = results.read_json(cell / "summary.json")
    assert lost["status"] == "failed" and lost["error"] == "killed"
    assert lost["steps"] == 3
    assert lost["flops_model"] == last["flops"]["model"]
    assert lost["flops_executed"] == last["flops"]["executed"]
    assert lost["flops"] == last["flops"][conv]
    assert lost["total_flops"] == charged(last["flops"][conv]) == last["charged_flops"]
    assert lost["total_flops"] > charged(saved[conv])  # step 3 is not in the state

    resumed = run_shaped(spec, cell, policy, checkpoint_every=2)
    assert resumed["status"] == "ok", resumed["error"]
    assert resumed["resumed_from_step"] == 2
    redone = {p: max(0.0, last["flops"][conv][p] - saved[conv][p]) for p in PHASES}
    assert redone["rollout"] > 0 and redone["learning"] > 0
    assert resumed["redone"] == redone
    assert resumed["redone_flops"] == sum(redone.values())

    whole = run_shaped(spec, tmp_path / "whole", policy, checkpoint_every=0)
    assert whole["status"] == "ok", whole["error"]
    assert whole["redone_flops"] == 0
    assert {k: resumed[k] for k in DETERMINISTIC} == {k: whole[k] for k in DETERMINISTIC}
    assert (cell / "metrics.jsonl").read_bytes() == (tmp_path / "whole" / "metrics.jsonl"
                                                     ).read_bytes()
    assert resumed["total_flops"] <= spec.budget_flops


# --------------------------------------------------------------------------- measured


def test_measured_flops_match_the_ledger_with_a_prm(tmp_path, policy, tiny_prm):
    from race.rewards.tiny_prm import TinyPRM

    folder = tiny_prm
    reward = (("aggregate", "min"), ("kind", "prm"), ("model", "prm-tiny-s"),
              ("name", "prm-tiny-s"), ("overhead_tokens", 1))
    spec = dataclasses.replace(small_spec(2, measure=True), reward=reward)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 10) * 2)
    parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
    parts.reward = TinyPRM("prm-tiny-s", "prm-tiny-s", folder=folder)
    summary = run_pilot(spec, tmp_path / "cell", components=parts)

    assert summary["status"] == "ok", summary["error"]
    assert summary["total_flops"] <= spec.budget_flops
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in PHASES:
        assert measured[phase] > 0, phase
        assert abs(measured[phase] - executed[phase]) / measured[phase] <= 1e-3, phase


# --------------------------------------------------------------------------- Qwen-PRM stand-in


@pytest.fixture(scope="module")
def standin(tmp_path_factory, policy):
    """A Qwen2.5-Math-PRM-style model on the tiny policy's character tokenizer, and a
    race/conf/ folder listing it as model and reward ``prm-standin``."""
    from transformers import AutoTokenizer, Qwen2Config

    from race.nn.qwen_prm_modeling import Qwen2ForProcessRewardModel
    from race.rewards.qwen_prm import QwenPRM

    root = tmp_path_factory.mktemp("standin")
    folder = root / "prm-standin"
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.add_special_tokens({"additional_special_tokens": [TAG, "<|im_start|>",
                                                                "<|im_end|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    assert len(tokenizer) <= STANDIN_ARCH["vocab_size"]
    arch = STANDIN_ARCH
    config = Qwen2Config(hidden_size=arch["hidden_size"],
                         intermediate_size=arch["intermediate_size"],
                         num_hidden_layers=arch["num_layers"],
                         num_attention_heads=arch["num_heads"],
                         num_key_value_heads=arch["num_kv_heads"],
                         vocab_size=arch["vocab_size"], max_position_embeddings=1024,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen2ForProcessRewardModel(config).save_pretrained(folder)

    model = {"name": "prm-standin", "hf_id": str(folder), **arch, "tied_embeddings": False,
             "head": "prm_value", "num_labels": 2, "tokenizer": "race-char", "step_tag": TAG}
    shape = ModelShape.from_dict(model)
    prm = QwenPRM(folder, shape, trust_remote_code=False, max_steps=STANDIN_MAX_STEPS,
                  name="prm-standin")
    entry = {"name": "prm-standin", "kind": "prm", "model": "prm-standin", "aggregate": "min",
             "tag_tokens_per_step": 1, "overhead_tokens": prm.overhead_tokens(),
             "max_steps": STANDIN_MAX_STEPS}
    conf = root / "conf"
    shutil.copytree(catalog.conf_dir(), conf)
    (conf / "model" / "prm-standin.yaml").write_text(yaml.safe_dump(model))
    (conf / "reward" / "prm-standin.yaml").write_text(yaml.safe_dump(entry))
    return SimpleNamespace(folder=folder, conf=conf, shape=shape, entry=entry,
                           overhead=entry["overhead_tokens"])


@pytest.fixture
def standin_conf(standin, monkeypatch):
    """RACE_CONF_DIR at the stand-in's race/conf/ for one test (the catalog reads it per call)."""
    monkeypatch.setenv("RACE_CONF_DIR", str(standin.conf))
    shapes.cache_clear()
    yield standin
    shapes.cache_clear()


def load_standin(standin):
    from race.rewards.qwen_prm import QwenPRM

    return QwenPRM(standin.folder, standin.shape, trust_remote_code=False,
                   max_steps=STANDIN_MAX_STEPS, name="prm-standin")


def standin_spec(entry: dict, convention: str) -> RunSpec:
    from race.config import compose_config, task_entry

    # the plan fills the schema's defaults into the reward entry (a PRM's check is unread)
    reward = {"check": "answer"} | dict(entry)
    spec = small_spec(3, reward=tuple(sorted(reward.items())), convention=convention)
    defaults = compose_config([])  # the embedded task's knobs and the warm start, as planned
    return dataclasses.replace(spec, budget_flops=float(int(spec.budget_flops)),
                               task=tuple(sorted(task_entry(defaults.task).items())),
                               warmstart=tuple(sorted(dataclasses.asdict(
                                   defaults.warmstart).items())))


def plan_overrides(spec: RunSpec) -> list[str]:
    """``race plan`` overrides that compose ``spec`` as the grid's one cell."""
    return [f"model={spec.model}", f"reward={dict(spec.reward)['name']}",
            f"convention={spec.convention}", f"budget={int(spec.budget_flops)}",
            "pilot.fraction=1", "selection.policy=flat",
            f"grid.prompts_per_step={spec.prompts_per_step}",
            f"grid.group_size={spec.group_size}", f"grid.max_new_tokens={spec.max_new_tokens}",
            f"grid.update_epochs={spec.update_epochs}", f"grid.lr={spec.lr}",
            f"grid.lora_rank={spec.lora_rank}", f"grid.lora_alpha={spec.lora_alpha}",
            f"pilot.seed={spec.seed}", "pilot.checkpoints=[1.0]", "pilot.eval_targets=[test]",
            f"pilot.eval_examples={spec.eval_examples}"]


@pytest.mark.parametrize("convention", flops.CONVENTIONS)
def test_standin_prm_pilot_keeps_to_the_planned_worst_case(tmp_path, policy, standin_conf,
                                                          convention):
    from race.run.grid import plan_grid

    standin = standin_conf
    expected = standin_spec(standin.entry, convention)
    [cell] = plan_grid(plan_overrides(expected)).cells
    assert cell.refused == ""
    # race plan hands the pilot exactly this spec, with the shapes it read
    assert dataclasses.replace(cell.spec, policy=None, reward_model=None) == expected
    assert (cell.spec.policy, cell.spec.reward_model) == (load_model_shape("tiny-s"),
                                                          standin.shape)
    spec = cell.spec
    policy_shape, lora = load_model_shape("tiny-s"), LoraShape(spec.lora_rank, spec.lora_targets)
    # the worst case scores every trace with the format's overhead and max_steps tags
    extra = standin.overhead + STANDIN_MAX_STEPS * 1
    bound_reward = RewardShape("prm-standin", "prm", standin.shape,
                               extra_tokens_per_trace=extra, steps_per_trace=STANDIN_MAX_STEPS)

    def worst(prompt_tokens: int):
        return flops.grpo_step_flops(
            policy_shape, bound_reward, prompts_per_step=spec.prompts_per_step,
            group_size=spec.group_size, prompt_tokens=prompt_tokens,
            completion_tokens=spec.max_new_tokens, max_new_tokens=spec.max_new_tokens,
            lora=lora, convention=convention)

    assert shapes(spec) == (policy_shape, bound_reward)
    assert worst_step_flops(spec, 10) == worst(10).total

    parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
    parts.reward = prm = load_standin(standin)
    calls = []  # per generate call: greedy (eval) or not, its rollouts, the PRM's batches
    real_generate, real_score = parts.backend.generate, prm._score_batch

    def generate(prompts, **kw):
        out = real_generate(prompts, **kw)
        calls.append(SimpleNamespace(greedy=kw.get("greedy", False), out=out, batches=[]))
        return out

    def score_batch(encoded):
        calls[-1].batches.append([len(ids) for ids in encoded])
        return real_score(encoded)

    parts.backend.generate, prm._score_batch = generate, score_batch
    summary = run_pilot(spec, tmp_path / "cell", components=parts)

    assert summary["status"] == "ok", summary["error"]
    assert summary["steps"] >= 1 and summary["total_flops"] <= spec.budget_flops
    assert summary["flops"]["feedback"] > 0
    steps = [c for c in calls if not c.greedy]
    assert len(steps) == summary["steps"]
    for conv in flops.CONVENTIONS:
        scored = {greedy: sum(flops.forward_flops(standin.shape, counts, convention=conv)
                              for c in calls if c.greedy == greedy for counts in c.batches)
                  for greedy in (False, True)}
        assert summary[f"flops_{conv}"]["feedback"] == scored[False], conv
        # evaluation: its greedy generation plus the PRM scoring it
        generated = sum(getattr(c.out, f"flops_{conv}") for c in calls if c.greedy)
        assert summary[f"flops_{conv}"]["eval"] == generated + scored[True], conv
    rows = [r for r in metrics(tmp_path / "cell") if r["kind"] == "step"]
    before = 0.0
    for row, call in zip(rows, steps, strict=True):
        spent = row["flops"][convention]["feedback"] - before
        before = row["flops"][convention]["feedback"]
        out, longest = call.out, max(len(p) for p in call.out.prompt_ids)
        assert spent == sum(flops.forward_flops(standin.shape, counts, convention=convention)
                            for counts in call.batches)
        # what the pilot checked before this step, and the feedback part of it
        assert worst_step_flops(spec, longest) == worst(longest).total
        assert spent <= worst(longest).feedback, row["step"]
        counts = [n for batch in call.batches for n in batch]
        limits = [trace_token_limit(spec, len(p), len(c))
                  for p, c in zip(out.prompt_ids, out.completion_ids)]
        assert all(n <= limit for n, limit in zip(counts, limits, strict=True))


def test_measured_flops_match_the_ledger_with_the_qwen_prm_standin(tmp_path, policy,
                                                                   standin_conf):
    """accounting.measure counts the Qwen-PRM-style reward's scoring (feedback and the PRM
    part of eval) like every other phase: FlopCounterMode agrees with the ledger."""
    spec = dataclasses.replace(standin_spec(standin_conf.entry, "model"), measure=True)
    parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
    parts.reward = load_standin(standin_conf)
    summary = run_pilot(spec, tmp_path / "cell", components=parts)

    assert summary["status"] == "ok", summary["error"]
    measured, executed = summary["flops_measured"], summary["flops_executed"]
    for phase in PHASES:
        assert measured[phase] > 0, phase
        assert abs(measured[phase] - executed[phase]) / measured[phase] <= 1e-3, phase


@pytest.mark.parametrize("convention", flops.CONVENTIONS)
def test_standin_format_longer_than_configured_fails_before_any_step(tmp_path, policy,
                                                                     standin_conf, convention):
    """A PRM whose real input format is longer than the budget's bound never runs, so it
    never overspends, whichever convention the budget is charged in."""
    standin = standin_conf
    entry = standin.entry | {"overhead_tokens": standin.overhead - 1}
    spec = standin_spec(entry, convention)
    parts = build_components(dataclasses.replace(spec, reward=RULE), policy)
    parts.reward = load_standin(standin)
    summary = run_pilot(spec, tmp_path, components=parts)

    assert summary["status"] == "failed" and summary["steps"] == 0
    assert summary["error"].startswith("RewardFormatTooLong")
    assert f"reward.overhead_tokens={standin.overhead}" in summary["error"]
    for convention in flops.CONVENTIONS:
        assert summary[f"flops_{convention}"] == dict.fromkeys(PHASES, 0.0)
    assert summary["total_flops"] == 0.0
    assert metrics(tmp_path) == []


def test_standin_refuses_a_trace_over_its_token_limit(standin):
    from race.rewards.qwen_prm import split_steps

    prm = load_standin(standin)
    prompt, completion = "12+34-5=?", "12+34=46\n46-5=41\n#### 41"
    n = len(prm.tokenizer.encode(prm.format_input(prompt, split_steps(completion))))
    with pytest.raises(RewardInputTooLong) as refused:
        prm([prompt], [completion], token_limits=[n - 1])
    assert (refused.value.tokens, refused.value.limit) == (n, n - 1)
    assert prm.pop_flops() == RewardFlops()  # the model never ran
    prm([prompt], [completion], token_limits=[n])  # at the limit it runs, and is charged
    assert prm.pop_flops() == RewardFlops(
        flops.forward_flops(standin.shape, [n], convention="model"),
        flops.forward_flops(standin.shape, [n], convention="executed"), n)


def test_spent_so_far_reads_rows_written_after_the_state_evals_included(tmp_path):
    """A job killed after an evaluation that followed its last step: the evaluation's row
    (no step number) carries the newest cumulative FLOPs, and the state is older."""
    from race.pilot.state import STATE_FORMAT, Ledger, spent_so_far

    spec = small_spec(3)

    def flops_of(value: float) -> dict:
        return {c: dict.fromkeys(PHASES, value) for c in ("model", "executed", "measured")}

    rows = [{"kind": "step", "step": 1, "flops": flops_of(1.0)},
            {"kind": "step", "step": 2, "flops": flops_of(2.0)},
            {"kind": "eval", "checkpoint": 0.5, "target": "test", "accuracy": 0.5,
             "flops": flops_of(3.0)}]
    saved = Ledger(flops=flops_of(1.0))
    results.write_json(tmp_path / "state" / "step-000001" / "state.json", {
        "format": STATE_FORMAT, "cell_id": spec.cell_id, "steps": 1,
        "ledger": dataclasses.asdict(saved), "rows": rows[:1], "evals": [], "timing": [],
        "pending": [0.5, 1.0]})
    results.write_jsonl(tmp_path / "metrics.jsonl", rows)
    ledger, steps, evals = spent_so_far(spec, tmp_path)
    assert ledger.flops == flops_of(3.0) and steps == 2 and evals == rows[2:]
    results.write_jsonl(tmp_path / "metrics.jsonl", rows[:1])  # nothing after the state
    ledger, steps, evals = spent_so_far(spec, tmp_path)
    assert ledger.flops == flops_of(1.0) and steps == 1


def test_work_no_counter_saw_is_not_measured_rather_than_zero():
    """A vLLM rollout runs outside torch's dispatcher: FlopCounterMode sees nothing, so its
    phase's measured FLOPs are None ("not measured") in the summary, not 0.0."""
    from race.pilot.state import Ledger

    ledger = Ledger()
    ledger.add("learning", 10.0, 12.0, 12.0)
    ledger.add("rollout", 5.0, 6.0, None)
    ledger.add("rollout", 5.0, 6.0, 0.0)  # a later measured piece does not undo it
    assert ledger.measured()["rollout"] is None and ledger.measured()["learning"] == 12.0
    assert ledger.flops["model"]["rollout"] == 10.0  # the formulas still count it
