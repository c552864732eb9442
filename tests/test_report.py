"""Leaderboard, compute card, plots and selection (race.report.write) on hand-made sweep folders."""

import json

import pandas as pd
import pytest

from race.analysis.aggregate import compare_predictions
from race.analysis.curves import sigmoid
from race.analysis.headline import FINDING_COLUMNS, best_by_target
from race.analysis.select import ladder_guards
from race.core.fmt import fmt_flops, interval
from race.core.fmt import params as fmt_params
from race.core.stats import normal_interval
from race.report.leaderboard import _guards_markdown
from race.report.validation import VALIDATION_HEADING, validation_section
from race.report.write import write_report
from race.run.full_runs import at_full_budget
from race.store import io as results

PILOT = 1e12  # pilot budget per cell, FLOPs
FULL = 1.6e13  # full-run budget, FLOPs (pilot fraction 1/16)
CHECKPOINTS = (0.0, 0.25, 0.5, 0.75, 1.0)
N_EXAMPLES = 20  # eval problems per target
STEPS = {"tiny-s": 16, "tiny-m": 8}  # the same budget buys a smaller policy more steps
SHARES = {  # realized phase shares -> regimes (thresholds: feedback .15, learning .8, search .4)
    "search": {"rollout": 0.45, "learning": 0.55, "feedback": 0.0},
    "feedback": {"rollout": 0.35, "learning": 0.45, "feedback": 0.20},
    "learning": {"rollout": 0.12, "learning": 0.88, "feedback": 0.0},
}


def config(name, model, reward, group_size, update_epochs, shares, test, ood, seeds=(0, 1)):
    """One allocation config: (R0, A, C_mid/PILOT, B) of its test and ood sigmoids."""
    return {"config_id": name, "model": model, "reward": reward, "group_size": group_size,
            "update_epochs": update_epochs, "shares": SHARES[shares], "test": test,
            "ood": ood, "seeds": seeds}


# tiny-m + prm is best on test, tiny-m + rule on ood: the targets disagree.
CONFIGS = [
    config("cfg-s-rule", "tiny-s", "rule", 4, 1, "search", (0.10, 0.40, 0.3, 2.0),
           (0.10, 0.30, 0.3, 2.0)),
    config("cfg-s-prm", "tiny-s", "prm-tiny-s", 4, 1, "feedback", (0.10, 0.50, 0.4, 2.0),
           (0.10, 0.35, 0.4, 2.0)),
    config("cfg-m-rule", "tiny-m", "rule", 4, 1, "search", (0.15, 0.55, 0.5, 1.5),
           (0.15, 0.70, 0.4, 1.5)),
    config("cfg-m-prm", "tiny-m", "prm-tiny-s", 4, 1, "feedback", (0.15, 0.75, 0.5, 1.5),
           (0.15, 0.50, 0.5, 1.5)),
    config("cfg-s-mu4", "tiny-s", "rule", 2, 4, "learning", (0.10, 0.45, 0.6, 2.5),
           (0.10, 0.30, 0.6, 2.5), seeds=(0,)),
]
FAILED = config("cfg-m-g8", "tiny-m", "rule", 8, 2, "search", (0, 0, 1, 1), (0, 0, 1, 1),
                seeds=(0,))
MISSING = config("cfg-m-prm-g8", "tiny-m", "prm-tiny-s", 8, 1, "feedback", (0, 0, 1, 1),
                 (0, 0, 1, 1), seeds=(0,))
OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def accuracy(params, fraction, seed):
    """The config's sigmoid at a checkpoint, plus seed noise, on the 1/N_EXAMPLES grid."""
    r0, a, mid, b = params
    value = r0 if fraction == 0 else sigmoid(fraction * PILOT, r0, a, mid * PILOT, b)
    value += 0.06 * (seed - 0.5) * (fraction > 0)
    return round(min(max(value, 0.0), 1.0) * N_EXAMPLES) / N_EXAMPLES


