"""The emulated layout: what the placement library stores where Lustre is absent.

Off Lustre the library cannot place stripes, so it records the layout it would
have applied, as one line of text (placement_lib/README.md, "Formats")::

    version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11

or, for a layout with a pool or components (PFL), version 2: one ``comp=``
field per component, ``START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS`` then optional
``:pool=NAME`` and ``:overstripe``, where ``END`` is ``eof`` for the end of the
file, ``STRIPE_SIZE`` is ``-`` when a template leaves it to iez, ``OSTS`` is
``3,7,11``, ``-`` (not chosen: Lustre chooses when the file reaches the extent)
or ``mdt`` (Data-on-MDT, stripe count 0)::

    version=2 comp=0:1048576:1048576:0:mdt comp=1048576:eof:1048576:4:1,2,5,6:pool=flash

A mirrored layout (Lustre FLR) is version 3: each mirror is a ``mirror=ID`` field
(IDs 1, 2, ... in order) with optional ``:prefer`` (the copy reads should take)
and ``:stale`` (a copy a write has left behind until a resync), followed by its
own ``comp=`` fields as in version 2. Readers of versions 1 and 2 refuse it::

    version=3 mirror=1:prefer comp=0:eof:1048576:2:0,1 mirror=2:stale comp=0:eof:1048576:2:4,5

A directory's *default layout* (an emulated ``lfs setstripe DIR``) is the same
attribute on the directory, usually a template (``OSTS`` all ``-``).

in the extended attribute ``user.iez.layout`` (``IEZ_LAYOUT_XATTR`` renames
it), or, where user attributes are refused, as a line of the sidecar log
``$IEZ_STATE_DIR/layouts.log``: the text, a TAB, the absolute path with ``\\``,
TAB and newline escaped as ``\\\\``, ``\\t`` and ``\\n``. The last line for a path wins.

The attribute is parsed strictly: a layout iez misreads would make every
figure computed from it wrong, so bad text is an error naming the file. The
sidecar is a log many processes append to, so one bad line is a warning (with
its line number) and the rest of the log still counts; a last line without
its newline is an append still in progress or cut short, and is skipped.
The sidecar records what iez placed: a file later deleted and created again
without iez still shows the recorded layout.
"""

from __future__ import annotations

import errno
import os
import re
import warnings
from pathlib import Path

from iez import config
from iez.config import Settings
from iez.layout.model import Layout, lexical_abspath
from iez.model import ALL_OSTS, EOF_END, Component, check_pool_name

DEFAULT_XATTR = config.DEFAULT_XATTR
VERSION = 1
VERSION_COMPOSITE = 2
VERSION_MIRRORED = 3
FORMAT_V3 = "version=3 mirror=ID[:prefer][:stale] comp=... [mirror=ID ... comp=...] ..."
FORMAT_V2 = "version=2 comp=START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS[:pool=NAME][:overstripe] ..."
SIDECAR_NAME = "layouts.log"
FORMAT = "version=1 stripe_size=BYTES stripe_count=N osts=I,J,..."
_KEYS = ("version", "stripe_size", "stripe_count", "osts")
_INT = re.compile(r"-?[0-9]+")
#: getxattr errors that mean "no attribute here" rather than a real failure.
_NO_ATTR = {errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP}


class LayoutWarning(UserWarning):
    """A sidecar line iez skipped; the message names the log and the line."""


def xattr_name(env: dict[str, str] | None = None) -> str:
    """The attribute name: ``IEZ_LAYOUT_XATTR``, else ``user.iez.layout`` (:class:`iez.config.Settings`)."""
    return Settings.from_env(env=env).layout_xattr


def format_attr(layout: Layout) -> str:
    """Version 1 for a plain layout without a pool (what older readers know), version 2 for a pool or
    components, version 3 for mirrors."""
    if layout.mirrors:
        return format_mirrors(layout)
    if not layout.components and not layout.pool:
        return (f"version={VERSION} stripe_size={layout.stripe_size} stripe_count={layout.stripe_count} "
                f"osts={','.join(str(o) for o in layout.osts)}")
    return format_components(layout.as_components())


def format_component(c: Component) -> str:
    end = "eof" if c.end == EOF_END else str(c.end)
    size = "-" if c.stripe_size is None else str(c.stripe_size)
    osts = "mdt" if c.dom else (",".join(str(o) for o in c.osts) if c.osts else "-")
    text = f"comp={c.start}:{end}:{size}:{0 if c.dom else c.stripe_count}:{osts}"
    if c.pool:
        text += f":pool={c.pool}"
    if c.overstriping:
        text += ":overstripe"
    return text


def format_components(components: tuple[Component, ...] | list[Component]) -> str:
    """Version-2 text of a composite layout or template (each component carries its own pool)."""
    return " ".join([f"version={VERSION_COMPOSITE}"] + [format_component(c) for c in components])


