"""How good and how costly is each tiny process reward model?

For each size (prm-tiny-s, prm-tiny-m): ROC-AUC of its step scores against Math-Shepherd
step labels on held-out problems, on two kinds of traces:

* ``corrupted``: reference traces and traces with one wrong step (as in training, but
  held-out prompts and a different seed);
* ``sampled``: completions sampled from the warm-started tiny-m policy (temperature 1),
  labelled by checking each line against the reference: the errors a pilot really sees.

It also reports the FLOPs the PRM charges per scored token (model convention, from the
tokens it actually scored) and its build time. Usage: ``python bench/prm_quality.py
[--quick]``.
Last line: ``min_auc=<value>`` (the smallest held-out ``corrupted`` AUC over sizes).
"""

from __future__ import annotations

import argparse

import torch

from bench.common import add_quick, quick_policy, quick_prm_recipe, quick_recipe, use_scratch_cache
from race.rewards.tiny_prm import TinyPRM
from race.tasks.arith import ArithTask, step_labels
from race.warmstart.policies import build_info, build_tiny_policy
from race.warmstart.prm import build_tiny_prm, labelled_traces, roc_auc

SIZES = ("prm-tiny-s", "prm-tiny-m")
N_HELD_OUT = 512


def sampled_traces(task: ArithTask, n: int, folder=None) -> list[tuple]:
    """(example, completion, labels) from the tiny-m policy (``folder``: its default
    build) sampling at temperature 1."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = folder or build_tiny_policy("tiny-m")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    examples = task.sample("test", n, seed=20_000)
    torch.manual_seed(0)
    out = []
    for start in range(0, n, 64):
        chunk = examples[start:start + 64]
        batch = tokenizer([ex.prompt for ex in chunk], return_tensors="pt", padding=True,
                          add_special_tokens=False)
        with torch.no_grad():
            ids = model.generate(**batch, do_sample=True, temperature=1.0, top_k=0,
                                 max_new_tokens=48, pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:],
                                       skip_special_tokens=True)
        out += [(ex, text, step_labels(ex.steps, text)) for ex, text in zip(chunk, texts)]
    return out


def auc_of(prm: TinyPRM, rows: list[tuple]) -> float:
    prm([ex.prompt for ex, _, _ in rows], [trace for _, trace, _ in rows])
    scores = [s for row in prm.last_step_scores for s in row]
    labels = [label for _, trace, labels in rows for label in labels]
    assert len(scores) == len(labels)
    if len(set(labels)) < 2:  # every step right or every step wrong: no AUC
        return float("nan")
    return roc_auc(scores, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_quick(parser, "prm-tiny-s of 2 steps on a 4-step tiny-m, 16 problems")
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = ArithTask()
    sizes, n_held_out, policy = SIZES, N_HELD_OUT, None
    if args.quick:
        use_scratch_cache()
        sizes, n_held_out, policy = SIZES[:1], 16, quick_policy("tiny-m")
    corrupted = labelled_traces(task, "test", n_held_out, seed=30_000, corrupt_fraction=0.5)
    sampled = sampled_traces(task, n_held_out, policy)
    positives = sum(label for _, _, labels in sampled for label in labels)
    total = sum(len(labels) for _, _, labels in sampled)
    print(f"held-out: {n_held_out} corrupted/reference traces; {n_held_out} tiny-m samples "
          f"({positives}/{total} steps correct)")
    print(f"{'prm':<12}{'params':>9}{'AUC corrupted':>15}{'AUC sampled':>13}"
          f"{'FLOPs/token':>13}{'build s':>9}")
    aucs = []
    for name in sizes:
        folder = (build_tiny_prm(name, recipe=quick_prm_recipe(name, "tiny-m"),
                                 policy_recipe=quick_recipe("tiny-m")) if args.quick
                  else build_tiny_prm(name))
        prm = TinyPRM(name, name, folder=folder)
        auc_corrupted = auc_of(prm, corrupted)
        spent = prm.pop_flops()
        auc_sampled = auc_of(prm, sampled)
        info = build_info(folder)
        aucs.append(auc_corrupted)
        print(f"{name:<12}{info['params']:>9,}{auc_corrupted:>15.4f}{auc_sampled:>13.4f}"
              f"{spent.model / spent.tokens:>13.3e}{info['build_s']:>9.1f}")
    print(f"min_auc={min(aucs):.4f}")


if __name__ == "__main__":
    main()