def write_cell(sweep, cfg, seed, *, status="ok", task="arith"):
    """spec.json, metrics.jsonl and summary.json of one cell; returns its summary."""
    cell_id = f"{cfg['config_id']}-s{seed}"
    folder = sweep / "cells" / cell_id
    results.write_json(folder / "spec.json", {
        "cell_id": cell_id, "config_id": cfg["config_id"], "model": cfg["model"],
        "seed": seed, "prompts_per_step": 8, "group_size": cfg["group_size"],
        "max_new_tokens": 40, "update_epochs": cfg["update_epochs"], "minibatch_size": 0,
        "lr": 5e-4, "lora_rank": 16, "kl_coef": 0.0, "temperature": 1.0, "backend": "hf",
        "convention": "model", "budget_flops": PILOT, "task": {"name": task},
        "reward": {"name": cfg["reward"], "kind": "rule" if cfg["reward"] == "rule" else "prm"}})
    if status == "missing":
        return None
    spent = 0.98 * PILOT if status == "ok" else 0.3 * PILOT
    flops = {p: s * spent for p, s in cfg["shares"].items()} | {"eval": 0.05 * spent}
    rows, finals = [], {}
    steps = STEPS[cfg["model"]] if status == "ok" else 2
    per_eval = {}
    for step in range(steps + 1):
        fraction = step / steps
        if step:
            rows.append({"kind": "step", "step": step, "charged_flops": spent * step / steps})
        if status == "ok" and fraction in CHECKPOINTS:
            for target in ("test", "ood"):
                acc = accuracy(cfg[target], fraction, seed)
                hits = round(acc * N_EXAMPLES)
                correct = [1] * hits + [0] * (N_EXAMPLES - hits)
                rows.append({"kind": "eval", "target": target, "checkpoint": fraction,
                             "accuracy": acc, "mean_reward": acc, "correct": correct})
                per_eval.setdefault(target, []).append(acc)
                finals[target] = {"accuracy": acc, "mean_reward": acc, "checkpoint": fraction}
    results.write_jsonl(folder / "metrics.jsonl", rows)
    summary = {"cell_id": cell_id, "status": status, "error": None if status == "ok" else OOM,
               "budget_flops": PILOT, "convention": "model", "steps": steps,
               "total_flops": spent, "flops": flops, "wall_s": {p: 1.0 for p in flops},
               "final_eval": finals,
               "initial_eval": {t: {"accuracy": v[0], "mean_reward": v[0]}
                                for t, v in per_eval.items()}}
    results.write_json(folder / "summary.json", summary)
    return summary


def make_sweep(root, configs=CONFIGS, *, failed=True, missing=True):
    """A sweep folder: configs x their seeds ok, plus one failed and one missing cell."""
    sweep = root / "arith-1.6e13-fake"
    results.write_json(sweep / "sweep.json", {
        "budget_flops": FULL, "pilot_fraction": PILOT / FULL, "task": "arith",
        "config": {"regime": {"feedback_heavy": 0.15, "learning_heavy": 0.8,
                              "search_heavy": 0.4}}})
    for cfg in configs:
        for seed in cfg["seeds"]:
            write_cell(sweep, cfg, seed)
    if failed:
        write_cell(sweep, FAILED, 0, status="failed")
    if missing:
        write_cell(sweep, MISSING, 0, status="missing")
    return sweep


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    sweep = make_sweep(tmp_path_factory.mktemp("report"))
    return sweep, write_report(sweep, n_boot=200)


def _ok_finals(sweep):
    """config_id -> target -> the final accuracy of each ok seed, read from the cell files."""
    finals = {}
    for folder in sorted((sweep / "cells").iterdir()):
        if not (folder / "summary.json").is_file():
            continue  # missing: never finished
        summary = results.read_json(folder / "summary.json")
        if summary["status"] != "ok":
            continue
        config_id = results.read_json(folder / "spec.json")["config_id"]
        for target, final in summary["final_eval"].items():
            finals.setdefault(config_id, {}).setdefault(target, []).append(final["accuracy"])
    return finals


def _md_tables(text, section, heading):
    """Body rows (lists of cell strings) of the table under ``heading`` in ``section``."""
    part = text[text.index(section):]
    part = part[part.index(heading) + len(heading):]
    rows = []
    for line in part.splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:  # the first line after the table
            break
    return rows[2:]  # drop the header and the rule


# ---------------------------------------------------------------- files


def test_every_file_is_written_and_non_empty(report):
    sweep, out = report
    names = {p.name for p in out["paths"].values()}
    assert names == {"leaderboard.md", "leaderboard.csv", "compute_card.md", "compute_card.tex",
                     "frontier.png", "curves.png", "phases.png", "sizes.png",
                     "selection.json"}
    for path in out["paths"].values():
        assert path.parent == sweep and path.stat().st_size > 0, path
    assert not [p for p in sweep.iterdir() if p.name.startswith(".")]  # no temp files left


def test_pngs_are_valid_images(report):
    import matplotlib.image as mpimg

    _, out = report
    for key in ("frontier_png", "curves_png", "phases_png"):
        image = mpimg.imread(out["paths"][key])
        assert image.shape[0] > 100 and image.shape[1] > 100, key
    # One 7 x 4 in panel per target at 150 dpi: two targets stack to ~1200 px high.
    assert mpimg.imread(out["paths"]["frontier_png"]).shape[0] > 1000


