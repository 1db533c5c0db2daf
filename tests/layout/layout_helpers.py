"""What the layout command tests share: files carrying an emulated layout, and `iez` run as the command."""

from __future__ import annotations

import os

from conftest import iez_cli


def make(path, size: int, attr: str | None = None) -> str:
    """A file of ``size`` bytes (sparse) at ``path``, with ``attr`` as its ``user.iez.layout`` when given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    if attr:
        os.setxattr(path, "user.iez.layout", attr.encode())
    return str(path)


def iez(tmp_path, *args):
    """``iez ARGS`` with a state directory of the test's own and the default attribute name."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return iez_cli(*args, env={"IEZ_STATE_DIR": str(state), "IEZ_LAYOUT_XATTR": ""})
