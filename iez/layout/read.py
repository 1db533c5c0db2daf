"""One file's layout, from whichever source holds it.

On Lustre the file system's own layout is the truth (``source: "lustre"``).
Elsewhere the placement library's emulation (``source: "emulated"``): the
layout attribute first, then the sidecar log, which the library only writes
where the attribute was refused. Symbolic links are followed, as ``lfs
getstripe`` does; the sidecar is matched on the path made absolute lexically,
the way the library recorded it.
"""

from __future__ import annotations

import os

from iez.layout import emulated, lustre
from iez.layout.model import Layout, lexical_abspath

LUSTRE, EMULATED = "lustre", "emulated"


class LayoutReader:
    """Reads layouts of many files cheaply: one sidecar read, one ``statfs`` per device."""

    def __init__(self, sidecar: emulated.Sidecar | None = None, xattr: str | None = None):
        self._sidecar = sidecar
        self.xattr = xattr or emulated.xattr_name()
        self._lustre_by_dev: dict[int, bool] = {}

    @property
    def sidecar(self) -> emulated.Sidecar:
        if self._sidecar is None:
            self._sidecar = emulated.Sidecar()
        return self._sidecar

    def layout(self, path: str, st: os.stat_result | None = None) -> tuple[Layout, str] | None:
        """``(layout, source)`` of ``path``, or None when it has none.

        ``st`` is the file's ``stat`` when the caller has it. A missing or
        unreadable file raises :class:`OSError` naming it; a malformed emulated
        layout raises :class:`ValueError` naming it.
        """
        st = st or os.stat(path)
        on_lustre = self._lustre_by_dev.get(st.st_dev)
        if on_lustre is None:
            on_lustre = self._lustre_by_dev[st.st_dev] = lustre.is_lustre(path)
        if on_lustre:
            found = lustre.get_stripe(path)
            return (found, LUSTRE) if found else None
        found = emulated.read_xattr(path, self.xattr) or self.sidecar.lookup(path)
        return (found, EMULATED) if found else None

    def describe(self, path: str) -> dict | None:
        """``{file, stripe_size, stripe_count, osts, source}`` for ``path``, or None without a layout."""
        found = self.layout(path)
        if found is None:
            return None
        layout, source = found
        return {"file": lexical_abspath(path), "stripe_size": layout.stripe_size,
                "stripe_count": layout.stripe_count, "osts": list(layout.osts), "source": source}


def layout_of(path: str) -> dict | None:
    """``{file, stripe_size, stripe_count, osts, source}`` of one file, or None when it has no layout."""
    return LayoutReader().describe(path)
