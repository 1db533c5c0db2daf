"""Domain model shared by every part of iez: servers, targets, requests, layouts.

Units follow Lustre: OST space is in KiB (``kbytes_*`` as ``lctl get_param``
prints it), file sizes and stripe sizes in bytes. OST indices are Lustre's
(``fs-OST000a`` has index 10).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any, Sequence

from iez.lustre_limits import MAX_POOL_NAME

#: Lustre's ``-1`` stripe count: stripe over every usable OST.
ALL_OSTS = -1

MiB = 1 << 20
#: Bandwidth an OST / an OSS sustains when the cluster description does not say (bytes/s).
DEFAULT_OST_BANDWIDTH = 200 * MiB
DEFAULT_OSS_BANDWIDTH = 600 * MiB
#: No OST is pushed past this fill by iez unless the site says otherwise.
DEFAULT_FILL_CAP = 0.95
#: A congested target still serves this share of its bandwidth (a busy OST is slow, not dead).
MIN_BANDWIDTH_SHARE = 0.02
#: Lustre's OST states (``state`` in the cluster description). Only the first two take new stripes;
#: a degraded OST only when nothing else fits.
OST_STATES = ("active", "degraded", "inactive", "readonly", "nocreate")


@dataclass(frozen=True)
class OSS:
    """An object storage server and the load it last reported."""

    id: str
    cpu_pct: float = 0.0
    mem_pct: float = 0.0
    bandwidth: float = DEFAULT_OSS_BANDWIDTH  # bytes/s over all its OSTs (network, CPU)
    domain: str = ""  # failure domain (rack, controller pair); the OSS itself when empty
    # bytes/s its OSTs outside an allocator's view carry (another pool, OSTs taking no stripes): the
    # server's bandwidth they use is not there for a job either (set by ClusterState.with_osts)
    hidden_load: float = 0.0
    #: Other jobs writing through the server now (CEFT: a new job's fair share is bandwidth / (writers + 1)).
    writers: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu_pct", "mem_pct"):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise ValueError(f"OSS {self.id}: {name}={value} is outside 0..100")
        if not self.bandwidth > 0:
            raise ValueError(f"OSS {self.id}: bandwidth={self.bandwidth} must be positive")


@dataclass(frozen=True)
class OST:
    """An object storage target: where stripes land."""

    index: int
    oss_id: str
    kbytes_total: int
    kbytes_avail: int
    bandwidth: float = DEFAULT_OST_BANDWIDTH  # bytes/s the target sustains
    load: float = 0.0  # bytes/s other jobs drive on it now (live congestion): bandwidth a new job cannot have
    state: str = "active"
    pools: tuple[str, ...] = ()
    #: Other jobs writing here now (their reservations are live): CEFT's fair share is bandwidth / (writers + 1).
    writers: int = 0

    def __post_init__(self) -> None:
        if not self.bandwidth > 0:
            raise ValueError(f"OST {self.index}: bandwidth={self.bandwidth} must be positive")
        if not self.load >= 0:
            raise ValueError(f"OST {self.index}: load={self.load} must not be negative")
        if self.state not in OST_STATES:
            raise ValueError(f"OST {self.index}: state {self.state!r} is not one of {', '.join(OST_STATES)}")
        if self.index < 0:
            raise ValueError(f"OST index {self.index} is negative")
        if self.kbytes_total <= 0:
            raise ValueError(f"OST {self.index}: kbytes_total={self.kbytes_total} must be positive")
        if not 0 <= self.kbytes_avail <= self.kbytes_total:
            raise ValueError(
                f"OST {self.index}: kbytes_avail={self.kbytes_avail} is outside 0..kbytes_total={self.kbytes_total}"
            )

    @property
    def bytes_total(self) -> int:
        return self.kbytes_total * 1024

    @property
    def bytes_avail(self) -> int:
        return self.kbytes_avail * 1024

    @property
    def fill(self) -> float:
        """Fraction of the OST already used."""
        return 1.0 - self.kbytes_avail / self.kbytes_total

    @property
    def usable_bandwidth(self) -> float:
        """What a new job can get here (CEFT's available throughput, seed 003): the smaller of the headroom (the
        bandwidth less live congestion) and the job's fair share among the jobs writing here, never below a
        small share. Without other writers it is the headroom."""
        headroom = min(self.bandwidth - self.load, self.bandwidth / (self.writers + 1))
        return max(headroom, self.bandwidth * MIN_BANDWIDTH_SHARE)

    @property
    def takes_stripes(self) -> bool:
        return self.state in ("active", "degraded")

    def room_bytes(self, fill_cap: float) -> int:
        """Bytes that may still be added without passing ``fill_cap`` (and never past the free space), in exact
        integer arithmetic (:func:`allowed_bytes`)."""
        used = self.bytes_total - self.bytes_avail
        return max(0, min(self.bytes_avail, allowed_bytes(self.bytes_total, fill_cap) - used))


@lru_cache(maxsize=64)
def _cap_fraction(fill_cap: float) -> Fraction:
    """The cap as the exact decimal it prints as (``used / total`` in floating point then never reads above it)."""
    return Fraction(repr(float(fill_cap)))


def allowed_bytes(total: int, fill_cap: float) -> int:
    """The most bytes an OST of ``total`` bytes may hold under ``fill_cap``: ``floor(fill_cap * total)`` in exact
    integer arithmetic, the cap read as the decimal it prints as (0.95 is 19/20). A floating-point product can
    round up past the cap; this never does."""
    cap = _cap_fraction(fill_cap)
    return total * cap.numerator // cap.denominator


#: Lustre's ``-1`` extent end: the component runs to the end of the file.
EOF_END = -1
#: Copies of a file iez places (``mirror_count``). Lustre's FLR takes up to 16 (LUSTRE_MIRROR_COUNT_MAX);
#: iez stops at 4: each mirror costs the file's bytes in write bandwidth and needs a failure domain of its own.
MAX_MIRRORS = 4
#: Lustre pool names: at most LOV_MAXPOOLNAME (15) characters; ``fs.name`` is the same pool as ``name``.
POOL_NAME_MAX = MAX_POOL_NAME


def check_pool_name(name: str, where: str) -> str:
    """``name`` if it can be a Lustre pool name, else :class:`ValueError` naming ``where``."""
    if not isinstance(name, str) or not name or len(name) > POOL_NAME_MAX or not all(
            c.isascii() and (c.isalnum() or c in "_-") for c in name):
        raise ValueError(f"{where}: pool {name!r} is not a Lustre pool name (1 to {POOL_NAME_MAX} letters, "
                         "digits, '_' or '-')")
    return name


@dataclass(frozen=True)
class Component:
    """One extent of a composite (PFL) layout: bytes ``[start, end)`` striped over their own OSTs.

    The same type describes a *template* (a directory's default, what a request
    carries: no ``osts``) and a *placed* component (``osts`` chosen by iez for an
    extent the file's predicted size reaches; an extent it does not reach keeps
    no OSTs and Lustre chooses them if the file ever grows there). ``dom`` is a
    Data-on-MDT component (``lfs setstripe -L mdt``): it lives on the MDT and
    never has OSTs. ``overstriping`` lets one OST hold several of the
    component's stripes (``lfs setstripe -C``), and only then.
    """

    start: int
    end: int  # EOF_END: to the end of the file
    stripe_count: int  # ALL_OSTS: every OST of the pool; 0 for a Data-on-MDT component
    stripe_size: int | None = None  # None in a template: iez chooses (paper Method II)
    pool: str | None = None
    osts: tuple[int, ...] = ()
    dom: bool = False
    overstriping: bool = False

    def __post_init__(self) -> None:
        where = f"component [{self.start}, {'EOF' if self.end == EOF_END else self.end})"
        if self.start < 0:
            raise ValueError(f"{where}: start must not be negative")
        if self.end != EOF_END and self.end <= self.start:
            raise ValueError(f"{where}: end must be above start (or -1 for the end of the file)")
        if self.stripe_size is not None and self.stripe_size <= 0:
            raise ValueError(f"{where}: stripe_size={self.stripe_size} must be positive")
        if self.pool is not None:
            check_pool_name(self.pool, where)
        if self.dom:
            if self.osts or self.stripe_count not in (0, 1):
                raise ValueError(f"{where}: a Data-on-MDT component has no OSTs")
            if self.start != 0:
                raise ValueError(f"{where}: only the first component can be Data-on-MDT")
        elif self.stripe_count == 0 or self.stripe_count < ALL_OSTS:
            raise ValueError(f"{where}: stripe_count={self.stripe_count} must be >= 1 or -1 (all OSTs)")
        if self.osts:
            if len(self.osts) != self.stripe_count:
                raise ValueError(f"{where}: stripe_count={self.stripe_count} but {len(self.osts)} OSTs")
            if any(o < 0 for o in self.osts):
                raise ValueError(f"{where}: OST indices must not be negative")
            if not self.overstriping and len(set(self.osts)) != len(self.osts):
                raise ValueError(f"{where}: an OST appears twice without overstriping")
            if self.stripe_size is None:
                raise ValueError(f"{where}: a placed component needs its stripe_size")

    @property
    def placed(self) -> bool:
        return bool(self.osts)

    def reached(self, file_bytes: int) -> bool:
        """Whether a file of ``file_bytes`` writes into this extent (Lustre instantiates it)."""
        return self.start == 0 or file_bytes > self.start

    def bytes_in(self, file_bytes: int) -> int:
        """Bytes of a ``file_bytes`` file that fall in this extent."""
        end = file_bytes if self.end == EOF_END else min(self.end, file_bytes)
        return max(0, end - self.start)

    def template(self) -> "Component":
        """The component without its OST choice (what a directory default says)."""
        return replace(self, osts=())


def check_components(components: Sequence[Component], where: str) -> tuple[Component, ...]:
    """``components`` as a tuple if they form one composite layout (the first starts at 0, each starts where
    the previous ended, only the last may run to EOF), else :class:`ValueError` naming ``where``."""
    out = tuple(components)
    if not out:
        raise ValueError(f"{where}: a composite layout needs at least one component")
    if out[0].start != 0:
        raise ValueError(f"{where}: the first component must start at 0, not {out[0].start}")
    for before, after in zip(out, out[1:]):
        if before.end == EOF_END:
            raise ValueError(f"{where}: a component follows one that runs to the end of the file")
        if after.start != before.end:
            raise ValueError(f"{where}: a component starts at {after.start}, where the one before ends at "
                             f"{before.end}")
    return out


def template_from_extents(ends: Sequence[tuple[int, int, int | None, str | None]]) -> tuple[Component, ...]:
    """A template from the contract's ``(end, stripe_count, stripe_size, pool)`` list (starts implied)."""
    out, start = [], 0
    for end, count, size, pool in ends:
        out.append(Component(start, end, count, size, pool))
        start = end
    return tuple(out)


