"""TRL's GRPOTrainer with RACE's FLOP ledger: a tiny local model on RACE's embedded task.

    python examples/trl_grpo_with_race.py                 # a few steps on this CPU
    race report results/trl-example                       # compute_card.md with the split

Needs ``pip install 'race-rl[trl]'``. Without ``--model`` it trains a randomly initialised tiny
Qwen2 (RACE's character tokenizer) saved under the output folder, so it needs no model hub;
pass ``--model <a local Hugging Face folder>`` for a real one. The reward is the embedded
task's verifier, a Python function (0 FLOPs). ``race.integrations.trl.track`` is the only
RACE line in the training script.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def tiny_policy(folder: Path) -> Path:
    """A random tiny Qwen2 with RACE's character tokenizer, saved like a checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM

    from race.core.specs import ModelShape
    from race.nn.measure import qwen2_config
    from race.warmstart.tokenizer import EOS, build_char_tokenizer, save_char_tokenizer

    vocab = 48
    eos = build_char_tokenizer(vocab).convert_tokens_to_ids(EOS)
    shape = ModelShape("tiny", hidden_size=64, intermediate_size=128, num_layers=2,
                       num_heads=4, num_kv_heads=2, vocab_size=vocab)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(qwen2_config(shape, eos_token_id=eos,
                                                          pad_token_id=eos),
                                             attn_implementation="sdpa")
    model.generation_config.eos_token_id = eos
    model.save_pretrained(folder)
    save_char_tokenizer(folder, vocab)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local Hugging Face model folder (default: a "
                        "random tiny Qwen2)")
    parser.add_argument("--out", default="results/trl-example", help="results folder")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    args = parser.parse_args()

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from race.integrations.trl import track
    from race.tasks.arith import ArithTask

    out = Path(args.out)
    model = args.model or str(tiny_policy(out / "policy"))
    task = ArithTask()
    train = Dataset.from_list([{"prompt": ex.prompt, "answer": ex.answer}
                               for ex in task.sample("train", 64, seed=0)])

    def correct(prompts, completions, answer, **kwargs):
        """1 for a right final answer (the embedded task's verifier), else 0."""
        return [float(task.verify(c, a)) for c, a in zip(completions, answer)]

    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    config = GRPOConfig(output_dir=str(out / "trl"), per_device_train_batch_size=16,
                        num_generations=8, max_completion_length=32, max_steps=args.steps,
                        learning_rate=5e-4, lr_scheduler_type="constant", beta=0.0,
                        loss_type="dapo", bf16=False, report_to=[], logging_steps=1,
                        save_strategy="no", seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=config, train_dataset=train,
                          processing_class=tokenizer,
                          peft_config=LoraConfig(r=8, lora_alpha=16,
                                                 target_modules="all-linear"))
    ledger = track(trainer, out)  # RACE: the exact per-phase ledger, results in `out`
    trainer.train()
    total = ledger.ledger.flops["model"]
    print("RACE ledger (model FLOPs): " + ", ".join(
        f"{phase} {total[phase]:.3g}" for phase in ("rollout", "learning", "feedback")))
    print(f"wrote {ledger.cell_dir}; next: race report {out}")


if __name__ == "__main__":
    main()
