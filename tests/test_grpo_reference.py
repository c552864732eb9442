"""RACE's GRPO learner against a reference implementation: TRL's ``GRPOTrainer``.

One batch, shared by both: the same tiny Qwen2 policy, the same LoRA adapters (B drawn at
random so that A gets a gradient too), the same prompts, the same sampled completions and
the same rewards. TRL takes the batch through its own code path from token ids on: its
``_generate_and_score_completions`` (prompt tokenization, reward call, group advantages,
padding and masks) with only the sampling replaced by the fixed completions, then its
``_compute_loss`` and a backward pass. RACE takes the same token ids through
``LoraLearner``. Per-token log-probs, masked tokens, advantages, loss and the LoRA gradient
must agree.

Matched settings: TRL ``loss_type="dapo"`` is RACE's token-level aggregation (``"token"``),
and TRL ``loss_type="grpo"`` (each completion's mean, then the batch mean) is RACE's
``"sequence"``, the pilots' default (both are checked);
``beta=0`` and ``kl_coef=0`` (no KL term, no reference pass); ``scale_rewards="group"`` is
RACE's per-group std scaling; one optimizer step per generation (``num_iterations=1``,
``steps_per_generation=1``), so both use the detached current log-probs as the old ones;
fp32 (TRL's ``bf16`` off), temperature 1, LoRA dropout 0, no shuffling.

Settings where the two knowingly differ (each checked below to be the only difference):

* the std epsilon of group advantages: RACE ``(r - mean) / (std + 1e-6)``, TRL
  ``/ (std + 1e-4)``;
* padding: TRL left-pads prompts and right-pads completions, RACE right-pads whole
  sequences; RoPE depends only on relative positions, so log-probs agree up to float
  rounding (exactly, on this CPU);
* TRL's defaults that this test overrides: ``learning_rate=1e-6`` with linear decay and
  ``bf16=True`` where supported (RACE: constant lr, fp32 adapters).
"""

import copy
import math

import pytest

torch = pytest.importorskip("torch", reason="the learner trains with torch")
trl = pytest.importorskip("trl", reason="the reference is TRL's GRPOTrainer: pip install "
                                        "'race-rl[trl]' (make test installs it)")

pytestmark = pytest.mark.trl

GROUP_SIZE = 4
MAX_NEW_TOKENS = 24
PROMPTS = ("3+4-2=?\n", "8-5+6=?\n", "1+9+3=?\n")
VOCAB = 48
RACE_STD_EPS, TRL_STD_EPS = 1e-6, 1e-4  # the one known difference in the maths


def reward_digits(prompts, completions, **kwargs):
    """A deterministic reward that differs within every group: the share of digits."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) + 0.1 * (len(c) % 3)
            for c in completions]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from race.core.specs import ModelShape
    from race.nn.measure import qwen2_config
    from race.pilot.learner import LearnerConfig, LoraLearner
    from race.warmstart.policies import single_thread
    from race.warmstart.tokenizer import build_char_tokenizer

    with single_thread():
        tokenizer = build_char_tokenizer(VOCAB)
        shape = ModelShape("ref", hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, vocab_size=VOCAB)
        torch.manual_seed(0)
        base = AutoModelForCausalLM.from_config(
            qwen2_config(shape, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id), attn_implementation="sdpa")
        config = LearnerConfig(lora_rank=4, lora_alpha=8, lr=1e-3, aggregation="token")
        learner = LoraLearner(copy.deepcopy(base), shape, config,
                              pad_id=tokenizer.pad_token_id, seed=0)
        # B starts at zero in LoRA, which leaves A without a gradient: draw it at random
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in learner.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
        adapters = {n: p.detach().clone() for n, p in learner.model.named_parameters()
                    if p.requires_grad}
        # sample the completions once, from the shared policy
        rows = [p for p in PROMPTS for _ in range(GROUP_SIZE)]
        batch = tokenizer(rows, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(2)
        with torch.no_grad():
            out = learner.model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS,
                                         do_sample=True, top_k=0, top_p=None,
                                         eos_token_id=tokenizer.eos_token_id,
                                         pad_token_id=tokenizer.pad_token_id)
        width = batch["input_ids"].shape[1]
        prompt_ids, completion_ids = [], []
        for ids, mask, new in zip(batch["input_ids"].tolist(),
                                  batch["attention_mask"].tolist(),
                                  out[:, width:].tolist()):
            prompt_ids.append(tuple(t for t, keep in zip(ids, mask) if keep))
            length = (new.index(tokenizer.eos_token_id) + 1
                      if tokenizer.eos_token_id in new else len(new))
            completion_ids.append(tuple(new[:length]))
        texts = tokenizer.batch_decode([list(c) for c in completion_ids],
                                       skip_special_tokens=True)

        # TRL: the same base weights and the same adapters
        torch.manual_seed(0)
        peft_config = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                 lora_dropout=0.0, target_modules=list(config.lora_targets))
        trl_model = get_peft_model(copy.deepcopy(base), peft_config)
        with torch.no_grad():
            params = dict(trl_model.named_parameters())
            for name, value in adapters.items():
                params[name].copy_(value)
        trainer = _trainer(trl_model, tokenizer, tmp_path_factory.mktemp("trl"))
    return dict(tokenizer=tokenizer, learner=learner, trainer=trainer, rows=rows,
                prompt_ids=prompt_ids, completion_ids=completion_ids, texts=texts,
                single_thread=single_thread)


def _trainer(model, tokenizer, out_dir):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=len(PROMPTS) * GROUP_SIZE,
        num_generations=GROUP_SIZE, max_completion_length=MAX_NEW_TOKENS,
        loss_type="dapo", beta=0.0, scale_rewards="group", num_iterations=1,
        steps_per_generation=1, gradient_accumulation_steps=1, learning_rate=1e-3,
        lr_scheduler_type="constant", bf16=False, fp16=False, use_cpu=True,
        temperature=1.0, report_to=[], logging_steps=1, save_strategy="no",
        shuffle_dataset=False, disable_dropout=True, seed=0)
    dataset = Dataset.from_list([{"prompt": p} for p in PROMPTS])
    return GRPOTrainer(model=model, reward_funcs=reward_digits, args=args,
                       train_dataset=dataset, processing_class=tokenizer)


def _trl_batch(setup):
    """TRL's own scoring of the shared batch: the sampling step returns the fixed
    completions, everything after it (rewards, advantages, padding, masks) is TRL's."""
    trainer = setup["trainer"]
    fixed = [list(c) for c in setup["completion_ids"]]

    def fixed_generation(prompt_ids, *args, **kwargs):
        assert [tuple(p) for p in prompt_ids] == setup["prompt_ids"]  # same tokenization
        return fixed, None

    trainer._generate_single_turn = fixed_generation
    trainer.model.train()
    return trainer._generate_and_score_completions([{"prompt": p} for p in setup["rows"]])