def component_stripe_bytes(component: Component, file_bytes: int) -> list[int]:
    """Bytes each stripe object of a placed ``component`` holds for a file of ``file_bytes``.

    Lustre stripes by the file offset (``lov_stripe_number``): byte ``x`` of
    the extent is in stripe ``(x // stripe_size) % stripe_count``, also when
    the extent starts inside a stripe unit (an extent's end is aligned to its
    own stripe size, not to the next component's). So the extent holds, per
    stripe, RAID-0 of the file up to its end less RAID-0 up to its start.
    """
    count, size = len(component.osts), component.stripe_size or 0
    length = component.bytes_in(file_bytes)
    if not count or not length:
        return [0] * count
    before = raid0_bytes(component.start, size, count)
    upto_end = raid0_bytes(component.start + length, size, count)
    return [b - a for a, b in zip(before, upto_end)]


@dataclass(frozen=True)
class WriteRequest:
    """One file an application will write (a row of the paper's Table I)."""

    app: str
    file: str
    write_bytes: int
    stripe_count: int
    rank: int = 0
    pool: str | None = None
    #: The file's PFL template (its directory's default): iez chooses each reached component's OSTs.
    components: tuple[Component, ...] = ()
    #: A stripe size the file's policy fixes (Lustre's default layout); None: iez chooses (paper Method II).
    stripe_size: int | None = None
    #: Copies of the file (Lustre FLR mirrors), each in failure domains no other copy uses.
    mirror_count: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.mirror_count, bool) or not isinstance(self.mirror_count, int) or \
                not 1 <= self.mirror_count <= MAX_MIRRORS:
            raise ValueError(f"{self.file}: mirror_count={self.mirror_count!r} must be a whole number within "
                             f"1..{MAX_MIRRORS}")
        if self.pool is not None:
            check_pool_name(self.pool, self.file)
        if self.components:
            object.__setattr__(self, "components", check_components(self.components, self.file))
        if self.write_bytes < 0:
            raise ValueError(f"{self.file}: write_bytes={self.write_bytes} is negative")
        if self.stripe_count == 0 or self.stripe_count < ALL_OSTS:
            raise ValueError(f"{self.file}: stripe_count={self.stripe_count} must be >= 1 or -1 (all OSTs)")


