"""The front page and docs/: links resolve inside the repository, the README stays short.

Every relative Markdown link or image in README.md and docs/*.md must name a file or
folder of the repository; nothing may point outside it (no ``../shared``, no DESIGN.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_BYTES = 10_500
FORBIDDEN = ("../shared", "DESIGN.md")

# [text](target) and ![alt](target); the target ends at whitespace or ")" (a title may follow)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.MULTILINE | re.DOTALL)


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))  # code blocks hold no links
    text = re.sub(r"`[^`\n]*`", "", text)  # nor does inline code
    return LINK.findall(text)


def _is_external(target: str) -> bool:
    return re.match(r"^(https?:|mailto:)", target, re.IGNORECASE) is not None


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"accounting.md", "pilots.md", "sweeps.md", "reports.md", "gpus.md",
            "design.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target in _links(page):
        if _is_external(target):
            continue
        path = target.split("#", 1)[0]
        if not path:  # an anchor on the same page
            continue
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target}: no such file or folder")
        elif not resolved.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_links_found():
    """The link pattern matches what the pages use (guards the test above from passing empty)."""
    assert any(t.startswith("docs/") for t in _links(README))
    assert "docs/pilots.md#it-learns" in _links(README)


def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes (at most {README_MAX_BYTES})"


def test_nothing_points_outside_the_repository():
    files = [p for p in (ROOT / "race").rglob("*") if p.is_file() and p.suffix != ".pyc"]
    offenders = [f"{p.relative_to(ROOT)}: {word}"
                 for p in [*files, *PAGES]
                 for word in FORBIDDEN
                 if word in p.read_text(encoding="utf-8", errors="replace")]
    assert not offenders, offenders


def test_setup_block_has_the_two_commands():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "no ```bash block in the README's set-up section"
    lines = block.group(1).splitlines()
    assert any(line.startswith("make demo") for line in lines)
    assert any(line.startswith("make test") for line in lines)
