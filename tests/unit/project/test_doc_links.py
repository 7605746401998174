"""The docs are maps: every relative link in the repository's Markdown must lead somewhere.

A link names a file of the repository (relative to the page) and, after `#`, optionally a
heading of that file, as GitHub derives its anchor. Links inside code (fenced blocks and
`inline code`) are text, not links, and web links are not followed.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).parents[3]

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_pages() -> list[Path]:
    """The README of the repository and of each part, the docs pages and the benchmarks' pages."""
    patterns = ("README.md", "docs/*.md", "*/README.md", "charms/*/README.md", "benchmarks/*.md")
    return sorted({page for pattern in patterns for page in REPO.glob(pattern)})


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans removed."""
    lines: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def links(text: str) -> list[str]:
    """The targets of the inline links in `text`'s prose."""
    return [m.group(1) for line in prose_lines(text) for m in _LINK.finditer(line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor GitHub gives the headings of `text` (a repeated one gets -1, -2...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Each relative link of `page` whose file or heading under `root` does not exist, and why."""
    broken: list[str] = []
    for target in links(page.read_text()):
        if _SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif not dest.is_relative_to(root.resolve()):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(root.resolve())}")
    return broken


PAGES = markdown_pages()


def test_the_root_readme_and_the_docs_pages_are_checked():
    names = {str(page.relative_to(REPO)) for page in PAGES}
    assert "README.md" in names
    assert {"docs/operations.md", "docs/upgrading.md", "docs/development.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_leads_to_a_file_and_heading(page: Path):
    assert broken_links(page) == []


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path: Path):
    (tmp_path / "there.md").write_text("# Title\n\n## Known limits (`x`)\n\n## Known limits (`x`)")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#known-limits-x) [again](there.md#known-limits-x-1) [web](https://x.y/z)\n"
        "[gone](missing.md) [nohead](there.md#nowhere) `[code](missing.md)` [self](#top)\n"
        "```\n[fenced](missing.md)\n```\n# Top\n[up](../outside.md)\n"
    )
    (tmp_path.parent / "outside.md").write_text("# Outside\n")
    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file",
        "there.md#nowhere: no heading #nowhere in there.md",
        "../outside.md: outside the repository",
    ]
