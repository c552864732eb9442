"""Warm-started tiny policies and tiny PRMs: cached, deterministic, loadable, accounted.

These use short recipes (a few steps) so they run in seconds; the real recipes and their
accuracies are measured by bench/warmstart.py and bench/prm_quality.py.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch trains the tiny models")

from race import flops  # noqa: E402
from race.catalog import load_model_shape  # noqa: E402
from race.policies import WarmStartRecipe, build_info, build_tiny_policy  # noqa: E402
from race.rewards.tiny_prm import PRMRecipe, TinyPRM, build_tiny_prm  # noqa: E402
from race.specs import RewardShape  # noqa: E402
from race.tasks.arith import ArithTask  # noqa: E402

SHORT = dict(max_steps=4, eval_every=2, greedy_every=2, val_examples=8, target_accuracy=1.01,
             batch_size=8,
             eval_examples=8, warmup_steps=2)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RACE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_build_is_cached_loadable_and_accounted(cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recipe = WarmStartRecipe(model="tiny-s", **SHORT)
    folder = build_tiny_policy("tiny-s", recipe=recipe)
    assert folder.parent == cache / "policies"
    mtime = (folder / "build_info.json").stat().st_mtime
    assert build_tiny_policy("tiny-s", recipe=recipe) == folder  # cached: not rebuilt
    assert (folder / "build_info.json").stat().st_mtime == mtime
    info = build_info(folder)
    assert set(info["accuracy"]) == {"test", "ood"}
    assert all(0.0 <= a <= 1.0 for a in info["accuracy"].values())
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
    from race.policies import _sft_batch
    from race.tokenizer import build_char_tokenizer

    recipe = WarmStartRecipe(model="tiny-s", **SHORT)
    info = build_info(build_tiny_policy("tiny-s", recipe=recipe))
    tokenizer = build_char_tokenizer(64)
    train = ArithTask(**recipe.task).sample("train", recipe.max_steps * recipe.batch_size)
    shape = load_model_shape("tiny-s")
    expected = sum(flops.train_flops(shape, _sft_batch(tokenizer, train[i:i + 8])[3])
                   for i in range(0, len(train), 8))
    assert info["pretrain_flops"]["model"] == pytest.approx(expected)


def test_warm_start_stops_at_its_target(cache):
    quick = WarmStartRecipe(model="tiny-s", **(SHORT | {"target_accuracy": 0.0}))
    info = build_info(build_tiny_policy("tiny-s", recipe=quick))
    assert info["sft_steps"] == 2 and len(info["val_curve"]) == 1  # halfway to 0: at once
    full = build_info(build_tiny_policy("tiny-s", recipe=WarmStartRecipe(model="tiny-s",
                                                                        **SHORT)))
    assert full["sft_steps"] == 4


def test_only_tiny_models_are_built():
    with pytest.raises(ValueError, match="model=qwen2.5-0.5b"):
        build_tiny_policy("qwen2.5-0.5b")


def test_tiny_prm_scores_steps_and_charges_flops(cache):
    policy = WarmStartRecipe(model="tiny-m", **SHORT)
    recipe = PRMRecipe(model="prm-tiny-s", init_from="tiny-m", train_steps=3, batch_size=8,
                       eval_examples=16, warmup_steps=1)
    folder = build_tiny_prm("prm-tiny-s", recipe=recipe, policy_recipe=policy)
    assert 0.0 <= build_info(folder)["heldout_step_auc"] <= 1.0
    task = ArithTask()
    examples = task.sample("test", 5)
    completions = [ex.trace for ex in examples[:3]] + ["1+1=3\n#### 3", ""]
    for aggregate in ("min", "prod", "last"):
        prm = TinyPRM("prm-tiny-s", "prm-tiny-s", aggregate=aggregate, folder=folder,
                      batch_size=2)
        rewards = prm([ex.prompt for ex in examples], completions)
        assert all(0.0 <= r <= 1.0 for r in rewards)
        steps = prm.last_step_scores
        assert [len(s) for s in steps] == [len(ex.steps) for ex in examples[:3]] + [2, 1]
        if aggregate == "min":
            assert rewards == pytest.approx([min(s) for s in steps])
        if aggregate == "last":
            assert rewards == pytest.approx([s[-1] for s in steps])
        spent = prm.pop_flops()
        assert prm.pop_flops().model == 0  # popped
    from race.rewards.tiny_prm import encode_for_scoring

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