def test_summary_is_compact_and_names_the_top_config(report):
    _, out = report
    lines = out["summary"].splitlines()
    assert 12 <= len(lines) <= 27
    assert out["target"] == "test"
    # the answer first: whether the pilots can rank (2 configs a size: weakly, with what
    # would make them reliable), the provisional pick, its runner-up, the lead
    assert lines[1].startswith("ranking reliability: the pilots rank these configs weakly")
    assert lines[2].startswith("the pick is provisional; reliable with: ")
    assert lines[3].startswith("provisional pick: cfg-m-prm tiny-m/prm-tiny-s G4 mu1")
    assert lines[4].startswith("runner-up: cfg-m-rule") and "at 90%" in lines[4]
    assert lines[5].startswith("full budget 1.60e+13 FLOPs buys the pick")
    by_target = next(line for line in lines if line.startswith("best by target:"))
    assert "test 0.575" in by_target and "(cfg-m-rule)" in by_target  # the targets differ
    assert "cfg-m-prm" in lines[lines.index(next(
        line for line in lines if line.startswith("top configs"))) + 1]
    assert "1 failed, 1 missing" in out["summary"]


# ---------------------------------------------------------------- leaderboard


def test_leaderboard_md_lists_ok_configs_failed_cells_and_target_agreement(report):
    sweep, _ = report
    text = (sweep / "leaderboard.md").read_text()
    for cfg in CONFIGS:
        assert f"`{cfg['config_id']}`" in text
    assert "## Target: test (primary)" in text and "## Target: ood" in text
    assert text.index("## Target: test") < text.index("## Target: ood")
    failed = [line for line in text.splitlines() if "cfg-m-g8-s0" in line]
    assert failed and "failed" in failed[0] and "CUDA out of memory" in failed[0]
    missing = [line for line in text.splitlines() if "cfg-m-prm-g8-s0" in line]
    assert missing and "missing" in missing[0] and "no summary.json" in missing[0]
    # 2 seeds x 20 problems: the seeds' SE is floored at the problems' binomial SE, so
    # the two point leaders differ within their intervals
    assert "the targets' point leaders differ, but within their intervals" in text.lower()
    assert "test -> cfg-m-prm" in text and "ood -> cfg-m-rule" in text
    assert "sigmoid (R^2" in text and "[lo, hi]" in text


def test_leaderboard_csv_has_every_target_and_fit_columns(report):
    import pandas as pd

    sweep, _ = report
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert set(board["target"]) == {"test", "ood"}
    assert len(board) == 2 * len(CONFIGS)
    assert {"rank", "mean", "lo", "hi", "prediction", "prediction_lo", "prediction_hi",
            "fit_method", "regime"} <= set(board.columns)
    test = board[board["target"] == "test"].set_index("config_id")
    assert test.loc["cfg-m-prm", "rank"] == 1
    assert test.loc["cfg-s-mu4", "regime"] == "learning-heavy"
    assert test.loc["cfg-s-prm", "regime"] == "feedback-heavy"
    assert (test["prediction_lo"] <= test["prediction"]).all()
    assert (test["prediction"] <= test["prediction_hi"]).all()


# The fixture's regimes, named by hand from SHARES and the thresholds in make_sweep.
REGIME = {"search": "search-heavy", "feedback": "feedback-heavy", "learning": "learning-heavy"}


def _expected_ranks(means):
    """1 + the number of configs with a strictly higher mean (ties share the best rank)."""
    return {c: 1 + sum(other > m + 1e-12 for other in means.values()) for c, m in means.items()}


def test_leaderboard_csv_means_and_ranks_come_from_the_cells(report):
    import pandas as pd

    sweep, _ = report
    finals = _ok_finals(sweep)
    assert set(finals) == {cfg["config_id"] for cfg in CONFIGS}  # failed/missing left out
    board = pd.read_csv(sweep / "leaderboard.csv")
    for target in ("test", "ood"):
        rows = board[board["target"] == target].reset_index(drop=True)
        means = {c: sum(v[target]) / len(v[target]) for c, v in finals.items()}
        assert sorted(rows["config_id"]) == sorted(means)
        for _, row in rows.iterrows():
            seeds = finals[row["config_id"]][target]
            assert row["mean"] == pytest.approx(means[row["config_id"]], abs=1e-12), row
            assert row["n_seeds"] == len(seeds)
            assert row["lo"] <= row["mean"] <= row["hi"]
            # the one interval every report prints: normal, score +- z SE, in [0, 1]
            assert (row["lo"], row["hi"]) == pytest.approx(
                normal_interval(row["mean"], row["se"], 0.9))
            if len(seeds) >= 2:  # the seeds' spread, floored at the problems' binomial SE
                spread = pd.Series(seeds).std(ddof=1) / len(seeds) ** 0.5
                assert row["se"] >= spread - 1e-12
                assert (row["interval_source"], row["covers"]) == ("seeds",
                                                                   "seeds and problems")
            else:
                assert (row["interval_source"], row["covers"]) == ("prompts", "problems only")
        expected = _expected_ranks(means)
        assert dict(zip(rows["config_id"], rows["rank"])) == expected
        # rows are listed best first: ranks ascend, means never rise
        assert list(rows["rank"]) == sorted(rows["rank"])
        assert rows["mean"].is_monotonic_decreasing
    by_config = {cfg["config_id"]: cfg for cfg in CONFIGS}
    for _, row in board.iterrows():
        cfg = by_config[row["config_id"]]
        assert row["regime"] == REGIME[next(k for k, v in SHARES.items() if v is cfg["shares"])]
        assert (row["model"], row["reward"]) == (cfg["model"], cfg["reward"])
        assert (row["group_size"], row["update_epochs"]) == (cfg["group_size"],
                                                             cfg["update_epochs"])
    # the hand-made sigmoids put these on top, so the two targets' winners differ
    assert board[(board["target"] == "test") & (board["rank"] == 1)]["config_id"].item() \
        == "cfg-m-prm"
    assert board[(board["target"] == "ood") & (board["rank"] == 1)]["config_id"].item() \
        == "cfg-m-rule"


