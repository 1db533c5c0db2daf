"""``iez cluster emulate``: fake Lustre parameter trees, kept in step with real files.

The cluster comes from a description (``--cluster FILE``: the JSON contract or
``lfs df`` [+ ``lfs pool_list``] text, :mod:`iez.sim.description`) or from
``--oss/--osts-per-oss/--ost-size/--fill`` (OST indices 0..N-1, OSS by OSS, like
the paper's testbed of 3 OSS x 5 OSTs). Under ``ROOT``:

- ``ROOT/<oss id>/obdfilter/<fs>-OST<idx>/``, one tree per OSS as a Lustre
  server has it (``iez-agent --root ROOT/<oss id>`` reads it):
  ``kbytestotal``, ``kbytesfree``, ``kbytesavail``, ``stats`` (rewritten every
  interval) and the state switches ``degraded``, ``readonly``, ``no_precreate``
  (``0``/``1``; written at creation and by ``iez cluster set`` only).
- ``ROOT/mds/``, the MDS node's tree (``iez mds --lustre-params ROOT/mds``):
  ``lod/<fs>-MDT0000-mdtlov/{qos_prio_free,qos_threshold_rr,qos_maxage}`` and
  ``lod/<fs>-MDT0000-mdtlov/pools/<pool>`` (one OST UUID per line), and
  ``osp/<fs>-OST<idx>-osc-MDT0000/{active,max_create_count,reserved_mb_low}``.
- ``ROOT/cluster.json``: the cluster description (the JSON contract, so
  ``iez simulate --cluster ROOT/cluster.json`` reads it) with each OST's current
  ``state`` and ``pools``, an ``emulation`` object (root, data directories, file
  system name, pool definitions, qos settings) and each OST's ``base_used_kb``.

A description's state becomes switches the way an administrator sets it:
``degraded``, ``readonly`` and ``nocreate`` (``no_precreate``) on the OSS,
``inactive`` as ``osp.*.active=0`` on the MDS. Every ``interval`` the emulator
walks the data directories, stripes each file's logical size over its emulated
layout (RAID-0 arithmetic, ``iez usage``), and rewrites ``kbytesavail``
(capacity less the initial fill less those bytes) and the ``read_bytes`` and
``write_bytes`` counters of ``stats`` (what the emulated servers served: see
:class:`Emulator`). Files are written to a
temporary name and renamed, so a reader never sees half a file. Files without
a layout are counted as unplaced and change no OST.

``iez cluster set`` changes states and pools while it runs, the way ``lctl
set_param`` and ``lctl pool_add``/``pool_remove`` would: it rewrites the
switch or pool file atomically, and the next agent or MDS reading picks it up.

Ingest is authenticated in emulation as on a real cluster (:func:`ensure_keys`):
``ROOT/keys/mds.key_secret`` is the MDS's pair (``mds.key`` goes to the agents),
``ROOT/keys/agents/<oss id>.key_secret`` each agent's, and
``ROOT/keys/authorized/<oss id>.key`` the public keys the MDS accepts
(``iez mds --curve-secret-key ROOT/keys/mds.key_secret --curve-authorized ROOT/keys/authorized``).
Existing keys are kept, so an MDS started before the agents keeps working.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agents.lctl import collect_osts, most_restrictive
from agents.procfs import read_tree
from iez.layout.read import LayoutReader
from iez.layout.usage import usage
from iez.model import OST_STATES, ClusterState, check_pool_name
from iez.emulate.bandwidth import MiB
from iez.sim.description import load_cluster, to_json

#: The MDS node's tree under the root.
MDS_DIR = "mds"
KEYS_DIR = "keys"


@dataclass(frozen=True)
class EmulationKeys:
    """Where an emulation's CURVE keys are (see the module's docstring)."""

    root: Path

    @property
    def mds_public(self) -> Path:
        return self.root / "mds.key"

    @property
    def mds_secret(self) -> Path:
        return self.root / "mds.key_secret"

    @property
    def authorized(self) -> Path:
        return self.root / "authorized"

    def agent_secret(self, oss_id: str) -> Path:
        return self.root / "agents" / f"{oss_id}.key_secret"

    def mds_options(self) -> list[str]:
        return ["--curve-secret-key", str(self.mds_secret), "--curve-authorized", str(self.authorized)]

    def agent_options(self, oss_id: str) -> list[str]:
        return ["--curve-server-key", str(self.mds_public), "--curve-secret-key", str(self.agent_secret(oss_id))]


def ensure_keys(root: str | Path, oss_ids=()) -> EmulationKeys:
    """The MDS's key pair and one per OSS under ``ROOT/keys`` (kept when they exist); each OSS's public
    key is put in ``authorized`` by an atomic rename, so an MDS reading the directory never sees half a file."""
    from agents.keys import create_keypair

    keys = EmulationKeys(Path(root) / KEYS_DIR)
    keys.authorized.mkdir(parents=True, exist_ok=True)
    if not keys.mds_secret.exists():
        create_keypair(keys.root, "mds", force=True)
    for oss_id in oss_ids:
        if not keys.agent_secret(oss_id).exists():
            create_keypair(keys.root / "agents", oss_id, force=True)
        public = keys.authorized / f"{oss_id}.key"
        if not public.exists():
            tmp = keys.authorized / f".{oss_id}.tmp"
            tmp.write_bytes((keys.root / "agents" / f"{oss_id}.key").read_bytes())
            os.replace(tmp, public)
    return keys
MDT = "MDT0000"
#: Lustre's default precreate limit (OST_MAX_PRECREATE): max_create_count when creation is allowed.
MAX_CREATE_COUNT = 20000
DEFAULT_QOS = {"prio_free_pct": 90, "threshold_rr_pct": 17, "maxage_s": 5}
#: The switches a state sets: (OSS obdfilter switches on, MDS osp.active, MDS osp.max_create_count > 0).
_SWITCHES = ("degraded", "readonly", "no_precreate")
STATE_SWITCHES = {
    "active": ((), 1, True),
    "degraded": (("degraded",), 1, True),
    "readonly": (("readonly",), 1, True),
    "nocreate": (("no_precreate",), 1, True),
    "inactive": ((), 0, True),
}
_OSS_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")
_FSNAME = re.compile(r"^[A-Za-z0-9_\-]{1,8}$")  # Lustre: at most 8 characters
#: ``module.target.leaf`` with lctl's glob characters; no path separators or empty parts
_PARAM_NAME = re.compile(r"^[A-Za-z0-9_\-*?\[\]]+(\.[A-Za-z0-9_\-*?\[\]]+){2,}$")


@dataclass
class EmulatedOst:
    index: int
    oss: str
    kbytes_total: int
    base_used_kb: int  # pre-existing data (the paper's used file system)
    state: str = "active"
    pools: list[str] = field(default_factory=list)
    bandwidth_mib_s: float = 200.0
    load_mib_s: float = 0.0


@dataclass
class ClusterLayout:
    """An emulated cluster: where its trees are and what they were made from."""

    root: str
    data: list[str]
    fsname: str
    osts: list[EmulatedOst]
    osses: list[dict]  # {"id", "bandwidth_mib_s", "domain"} in order
    fill_cap: float = 0.95
    pools: dict[str, list[int]] = field(default_factory=dict)  # every pool, empty ones included
    qos: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_QOS))

    # -- names and places ---------------------------------------------------------
    @property
    def oss_ids(self) -> list[str]:
        return [oss["id"] for oss in self.osses]

    def ost(self, index: int) -> EmulatedOst:
        for ost in self.osts:
            if ost.index == index:
                return ost
        raise ValueError(f"OST {index} is not in the emulated cluster under {self.root} "
                         f"(its OSTs: {', '.join(str(o.index) for o in self.osts)})")

    def ost_name(self, index: int) -> str:
        return f"{self.fsname}-OST{index:04x}"

    def oss_root(self, oss_id: str) -> Path:
        return Path(self.root) / oss_id

    def ost_dir(self, index: int) -> Path:
        return self.oss_root(self.ost(index).oss) / "obdfilter" / self.ost_name(index)

    @property
    def mds_root(self) -> Path:
        return Path(self.root) / MDS_DIR

    @property
    def lod_dir(self) -> Path:
        return self.mds_root / "lod" / f"{self.fsname}-{MDT}-mdtlov"

    def osp_dir(self, index: int) -> Path:
        return self.mds_root / "osp" / f"{self.ost_name(index)}-osc-{MDT}"

    # -- cluster.json ---------------------------------------------------------------
    def to_json(self) -> dict:
        """The cluster description (:func:`iez.sim.description.parse_json` reads it) plus the emulation's own."""
        servers = []
        for oss in self.osses:
            osts = [{"index": o.index, "kbytes_total": o.kbytes_total,
                     "kbytes_avail": max(0, o.kbytes_total - o.base_used_kb), "bandwidth_mib_s": o.bandwidth_mib_s,
                     "load_mib_s": o.load_mib_s, "pools": sorted(o.pools), "state": o.state,
                     "base_used_kb": o.base_used_kb}
                    for o in self.osts if o.oss == oss["id"]]
            servers.append({**oss, "osts": osts})
        return {"fill_cap": self.fill_cap, "oss": servers,
                "emulation": {"version": 2, "root": self.root, "data": self.data, "fsname": self.fsname,
                              "mds": str(self.mds_root), "pools": {k: sorted(v) for k, v in sorted(self.pools.items())},
                              "qos": self.qos}}

    def save(self) -> Path:
        path = Path(self.root) / "cluster.json"
        _write(path, json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, root: str | Path) -> "ClusterLayout":
        path = Path(root) / "cluster.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{root} holds no emulated cluster (no cluster.json); create it with "
                             f"`iez cluster emulate --root {root}`") from None
        except ValueError as err:
            raise ValueError(f"{path}: not an emulated cluster description ({err})") from None
        try:
            if "emulation" not in doc:  # the first format: equal OSTs, OSS k holding osts_per_oss of them
                return cls._from_first_format(doc)
            emu = doc["emulation"]
            osts = [EmulatedOst(o["index"], oss["id"], o["kbytes_total"], o["base_used_kb"], o.get("state", "active"),
                                list(o.get("pools", [])), o.get("bandwidth_mib_s", 200.0), o.get("load_mib_s", 0.0))
                    for oss in doc["oss"] for o in oss["osts"]]
            osses = [{k: v for k, v in oss.items() if k != "osts"} for oss in doc["oss"]]
            return cls(emu["root"], list(emu["data"]), emu["fsname"], osts, osses, doc.get("fill_cap", 0.95),
                       {k: list(v) for k, v in emu.get("pools", {}).items()}, dict(emu.get("qos", DEFAULT_QOS)))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{path}: not an emulated cluster description (missing or bad {err})") from None

    @classmethod
    def _from_first_format(cls, doc: dict) -> "ClusterLayout":
        per = doc["osts_per_oss"]
        osts = [EmulatedOst(i, f"oss{i // per}", doc["ost_kb"], used) for i, used in enumerate(doc["base_used_kb"])]
        osses = [{"id": f"oss{k}", "bandwidth_mib_s": 600.0, "domain": f"oss{k}"} for k in range(doc["oss"])]
        return cls(doc["root"], list(doc["data"]), doc.get("fsname", "iezfs"), osts, osses)

    def cluster_state(self) -> ClusterState:
        """The description as the simulator and the allocators take it (free space as created)."""
        from iez.sim.description import parse_json
        return parse_json(json.dumps(self.to_json()), str(Path(self.root) / "cluster.json"))


