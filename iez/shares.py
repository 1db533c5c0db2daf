"""Shares of the servers for applications, as Lustre's NRS TBF rules (issue 16; seed 002).

An administrator gives applications a share of every OSS: a cap (``share``: at most this fraction of an
OSS's bandwidth, for background work such as staging) or a weight (``weight``: the bandwidth the caps
leave is divided in proportion). Lustre enforces per-job rates on each OSS with the Token Bucket Filter
policy of its request scheduler (NRS): ``lctl set_param ost.OSS.ost_io.nrs_policies="tbf jobid"``
classifies RPCs by job id, and a rule ``start NAME jobid={PATTERN} rate=R`` lets at most R RPCs a
second of matching jobs through. So each share becomes one rule per OSS with ``R = bytes/s / RPC
size``. TBF is a rate limit, not a weight: a weighted application is held to its rate even when the
others are idle (documented in the README); caps are what it does exactly.

The shares file (JSON)::

    {"rpc_size": 4194304, "jobid": "{app}.*",
     "shares": [{"app": "stage-in", "share": 0.3}, {"app": "ior", "weight": 3}, {"app": "hacc", "weight": 1}]}

``jobid`` is how the site's ``jobid_var`` names a job of the application (``{app}.*`` for
``procname_uid``; in emulation, where a process's job id is its ``IEZ_IO_CLASS``, ``{app}``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from iez.errors import ConfigError

MiB = 1024 * 1024
DEFAULT_RPC_SIZE = 4 * MiB  # Lustre's default brw_size
#: Lustre's rule names: letters, digits and '_', at most 15 characters here (NRS TBF keeps 16 with the NUL).
_NAME = re.compile(r"[^A-Za-z0-9_]")
_APP = re.compile(r"^[A-Za-z0-9_.\-+]{1,64}$")


class SharesError(ConfigError):
    pass


@dataclass(frozen=True)
class Share:
    app: str
    share: float | None = None  # a cap: fraction of each OSS's bandwidth
    weight: float | None = None  # or a weight among the weighted applications


@dataclass(frozen=True)
class Rule:
    oss: str
    name: str
    jobid: str
    rate: int  # RPCs per second
    bytes_per_s: float

    def start(self) -> str:
        """The rule as ``nrs_tbf_rule`` takes it."""
        return f"start {self.name} jobid={{{self.jobid}}} rate={self.rate}"

    def lctl(self) -> str:
        return f'lctl set_param ost.OSS.ost_io.nrs_tbf_rule="{self.start()}"'


@dataclass(frozen=True)
class Shares:
    shares: tuple[Share, ...]
    rpc_size: int = DEFAULT_RPC_SIZE
    jobid: str = "{app}.*"

    def rules(self, oss_bandwidth: dict[str, float]) -> list[Rule]:
        """One rule per share per OSS, from each OSS's bandwidth in bytes/s."""
        capped = sum(s.share for s in self.shares if s.share is not None)
        weights = sum(s.weight for s in self.shares if s.weight is not None)
        out = []
        for oss, bandwidth in oss_bandwidth.items():
            for s in self.shares:
                if s.share is not None:
                    rate = s.share * bandwidth
                else:
                    assert s.weight is not None  # a share has a cap or a weight (checked when made)
                    rate = (1 - capped) * bandwidth * s.weight / weights
                out.append(Rule(oss, rule_name(s.app), self.jobid.replace("{app}", s.app),
                                max(1, math.ceil(rate / self.rpc_size)), rate))
        return out


def rule_name(app: str) -> str:
    return ("iez_" + _NAME.sub("_", app))[:15]


