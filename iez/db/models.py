"""Tables of the interaction database (paper III-A3): where clients and the MDS meet.

Portable across SQLite and MariaDB. Paths are stored as given (case-sensitive,
``utf8mb4_bin`` on MariaDB) and up to 4096 bytes long; uniqueness on a path
goes through ``path_hash`` (SHA-256 hex) because MariaDB cannot put a unique
key on a 4096-character column.

The placement library reads ``allocations`` with one statement (or the
``placements`` view, which hides stale rows)::

    SELECT stripe_size, stripe_count, osts FROM placements WHERE path = ?

``osts`` is the ordered OST index list as plain text, ``"3 7 11"`` (paper Table II).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    Double,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

MAX_PATH_BYTES = 4096
#: ``state`` values of an allocation.
PLANNED, APPLIED, STALE = "planned", "applied", "stale"
ALLOCATION_STATES = (PLANNED, APPLIED, STALE)
#: ``source`` values of a write request.
REQUEST_SOURCES = ("traced", "predicted", "darshan", "manual")

# Exact path text on MariaDB: its default collation folds case, and utf8mb4_bin pads
# trailing spaces ("a " = "a"); utf8mb4_nopad_bin compares every byte (migration 0003).
PathText = String(MAX_PATH_BYTES).with_variant(
    mysql.VARCHAR(MAX_PATH_BYTES, charset="utf8mb4", collation="utf8mb4_nopad_bin"), "mysql", "mariadb"
)
# Microsecond timestamps on MariaDB (DATETIME defaults to whole seconds there).
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
Name = String(255).with_variant(mysql.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb")


def utcnow() -> datetime:
    """Naive UTC: both databases store timestamps without a zone."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def path_hash(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()


def osts_text(osts) -> str:
    return " ".join(str(int(o)) for o in osts)


def parse_osts(text: str) -> list[int]:
    return [int(o) for o in text.split()]


class Base(DeclarativeBase):
    pass


class Lock(Base):
    """One row that every writing transaction locks first on MariaDB (see :mod:`iez.db.session`)."""

    __tablename__ = "iez_lock"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)


class Application(Base):
    __tablename__ = "applications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Name, unique=True)
    # SHA-256 of executable, arguments and working directory, as the client computes it.
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    created: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # The user whose requests created it (migration 0007); the API serves its layouts only to them.
    owner: Mapped[str | None] = mapped_column(Name, index=True)

    requests: Mapped[list["WriteRequestRow"]] = relationship(back_populates="app")
    runs: Mapped[list["Run"]] = relationship(back_populates="app")


