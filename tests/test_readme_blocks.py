"""The README's shell blocks run as printed (issue 30): each ```sh block of README.md runs in bash
(``-euo pipefail``) from a copy of this work tree and exits 0.

A block that cannot run here is preceded by ``<!-- readme-blocks: skip - WHY -->``; the reason
must be given, and the skipped blocks must be the set-up's two (the install and the whole suite),
which tests/test_fresh_install.py and CI run instead.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.test_fresh_install import copy_tree

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(?:^<!-- readme-blocks: (?P<skip>skip\b[^>]*?) -->\n)?^```(?P<lang>\w*)\n(?P<body>.*?)^```",
                   re.S | re.M)


def blocks(text: str) -> list[tuple[str, str | None]]:
    """Every ```sh/bash block of a markdown text, with the skip comment before it (or None)."""
    return [(m["body"], m["skip"]) for m in BLOCK.finditer(text) if m["lang"] in ("sh", "bash", "shell", "console")]


def test_blocks_are_found_and_skips_say_why():
    found = blocks((ROOT / "README.md").read_text())
    assert len(found) >= 5, found
    skipped = [(body, why) for body, why in found if why]
    assert [body.strip() for body, _ in skipped] == ["python -m pip install . && iez demo", "bash scripts/test"]
    for _, why in skipped:
        assert re.match(r"skip - \S.{10,}", why), f"a skipped block must say why: {why!r}"
    # the parser sees a skip only directly before its block
    assert blocks("<!-- readme-blocks: skip - no reason here -->\n\ntext\n```sh\ntrue\n```\n") == [("true\n", None)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return copy_tree(tmp_path_factory.mktemp("readme-tree"))


RUNNABLE = [body for body, why in blocks((ROOT / "README.md").read_text()) if not why]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("body", RUNNABLE, ids=[f"block{i}" for i in range(len(RUNNABLE))])
def test_readme_block_runs(body, tree, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IEZ_", "LD_PRELOAD"))}
    env["IEZ_STATE_DIR"] = str(tmp_path / "state")
    # the README's scratch directories (/tmp/iez-tour, /tmp/iez-run) go under the test's own tree: a run leaves
    # nothing in /tmp, and two runs at once do not share them
    body = body.replace("/tmp/", f"{tmp_path}/")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{body}\nexited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