def format_mirrors(layout: Layout, with_osts: bool = True) -> str:
    """Version-3 text of a mirrored layout (``with_osts=False``: its template, OST choices left out)."""
    out = [f"version={VERSION_MIRRORED}"]
    for k, mirror in enumerate(layout.mirrors):
        flags = (":prefer" if k == layout.preferred_mirror else "") + (":stale" if k in layout.stale else "")
        out.append(f"mirror={k + 1}" + (flags if with_osts else ""))
        out.extend(format_component(c if with_osts else c.template()) for c in mirror)
    return " ".join(out)


def canonical_template(layout: Layout | None) -> str:
    """The text the library compares a directory's default with: its template in version 2, ``""`` for none.

    OST choices (``lfs setstripe -i``) are left out: a template says how files
    are striped, not where.
    """
    if layout is None:
        return ""
    if layout.mirrors:
        return format_mirrors(Layout.from_mirrors(layout.mirrors), with_osts=False)
    return format_components(layout.template())


def _parse_v2(fields: list[str], bad) -> Layout:
    pool: str | None = None
    comps: list[Component] = []
    for field in fields[1:]:
        key, sep, value = field.partition("=")
        if key == "pool" and sep and not comps:
            try:
                pool = check_pool_name(value, "layout")
            except ValueError as err:
                raise bad(str(err)) from None
            continue
        if key != "comp" or not sep:
            raise bad(f"field {field!r}: expected comp=START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS")
        parts = value.split(":")
        if len(parts) < 5:
            raise bad(f"{field!r}: expected START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS")
        start, end, size, count, osts = parts[:5]
        comp_pool, over = pool, False
        for extra in parts[5:]:
            if extra == "overstripe":
                over = True
            elif extra.startswith("pool="):
                comp_pool = extra[5:]
            else:
                raise bad(f"{field!r}: unknown flag {extra!r} (pool=NAME or overstripe)")
        numbers = [start, count] + ([] if end == "eof" else [end]) + ([] if size == "-" else [size])
        if not all(_INT.fullmatch(n) for n in numbers):
            raise bad(f"{field!r}: START, END, STRIPE_SIZE and STRIPE_COUNT must be whole numbers "
                      "(END may be eof, STRIPE_SIZE -)")
        dom = osts == "mdt"
        if dom or osts == "-":
            ost_list: tuple[int, ...] = ()
        else:
            if not all(_INT.fullmatch(p) and not p.startswith("-") for p in osts.split(",")):
                raise bad(f"{field!r}: OSTS must be comma-separated OST indices, - or mdt")
            ost_list = tuple(int(p) for p in osts.split(","))
        try:
            comps.append(Component(int(start), EOF_END if end == "eof" else int(end), int(count),
                                   None if size == "-" else int(size), comp_pool, ost_list, dom, over))
        except ValueError as err:
            raise bad(str(err)) from None
    if not comps:
        raise bad(f"no component; expected {FORMAT_V2!r}")
    try:
        return Layout.from_components(comps)
    except ValueError as err:
        raise bad(str(err)) from None


def _parse_v3(fields: list[str], bad) -> Layout:
    """Version 3: ``mirror=ID[:prefer][:stale]`` fields, each followed by its mirror's version-2 fields."""
    mirrors: list[list[str]] = []
    preferred, stale = None, []
    for field in fields[1:]:
        key, sep, value = field.partition("=")
        if key == "mirror" and sep:
            parts = value.split(":")
            if not _INT.fullmatch(parts[0]) or int(parts[0]) != len(mirrors) + 1:
                raise bad(f"{field!r}: mirror IDs run 1, 2, ... in order (expected mirror={len(mirrors) + 1})")
            for flag in parts[1:]:
                if flag == "prefer" and preferred is None:
                    preferred = len(mirrors)
                elif flag == "stale" and len(mirrors) not in stale:
                    stale.append(len(mirrors))
                else:
                    raise bad(f"{field!r}: unknown or repeated flag {flag!r} (prefer, stale; one mirror prefers)")
            mirrors.append([f"version={VERSION_COMPOSITE}"])
        elif not mirrors:
            raise bad(f"field {field!r} before the first mirror=ID; expected {FORMAT_V3!r}")
        else:
            mirrors[-1].append(field)
    if not mirrors:
        raise bad(f"no mirror; expected {FORMAT_V3!r}")
    copies = []
    for k, mirror in enumerate(mirrors):
        if len(mirror) == 1:
            raise bad(f"mirror {k + 1} has no component")
        copies.append(_parse_v2(mirror, lambda reason, k=k: bad(f"mirror {k + 1}: {reason}")).as_components())
    try:
        return Layout.from_mirrors(copies, preferred, stale)
    except ValueError as err:
        raise bad(str(err).removeprefix("layout: ")) from None