# ------------------------------------------------------------------------------------------ creation


def _check_fsname(fsname: str) -> str:
    if not _FSNAME.match(fsname):
        raise ValueError(f"--fsname {fsname!r}: a Lustre file system name is 1 to 8 letters, digits, '_' or '-'")
    return fsname


def layout_from_counts(root: str | Path, data: list[str], oss: int, osts_per_oss: int, ost_bytes: int,
                       fill: tuple[float, float] = (0.0, 0.0), seed: int = 0, fsname: str = "iezfs"
                       ) -> ClusterLayout:
    """``--oss N --osts-per-oss M --ost-size S --fill LOW-HIGH``: equal OSTs, every one active, no pools."""
    if oss < 1 or osts_per_oss < 1:
        raise ValueError(f"--oss {oss} and --osts-per-oss {osts_per_oss} must be at least 1")
    if ost_bytes < 1024 * 1024:
        raise ValueError(f"--ost-size {ost_bytes} bytes: an OST needs at least 1 MiB")
    low, high = fill
    if not 0.0 <= low <= high < 1.0:
        raise ValueError(f"--fill {low}-{high}: fractions 0 <= low <= high < 1")
    rng = random.Random(seed)
    ost_kb = ost_bytes // 1024
    osts = [EmulatedOst(i, f"oss{i // osts_per_oss}", ost_kb, int(ost_kb * rng.uniform(low, high)))
            for i in range(oss * osts_per_oss)]
    osses = [{"id": f"oss{k}", "bandwidth_mib_s": 600.0, "domain": f"oss{k}"} for k in range(oss)]
    return ClusterLayout(str(Path(root).resolve()), [str(Path(d).resolve()) for d in data], _check_fsname(fsname),
                         osts, osses)