@dataclass(frozen=True)
class Layout:
    """Where a file's stripes live: stripe ``i`` on OST ``osts[i]``. The one layout type of iez.

    Plain RAID-0 (``stripe_size``, ``osts``, ``pool``), composite (PFL:
    ``components``; ``osts`` is then every placed component's OSTs in order
    and ``stripe_size`` the first placed component's, 0 when none is placed;
    ``pool`` the one every component shares) or mirrored (Lustre FLR:
    ``mirrors``, every copy as its components, the first being what
    ``osts``/``components`` describe, the primary where writes go). A
    directory's default (a *template*) is a layout whose components have no
    OSTs. ``preferred_mirror`` is the copy reads should take (Lustre's
    ``prefer``; None: no copy marked), ``stale`` the copies a write has left
    behind until a resync. The allocator, the DB, the API, the simulator,
    usage and the mover all read layouts through this class: its
    :meth:`stripe_bytes` and :meth:`to_json` are the only definitions of
    "bytes per OST of a layout" and of "a layout as JSON".
    """

    stripe_size: int
    osts: tuple[int, ...]
    pool: str | None = None
    components: tuple[Component, ...] = ()
    mirrors: tuple[tuple[Component, ...], ...] = ()
    preferred_mirror: int | None = None
    stale: tuple[int, ...] = ()

    @property
    def stripe_count(self) -> int:
        return len(self.osts)

    @property
    def mirror_count(self) -> int:
        return max(1, len(self.mirrors))

    @property
    def composite(self) -> bool:
        return bool(self.components)

    @classmethod
    def from_components(cls, components: Sequence[Component], where: str = "layout") -> "Layout":
        """A composite layout (or template): the plain fields derived from the placed components."""
        comps = check_components(components, where)
        placed = [c for c in comps if c.osts]
        pools = {c.pool for c in comps}
        return Layout(placed[0].stripe_size or 0 if placed else 0, tuple(o for c in placed for o in c.osts),
                      pools.pop() if len(pools) == 1 else None, comps)

    @classmethod
    def from_mirrors(cls, mirrors: Sequence[Sequence[Component]], preferred: int | None = None,
                     stale: Sequence[int] = (), where: str = "layout") -> "Layout":
        """A mirrored layout (2 to MAX_MIRRORS copies, each a composite layout of its own)."""
        copies = tuple(check_components(m, f"{where}: mirror {k + 1}") for k, m in enumerate(mirrors))
        if not 2 <= len(copies) <= MAX_MIRRORS:
            raise ValueError(f"{where}: a mirrored layout has 2 to {MAX_MIRRORS} mirrors, not {len(copies)}")
        if preferred is not None and not 0 <= preferred < len(copies):
            raise ValueError(f"{where}: preferred mirror {preferred + 1} is not one of the {len(copies)} mirrors")
        marked = tuple(sorted(set(stale)))
        if any(not 0 <= k < len(copies) for k in marked):
            raise ValueError(f"{where}: a stale mirror is not one of the {len(copies)} mirrors")
        if len(marked) == len(copies):
            raise ValueError(f"{where}: every mirror is stale; at least one must hold the file")
        first = Layout.from_components(copies[0], where)
        return Layout(first.stripe_size, first.osts, first.pool, first.components, copies, preferred, marked)

    def layout(self) -> "Layout":
        """The layout fields alone (an :class:`Allocation` without its file, policy and note)."""
        return Layout(self.stripe_size, self.osts, self.pool, self.components, self.mirrors, self.preferred_mirror,
                      self.stale)

    def as_components(self) -> tuple[Component, ...]:
        """The layout as components: a plain layout is one component over the whole file."""
        if self.components:
            return self.components
        return (Component(0, EOF_END, len(self.osts), self.stripe_size, self.pool, self.osts),)

    def copies(self) -> tuple[tuple[Component, ...], ...]:
        """Every copy as components (one for a layout without mirrors)."""
        return self.mirrors or (self.as_components(),)

    def template(self) -> tuple[Component, ...]:
        """What a directory default says (or a file's layout without its OST choice)."""
        return tuple(c.template() for c in self.as_components())

    def objects(self, file_bytes: int) -> list[tuple[Component, int, int]]:
        """``(component, OST, bytes)`` per stripe object of every copy of a ``file_bytes`` file: RAID-0 per placed
        component by file offset (0 for an object the size does not reach); each copy holds the file's bytes."""
        return [(c, ost, b) for copy in self.copies() for c in copy if c.osts
                for ost, b in zip(c.osts, component_stripe_bytes(c, file_bytes))]

    def stripe_bytes(self, file_bytes: int) -> list[tuple[int, int]]:
        """``(OST, bytes)`` per stripe object of a ``file_bytes`` file (:meth:`objects`; a plain layout without
        building its component). The one definition of "bytes per OST of a layout": the allocator, the DB's
        reservations, usage, the inventory, drains, the simulator and the mover all use it."""
        if not self.mirrors and not self.components:
            return list(zip(self.osts, raid0_bytes(file_bytes, self.stripe_size, len(self.osts))))
        return [(ost, b) for _, ost, b in self.objects(file_bytes)]

    def to_json(self) -> dict[str, Any]:
        """The contract's form: ``stripe_size``, ``stripe_count``, ``osts``; ``pool`` when set; ``components``
        when they say more than the plain fields (not one placed RAID-0 component over the whole file) and
        always beside ``mirrors`` (the first copy); ``mirrors``, ``preferred_mirror`` and ``stale_mirrors``
        (0-based) for a mirrored layout. The one JSON form of a layout: ``iez layout``, ``iez alloc``, the
        DB's lookups and every API answer write it, :func:`iez.layout.model.layout_from_json` reads it."""
        out: dict[str, Any] = {"stripe_size": self.stripe_size, "stripe_count": self.stripe_count,
                               "osts": list(self.osts)}
        if self.pool:
            out["pool"] = self.pool
        if self.mirrors:
            out["components"] = [component_json(c) for c in self.mirrors[0]]
            out["mirrors"] = [[component_json(c) for c in m] for m in self.mirrors]
            if self.preferred_mirror is not None:
                out["preferred_mirror"] = self.preferred_mirror
            if self.stale:
                out["stale_mirrors"] = list(self.stale)
        elif self.components and not plain_component(self.components):
            out["components"] = [component_json(c) for c in self.components]
        return out