def test_leaderboard_md_config_tables_show_the_cells_means_in_rank_order(report):
    sweep, _ = report
    text = (sweep / "leaderboard.md").read_text()
    finals = _ok_finals(sweep)
    for target in ("test", "ood"):
        means = {c: sum(v[target]) / len(v[target]) for c, v in finals.items()}
        ranks = _expected_ranks(means)
        rows = _md_tables(text, f"## Target: {target}", "### Allocation configs")
        assert len(rows) == len(means)
        shown = [row[1].strip("`") for row in rows]
        assert shown == sorted(means, key=lambda c: (ranks[c], c))
        for row, config_id in zip(rows, shown):
            assert int(row[0]) == ranks[config_id]
            assert row[6] == "16"  # LoRA rank, the default
            assert row[8] == str(len(finals[config_id][target]))  # seeds
            assert row[9].split(" [")[0] == f"{means[config_id]:.3f}"


def test_regime_rows_hold_each_regimes_best_config_and_its_cells_mean(tmp_path):
    # two more tiny-s/rule search-heavy configs: g8 beats cfg-s-rule on test and trails it
    # on ood, g2 the reverse, so the regime row must pick the best of three per target
    g8 = config("cfg-s-rule-g8", "tiny-s", "rule", 8, 1, "search", (0.10, 0.60, 0.3, 2.0),
                (0.10, 0.20, 0.3, 2.0))
    g2 = config("cfg-s-rule-g2", "tiny-s", "rule", 2, 1, "search", (0.10, 0.20, 0.3, 2.0),
                (0.10, 0.40, 0.3, 2.0))
    configs = [*CONFIGS[:3], g8, g2]
    sweep = make_sweep(tmp_path, configs, failed=False, missing=False)
    write_report(sweep, n_boot=20)
    text = (sweep / "leaderboard.md").read_text()
    finals = _ok_finals(sweep)
    regime_of = {cfg["config_id"]: (cfg["model"], cfg["reward"],
                                    REGIME[next(k for k, v in SHARES.items()
                                                if v is cfg["shares"])]) for cfg in configs}
    for target in ("test", "ood"):
        means = {c: sum(v[target]) / len(v[target]) for c, v in finals.items()}
        groups = {}
        for config_id, key in regime_of.items():
            groups.setdefault(key, []).append(config_id)
        best = {key: max(ids, key=lambda c: means[c]) for key, ids in groups.items()}
        rows = _md_tables(text, f"## Target: {target}", "### Regimes")
        assert len(rows) == len(groups) == 3
        ranks = _expected_ranks({key: means[c] for key, c in best.items()})
        for row in rows:
            key = (row[1], row[2], row[3])
            assert int(row[0]) == ranks[key]
            assert row[4] == str(len(groups[key]))
            assert row[5] == f"`{best[key]}`"
            assert row[6].split(" [")[0] == f"{means[best[key]]:.3f}"
        assert [int(row[0]) for row in rows] == sorted(int(row[0]) for row in rows)
    # the search-heavy tiny-s/rule regime's best differs by target: g8 on test, g2 on ood
    test_rows = _md_tables(text, "## Target: test", "### Regimes")
    ood_rows = _md_tables(text, "## Target: ood", "### Regimes")
    assert ["`cfg-s-rule-g8`"] == [r[5] for r in test_rows if r[1:4] == ["tiny-s", "rule",
                                                                        "search-heavy"]]
    assert ["`cfg-s-rule-g2`"] == [r[5] for r in ood_rows if r[1:4] == ["tiny-s", "rule",
                                                                       "search-heavy"]]


# ---------------------------------------------------------------- compute card


