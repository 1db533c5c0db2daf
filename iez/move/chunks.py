"""A file cut into stripe-sized chunks, each on the one OST that serves it (seed 000's unit of work).

A chunk never spans two stripe objects of the source, so reading it touches exactly one OST: the
mover can queue it on that OST and time it as that OST's service time. A file without a layout
(not on Lustre, not placed by iez) is cut into :data:`DEFAULT_CHUNK` pieces on no OST (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from iez.layout.model import Layout
from iez.model import EOF_END

MiB = 1024 * 1024
#: Chunk size for a file whose layout is unknown (Lustre's default stripe size).
DEFAULT_CHUNK = MiB
#: A stripe larger than this is moved in pieces of this size (each still on its one OST).
MAX_CHUNK = 16 * MiB


@dataclass(frozen=True)
class Chunk:
    """``length`` bytes at ``offset`` of file number ``file`` (an index into the movement's file list);
    ``ost``: the source OST serving them (None: unknown); ``mirror``: the source's copy they are read from
    (0-based; None for a file without mirrors); ``alternatives``: ``(mirror, ost)`` of every in-sync copy
    serving them from one OST (the chunk may be read from any of them)."""

    file: int
    offset: int
    length: int
    ost: int | None
    mirror: int | None = None
    alternatives: tuple[tuple[int, int], ...] = ()


def ost_at(layout: Layout | None, offset: int) -> int | None:
    """The OST holding byte ``offset`` under ``layout`` (None: no layout, Data-on-MDT or not instantiated)."""
    if layout is None:
        return None
    for start, end, size, osts in _extents(layout):
        if start <= offset and (end == EOF_END or offset < end):
            if not osts or not size:
                return None
            return osts[((offset - start) // size) % len(osts)]
    return None


def in_sync_copies(layout: Layout | None) -> list[int]:
    """The copies a read may use, the preferred first (then the others in order); stale copies left out."""
    if layout is None or not layout.mirrors:
        return []
    ok = [k for k in range(len(layout.mirrors)) if k not in layout.stale]
    if layout.preferred_mirror in ok:
        ok.remove(layout.preferred_mirror)
        ok.insert(0, layout.preferred_mirror)
    return ok


def copy_layout(layout: Layout, mirror: int) -> Layout:
    """Copy ``mirror`` of a mirrored layout as a layout of its own."""
    return Layout.from_components(layout.mirrors[mirror])


def one_ost(layout: Layout, offset: int, length: int) -> int | None:
    """The OST serving ``length`` bytes at ``offset`` when a single stripe object of ``layout`` holds them all."""
    first = ost_at(layout, offset)
    if first is None:
        return None
    for start, end, size, osts in _extents(layout):
        if start <= offset and (end == EOF_END or offset < end):
            if not size:  # never here: ost_at found an OST, so the component has a stripe size
                return None
            last = offset + length - 1
            if (end != EOF_END and last >= end) or (last - start) // size != (offset - start) // size:
                return None
            return first
    return None


def cut_mirrored(file: int, size: int, layout: Layout, spread: bool) -> list[Chunk]:
    """The chunks of a mirrored file, cut along its first in-sync (preferred) copy. ``spread``: each chunk
    also lists the other in-sync copies that serve it from one OST, and the chunks of an extent are dealt
    to the copies in turn (CEFT's doubled read parallelism); else every chunk reads the preferred copy."""
    copies = in_sync_copies(layout)
    first = copies[0]
    out: list[Chunk] = []
    layouts = {k: copy_layout(layout, k) for k in copies}
    for n, c in enumerate(cut(file, size, layouts[first])):
        if not spread or c.ost is None:
            out.append(Chunk(c.file, c.offset, c.length, c.ost, first))
            continue
        alts = [(first, c.ost)]
        for k in copies[1:]:
            ost = one_ost(layouts[k], c.offset, c.length)
            if ost is not None:
                alts.append((k, ost))
        mirror, ost = alts[n % len(alts)]
        out.append(Chunk(c.file, c.offset, c.length, ost, mirror, tuple(alts)))
    return out


def _extents(layout: Layout) -> Iterator[tuple[int, int, int | None, tuple[int, ...]]]:
    """(start, end, stripe size, OSTs) per component; a plain layout is one component over the file.

    This is :meth:`Layout.as_components` without building the plain layout's :class:`Component` (which checks
    its fields), on purpose: :func:`ost_at` runs for every chunk the mover writes, and building it took that call
    from 0.29 to 1.8 us (measured, a 4-stripe plain layout), where reading and writing a 64 KiB chunk (Lustre's
    smallest stripe) in memory takes 6.4 us: up to a fifth more per chunk, for the two lines below."""
    if not layout.components:
        yield 0, EOF_END, layout.stripe_size, tuple(layout.osts)
        return
    for c in layout.components:
        yield c.start, c.end, (None if c.dom else c.stripe_size), (() if c.dom else tuple(c.osts))


def cut(file: int, size: int, layout: Layout | None, fallback: int = DEFAULT_CHUNK) -> list[Chunk]:
    """The chunks of a ``size``-byte file: stripe by stripe within each component of its layout, ``fallback``
    bytes at a time where no OST is known. An empty file has no chunk."""
    chunks: list[Chunk] = []
    offset = 0
    extents = list(_extents(layout)) if layout is not None else [(0, EOF_END, None, ())]
    for start, end, stripe, osts in extents:
        stop = size if end == EOF_END else min(end, size)
        offset = max(offset, start)
        while offset < stop:
            if osts and stripe:
                k = (offset - start) // stripe
                upto = min(start + (k + 1) * stripe, stop, offset + MAX_CHUNK)
                chunks.append(Chunk(file, offset, upto - offset, osts[k % len(osts)]))
            else:
                upto = min(offset + min(fallback, MAX_CHUNK), stop)
                chunks.append(Chunk(file, offset, upto - offset, None))
            offset = upto
        if offset >= size:
            break
    while offset < size:  # past the last component (a layout that does not reach EOF)
        upto = min(offset + fallback, size)
        chunks.append(Chunk(file, offset, upto - offset, None))
        offset = upto
    return chunks