def plain_component(components: Sequence[Component]) -> bool:
    """Whether ``components`` are one placed RAID-0 component over the whole file: a plain layout (with its
    pool), which the plain fields say in full."""
    if len(components) != 1:
        return False
    c = components[0]
    return c.start == 0 and c.end == EOF_END and bool(c.osts) and not c.dom and not c.overstriping


def component_json(c: Component) -> dict[str, Any]:
    """``{start, end, stripe_size, stripe_count, osts}`` and ``pool``/``pattern``/``overstriping`` when set."""
    return component_policy({"start": c.start, "end": c.end, "stripe_size": c.stripe_size,
                             "stripe_count": c.stripe_count, "osts": list(c.osts)}, c)


def component_policy(out: dict[str, Any], c: Component) -> dict[str, Any]:
    """``out`` with the component's ``pool``, ``pattern: "mdt"`` and ``overstriping`` when set."""
    if c.pool:
        out["pool"] = c.pool
    if c.dom:
        out["pattern"] = "mdt"
    if c.overstriping:
        out["overstriping"] = True
    return out


@dataclass(frozen=True, init=False)
class Allocation(Layout):
    """The layout chosen for one file: a :class:`Layout` plus the ``file``, the ``policy`` that chose it and a
    ``note`` of what the policy had to give up (a degraded OST used because nothing else fitted).

    A subclass, not a second type: every layout field, ``stripe_count``,
    ``mirror_count``, ``copies()``, ``stripe_bytes()`` and the JSON form are
    the layout's own. The constructor keeps the argument order allocations
    were built with before the merge (``file, stripe_size, osts, policy, pool,
    components, note, mirrors, preferred_mirror``), which the allocators call
    positionally; ``preferred_mirror`` defaults to 0 (the primary) here, as
    every placed mirrored file marks one copy. Use :meth:`of` to wrap a
    layout that exists already. Without mirrors ``preferred_mirror`` is None,
    as in any layout: there is no copy to prefer.
    """

    file: str = ""
    policy: str = ""
    note: str = ""

    def __init__(self, file: str, stripe_size: int, osts: tuple[int, ...], policy: str = "",
                 pool: str | None = None, components: tuple[Component, ...] = (), note: str = "",
                 mirrors: tuple[tuple[Component, ...], ...] = (), preferred_mirror: int | None = 0,
                 stale: tuple[int, ...] = ()) -> None:
        super().__init__(stripe_size, osts, pool, components, mirrors, preferred_mirror if mirrors else None, stale)
        object.__setattr__(self, "file", file)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "note", note)

    @classmethod
    def of(cls, file: str, layout: Layout, policy: str = "", note: str = "") -> "Allocation":
        """``layout`` as the allocation of ``file``: a new placement, so no copy is stale, and a mirrored layout
        without a marked copy prefers the first."""
        preferred = layout.preferred_mirror
        return cls(file, layout.stripe_size, layout.osts, policy, layout.pool, layout.components, note,
                   layout.mirrors, 0 if preferred is None else preferred)

    def to_json(self) -> dict[str, Any]:
        """``file``, the layout's JSON (:meth:`Layout.to_json`) and ``note`` when the policy gave something up:
        what ``POST /v1/allocate``, ``GET /v1/allocations`` and ``iez alloc`` answer."""
        out = {"file": self.file, **super().to_json()}
        if self.note:
            out["note"] = self.note
        return out