def test_compute_card_totals_equal_the_sum_of_the_cells(report):
    sweep, out = report
    summaries = [results.read_json(p) for p in (sweep / "cells").glob("*/summary.json")]
    total = sum(s["total_flops"] for s in summaries)  # the failed cell's spend included
    assert out["totals"]["total"] == pytest.approx(total)
    for phase in ("rollout", "learning", "feedback", "eval"):
        assert out["totals"][phase] == pytest.approx(sum(s["flops"][phase] for s in summaries))
    assert sum(out["totals"][p] for p in ("rollout", "learning", "feedback")) == \
        pytest.approx(total)
    card = (sweep / "compute_card.md").read_text()
    assert f"| **total charged** | **{fmt_flops(total)}** | 100.0% |" in card
    for cell_dir in (sweep / "cells").iterdir():
        assert f"`{cell_dir.name}`" in card
    assert "237k" in card and "339k" in card  # tiny-s and tiny-m params
    assert "reward (prm-tiny-s)" in card  # the reward model's size is part of the story
    assert "tiny-s (237k params) takes 2.0x the steps" in card  # same-FLOP sizes


def test_compute_card_tables_show_the_cells_phase_sums(report):
    sweep, _ = report
    card = (sweep / "compute_card.md").read_text()
    summaries = {}
    for folder in (sweep / "cells").iterdir():
        if (folder / "summary.json").is_file():
            summaries[folder.name] = (results.read_json(folder / "spec.json"),
                                      results.read_json(folder / "summary.json"))
    phase = {p: sum(s["flops"][p] for _, s in summaries.values())
             for p in ("rollout", "learning", "feedback", "eval")}
    total = sum(s["total_flops"] for _, s in summaries.values())
    for label, key in (("rollout / search", "rollout"), ("learning", "learning"),
                       ("feedback", "feedback")):
        assert f"| {label} | {fmt_flops(phase[key])} | {phase[key] / total:.1%} |" in card
    assert (f"| eval (not charged) | {fmt_flops(phase['eval'])} | "
            f"+{phase['eval'] / total:.1%} on top |") in card
    failed = [s["total_flops"] for _, s in summaries.values() if s["status"] != "ok"]
    assert f"includes {fmt_flops(sum(failed))} FLOPs spent by {len(failed)} failed" in card
    # by policy model: every cell that spent FLOPs counts, the failed one included
    for model in STEPS:
        spent = sum(s["total_flops"] for spec, s in summaries.values() if spec["model"] == model)
        line = next(x for x in card.splitlines() if x.startswith(f"| {model} | "))
        assert f"| {fmt_flops(spent)} | {spent / total:.1%} |" in line
    # per cell: its own phases and total; the sweep row: the sums
    rows = _md_tables(card, "## Per cell", "## Per cell")
    by_cell = {row[0].strip("`"): row for row in rows}
    for cell_id, (_, s) in summaries.items():
        row = by_cell[cell_id]
        assert row[8].startswith(fmt_flops(s["flops"]["rollout"]) + " (")
        assert row[9].startswith(fmt_flops(s["flops"]["learning"]) + " (")
        assert row[11] == fmt_flops(s["flops"]["eval"]) and row[12] == fmt_flops(s["total_flops"])
    sweep_row = by_cell["**sweep**"]
    assert sweep_row[8] == f"{fmt_flops(phase['rollout'])} ({phase['rollout'] / total:.1%})"
    assert sweep_row[12] == f"**{fmt_flops(total)}**"
    latex = (sweep / "compute_card.tex").read_text()
    mantissa, exponent = f"{phase['learning']:.2e}".split("e")
    share = f"{phase['learning'] / total:.1%}".replace("%", "\\%")
    assert f"Learning & ${mantissa}\\times10^{{{int(exponent)}}}$ & {share} \\\\" in latex


def test_compute_card_latex_block_is_booktabs(report):
    sweep, out = report
    latex = (sweep / "compute_card.tex").read_text()
    for token in ("\\begin{tabular}", "\\toprule", "\\midrule", "\\bottomrule",
                  "\\end{tabular}", "Total charged", "\\%"):
        assert token in latex
    mantissa, exponent = f"{out['totals']['total']:.2e}".split("e")
    assert f"${mantissa}\\times10^{{{int(exponent)}}}$" in latex
    card = (sweep / "compute_card.md").read_text()
    assert "```latex\n" + latex.rstrip("\n") + "\n```" in card


# ---------------------------------------------------------------- selection


