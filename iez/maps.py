"""Layout maps: one application's layouts in an immutable file the preload library maps (``IEZ_MAP``).

A job must not open one DB connection per process (a 256-rank job against MariaDB's default 151
connections placed 130 of its files), so its layouts are exported to a constant database (CDB, D. J.
Bernstein's public-domain format) that every rank maps read-only: a lookup is a hash probe in mapped
memory, with no lock, no allocation, no descriptor and no socket (``placement_lib/src/map.c``).

File layout (CDB): 256 ``(position, slots)`` pairs of 32-bit little-endian numbers (2048 bytes), the
records (key length, value length, key, value), then 256 linearly probed hash tables of ``(hash,
record position)`` slots, twice as many slots as keys; hash ``h = 5381; h = (h * 33) ^ byte`` modulo
2**32, table ``h & 255``, first slot ``(h >> 8) % slots``. Positions are 32-bit: a map ends before
4 GiB (:class:`MapTooLarge` otherwise; about 12 million plain layouts).

Keys and values (map version 1):

- the key ``iez-map`` (never an absolute path) holds the header, text lines ``version=1``,
  ``entries=N``, ``created=EPOCH`` and last ``app=NAME`` (the rest of the value);
- every other key is a file's absolute path (UTF-8, surrogate escapes as the DB stores them), its value
  the DB row's columns as the library reads them from the ``placements`` view: one byte of flags
  (1 ``osts``, 2 ``layout``, 4 ``default_layout`` present, i.e. not NULL), ``stripe_size`` (int64)
  and ``stripe_count`` (int32) little-endian, then each present text NUL-terminated, in that order.

Why CDB and not LMDB (``benchmarks/map_format.py``, 1,000,000 entries): a CDB lookup needs nothing but
the mapping, where LMDB's reader keeps the environment's descriptor open and begins a transaction (an
allocation, and a reader-table lock unless ``MDB_NOLOCK``) per lookup; CDB was also the faster probe
and the faster build from Python, at a similar size.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from sqlalchemy import Connection, Engine

from iez.errors import InputError

MAP_VERSION = 1
HEADER_KEY = b"iez-map"
CDB_HEADER = 2048
LIMIT = 2**32  # positions are 32-bit: the whole file must end before 4 GiB
FLAG_OSTS, FLAG_LAYOUT, FLAG_DEFAULT = 1, 2, 4
_FIXED = struct.Struct("<BqI")  # flags, stripe_size, stripe_count (stripe_count >= 1 in the DB)


class MapError(InputError):
    """A map that cannot be written or read; the message names the file and what is wrong."""


class MapTooLarge(MapError):
    """The layouts do not fit a constant database (4 GiB)."""


@dataclass(frozen=True)
class MapEntry:
    """One file's row as the library reads it from the ``placements`` view."""

    path: str
    stripe_size: int
    stripe_count: int
    osts: str | None  # "3 7 11"
    layout: str | None = None  # version-2 text of a layout with a pool or components
    default_layout: str | None = None  # canonical template it was learnt under ('' none, None unknown)


def encode_value(entry: MapEntry) -> bytes:
    """The map's value for ``entry`` (map version 1, see the module's docstring)."""
    osts, layout, default = entry.osts, entry.layout, entry.default_layout
    flags = (osts is not None) | (layout is not None) << 1 | (default is not None) << 2
    try:
        parts = [_FIXED.pack(flags, entry.stripe_size, entry.stripe_count)]
    except struct.error:
        raise MapError(f"the row of {entry.path} has stripe_size {entry.stripe_size}, stripe_count "
                       f"{entry.stripe_count}: out of range for a layout map") from None
    for value in (osts, layout, default):
        if value is not None:
            parts.append(value.encode("utf-8", "surrogateescape"))
            parts.append(b"\0")
    data = b"".join(parts)
    if data.count(0, _FIXED.size) != bin(flags).count("1"):
        raise MapError(f"a text of the row of {entry.path} holds a NUL byte: it cannot go into a layout map")
    return data


