"""race.preflight: the checks of data files and model folders that race plan, race sweep
and the pilot share, and remote code that runs only with reward.trust_remote_code=true."""

import json
import shutil
from pathlib import Path

import pytest

from race import preflight
from race.errors import UsageError

pytest.importorskip("torch", reason="the stand-in folders are built with torch")


def _remote_code_folder(tmp: Path, prm: Path) -> tuple[Path, Path]:
    """A copy of a PRM folder whose config.json's auto_map names a modelling file that
    writes a marker when imported: (folder, marker)."""
    folder = tmp / "prm-with-code"
    shutil.copytree(prm, folder)
    marker = tmp / "MARKER"
    source = Path(preflight.__file__).parent / "nn" / "qwen_prm_modeling.py"
    (folder / "marker_prm.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('folder code ran')\n"
        + source.read_text().replace("from __future__ import annotations\n", ""))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "marker_prm.Qwen2ForProcessRewardModel"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder, marker


def _entry(folder: Path, **extra) -> dict:
    return {"name": "prm-standin", "kind": "prm", "model": str(folder), "aggregate": "min",
            "max_steps": 8} | extra


def _shape(world: dict, folder: Path):
    """The PRM stand-in's shape, loading from ``folder``."""
    import dataclasses

    return dataclasses.replace(world["prm_shape"], hf_id=str(folder))


def test_a_reward_folder_with_code_is_refused_without_the_flag_and_runs_none(tmp_path,
                                                                             standin):
    from race.rewards import build_reward

    folder, marker = _remote_code_folder(tmp_path, standin["prm"])
    with pytest.raises(UsageError) as error:
        build_reward(_entry(folder), task=None, shape=_shape(standin, folder))
    message = str(error.value)
    assert "\n" not in message and "reward.trust_remote_code=true" in message
    assert message.startswith(f"reward.model={folder}: its config.json has an auto_map")
    assert not marker.exists()


def test_with_the_flag_the_folder_code_loads(tmp_path, standin, monkeypatch):
    from race.rewards import build_reward

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    folder, marker = _remote_code_folder(tmp_path, standin["prm"])
    reward = build_reward(_entry(folder, trust_remote_code=True), task=None,
                          shape=_shape(standin, folder))
    assert marker.read_text() == "folder code ran"
    assert type(reward.model).__module__.endswith("marker_prm")
    [score] = reward(["Tom has 2 pens."], ["Tom has 2 pens.\n#### 2"])
    assert 0.0 <= score <= 1.0


def test_a_reward_folder_without_code_loads_into_races_copy(standin):
    from race.nn.qwen_prm_modeling import Qwen2ForProcessRewardModel
    from race.rewards import build_reward

    reward = build_reward(_entry(standin["prm"]), task=None,
                          shape=_shape(standin, standin["prm"]))
    assert type(reward.model) is Qwen2ForProcessRewardModel


def test_tokenizer_size_reads_the_files_as_len_tokenizer_does(standin):
    from transformers import AutoTokenizer

    assert preflight.tokenizer_size(standin["policy"]) == len(
        AutoTokenizer.from_pretrained(standin["policy"]))


def test_the_pilot_builds_its_task_with_the_plans_check(standin, tmp_path):
    """One function decides what data is valid, for the plan and the pilot alike."""
    three = tmp_path / "three.jsonl"
    three.write_text("".join(json.dumps(r) + "\n" for r in standin["rows"][:3]))
    entry = {"name": "gsm8k", "source": str(three)}
    for local_only in (True, False):
        with pytest.raises(UsageError, match="no val problems"):
            preflight.open_task(entry, ("val", "test"), local_only=local_only)
    task = preflight.open_task({"name": "gsm8k", "source": str(standin["data"])},
                               ("val", "test"))
    assert task.rows("val") and task.rows("test")
    assert preflight.open_task({"name": "arith"}, ("val",), local_only=True) is None
