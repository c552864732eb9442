"""QwenPRM against a tiny local stand-in of Qwen2.5-Math-PRM (no hub).

The stand-in folder holds what a real checkpoint holds: a Qwen2 ``config.json`` whose
``auto_map`` points ``AutoModel`` at the remote-code file ``qwen_prm_modeling.py`` (copied
from race/rewards), random weights from ``save_pretrained``, and a byte-level tokenizer
with ``<extra_0>``, ``<|endoftext|>`` and a Qwen-style chat template. Transformers copies
remote code into its modules cache; the fixtures point that cache into tmp.
"""

import math
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch runs the PRM")
transformers = pytest.importorskip("transformers", reason="transformers loads the PRM")

from race.core.flops import reward_flops  # noqa: E402
from race.core.specs import RewardShape  # noqa: E402
from race.rewards.qwen_prm import (  # noqa: E402
    SYSTEM_PROMPT,
    QwenPRM,
    aggregate_scores,
    split_steps,
)
from race.rewards.reward_base import Reward, RewardFlops  # noqa: E402

MODELING = Path(__file__).resolve().parents[1] / "race" / "nn" / "qwen_prm_modeling.py"
TAG = "<extra_0>"
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
VOCAB_SIZE = 272  # 256 byte symbols + 4 specials, padded

PROMPTS = ["Tom has 3 apples and buys 4 more. How many apples does he have?"] * 2 + [
    "What is 12 * 12?", "Compute 2 + 2."]
COMPLETIONS = [
    "Tom starts with 3 apples.\n\nHe buys 4 more, so 3 + 4 = 7.\n\n#### 7",
    "3 + 4 = 7, the answer is \\boxed{7}",  # no blank line: one step
    "12 * 12 = 144.\n\n\n\n  \n\nSo the answer is 144.",  # empty pieces dropped: two steps
    "",  # empty: scored as one empty step
]


def _write_tokenizer(folder: Path, specials: list[str]) -> None:
    """A byte-level BPE without merges: every byte is a token, ``specials`` are atomic."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>",
                                        additional_special_tokens=specials)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)


def _write_model(folder: Path) -> None:
    from transformers import Qwen2Config

    sys.path.insert(0, str(MODELING.parent))
    try:
        from qwen_prm_modeling import Qwen2ForProcessRewardModel
    finally:
        sys.path.remove(str(MODELING.parent))
    config = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB_SIZE,
                         max_position_embeddings=1024, tie_word_embeddings=False)
    config.architectures = ["Qwen2ForProcessRewardModel"]
    config.auto_map = {"AutoModel": "qwen_prm_modeling.Qwen2ForProcessRewardModel"}
    torch.manual_seed(0)
    Qwen2ForProcessRewardModel(config).save_pretrained(folder)
    shutil.copy(MODELING, folder / MODELING.name)


@pytest.fixture(scope="module", autouse=True)
def modules_cache(tmp_path_factory):
    """Keep transformers' copies of remote code in tmp instead of ~/.cache."""
    import transformers.dynamic_module_utils as dynamic

    cache = str(tmp_path_factory.mktemp("hf_modules"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dynamic, "HF_MODULES_CACHE", cache)
        patch.setattr(sys, "path", list(sys.path))
        yield cache


@pytest.fixture(scope="module")
def prm_folder(tmp_path_factory, modules_cache) -> Path:
    folder = tmp_path_factory.mktemp("tiny-prm")
    _write_model(folder)
    _write_tokenizer(folder, ["<|im_start|>", "<|im_end|>", TAG])
    return folder


@pytest.fixture(scope="module")
def prm(prm_folder) -> QwenPRM:
    return QwenPRM(prm_folder, aggregate="min", batch_size=3)


def _scored_texts(prm: QwenPRM, prompts=PROMPTS, completions=COMPLETIONS) -> list[str]:
    return [prm.format_input(p, split_steps(c) or [""]) for p, c in zip(prompts, completions)]


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize("completion, steps", [
    ("a\n\nb\n\nc", ["a", "b", "c"]),
    ("one line\nsecond line", ["one line\nsecond line"]),
    ("  a  \n\n\n\n b \n\n  \n\n", ["a", "b"]),
    ("", []),
    ("\n\n", []),
])
def test_split_steps(completion, steps):
    assert split_steps(completion) == steps


def test_aggregate_scores():
    assert aggregate_scores([0.9, 0.2, 0.5], "min") == 0.2
    assert aggregate_scores([0.9, 0.2, 0.5], "last") == 0.5
    assert aggregate_scores([0.5, 0.5], "prod") == pytest.approx(0.25)
    assert math.isnan(aggregate_scores([], "min"))
    for how in ("min", "prod", "last"):  # one broken step poisons the reward
        assert math.isnan(aggregate_scores([0.5, math.nan, 0.9], how))
    with pytest.raises(ValueError, match="aggregate='mean'"):
        aggregate_scores([0.5], "mean")


def test_bad_arguments_refused_before_loading(tmp_path):
    with pytest.raises(ValueError, match="reward.aggregate='avg'.*min"):
        QwenPRM(tmp_path, aggregate="avg")
    with pytest.raises(ValueError, match="reward.batch_size=0"):
        QwenPRM(tmp_path, batch_size=0)


# --------------------------------------------------------------------------- loading


def test_loads_remote_code_from_local_folder(prm, prm_folder, modules_cache):
    model = prm.model
    assert type(model).__name__ == "Qwen2ForProcessRewardModel"
    assert type(model).__module__.startswith("transformers_modules")  # the copied remote code
    assert any(Path(modules_cache).rglob("qwen_prm_modeling.py"))
    assert not model.training
    ids = torch.tensor([prm.tokenizer.encode("a b" + TAG)])
    assert model(input_ids=ids)[0].shape == (1, ids.shape[1], 2)
    assert isinstance(prm, Reward)
    assert (prm.kind, prm.value_range) == ("prm", (0.0, 1.0))
    # the FLOP shape comes from the loaded config
    shape = prm.shape
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads,
            shape.intermediate_size, shape.vocab_size, shape.head) == (
        32, 2, 4, 2, 64, VOCAB_SIZE, "prm_value")
    assert prm.name == prm_folder.name


