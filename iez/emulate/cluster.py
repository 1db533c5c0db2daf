"""``iez cluster emulate``: fake ``/proc/fs/lustre`` trees, kept in step with real files.

For each OSS ``k`` the tree ``ROOT/oss<k>`` holds, per OST,
``obdfilter/<fs>-OST<idx>/{kbytestotal,kbytesavail,kbytesfree,stats}`` as a
Lustre server does (``iez-agent --root ROOT/oss<k>`` reads them). OST indices
run 0..N-1, OSS by OSS, like the paper's testbed (3 OSS x 5 OSTs). Every
``interval`` the emulator walks the data directories, stripes each file's
logical size over its emulated layout (RAID-0 arithmetic, ``iez usage``), and
rewrites ``kbytesavail`` (capacity less the initial fill less those bytes) and
the ``write_bytes`` counter of ``stats`` (which only grows, as on a server).
Files are written to a temporary name and renamed, so an agent never reads
half a file. Files without a layout are counted as unplaced and change no OST.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from iez.layout.read import LayoutReader
from iez.layout.usage import usage


@dataclass
class ClusterLayout:
    root: str
    data: list[str]
    oss: int
    osts_per_oss: int
    ost_kb: int
    fsname: str = "iezfs"
    base_used_kb: list[int] = field(default_factory=list)  # pre-existing data per OST (the paper's used file system)

    @property
    def osts(self) -> int:
        return self.oss * self.osts_per_oss

    def oss_of(self, ost: int) -> int:
        return ost // self.osts_per_oss

    def ost_name(self, ost: int) -> str:
        return f"{self.fsname}-OST{ost:04x}"

    def oss_root(self, k: int) -> Path:
        return Path(self.root) / f"oss{k}"

    def ost_dir(self, ost: int) -> Path:
        return self.oss_root(self.oss_of(ost)) / "obdfilter" / self.ost_name(ost)

    def save(self) -> Path:
        path = Path(self.root) / "cluster.json"
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, root: str | Path) -> "ClusterLayout":
        path = Path(root) / "cluster.json"
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            raise ValueError(f"{root} holds no emulated cluster (no cluster.json); create it with "
                             f"`iez cluster emulate --root {root}`") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: not an emulated cluster description ({err})") from None


def create(root: str | Path, data: list[str], oss: int, osts_per_oss: int, ost_bytes: int,
           fill: tuple[float, float] = (0.0, 0.0), seed: int = 0, fsname: str = "iezfs") -> ClusterLayout:
    if oss < 1 or osts_per_oss < 1:
        raise ValueError(f"--oss {oss} and --osts-per-oss {osts_per_oss} must be at least 1")
    if ost_bytes < 1024 * 1024:
        raise ValueError(f"--ost-size {ost_bytes} bytes: an OST needs at least 1 MiB")
    low, high = fill
    if not 0.0 <= low <= high < 1.0:
        raise ValueError(f"--fill {low}-{high}: fractions 0 <= low <= high < 1")
    rng = random.Random(seed)
    ost_kb = ost_bytes // 1024
    layout = ClusterLayout(str(Path(root).resolve()), [str(Path(d).resolve()) for d in data], oss, osts_per_oss,
                           ost_kb, fsname, [int(ost_kb * rng.uniform(low, high)) for _ in range(oss * osts_per_oss)])
    for k in range(oss):
        layout.oss_root(k).mkdir(parents=True, exist_ok=True)
    for d in layout.data:
        Path(d).mkdir(parents=True, exist_ok=True)
    layout.save()
    Emulator(layout).update()
    return layout


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Emulator:
    """Rewrites the parameter trees from the files below the data directories."""

    def __init__(self, layout: ClusterLayout):
        self.layout = layout
        self.reader = LayoutReader()
        self.written = [0] * layout.osts  # cumulative write_bytes counters
        self.last_bytes = [0] * layout.osts
        self.samples = [0] * layout.osts
        self.unplaced_bytes = 0

    def bytes_per_ost(self) -> list[int]:
        per = [0] * self.layout.osts
        self.unplaced_bytes = 0
        for d in self.layout.data:
            if not Path(d).is_dir():
                continue
            found = usage(d, reader=self.reader)
            self.unplaced_bytes += found.unplaced_bytes
            for ost, nbytes in found.bytes_per_ost.items():
                if 0 <= ost < len(per):
                    per[ost] += nbytes
        return per

    def update(self) -> list[int]:
        per = self.bytes_per_ost()
        now = time.time()
        lay = self.layout
        for ost in range(lay.osts):
            grew = per[ost] - self.last_bytes[ost]
            if grew > 0:
                self.written[ost] += grew
                self.samples[ost] += 1
            self.last_bytes[ost] = per[ost]
            used_kb = lay.base_used_kb[ost] + -(-per[ost] // 1024)
            avail = max(0, lay.ost_kb - used_kb)
            d = lay.ost_dir(ost)
            d.mkdir(parents=True, exist_ok=True)
            _write(d / "kbytestotal", f"{lay.ost_kb}\n")
            _write(d / "kbytesfree", f"{avail}\n")
            _write(d / "kbytesavail", f"{avail}\n")
            stats = f"snapshot_time             {now:.6f} secs.usecs\n"
            if self.samples[ost]:
                stats += (f"write_bytes               {self.samples[ost]} samples [bytes] 1 {self.written[ost]} "
                          f"{self.written[ost]}\n")
            _write(d / "stats", stats)
        return per
