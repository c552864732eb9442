"""Every compute card: a sweep's (``compute_card.md`` and its LaTeX block: FLOPs by
phase, compute really used, by policy model and per cell, model sizes, hardware use) and
one cell's (``race flops``: :func:`cell_card_text`, :func:`cell_card_json`). The numbers
are :mod:`race.core.flops`'s; this module renders them."""

from __future__ import annotations

import math

import pandas as pd

from race.analysis import aggregate
from race.catalog import load_entry, load_model_shape
from race.core.flops import head_flops_per_position, linear_forward_flops_per_token
from race.core.fmt import CHARGED_PHASES, PHASE_NAMES, fmt_flops
from race.core.fmt import acc as _acc
from race.core.fmt import flops_text as _flops
from race.core.fmt import int_text as _int
from race.core.fmt import md_table as _md_table
from race.core.fmt import num as _num
from race.core.fmt import params as _params
from race.core.fmt import share as _share
from race.errors import UsageError
from race.store.pilots import counts_text

CONVENTION_TEXT = {  # docs/accounting.md, FLOP conventions
    "model": "2 per multiply-add on real tokens, causal attention, LoRA's cheaper backward",
    "executed": "what the backend ran: padded batches, full attention under a padding mask, "
                "finished rows that keep decoding"}


def _latex_flops(value: float) -> str:
    """FLOPs as ``$1.23\\times10^{12}$`` for a LaTeX table."""
    if not value:
        return "0"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"${mantissa}\\times10^{{{int(exponent)}}}$"


def _phase_totals(cells: pd.DataFrame) -> dict[str, float]:
    """Sweep FLOPs by phase (every cell that spent any, failed ones included) and total."""
    out = {}
    for phase in (*CHARGED_PHASES, "eval"):
        column = f"flops_{phase}"
        out[phase] = float(cells[column].fillna(0).sum()) if column in cells else 0.0
    out["total"] = (float(cells["total_flops"].fillna(0).sum()) if "total_flops" in cells
                    else sum(out[p] for p in CHARGED_PHASES))
    out["redone"] = (float(cells["redone_flops"].fillna(0).sum()) if "redone_flops" in cells
                     else 0.0)
    out["used"] = out["total"] + out["redone"] + out["eval"]
    return out


def cost_shares(totals: dict[str, float], full_flops: float) -> dict[str, float]:
    """The sweep's pilot compute as shares of one full-budget run: charged FLOPs only,
    with the (uncharged) evaluation, and everything really used (redone work too)."""
    return {"charged": totals["total"] / full_flops,
            "with_eval": (totals["total"] + totals["eval"]) / full_flops,
            "used": totals["used"] / full_flops}


def _reward_model(reward: str) -> str | None:
    """The model a reward system runs (None for a rule verifier or an unknown name)."""
    try:
        return load_entry("reward", reward).get("model")
    except KeyError:
        return None


def _model_rows(ok: pd.DataFrame, shapes: dict | None = None) -> list[list]:
    """Per policy and reward model: params and forward FLOPs per token (``shapes``: the
    sweep's model shapes by name, from its specs; else the catalog's)."""

    roles = {m: "policy" for m in sorted(ok["model"].unique())}
    for reward in sorted(ok["reward"].unique()):
        model = _reward_model(reward)
        if model:
            roles[model] = (roles[model] + ", " if model in roles else "") + f"reward ({reward})"
    rows = []
    for model, role in roles.items():
        try:
            shape = (shapes or {}).get(model) or load_model_shape(model)
        except (KeyError, UsageError):
            rows.append([model, role, "-", "-", "-"])
            continue
        per_token = linear_forward_flops_per_token(shape) + head_flops_per_position(shape)
        rows.append([model, role, _params(shape.total_params), f"{shape.total_params:,}",
                     fmt_flops(per_token)])
    return rows