def parse_attr(text: str | bytes, where: str) -> Layout:
    """The layout in attribute text; :class:`ValueError` naming ``where`` and the problem otherwise."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{where}: layout attribute is not ASCII text; expected {FORMAT!r}") from None
    shown = text if len(text) <= 120 else text[:117] + "..."

    def bad(reason: str) -> ValueError:
        return ValueError(f"{where}: layout attribute {shown!r}: {reason}")

    fields = text.split(" ")
    if fields[0] == f"version={VERSION_COMPOSITE}":
        return _parse_v2(fields, bad)
    if fields[0] == f"version={VERSION_MIRRORED}":
        return _parse_v3(fields, bad)
    pairs = [field.partition("=") for field in fields]
    if len(fields) != len(_KEYS) or [key for key, _, _ in pairs] != list(_KEYS) or any(not s for _, s, _ in pairs):
        raise bad(f"expected {FORMAT!r}")
    values = {key: value for key, _, value in pairs}
    for key in ("version", "stripe_size", "stripe_count"):
        if not _INT.fullmatch(values[key]):
            raise bad(f"{key}={values[key]!r} is not a whole number")
    version, stripe_size, stripe_count = (int(values[k]) for k in ("version", "stripe_size", "stripe_count"))
    if version != VERSION:
        raise bad(f"unknown layout version {version} (this iez reads versions {VERSION}, {VERSION_COMPOSITE} and {VERSION_MIRRORED})")
    if stripe_size <= 0:
        raise bad(f"stripe_size={stripe_size} must be positive")
    parts = values["osts"].split(",")
    if not all(_INT.fullmatch(p) for p in parts):
        raise bad(f"osts={values['osts']!r} must be comma-separated OST indices, e.g. 3,7,11")
    osts = tuple(int(p) for p in parts)
    negative = [o for o in osts if o < 0]
    if negative:
        raise bad(f"OST index {negative[0]} is negative")
    if stripe_count != len(osts):
        raise bad(f"stripe_count={stripe_count} but osts lists {len(osts)} OST{'s' if len(osts) != 1 else ''}")
    return Layout(stripe_size, osts)


def read_xattr(path: str, name: str | None = None) -> Layout | None:
    """The layout attribute of ``path`` (symbolic links followed), or None when it has none.

    A file system without user attributes counts as "none" (the library then
    used the sidecar); any other failure, a missing file first, raises
    :class:`OSError` naming the path.
    """
    try:
        raw = os.getxattr(path, name or xattr_name())
    except OSError as err:
        if err.errno in _NO_ATTR:
            return None
        raise
    return parse_attr(raw, os.fsdecode(path))


def sidecar_path(settings: Settings | None = None) -> Path:
    return (settings or Settings.from_env()).state_dir / SIDECAR_NAME


def escape_path(path: str) -> bytes:
    raw = os.fsencode(path)
    return raw.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")


def unescape_path(raw: bytes) -> str:
    """The path of a sidecar line; :class:`ValueError` for an escape the library never writes."""
    out, i = bytearray(), 0
    while i < len(raw):
        byte = raw[i]
        if byte != 0x5C:  # backslash
            out.append(byte)
            i += 1
            continue
        code = raw[i + 1 : i + 2]
        if code not in (b"\\", b"t", b"n"):
            raise ValueError(f"bad escape {raw[i:i + 2]!r} in the path")
        out += {b"\\": b"\\", b"t": b"\t", b"n": b"\n"}[code]
        i += 2
    return os.fsdecode(bytes(out))


UNDONE = b"-"  # a sidecar line's text when the library undid that path's placement


def read_sidecar(log: Path) -> dict[str, Layout | None]:
    """Path → layout from the sidecar log (``{}`` when there is no log).

    A path whose last line has a bad layout maps to None: its latest record is
    unreadable, and an earlier line would be out of date. A last line ``-``
    (the library undid the placement: the application's own call failed) leaves
    the path out.
    """
    try:
        data = log.read_bytes()
    except FileNotFoundError:
        return {}
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or an unfinished append
    entries: dict[str, Layout | None] = {}
    for number, line in enumerate(lines, start=1):
        where = f"{log}: line {number}"
        attr, tab, escaped = line.partition(b"\t")
        try:
            if not tab or b"\t" in escaped:
                raise ValueError("expected the layout text, one TAB and the escaped path")
            path = unescape_path(escaped)
            if not path.startswith("/"):
                raise ValueError(f"path {path!r} is not absolute")
        except ValueError as err:
            warnings.warn(LayoutWarning(f"{where}: {err}; line skipped"), stacklevel=2)
            continue
        if attr == UNDONE:
            entries.pop(path, None)  # the library removed the file it had placed: no layout known
            continue
        try:
            entries[path] = parse_attr(attr, where)
        except ValueError as err:
            warnings.warn(LayoutWarning(f"{err}; no layout known for {path}"), stacklevel=2)
            entries[path] = None
    return entries


class Sidecar:
    """The sidecar log, read on first use and then looked up by path (for walks over many files)."""

    def __init__(self, log: Path | None = None):
        self.log = Path(log) if log is not None else sidecar_path()
        self._entries: dict[str, Layout | None] | None = None

    def lookup(self, path: str) -> Layout | None:
        if self._entries is None:
            self._entries = read_sidecar(self.log)
        return self._entries.get(lexical_abspath(path))
