"""Every relative link in the user docs leads somewhere: the file exists, and the heading an anchor names does.

GitHub renders these pages; a link to a moved file or a renamed heading is a dead end for a
reader. Anchors follow GitHub's rule: the heading's text, lower-cased, punctuation other than
hyphens and underscores dropped, spaces made hyphens, a repeated heading numbered ``-1``, ``-2``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", REPO / "CHANGELOG.md", *REPO.glob("docs/**/*.md"), *REPO.glob("charts/*/README.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"`([^`]*)`", r"\1", heading.group(1))
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading anchors on its text
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    for line in prose(page.read_text()):
        found.update(re.findall(r'<a (?:name|id)="([^"]+)"', line))
    return found


def links(page: Path) -> list[str]:
    return [target for line in prose(page.read_text()) for target in LINK.findall(re.sub(r"`[^`]*`", "", line))]


def test_the_pages_are_found() -> None:
    assert REPO / "docs" / "cluster.md" in PAGES and len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    dead = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked here (no network)
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            dead.append(f"{target}: no file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target}: no heading with the anchor #{anchor} in {dest.relative_to(REPO)}")
    assert not dead, f"{page.relative_to(REPO)} has dead links:\n" + "\n".join(dead)


def test_a_dead_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title\n\nSee [there](#a-title), [nowhere](#no-title) and [gone](gone.md).\n```\n[x](in-code.md)\n```\n")
    assert anchors(page) == {"a-title"}
    assert links(page) == ["#a-title", "#no-title", "gone.md"]