class Run(Base):
    """One execution of an application under the placement library."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[int] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"), index=True)
    started: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    ended: Mapped[datetime | None] = mapped_column(Timestamp)
    files_found: Mapped[int] = mapped_column(Integer, default=0)
    files_missed: Mapped[int] = mapped_column(Integer, default=0)
    # Creates left to Lustre because the directory's default changed (migration 0006): not misses.
    files_skipped: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    app: Mapped[Application] = relationship(back_populates="runs")


class WriteRequestRow(Base):
    """A file an application will write (paper Table I); one row per (application, file)."""

    __tablename__ = "write_requests"
    __table_args__ = (
        UniqueConstraint("app_id", "path_hash", name="uq_write_requests_app_path"),
        CheckConstraint("write_bytes >= 0", name="ck_write_requests_write_bytes"),
        CheckConstraint("stripe_count = -1 OR stripe_count BETWEEN 1 AND 2000", name="ck_write_requests_stripe_count"),
        CheckConstraint("mirror_count BETWEEN 1 AND 4", name="ck_write_requests_mirror_count"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    app_id: Mapped[int] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(PathText)
    path_hash: Mapped[str] = mapped_column(String(64))
    write_bytes: Mapped[int] = mapped_column(BigInteger)
    stripe_count: Mapped[int] = mapped_column(Integer)
    # A stripe size the source asked for (Darshan logs know it); allocations compute their own.
    stripe_size: Mapped[int | None] = mapped_column(BigInteger)
    rank: Mapped[int] = mapped_column(Integer, default=0)
    source: Mapped[str] = mapped_column(String(16), default="predicted")
    created: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    updated: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # Why the last allocation pass could not place this file (None once placed, or never tried).
    refusal: Mapped[str | None] = mapped_column(String(512))
    # Lustre's policy for the file (migration 0005): its pool, its PFL template (JSON list of components), and
    # the canonical text of its directory's default layout when learnt ('' none, NULL unknown).
    pool: Mapped[str | None] = mapped_column(String(32))
    components: Mapped[str | None] = mapped_column(Text)
    default_layout: Mapped[str | None] = mapped_column(Text)
    # Copies of the file (Lustre FLR mirrors), each in failure domains no other copy uses (migration 0008).
    mirror_count: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    app: Mapped[Application] = relationship(back_populates="requests")


class AllocationRow(Base):
    """The layout chosen for one file; at most one non-stale row per path."""

    __tablename__ = "allocations"
    __table_args__ = (
        Index("ix_allocations_path", "path", mysql_length=255),
        Index("ix_allocations_request", "request_id"),
        CheckConstraint("stripe_size > 0", name="ck_allocations_stripe_size"),
        CheckConstraint("stripe_count >= 1", name="ck_allocations_stripe_count"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # NULL for a layout pinned by hand (``iez alloc add``).
    request_id: Mapped[int | None] = mapped_column(ForeignKey("write_requests.id", ondelete="SET NULL"))
    path: Mapped[str] = mapped_column(PathText)
    stripe_size: Mapped[int] = mapped_column(BigInteger)
    stripe_count: Mapped[int] = mapped_column(Integer)
    osts: Mapped[str] = mapped_column(Text)
    policy: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), default=PLANNED)
    created: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # Layout text (placement_lib/README.md, version 2) for a layout with a pool or components; NULL when plain.
    pool: Mapped[str | None] = mapped_column(String(32))
    layout: Mapped[str | None] = mapped_column(Text)
    # The directory default the request was learnt under: the library applies only while the directory still has it.
    default_layout: Mapped[str | None] = mapped_column(Text)
    # What the policy had to give up for this file (a degraded OST used because nothing else fitted).
    note: Mapped[str | None] = mapped_column(String(512))

    reservations: Mapped[list["Reservation"]] = relationship(
        back_populates="allocation", cascade="all, delete-orphan", passive_deletes=True
    )


class Reservation(Base):
    """OST space an allocation holds until its file is written (or the reservation expires)."""

    __tablename__ = "reservations"
    __table_args__ = (Index("ix_reservations_ost_expires", "ost_index", "expires"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    allocation_id: Mapped[int] = mapped_column(ForeignKey("allocations.id", ondelete="CASCADE"), index=True)
    ost_index: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)
    expires: Mapped[datetime] = mapped_column(Timestamp)
    # The OST's kbytes_avail when reserved: reports showing that much used since end the reservation early.
    avail_kb_at: Mapped[int | None] = mapped_column(BigInteger)

    allocation: Mapped[AllocationRow] = relationship(back_populates="reservations")


class OssRow(Base):
    """The latest report of one OSS (the time series is ``oss_stats``)."""

    __tablename__ = "oss"

    oss_id: Mapped[str] = mapped_column(Name, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    sample_time: Mapped[datetime] = mapped_column(Timestamp)
    received: Mapped[datetime] = mapped_column(Timestamp)
    cpu_pct: Mapped[float] = mapped_column(Float)
    mem_pct: Mapped[float] = mapped_column(Float)
    # The agent's report interval: three missed intervals make the OSS stale (NULL: IEZ_OSS_STALE_S).
    interval_s: Mapped[float | None] = mapped_column(Float)


class OstRow(Base):
    """The latest statistics of one OST (the time series is ``ost_stats``)."""

    __tablename__ = "osts"

    ost_index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(Name)
    oss_id: Mapped[str] = mapped_column(Name, index=True)
    kbytes_total: Mapped[int] = mapped_column(BigInteger)
    kbytes_avail: Mapped[int] = mapped_column(BigInteger)
    read_bytes: Mapped[int | None] = mapped_column(BigInteger)
    write_bytes: Mapped[int | None] = mapped_column(BigInteger)
    sample_time: Mapped[datetime] = mapped_column(Timestamp)
    # Lustre's policy for the OST (migration 0005): its state, pools (space-separated) and reserved space.
    state: Mapped[str] = mapped_column(String(16), default="active", server_default="active")
    pools: Mapped[str | None] = mapped_column(Text)
    reserved_kbytes: Mapped[int | None] = mapped_column(BigInteger)
    # The MDS's live load (migration 0009): read+write bytes/s over its smoothing window (iez.traffic).
    load_bytes_s: Mapped[float | None] = mapped_column(Double)


class OssStat(Base):
    __tablename__ = "oss_stats"
    __table_args__ = (Index("ix_oss_stats_oss_time", "oss_id", "sample_time"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    oss_id: Mapped[str] = mapped_column(Name)
    seq: Mapped[int] = mapped_column(BigInteger)
    sample_time: Mapped[datetime] = mapped_column(Timestamp)
    cpu_pct: Mapped[float] = mapped_column(Float)
    mem_pct: Mapped[float] = mapped_column(Float)


class OstStat(Base):
    __tablename__ = "ost_stats"
    __table_args__ = (Index("ix_ost_stats_ost_time", "ost_index", "sample_time"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    ost_index: Mapped[int] = mapped_column(Integer)
    oss_id: Mapped[str] = mapped_column(Name)
    kbytes_total: Mapped[int] = mapped_column(BigInteger)
    kbytes_avail: Mapped[int] = mapped_column(BigInteger)
    read_bytes: Mapped[int | None] = mapped_column(BigInteger)
    write_bytes: Mapped[int | None] = mapped_column(BigInteger)
    sample_time: Mapped[datetime] = mapped_column(Timestamp)


class MdsLeaseRow(Base):
    """The active MDS service of this database (migration 0010; :mod:`iez.mds.lease`).

    One row per service (``service`` 'mds'): the MDS that holds it (``owner``, a random token of its
    process; NULL once released) renews ``renewed`` and ``expires`` every report interval, on the
    database's clock; a record past ``expires`` (3 intervals after its last heartbeat) may be taken over.
    ``generation`` counts claims (a fencing token), ``version`` every change (claims are compare-and-swap
    on it). ``instance`` (boot id, PID namespace, process start time) lets a process on the same node see
    that the holder has died without waiting for its heartbeat to age.
    """

    __tablename__ = "mds_lease"

    service: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(64))
    generation: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(BigInteger)
    pid: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(Name)
    instance: Mapped[str] = mapped_column(String(255))
    endpoint: Mapped[str | None] = mapped_column(String(255))
    since: Mapped[datetime] = mapped_column(Timestamp)
    renewed: Mapped[datetime] = mapped_column(Timestamp)
    expires: Mapped[datetime] = mapped_column(Timestamp)


# The file inventory's tables (migration 0011) belong to the same schema; they live with the inventory.
from iez.inventory import tables as _inventory_tables  # noqa: E402,F401
