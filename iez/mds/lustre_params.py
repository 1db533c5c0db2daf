"""What the MDS node's own Lustre parameters say about each OST: pools, states and reserved space.

The MDS reads them every interval with the agent's readers (:mod:`agents.procfs`):
``lctl get_param``, a parameter tree, or saved ``lctl get_param`` text. The
parameters and the formats Lustre prints them in (``lustre/lod/lproc_lod.c``,
``lod_pool.c``, ``lustre/osp/lproc_osp.c``):

- ``lod.<fs>-MDT<n>-mdtlov.pools.<pool>``: the pool's members, one OST UUID per
  line (``fs-OST0001_UUID``); lctl prints a one-member pool on the name's line
  and an empty pool as ``name=`` alone. In a tree the pools are files in
  ``<root>/lod/<dev>/pools/`` (procfs).
- ``osp.<fs>-OST<idx>-osc-MDT<n>.active``: ``0`` when the administrator
  deactivated the OST on this MDT (``inactive``: no new objects, not even read
  through this MDT's view).
- ``osp.<fs>-OST<idx>-osc-MDT<n>.max_create_count``: ``0`` stops object
  creation on the OST (``nocreate``), the documented way to drain an OST.
- ``osp.<fs>-OST<idx>-osc-MDT<n>.reserved_mb_low``: MiB below which Lustre stops
  allocating objects on the OST (default about 0.1 % of its size); iez never
  counts that space as free.
- ``lod.<fs>-MDT<n>-mdtlov.qos_prio_free`` (``90%``), ``qos_threshold_rr``
  (``17%``) and ``qos_maxage`` (``5``, or ``5 Sec`` before Lustre 2.15): the
  weighted allocator's settings, shown and given to the ``qos`` baseline.

``osp.<fs>-MDT<m>-osp-MDT<n>`` devices (one MDT seen from another, DNE) are
ignored.

Several MDTs (DNE; issue 25). Each MDT has its own ``lod`` and ``osp`` devices, on
its own MDS node; ``iez mds --lustre-params`` is given once per MDS node (each a
tree, saved text or lctl) and every reading reads them all. iez does not know
which MDT holds the directory of a file it places, so it uses only what every MDT
allows, and then any MDT may create the file with its layout:

- an OST takes new stripes only if every MDT's ``osp`` says it may: its state is
  the most restrictive any MDT gives it, and an OST that has ``osp`` devices on some
  MDTs but none on another (that MDT cannot create objects there) is ``inactive``;
- a pool's members are those every MDT that defines the pool lists (the
  intersection; Lustre keeps pools identical on every MDT, so this differs from
  each MDT's list only while a ``pool_add`` is reaching them);
- an OST's reserved space is the largest any MDT keeps back; qos settings come from
  the lowest MDT index.

A reading in which any source fails leaves the previous reading in force.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agents import AgentError
from agents.lctl import Param, ParseError, most_restrictive
from agents.procfs import FileSource, LctlSource, Source, TreeSource, split_roots
from iez.model import check_pool_name

MDS_PATTERNS = (
    "lod.*.pools.*",
    "lod.*.qos_prio_free",
    "lod.*.qos_threshold_rr",
    "lod.*.qos_maxage",
    "osp.*.active",
    "osp.*.max_create_count",
    "osp.*.reserved_mb_low",
)
#: ``--lustre-params`` values that are not paths.
LCTL, NONE = "lctl", "none"

_LOD = re.compile(r"^(?P<fs>[A-Za-z0-9_\-]+)-MDT(?P<mdt>[0-9A-Fa-f]{4,8})-mdtlov$")
_OSP_OST = re.compile(r"^(?P<fs>[A-Za-z0-9_\-]+)-OST(?P<ost>[0-9A-Fa-f]{4,8})-osc-MDT(?P<mdt>[0-9A-Fa-f]{4,8})$")
_OSP_MDT = re.compile(r"^[A-Za-z0-9_\-]+-MDT[0-9A-Fa-f]{4,8}-osp-MDT[0-9A-Fa-f]{4,8}$")
_OST_UUID = re.compile(r"^(?P<fs>[A-Za-z0-9_\-]+)-OST(?P<ost>[0-9A-Fa-f]{4,8})_UUID$")
_PERCENT = re.compile(r"^(?P<value>[0-9]+)\s*%?$")
_SECONDS = re.compile(r"^(?P<value>[0-9]+)(?:\s*[Ss]ec)?$")
_UNSIGNED = re.compile(r"^[0-9]+$")
#: qos settings: parameter leaf -> (key in :attr:`LustreParams.qos`, value pattern)
_QOS = {"qos_prio_free": ("prio_free_pct", _PERCENT), "qos_threshold_rr": ("threshold_rr_pct", _PERCENT),
        "qos_maxage": ("maxage_s", _SECONDS)}


@dataclass(frozen=True)
class OstPolicy:
    """Lustre's policy for one OST as the MDS sees it."""

    state: str = "active"  # active, nocreate or inactive (the MDS's own states)
    pools: tuple[str, ...] = ()
    reserved_kbytes: int | None = None  # osp.*.reserved_mb_low in KiB; None when not read


