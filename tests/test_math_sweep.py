"""`task=math` end to end on CPU: a stand-in policy trained on Polaris-format rows, with
GSM8K (a hub snapshot's layout) and MATH-500 (its JSONL) as named evaluation targets,
through `race sweep` to a report that ranks on a named target, and `race validate`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gsm8k_rows  # tests/conftest.py

from bench.common import select_best_cell

pytest.importorskip("torch", reason="pilots train with torch")
pd = pytest.importorskip("pandas", reason="the GSM8K snapshot is parquet")

# MATH-500's layout: problem, solution ending in \boxed{}, answer, subject, level, unique_id
MATH500 = [("What is $3 + 4 \\cdot 2$?", "11"), ("Simplify $\\sqrt{18}$.", "3\\sqrt{2}"),
           ("Solve $2x = 7$.", "\\frac{7}{2}"), ("Expand $(x+1)^2 - x^2$.", "2x+1"),
           ("What is $9 \\cdot \\pi / \\pi$?", "9"),
           ("Convert $(0, 3)$ to polar coordinates.", "\\left( 3, \\frac{\\pi}{2} \\right)")]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def math_world(standin, tmp_path_factory):
    root = tmp_path_factory.mktemp("math")
    polaris = _jsonl(root / "polaris.jsonl", [
        {"problem": r["question"], "answer": r["answer"].rsplit("#### ", 1)[1],
         "difficulty": f"{i % 8}/8"} for i, r in enumerate(standin["rows"])])
    snapshot = root / "gsm8k"
    for split, seed in (("train", 3), ("test", 4)):
        (snapshot / "main").mkdir(parents=True, exist_ok=True)
        pd.DataFrame(gsm8k_rows(30, seed=seed)).to_parquet(
            snapshot / "main" / f"{split}-00000-of-00001.parquet")
    math500 = _jsonl(root / "math500.jsonl", [
        {"problem": p, "solution": f"Work it out. The answer is $\\boxed{{{a}}}$.",
         "answer": a, "subject": "Algebra", "level": 2, "unique_id": f"test/algebra/{i}.json"}
        for i, (p, a) in enumerate(MATH500)])
    return {"polaris": polaris, "gsm8k": snapshot, "math500": math500,
            "policy": standin["policy"], "root": root}


def _race(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "race.cli", *args], capture_output=True,
                          text=True, timeout=1200, cwd=cwd)


@pytest.mark.slow
def test_math_sweep_ranks_on_a_named_target_and_reports_every_target(math_world, tmp_path):
    w = math_world
    out = _race(["sweep", "task=math", f"task.source={w['polaris']}",
                 f"task.eval.gsm8k={w['gsm8k']}", f"task.eval.math500={w['math500']}",
                 f"model={w['policy']}", "reward=rule", "grid.axes={}",
                 "grid.group_size=2,4", "grid.update_epochs=1", "grid.prompts_per_step=2",
                 "grid.max_new_tokens=16",
                 "budget=1e10", "pilot.fraction=0.25", "selection.policy=flat",
                 "pilot.select_target=gsm8k", "pilot.eval_examples=8",
                 "pilot.select_examples=8", "pilot.checkpoints=[1.0]", "launcher=inline",
                 f"sweep.out_dir={tmp_path}", "sweep.name=math"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "math"
    summaries = [json.loads(p.read_text()) for p in sweep.glob("cells/*/summary.json")]
    assert len(summaries) == 2 and all(s["status"] == "ok" for s in summaries)
    for summary in summaries:
        assert set(summary["final_eval"]) == {"val", "test", "gsm8k", "math500"}
    # MATH-500 here has 6 problems, fewer than the 8 asked: each is scored once, n = 6
    for metrics in sweep.glob("cells/*/metrics.jsonl"):
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        math = [r for r in rows if r.get("kind") == "eval" and r["target"] == "math500"]
        assert math and all(len(r["correct"]) == len(MATH500) for r in math)
    selection = json.loads((sweep / "selection.json").read_text())
    assert selection["target"] == "gsm8k"
    board = (sweep / "leaderboard.md").read_text()
    assert "## Target: gsm8k (primary)" in board
    for target in ("val", "test", "math500"):
        assert f"## Target: {target}" in board
    select_best_cell(sweep)  # the stand-in learns nothing in 2 steps
    check = _race(["validate", str(sweep), "validate.top_k=1", "validate.select_examples=8"],
                  tmp_path)
    assert check.returncode == 0, check.stderr[-3000:]
    assert (sweep / "validate").is_dir()


class _TowerTexts:
    """The pilot's own backend with every completion's text replaced by power towers (the
    token ids, log-probs and FLOPs stay the backend's): what a policy that learned to
    write ``\\boxed{10^{10^{10}}}`` would hand the verifier, at every step and every read."""

    TEXTS = ("So the answer is $\\boxed{10^{10^{10}}}$.", "$\\boxed{5}$",
             "\\boxed{9^{9^9}}", "The answer is $\\boxed{2^{2^{2^{2^{2}}}}}$")

    def __init__(self, backend):
        self._backend = backend
        self.name = backend.name

    def generate(self, prompts, **kw):
        import dataclasses

        out = self._backend.generate(prompts, **kw)
        texts = tuple(self.TEXTS[i % len(self.TEXTS)] for i in range(len(out.texts)))
        return dataclasses.replace(out, texts=texts)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def test_a_math_pilot_whose_completions_hold_towers_finishes(math_world, tmp_path):
    """Issue "Reports that never claim more than the data", new case 1: a completion
    holding a power tower stalls no pilot. Every completion of every step and every read is
    a tower (or 5): the pilot runs to its budget with status ok and every read done. (A
    tower gold is refused when the data loads: tests/test_rewards_verify.py.)"""
    import dataclasses
    import time

    from race.core.specs import RunSpec
    from race.pilot.budget import worst_step_flops
    from race.pilot.components import build_components
    from race.pilot.loop import run_pilot

    task = (("name", "math"), ("source", str(math_world["polaris"])))
    spec = RunSpec(str(math_world["policy"]), (("kind", "rule"), ("name", "rule")), task, 1.0,
                   prompts_per_step=2, group_size=2, max_new_tokens=8, checkpoints=(0.5, 1.0),
                   eval_examples=8, eval_targets=("val", "test"), select_examples=8)
    spec = dataclasses.replace(spec, budget_flops=worst_step_flops(spec, 64) * 8)
    parts = build_components(spec)
    parts = dataclasses.replace(parts, backend=_TowerTexts(parts.backend))
    start = time.perf_counter()
    summary = run_pilot(spec, tmp_path / "cell", components=parts, checkpoint_every=0)
    elapsed = time.perf_counter() - start
    assert summary["status"] == "ok", summary["error"]
    assert summary["steps"] >= 2
    assert elapsed < 300, f"took {elapsed:.0f} s"  # a stalled verifier never returns
    metrics = [json.loads(line) for line in w_lines(tmp_path / "cell" / "metrics.jsonl")]
    reads = {(r["target"], r["checkpoint"]) for r in metrics if r["kind"] == "eval"}
    assert reads >= {(t, c) for t in ("val", "test") for c in (0.5, 1.0)}  # every read ran
    steps = [r for r in metrics if r["kind"] == "step"]
    assert len(steps) == summary["steps"] and all(0 <= r["train_reward"] <= 1 for r in steps)

def w_lines(path: Path) -> list[str]:
    return [line for line in Path(path).read_text().splitlines() if line.strip()]
