"""Warm-started tiny policies and tiny PRMs: cached, deterministic, loadable, accounted.

These use short recipes (a few steps) so they run in seconds; the real recipes and their
accuracies are measured by bench/warmstart.py and bench/prm_quality.py.
"""

import math

import pytest

torch = pytest.importorskip("torch", reason="torch trains the tiny models")

from race.catalog import load_model_shape  # noqa: E402
from race.core import flops  # noqa: E402
from race.core.specs import RewardShape  # noqa: E402
from race.rewards.tiny_prm import TinyPRM  # noqa: E402
from race.tasks.arith import ArithTask  # noqa: E402
from race.warmstart.policies import (  # noqa: E402
    WarmStartRecipe,
    build_info,
    build_tiny_policy,
    greedy_accuracy,
)
from race.warmstart.prm import PRMRecipe, build_tiny_prm, roc_auc  # noqa: E402
from race.warmstart.tokenizer import build_char_tokenizer  # noqa: E402

SHORT = dict(steps=4, curve_every=2, curve_examples=8, val_examples=8, batch_size=8,
             eval_examples=8, warmup_steps=2)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACE_CACHE_DIR", str(tmp_path))
    return tmp_path


def _mean_minus(model, tokenizer, task, examples, **kwargs):
    """A stand-in for greedy_accuracy whose value tells the splits apart (ood: more
    subtractions)."""
    return sum(ex.prompt.count("-") for ex in examples) / len(examples) / 10