@dataclass
class LustreParams:
    """One reading of the MDS's parameters."""

    fsname: str | None = None
    osts: dict[int, OstPolicy] = field(default_factory=dict)
    pools: dict[str, tuple[int, ...]] = field(default_factory=dict)  # every pool, empty ones included
    qos: dict[str, int] = field(default_factory=dict)  # prio_free_pct, threshold_rr_pct, maxage_s

    def to_json(self) -> dict:
        return {"fsname": self.fsname, "pools": {name: list(members) for name, members in sorted(self.pools.items())},
                "qos": dict(self.qos),
                "osts": {str(i): {"state": p.state, "pools": list(p.pools), "reserved_kbytes": p.reserved_kbytes}
                         for i, p in sorted(self.osts.items())}}


def _value_lines(param: Param) -> list[tuple[int, str]]:
    return [(n, text.strip()) for n, text in param.value_lines() if text.strip()]


def _single(param: Param, pattern: re.Pattern, what: str) -> int:
    lines = _value_lines(param)
    if not lines:
        raise ParseError(param.source, param.line, f"{param.name} has no value")
    if len(lines) > 1:
        raise ParseError(param.source, lines[1][0], f"unexpected text after {param.name}={lines[0][1]}: "
                                                    f"{lines[1][1][:60]!r}")
    number, text = lines[0]
    match = pattern.match(text)
    if not match:
        raise ParseError(param.source, number, f"{param.name}: expected {what}, found {text[:60]!r}")
    return int(match.group("value") if "value" in pattern.groupindex else match.group(0))


def parse_mds_params(params: list[Param], fsname: str | None = None) -> LustreParams:
    """The per-OST policy, the pools and the qos settings in ``params``.

    ``fsname``: read that file system only. Without it an MDS serving several
    file systems is an error (iez keys OSTs by index, which file systems share).
    Malformed values raise :class:`agents.lctl.ParseError` naming the source and line.
    """
    states: dict[int, list[str]] = {}
    reserved: dict[int, int] = {}
    members: dict[str, dict[int, set[int]]] = {}  # pool -> MDT index -> members on that MDT
    osp_mdts: dict[int, set[int]] = {}  # OST index -> MDTs with an osp device for it
    qos: dict[str, tuple[int, int]] = {}  # key -> (MDT index, value)
    seen_fs: dict[str, str] = {}  # fsname -> where first seen

    def wanted(fs: str, param: Param) -> bool:
        seen_fs.setdefault(fs, param.where())
        return fsname is None or fs == fsname

    for param in params:
        parts = param.name.split(".", 2)
        if len(parts) != 3:
            continue
        module, target, leaf = parts
        if module == "lod":
            lod = _LOD.match(target)
            if not lod or not wanted(lod["fs"], param):
                continue
            if leaf.startswith("pools."):
                pool = leaf[len("pools."):]
                try:
                    check_pool_name(pool, param.where())
                except ValueError as err:
                    raise ParseError(param.source, param.line, str(err).split(": ", 1)[1]) from None
                found = members.setdefault(pool, {}).setdefault(int(lod["mdt"], 16), set())
                for number, text in _value_lines(param):
                    uuid = _OST_UUID.match(text)
                    if not uuid:
                        raise ParseError(param.source, number, f"{param.name}: expected an OST UUID such as "
                                                               f"{lod['fs']}-OST0000_UUID, found {text[:60]!r}")
                    found.add(int(uuid["ost"], 16))
            elif leaf in _QOS:
                key, pattern = _QOS[leaf]
                value = _single(param, pattern, "a percentage such as 90%" if pattern is _PERCENT else "seconds")
                mdt = int(lod["mdt"], 16)
                if key not in qos or mdt < qos[key][0]:
                    qos[key] = (mdt, value)
        elif module == "osp":
            if _OSP_MDT.match(target):
                continue
            osp = _OSP_OST.match(target)
            if not osp or not wanted(osp["fs"], param):
                continue
            index = int(osp["ost"], 16)
            osp_mdts.setdefault(index, set()).add(int(osp["mdt"], 16))
            if leaf == "active":
                value = _single(param, _UNSIGNED, "0 or 1")
                states.setdefault(index, []).append("active" if value else "inactive")
            elif leaf == "max_create_count":
                value = _single(param, _UNSIGNED, "a number of objects")
                states.setdefault(index, []).append("active" if value else "nocreate")
            elif leaf == "reserved_mb_low":
                value = _single(param, _UNSIGNED, "MiB")
                reserved[index] = max(reserved.get(index, 0), value * 1024)
                states.setdefault(index, [])
    if fsname is None and len(seen_fs) > 1:
        names = ", ".join(f"{fs} ({where})" for fs, where in sorted(seen_fs.items()))
        raise AgentError(f"the MDS parameters cover several file systems: {names}; choose one with --fsname")
    pools = {name: tuple(sorted(set.intersection(*per_mdt.values()))) for name, per_mdt in members.items()}
    mdts = set().union(*osp_mdts.values()) if osp_mdts else set()
    for index, seen in osp_mdts.items():
        if seen != mdts:  # an MDT without an osp device for this OST cannot create objects on it
            states.setdefault(index, []).append("inactive")
    ost_pools: dict[int, list[str]] = {}
    for name, indices in sorted(pools.items()):
        for index in indices:
            ost_pools.setdefault(index, []).append(name)
    osts = {index: OstPolicy(most_restrictive(states.get(index, ())), tuple(ost_pools.get(index, ())),
                             reserved.get(index))
            for index in sorted(set(states) | set(ost_pools))}
    chosen = fsname or (next(iter(seen_fs)) if seen_fs else None)
    return LustreParams(chosen, osts, pools, {key: value for key, (_, value) in sorted(qos.items())})