def test_selection_json_holds_k_configs_and_the_excluded_cells(report):
    sweep, _ = report
    selection = json.loads((sweep / "selection.json").read_text())
    assert selection["target"] == "test" and selection["basis"] == "extrapolated"
    assert selection["k"] == 3 and len(selection["selected"]) == 3
    assert len({s["config_id"] for s in selection["selected"]}) == 3
    assert all(s["reason"] for s in selection["selected"])
    assert selection["by_target"]["agree"] is False
    assert selection["pick"] == "cfg-m-prm" and selection["pick_reason"] == ""
    assert selection["intervals_cover"] == "seeds and problems"
    excluded = {e["cell_id"]: e for e in selection["excluded"]}
    assert excluded["cfg-m-g8-s0"] == {"cell_id": "cfg-m-g8-s0", "status": "failed",
                                       "error": OOM}
    assert excluded["cfg-m-prm-g8-s0"]["status"] == "missing"


def test_selection_holds_fewer_entries_when_fewer_configs(tmp_path):
    sweep = make_sweep(tmp_path, CONFIGS[:2], failed=False, missing=False)
    out = write_report(sweep, n_boot=50, top_k=5, basis="observed")
    selection = results.read_json(sweep / "selection.json")
    assert selection["k"] == 5 and len(selection["selected"]) == 2
    assert all(s["basis_used"] == "observed" for s in selection["selected"])
    assert "None: every cell finished ok." in (sweep / "leaderboard.md").read_text()
    assert out["selected"] == selection["selected"]


# ---------------------------------------------------------------- errors


def test_only_failed_cells_raise_no_ok_cells(tmp_path):
    sweep = make_sweep(tmp_path, [], failed=True, missing=True)
    with pytest.raises(ValueError, match=r"no ok cells to rank \(1 failed, 1 missing\)") as info:
        write_report(sweep)
    assert str(sweep) in str(info.value) and "pilots.csv" in str(info.value)
    assert not (sweep / "leaderboard.md").exists()


def test_a_corrupt_metrics_line_raises_naming_file_and_line(tmp_path):
    sweep = make_sweep(tmp_path, CONFIGS[:1], failed=False, missing=False)
    path = sweep / "cells" / "cfg-s-rule-s0" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[3] = lines[3][:20]  # a torn write
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"cfg-s-rule-s0/metrics\.jsonl:4: corrupt JSON"):
        write_report(sweep)


def test_mixed_tasks_raise(tmp_path):
    sweep = make_sweep(tmp_path, CONFIGS[:1], failed=False, missing=False)
    write_cell(sweep, CONFIGS[1], 0, task="gsm8k")
    with pytest.raises(ValueError, match=r"results mix task=arith \(\d+ cells?\) and "
                                         r"task=gsm8k \(1 cell\).* remove cells/\S+ to keep "
                                         r"task=arith"):
        write_report(sweep)


def test_bad_arguments_and_a_folder_without_cells_raise(tmp_path):
    with pytest.raises(ValueError, match="report.basis='best'"):
        write_report(tmp_path, basis="best")
    with pytest.raises(ValueError, match="report.top_k=0"):
        write_report(tmp_path, top_k=0)
    with pytest.raises(ValueError, match="no cells/ folder"):
        write_report(tmp_path)


# ---------------------------------------------------------------- validation section


def _comparison(sweep):
    selection = results.read_json(sweep / "selection.json")["selected"]
    realized = {s["config_id"]: s["score"] - 0.02 * i for i, s in enumerate(selection)}
    return compare_predictions(selection, realized) | {"target": "test",
                                                       "budget_flops": FULL, "failed": []}


def test_validation_section_is_idempotent_and_last(tmp_path):
    sweep = make_sweep(tmp_path, CONFIGS[:3], failed=False, missing=False)
    write_report(sweep, n_boot=50)
    before = (sweep / "leaderboard.md").read_text()
    comparison = _comparison(sweep)
    section = validation_section(sweep, comparison)
    once = (sweep / "leaderboard.md").read_text()
    assert once.startswith(before.rstrip("\n")) and once.endswith(section)
    assert validation_section(sweep, comparison) == section
    twice = (sweep / "leaderboard.md").read_text()
    assert twice == once and twice.count(VALIDATION_HEADING) == 1
    assert "Kendall tau 1.00" in section and "Top-1 regret: 0.000" in section
    assert "Coverage:" in section and "| realized | inside? |" in section
    for row in comparison["rows"]:
        assert f"`{row['config_id']}`" in section


def test_validation_section_with_two_configs_says_why_no_rank_correlation(tmp_path):
    sweep = make_sweep(tmp_path, CONFIGS[:2], failed=False, missing=False)
    write_report(sweep, n_boot=50)
    selection = results.read_json(sweep / "selection.json")["selected"]
    comparison = compare_predictions(selection, {s["config_id"]: 0.3 for s in selection})
    comparison["failed"] = [{"cell_id": "abc", "error": "TimeoutError: node lost"}]
    section = validation_section(sweep, comparison)
    assert "n/a (rank correlations need >= 3 validated configs; got 2)" in section
    assert "Failed validation run `abc`: TimeoutError: node lost" in section