def decode_value(path: str, value: bytes) -> MapEntry:
    """The entry stored as ``value``; :class:`MapError` when it is malformed."""
    if len(value) < _FIXED.size or value[0] & ~7:
        raise MapError(f"the map's value for {path} is malformed ({len(value)} bytes)")
    flags, stripe_size, stripe_count = _FIXED.unpack_from(value)
    parts = value[_FIXED.size:].split(b"\0")
    if parts[-1] != b"":
        raise MapError(f"the map's value for {path} is malformed (unterminated text)")
    parts.pop()
    texts: list[str | None] = []
    for flag in (FLAG_OSTS, FLAG_LAYOUT, FLAG_DEFAULT):
        texts.append(parts.pop(0).decode("utf-8", "surrogateescape") if flags & flag and parts else None)
    if parts or sum(bool(flags & f) for f in (1, 2, 4)) != sum(t is not None for t in texts):
        raise MapError(f"the map's value for {path} is malformed (texts do not match its flags)")
    return MapEntry(path, stripe_size, stripe_count, *texts)


def cdb_hashes(keys: Sequence[bytes]) -> np.ndarray:
    """CDB's hash of every key (uint32), byte position by byte position over all keys at once."""
    n = len(keys)
    h = np.full(n, 5381, dtype=np.uint32)
    if n == 0:
        return h
    lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=n)
    flat = np.frombuffer(b"".join(keys), dtype=np.uint8)
    offsets = np.cumsum(lengths) - lengths
    order = np.argsort(-lengths, kind="stable")  # longest first: byte j is in a prefix of them
    sorted_len, sorted_off = lengths[order], offsets[order]
    hs = h[order]
    for j in range(int(sorted_len[0])):
        live = int(np.searchsorted(-sorted_len, -j, side="left"))  # the keys longer than j
        part = hs[:live]
        hs[:live] = (part + (part << np.uint32(5))) ^ flat[sorted_off[:live] + j]
    h[order] = hs
    return h


def cdb_hash(key: bytes) -> int:
    h = 5381
    for byte in key:
        h = ((h + (h << 5)) & 0xFFFFFFFF) ^ byte
    return h


def build_cdb(items: Sequence[tuple[bytes, bytes]], out) -> int:
    """Write the constant database of ``items`` (distinct keys) to the binary file ``out``; its size."""
    n = len(items)
    keys = [k for k, _ in items]
    lengths = np.fromiter((8 + len(k) + len(v) for k, v in items), dtype=np.int64, count=n)
    positions = CDB_HEADER + np.concatenate(([0], np.cumsum(lengths)[:-1])) if n else np.zeros(0, np.int64)
    records_end = CDB_HEADER + int(lengths.sum())
    total = records_end + 16 * n  # every table has twice as many 8-byte slots as keys
    if total >= LIMIT:
        raise MapTooLarge(f"{n} layouts need {total} bytes: a layout map (a constant database) ends before 4 GiB")
    hashes = cdb_hashes(keys).astype(np.int64)
    table = hashes & 255
    counts = np.bincount(table, minlength=256)
    slots = 2 * counts
    table_pos = records_end + 8 * np.concatenate(([0], np.cumsum(slots)[:-1]))
    # place every key at its first free slot from (h >> 8) % slots, linearly probed: sorted by (table,
    # first slot), a run of keys takes consecutive slots (a running maximum), the few that pass the
    # table's end wrap to its first free slots
    start = (hashes >> 8) % np.maximum(slots[table], 1)
    order = np.lexsort((start, table))
    t_sorted, s_sorted = table[order], start[order]
    first_of_table = np.concatenate(([0], np.cumsum(counts)[:-1]))
    local = np.arange(n) - first_of_table[t_sorted]
    big = np.int64(1) << 40  # keeps the running maximum inside each table
    place = np.maximum.accumulate(s_sorted - local + t_sorted * big) - t_sorted * big + local
    slot_hash = np.zeros(int(slots.sum()), dtype=np.uint32)
    slot_pos = np.zeros(int(slots.sum()), dtype=np.uint32)
    base_slot = np.concatenate(([0], np.cumsum(slots)[:-1]))
    fits = place < slots[t_sorted]
    idx = order[fits]
    where = base_slot[t_sorted[fits]] + place[fits]
    slot_hash[where] = hashes[idx]
    slot_pos[where] = positions[idx]
    for i in order[~fits]:  # wrapped: the first empty slots of the table's start
        t = int(table[i])
        s = int(base_slot[t])
        while slot_pos[s]:
            s += 1
        slot_hash[s], slot_pos[s] = hashes[i], positions[i]
    header = np.zeros((256, 2), dtype="<u4")
    header[:, 0] = table_pos
    header[:, 1] = slots
    out.write(header.tobytes())
    sizes = np.zeros((n, 2), dtype="<u4")
    sizes[:, 0] = [len(k) for k in keys]
    sizes[:, 1] = [len(v) for _, v in items]
    raw = sizes.tobytes()
    chunk = 65536
    for lo in range(0, n, chunk):
        out.write(b"".join(part for i in range(lo, min(n, lo + chunk))
                           for part in (raw[8 * i:8 * i + 8], items[i][0], items[i][1])))
    slots_out = np.empty((len(slot_hash), 2), dtype="<u4")
    slots_out[:, 0] = slot_hash
    slots_out[:, 1] = slot_pos
    out.write(slots_out.tobytes())
    return total