def layout_from_description(root: str | Path, data: list[str], description: str | Path, fsname: str = "iezfs"
                            ) -> ClusterLayout:
    """``--cluster FILE``: OST indices, sizes, fill (from ``kbytes_avail``), pools and states from a description."""
    cluster = load_cluster(description)
    doc = to_json(cluster)
    osts, osses = [], []
    for server in doc["oss"]:
        if not _OSS_ID.match(server["id"]) or server["id"] == MDS_DIR:
            raise ValueError(f"{description}: OSS id {server['id']!r} cannot name its tree under the root (letters, "
                             f"digits, '_', '-' and '.', not {MDS_DIR!r})")
        osses.append({"id": server["id"], "bandwidth_mib_s": server["bandwidth_mib_s"], "domain": server["domain"]})
        for o in server["osts"]:
            osts.append(EmulatedOst(o["index"], server["id"], o["kbytes_total"], o["kbytes_total"] - o["kbytes_avail"],
                                    o["state"], list(o["pools"]), o["bandwidth_mib_s"], o["load_mib_s"]))
    pools: dict[str, list[int]] = {}
    for ost in osts:
        for pool in ost.pools:
            pools.setdefault(pool, []).append(ost.index)
    return ClusterLayout(str(Path(root).resolve()), [str(Path(d).resolve()) for d in data], _check_fsname(fsname),
                         osts, osses, cluster.fill_cap, pools)


