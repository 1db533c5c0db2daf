"""``iez balance``: being built (issue 24)."""

from __future__ import annotations


def register(subparsers) -> None:
    """Nothing registered yet."""
