"""Every ``race`` command in README.md and docs/*.md runs as documented.

The commands are collected from the pages' fenced code blocks (Python blocks excepted): a
line that starts with ``race <subcommand>``, after an optional ``$`` prompt and
environment assignments (``HF_HUB_OFFLINE=1``), with its ``\\`` continuations joined. Its
trailing comment may mark what it is there to show (CONTRIBUTING.md):

- ``# fails: <why>``: bad input on purpose: it exits 2 with one line;
- ``# warns: <why>``: it exits 0 and prints a ``warning:`` line, or plans cells it
  refuses, on purpose;
- no mark: it exits 0, prints no ``warning:`` line and refuses no cell.

Each runs in-process through :func:`race.cli.main`:

- ``race plan`` and ``race flops`` as written;
- ``race sweep``, ``race prefetch`` and ``race pilot`` in their ``race plan`` form, with
  the same overrides (they would launch pilots, SLURM jobs or hub downloads; a pilot's
  plan is flat, so its cells get ``pilot.fraction`` as the pilot does);
- ``race report`` and ``race validate`` on a finished one-cell sweep of a short
  warm-started tiny-s (``results/trl*``: its cells alone, as ``track`` writes them), a
  ``launcher=slurm`` run inline.

Placeholders: ``<the same overrides>`` is the previous command's in that block;
``results/<...>`` the stand-in sweep; ``/data/<name>.jsonl`` and ``/models/<name>`` a
GSM8K-format file and a small Qwen2 policy folder (:func:`stand_ins`), copied under
``tmp_path``.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.common import select_best_cell
from race import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*(```|~~~)([^\n]*)\n(.*?)^[ \t]*\1", re.MULTILINE | re.DOTALL)
SUBCOMMAND = "|".join(cli.SUBCOMMANDS)
# an optional $ prompt, environment assignments, race, a subcommand, its words
COMMAND = re.compile(rf"^(?:\$\s+)?((?:[A-Z_][A-Z0-9_]*=\S*\s+)*)"
                     rf"race\s+({SUBCOMMAND})(?=\s|$)(.*)$")
MARK = re.compile(r"\s#\s*(fails|warns):")  # a trailing comment's mark
REFUSED = re.compile(r"(\d+) cell\(s\), (\d+) runnable")  # a plan's summary line
SAME = "<the same overrides>"
AS_PLAN = ("sweep", "prefetch", "pilot")  # would launch: run as race plan
ON_A_SWEEP = ("report", "validate")


@dataclass(frozen=True)
class DocCommand:
    """One documented command: where it is, what it says, what it is marked to do."""

    page: str
    line: int
    text: str  # as documented, continuations joined
    env: tuple[tuple[str, str], ...]
    command: str
    args: tuple[str, ...]  # the words after the subcommand, placeholders kept
    mark: str  # "fails", "warns" or ""

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _logical_lines(block: str, first: int):
    """(line number, text) of a code block's lines, ``\\`` continuations joined."""
    pending, start = "", first
    for number, raw in enumerate(block.splitlines(), first):
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield start, pending + raw
        pending = ""


def collect(pages: list[Path] = PAGES) -> list[DocCommand]:
    """Every ``race`` command in the fenced blocks of ``pages``, in page order."""
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            if block.group(2).strip().lower().startswith("python"):
                continue
            previous: tuple[str, ...] = ()  # what <the same overrides> repeats
            first = text.count("\n", 0, block.start(3)) + 1
            for number, line in _logical_lines(block.group(3), first):
                match = COMMAND.match(line.strip())
                if match is None:
                    continue
                env, command, rest = match.groups()
                words = shlex.split(rest.replace(SAME, "SAME_OVERRIDES"), comments=True)
                if "SAME_OVERRIDES" not in words:
                    previous = tuple(words)
                words = [w for word in words
                         for w in (previous if word == "SAME_OVERRIDES" else [word])]
                mark = MARK.search(line)
                name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
                found.append(DocCommand(
                    str(name), number, " ".join(line.split()),
                    tuple(tuple(e.split("=", 1)) for e in env.split()), command,
                    tuple(words), mark.group(1) if mark else ""))
    return found


COMMANDS = collect()


def test_the_collector_reads_continuations_placeholders_env_and_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```bash\n# a comment line\n"
                    "race prefetch budget=1e18 \\\n    'launcher.gpus=[0,1]'  # before\n"
                    "HF_HUB_OFFLINE=1 race sweep <the same overrides> launcher=slurm\n"
                    "race sweep <the same overrides> launcher=inline\n"
                    "race plan budget=x   # fails: not a number\n"
                    "race plan task.answer_format='#### N'  # warns: on purpose\n"
                    "race sweep: a log line, not a command\n```\n\n"
                    "```python\nrace plan budget=1  # python, not a shell\n```\n")
    found = collect([page])
    assert [(c.line, c.command, c.args, c.env, c.mark) for c in found] == [
        (5, "prefetch", ("budget=1e18", "launcher.gpus=[0,1]"), (), ""),
        (7, "sweep", ("budget=1e18", "launcher.gpus=[0,1]", "launcher=slurm"),
         (("HF_HUB_OFFLINE", "1"),), ""),
        (8, "sweep", ("budget=1e18", "launcher.gpus=[0,1]", "launcher=inline"), (), ""),
        (9, "plan", ("budget=x",), (), "fails"),
        (10, "plan", ("task.answer_format=#### N",), (), "warns")]