def test_a_rerun_report_keeps_the_stored_validation_section(tmp_path):
    sweep = make_sweep(tmp_path, CONFIGS[:3], failed=False, missing=False)
    write_report(sweep, n_boot=50)
    results.write_json(sweep / "validate" / "comparison.json", _comparison(sweep))
    write_report(sweep, n_boot=50)
    text = (sweep / "leaderboard.md").read_text()
    assert text.count(VALIDATION_HEADING) == 1
    assert text.index(VALIDATION_HEADING) > text.index("## Best allocation by target")


def test_validation_shows_the_pilot_read_and_the_prediction_at_f_apart(tmp_path):
    """The pilots' own reads and their curves' predictions at F are two columns; inside?
    and coverage check the realized score against the prediction's interval."""
    sweep = make_sweep(tmp_path, CONFIGS[:3], failed=False, missing=False)
    write_report(sweep, n_boot=50)
    selection = results.read_json(sweep / "selection.json")
    chosen, predicted = selection["selected"], selection["predicted_at_full"]
    assert [c["config_id"] for c in chosen] == list(predicted)  # every pilot predicts
    first, second = (predicted[c["config_id"]] for c in chosen[:2])
    pick = interval(first["prediction"], first["lo"], first["hi"])  # the leaderboard's too
    assert f"Predicted there: {pick} (its read" in (sweep / "leaderboard.md").read_text()
    realized = {chosen[0]["config_id"]: first["hi"] + 0.01,  # above its interval
                chosen[1]["config_id"]: second["prediction"]}
    comparison = at_full_budget(compare_predictions(chosen, realized), predicted)
    section = validation_section(sweep, comparison | {"target": "test", "failed": []})
    assert ("| config | allocation | pilot read [lo, hi] | predicted at F [90%] | realized | "
            "inside? |") in section
    for choice, mine, inside in zip(chosen, (first, second), ("no", "yes")):
        pilot = interval(choice["score"], choice["lo"], choice["hi"])
        at_f = interval(mine["prediction"], mine["lo"], mine["hi"])
        row = next(line for line in section.splitlines() if choice["config_id"] in line)
        assert pilot in row and at_f in row and row.endswith(f"| {inside} |"), row
    assert "- Coverage: 1/2 (50%) of realized values inside the 90% interval predicted at F" \
        in section
    # a config with no prediction at F (its fit fell back): the pilot read only
    bare = at_full_budget(compare_predictions(chosen[:1], realized), {})
    assert bare["rows"][0]["predicted"] is None and bare["coverage"] is None
    section = validation_section(sweep, bare)
    row = next(line for line in section.splitlines() if chosen[0]["config_id"] in line)
    assert "| - |" in row and "Coverage: n/a (no prediction at F)" in section


def test_an_earlier_comparison_renders_its_reads_as_pilot_reads(tmp_path):
    """A comparison.json written before the prediction at F was kept: its ``predicted``
    was the pilot's read, and it has no prediction at F."""
    sweep = make_sweep(tmp_path, CONFIGS[:3], failed=False, missing=False)
    write_report(sweep, n_boot=50)
    old = _comparison(sweep)
    section = validation_section(sweep, old)
    for row in old["rows"]:
        line = next(x for x in section.splitlines() if row["config_id"] in x)
        assert interval(row["predicted"], row["lo"], row["hi"]) in line
        assert line.endswith("| - | " + f"{row['realized']:.3f} | - |"), line


def test_validation_section_needs_a_leaderboard(tmp_path):
    with pytest.raises(ValueError, match="run `race report"):
        validation_section(tmp_path, {"rows": []})



