"""Write ``pfl-synthetic.darshan``: a Darshan log whose LUSTRE records have composite (PFL) layouts and pools.

None of the public logs in ``tests/data/darshan`` records a complete PFL
layout (only ``ior-posix-16ranks`` has a pool, and its one recorded component
stops at 500 GiB: the rest was never instantiated). No Lustre runs here, so
this script writes such a log with Darshan's own C library
(libdarshan-util, shipped in the ``darshan`` Python package): the library's
writer (``darshan_log_create``, ``darshan_log_put_*``) produces the file and
the tests read it back with the same reader as every real log. Records follow
``darshan-lustre-log-format.h`` version 2 (per component: stripe size and
count, pattern, flags, extent, mirror id, pool name; then every component's
OST ids) and ``darshan-posix-log-format.h`` version 4.

    python tests/trace/data/make_pfl_log.py [OUT]   # default: beside this script

The files (what the importer must find in each is asserted in
``tests/trace/test_darshan_import.py``):

- ``pfl.dat``: shared (rank -1), 200 MiB, three instantiated components in
  pool ``flash``: [0, 4 MiB) 1 stripe, [4, 64 MiB) 4 stripes, [64 MiB, EOF)
  8 stripes of 4 MiB;
- ``dom.dat``: rank 0, 32 MiB, Data-on-MDT [0, 1 MiB) then [1 MiB, EOF) on 2 OSTs;
- ``partial.dat``: rank 1, 2 MiB, only its first component [0, 4 MiB) instantiated
  (pool ``flash``): the template is incomplete;
- ``plain.dat``: rank 2, 8 MiB, a plain layout (not composite) of 2 stripes in pool ``disk``;
- ``over.dat``: rank 3, 16 MiB, one overstriped component over the whole file (4 stripes on 2 OSTs).
"""

from __future__ import annotations

import hashlib
import struct
import sys
from pathlib import Path

import cffi

MIB = 1 << 20
EOF = -1  # Lustre's LUSTRE_EOF as Darshan's signed counter
INIT = 0x10  # LCME_FL_INIT
MDT, OVERSTRIPING = 0x2, 0x4  # llapi_layout pattern bits
POSIX_MOD, LUSTRE_MOD = 1, 8  # darshan_module_id
POSIX_VER, LUSTRE_VER = 4, 2
ZLIB = 0
DIR = "/lustre/scratch/pfl"
JOB_START = 1_700_000_000

CDEF = """
struct darshan_job {
    int64_t uid; int64_t start_time_sec; int64_t start_time_nsec; int64_t end_time_sec; int64_t end_time_nsec;
    int64_t nprocs; int64_t jobid; char metadata[1024];
};
struct darshan_mnt_info { char mnt_type[3015]; char mnt_path[3015]; };
struct ut_hash_handle {
    void *tbl; void *prev; void *next; void *hh_prev; void *hh_next; void *key; unsigned keylen; unsigned hashv;
};
struct darshan_name_record_ref { void *name_record; struct ut_hash_handle hlink; };
void *darshan_log_create(const char *name, int comp_type, int partial_flag);
int darshan_log_put_job(void *fd, struct darshan_job *job);
int darshan_log_put_exe(void *fd, char *buf);
int darshan_log_put_mounts(void *fd, struct darshan_mnt_info *mnts, int count);
int darshan_log_put_namehash(void *fd, struct darshan_name_record_ref *hash);
int darshan_log_put_mod(void *fd, int mod_id, void *buf, int len, int ver);
void darshan_log_close(void *fd);
extern char *posix_counter_names[];
"""

# (name, rank, bytes written, flags of a composite layout or 0, components); a component is
# (start, end, stripe_size, stripe_count, pattern, pool, osts)
FILES = [
    ("pfl.dat", -1, 200 * MIB, INIT, [(0, 4 * MIB, MIB, 1, 0, "flash", [3]),
                                      (4 * MIB, 64 * MIB, MIB, 4, 0, "flash", [4, 5, 6, 7]),
                                      (64 * MIB, EOF, 4 * MIB, 8, 0, "flash", [0, 1, 2, 3, 4, 5, 6, 7])]),
    ("dom.dat", 0, 32 * MIB, INIT, [(0, MIB, MIB, 0, MDT, "", []),
                                    (MIB, EOF, MIB, 2, 0, "", [1, 2])]),
    ("partial.dat", 1, 2 * MIB, INIT, [(0, 4 * MIB, MIB, 1, 0, "flash", [6])]),
    ("plain.dat", 2, 8 * MIB, 0, [(0, EOF, MIB, 2, 0, "disk", [8, 9])]),
    ("over.dat", 3, 16 * MIB, INIT, [(0, EOF, MIB, 4, OVERSTRIPING, "", [1, 2, 1, 2])]),
]


