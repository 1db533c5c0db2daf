"""The inventory's tables (migration 0011), part of the interaction DB's schema (:mod:`iez.db.models`).

Files are keyed by FID (Lustre's, or in emulation one derived from the inode number), with their parent
directory's FID and their name: a rename or a directory move is one row changed, and paths are resolved
through ``inv_dirs`` (a seeded root's row has no parent and its absolute path as name). Each file's stripe
objects are rows of ``inv_objects`` (OST, bytes), indexed by ``(ost, bytes)``, so per-OST totals and "the
largest objects on OST N" are index-backed SQL instead of a walk. ``gen`` is the scan generation that last
saw a row (a rescan deletes what it no longer saw); ``stale`` marks a file whose last change could not be
read yet (it moved or vanished before the consumer looked) and is looked at again with every batch.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from iez.db.models import Base, Name, PathText, Timestamp

#: A FID as text, ``[0x200000401:0x3:0x0]`` without the brackets.
Fid = String(48)


class InvRoot(Base):
    """A tree the inventory holds: seeded by a scan (``scanned``), then kept by a changelog consumer."""

    __tablename__ = "inv_roots"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path_hash: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str] = mapped_column(PathText)
    fid: Mapped[str] = mapped_column(Fid)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    scanned: Mapped[datetime | None] = mapped_column(Timestamp)
    scan_s: Mapped[float | None] = mapped_column(Float)


class InvDir(Base):
    __tablename__ = "inv_dirs"
    __table_args__ = (Index("ix_inv_dirs_parent", "parent"),)

    fid: Mapped[str] = mapped_column(Fid, primary_key=True)
    parent: Mapped[str | None] = mapped_column(Fid)
    name: Mapped[str] = mapped_column(PathText)
    root_id: Mapped[int] = mapped_column(Integer)
    gen: Mapped[int] = mapped_column(BigInteger, default=0)


class InvFile(Base):
    __tablename__ = "inv_files"
    __table_args__ = (Index("ix_inv_files_parent", "parent"), Index("ix_inv_files_root", "root_id"),
                      Index("ix_inv_files_stale", "stale"))

    fid: Mapped[str] = mapped_column(Fid, primary_key=True)
    parent: Mapped[str] = mapped_column(Fid)
    name: Mapped[str] = mapped_column(Name)
    root_id: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)
    layout: Mapped[str | None] = mapped_column(Text)  # iez.layout.emulated.format_attr text; NULL: none
    uid: Mapped[int] = mapped_column(BigInteger)
    gid: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[int] = mapped_column(Integer)
    nlink: Mapped[int] = mapped_column(Integer)
    ino: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    ctime_ns: Mapped[int] = mapped_column(BigInteger)
    atime_ns: Mapped[int] = mapped_column(BigInteger)
    stale: Mapped[int] = mapped_column(Integer, default=0)
    gen: Mapped[int] = mapped_column(BigInteger, default=0)


class InvObject(Base):
    """One stripe object: ``bytes`` of file ``fid`` on OST ``ost`` (``seq``: its place in the layout)."""

    __tablename__ = "inv_objects"
    __table_args__ = (Index("ix_inv_objects_ost_bytes", "ost", "bytes"),)

    fid: Mapped[str] = mapped_column(Fid, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    ost: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)


class InvChangelog(Base):
    """Where a changelog consumer stands: the last record it applied, committed with the changes."""

    __tablename__ = "inv_changelog"

    mdt: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(BigInteger, default=0)
    updated: Mapped[datetime | None] = mapped_column(Timestamp)
    roots: Mapped[str | None] = mapped_column(Text)  # JSON list of the roots it keeps
    records: Mapped[int] = mapped_column(BigInteger, default=0)
    rescans: Mapped[int] = mapped_column(Integer, default=0)
    note: Mapped[str | None] = mapped_column(Text)
