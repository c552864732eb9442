"""Real-model path on CPU with local stand-ins: `model=<folder>` policies with a BPE
tokenizer and a chat template, GSM8K-format data split by hash, the rule verifier and a
Qwen2.5-Math-PRM-style reward model, through `race sweep` to a full report."""

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch", reason="torch runs the pilots")

from race.catalog import conf_dir, load_model_shape  # noqa: E402
from race.errors import UsageError  # noqa: E402
from race.tasks import Gsm8kTask, with_chat_template  # noqa: E402

PHASES = ("rollout", "learning", "feedback", "eval")
PRM_MAX_STEPS = 8


def gsm8k_rows(n: int, seed: int = 0) -> list[dict]:
    """GSM8K-format word problems: two worked steps with calculator notes, then #### N."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        name = rng.choice(["Tom", "Ana", "Lee", "Mia", "Raj", "Zoe"])
        item = rng.choice(["apples", "pens", "books", "coins", "shells"])
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(1, 9)
        total, left = a + b, a + b - c
        rows.append({"question": f"{name} has {a} {item} and buys {b} more. Then {name} "
                                 f"gives away {c}. How many {item} does {name} have now?",
                     "answer": f"{name} has {a} + {b} = <<{a}+{b}={total}>>{total} {item}.\n"
                               f"After giving away {c}, {name} has {total} - {c} = "
                               f"<<{total}-{c}={left}>>{left}.\n#### {left}"})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two policy stand-ins of different widths, a Qwen-PRM-style stand-in on the same
    text (its vocabulary plus <extra_0>), GSM8K-format data, and a race/conf/ folder listing
    the PRM as model and reward ``prm-standin``."""
    from race.rewards.qwen_prm import QwenPRM
    from race.warmstart.standin import build_prm_standin, build_standin

    root = tmp_path_factory.mktemp("real")
    rows = gsm8k_rows(240)
    data = write_jsonl(root / "gsm8k.jsonl", rows)
    ood = write_jsonl(root / "ood.jsonl", gsm8k_rows(20, seed=1))
    texts = [row["question"] + "\n" + row["answer"] for row in rows]
    base = load_model_shape("qwen2.5-0.5b")

    def mini(hidden: int, head_dim: int):
        return dataclasses.replace(base, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_layers=2, num_heads=4, num_kv_heads=2,
                                   head_dim=head_dim, vocab_size=512)

    policy_a = build_standin(root / "policy-a", mini(64, 16), texts)
    policy_b = build_standin(root / "policy-b", mini(96, 24), texts)
    prm_shape = dataclasses.replace(mini(64, 16), name="prm-standin", head="prm_value",
                                    tied_embeddings=False, step_tag="<extra_0>")
    prm_folder = build_prm_standin(root / "prm", prm_shape, texts)
    prm = QwenPRM(prm_folder, prm_shape, trust_remote_code=False, name="prm-standin",
                  max_steps=PRM_MAX_STEPS)
    conf = root / "conf"
    shutil.copytree(conf_dir(), conf)
    model = dataclasses.asdict(prm_shape) | {"hf_id": str(prm_folder)}
    (conf / "model" / "prm-standin.yaml").write_text(yaml.safe_dump(model))
    (conf / "reward" / "prm-standin.yaml").write_text(yaml.safe_dump({
        "name": "prm-standin", "kind": "prm", "model": "prm-standin", "aggregate": "min",
        "tag_tokens_per_step": 1, "overhead_tokens": prm.overhead_tokens(),
        "max_steps": PRM_MAX_STEPS}))
    return dict(root=root, data=data, ood=ood, a=policy_a, b=policy_b, conf=conf)


def race(args: list[str], conf: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RACE_CONF_DIR=str(conf))
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=1200, cwd=cwd, env=env)