#: ``stripe_bytes(layout, file_bytes)``: :meth:`Layout.stripe_bytes` as a function.
stripe_bytes = Layout.stripe_bytes


@dataclass(frozen=True)
class ClusterState:
    """What an allocator sees: the usable OSTs and the load of their servers."""

    osts: tuple[OST, ...]
    osses: dict[str, OSS] = field(default_factory=dict)
    fill_cap: float = DEFAULT_FILL_CAP

    def __post_init__(self) -> None:
        if not 0.0 < self.fill_cap <= 1.0:
            raise ValueError(f"fill_cap={self.fill_cap} is outside (0, 1]")
        seen: set[int] = set()
        for ost in self.osts:
            if ost.index in seen:
                raise ValueError(f"OST index {ost.index} appears twice")
            seen.add(ost.index)

    @classmethod
    def build(cls, osts: Sequence[OST], osses: Sequence[OSS] = (), fill_cap: float = DEFAULT_FILL_CAP
              ) -> "ClusterState":
        known = {oss.id: oss for oss in osses}
        for ost in osts:
            known.setdefault(ost.oss_id, OSS(ost.oss_id))
        return cls(tuple(sorted(osts, key=lambda o: o.index)), known, fill_cap)

    def oss_of(self, ost: OST) -> OSS:
        return self.osses[ost.oss_id]

    def with_osts(self, osts: Sequence[OST]) -> "ClusterState":
        """The same servers and settings over another OST list (a pool, the OSTs in a state); each
        server keeps the load of the OSTs left out, since it shares the server's bandwidth."""
        kept = {o.index for o in osts}
        hidden: dict[str, float] = {}
        for o in self.osts:
            if o.index not in kept and o.load:
                hidden[o.oss_id] = hidden.get(o.oss_id, 0.0) + o.load
        osses = {k: replace(v, hidden_load=v.hidden_load + hidden[k]) if k in hidden else v
                 for k, v in self.osses.items()}
        return ClusterState(tuple(osts), osses, self.fill_cap)