def record_id(path: str) -> int:
    """A stable 64-bit id per path (Darshan's own hash is not needed: names are looked up through the log)."""
    return int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "little") >> 1


def lustre_record(rid: int, rank: int, flags: int, comps: list) -> bytes:
    """One LUSTRE record, version 2: base record, counts, components, then every component's OST ids."""
    out = struct.pack("<Qqqq", rid, rank, len(comps), sum(len(c[6]) for c in comps))
    for start, end, size, count, pattern, pool, _osts in comps:
        # counters: STRIPE_SIZE, STRIPE_COUNT, STRIPE_PATTERN, FLAGS, EXT_START, EXT_END, MIRROR_ID
        out += struct.pack("<7q", size, count, pattern, flags, start, end, 0)
        out += pool.encode().ljust(16, b"\0")
    for comp in comps:
        out += struct.pack(f"<{len(comp[6])}q", *comp[6])
    return out


def posix_record(rid: int, rank: int, written: int, names: list[str]) -> bytes:
    """One POSIX record, version 4: an open, one write of ``written`` bytes from offset 0."""
    counters = [0] * len(names)
    at = {n: i for i, n in enumerate(names)}
    counters[at["POSIX_OPENS"]] = 1
    counters[at["POSIX_WRITES"]] = 1
    counters[at["POSIX_BYTES_WRITTEN"]] = written
    counters[at["POSIX_MAX_BYTE_WRITTEN"]] = written - 1
    counters[at["POSIX_MAX_BYTE_READ"]] = -1
    fcounters = [0.0] * 17
    return struct.pack(f"<Qq{len(counters)}q17d", rid, rank, *counters, *fcounters)


def write(out: Path) -> Path:
    from darshan.discover_darshan import find_utils  # the library the darshan package ships

    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    lib = find_utils(ffi, None)
    names = []
    i = 0
    while len(names) < 69:  # POSIX_NUM_INDICES in version 4
        names.append(ffi.string(lib.posix_counter_names[i]).decode())
        i += 1
    out.unlink(missing_ok=True)
    fd = lib.darshan_log_create(str(out).encode(), ZLIB, 0)
    if fd == ffi.NULL:
        raise SystemExit(f"darshan_log_create failed for {out}")
    keep = []  # cffi memory that must outlive the calls
    try:
        job = ffi.new("struct darshan_job *", {
            "uid": 1000, "start_time_sec": JOB_START, "end_time_sec": JOB_START + 60, "nprocs": 4, "jobid": 4242})
        meta = b"lib_ver=3.5.0\nh=romio_no_indep_rw=true;cb_nodes=4\n"
        ffi.memmove(job.metadata, meta, len(meta))
        check(lib.darshan_log_put_job(fd, job), "job")
        check(lib.darshan_log_put_exe(fd, ffi.new("char[]", b"/usr/bin/pfl-writer --synthetic")), "exe")
        mnts = ffi.new("struct darshan_mnt_info[1]")
        ffi.memmove(mnts[0].mnt_type, b"lustre", 6)
        ffi.memmove(mnts[0].mnt_path, DIR.rsplit("/", 2)[0].encode(), len(DIR.rsplit("/", 2)[0]))
        check(lib.darshan_log_put_mounts(fd, mnts, 1), "mounts")
        refs = ffi.new("struct darshan_name_record_ref[]", len(FILES))
        for n, (name, *_rest) in enumerate(FILES):
            path = f"{DIR}/{name}"
            rec = ffi.new("char[]", struct.pack("<Q", record_id(path)) + path.encode() + b"\0")
            keep.append(rec)
            refs[n].name_record = rec
            refs[n].hlink.next = refs + n + 1 if n + 1 < len(FILES) else ffi.NULL
        check(lib.darshan_log_put_namehash(fd, refs), "names")
        for name, rank, written, _flags, _comps in FILES:
            buf = posix_record(record_id(f"{DIR}/{name}"), rank, written, names)
            check(lib.darshan_log_put_mod(fd, POSIX_MOD, ffi.from_buffer(buf), len(buf), POSIX_VER), "POSIX")
        for name, rank, _written, flags, comps in FILES:
            buf = lustre_record(record_id(f"{DIR}/{name}"), rank, flags, comps)
            check(lib.darshan_log_put_mod(fd, LUSTRE_MOD, ffi.from_buffer(buf), len(buf), LUSTRE_VER), "LUSTRE")
    finally:
        lib.darshan_log_close(fd)
    out.chmod(0o644)
    return out


def check(ret: int, what: str) -> None:
    if ret != 0:
        raise SystemExit(f"libdarshan-util failed to write the {what} part of the log")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("pfl-synthetic.darshan")
    print(write(target))
