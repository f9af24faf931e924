"""docs/protocol.md keeps stable anchors: every section has one, every link resolves.

Code and other clients cite the page as ``docs/protocol.md#<anchor>``; a
citation anywhere in the repository must name an anchor the page has.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "protocol.md"
TEXT = PAGE.read_text(encoding="utf-8")
ANCHORS = re.findall(r'<a id="([a-z0-9-]+)"></a>', TEXT)
CITED_DIRS = ("router", "store", "bench", "pipeline", "tests", "docs", "examples")


def test_anchors_are_unique():
    assert len(ANCHORS) == len(set(ANCHORS))


def test_every_section_heading_follows_an_anchor():
    lines = TEXT.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## ") or line.startswith("### "):
            assert lines[i - 1].startswith('<a id="'), f"no anchor before {line!r}"


def test_every_link_within_the_page_names_an_anchor():
    for target in re.findall(r"\]\(#([^)]+)\)", TEXT):
        assert target in ANCHORS, target


def test_every_citation_of_the_page_in_the_repository_names_an_anchor():
    cited = set()
    for folder in CITED_DIRS:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md") and path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                cited |= set(re.findall(r"protocol\.md#([a-z0-9-]+)", text))
    assert cited, "the page is cited by anchor somewhere"
    assert cited <= set(ANCHORS), cited - set(ANCHORS)