def oss_usable_bandwidth(server: OSS, osts_load: float, cpu_weight: float = 0.0) -> float:
    """What a new job can get through one OSS: its bandwidth (less ``cpu_weight`` of it at 100 % CPU) less
    the load its OSTs carry (``osts_load`` for those in view, plus its hidden load), never below a small share."""
    nominal = server.bandwidth * (1.0 - cpu_weight * server.cpu_pct / 100.0)
    headroom = min(nominal - osts_load - server.hidden_load, nominal / (server.writers + 1))  # CEFT's fair share
    return max(headroom, server.bandwidth * MIN_BANDWIDTH_SHARE)


def oss_loads(cluster: "ClusterState") -> dict[str, float]:
    """Bytes/s each OSS's OSTs in view carry."""
    load = {oss_id: 0.0 for oss_id in cluster.osses}
    for o in cluster.osts:
        load[o.oss_id] = load.get(o.oss_id, 0.0) + o.load
    return load


def io_time(cluster: "ClusterState", bytes_per_ost: dict[int, float], cpu_weight: float = 0.0) -> float:
    """A job's modelled I/O time (makespan): the slowest OST or OSS, each streaming the job's bytes at the
    bandwidth the job can get there."""
    worst = 0.0
    per_oss: dict[str, float] = {}
    for ost in cluster.osts:
        b = float(bytes_per_ost.get(ost.index, 0))
        worst = max(worst, b / ost.usable_bandwidth)
        per_oss[ost.oss_id] = per_oss.get(ost.oss_id, 0.0) + b
    load = oss_loads(cluster)
    for oss_id, b in per_oss.items():
        worst = max(worst, b / oss_usable_bandwidth(cluster.osses[oss_id], load[oss_id], cpu_weight))
    return worst


