"""The documentation: the mkdocs site builds with warnings as errors and loads nothing from the network,
and every relative link of README.md, docs/ and the other top-level Markdown files resolves (issue 28 item 8).

mkdocs --strict checks links between pages of docs/ and their anchors; links from docs/ to files of
the repository outside docs/ (deploy/README.md, ...) are no pages of the site, so this test checks
those, and README.md's, itself: the file must exist in the tree, and an anchor into a Markdown
file must name one of its headings.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
                ROOT / "benchmarks" / "RESULTS.md", ROOT / "notebooks" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str, spans: bool = True) -> str:
    """A Markdown text without its fenced blocks and (``spans``) code spans: links there are not links."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text) if spans else text


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs (Python-Markdown's toc) makes it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+\s+(.*?)\s*#*$", prose(path.read_text(), spans=False), re.M)}


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            broken.append(f"{target}: the repository links only inside itself") if "/work/" in target else None
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or root not in (resolved, *resolved.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: {path or page.name} has no heading #{anchor}")
    return broken


def test_every_relative_link_resolves():
    assert len(PAGES) >= 15, PAGES
    broken = {str(p.relative_to(ROOT)): b for p in PAGES if (b := broken_links(p))}
    assert not broken, broken


def test_the_checker_finds_broken_links(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[ok](#top) [gone](missing.md) [bad anchor](#nowhere) `[code](x.md)`\n"
                    "```\n[fenced](y.md)\n```\n")
    assert broken_links(page, tmp_path) == ["missing.md: no such file in the repository",
                                            "#nowhere: p.md has no heading #nowhere"]


def test_nothing_links_outside_the_repository():
    for page in PAGES:
        text = page.read_text()
        assert "/work/" not in text and "../shared" not in text, page


@pytest.mark.timeout(300)
def test_site_builds_strict_without_network(tmp_path):
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-c", "import mkdocs"]).returncode:
        pytest.fail("mkdocs is not installed: it is in the test extra (pip install '.[test]')")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    nav = {p.name for p in (ROOT / "docs").glob("*.md")}
    listed = set(re.findall(r"([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert nav == listed, f"pages not in mkdocs.yml's nav: {nav - listed}; listed but missing: {listed - nav}"
    for name in nav:
        assert (site / ("index.html" if name == "index.md" else f"{name[:-3]}/index.html")).is_file(), name
    # no page loads a script, stylesheet, font or image from the network
    for html in site.rglob("*.html"):
        loaded = re.findall(r"<(?:script|img|iframe)[^>]*\ssrc=\"(https?:[^\"]*)|<link[^>]*\shref=\"(https?:[^\"]*)",
                            html.read_text())
        assert not loaded, (html, loaded)
    for css in site.rglob("*.css"):
        assert not re.search(r"@import\s+url\(['\"]?https?:|url\(['\"]?https?:", css.read_text()), css
