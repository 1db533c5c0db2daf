"""One file's layout, from whichever source holds it.

On Lustre the file system's own layout is the truth (``source: "lustre"``).
Elsewhere the placement library's emulation (``source: "emulated"``): the
layout attribute first, then the sidecar log, which the library only writes
where the attribute was refused. Symbolic links are followed, as ``lfs
getstripe`` does; the sidecar is matched on the path made absolute lexically,
the way the library recorded it.

A directory's layout is its *default* (what files created in it get, ``lfs
setstripe DIR``): on Lustre the directory's own or, when it has none, the file
system's; in emulation the directory's layout attribute (the sidecar log only
records files).
"""

from __future__ import annotations

import os
import stat

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

    def on_lustre(self, path: str, st: os.stat_result) -> bool:
        """Whether ``path`` (whose ``stat`` is ``st``) is on Lustre; one ``statfs`` per device."""
        on_lustre = self._lustre_by_dev.get(st.st_dev)
        if on_lustre is None:
            on_lustre = self._lustre_by_dev[st.st_dev] = lustre.is_lustre(path)
        return on_lustre

    def layout(self, path: str, st: os.stat_result | None = None) -> tuple[Layout, str] | None:
        """``(layout, source)`` of ``path``, or None when it has none.

        ``st`` is the file's ``stat`` when the caller has it. A missing or
        unreadable file raises :class:`OSError` naming it; a malformed emulated
        layout raises :class:`ValueError` naming it.
        """
        st = st or os.stat(path)
        if self.on_lustre(path, st):
            found = lustre.get_stripe(path)
            return (found, LUSTRE) if found else None
        found = emulated.read_xattr(path, self.xattr) or self.sidecar.lookup(path)
        return (found, EMULATED) if found else None

    def default(self, directory: str, st: os.stat_result | None = None) -> tuple[Layout, str] | None:
        """``(template, source)`` of a directory's default layout, or None when it has none."""
        st = st or os.stat(directory)
        if self.on_lustre(directory, st):
            found = lustre.get_stripe(directory)
            return (found, LUSTRE) if found else None
        found = emulated.read_xattr(directory, self.xattr)
        return (found, EMULATED) if found else None

    def describe(self, path: str) -> dict | None:
        """The contract's JSON for ``path``: ``file``, ``stripe_size``, ``stripe_count``, ``osts``, ``source``,
        and ``pool``/``components`` when set; a directory's default adds ``"default": true``. None without one."""
        st = os.stat(path)
        directory = stat.S_ISDIR(st.st_mode)
        found = self.default(path, st) if directory else self.layout(path, st)
        if found is None:
            return None
        layout, source = found
        out = {"file": lexical_abspath(path), **layout.to_json(), "source": source}
        if directory:
            out["default"] = True
        return out


def layout_of(path: str) -> dict | None:
    """The contract's JSON for one file (a directory: its default layout), or None when it has none."""
    return LayoutReader().describe(path)
