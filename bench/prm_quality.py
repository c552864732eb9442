"""How good and how costly is each tiny process reward model?

For each size (prm-tiny-s, prm-tiny-m): ROC-AUC of its step scores against Math-Shepherd
step labels on held-out problems, on two kinds of traces:

* ``corrupted``: reference traces and traces with one wrong step (as in training, but
  held-out prompts and a different seed);
* ``sampled``: completions sampled from the warm-started tiny-m policy (temperature 1),
  labelled by checking each line against the reference: the errors a pilot really sees.

It also reports the FLOPs the PRM charges per scored token (model convention, from the
tokens it actually scored) and its build time. Usage: ``python bench/prm_quality.py``.
Last line: ``min_auc=<value>`` (the smallest held-out ``corrupted`` AUC over sizes).
"""

from __future__ import annotations

import torch

from race.rewards.tiny_prm import TinyPRM
from race.tasks.arith import ArithTask, step_labels
from race.warmstart.policies import build_info, build_tiny_policy
from race.warmstart.prm import build_tiny_prm, labelled_traces, roc_auc

SIZES = ("prm-tiny-s", "prm-tiny-m")
N_HELD_OUT = 512


def sampled_traces(task: ArithTask, n: int) -> list[tuple]:
    """(example, completion, labels) from the tiny-m policy sampling at temperature 1."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_policy("tiny-m")
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
    return roc_auc(scores, labels)


def main() -> None:
    torch.set_num_threads(1)
    task = ArithTask()
    corrupted = labelled_traces(task, "test", N_HELD_OUT, seed=30_000, corrupt_fraction=0.5)
    sampled = sampled_traces(task, N_HELD_OUT)
    positives = sum(label for _, _, labels in sampled for label in labels)
    total = sum(len(labels) for _, _, labels in sampled)
    print(f"held-out: {N_HELD_OUT} corrupted/reference traces; {N_HELD_OUT} tiny-m samples "
          f"({positives}/{total} steps correct)")
    print(f"{'prm':<12}{'params':>9}{'AUC corrupted':>15}{'AUC sampled':>13}"
          f"{'FLOPs/token':>13}{'build s':>9}")
    aucs = []
    for name in SIZES:
        folder = build_tiny_prm(name)
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