def header_value(app: str, entries: int) -> bytes:
    return (f"version={MAP_VERSION}\nentries={entries}\ncreated={time.time():.3f}\napp=".encode()
            + app.encode("utf-8", "surrogateescape"))


def write_map(path: str | os.PathLike, app: str, entries: Iterable[MapEntry]) -> dict:
    """Write ``app``'s layouts to ``path`` atomically (a temporary file renamed over it), mode 0600.

    Returns ``{"path", "app", "entries", "bytes", "seconds"}``.
    """
    started = time.perf_counter()
    target = Path(path)
    items: dict[bytes, bytes] = {}
    for e in entries:
        if not e.path.startswith("/"):
            raise MapError(f"{e.path!r} is not an absolute path: the library looks absolute paths up")
        items[e.path.encode("utf-8", "surrogateescape")] = encode_value(e)
    pairs = [(HEADER_KEY, header_value(app, len(items))), *items.items()]
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)  # mode 0600
    except OSError as err:
        raise MapError(f"cannot write the layout map {target}: {err.strerror} ({directory})") from None
    try:
        with os.fdopen(fd, "wb") as out:
            size = build_cdb(pairs, out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"path": str(target), "app": app, "entries": len(items), "bytes": size,
            "seconds": round(time.perf_counter() - started, 3)}