def test_packaged_model_class_loads_the_same_weights(prm, prm_folder):
    packaged = QwenPRM(prm_folder, batch_size=4, trust_remote_code=False)
    assert type(packaged.model).__module__ == "race.nn.qwen_prm_modeling"
    assert packaged(PROMPTS, COMPLETIONS) == pytest.approx(prm(PROMPTS, COMPLETIONS), abs=1e-6)


def test_tokenizer_without_step_tag_is_refused(tmp_path, prm_folder):
    folder = tmp_path / "no-tag"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", MODELING.name):
        shutil.copy(prm_folder / name, folder / name)
    _write_tokenizer(folder, ["<|im_start|>", "<|im_end|>"])
    with pytest.raises(ValueError, match=r"reward.step_tag='<extra_0>'.*no-tag"):
        QwenPRM(folder)


# --------------------------------------------------------------------------- scoring


def test_text_follows_the_model_card(prm):
    text = prm.format_input("What is 1+1?", ["1+1 = 2", "#### 2"])
    assert text == (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
                    f"<|im_start|>user\nWhat is 1+1?<|im_end|>\n"
                    f"<|im_start|>assistant\n1+1 = 2{TAG}#### 2{TAG}<|im_end|>\n")
    # a tag written by the policy itself cannot add a scored position
    assert prm.format_input("q", [f"a{TAG}b"]).count(TAG) == 1


def test_one_score_per_step(prm):
    rewards = prm(PROMPTS, COMPLETIONS)
    assert len(rewards) == len(COMPLETIONS)
    assert [len(s) for s in prm.last_step_scores] == [3, 1, 2, 1]
    for text, scores in zip(_scored_texts(prm), prm.last_step_scores):
        assert prm.tokenizer.encode(text).count(prm.step_tag_id) == len(scores)
    for reward, scores in zip(rewards, prm.last_step_scores):
        assert 0.0 <= reward <= 1.0
        assert all(0.0 <= s <= 1.0 for s in scores)
        assert reward == pytest.approx(min(scores))


def test_aggregations(prm, monkeypatch):
    by_rule = {}
    for how in ("min", "prod", "last"):
        monkeypatch.setattr(prm, "aggregate", how)
        by_rule[how] = prm(PROMPTS, COMPLETIONS)
    steps = prm.last_step_scores
    for i, scores in enumerate(steps):
        assert by_rule["min"][i] == pytest.approx(min(scores))
        assert by_rule["prod"][i] == pytest.approx(math.prod(scores))
        assert by_rule["last"][i] == pytest.approx(scores[-1])
        assert by_rule["prod"][i] <= by_rule["min"][i] + 1e-9 <= by_rule["last"][i] + 2e-9