def usable_kbytes(kbytes_avail: int, kbytes_total: int, reserved_bytes: int) -> int:
    """An OST's free space as allocation sees it: reported free (never above its size) less what earlier
    allocations reserved and have not yet written, rounded so the two together never exceed what it reported."""
    return max(0, min(kbytes_avail, kbytes_total) - -(-reserved_bytes // 1024))


def object_bytes(write_bytes: int, stripe_size: int, stripe_count: int) -> int:
    """Bytes of a file's fullest stripe object (the first one), RAID-0 wrap-around included."""
    full_rounds, rest = divmod(write_bytes, stripe_size * stripe_count)
    return full_rounds * stripe_size + min(stripe_size, rest)


def raid0_bytes(write_bytes: int, stripe_size: int, stripe_count: int) -> list[int]:
    """Bytes each stripe object holds for a file of ``write_bytes`` (RAID-0 striping).

    Stripe ``i`` holds chunks ``i, i + count, i + 2*count, ...`` of ``stripe_size`` bytes.
    """
    if stripe_size <= 0 or stripe_count <= 0:
        raise ValueError(f"stripe_size={stripe_size} and stripe_count={stripe_count} must be positive")
    full_rounds, rest = divmod(write_bytes, stripe_size * stripe_count)
    out = [full_rounds * stripe_size] * stripe_count
    for i in range(stripe_count):
        chunk = min(stripe_size, max(0, rest - i * stripe_size))
        out[i] += chunk
    return out
