"""Lustre's limits are defined once, in iez/lustre_limits.py (issue 28 item 5): a stripe-count, stripe-size,
alignment, pool-name or OST-index limit written as a number anywhere else in iez/ fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from iez import lustre_limits

REPO = Path(__file__).resolve().parents[1]
LIMITS = {lustre_limits.STRIPE_ALIGNMENT, lustre_limits.MAX_STRIPE_COUNT, lustre_limits.MAX_POOL_NAME,
          lustre_limits.MAX_OST_INDEX}
#: Names of constants that would be a Lustre limit when bound to one of those numbers.
WORDS = ("STRIPE", "ALIGN", "POOL", "OST")


def _limit_literals(tree: ast.AST, source: str = "") -> list[tuple[int, str]]:
    """(line, what) of each Lustre-limit number bound to a limit-like name or compared with a stripe count.
    Numbers written in hex are wire-format values (``LOV_ALL_STRIPES = 0xFFFF``), not limits."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in LIMITS \
                and not (ast.get_source_segment(source, node.value) or "").lower().startswith("0x"):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any(w in n.upper() for n in names for w in WORDS):
                found.append((node.lineno, f"{names[0]} = {node.value.value}"))
        if isinstance(node, ast.keyword) and node.arg in ("le", "lt") and isinstance(node.value, ast.Constant) \
                and node.value.value in LIMITS:
            found.append((node.lineno, f"{node.arg}={node.value.value}"))
        if isinstance(node, ast.Compare):
            numbers = [c.value for c in node.comparators if isinstance(c, ast.Constant)]
            text = ast.unparse(node.left).lower()
            if any(n in LIMITS for n in numbers) and any(w.lower() in text for w in WORDS):
                found.append((node.lineno, ast.unparse(node)))
    return found


@pytest.mark.slow
def test_no_lustre_limit_is_defined_outside_its_module():
    offenders = []
    for path in sorted((REPO / "iez").rglob("*.py")):
        if path.name == "lustre_limits.py":
            continue
        text = path.read_text()
        for line, what in _limit_literals(ast.parse(text, str(path)), text):
            offenders.append(f"{path.relative_to(REPO)}:{line}: {what}")
    assert not offenders, "import these from iez.lustre_limits:\n" + "\n".join(offenders)


def test_the_guard_sees_a_limit_written_as_a_number():
    source = "MAX_STRIPES = 2000\nok = 2000\nif stripe_count <= 2000: pass\nx = Field(le=65535)\nLOV_ANY = 0xFFFF\n"
    assert [what for _, what in _limit_literals(ast.parse(source), source)] == [
        "MAX_STRIPES = 2000", "stripe_count <= 2000", "le=65535"]


def test_the_api_schema_and_the_layout_checks_agree_on_the_limits():
    from iez.api.schemas import TEMPLATE_SCHEMA, StripeCount  # noqa: F401
    from iez.layout import rules

    pattern = TEMPLATE_SCHEMA["items"]["properties"]["pool"]["pattern"]
    assert f"{{1,{lustre_limits.MAX_POOL_NAME}}}" in pattern
    assert rules.MAX_STRIPE_COUNT == lustre_limits.MAX_STRIPE_COUNT
