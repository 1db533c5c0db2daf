"""Executing a plan: each move once, through the journal, so a kill -9 and a rerun lose and repeat nothing.

For each move the journal's last record decides: ``done`` or ``skipped``, it
is over; ``copied`` with the file now being that copy's inode, the rename
happened before the kill (recorded ``done``); otherwise (``start``, or
``copied`` without the rename) the move runs again from the original, which
the plan's identity still guards. Before the first move, the temporaries that
killed movers left in the directories of the plan's files are removed (those
whose process is gone: :mod:`iez.move.temps`), and the report counts them. A move's layout is its
``layout`` (composite and mirrored files: the whole new layout) or else its plain ``stripe_size``/``to``/``pool``
(plans written before layouts were carried load as they did). A move runs
through :func:`iez.move.migrate.migrate`: skipped when the file is open for
writing, changed since the plan or during the copy, or gone.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from iez.layout import emulated
from iez.layout.model import Layout
from iez.move import temps
from iez.move.migrate import Identity, Skipped, migrate
from iez.rebalance.journal import COPIED, DONE, SKIPPED, START, Journal


@dataclass
class Report:
    moved: int = 0
    bytes_moved: int = 0
    already: int = 0  # done or skipped by an earlier run of this plan
    skipped: list[dict] = field(default_factory=list)
    journal: str = ""
    #: Temporaries of killed movers removed from the plan's directories before the first move, and those kept
    #: (their process still runs, or runs where it cannot be seen).
    temporaries_removed: int = 0
    temporaries_kept: int = 0

    def to_json(self) -> dict:
        return {"files_moved": self.moved, "bytes_moved": self.bytes_moved, "already_done": self.already,
                "skipped": self.skipped, "journal": self.journal, "temporaries_removed": self.temporaries_removed,
                "temporaries_kept": self.temporaries_kept}


def load_plan(path: str) -> tuple[dict, str]:
    """The plan and the sha256 of its bytes; one-line errors for what is not a plan."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such plan (make one with iez rebalance plan --json > {path})") from None
    try:
        plan = json.loads(raw)
        moves = plan["moves"]
        for m in moves:
            m["file"], m["to"], m["stripe_size"], m["bytes"]  # noqa: B018 - each move names these
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a rebalance plan (expected the JSON of iez rebalance plan --json; {err})"
                         ) from None
    for m in moves:
        move_layout(m, path)  # a layout iez cannot read is said now, before any file moves
    return plan, hashlib.sha256(raw).hexdigest()


def move_layout(m: dict, where: str = "plan") -> Layout:
    """The layout a move gives its file: ``layout`` (the whole new layout, emulated attribute text: composite
    and mirrored files) when the move has one, else the plain ``stripe_size``/``to``/``pool``."""
    if m.get("layout"):
        return emulated.parse_attr(m["layout"], f"{where}: move of {m['file']}")
    return Layout(m["stripe_size"], tuple(m["to"]), m.get("pool"))


def _recover(journal: Journal, file: str) -> bool:
    """Settle a move an earlier run left half done; True when it turns out done."""
    record = journal.state(file)
    if record and record["event"] == COPIED:
        try:
            if os.lstat(file).st_ino == record["ino"]:
                journal.record(file, DONE, ino=record["ino"])
                return True
        except FileNotFoundError:
            pass
    return False  # its copy, if one was left, went with the sweep before the first move


def apply(plan_path: str, journal_path: str | None = None, log: Callable[[str], None] | None = None) -> Report:
    plan, sha = load_plan(plan_path)
    journal_path = journal_path or f"{plan_path}.journal"
    journal = Journal(journal_path, sha)
    report = Report(journal=str(journal_path))
    swept = temps.sweep_beside(m["file"] for m in plan["moves"])
    report.temporaries_removed, report.temporaries_kept = swept.removed, swept.kept
    if log and swept.removed:
        log(f"removed {swept.removed} temporar{'ies' if swept.removed != 1 else 'y'} that killed movers left")
    try:
        for m in plan["moves"]:
            file = m["file"]
            record = journal.state(file)
            if record and record["event"] in (DONE, SKIPPED):
                report.already += 1
                continue
            if record and _recover(journal, file):
                report.moved += 1
                report.bytes_moved += m["bytes"]
                continue
            layout = move_layout(m, plan_path)
            expect = Identity(m["ino"], m["bytes"], m["mtime_ns"]) if m.get("ino") else None
            journal.record(file, START, to=m["to"])
            try:
                ino = migrate(file, layout, expect, copied=lambda ino: journal.record(file, COPIED, ino=ino))
            except Skipped as why:
                journal.record(file, SKIPPED, reason=str(why))
                report.skipped.append({"file": file, "reason": str(why)})
                if log:
                    log(f"skipped {why}")
                continue
            journal.record(file, DONE, ino=ino)
            report.moved += 1
            report.bytes_moved += m["bytes"]
            if log:
                log(f"moved {file} {m.get('from')} -> {m['to']}")
    finally:
        journal.close()
    return report