def test_many_configs_still_render_with_a_model_and_reward_legend(tmp_path):
    """Above 16 configs curves.png's legend names models and rewards, not every config."""
    configs = [config(f"c{i:02d}", ("tiny-s", "tiny-m")[i % 2], ("rule", "prm-tiny-s")[i // 9],
                      2 + i, 1, ("search", "feedback")[i // 9],
                      (0.1, 0.3 + 0.02 * i, 0.4, 2.0), (0.1, 0.3, 0.4, 2.0), seeds=(0,))
               for i in range(17)]
    sweep = make_sweep(tmp_path, configs, failed=False, missing=False)
    out = write_report(sweep, n_boot=20)
    import matplotlib.image as mpimg

    assert mpimg.imread(out["paths"]["curves_png"]).shape[0] > 100
    assert len(results.read_json(sweep / "selection.json")["selected"]) == 3


def _rung(rung, fraction, guards):
    return {"rung": rung, "fraction": fraction, "candidates": [
        {"config": config, "cell_ids": [f"cell-{config}-{rung}"], "guard": guard}
        for config, guard in guards.items()]}


def test_the_guard_section_names_a_guard_that_fired_only_at_a_later_rung():
    # a continued cell fails after the first rung: the first rung's cells are clean
    evidence = "drawdown: accuracy 0.294 at the last checkpoint vs best 0.356"
    ladder = {"rungs": [_rung(1, 1 / 48, {"a": None, "b": None}),
                        _rung(4, 1 / 6, {"a": None, "b": evidence})]}
    clean = pd.DataFrame(columns=["cell_id", "config_id", "target", "guard", "fired",
                                  "evidence"]).astype({"fired": bool})
    section = _guards_markdown(clean, "val", 2, ladder)
    assert "No guard fired." not in section
    assert f"| 4 (F/6) | `cell-b-4` | `b` | {evidence} |" in section
    assert ladder_guards(ladder) == [{"rung": 4, "fraction": 1 / 6, "config_id": "b",
                                      "cell_ids": ["cell-b-4"], "evidence": evidence}]
    quiet = {"rungs": [_rung(1, 1 / 48, {"a": None}), _rung(2, 1 / 24, {"a": None})]}
    assert "No guard fired." in _guards_markdown(clean, "val", 1, quiet)
    assert ladder_guards(quiet) == []


def test_leaderboard_reports_the_guards_and_none_fire_on_rising_curves(report):
    sweep, _ = report
    text = (sweep / "leaderboard.md").read_text()
    section = text.split("## Guards against late failure", 1)[1]
    ok_cells = sum(len(seeds["test"]) for seeds in _ok_finals(sweep).values())
    assert f"Checked on `test` for {ok_cells} ok cell(s)" in section
    assert "No guard fired." in section  # the fixture's curves are clean sigmoids
    selection = json.loads((sweep / "selection.json").read_text())
    assert selection["guards_fired"] == []
    assert all(s["guard"] is None for s in selection["selected"])


def test_the_card_and_leaderboard_show_what_the_full_budget_buys_per_size(report):
    """The table's steps, completions and tokens are the planner's: the pick's recipe
    (cfg-m-prm: prm-tiny-s, 8 prompts x G4, mu1, 40-token cap) solved at F per size."""
    from race.run.grid import plan_grid

    sweep, _ = report
    plan = plan_grid(["model=tiny-s,tiny-m", "reward=prm-tiny-s", "grid.group_size=4",
                      "grid.update_epochs=1", "grid.prompts_per_step=8",
                      "grid.max_new_tokens=40", "selection.policy=flat", "pilot.fraction=1",
                      f"budget={FULL}"], runnable=False)
    solver = {c.spec.model: c.steps for c in plan.runnable}
    assert set(solver) == {"tiny-s", "tiny-m"} and solver["tiny-s"] > solver["tiny-m"] > 0
    for name in ("compute_card.md", "leaderboard.md"):
        text = (sweep / name).read_text()
        rows = _md_tables(text, "## What the full budget buys, per size", "draws it.")
        rows = [r for r in rows if r[0] in solver]
        assert [r[0] for r in rows] == ["tiny-s", "tiny-m"], name  # smallest first
        for row in rows:
            steps = solver[row[0]]
            assert row[3] == f"{steps:,}", (name, row)
            completions = steps * 8 * 4
            assert row[5] == (f"{completions:,}" if completions < 10_000 else
                              fmt_params(completions)), (name, row)
            assert row[6] == fmt_params(completions * (16 + 40)), (name, row)


def _target_rows(ood_lead: float, ood_se: float) -> pd.DataFrame:
    """The by-condition table's target rows: A leads val; B leads ood, by ``ood_lead``
    (SE ``ood_se``) over A there."""
    rows = [{"by": "target", "value": "val", "config_id": "A", "score": 0.6, "se": 0.02,
             "read_at": "pilot end", "over_pick": 0.0, "over_pick_se": 0.0},
            {"by": "target", "value": "ood", "config_id": "B", "score": 0.4, "se": 0.03,
             "read_at": "pilot end", "over_pick": ood_lead, "over_pick_se": ood_se}]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def test_targets_differ_only_where_the_other_leader_clearly_beats_the_pick_there():
    clear = best_by_target(_target_rows(0.10, 0.04), ["val", "ood"], {}, level=0.9)
    assert clear["message"] == (
        "the best allocation differs between targets: val -> A (0.600 at pilot end), "
        "ood -> B (0.400 at pilot end); on ood B leads val's A by +0.100 [+0.034, +0.166] "
        "(90% interval)")
    # a lead of 1 SE: the point leaders differ, but no finding
    close = best_by_target(_target_rows(0.04, 0.04), ["val", "ood"], {}, level=0.9)
    assert close["message"].startswith("the targets' point leaders differ, but within "
                                       "their intervals")
    assert close["message"].endswith("on ood B leads val's A by +0.040 [-0.026, +0.106] "
                                     "(90% interval, holding 0)")
    assert not close["agree"] and close["ood"] == "B"
