"""race.integrations.trl: RACE's ledger for TRL GRPOTrainer runs, checked against
FlopCounterMode.

A few GRPO steps of TRL on a tiny Qwen2 with LoRA, on the embedded arithmetic task, with
the ledger's ``measure=True`` (FlopCounterMode around each counted call) and one more
counter around the whole ``trainer.train()``: the ``executed`` ledger equals the measured
count per phase, and the phases together hold everything the counter saw (nothing ran
uncounted). With a rule reward (feedback 0 FLOPs), and with a tiny reward model plus
``num_iterations=2`` (old-policy passes) and ``beta > 0`` (reference passes with the
adapters disabled).
"""

import json

import pytest

torch = pytest.importorskip("torch", reason="TRL trains with torch")
pytest.importorskip("trl", reason="needs TRL: pip install 'race-rl[trl]' (make test installs it)")

from race.core.fmt import fmt_flops  # noqa: E402
from race.errors import UsageError  # noqa: E402
from race.integrations import trl as race_trl  # noqa: E402
from race.integrations import trl_ledger  # noqa: E402

pytestmark = pytest.mark.trl

VOCAB = 48
GROUP = 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    from race.warmstart.policies import single_thread

    with single_thread():
        yield


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """A random tiny Qwen2 (SDPA) with RACE's character tokenizer, saved like a checkpoint."""
    from transformers import AutoModelForCausalLM

    from race.core.specs import ModelShape
    from race.nn.measure import qwen2_config
    from race.warmstart.tokenizer import EOS, build_char_tokenizer, save_char_tokenizer

    folder = tmp_path_factory.mktemp("policy")
    tokenizer = build_char_tokenizer(VOCAB)
    shape = ModelShape("p", hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                       num_kv_heads=2, vocab_size=VOCAB)
    torch.manual_seed(0)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    model = AutoModelForCausalLM.from_config(qwen2_config(shape, eos_token_id=eos,
                                                          pad_token_id=eos),
                                             attn_implementation="sdpa")
    model.generation_config.eos_token_id = eos
    model.save_pretrained(folder)
    save_char_tokenizer(folder, VOCAB)
    return folder


def _dataset(n: int):
    from datasets import Dataset

    from race.tasks.arith import ArithTask

    examples = ArithTask().sample("train", n, seed=0)
    return Dataset.from_list([{"prompt": ex.prompt, "answer": ex.answer} for ex in examples])


def rule_reward(prompts, completions, answer, **kwargs):
    """The embedded task's verifier (plus a length bonus, so groups differ)."""
    from race.tasks.arith import ArithTask

    task = ArithTask()
    return [float(task.verify(c, a)) + len(set(c)) / 20 for c, a in zip(completions, answer)]


def _reward_model(policy_dir):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(3)
    rm = AutoModelForSequenceClassification.from_pretrained(policy_dir, num_labels=1)
    rm.config.pad_token_id = rm.config.eos_token_id
    return rm


def _trainer(policy_dir, out, reward_funcs, **config):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy_dir, attn_implementation="sdpa")
    args = GRPOConfig(**(dict(
        output_dir=str(out), per_device_train_batch_size=2 * GROUP, num_generations=GROUP,
        max_completion_length=16, max_steps=2, learning_rate=1e-3, beta=0.0,
        loss_type="dapo", bf16=False, use_cpu=True, report_to=[], logging_steps=1,
        save_strategy="no", seed=0, disable_dropout=True) | config))
    return GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                       train_dataset=_dataset(16), processing_class=tokenizer,
                       reward_processing_classes=[tokenizer] * len(reward_funcs),
                       peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                              lora_dropout=0.0))


def _run_measured(trainer, out, *, evaluate: bool = False):
    from race.nn.measure import flop_counter

    ledger = race_trl.track(trainer, out, measure=True)
    with flop_counter() as everything:
        trainer.train()
        if evaluate:  # TRL's own evaluation: generation, rewards, a no-grad loss pass
            trainer.evaluate(_dataset(4))
    return ledger, everything.get_total_flops()


def _check_ledger(ledger, everything):
    """executed == measured per phase within 1e-3 (exact on this CPU, to the FLOP)."""
    flops = ledger.ledger.flops
    for phase in trl_ledger.PHASES:
        measured, executed = flops["measured"][phase], flops["executed"][phase]
        assert executed == pytest.approx(measured, rel=1e-3, abs=0), phase
    assert sum(flops["measured"].values()) == everything  # nothing ran uncounted
    assert flops["executed"]["rollout"] > 0 and flops["executed"]["learning"] > 0
    # the model convention counts real tokens only: never more than what ran
    for phase in trl_ledger.PHASES:
        assert flops["model"][phase] <= flops["executed"][phase] * (1 + 1e-9)