class Sources:
    """The sources of several MDS nodes (``--lustre-params`` given once per node), read as one: the
    parameters of all, so that :func:`parse_mds_params` merges every MDT's. One that fails fails the reading."""

    def __init__(self, sources: list[Source]):
        self.sources = sources

    @property
    def kind(self) -> str:
        kinds = sorted({s.kind for s in self.sources})
        return kinds[0] if len(kinds) == 1 else "+".join(kinds)

    def describe(self) -> str:
        return " + ".join(s.describe() for s in self.sources)

    def read(self) -> list[Param]:
        params: list[Param] = []
        for source in self.sources:
            params.extend(source.read())
        return params


class LustreParamsReader:
    """``--lustre-params``: ``lctl``, a parameter tree (``DIR[:DIR...]``), saved text (``FILE``) or ``none``;
    given several times (a list), the MDS nodes of a DNE file system, read together (:class:`Sources`)."""

    def __init__(self, source: Source | Sources | None, fsname: str | None = None):
        self.source = source
        self.fsname = fsname

    @classmethod
    def from_option(cls, value: str | list[str] | None, fsname: str | None = None,
                    lctl: str = "lctl") -> "LustreParamsReader":
        """The reader ``--lustre-params VALUE`` names; without a value: lctl when it is on PATH, else none.
        Several values (one per MDS node): every one read at each reading, merged."""
        if isinstance(value, (list, tuple)):
            if len(value) == 1:
                value = value[0]
            else:
                if NONE in value:
                    raise ValueError("--lustre-params none cannot be given with other sources")
                sources = [_source(v, lctl) for v in value]
                # each a source: only "none" (refused above) and no value at all give none
                return cls(Sources([source for source in sources if source is not None]), fsname)
        return cls(_source(value, lctl), fsname)

    @property
    def kind(self) -> str:
        return self.source.kind if self.source else NONE

    def describe(self) -> str:
        return self.source.describe() if self.source else "none"

    def read(self) -> LustreParams | None:
        """One reading (None without a source); :class:`agents.AgentError` when it cannot be read."""
        if self.source is None:
            return None
        return parse_mds_params(self.source.read(), self.fsname)


def _source(value: str | None, lctl: str) -> Source | None:
    """The source one ``--lustre-params VALUE`` names (see :meth:`LustreParamsReader.from_option`); None: none."""
    if value is None:
        found = shutil.which(lctl)
        return LctlSource(found, patterns=MDS_PATTERNS) if found else None
    if value == NONE:
        return None
    if value == LCTL:
        found = shutil.which(lctl)
        if not found:
            raise ValueError(f"--lustre-params lctl: {lctl} is not on PATH")
        return LctlSource(found, patterns=MDS_PATTERNS)
    roots = split_roots(value)
    if all(Path(root).is_dir() for root in roots):
        return TreeSource(roots, patterns=MDS_PATTERNS, keep=None)
    if len(roots) == 1 and Path(value).is_file():
        return FileSource(value)
    missing = next(root for root in roots if not Path(root).is_dir())
    why = "does not exist" if not os.path.exists(missing) else "is neither a directory nor a file"
    raise ValueError(f"--lustre-params {value}: {missing} {why} (give lctl, none, a parameter tree "
                     "DIR[:DIR...] or saved 'lctl get_param' text)")