def test_build_is_cached_loadable_and_accounted(cache, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import race.warmstart.policies

    monkeypatch.setattr(race.warmstart.policies, "greedy_accuracy", _mean_minus)
    recipe = WarmStartRecipe(model="tiny-s", **SHORT)
    folder = build_tiny_policy("tiny-s", recipe=recipe)
    assert folder.parent == cache / "policies"
    mtime = (folder / "build_info.json").stat().st_mtime
    assert build_tiny_policy("tiny-s", recipe=recipe) == folder  # cached: not rebuilt
    assert (folder / "build_info.json").stat().st_mtime == mtime
    info = build_info(folder)
    # each split's accuracy is measured on its own fixed held-out sample (seed 10_000)
    expected = {split: _mean_minus(None, None, None,
                                   ArithTask(**recipe.task).sample(split, 8, seed=10_000))
                for split in ("val", "test", "ood")}
    assert expected["test"] < expected["ood"]  # the stand-in can tell a swap
    assert info["accuracy"] == pytest.approx(expected)
    assert info["pretrain_flops"]["executed"] >= info["pretrain_flops"]["model"] > 0
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.vocab_size == load_model_shape("tiny-s").vocab_size == len(tokenizer)
    assert not list(cache.glob("policies/.tiny-s-*"))  # no staging folder left behind


def test_build_is_deterministic(cache):
    from safetensors.torch import load_file

    recipe = WarmStartRecipe(model="tiny-s", **SHORT)
    first = load_file(str(build_tiny_policy("tiny-s", recipe=recipe) / "model.safetensors"))
    again = load_file(str(build_tiny_policy("tiny-s", recipe=recipe, rebuild=True)
                          / "model.safetensors"))
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_warm_start_flops_match_the_sft_batches(cache):
    from race.warmstart.policies import _sft_batch, demonstrations
    from race.warmstart.tokenizer import build_char_tokenizer

    recipe = WarmStartRecipe(model="tiny-s", **SHORT)
    info = build_info(build_tiny_policy("tiny-s", recipe=recipe))
    tokenizer = build_char_tokenizer(64)
    train = demonstrations(recipe)  # the flawed traces, whose lengths the FLOPs follow
    shape = load_model_shape("tiny-s")
    expected = sum(flops.train_flops(shape, _sft_batch(tokenizer, train[i:i + 8])[3])
                   for i in range(0, len(train), 8))
    assert info["pretrain_flops"]["model"] == pytest.approx(expected)


def test_every_size_is_warm_started_by_one_recipe(cache, monkeypatch):
    import dataclasses

    import race.warmstart.policies

    monkeypatch.setattr(race.warmstart.policies, "greedy_accuracy", _mean_minus)
    # the default recipe of each size differs only in the model's name: no per-size target
    small, medium = (WarmStartRecipe(model=name) for name in ("tiny-s", "tiny-m"))
    assert dataclasses.replace(small, model="tiny-m") == medium
    assert not any("target" in f.name for f in dataclasses.fields(WarmStartRecipe))
    built = {name: build_info(build_tiny_policy(name, recipe=WarmStartRecipe(model=name,
                                                                             **SHORT)))
             for name in ("tiny-s", "tiny-m")}
    for info in built.values():  # the same steps, the same val curve points, every size
        assert info["sft_steps"] == 4
        assert [step for step, _ in info["val_curve"]] == [2, 4]
        assert info["val_curve"][-1][1] == info["accuracy"]["val"]
    recipes = [info["recipe"] | {"model": None} for info in built.values()]
    assert recipes[0] == recipes[1]
    assert built["tiny-s"]["params"] < built["tiny-m"]["params"]


def test_learning_rate_warms_up_then_decays_to_zero():
    recipe = WarmStartRecipe(model="tiny-s", steps=100, warmup_steps=10)
    assert recipe.lr_factor(0) == pytest.approx(0.1)
    assert recipe.lr_factor(9) == pytest.approx(1.0, abs=0.03)  # warm: cosine barely started
    assert recipe.lr_factor(50) == pytest.approx(0.5)
    assert recipe.lr_factor(100) == pytest.approx(0.0)


def test_only_tiny_models_are_built():
    with pytest.raises(ValueError, match="model=qwen2.5-0.5b"):
        build_tiny_policy("qwen2.5-0.5b")


def test_tiny_prm_scores_steps_and_charges_flops(cache):
    policy = WarmStartRecipe(model="tiny-m", **SHORT)
    recipe = PRMRecipe(model="prm-tiny-s", init_from="tiny-m", train_steps=3, batch_size=8,
                       eval_examples=16, warmup_steps=1)
    folder = build_tiny_prm("prm-tiny-s", recipe=recipe, policy_recipe=policy)
    task = ArithTask()
    # the recorded AUC is the saved model's, on the held-out traces (half corrupted)
    from race.warmstart.policies import single_thread
    from race.warmstart.prm import labelled_traces, load_prm, step_scores

    held_out = labelled_traces(task, "test", 16, 10_000, 0.5)
    tokenizer, lm, head = load_prm(folder)
    with single_thread():
        scores, _ = step_scores(lm, head, tokenizer, [ex.prompt for ex, _, _ in held_out],
                                [trace for _, trace, _ in held_out])
    auc = roc_auc([x for row in scores for x in row],
                  [label for _, _, labels in held_out for label in labels])
    assert build_info(folder)["heldout_step_auc"] == pytest.approx(auc, abs=1e-9)
    examples = task.sample("test", 5)
    completions = [ex.trace for ex in examples[:3]] + ["1+1=3\n#### 3", ""]
    for aggregate in ("min", "prod", "last"):
        prm = TinyPRM("prm-tiny-s", "prm-tiny-s", aggregate=aggregate, folder=folder,
                      batch_size=2)
        rewards = prm([ex.prompt for ex in examples], completions)
        steps = prm.last_step_scores
        assert [len(s) for s in steps] == [len(ex.steps) for ex in examples[:3]] + [2, 1]
        expected = {"min": [min(s) for s in steps], "prod": [math.prod(s) for s in steps],
                    "last": [s[-1] for s in steps]}[aggregate]
        assert rewards == pytest.approx(expected)
        spent = prm.pop_flops()
        assert prm.pop_flops().model == 0  # popped
    from race.warmstart.prm import encode_for_scoring

    lengths = [len(encode_for_scoring(prm.tokenizer, ex.prompt, c)[0])
               for ex, c in zip(examples, completions)]
    reward = RewardShape("prm-tiny-s", "prm", load_model_shape("prm-tiny-s"))
    assert spent.tokens == sum(lengths)
    assert spent.model == flops.reward_flops(reward, lengths)
    assert spent.executed == sum(flops.reward_flops(reward, lengths[i:i + 2],
                                                    convention="executed")
                                 for i in range(0, 5, 2))


def test_prm_needs_matching_policy_shape(cache):
    with pytest.raises(ValueError, match="init policy"):
        build_tiny_prm("prm-tiny-s", recipe=PRMRecipe(model="prm-tiny-s", init_from="tiny-s"))


# ---------------------------------------------------------------- metrics on stand-in models


class ScriptedGenerator:
    """Stands in for a causal LM: ``generate`` appends the reply scripted for each prompt."""

    def __init__(self, tokenizer, replies: dict[str, str]):
        self.tokenizer, self.replies, self.calls = tokenizer, replies, []

    def eval(self):
        return self

    def generate(self, input_ids, attention_mask, **kwargs):
        self.calls.append(kwargs)
        eos = self.tokenizer.eos_token_id
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = self.tokenizer.decode([t for t, m in zip(ids, mask) if m])
            reply = self.tokenizer(self.replies[prompt], add_special_tokens=False)["input_ids"]
            rows.append(ids + reply + [eos])
        longest = max(map(len, rows))
        return torch.tensor([row + [eos] * (longest - len(row)) for row in rows])


def test_greedy_accuracy_counts_completions_with_the_right_final_answer():
    task = ArithTask()
    examples = task.sample("test", 5)
    replies = [examples[0].trace,  # right
               examples[1].trace.rsplit("#### ", 1)[0] + f"#### {int(examples[1].answer) + 1}",
               "",  # no answer line
               examples[3].trace,  # right
               f"#### {examples[4].answer}"]  # right answer, no steps: still counted
    tokenizer = build_char_tokenizer(64)
    model = ScriptedGenerator(tokenizer, {ex.prompt: r for ex, r in zip(examples, replies)})
    # batches of 2, 2 and 1: the last short batch must count, the mean is over examples
    assert greedy_accuracy(model, tokenizer, task, examples, batch_size=2) == pytest.approx(0.6)
    assert len(model.calls) == 3
    assert all(call["do_sample"] is False for call in model.calls)  # greedy


def test_roc_auc_on_hand_computed_cases():
    # positive-negative pairs ranked right: 0.35 > 0.1, 0.8 > 0.1, 0.8 > 0.4 (3 of 4)
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts half: (0.5 + 1 + 1 + 1) / 4
    assert roc_auc([0.5, 0.5, 0.2, 0.9], [1, 0, 0, 1]) == pytest.approx(0.875)
    # 2 positives x 3 negatives: 0.7 and 0.75 each beat 0.2 and 0.1 but not 0.8 (4 of 6)
    assert roc_auc([0.2, 0.7, 0.8, 0.1, 0.75], [0, 1, 0, 0, 1]) == pytest.approx(4 / 6)
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([0.3] * 4, [0, 1, 0, 1]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="needs both positive and negative"):
        roc_auc([0.2, 0.4], [1, 1])
