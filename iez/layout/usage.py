"""Bytes per OST below a directory, from each file's layout and size: what a placement achieved.

Each regular file (symbolic links are not followed, hard links count once)
with a plain layout puts ``raid0_bytes(st_size, stripe_size, stripe_count)[i]``
bytes on ``osts[i]``: its logical size striped RAID-0, so a sparse file counts
its holes, and space the file system adds (metadata, pre-allocation) is not
seen. A composite (PFL) layout charges each component the bytes of the file
that fall in its extent, striped over the component's OSTs by the file offset
(:func:`iez.model.component_stripe_bytes`): a component the file's size does
not reach holds nothing, one without OSTs (Lustre has not instantiated it)
charges no OST, and a Data-on-MDT component's bytes are counted apart as
``mdt_bytes``, outside OSTCost. Files without a layout count as
``unplaced``; files that vanish during the walk are left out; unreadable
directories, files and malformed layouts are reported as problems and counted
as ``skipped_files``.

The OST pool is ``0..N-1`` with ``osts=N``, else the OSTs the layouts name.
``OSTCost = max / mean`` over the pool, OSTs holding nothing included (1.0 is
perfect; None when the pool holds no bytes). A job smaller than the pool
leaves OSTs empty by design, so ``ost_cost_used`` is the same ratio over the
OSTs holding its bytes (the OSTs the job used): the figure to judge a job by. With a capacity every OST gets
``util = bytes / capacity``, the share of it the files below the directory
occupy (not the OST's fill, which includes everything else on it); all OSTs
having the same capacity, ``max util / mean util`` equals ``max bytes / mean
bytes``, so OSTCost is the same figure with or without a capacity, and
utilisation is only reported when a capacity is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

from iez.layout.model import lexical_abspath
from iez.layout.read import LayoutReader
from iez.model import Layout


@dataclass
class Usage:
    dir: str
    files: int = 0
    placed_files: int = 0
    unplaced_files: int = 0
    unplaced_bytes: int = 0
    skipped_files: int = 0
    mdt_bytes: int = 0  # bytes in Data-on-MDT components: on the MDT, no OST holds them
    bytes_per_ost: dict[int, int] = field(default_factory=dict)
    pool: list[int] = field(default_factory=list)
    ost_size: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def mean_bytes(self) -> float:
        return sum(self.bytes_per_ost.get(i, 0) for i in self.pool) / len(self.pool) if self.pool else 0.0

    @property
    def max_bytes(self) -> int:
        return max((self.bytes_per_ost.get(i, 0) for i in self.pool), default=0)

    @property
    def ost_cost(self) -> float | None:
        mean = self.mean_bytes
        return self.max_bytes / mean if mean > 0 else None

    @property
    def used(self) -> list[int]:
        """The pool's OSTs that hold bytes of these files: the OSTs the job used."""
        return [i for i in self.pool if self.bytes_per_ost.get(i, 0) > 0]

    @property
    def ost_cost_used(self) -> float | None:
        """``max / mean`` over :attr:`used`: how evenly the job loaded the OSTs it used. A small job on 2 of 16
        OSTs has a pool OSTCost of 8 however well it was placed; this one is 1.0 when its OSTs got equal bytes."""
        used = [self.bytes_per_ost[i] for i in self.used]
        return max(used) / (sum(used) / len(used)) if used else None

    def to_dict(self) -> dict:
        osts = []
        for index in self.pool:
            row: dict[str, int | float] = {"index": index, "bytes": self.bytes_per_ost.get(index, 0)}
            if self.ost_size:
                row["util"] = row["bytes"] / self.ost_size
            osts.append(row)
        return {"dir": self.dir, "files": self.files, "placed_files": self.placed_files,
                "unplaced_files": self.unplaced_files, "unplaced_bytes": self.unplaced_bytes,
                "skipped_files": self.skipped_files, "mdt_bytes": self.mdt_bytes, "osts": osts,
                "ost_cost": self.ost_cost, "mean_bytes": self.mean_bytes, "max_bytes": self.max_bytes,
                "used_osts": len(self.used), "ost_cost_used": self.ost_cost_used}


def regular_files(root: str, problems: list[str]) -> Iterator[tuple[str, os.stat_result]]:
    """``(path, lstat)`` of every regular file below ``root``, depth first, without recursion.

    ``root`` itself failing raises; a directory or file below it that cannot be
    read is appended to ``problems``; entries that vanish meanwhile are skipped.
    """
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except FileNotFoundError:
            if directory is root:
                raise
            continue
        except OSError as err:
            if directory is root:
                raise
            problems.append(str(err))
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry.path, entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as err:
                problems.append(str(err))


#: ``(OST, bytes)`` per stripe object of a ``file_bytes`` file: :meth:`iez.model.Layout.stripe_bytes` under the
#: name the rebalancer imports.
ost_bytes = Layout.stripe_bytes


def usage(root: str, osts: int | None = None, ost_size: int | None = None,
          reader: LayoutReader | None = None) -> Usage:
    """Bytes per OST of the files below ``root`` (see the module text for the rules)."""
    if osts is not None and osts <= 0:
        raise ValueError(f"--osts {osts}: the pool needs at least one OST")
    if ost_size is not None and ost_size <= 0:
        raise ValueError(f"--ost-size {ost_size}: an OST's capacity must be positive")
    reader = reader or LayoutReader()
    result = Usage(dir=lexical_abspath(root), ost_size=ost_size)
    per_ost = result.bytes_per_ost
    linked: set[tuple[int, int]] = set()
    for path, st in regular_files(root, result.problems):
        if st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in linked:
                continue
            linked.add((st.st_dev, st.st_ino))
        try:
            found = reader.layout(path, st)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as err:
            result.files += 1
            result.skipped_files += 1
            result.problems.append(str(err))
            continue
        result.files += 1
        if found is None:
            result.unplaced_files += 1
            result.unplaced_bytes += st.st_size
            continue
        layout, _source = found
        result.placed_files += 1
        for ost, nbytes in layout.stripe_bytes(st.st_size):
            per_ost[ost] = per_ost.get(ost, 0) + nbytes
        result.mdt_bytes += sum(c.bytes_in(st.st_size) for c in layout.components if c.dom)
    if osts is None:
        result.pool = sorted(per_ost)
    else:
        outside = sorted(o for o in per_ost if o >= osts)
        if outside:
            raise ValueError(f"layouts below {root} use OST{'s' if len(outside) > 1 else ''} "
                             f"{', '.join(map(str, outside))}, outside --osts {osts} (OSTs 0..{osts - 1})")
        result.pool = list(range(osts))
    return result