def parse(text: str, source: str = "<shares>") -> Shares:
    """The shares file, checked: one clear error naming the entry and what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise SharesError(f"{source}: not JSON ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shares"), list) or not doc["shares"]:
        raise SharesError(f"{source}: expected {{\"shares\": [{{\"app\": NAME, \"share\": F | \"weight\": W}}, ...]}}")
    unknown = set(doc) - {"shares", "rpc_size", "jobid"}
    if unknown:
        raise SharesError(f"{source}: unknown keys {sorted(unknown)}")
    rpc_size = doc.get("rpc_size", DEFAULT_RPC_SIZE)
    if not isinstance(rpc_size, int) or not 4096 <= rpc_size <= 64 * MiB:
        raise SharesError(f"{source}: rpc_size {rpc_size!r}: bytes from 4096 to 64 MiB")
    jobid = doc.get("jobid", "{app}.*")
    if not isinstance(jobid, str) or "{app}" not in jobid or re.search(r"[{}\s]", jobid.replace("{app}", "")):
        raise SharesError(f"{source}: jobid {jobid!r} must contain {{app}} and no spaces or braces besides it")
    shares, seen = [], set()
    for n, entry in enumerate(doc["shares"]):
        where = f"{source}: shares[{n}]"
        if not isinstance(entry, dict) or set(entry) - {"app", "share", "weight"}:
            raise SharesError(f"{where}: expected {{\"app\", and \"share\" or \"weight\"}}")
        app = entry.get("app")
        if not isinstance(app, str) or not _APP.match(app):
            raise SharesError(f"{where}: app {app!r}: 1-64 letters, digits, '_', '.', '-', '+'")
        if app in seen:
            raise SharesError(f"{where}: app {app!r} appears twice")
        seen.add(app)
        share, weight = entry.get("share"), entry.get("weight")
        if (share is None) == (weight is None):
            raise SharesError(f"{where}: give exactly one of share (a cap, 0 < F <= 1) and weight (W > 0)")
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1):
            raise SharesError(f"{where}: share {share!r} must be a fraction in (0, 1]")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0):
            raise SharesError(f"{where}: weight {weight!r} must be a positive number")
        shares.append(Share(app, float(share) if share is not None else None,
                            float(weight) if weight is not None else None))
    if sum(s.share for s in shares if s.share is not None) >= 1 and any(s.weight is not None for s in shares):
        raise SharesError(f"{source}: the caps take every OSS whole, nothing is left for the weighted applications")
    if sum(s.share for s in shares if s.share is not None) > 1:
        raise SharesError(f"{source}: the caps add up to more than one OSS")
    return Shares(tuple(shares), rpc_size, jobid)


def load(path: str | Path) -> Shares:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SharesError(f"cannot read the shares file {path}: {err.strerror}") from None
    return parse(text, str(path))


def oss_bandwidths(cluster) -> dict[str, float]:
    """Bytes/s of each OSS of a :class:`iez.model.ClusterState`: its own limit, or its OSTs' sum if lower."""
    out: dict[str, float] = {}
    for oss_id, oss in cluster.osses.items():
        osts = sum(o.bandwidth for o in cluster.osts if o.oss_id == oss_id)
        out[oss_id] = min(oss.bandwidth, osts) if osts > 0 else oss.bandwidth
    return out


# -- the emulated tree: what an agent writes there (agents/tbf.py) and the emulator reads back ------------

def tree_dir(oss_root: str | Path) -> Path:
    """``ost/OSS/ost_io`` of an emulated OSS tree (``/proc/fs/lustre/ost/OSS/ost_io`` on a server)."""
    return Path(oss_root) / "ost" / "OSS" / "ost_io"


_START = re.compile(r"^start\s+(\w{1,15})\s+jobid=\{([^{}\s]+)\}\s+rate=(\d+)\s*$")


def read_tree_rules(oss_root: str | Path) -> list[tuple[str, str, int]]:
    """The rules an emulated OSS runs: (name, jobid, rate) per ``start`` line of its ``nrs_tbf_rule``."""
    path = tree_dir(oss_root) / "nrs_tbf_rule"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    policies = (tree_dir(oss_root) / "nrs_policies")
    if not policies.is_file() or not policies.read_text().split()[:1] == ["tbf"]:
        return []  # rules exist but the TBF policy is not the one in force
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _START.match(line.strip())
        if not m:
            raise SharesError(f"{path}:{n}: not a TBF rule iez reads: {line.strip()[:80]!r}")
        out.append((m.group(1), m.group(2), int(m.group(3))))
    return out