def create(layout: ClusterLayout) -> ClusterLayout:
    """Write every tree and cluster.json for ``layout`` (switches and pools as the layout says)."""
    for oss_id in layout.oss_ids:
        layout.oss_root(oss_id).mkdir(parents=True, exist_ok=True)
    for d in layout.data:
        Path(d).mkdir(parents=True, exist_ok=True)
    lod = layout.lod_dir
    (lod / "pools").mkdir(parents=True, exist_ok=True)
    _write(lod / "qos_prio_free", f"{layout.qos['prio_free_pct']}%\n")
    _write(lod / "qos_threshold_rr", f"{layout.qos['threshold_rr_pct']}%\n")
    _write(lod / "qos_maxage", f"{layout.qos['maxage_s']}\n")
    for old in (lod / "pools").iterdir():
        if old.name not in layout.pools and not old.name.startswith("."):
            old.unlink()
    for name, members in layout.pools.items():
        _write_pool(layout, name, members)
    for ost in layout.osts:
        layout.ost_dir(ost.index).mkdir(parents=True, exist_ok=True)
        osp = layout.osp_dir(ost.index)
        osp.mkdir(parents=True, exist_ok=True)
        # Lustre's default low watermark: about 0.1 % of the OST (its size in KiB >> 20, in MiB), at least 1
        _write(osp / "reserved_mb_low", f"{max(1, ost.kbytes_total >> 20)}\n")
        _apply_state(layout, ost.index, ost.state)
    layout.save()
    from iez.emulate.bandwidth import from_layout

    from_layout(layout)  # ROOT/bandwidth.shm: what IEZ_EMULATE=ROOT processes are slowed by
    Emulator(layout).update()
    return layout


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_pool(layout: ClusterLayout, name: str, members) -> None:
    text = "".join(f"{layout.ost_name(i)}_UUID\n" for i in sorted(set(members)))
    _write(layout.lod_dir / "pools" / name, text)