class LayoutMap:
    """A layout map read back (``iez map show``, tests): its header and lookups by path."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        try:
            self.data = Path(path).read_bytes()
        except OSError as err:
            raise MapError(f"cannot read the layout map {self.path}: {err.strerror}") from None
        if len(self.data) < CDB_HEADER:
            raise MapError(f"{self.path} is {len(self.data)} bytes: not a layout map (truncated?)")
        raw = self._get(HEADER_KEY)
        if raw is None:
            raise MapError(f"{self.path} has no '{HEADER_KEY.decode()}' header record: not an iez layout map")
        fields = raw.decode("utf-8", "surrogateescape").split("\n", 3)
        self.header = dict(f.split("=", 1) for f in fields if "=" in f)
        if self.header.get("version") != str(MAP_VERSION):
            raise MapError(f"{self.path} is a layout map of version {self.header.get('version')!r}; "
                           f"this iez reads version {MAP_VERSION}")
        self.app = self.header.get("app", "")
        self.entries = int(self.header.get("entries", "0"))

    def _u32(self, pos: int) -> int:
        if pos + 4 > len(self.data):
            raise MapError(f"{self.path} is truncated or corrupt (offset {pos} beyond {len(self.data)} bytes)")
        return int.from_bytes(self.data[pos:pos + 4], "little")

    def _get(self, key: bytes) -> bytes | None:
        h = cdb_hash(key)
        tpos, tslots = self._u32((h & 255) * 8), self._u32((h & 255) * 8 + 4)
        if not tslots:
            return None
        slot = (h >> 8) % tslots
        for _ in range(tslots):
            sh, rpos = self._u32(tpos + 8 * slot), self._u32(tpos + 8 * slot + 4)
            if not rpos:
                return None
            if sh == h:
                klen, vlen = self._u32(rpos), self._u32(rpos + 4)
                if rpos + 8 + klen + vlen > len(self.data):
                    raise MapError(f"{self.path} is truncated or corrupt (record at {rpos})")
                if self.data[rpos + 8:rpos + 8 + klen] == key:
                    return self.data[rpos + 8 + klen:rpos + 8 + klen + vlen]
            slot = (slot + 1) % tslots
        return None

    def lookup(self, path: str) -> MapEntry | None:
        raw = self._get(path.encode("utf-8", "surrogateescape"))
        return None if raw is None else decode_value(path, raw)


# ---- from the interaction DB ---------------------------------------------------------------------------

def app_entries(conn: Connection, app: str, pinned: bool = False) -> list[MapEntry]:
    """The live layouts of ``app``'s files (and, with ``pinned``, every layout pinned by hand), one per path
    (the newest where a path has several)."""
    from iez.db.maps import app_layouts

    return [MapEntry(path, int(size), int(count), osts, layout, default)
            for path, size, count, osts, layout, default in app_layouts(conn, app, pinned)]


def app_exists(conn: Connection, app: str) -> bool:
    from iez.db.owners import owner_of

    return owner_of(conn, app)[0]


def export_map(engine: Engine, app: str, out: str | os.PathLike, pinned: bool = False) -> dict:
    """Write ``app``'s live layouts from the DB to the map ``out``; the summary of :func:`write_map`."""
    from iez.db.engine import read

    entries = read(engine, lambda conn: app_entries(conn, app, pinned))
    return write_map(out, app, entries)


def map_file(maps_dir: str | os.PathLike, app: str) -> Path:
    """Where the MDS keeps ``app``'s map: ``MAPS_DIR/<app, quoted as one file name>.cdb``."""
    from urllib.parse import quote

    return Path(maps_dir) / f"{quote(app, safe='') or '%00'}.cdb"


def write_app_map(engine: Engine, app: str, maps_dir: str | os.PathLike) -> dict:
    """Write ``app``'s map (its live layouts and the hand-pinned ones) to :func:`map_file`, readable only by the
    application's owner: a service running as root gives the file to the owner's account when the DB names
    one this host knows (``applications.owner``); otherwise the file stays the service user's, mode 0600."""
    from iez.db.engine import read

    directory = Path(maps_dir)
    directory.mkdir(parents=True, exist_ok=True, mode=0o711)  # names not listable, files reachable by path
    target = map_file(directory, app)
    info = write_map(target, app, read(engine, lambda conn: app_entries(conn, app, pinned=True)))
    owner = read(engine, lambda conn: _owner(conn, app)) if os.geteuid() == 0 else None
    if owner:
        import pwd

        try:
            os.chown(target, pwd.getpwnam(owner).pw_uid, -1)
            info["owner"] = owner
        except (KeyError, OSError):
            pass  # not an account of this host: the map stays root's (0600)
    return info


def _owner(conn: Connection, app: str) -> str | None:
    from iez.db.owners import owner_of

    try:
        return owner_of(conn, app)[1]
    except Exception:  # a DB before migration 0007 has no owner column
        return None


def start_job_map(settings, app: str, directory: str | os.PathLike, env: dict, log) -> Path | None:
    """``iez run``: export ``app``'s layouts (and the hand-pinned ones) to ``directory``/layouts.cdb and set
    ``IEZ_MAP`` in ``env``; when that fails, say so and leave the job to ``IEZ_DB`` (None)."""
    from iez.config import describe
    from iez.db import open_db

    try:
        info = export_map(open_db(settings), app, Path(directory) / "layouts.cdb", pinned=True)
    except Exception as err:  # never stops the job: the library still has IEZ_DB
        env.pop("IEZ_MAP", None)
        reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        print(f"iez run: {app}: no layout map ({reason}): layouts are looked up in {describe(settings.db_url)}",
              file=log)
        return None
    env["IEZ_MAP"] = info["path"]
    return Path(info["path"])