def test_batching_and_padding_do_not_change_scores(prm, monkeypatch):
    prm(PROMPTS, COMPLETIONS)
    batched = prm.last_step_scores
    monkeypatch.setattr(prm, "batch_size", 1)
    prm(PROMPTS, COMPLETIONS)
    for one, many in zip(prm.last_step_scores, batched):
        assert one == pytest.approx(many, abs=1e-5)


def test_flops_from_scored_tokens(prm):
    prm.pop_flops()
    prm(PROMPTS, COMPLETIONS)  # batch_size=3: batches of 3 and 1
    charged = prm.pop_flops()
    lengths = [len(prm.tokenizer.encode(text)) for text in _scored_texts(prm)]
    assert prm.last_token_counts == lengths
    shape = RewardShape(prm.name, "prm", prm.shape)
    expected_model = reward_flops(shape, lengths, [0] * len(lengths), convention="model")
    expected_executed = sum(reward_flops(shape, batch, [0] * len(batch), convention="executed")
                            for batch in (lengths[:3], lengths[3:]))
    assert charged.model > 0
    assert charged == RewardFlops(model=expected_model, executed=expected_executed,
                                  tokens=sum(lengths))
    assert charged.executed >= charged.model
    assert prm.pop_flops() == RewardFlops()  # popped once


def test_executed_flops_match_the_counter(prm):
    measure = pytest.importorskip("race.nn.measure")
    prm.pop_flops()
    with measure.flop_counter() as counter:
        prm(PROMPTS[:3], COMPLETIONS[:3])  # one padded batch of 3
    assert prm.pop_flops().executed == counter.get_total_flops()


def test_plain_layout_without_chat_template(prm, monkeypatch):
    monkeypatch.setattr(prm.tokenizer, "chat_template", None)
    text = prm.format_input("q?", ["a", "b"])
    assert text == f"{SYSTEM_PROMPT}\nq?\na{TAG}b{TAG}"
    rewards = prm(["q?"], ["a\n\nb"])
    assert len(prm.last_step_scores[0]) == 2 and 0.0 <= rewards[0] <= 1.0


def test_mismatched_lengths_refused(prm):
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        prm(["a", "b"], ["c"])


def test_nan_scores_are_caught(prm, monkeypatch):
    def nan_forward(input_ids=None, attention_mask=None, **kwargs):
        return (torch.full((*input_ids.shape, 2), float("nan")),)

    monkeypatch.setattr(prm.model, "forward", nan_forward)
    with pytest.raises(ValueError, match=r"value nan outside \[0.0, 1.0\].*a broken completion"):
        prm(["q"], ["a broken completion"])


def test_scores_a_math_trace_split_as_the_model_card_splits_it(prm, tmp_path):
    """A task=math trace (MATH-500's layout, LaTeX steps separated by blank lines, a
    \\boxed{} answer) reaches the PRM as the model card lays it out: the bare problem as
    the user's turn, one <extra_0> after each step, one score per step."""
    import json

    from race.rewards import build_reward
    from race.tasks.math import MathTask

    problem = "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates."
    data = tmp_path / "math500.jsonl"
    data.write_text(json.dumps({"problem": problem, "solution": "r = 3 and theta = pi/2, so "
                                "$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$",
                                "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
                                "subject": "Precalculus", "level": 2,
                                "unique_id": "test/precalculus/807.json"}) + "\n")
    task = MathTask(source="", eval=json.dumps({"math500": str(data)}))
    example = task.sample("math500", 1)[0]
    trace = ("We have $r = \\sqrt{0^2 + 3^2} = 3$.\n\n"
             "The point lies on the positive $y$-axis, so $\\theta = \\frac{\\pi}{2}$.\n\n"
             "The answer is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$.")
    steps = split_steps(trace)
    assert len(steps) == 3
    text = prm.format_input(example.problem, steps)
    assert f"<|im_start|>user\n{problem}<|im_end|>" in text
    assert text.count(TAG) == 3 and text.endswith(f"\\right)}}$.{TAG}<|im_end|>\n")
    rewards = prm([example.problem], [trace])
    assert len(prm.last_step_scores[0]) == 3 and 0.0 <= rewards[0] <= 1.0
    assert task.verify(trace, example.answer)  # the rule reward pays the same trace
    rule = build_reward({"kind": "rule", "name": "rule"}, task)
    assert rule([example.prompt], [trace], answer=[example.answer]) == [1.0]
