"""Every bench script's ``--quick`` mode runs its whole code path on a miniature problem
(``python -m bench.<name> --quick``, from the repository root) and prints its result line;
plus the shared helpers of ``bench/common.py``.

``bench/device_check.py --quick`` (its ``--smoke``) and ``--perf --smoke`` are run by
``tests/test_devices.py`` and ``tests/test_device_check.py``, so they are not run again here.
Nothing here asserts a wall-clock bound: the numbers a quick run prints are not
measurements, only proof that the script still runs end to end. The runs of one session
share one scratch model cache (``RACE_BENCH_CACHE``, read by ``common.use_scratch_cache``),
so the quick warm starts several scripts use are built once.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import common

ROOT = Path(__file__).parents[1]

# script -> the keys its last line prints (what each script's docstring promises)
LAST_LINE = {
    "curve_bank": ["wrote ", "cells from", "git "],
    "flops_accuracy": ["max_rel_error_executed="],
    "generation_paths": ["greedy_equal=", "speed_ratio="],
    "learner_memory": ["peak_ratio=", "max_logprob_diff="],
    "learning_gain": ["gain_mean=", "gain_std=", "seeds=2"],
    "learning_signal": ["best_gain_se=", "seeds=1", "setting=", "model=tiny-s"],
    "pilot_profile": ["overhead_fraction="],
    "plan_scale": ["cells_per_s="],
    "prediction_coverage": ["coverage_90_w3=", "width_w3=", "mae_w3=", "mae_last_read_w3="],
    "prm_quality": ["min_auc="],
    "reliability": ["reliability_w1=", "cannot_share_w1=", "reliability_w2=",
                    "cannot_share_w2="],
    "race_fidelity": ["spearman=", "kendall=", "top1_regret=", "pilot_cost_share="],
    "rollout_throughput": ["vllm_over_hf="],
    "selection_replay": ["worlds=", "regret_ladder_w1=", "regret_random_w1=",
                         "cannot_rank_share_w1=", "cannot_rank_share_w2=",
                         "regret_ladder_w3=", "cannot_rank_share_w3="],
    "sweep_overhead": ["overhead_fraction="],
    "testbed": ["min_gain_se=", "within_size_spread_se=", "conditional_changes="],
    "testbed_bank": ["bank v4 (world 1):", "cells done", "h left at the measured rate"],
    "testbed_figure": ["wrote ", ".png"],
    "validate_default": ["pick=", "here_best_value=", "within_1se=", "above="],
    "warmstart": ["headroom ", "in_range="],
}
# the ones that train or run pilots (tens of seconds each on 2 cores); CI runs them all
SLOW = {"curve_bank", "flops_accuracy", "generation_paths", "learner_memory",
        "learning_gain", "learning_signal", "pilot_profile", "prm_quality", "race_fidelity",
        "rollout_throughput", "selection_replay", "sweep_overhead", "testbed_bank",
        "validate_default",
        "warmstart"}
NEEDS = {"selection_replay": ("syne_tune", "optuna")}  # the bench extra (make test installs it)


def test_every_bench_script_has_a_quick_run_here():
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")
               if 'if __name__ == "__main__"' in p.read_text()}
    assert scripts - {"device_check"} == set(LAST_LINE), scripts ^ set(LAST_LINE)


def committed_outputs() -> list[tuple[str, int]]:
    """The measurements a full run writes (bench/data, bench/figures), with their mtimes."""
    return sorted((str(p), p.stat().st_mtime_ns) for folder in (common.DATA, common.FIGURES)
                  for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """The scratch model cache every quick run of this session shares."""
    return tmp_path_factory.mktemp("bench-cache")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in sorted(LAST_LINE)])
def test_quick_mode_runs_and_prints_its_result_line(name, tmp_path, shared_cache):
    for module in NEEDS.get(name, ()):
        pytest.importorskip(module, reason="needs the bench extra: pip install 'race-rl[bench]'")
    data = committed_outputs()
    out = subprocess.run([sys.executable, "-m", f"bench.{name}", "--quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TMPDIR": str(tmp_path), "MPLBACKEND": "Agg",
                              common.SHARED_CACHE: str(shared_cache)})
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert all(key in last for key in LAST_LINE[name]), last
    assert committed_outputs() == data  # a quick run writes nothing under bench/data, figures


def test_the_script_and_module_forms_both_start():
    for form in (["bench/plan_scale.py"], ["-m", "bench.plan_scale"]):
        out = subprocess.run([sys.executable, *form, "--help"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0 and "--quick" in out.stdout, out.stderr


# ------------------------------------------------------------------ bench.common


def test_merged_keeps_the_last_value_of_a_key_in_its_first_place():
    assert common.merged(["a=1", "b=2"], ("a=3", "c=4")) == ["a=3", "b=2", "c=4"]
    assert common.merged(["pilot.checkpoints=[0.5,1.0]"]) == ["pilot.checkpoints=[0.5,1.0]"]


def test_quick_pilot_gives_each_key_once():
    keys = [o.split("=", 1)[0] for o in common.QUICK_PILOT]
    assert len(keys) == len(set(keys))


def test_write_json_makes_its_folder(tmp_path):
    path = common.write_json(tmp_path / "a" / "b.json", {"x": Path("p")})
    assert path.read_text() == '{\n  "x": "p"\n}'


def test_median_seconds_returns_the_last_result():
    calls = []
    seconds, result = common.median_seconds(lambda: calls.append(1) or len(calls), 3)
    assert result == 3 and seconds >= 0


def test_scratch_and_the_scratch_cache_stay_out_of_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv("RACE_CACHE_DIR", raising=False)
    monkeypatch.delenv(common.SHARED_CACHE, raising=False)
    folder = common.use_scratch_cache()
    assert folder.parent == tmp_path and str(folder) == os.environ["RACE_CACHE_DIR"]
    assert common.scratch("x").parent == tmp_path
    assert common.use_scratch_cache() != folder  # a fresh one each time


def test_a_shared_scratch_cache_is_used_but_never_the_users_or_the_repositorys(
        monkeypatch, tmp_path):
    monkeypatch.delenv("RACE_CACHE_DIR", raising=False)
    monkeypatch.setenv(common.SHARED_CACHE, str(tmp_path / "shared"))
    assert common.use_scratch_cache() == tmp_path / "shared" == common.use_scratch_cache()
    assert os.environ["RACE_CACHE_DIR"] == str(tmp_path / "shared")
    for where in (common.USER_CACHE, common.DATA / "cache"):
        monkeypatch.setenv(common.SHARED_CACHE, str(where))
        with pytest.raises(SystemExit, match=common.SHARED_CACHE):
            common.use_scratch_cache()
    assert not (common.DATA / "cache").exists()


def test_every_bench_cli_describes_itself_with_its_docstrings_whole_first_paragraph():
    # `--help` shows the docstring's first paragraph: it must be whole sentences, not a
    # first line cut mid-phrase (as testbed_figure's "... per size, reward system and" was)
    import ast

    scripts = [p for p in sorted((ROOT / "bench").glob("*.py"))
               if "ArgumentParser(" in p.read_text()]
    assert len(scripts) >= 15
    for path in scripts:
        source = path.read_text()
        assert 'ArgumentParser(description=__doc__.split("\\n\\n")[0])' in source, path.name
        summary = ast.get_docstring(ast.parse(source)).split("\n\n")[0].strip()
        assert summary[-1] in ".?", (path.name, summary[-40:])


# the science scripts: thin entry points over bench/science (worlds as data)
THIN = {"reliability": "reliability", "prediction_coverage": "coverage",
        "selection_replay": "selection", "testbed": "interactions",
        "testbed_bank": "bank_runs"}


def test_the_science_scripts_are_thin_entry_points_callable_in_process(capsys):
    import importlib

    for script, module in THIN.items():
        text = (ROOT / "bench" / f"{script}.py").read_text()
        assert f"from bench.science.{module} import main" in text, script
        assert len(text.splitlines()) <= 10, script  # a docstring, the import, the call
    importlib.import_module("bench.science.coverage").main(["--quick"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("coverage_90_w3=")