def _sizes_markdown(ok: pd.DataFrame, names: list[str]) -> str:
    sizes = aggregate.same_flop_sizes(ok)
    best = [f"best_{t}" for t in names if f"best_{t}" in sizes]
    rows = [[r["model"], _params(r["params"]), _int(r["n_cells"]), f"{r['steps']:.1f}",
             f"{r['rollouts']:.0f}", f"{r['updates']:.1f}", _flops(r["flops_per_step"]),
             *(_acc(r[b]) for b in best)] for _, r in sizes.iterrows()]
    text = _md_table(["model", "params", "cells", "steps", "rollouts", "updates",
                      "FLOPs / step", *(f"best {b[5:]}" for b in best)], rows,
                     "lrrrrrr" + "r" * len(best))
    if len(sizes) > 1:
        small, large = sizes.iloc[0], sizes.iloc[-1]
        if large["steps"] > 0 and large["rollouts"] > 0:
            text += (f"\n\nUnder the same pilot budget, {small['model']} "
                     f"({_params(small['params'])} params) takes "
                     f"{small['steps'] / large['steps']:.1f}x the steps and "
                     f"{small['rollouts'] / large['rollouts']:.1f}x the rollouts of "
                     f"{large['model']} ({_params(large['params'])} params).")
    return text


def _latex_text(text: str) -> str:
    """Escape LaTeX's special characters in a plain name."""
    for char in "\\&%$#_{}":
        text = text.replace(char, "\\" + char)
    return text


