"""Cluster descriptions: the JSON contract and ``lfs df`` output (ARCHITECTURE.md, "Clusters, layout policies...").

The JSON form::

    {"fill_cap": 0.95,
     "oss": [{"id": "oss0", "bandwidth_mib_s": 600, "domain": "rack1",
              "osts": [{"index": 0, "kbytes_total": 10485760, "kbytes_avail": 2097152,
                        "bandwidth_mib_s": 200, "load_mib_s": 0,
                        "pools": ["disk"], "state": "active"}]}]}

Bandwidths are MiB/s in the file and bytes/s in the model. Defaults: OST
200 MiB/s and OSS 600 MiB/s (or what the caller passes), ``fill_cap`` 0.95,
``state`` ``active``, ``pools`` ``[]``, ``load_mib_s`` 0, ``domain`` the OSS's
id; an OSS may also carry ``cpu_pct`` and ``mem_pct``, an OST ``writers`` (other
jobs writing there now: CEFT's fair share, bandwidth / (writers + 1), caps
what a new job expects; default 0). A key that looks like a
misspelt known key is an error; other unknown keys are ignored, so the
format can grow.

``lfs df`` output (plain KiB columns or ``-h`` sizes, with or without ``-v``)
gives each OST's capacity, free space and state (the status letters ``D``
degraded, ``R`` read-only, ``N`` no precreate, ``S``/``I`` out of space/inodes,
which Lustre also keeps new objects off; ``: inactive device`` lines carry no
sizes and are left out). It can be followed by ``lfs pool_list``
output (``Pool: fs.NAME`` then one ``fs-OST0000_UUID`` per line) for pool
membership. ``lfs df`` does not say which OSS serves an OST: consecutive OST
indices are grouped ``osts_per_oss`` at a time, and bandwidths come from the
defaults.

Every error names the file and the line or the field (``oss[0].osts[2].kbytes_avail``).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iez.model import (DEFAULT_FILL_CAP, DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, OSS, OST, OST_STATES,
                       ClusterState)
from iez.errors import InputError

MiB = 1 << 20
#: OSTs per OSS assumed for ``lfs df`` input, which does not name servers.
DEFAULT_LFS_DF_OSTS_PER_OSS = 5

_TOP_KEYS = ("fill_cap", "oss", "name", "description")
_OSS_KEYS = ("id", "bandwidth_mib_s", "domain", "cpu_pct", "mem_pct", "osts")
_OST_KEYS = ("index", "kbytes_total", "kbytes_avail", "bandwidth_mib_s", "load_mib_s", "pools", "state", "writers")


class DescriptionError(InputError):
    """Bad cluster description; the message names the file and the line or field."""


@dataclass(frozen=True)
class Defaults:
    """What a description may leave out (bandwidths in bytes/s)."""

    ost_bandwidth: float = DEFAULT_OST_BANDWIDTH
    oss_bandwidth: float = DEFAULT_OSS_BANDWIDTH
    fill_cap: float = DEFAULT_FILL_CAP
    osts_per_oss: int = DEFAULT_LFS_DF_OSTS_PER_OSS


def load_cluster(path: str | Path, defaults: Defaults | None = None) -> ClusterState:
    """A cluster from a JSON description or from ``lfs df`` (+ ``lfs pool_list``) output, by content."""
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise DescriptionError(f"{path}: not a text file") from None
    return parse_cluster(text, str(path), defaults)


def parse_cluster(text: str, source: str = "<cluster>", defaults: Defaults | None = None) -> ClusterState:
    defaults = defaults or Defaults()
    if text.lstrip().startswith(("{", "[")):
        return parse_json(text, source, defaults)
    if re.search(r"^\s*UUID\s", text, re.MULTILINE) or re.search(r"OST[0-9a-fA-F]{4}", text):
        return parse_lfs_df(text, source, defaults)
    raise DescriptionError(f"{source}: neither a JSON cluster description (an object with \"oss\") "
                           "nor `lfs df` output (a header line starting with UUID)")


# ---------------------------------------------------------------------------------------------- JSON


def parse_json(text: str, source: str = "<cluster>", defaults: Defaults | None = None) -> ClusterState:
    defaults = defaults or Defaults()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DescriptionError(f"{source}: line {err.lineno} column {err.colno}: not valid JSON ({err.msg})") from None
    if not isinstance(doc, dict):
        raise DescriptionError(f"{source}: expected an object with \"oss\", found {type(doc).__name__}")
    _check_keys(doc, _TOP_KEYS, source, "")
    fill_cap = _number(doc, "fill_cap", source, "", defaults.fill_cap)
    if not 0 < fill_cap <= 1:
        raise DescriptionError(f"{source}: fill_cap={fill_cap} is outside (0, 1]")
    servers = doc.get("oss")
    if not isinstance(servers, list) or not servers:
        raise DescriptionError(f"{source}: \"oss\" must be a non-empty list of servers")
    osses: list[OSS] = []
    osts: list[OST] = []
    where_index: dict[int, str] = {}
    for k, server in enumerate(servers):
        at = f"oss[{k}]"
        if not isinstance(server, dict):
            raise DescriptionError(f"{source}: {at}: expected an object")
        _check_keys(server, _OSS_KEYS, source, at)
        oss_id = server.get("id")
        if not isinstance(oss_id, str) or not oss_id:
            raise DescriptionError(f"{source}: {at}.id: required, a non-empty string")
        if any(o.id == oss_id for o in osses):
            raise DescriptionError(f"{source}: {at}.id: {oss_id!r} appears twice")
        domain = server.get("domain", oss_id)
        if not isinstance(domain, str) or not domain:
            raise DescriptionError(f"{source}: {at}.domain: must be a non-empty string")
        bandwidth = _number(server, "bandwidth_mib_s", source, at, None)
        try:
            oss = OSS(oss_id, _number(server, "cpu_pct", source, at, 0.0), _number(server, "mem_pct", source, at, 0.0),
                      bandwidth * MiB if bandwidth is not None else defaults.oss_bandwidth, domain)
        except ValueError as err:
            raise DescriptionError(f"{source}: {at}: {err}") from None
        osses.append(oss)
        targets = server.get("osts", [])
        if not isinstance(targets, list):
            raise DescriptionError(f"{source}: {at}.osts: must be a list")
        for j, target in enumerate(targets):
            ost = _json_ost(target, oss_id, source, f"{at}.osts[{j}]", defaults)
            if ost.index in where_index:
                raise DescriptionError(f"{source}: {at}.osts[{j}].index: OST {ost.index} is already "
                                       f"{where_index[ost.index]}")
            where_index[ost.index] = f"{at}.osts[{j}]"
            osts.append(ost)
    if not osts:
        raise DescriptionError(f"{source}: no OSTs: every server's \"osts\" is empty")
    return ClusterState.build(osts, osses, fill_cap)


def _json_ost(target: Any, oss_id: str, source: str, at: str, defaults: Defaults) -> OST:
    if not isinstance(target, dict):
        raise DescriptionError(f"{source}: {at}: expected an object")
    _check_keys(target, _OST_KEYS, source, at)
    for key in ("index", "kbytes_total", "kbytes_avail"):
        if key not in target:
            raise DescriptionError(f"{source}: {at}.{key}: required")
    index = _integer(target, "index", source, at)
    total = _integer(target, "kbytes_total", source, at)
    avail = _integer(target, "kbytes_avail", source, at)
    bandwidth = _number(target, "bandwidth_mib_s", source, at, None)
    load = _number(target, "load_mib_s", source, at, 0.0)
    state = target.get("state", "active")
    if state not in OST_STATES:
        raise DescriptionError(f"{source}: {at}.state: {state!r} is not one of {', '.join(OST_STATES)}")
    pools = target.get("pools", [])
    if not isinstance(pools, list) or not all(isinstance(p, str) and p for p in pools):
        raise DescriptionError(f"{source}: {at}.pools: must be a list of pool names")
    writers = _integer(target, "writers", source, at) if target.get("writers") is not None else 0
    if writers < 0:
        raise DescriptionError(f"{source}: {at}.writers: must not be negative")
    try:
        return OST(index, oss_id, total, avail, bandwidth * MiB if bandwidth is not None else defaults.ost_bandwidth,
                   load * MiB, state, tuple(dict.fromkeys(pools)), writers)
    except ValueError as err:
        raise DescriptionError(f"{source}: {at}: {err}") from None


def _check_keys(obj: dict, known: tuple[str, ...], source: str, at: str) -> None:
    """Refuse keys that look like misspellings of known ones; ignore others (the format may grow)."""
    for key in obj:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
        if close:
            field = f"{at}.{key}" if at else str(key)
            raise DescriptionError(f"{source}: {field}: unknown key; did you mean {close[0]!r}?")


def _number(obj: dict, key: str, source: str, at: str, default):
    if key not in obj or obj[key] is None:
        return default
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DescriptionError(f"{source}: {at + '.' if at else ''}{key}: expected a number, got {value!r}")
    if value < 0:
        raise DescriptionError(f"{source}: {at + '.' if at else ''}{key}: {value} is negative")
    return float(value)


def _integer(obj: dict, key: str, source: str, at: str) -> int:
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise DescriptionError(f"{source}: {at}.{key}: expected a whole number, got {value!r}")
    return int(value)


# ------------------------------------------------------------------------------------------ lfs df

_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_NAME = re.compile(r"^(?P<fs>[\w.-]*?)-?(?P<kind>OST|MDT)(?P<index>[0-9a-fA-F]{4,})(?:_UUID)?$")
#: ``lfs df`` status letters, strongest first: S (out of space) and I (out of inodes) also stop new objects.
_FLAG_STATES = (("R", "readonly"), ("N", "nocreate"), ("S", "nocreate"), ("I", "nocreate"), ("D", "degraded"))


@dataclass
class _DfOst:
    index: int
    kbytes_total: int
    kbytes_avail: int
    state: str
    line: int


def parse_lfs_df(text: str, source: str = "<lfs df>", defaults: Defaults | None = None) -> ClusterState:
    """OSTs from ``lfs df`` output, pools from ``lfs pool_list`` output that may follow it."""
    defaults = defaults or Defaults()
    if defaults.osts_per_oss < 1:
        raise DescriptionError(f"{source}: OSTs per OSS must be at least 1")
    scale: int | None = None
    found: dict[int, _DfOst] = {}
    pools: dict[int, list[str]] = {}
    pool: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{source}: line {number}"
        if not line:
            continue
        if line.startswith("UUID"):
            header = line.split()
            if len(header) < 2 or header[1] not in ("1K-blocks", "bytes"):
                if len(header) > 1 and header[1] in ("Inodes",):
                    raise DescriptionError(f"{where}: this is `lfs df -i` (inodes); give `lfs df` (space)")
                raise DescriptionError(f"{where}: unexpected header {line!r}: expected "
                                       "'UUID 1K-blocks Used Available Use% Mounted on'")
            scale = 1 if header[1] == "1K-blocks" else 0  # 0: human-readable sizes, unit per value
            pool = None
            continue
        if line.startswith("Pools from"):
            pool = None
            continue
        if line.startswith("Pool:"):
            label = line.split(":", 1)[1].strip()
            pool = label.split(".", 1)[1] if "." in label else label
            if not pool:
                raise DescriptionError(f"{where}: 'Pool:' without a pool name")
            continue
        if line.startswith("filesystem_summary:") or line.startswith("filesystem summary:"):
            continue
        fields = line.split()
        name = _NAME.match(fields[0].rstrip(":"))
        if pool is not None and len(fields) == 1:
            if not name or name["kind"] != "OST":
                raise DescriptionError(f"{where}: expected an OST name such as fs-OST0000_UUID in pool {pool!r}, "
                                       f"found {line!r}")
            pools.setdefault(int(name["index"], 16), []).append(pool)
            continue
        if len(fields) == 1 and "." in fields[0] and not name:
            continue  # a pool name listed under 'Pools from fs:'
        if not name:
            raise DescriptionError(f"{where}: not an `lfs df` line: {line!r}")
        if name["kind"] == "MDT":
            continue
        if "inactive device" in line:
            continue  # no sizes: the OST takes no stripes and holds nothing we can count
        if scale is None:
            raise DescriptionError(f"{where}: OST line before the 'UUID 1K-blocks ...' header")
        if len(fields) < 5:
            raise DescriptionError(f"{where}: expected 'NAME TOTAL USED AVAILABLE USE% MOUNT', found {line!r}")
        total = _df_kbytes(fields[1], scale, where, "total")
        avail = _df_kbytes(fields[3], scale, where, "available")
        index = int(name["index"], 16)  # the name carries Lustre's OST index (fs-OST000a is 10)
        flags = fields[6] if len(fields) > 6 else ""
        state = next((s for letter, s in _FLAG_STATES if letter in flags), "active")
        if total <= 0:
            raise DescriptionError(f"{where}: OST {index} has no capacity ({fields[1]})")
        if index in found:
            raise DescriptionError(f"{where}: OST {index} already listed on line {found[index].line}")
        found[index] = _DfOst(index, total, min(max(avail, 0), total), state, number)
    if not found:
        raise DescriptionError(f"{source}: no OST lines (expected `lfs df` output such as "
                               "'fs-OST0000_UUID 10485760 1048576 9437184 10% /mnt/fs[OST:0]')")
    unknown = sorted(set(pools) - set(found))
    if unknown:
        raise DescriptionError(f"{source}: `lfs pool_list` names OST {unknown[0]} (OST{unknown[0]:04x}), "
                               "which `lfs df` does not list")
    osts: list[OST] = []
    osses: list[OSS] = []
    for position, index in enumerate(sorted(found)):
        ost = found[index]
        oss_id = f"oss{position // defaults.osts_per_oss}"
        if not osses or osses[-1].id != oss_id:
            osses.append(OSS(oss_id, bandwidth=defaults.oss_bandwidth, domain=oss_id))
        osts.append(OST(index, oss_id, ost.kbytes_total, ost.kbytes_avail, defaults.ost_bandwidth, 0.0, ost.state,
                        tuple(dict.fromkeys(pools.get(index, ())))))
    return ClusterState.build(osts, osses, defaults.fill_cap)


def _df_kbytes(value: str, scale: int, where: str, what: str) -> int:
    """A size column in KiB: plain KiB (``1K-blocks``) or ``12.5G``-style from ``-h``.

    ``-h`` (base 2) and ``-H`` (base 10) print the same header and suffixes, so sizes
    are read as base 2; plain ``lfs df`` output is exact and preferred."""
    if scale == 1:
        if not value.isdigit():
            raise DescriptionError(f"{where}: {what} {value!r} is not a number of KiB")
        return int(value)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]?)(?:i?B)?", value)
    if not match:
        raise DescriptionError(f"{where}: {what} {value!r} is not a size such as 3.6T")
    number, unit = match.groups()
    return int(float(number) * 1024 ** _UNITS[unit] / 1024)


def to_json(cluster: ClusterState) -> dict:
    """The JSON description of ``cluster`` (bandwidths in MiB/s); :func:`parse_json` reads it back unchanged."""
    servers = []
    for oss_id, oss in cluster.osses.items():
        server: dict = {"id": oss_id, "bandwidth_mib_s": oss.bandwidth / MiB, "domain": oss.domain or oss_id}
        if oss.cpu_pct:
            server["cpu_pct"] = oss.cpu_pct
        if oss.mem_pct:
            server["mem_pct"] = oss.mem_pct
        server["osts"] = [{"index": o.index, "kbytes_total": o.kbytes_total, "kbytes_avail": o.kbytes_avail,
                           "bandwidth_mib_s": o.bandwidth / MiB, "load_mib_s": o.load / MiB,
                           "pools": list(o.pools), "state": o.state, **({"writers": o.writers} if o.writers else {})}
                          for o in cluster.osts if o.oss_id == oss_id]
        servers.append(server)
    return {"fill_cap": cluster.fill_cap, "oss": servers}


def describe(cluster: ClusterState) -> str:
    """One line: servers, targets, capacity and fill range."""
    fills = [o.fill for o in cluster.osts]
    capacity = sum(o.bytes_total for o in cluster.osts)
    return (f"{len(cluster.osses)} OSS, {len(cluster.osts)} OSTs, {capacity / (1 << 40):.3g} TiB, "
            f"{min(fills):.0%}-{max(fills):.0%} full, cap {cluster.fill_cap:.0%}")
