"""The emulated cluster's bandwidth table, ``ROOT/bandwidth.shm``, which libiez maps (``IEZ_EMULATE=ROOT``).

Each OST and each OSS is a first-come first-served server: its rate is its bandwidth less its
background load (``load_mib_s``, traffic of other jobs), and a "busy until" time that every process
on the host reserves from when it reads or writes a file with an emulated layout
(``placement_lib/src/bandwidth.c`` has the arithmetic). Rates are rewritten in place (``iez cluster
set --ost N --load MIB_S``), so a running job feels a change at its next call.

Shares (seed 002): a process started with ``IEZ_IO_CLASS=NAME`` (``IEZ_IO_WEIGHT=W``, default 1;
``IEZ_IO_SHARE=F``, a cap as a fraction of each server's rate) is served in its class's own lane on
each server: the classes busy on a server share it by weight, a capped class never gets more than
its cap, and what it leaves goes to the others (water-filling). Processes without a class are class
0 (weight 1, no cap). So two movements weighted 3:1 get 3:1 of an OST, and a background movement
capped at 0.3 leaves a job beside it at least 0.7.

Format (little-endian): a 32-byte header ``IEZBW001``, u32 version 2, u32 OST slots (highest index
+ 1), u32 OSS slots, u32 class slots, u64 window (bytes; 0: 4 MiB); then 32 bytes per OST index and
per OSS: f64 rate in bytes/s (0: not slowed), u32 OSS slot (OSTs), u32 flags (1: present), u64 bytes
read and u64 bytes written through the OST since the table was made (every process adds what it
sends, atomically, in scaled bytes: the emulated servers' traffic counters; 0 for OSSs); then 32 bytes per class: u64 key (0 free, 1 class 0, else FNV-1a of the name), f64
weight, f64 cap, 8 unused bytes; then per server (OSTs, then OSSs) a u64 busy-until (CLOCK_MONOTONIC
ns) per class; then per OSS an f64 rate limit in bytes/s per class (0: none): the NRS TBF rules of
that OSS's ost_io service, copied by the emulator from its tree. Then (job attribution) 64 bytes per
class: its name, NUL-terminated (written by the process that claims the slot); then per OST index and
class a u64 of bytes read and a u64 of bytes written by that class's processes: the emulated servers'
``job_stats``, a job being an I/O class (``IEZ_IO_CLASS``; class 0, the processes without one, is
not attributed). A table without this tail is still read; it attributes nothing.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"IEZBW001"
VERSION = 2
#: I/O classes one table holds (class 0, the processes without IEZ_IO_CLASS, included).
CLASSES = 32
HEADER = 32
SLOT = 32
MiB = 1024 * 1024
#: Bytes of a class's name in the job-attribution tail.
NAME = 64
#: A server never gets less than this share of its bandwidth, however heavy the background load:
#: a rate of 0 would mean "not slowed" to the library, and an emulated OST never stops entirely.
MIN_SHARE = 0.01
FILE = "bandwidth.shm"
#: Bytes a server may still be serving when a read or write returns: as a Lustre client keeps RPCs
#: in flight to several OSTs (write-back, readahead), a sequential writer of a striped file gets the
#: sum of its OSTs' bandwidth; close() waits for the rest.
WINDOW = 4 * MiB


@dataclass(frozen=True)
class Server:
    """One OST or OSS: bandwidth and background load in MiB/s."""

    bandwidth_mib_s: float
    load_mib_s: float = 0.0

    @property
    def rate(self) -> float:
        """Bytes per second left for the emulated jobs."""
        if self.bandwidth_mib_s <= 0:
            return 0.0
        left = max(self.bandwidth_mib_s - self.load_mib_s, self.bandwidth_mib_s * MIN_SHARE)
        return left * MiB


def class_key(name: str) -> int:
    """The key of an I/O class in the table: FNV-1a of its name, never 0 (free) or 1 (class 0)."""
    h = 1469598103934665603
    for byte in name.encode():
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h if h > 1 else h + 2


def table_path(root: str | os.PathLike) -> Path:
    return Path(root) / FILE


def write_table(root: str | os.PathLike, osts: dict[int, tuple[Server, str]], osses: dict[str, Server],
                window: int = WINDOW) -> Path:
    """Writes the table anew (busy times zero): ``osts`` maps index -> (server, OSS id)."""
    order = list(osses)
    slot_of = {oss: k for k, oss in enumerate(order)}
    n_ost = max(osts, default=-1) + 1
    servers = n_ost + len(order)
    buf = bytearray(HEADER + (servers + CLASSES) * SLOT + (servers + len(order)) * CLASSES * 8
                    + CLASSES * NAME + n_ost * CLASSES * 16)
    struct.pack_into("<8sIIIIQ", buf, 0, MAGIC, VERSION, n_ost, len(order), CLASSES, window)
    struct.pack_into("<Qdd", buf, HEADER + servers * SLOT, 1, 1.0, 0.0)  # class 0: the default
    for index, (server, oss) in osts.items():
        if oss not in slot_of:
            raise ValueError(f"OST {index} names OSS {oss!r}, which the cluster does not have")
        struct.pack_into("<dII", buf, HEADER + index * SLOT, server.rate, slot_of[oss], 1)
    for oss, server in osses.items():
        struct.pack_into("<dII", buf, HEADER + (n_ost + slot_of[oss]) * SLOT, server.rate, 0, 1)
    path = table_path(root)
    tmp = path.with_name(f".{FILE}.tmp")
    tmp.write_bytes(bytes(buf))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


class Table:
    """The mapped table, to read or change rates while processes use it."""

    def __init__(self, root: str | os.PathLike):
        self.path = table_path(root)
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            raise ValueError(f"{root} has no bandwidth table ({FILE}); create the cluster with "
                             f"`iez cluster emulate --root {root}`") from None
        try:
            self.map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        magic, version, self.n_ost, self.n_oss, self.n_class = struct.unpack_from("<8sIIII", self.map, 0)
        servers = self.n_ost + self.n_oss
        if magic != MAGIC or version != VERSION or \
                len(self.map) < HEADER + (servers + self.n_class) * SLOT + (servers + self.n_oss) * self.n_class * 8:
            raise ValueError(f"{self.path}: not a bandwidth table of version {VERSION}")
        self._names = HEADER + (servers + self.n_class) * SLOT + (servers + self.n_oss) * self.n_class * 8
        self._jobs = self._names + self.n_class * NAME
        self.has_jobs = len(self.map) >= self._jobs + self.n_ost * self.n_class * 16

    def job_counters(self, index: int) -> dict[str, tuple[int, int]]:
        """``{class name: (bytes read, bytes written)}`` through OST ``index`` by each named class that has
        sent any (empty for a table without the job-attribution tail)."""
        self._ost(index)
        if not self.has_jobs:
            return {}
        out: dict[str, tuple[int, int]] = {}
        for k in range(1, self.n_class):
            read, written = struct.unpack_from("<QQ", self.map, self._jobs + (index * self.n_class + k) * 16)
            if not (read or written):
                continue
            raw = bytes(self.map[self._names + k * NAME:self._names + (k + 1) * NAME]).split(b"\0", 1)[0]
            name = raw.decode("utf-8", "replace") or f"class{k}"
            previous = out.get(name, (0, 0))
            out[name] = (previous[0] + read, previous[1] + written)
        return out

    def _ost(self, index: int) -> int:
        if not 0 <= index < self.n_ost or not struct.unpack_from("<I", self.map, HEADER + index * SLOT + 12)[0] & 1:
            raise ValueError(f"OST {index} is not in the bandwidth table {self.path}")
        return HEADER + index * SLOT

    def rate(self, index: int) -> float:
        return struct.unpack_from("<d", self.map, self._ost(index))[0]

    def counters(self, index: int) -> tuple[int, int]:
        """Bytes read from and written to OST ``index`` through the emulated bandwidth since the table was made."""
        return struct.unpack_from("<QQ", self.map, self._ost(index) + 16)

    def set_rate(self, index: int, server: Server) -> None:
        struct.pack_into("<d", self.map, self._ost(index), server.rate)

    def oss_rate(self, slot: int) -> float:
        return struct.unpack_from("<d", self.map, HEADER + (self.n_ost + slot) * SLOT)[0]

    def classes(self) -> list[dict]:
        """The I/O classes processes have joined: key, weight, cap (0: none)."""
        base = HEADER + (self.n_ost + self.n_oss) * SLOT
        out = []
        for k in range(self.n_class):
            key, weight, cap = struct.unpack_from("<Qdd", self.map, base + k * SLOT)
            if key:
                out.append({"slot": k, "key": key, "weight": weight, "cap": cap})
        return out

    def _class_slot(self, name: str) -> int:
        """The slot of class ``name``, claimed when no process has joined it yet."""
        key = class_key(name)
        base = HEADER + (self.n_ost + self.n_oss) * SLOT
        for k in range(1, self.n_class):
            seen = struct.unpack_from("<Q", self.map, base + k * SLOT)[0]
            if seen == 0:
                # processes claim slots with a CAS from C; this writer runs only in the emulator, and a
                # process joining at the same instant with the same name finds the same key
                struct.pack_into("<Qdd", self.map, base + k * SLOT, key, 1.0, 0.0)
                if self.has_jobs:
                    encoded = name.encode("utf-8")[:NAME - 1]
                    self.map[self._names + k * NAME:self._names + k * NAME + len(encoded)] = encoded
                seen = key
            if seen == key:
                return base + k * SLOT
        raise ValueError(f"{self.path}: every class slot is taken; class {name!r} cannot be limited")

    def _limit_at(self, oss_slot: int, class_offset: int) -> int:
        k = (class_offset - (HEADER + (self.n_ost + self.n_oss) * SLOT)) // SLOT
        servers = self.n_ost + self.n_oss
        return HEADER + (servers + self.n_class) * SLOT + servers * self.n_class * 8 + \
            (oss_slot * self.n_class + k) * 8

    def set_tbf(self, oss_slot: int, name: str, bytes_per_s: float) -> None:
        """An NRS TBF rate limit for class ``name`` through OSS ``oss_slot`` (its order in the table; 0: none)."""
        if not 0 <= oss_slot < self.n_oss:
            raise ValueError(f"OSS slot {oss_slot} is not in the bandwidth table {self.path}")
        struct.pack_into("<d", self.map, self._limit_at(oss_slot, self._class_slot(name)), float(bytes_per_s))

    def tbf(self, oss_slot: int, name: str) -> float:
        """The limit of class ``name`` at OSS ``oss_slot`` (0: none)."""
        return struct.unpack_from("<d", self.map, self._limit_at(oss_slot, self._class_slot(name)))[0]

    def clear_tbf(self, oss_slot: int) -> None:
        """No class limited at OSS ``oss_slot`` any more."""
        base = self._limit_at(oss_slot, HEADER + (self.n_ost + self.n_oss) * SLOT)
        struct.pack_into(f"<{self.n_class}d", self.map, base, *([0.0] * self.n_class))

    def close(self) -> None:
        self.map.close()


def from_layout(layout) -> Path:
    """The table of an emulated cluster (:class:`iez.emulate.cluster.ClusterLayout`)."""
    osts = {o.index: (Server(o.bandwidth_mib_s, o.load_mib_s), o.oss) for o in layout.osts}
    osses = {oss["id"]: Server(float(oss.get("bandwidth_mib_s") or 0.0)) for oss in layout.osses}
    return write_table(layout.root, osts, osses)