def test_rule_reward_ledger_equals_flopcountermode(policy_dir, tmp_path):
    trainer = _trainer(policy_dir, tmp_path / "trl", [rule_reward])  # TRL's default
    assert trainer.args.gradient_checkpointing  # (its recomputation is counted)
    ledger, everything = _run_measured(trainer, tmp_path / "race", evaluate=True)
    _check_ledger(ledger, everything)
    flops = ledger.ledger.flops
    assert all(flops[c]["feedback"] == 0 for c in ("model", "executed", "measured"))
    assert flops["executed"]["eval"] > 0  # counted, not charged
    # two steps, each its own generation: two rows in the results contract
    cell = ledger.cell_dir
    rows = [json.loads(line) for line in (cell / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in rows] == [("step", 1), ("step", 2),
                                                       ("trl_eval", 2)]
    assert rows[-1]["flops"]["executed"] == flops["executed"]
    assert "eval_reward" in rows[-1]["metrics"]
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 2
    assert summary["flops_executed"] == flops["executed"]  # the evaluation after training too
    assert summary["total_flops"] == pytest.approx(
        sum(flops["model"][p] for p in trl_ledger.CHARGED))
    # race report on the folder: the compute card with the ledger's split
    from race.report.write import write_report

    written = write_report(tmp_path / "race")
    card = written["paths"]["compute_card_md"].read_text()
    charged = summary["total_flops"]
    assert written["totals"]["total"] == pytest.approx(charged)
    assert written["totals"]["learning"] == pytest.approx(flops["model"]["learning"])
    assert f"| learning | {fmt_flops(flops['model']['learning'])} |" in card
    assert "the compute card only" in written["summary"]
    # the trainer's own logs carry the ledger, so every report_to sink gets it
    logged = [h for h in trainer.state.log_history if "race/flops/rollout" in h]
    assert logged and logged[-1]["race/flops/total"] > 0
    assert 0 < logged[-1]["race/share/learning"] < 1


def test_reward_model_old_and_reference_passes_equal_flopcountermode(policy_dir, tmp_path):
    trainer = _trainer(policy_dir, tmp_path / "trl", [rule_reward, _reward_model(policy_dir)],
                       num_iterations=2, max_steps=4, beta=0.04,
                       gradient_checkpointing=False)
    calls = []
    original = trainer._get_per_token_logps_and_entropies

    def spy(model, *args, **kwargs):
        calls.append((torch.is_grad_enabled(), trl_ledger._adapters_disabled(model)))
        return original(model, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = spy
    ledger, everything = _run_measured(trainer, tmp_path / "race")
    _check_ledger(ledger, everything)
    flops = ledger.ledger.flops
    assert flops["executed"]["feedback"] > 0
    # two generations, each with an old-policy and a reference pass, four updates
    assert calls.count((False, False)) == 2  # old-policy log-probs
    assert calls.count((False, True)) == 2  # reference: adapters disabled
    assert calls.count((True, False)) == 4  # training passes


def test_refuses_what_it_cannot_count(policy_dir, tmp_path):
    trainer = _trainer(policy_dir, tmp_path / "trl", [rule_reward])
    trainer.args.use_vllm = True
    with pytest.raises(UsageError, match=r"^GRPOConfig.use_vllm=True: .*use_vllm=False"):
        race_trl.track(trainer, tmp_path / "race")
    trainer.args.use_vllm = False
    trainer.args.use_transformers_continuous_batching = True
    with pytest.raises(UsageError, match="continuous_batching"):
        race_trl.track(trainer, tmp_path / "race")
    trainer.args.use_transformers_continuous_batching = False
    race_trl.track(trainer, tmp_path / "race")
    with pytest.raises(UsageError, match="tracked already"):
        race_trl.track(trainer, tmp_path / "race")


def test_example_then_race_report_writes_the_card(tmp_path):
    """examples/trl_grpo_with_race.py, then `race report` on its folder (as the README says)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "trl-example"
    run = subprocess.run([sys.executable, str(root / "examples" / "trl_grpo_with_race.py"),
                          "--out", str(out), "--steps", "2"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"next: race report {out}" in run.stdout
    report = subprocess.run([sys.executable, "-m", "race.cli", "report", str(out)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    card = (out / "compute_card.md").read_text()
    summary = json.loads(next((out / "cells").glob("*/summary.json")).read_text())
    assert summary["steps"] == 2 and summary["flops"]["learning"] > 0
    assert f"| **total charged** | **{fmt_flops(summary['total_flops'])}** |" in card