def _apply_state(layout: ClusterLayout, index: int, state: str) -> None:
    """Set the switches that put OST ``index`` in ``state`` (and clear the others)."""
    if state not in STATE_SWITCHES:
        raise ValueError(f"state {state!r} is not one of {', '.join(OST_STATES)}")
    on, active, creates = STATE_SWITCHES[state]
    ost_dir = layout.ost_dir(index)
    for switch in _SWITCHES:
        _write(ost_dir / switch, "1\n" if switch in on else "0\n")
    osp = layout.osp_dir(index)
    _write(osp / "active", f"{active}\n")
    _write(osp / "max_create_count", f"{MAX_CREATE_COUNT if creates else 0}\n")


# ------------------------------------------------------------------------------------------ the running trees


class Emulator:
    """Rewrites the capacity and traffic counters of the OSS trees, as the servers' own obdfilter would.

    Traffic is what the emulated servers served: every byte read or written through the emulated
    bandwidth (any process with libiez and ``IEZ_EMULATE``; the table counts them, scaled), plus the
    background load of other jobs (``load_mib_s`` of ``cluster.json``, the emulated physics),
    integrated over time and counted half as reads, half as writes. A program writing into the data
    directories without the emulated bandwidth changes free space, not traffic: it never passed
    through the emulated servers (and a sparse file's logical size is no measure of bytes sent).
    The counters start at 0 when the emulator starts, as a server's do when it mounts its OSTs.
    """

    def __init__(self, layout: ClusterLayout):
        self.layout = layout
        self.reader = LayoutReader()
        indices = [o.index for o in layout.osts]
        self.read = dict.fromkeys(indices, 0)  # cumulative read_bytes counters
        self.written = dict.fromkeys(indices, 0)  # cumulative write_bytes counters
        self.read_samples = dict.fromkeys(indices, 0)
        self.samples = dict.fromkeys(indices, 0)
        self.last_table: dict[int, tuple[int, int]] = {}  # per-OST table counters at the last update
        # per OST, per job (I/O class): cumulative [read, write] bytes and samples, and the table's last counters
        self.jobs: dict[int, dict[str, list[int]]] = {i: {} for i in indices}
        self.last_jobs: dict[int, dict[str, tuple[int, int]]] = {}
        self.background = dict.fromkeys(indices, 0.0)  # bytes of background load not yet counted
        self.last_time: float | None = None
        self.last_per: dict[int, int] | None = None  # per-OST bytes of the last walk
        self.unplaced_bytes = 0
        self._tbf_errors: set[str] = set()

    def bytes_per_ost(self) -> dict[int, int]:
        per = dict.fromkeys(self.written, 0)
        self.unplaced_bytes = 0
        for d in self.layout.data:
            if not Path(d).is_dir():
                continue
            found = usage(d, reader=self.reader)
            self.unplaced_bytes += found.unplaced_bytes
            for ost, nbytes in found.bytes_per_ost.items():
                if ost in per:
                    per[ost] += nbytes
        return per

    def _table_counters(self) -> dict[int, tuple[int, int]]:
        from iez.emulate.bandwidth import Table

        self._table_jobs: dict[int, dict[str, tuple[int, int]]] = {}
        try:
            table = Table(self.layout.root)
        except ValueError:
            return {}  # a cluster made before bandwidth tables: only its background load is traffic
        try:
            out = {}
            for ost in self.layout.osts:
                try:
                    out[ost.index] = table.counters(ost.index)
                    self._table_jobs[ost.index] = table.job_counters(ost.index)
                except ValueError:
                    pass
            return out
        finally:
            table.close()

    def _update_jobs(self, index: int) -> bool:
        """Adds what each job (I/O class) sent through OST ``index`` since the last update; True when any did."""
        now_jobs = self._table_jobs.get(index, {})
        before = self.last_jobs.get(index, {})
        changed = False
        for name, (read_now, written_now) in now_jobs.items():
            read_before, written_before = before.get(name, (0, 0))
            add_r = read_now - read_before if read_now >= read_before else read_now
            add_w = written_now - written_before if written_now >= written_before else written_now
            if add_r or add_w:
                entry = self.jobs[index].setdefault(name, [0, 0, 0, 0])  # read, written, read samples, write samples
                if add_r:
                    entry[0] += add_r
                    entry[2] += 1
                if add_w:
                    entry[1] += add_w
                    entry[3] += 1
                changed = True
        self.last_jobs[index] = now_jobs
        return changed

    def _job_stats(self, index: int, now: float) -> str:
        """An obdfilter ``job_stats`` block as Lustre prints it (``job_stats:`` then one ``- job_id:`` entry per
        job, its counters in flow style); ``job_stats:`` alone when no job has sent anything."""
        text = "job_stats:\n"
        for name, (read, written, rs, ws) in sorted(self.jobs[index].items()):
            text += f"- job_id:          {json.dumps(name)}\n  snapshot_time:   {int(now)}\n"
            for label, total, samples in (("read_bytes", read, rs), ("write_bytes", written, ws)):
                low = 1 if samples else 0
                text += (f"  {label + ':':<17s}{{ samples: {samples:>11d}, unit: bytes, min: {low:>8d}, "
                         f"max: {total:>8d}, sum: {total:>16d}, sumsq: {0:>18d} }}\n")
        return text

    def _loads(self) -> dict[int, float]:
        """The background load of each OST now (MiB/s): ``iez cluster set --load`` rewrites cluster.json."""
        try:
            current = ClusterLayout.load(self.layout.root)
        except ValueError:
            current = self.layout
        return {o.index: o.load_mib_s for o in current.osts}

    def update(self, walk: bool = True) -> dict[int, int]:
        """Rewrite every OST's files; ``walk=False`` keeps the space from the last walk of the data directories
        and refreshes the counters only (cheap: the traffic counters must stay current, a walk is not)."""
        per = self.bytes_per_ost() if walk or self.last_per is None else self.last_per
        self.last_per = per
        table = self._table_counters()
        now = time.time()
        first = self.last_time is None  # every file is written the first time
        elapsed = 0.0 if self.last_time is None else max(0.0, now - self.last_time)
        self.last_time = now
        loads = self._loads() if elapsed else {}
        for ost in self.layout.osts:
            i = ost.index
            read_now, written_now = table.get(i, (0, 0))
            read_before, written_before = self.last_table.get(i, (0, 0))
            # a table made anew (iez cluster emulate again) starts its counters at 0
            served_read = read_now - read_before if read_now >= read_before else read_now
            served_written = written_now - written_before if written_now >= written_before else written_now
            self.background[i] += loads.get(i, 0.0) * MiB * elapsed
            whole = int(self.background[i])
            self.background[i] -= whole
            read_add = served_read + whole // 2
            write_add = served_written + whole - whole // 2
            if read_add > 0:
                self.read[i] += read_add
                self.read_samples[i] += 1
            if write_add > 0:
                self.written[i] += write_add
                self.samples[i] += 1
            d = self.layout.ost_dir(i)
            if walk or first:
                used_kb = ost.base_used_kb + -(-per[i] // 1024)
                avail = max(0, ost.kbytes_total - used_kb)
                d.mkdir(parents=True, exist_ok=True)
                _write(d / "kbytestotal", f"{ost.kbytes_total}\n")
                _write(d / "kbytesfree", f"{avail}\n")
                _write(d / "kbytesavail", f"{avail}\n")
            if walk or first or read_add > 0 or write_add > 0:
                _write(d / "stats", self._stats(i, now))  # an idle OST's counters stand as they are
            if self._update_jobs(i) or walk or first:
                _write(d / "job_stats", self._job_stats(i, now))
        self.last_table = table
        if walk:
            self.apply_tbf()
        return per

    def _stats(self, index: int, now: float) -> str:
        """An obdfilter ``stats`` block: Lustre prints a counter only once it has samples."""
        text = f"snapshot_time             {now:.6f} secs.nsecs\n"
        for name, total, samples in (("read_bytes", self.read[index], self.read_samples[index]),
                                     ("write_bytes", self.written[index], self.samples[index])):
            if samples:
                text += f"{name:<25s} {samples} samples [bytes] 1 {total} {total}\n"
        return text

    def apply_tbf(self) -> None:
        """The NRS TBF rules in each OSS's tree (``ost/OSS/ost_io``, written by its agent) as rate limits of
        the emulated bandwidth: in emulation a job id is an I/O class (``IEZ_IO_CLASS``), and a rule's rate
        is RPCs of Lustre's default 4 MiB a second."""
        from iez.emulate.bandwidth import Table
        from iez.shares import DEFAULT_RPC_SIZE, SharesError, read_tree_rules

        try:
            table = Table(self.layout.root)
        except ValueError:
            return  # a cluster made before bandwidth tables: nothing to limit
        try:
            for slot, oss_id in enumerate(self.layout.oss_ids):
                try:
                    rules = read_tree_rules(self.layout.oss_root(oss_id))
                except SharesError as err:
                    if str(err) not in self._tbf_errors:
                        self._tbf_errors.add(str(err))
                        print(f"iez cluster emulate: {err}; that OSS's rules are not applied", flush=True)
                    continue
                table.clear_tbf(slot)
                for _name, jobid, rate in rules:
                    table.set_tbf(slot, jobid, rate * DEFAULT_RPC_SIZE)
        finally:
            table.close()


# ------------------------------------------------------------------------------------------ the administrator


@contextmanager
def _locked(root: str | Path) -> Iterator[ClusterLayout]:
    """The layout of ``root``, with changes to it serialised between concurrent ``iez cluster set`` runs."""
    lock = Path(root) / ".cluster.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield ClusterLayout.load(root)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _parse_ost_list(text: str, layout: ClusterLayout, option: str) -> list[int]:
    indices = []
    for part in text.split(","):
        part = part.strip()
        try:
            if part.upper().startswith("OST"):
                index = int(part[3:], 16)
            elif part.lower().startswith("0x"):
                index = int(part, 16)
            else:
                index = int(part)
        except ValueError:
            raise ValueError(f"{option} {text!r}: {part!r} is not an OST index (3, 0x3 or OST0003)") from None
        layout.ost(index)  # refuses an OST the cluster does not have
        indices.append(index)
    if not indices:
        raise ValueError(f"{option}: give at least one OST index")
    return indices


def tree_states(layout: ClusterLayout) -> dict[int, str]:
    """Each OST's state as the trees say it now: the OSS's switches and the MDS's osp, most restrictive."""
    from iez.mds.lustre_params import MDS_PATTERNS, parse_mds_params

    oss_states: dict[int, str] = {}
    for oss_id in layout.oss_ids:
        for reading in collect_osts(read_tree((str(layout.oss_root(oss_id)),))).values():
            if reading.fsname == layout.fsname:
                oss_states[reading.index] = reading.state
    mds = parse_mds_params(read_tree((str(layout.mds_root),), MDS_PATTERNS, keep=None), layout.fsname)
    return {o.index: most_restrictive((oss_states.get(o.index, "active"),
                                       mds.osts[o.index].state if o.index in mds.osts else "active"))
            for o in layout.osts}


def _record(layout: ClusterLayout) -> None:
    """cluster.json follows the trees: each OST's state and pools as they are now."""
    states = tree_states(layout)
    for ost in layout.osts:
        ost.state = states[ost.index]
        ost.pools = sorted(name for name, members in layout.pools.items() if ost.index in members)
    layout.save()


def set_state(root: str | Path, ost_text: str, state: str) -> ClusterLayout:
    """Put OSTs in ``state`` as an administrator would (``lctl set_param obdfilter.*.degraded=1``, ...)."""
    if state not in STATE_SWITCHES:
        raise ValueError(f"--state {state!r}: choose one of {', '.join(OST_STATES)}")
    with _locked(root) as layout:
        for index in _parse_ost_list(ost_text, layout, "--ost"):
            _apply_state(layout, index, state)
        _record(layout)
        return layout


def set_speed(root: str | Path, ost_text: str, load_mib_s: float | None = None,
              bandwidth_mib_s: float | None = None) -> ClusterLayout:
    """Change OSTs' background load or bandwidth (MiB/s): cluster.json for the MDS and the simulator,
    and the mapped bandwidth table in place, so running jobs feel it at their next call."""
    from iez.emulate.bandwidth import Server, Table

    for name, value in (("--load", load_mib_s), ("--bandwidth", bandwidth_mib_s)):
        if value is not None and not 0 <= value < 1e9:
            raise ValueError(f"{name} {value}: MiB/s from 0 up")
    with _locked(root) as layout:
        table = Table(root)
        try:
            for index in _parse_ost_list(ost_text, layout, "--ost"):
                ost = layout.ost(index)
                if load_mib_s is not None:
                    ost.load_mib_s = load_mib_s
                if bandwidth_mib_s is not None:
                    ost.bandwidth_mib_s = bandwidth_mib_s
                table.set_rate(index, Server(ost.bandwidth_mib_s, ost.load_mib_s))
        finally:
            table.close()
        layout.save()
        return layout


def change_pool(root: str | Path, pool: str, add: str | None = None, remove: str | None = None,
                destroy: bool = False) -> ClusterLayout:
    """``lctl pool_new``/``pool_add``/``pool_remove``/``pool_destroy`` on the emulated MDS."""
    check_pool_name(pool, "--pool")
    with _locked(root) as layout:
        if (remove or destroy) and pool not in layout.pools:
            raise ValueError(f"--pool {pool}: no such pool (pools: {', '.join(sorted(layout.pools)) or 'none'})")
        members = set(layout.pools.get(pool, []))
        if add:
            members |= set(_parse_ost_list(add, layout, "--add-osts"))
        if remove:
            members -= set(_parse_ost_list(remove, layout, "--remove-osts"))
        if destroy:
            if members:
                raise ValueError(f"--pool {pool} --destroy: the pool still holds OSTs "
                                 f"{', '.join(map(str, sorted(members)))}; remove them first (as lctl pool_destroy)")
            del layout.pools[pool]
            (layout.lod_dir / "pools" / pool).unlink(missing_ok=True)
        else:
            layout.pools[pool] = sorted(members)
            _write_pool(layout, pool, members)
        _record(layout)
        return layout


def set_param(root: str | Path, assignment: str) -> list[str]:
    """``lctl set_param NAME=VALUE`` on every emulated node that has ``NAME`` (a glob, as lctl takes:
    ``osp.*-OST0003-*.max_create_count=0``); returns the parameters set. None matching is an error."""
    name, sep, value = assignment.partition("=")
    if not sep or not _PARAM_NAME.match(name) or "\n" in value:
        raise ValueError(f"--param {assignment!r}: expected NAME=VALUE, e.g. obdfilter.iezfs-OST0003.degraded=1")
    with _locked(root) as layout:
        pattern = name.replace(".", "/")
        found = []
        for base in [layout.oss_root(o) for o in layout.oss_ids] + [layout.mds_root]:
            found += [(base, path) for path in sorted(base.glob(pattern)) if path.is_file()]
        if not found:
            raise ValueError(f"--param {name}: no such parameter on any emulated node under {layout.root}")
        for _, path in found:
            _write(path, value + "\n")
        _record(layout)
        return [".".join(path.relative_to(base).parts) for base, path in found]


def describe_states(layout: ClusterLayout) -> str:
    """One line: the OSTs not active, and the pools."""
    odd = [f"{o.index} {o.state}" for o in layout.osts if o.state != "active"]
    pools = [f"{name} [{','.join(map(str, members))}]" for name, members in sorted(layout.pools.items())]
    return f"states: {', '.join(odd) or 'all active'}; pools: {', '.join(pools) or 'none'}"