def test_the_pages_hold_commands():
    pages = {c.page for c in COMMANDS}
    assert len(COMMANDS) >= 20 and "README.md" in pages and "docs/sweeps.md" in pages
    assert {c.command for c in COMMANDS} >= {"plan", "sweep", "flops", "report", "validate",
                                             "prefetch", "pilot"}


@pytest.fixture(scope="module")
def ran(request):
    """The commands run in this module; their count is printed at its end."""
    done: list[str] = []
    yield done
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin(
        "capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # to the terminal, not a capture
            reporter.write_line(f"\ndocumented commands: {len(done)} of {len(COMMANDS)} "
                                f"ran (README.md and docs/*.md)")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, policy):
    """A finished one-cell sweep of ``policy`` (a tiny-s), its report written, and a
    folder of its cells alone (what ``track`` writes for a TRL run)."""
    root = tmp_path_factory.mktemp("documented")
    args = ["sweep", "model=tiny-s", f"model.hf_id={policy}", "reward=rule",
            "grid.update_epochs=1", "grid.prompts_per_step=2", "grid.group_size=2",
            "grid.max_new_tokens=12", "grid.lora_rank=4", "pilot.eval_examples=4",
            "pilot.select_examples=4", "pilot.eval_targets=[val]", "budget=6e8",
            "selection.policy=flat", "pilot.fraction=0.5", "launcher=inline",
            f"sweep.out_dir={root}", "sweep.name=sweep"]
    assert cli.main(args) == 0
    cells = root / "trl"
    shutil.copytree(root / "sweep" / "cells", cells / "cells")
    return {"sweep": root / "sweep", "cells": cells}


@pytest.fixture(scope="module")
def stand_ins(standin, tmp_path_factory):
    """The ``standin`` fixture's GSM8K-format file, and a policy folder (a tokenizer
    trained on that file's text) large enough (256 wide, 4 layers: about 4M parameters)
    that the budgets the pages give a Qwen2.5 folder stay within ``pilot.max_steps``."""
    import dataclasses

    from race.warmstart.standin import build_standin

    shape = dataclasses.replace(standin["shape"], hidden_size=256, intermediate_size=1024,
                                num_layers=4, head_dim=64)
    texts = [row["question"] + "\n" + row["answer"] for row in standin["rows"]]
    policy = build_standin(tmp_path_factory.mktemp("documented-policy") / "policy", shape,
                           texts)
    return {"data": standin["data"], "policy": policy}


def _stand_in_path(word: str, standin: dict, tmp: Path) -> str:
    """``word`` with a documented absolute path under /data or /models replaced by its
    stand-in under ``tmp`` (GSM8K-format rows; a copy of the stand-in policy)."""
    key, _, value = word.rpartition("=")
    paths = []
    for path in value.split(","):
        if re.match(r"^/(data|models)/", path) and not Path(path).exists():
            local = tmp / path.lstrip("/")
            if not local.exists():
                local.parent.mkdir(parents=True, exist_ok=True)
                source = standin["data"] if path.startswith("/data/") else standin["policy"]
                (shutil.copy if source.is_file() else shutil.copytree)(source, local)
            path = str(local)
        paths.append(path)
    return f"{key}={','.join(paths)}" if key else ",".join(paths)


def runnable_args(command: DocCommand, standin: dict, tmp: Path, finished) -> list[str]:
    """The argv ``command`` runs as here (module docstring)."""
    words = [_stand_in_path(w, standin, tmp) for w in command.args]
    if command.command in AS_PLAN:
        flat = ["selection.policy=flat"] if command.command == "pilot" else []
        return ["plan", *words, *flat]
    if command.command in ON_A_SWEEP:
        sweep = finished()
        folder = sweep["cells"] if "trl" in words[0] else sweep["sweep"]
        if command.command == "validate":  # the stand-in learns nothing: none selected
            select_best_cell(folder)
        rest = ["launcher=inline" if w == "launcher=slurm" else w for w in words[1:]]
        return [command.command, str(folder), *rest]
    return [command.command, *words]


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_documented_command(command, stand_ins, ran, request, tmp_path, monkeypatch, capsys):
    if any("reasoning-gym" in w for w in command.args):
        pytest.importorskip("reasoning_gym", reason="task=reasoning-gym needs reasoning-gym: "
                                                    "pip install 'race-rl[tasks]'")
    for name, value in command.env:
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RACE_CACHE_DIR", str(tmp_path / "cache"))  # nothing in ~/.cache
    args = runnable_args(command, stand_ins, tmp_path,
                         lambda: request.getfixturevalue("finished"))
    capsys.readouterr()
    code = cli.main(args)
    out = capsys.readouterr()
    ran.append(str(command))
    said = f"{command}: `{command.text}` ran as `race {' '.join(args)}`"
    if command.mark == "fails":
        lines = out.err.strip().splitlines()
        assert code == cli.USAGE_ERROR and len(lines) == 1, f"{said}: exit {code}, {out.err}"
        return
    assert code == 0, f"{said}: exit {code}: {out.err[-1500:]}"
    warnings = [line for line in out.err.splitlines() if "warning:" in line]
    warnings += [f"{n} cell(s), {k} runnable" for n, k in REFUSED.findall(out.out) if n != k]
    if command.mark == "warns":
        assert warnings, f"{said}: marked `# warns:` but printed no warning"
    else:
        assert not warnings, (f"{said}: printed {warnings[0]!r}; change the example, or "
                              f"mark it `# warns: <why>` and say so in the text")