def _latex_card(name: str, totals: dict, by_model: dict[str, tuple[float, float]],
                n_cells: int, convention: str) -> str:
    charged = totals["total"]
    lines = [f"% RACE compute card: sweep {name}, {n_cells} cells, {convention} FLOPs",
             "% needs \\usepackage{booktabs}",
             "\\begin{tabular}{lrr}", "\\toprule", "Phase & FLOPs & Share \\\\", "\\midrule"]
    for phase in CHARGED_PHASES:
        label = {"rollout": "Rollout (search)"}.get(phase, phase.capitalize())
        share = f"{totals[phase] / charged:.1%}".replace("%", "\\%") if charged else "--"
        lines.append(f"{label} & {_latex_flops(totals[phase])} & {share} \\\\")
    lines += ["\\midrule", f"Total charged & {_latex_flops(charged)} & 100.0\\% \\\\",
              f"Evaluation (not charged) & {_latex_flops(totals['eval'])} & -- \\\\"]
    if len(by_model) > 1:
        lines += ["\\midrule", "\\multicolumn{3}{l}{\\emph{By policy model}} \\\\"]
        for model, (flops, params) in by_model.items():
            share = f"{flops / charged:.1%}".replace("%", "\\%") if charged else "--"
            lines.append(f"{_latex_text(model)} ({_params(params)} params) & "
                         f"{_latex_flops(flops)} & {share} \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    return "\n".join(lines) + "\n"


def compute_card(name: str, cells: pd.DataFrame, ok: pd.DataFrame, order: list[str],
                  names: list[str], shapes: dict | None = None,
                  buys: str = "", refused: int = 0) -> tuple[str, str, dict]:
    """compute_card.md, its LaTeX block, and the sweep totals (``shapes``: the sweep's
    model shapes by name, :func:`race.analysis.load.model_shapes`; ``buys``: the table
    of what the full budget buys per size, :func:`race.report.buys.buys_markdown`;
    ``refused``: cells refused at planning, never run). ``cells`` counts as the sweep
    did, by each cell's own status (every rung's)."""
    totals = _phase_totals(cells)
    charged = totals["total"]
    convention = ok["convention"].iloc[0] if "convention" in ok else "model"
    full = float(ok["full_budget_flops"].iloc[0])
    by_model = {m: (float(g["total_flops"].fillna(0).sum()), float(g["params"].iloc[0]))
                for m, g in cells.groupby("model", sort=False)}
    by_model = dict(sorted(by_model.items(), key=lambda kv: (kv[1][1], kv[0])))  # by size
    text = [*_totals_markdown(name, cells, totals, convention, full, refused),
            *_used_markdown(totals, full),
            f"The sweep's pilots together cost {_share(charged, full)} of one full run.",
            "## By policy model",
            _md_table(["model", "params", "pilot FLOPs", "share"],
                      [[m, _params(p), fmt_flops(f), _share(f, charged)]
                       for m, (f, p) in by_model.items()], "lrrr"),
            "## Per cell",
            "Phase FLOPs with their share of the cell's charged total; cells in rank order "
            "on the primary target, failed and missing last.",
            _cells_markdown(cells, order, totals),
            "## Model size",
            "Forward FLOPs per token: the decoder linears (2 per weight) plus the output "
            "head; attention adds 4 L d_attn per attended key, by context length.",
            _md_table(["model", "role", "params", "exact", "forward FLOPs / token"],
                      _model_rows(ok, shapes), "llrrr"),
            "What each policy size buys under the same pilot budget (means over its ok "
            "cells; rollouts = steps x prompts x G, updates = steps x mu):",
            _sizes_markdown(ok, names)]
    if buys:
        text += ["## What the full budget buys, per size", buys]
    text += _hardware_markdown(ok)
    latex = _latex_card(name, totals, by_model, len(cells), convention)
    text += ["## LaTeX (booktabs)", "```latex\n" + latex.rstrip("\n") + "\n```"]
    return "\n\n".join(text) + "\n", latex, totals


def _totals_markdown(name: str, cells: pd.DataFrame, totals: dict, convention: str,
                     full: float, refused: int = 0) -> list[str]:
    """The card's opening: what is counted, and the sweep's FLOPs by phase."""
    charged = totals["total"]
    spent = cells[cells["total_flops"].fillna(0) > 0] if "total_flops" in cells else cells
    failed = spent[spent["status"] != "ok"]
    rows = [[PHASE_NAMES[p], fmt_flops(totals[p]), _share(totals[p], charged)]
            for p in CHARGED_PHASES]
    rows += [["**total charged**", f"**{fmt_flops(charged)}**", "100.0%"],
             [PHASE_NAMES["eval"], fmt_flops(totals["eval"]),
              f"+{_share(totals['eval'], charged)} on top"]]
    text = [f"# Compute card: {name}",
            f"{convention.capitalize()} FLOPs ({CONVENTION_TEXT.get(convention, convention)}), "
            "counted from the tokens each pilot actually processed. Phases: rollout / "
            "search (prefill + decode of G completions per prompt), learning (policy "
            "forward + backward per update epoch, old-policy and reference log-probs), "
            "feedback (reward-model forward; a rule verifier costs 0), eval (held-out "
            "evaluation, counted but not charged to the budget).",
            f"Full-run budget {fmt_flops(full)} FLOPs; {len(cells)} cells "
            f"({counts_text(cells['status'])}, by their summaries, as the sweep counted "
            f"them)" + (f"; {refused} more refused at planning (never run)" if refused
                        else "") + ".",
            "## Sweep totals", _md_table(["phase", "FLOPs", "share of charged"], rows, "lrr")]
    if len(failed):
        text.append(f"The total includes {fmt_flops(float(failed['total_flops'].sum()))} "
                    f"FLOPs spent by {len(failed)} failed cell(s) before they stopped.")
    return text


def _used_markdown(totals: dict, full: float) -> list[str]:
    """Compute really used: charged, redone and eval FLOPs as shares of one full run."""
    charged = totals["total"]
    shares = cost_shares(totals, full)
    return ["## Compute really used",
            "Charged FLOPs count against the pilots' budgets. Redone FLOPs were spent by "
            "interrupted runs after their last saved state and spent again on resuming; "
            "eval FLOPs are held-out evaluation, the same absolute cost in a pilot as in a "
            "full run.",
            _md_table(["", "FLOPs", "share of one full run"],
                      [["charged", fmt_flops(charged), _share(charged, full)],
                       ["redone", fmt_flops(totals["redone"]), _share(totals["redone"], full)],
                       ["eval", fmt_flops(totals["eval"]), _share(totals["eval"], full)],
                       ["**used**", f"**{fmt_flops(totals['used'])}**",
                        _share(totals["used"], full)]], "lrr"),
            f"pilot_cost_share: {shares['charged']:.4f} of one full run charged, "
            f"{shares['with_eval']:.4f} with eval, {shares['used']:.4f} of all compute "
            f"used (redone included)."]


def _cells_markdown(cells: pd.DataFrame, order: list[str], totals: dict) -> str:
    """Every cell's FLOPs by phase (in rank ``order``, the rest after), and the sweep's."""
    charged = totals["total"]
    rank_of = {cid: i for i, cid in enumerate(order)}
    listed = cells.assign(_order=cells["cell_id"].map(rank_of).fillna(len(order)))
    listed = listed.sort_values(["_order", "cell_id"], kind="stable")
    cell_rows = []
    for _, c in listed.iterrows():
        total = _num(c.get("total_flops"))
        total = 0.0 if math.isnan(total) else total
        phases = []
        for p in (*CHARGED_PHASES, "eval"):
            v = _num(c.get(f"flops_{p}"))
            v = 0.0 if math.isnan(v) else v
            phases.append(f"{fmt_flops(v)} ({_share(v, total)})" if p != "eval"
                          else fmt_flops(v))
        cell_rows.append([f"`{c['cell_id']}`", c["status"], c["model"], c["reward"],
                          _int(c.get("group_size")), _int(c.get("update_epochs")),
                          _int(c.get("seed")), _int(c.get("steps")), *phases,
                          fmt_flops(total)])
    cell_rows.append(["**sweep**", "", "", "", "", "", "", "",
                      *(f"{fmt_flops(totals[p])} ({_share(totals[p], charged)})"
                        for p in CHARGED_PHASES), fmt_flops(totals["eval"]),
                      f"**{fmt_flops(charged)}**"])
    return _md_table(["cell", "status", "model", "reward", "G", "mu", "seed", "steps",
                      "rollout", "learning", "feedback", "eval", "total charged"],
                     cell_rows, "llllrrrrrrrrr")


def _hardware_markdown(ok: pd.DataFrame) -> list[str]:
    """Achieved FLOP/s, MFU, HFU and peak memory per phase, by device and policy (medians
    over ok cells; peak GiB is the largest). Empty for sweeps from before they were kept."""
    if "mfu_rollout" not in ok or ok["mfu_rollout"].isna().all():
        return []
    rows = []
    for (device, dtype, model), group in ok.groupby(["device", "dtype", "model"], sort=False):
        for phase in (*CHARGED_PHASES, "eval"):
            if not group[f"flops_per_s_{phase}"].fillna(0).any():
                continue  # a phase that ran nothing (a rule verifier's feedback)
            gib = group[f"peak_gib_{phase}"].dropna()
            rows.append([model, f"{device} ({dtype})", PHASE_NAMES[phase],
                         f"{fmt_flops(group[f'flops_per_s_{phase}'].median())}/s",
                         f"{group[f'mfu_{phase}'].median():.2%}",
                         f"{group[f'hfu_{phase}'].median():.2%}",
                         f"{gib.max():.2f}" if len(gib) else "-"])
    peak = ok["peak_flops"].dropna()
    return ["## Hardware use",
            "Model FLOPs (MFU) and executed FLOPs (HFU) per second of each phase's wall "
            f"clock, against a peak of {fmt_flops(float(peak.median()))} FLOP/s "
            "(accounting.peak_flops, or a matmul measured on the pilot's device); medians "
            "over ok cells. Peak GiB: the most memory torch held on the GPU in that phase.",
            _md_table(["model", "device", "phase", "FLOP/s", "MFU", "HFU", "peak GiB"],
                      rows, "lllrrrr")]


def _params_short(count: int) -> str:
    # race flops' own format: billions to 4 significant digits
    return f"{count / 1e9:.4g}B" if count >= 1e8 else f"{count / 1e6:.3g}M"


def cell_card_text(cfg, specs, cards: dict) -> str:
    """``race flops``' compute card of one cell: its policy, feedback, search and learning
    knobs, and each charged phase's FLOPs and share in both conventions (``cards``:
    convention -> :class:`~race.core.run_flops.ComputeCard`)."""
    policy, reward, lora, kw = specs.policy, specs.reward, specs.lora, specs.kwargs()
    model_card = cards["model"]
    rows = kw["prompts_per_step"] * kw["group_size"]
    adapter = (f"LoRA r={lora.rank} on {len(lora.targets)} module(s)/layer"
               if lora else "full fine-tuning")
    feedback = ("rule-based verifier, 0 FLOPs" if reward.kind == "rule" else
                f"{reward.kind.upper()} {reward.model.name} "
                f"({_params_short(reward.model.total_params)} params), "
                f"{reward.steps_per_trace} step tags/trace "
                f"(+{reward.extra_tokens_per_trace} tokens/trace: input format and tags)")
    per_token = linear_forward_flops_per_token(policy) + head_flops_per_position(policy)
    lines = [
        f"RACE compute card  ({model_card.steps} GRPO step(s); budget convention: "
        f"{cfg.convention})",
        f"  policy    {policy.name}: {_params_short(policy.total_params)} params "
        f"({_params_short(policy.non_embedding_params)} non-embedding), "
        f"{fmt_flops(per_token)} FLOPs/token forward (no attention), {adapter}",
        f"  feedback  {reward.name}: {feedback}",
        f"  search    {kw['prompts_per_step']} prompts x G={kw['group_size']} = {rows} "
        f"completions/step; prompt {kw['prompt_tokens']} tok, completion "
        f"{kw['completion_tokens']} tok (cap {kw['max_new_tokens']})",
        f"  learning  mu={kw['update_epochs']} epoch(s), minibatch "
        f"{kw['minibatch_size'] or rows}, kl_coef={kw['kl_coef']}",
        "",
        f"  {'phase':<10}{'model FLOPs':>14}{'share':>8}{'executed FLOPs':>17}{'share':>8}",
    ]
    totals = {name: card.total for name, card in cards.items()}
    shares = {name: total.shares() for name, total in totals.items()}
    for phase in ("rollout", "learning", "feedback"):
        lines.append(f"  {phase:<10}{fmt_flops(getattr(totals['model'], phase)):>14}"
                     f"{shares['model'][phase]:>8.1%}"
                     f"{fmt_flops(getattr(totals['executed'], phase)):>17}"
                     f"{shares['executed'][phase]:>8.1%}")
    lines.append(f"  {'total':<10}{fmt_flops(totals['model'].total):>14}{'':>8}"
                 f"{fmt_flops(totals['executed'].total):>17}")
    lines.append(f"  per step  {fmt_flops(model_card.per_step.total):>12}{'':>8}"
                 f"{fmt_flops(cards['executed'].per_step.total):>17}")
    lines.append("  (model: real tokens, causal attention; executed: what Hugging Face runs, "
                 "padded to the cap, full-square attention)")
    return "\n".join(lines)


def cell_card_json(cfg, specs, cards: dict) -> dict:
    """``race flops format=json``: the card's assumptions, parameter counts and both
    conventions' cards."""
    return {"assumptions": {"model": specs.policy.name, "reward": specs.reward.name,
                            "task": cfg.task.name, "budget_flops": cfg.budget,
                            "budget_convention": cfg.convention,
                            "lora_rank": specs.lora.rank if specs.lora else 0,
                            **specs.kwargs()},
            "params": {"total": specs.policy.total_params,
                       "non_embedding": specs.policy.non_embedding_params},
            "cards": {conv: card.to_dict() for conv, card in cards.items()}}