@pytest.mark.slow
def test_sweep_of_local_policies_on_gsm8k_with_rule_and_qwen_prm(world, tmp_path):
    out = race(["sweep", f"model={world['a']},{world['b']}", "task=gsm8k",
                f"task.source={world['data']}", f"task.ood_source={world['ood']}",
                "reward=rule,prm-standin", "budget=1e10", "pilot.fraction=0.25",
                "accounting.measure=true", "launcher=inline", "selection.policy=flat",
                "grid.axes={}", "grid.group_size=2", "grid.update_epochs=1",
                "grid.prompts_per_step=2", "grid.max_new_tokens=24",
                "pilot.eval_targets=[val,test,ood]", "pilot.eval_examples=4",
                "pilot.select_examples=4", "pilot.checkpoints=[1.0]",
                f"sweep.out_dir={tmp_path}", "sweep.name=real"], world["conf"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "real"
    for name in ("leaderboard.md", "compute_card.md", "selection.json", "pilots.csv"):
        assert (sweep / name).is_file(), name
    summaries = [json.loads(p.read_text()) for p in sweep.glob("cells/*/summary.json")]
    assert len(summaries) == 4  # 2 policies x 2 rewards
    rewards = set()
    for summary in summaries:
        spec = json.loads((sweep / "cells" / summary["cell_id"] / "spec.json").read_text())
        rewards.add(spec["reward"]["name"])
        assert summary["status"] == "ok", summary["error"]
        assert summary["steps"] >= 1
        assert 0 < summary["total_flops"] <= summary["budget_flops"]
        measured, executed = summary["flops_measured"], summary["flops_executed"]
        for phase in PHASES:
            if phase == "feedback" and spec["reward"]["name"] == "rule":
                assert measured[phase] == executed[phase] == 0
                continue
            assert measured[phase] > 0, phase
            assert abs(measured[phase] - executed[phase]) / measured[phase] <= 1e-3, phase
        assert set(summary["final_eval"]) == {"val", "test", "ood"}
    assert rewards == {"rule", "prm-standin"}


def test_gsm8k_file_is_split_by_hash_and_prompts_use_the_chat_template(world):
    from transformers import AutoTokenizer

    task = Gsm8kTask(source=str(world["data"]), ood_source=str(world["ood"]))
    splits = {s: {ex.problem for ex in task.rows(s)} for s in ("train", "val", "test")}
    assert all(splits.values())
    assert not (splits["train"] & splits["val"] or splits["train"] & splits["test"]
                or splits["val"] & splits["test"])
    assert sum(map(len, splits.values())) == 240
    assert len(task.rows("ood")) == 20

    chat = with_chat_template(task, AutoTokenizer.from_pretrained(world["a"]))
    [example] = chat.sample("val", 1)
    assert example.prompt.startswith("<|im_start|>user\n" + example.question)
    assert example.prompt.endswith("'#### <number>'.<|im_end|>\n<|im_start|>assistant\n")
    assert example.problem == example.question in splits["val"]
    with pytest.raises(UsageError, match="task.ood_source: unset"):
        Gsm8kTask(source=str(world["data"])).rows("ood")


def test_a_prompt_longer_than_the_context_fails_the_pilot_with_one_line(world, tmp_path):
    from race.core.specs import RunSpec
    from race.pilot.budget import worst_step_flops
    from race.pilot.loop import run_pilot
    from race.warmstart.standin import build_standin

    short = build_standin(tmp_path / "short-context", load_model_shape(str(world["a"])),
                          [world["data"].read_text()], max_position_embeddings=48)
    spec = RunSpec(str(short), (("kind", "rule"), ("name", "rule")),
                   (("name", "gsm8k"), ("source", str(world["data"]))), 1.0,
                   prompts_per_step=2, group_size=2, max_new_tokens=16, checkpoints=(1.0,),
                   eval_targets=("val",), eval_examples=2, select_examples=2)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 64) * 2)
    summary = run_pilot(spec, tmp_path / "cell")
    assert summary["status"] == "failed" and summary["steps"] == 0
    assert summary["error"].startswith("PromptTooLong: model=")
    assert "exceeds its context of 48 tokens" in summary["error"]
    assert summary["total_flops"] == 0


@pytest.mark.parametrize("case", ["no-tokenizer", "no-config"])
def test_a_broken_model_folder_exits_2_with_one_line(world, tmp_path, case):
    folder = tmp_path / "broken"
    shutil.copytree(world["a"], folder)
    doomed = (["tokenizer.json", "tokenizer_config.json"] if case == "no-tokenizer"
              else ["config.json"])
    for name in doomed:
        (folder / name).unlink()
    out = race(["sweep", f"model={folder}", "task=gsm8k", f"task.source={world['data']}",
                "budget=4e10", f"sweep.out_dir={tmp_path / 'results'}"], world["conf"],
               tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    needle = "no tokenizer in" if case == "no-tokenizer" else "no config.json in that folder"
    assert needle in lines[0]
    assert not (tmp_path / "results").exists()


def test_a_prm_of_another_tokenizer_is_refused_before_anything_runs(world, tmp_path):
    out = race(["plan", "model=tiny-s", "reward=prm-standin", "budget=1e12"], world["conf"],
               tmp_path)
    assert out.returncode == 2, out.stderr
    assert "reward=prm-standin: its tokenizer" in out.stderr


@pytest.mark.slow
def test_the_readme_gsm8k_workstation_command_ends_with_every_pilot_ok(world, tmp_path):
    """README's "Running on GPUs" form (model folders, task=gsm8k, task.source, no
    task.ood_source, so the default eval targets are val and test), on CPU: the grid is
    shrunk (one config per model, a flat grid, small steps and evals; the conf grid's
    prm-tiny-s cells are refused: another tokenizer) and launcher.gpus is left
    out (no GPU here); nothing else is added. The report is then rebuilt after the model
    folders moved: it reads their shapes from spec.json, not from config.json."""
    a, b = tmp_path / "models" / "a", tmp_path / "models" / "b"
    shutil.copytree(world["a"], a)
    shutil.copytree(world["b"], b)
    out = race(["sweep", "budget=1e10", f"model={a},{b}", "task=gsm8k",
                f"task.source={world['data']}",
                "grid.axes={}", "selection.policy=flat", "pilot.fraction=0.25",
                "grid.prompts_per_step=2", "grid.group_size=2", "grid.update_epochs=1",
                "grid.max_new_tokens=16", "pilot.eval_examples=4", "pilot.select_examples=4",
                f"sweep.out_dir={tmp_path}", "sweep.name=readme"], world["conf"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "readme"
    summaries = [json.loads(p.read_text()) for p in sweep.glob("cells/*/summary.json")]
    assert len(summaries) == 2
    for summary in summaries:
        assert summary["status"] == "ok", summary["error"]
        assert set(summary["final_eval"]) == {"val", "test"}
    before = (sweep / "compute_card.md").read_text()
    shutil.rmtree(tmp_path / "models")  # the checkpoints moved away after the sweep
    again = race(["report", str(sweep)], world["conf"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (sweep / "compute_card.md").read_text() == before