def test_race_learner_matches_trl_grpo_on_one_batch(setup):
    from race.core.grpo import group_advantages
    from race.pilot.learner import Batch

    with setup["single_thread"]():
        trainer, learner = setup["trainer"], setup["learner"]
        inputs = _trl_batch(setup)

        # rewards and advantages: TRL's from its reward call, RACE's from the same rewards
        rewards = torch.tensor(reward_digits(setup["rows"], setup["texts"]))
        race_adv = group_advantages(rewards, GROUP_SIZE, eps=RACE_STD_EPS)
        assert torch.allclose(group_advantages(rewards, GROUP_SIZE, eps=TRL_STD_EPS),
                              inputs["advantages"], atol=1e-6)  # the epsilon is the difference
        # ... which moves advantages by about eps / std relative
        assert torch.allclose(race_adv, inputs["advantages"], rtol=2e-3, atol=1e-6)
        assert not torch.equal(race_adv, inputs["advantages"])

        # masked tokens: every completion token, EOS included; prompt and padding out
        mask = inputs["completion_mask"]
        assert int(mask.sum()) == sum(len(c) for c in setup["completion_ids"])

        # per-token log-probs of the completion tokens under the current policy
        batch = Batch(tuple(setup["prompt_ids"]), tuple(setup["completion_ids"]),
                      tuple(race_adv.tolist()))
        race_logp = learner.logprobs(batch)
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], mask], dim=1)
        with torch.no_grad():
            trl_logp, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, inputs["completion_ids"].shape[1])
        for row, logp in enumerate(race_logp):
            n = len(setup["completion_ids"][row])
            torch.testing.assert_close(logp, trl_logp[row, :n], atol=1e-5, rtol=0)

        # loss and gradient: RACE with TRL's advantages (so the epsilon is out of it)
        batch = Batch(batch.prompt_ids, batch.completion_ids,
                      tuple(inputs["advantages"].tolist()))
        learner.model.train()
        learner.optimizer.zero_grad(set_to_none=True)
        rows = list(range(len(batch.completion_ids)))
        race_loss, _ = learner._backward(batch, rows, None, None, None,
                                         torch.tensor(batch.advantages), 1.0, step=0)
        trainer.model.zero_grad(set_to_none=True)
        trainer.current_gradient_accumulation_steps = 1  # what Trainer's loop sets per step
        trl_loss = trainer.compute_loss(trainer.model, inputs)
        trl_loss.backward()
        assert math.isclose(race_loss, float(trl_loss.detach()), rel_tol=1e-5, abs_tol=1e-8)

        race_grads = {n: p.grad for n, p in learner.model.named_parameters() if p.requires_grad}
        trl_grads = {n: p.grad for n, p in trainer.model.named_parameters() if p.requires_grad}
        assert set(race_grads) == set(trl_grads) and len(race_grads) > 0
        assert all(g is not None for g in (*race_grads.values(), *trl_grads.values()))
        race_flat = torch.cat([race_grads[n].flatten() for n in sorted(race_grads)])
        trl_flat = torch.cat([trl_grads[n].flatten() for n in sorted(trl_grads)])
        cosine = torch.nn.functional.cosine_similarity(race_flat, trl_flat, dim=0)
        assert float(cosine) >= 0.9999
        assert math.isclose(float(race_flat.norm()), float(trl_flat.norm()), rel_tol=1e-3)
        # the A matrices get a gradient too (B was drawn at random)
        assert any("lora_A" in n and float(g.abs().sum()) > 0 for n, g in race_grads.items())

        # sequence-level aggregation (the pilots' default) against TRL's loss_type="grpo"
        import dataclasses

        learner.config = dataclasses.replace(learner.config, aggregation="sequence")
        trainer.loss_type = "grpo"
        learner.optimizer.zero_grad(set_to_none=True)
        race_loss, _ = learner._backward(batch, rows, None, None, None,
                                         torch.tensor(batch.advantages), 1.0, step=0)
        trainer.model.zero_grad(set_to_none=True)
        trl_loss = trainer.compute_loss(trainer.model, inputs)
        trl_loss.backward()
        assert math.isclose(race_loss, float(trl_loss.detach()), rel_tol=1e-5, abs_tol=1e-8)
        race_flat = torch.cat([p.grad.flatten() for n, p in
                               sorted(learner.model.named_parameters()) if p.requires_grad])
        trl_flat = torch.cat([p.grad.flatten() for n, p in
                              sorted(trainer.model.named_parameters()) if p.requires_grad])
        assert float(torch.nn.functional.cosine_similarity(race_flat, trl_flat, dim=0)) >= 0.9999
