"""The balancing service: keeps each pool's fill under its high-water mark and its spread near the target,
with nobody watching (Robinhood's fill triggers, the Ceph balancer's back-off).

Per pool (a balancing domain of :mod:`iez.rebalance.pools`) a *pass* starts
when an OST passes ``high_water`` or the fill spread passes ``target +
hysteresis``, and goes on until every OST is at most ``low_water`` full and the
spread at most ``target``; the hysteresis keeps a pool that hovers near the
target from starting a pass at every look. A pass plans with the existing
planner (:func:`iez.rebalance.pools.build`) at the widest spread target whose
balanced band also tops out under ``low_water`` (:func:`iez.rebalance.plan.target_under`),
so the fewest bytes move for both goals, and re-plans from the fills it left
until both hold (at most :data:`PLANS_PER_PASS` plans, so files that keep being
skipped cannot keep it busy). A pool whose mean fill is above ``low_water``
cannot get there by moving; it is balanced to the target and said.

A plan is written under the state directory (``pass.json``) before its first
move and executed by :func:`iez.rebalance.apply.apply`, which journals every
move (``pass.journal``): after a kill -9 the restarted service finishes that
plan first, and apply's journal repeats and loses nothing. Between two moves
the service looks at the live view (:mod:`iez.rebalance.liveview`) at most every
:data:`CHECK_S` seconds: a degraded pool or a source or destination OST busy
with jobs pauses it, which it does by raising from apply's ``log`` callback
after a move's journal record, so resuming is apply's own resume. Its state
goes to a status file (:mod:`iez.rebalance.status`) for ``iez status`` and
the metrics.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from iez.errors import IezError
from iez.rebalance import liveview
from iez.rebalance.settings import BalanceSettings

if TYPE_CHECKING:
    from iez.config import Settings

#: Plans one pass may make before it gives up on a goal it does not reach (files skipped, too large to fit).
PLANS_PER_PASS = 4
#: Seconds between two looks at the live view while moving.
CHECK_S = 1.0
#: Seconds the planner spends improving a pool's plan (iez rebalance plan's --improve-s).
IMPROVE_S = 1.0
PLAN, JOURNAL = "pass.json", "pass.journal"


class _Pause(IezError):
    """Raised from apply's log callback: stop after this move, the journal says where."""


@dataclass
class PoolStatus:
    """What the service is doing with one pool (``pool`` None: the OSTs in no pool, or all OSTs)."""

    pool: str | None
    state: str = "idle"  # idle, moving or paused
    reason: str = ""
    in_pass: bool = False
    osts: int = 0
    max_fill: float = 0.0
    mean_fill: float = 0.0
    spread: float = 0.0
    bytes_left: int = 0
    eta_s: float | None = None
    pass_bytes_moved: int = 0
    bytes_moved_total: int = 0
    files_moved_total: int = 0
    passes: int = 0

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("max_fill", "mean_fill", "spread"):
            out[k] = round(out[k], 6)
        out["eta_s"] = None if self.eta_s is None else round(self.eta_s, 1)
        return out


@dataclass
class Step:
    """One look at every pool (what ``iez balance --once`` prints)."""

    action: str = "idle"
    reason: str = ""
    bytes_moved: int = 0
    files_moved: int = 0
    files_skipped: int = 0
    spread_before: float = 0.0
    spread_after: float = 0.0
    pools: list[dict] = field(default_factory=list)
    moves: list[dict] = field(default_factory=list)  # dry run: what would move

    def to_json(self, dry_run: bool) -> dict:
        out = {"action": self.action, "reason": self.reason or None, "bytes_moved": self.bytes_moved,
               "files_moved": self.files_moved, "files_skipped": self.files_skipped,
               "spread_before": round(self.spread_before, 6), "spread_after": round(self.spread_after, 6),
               "dry_run": dry_run, "pools": self.pools}
        if dry_run:
            out["moves"] = self.moves
        return out


class JournalTail:
    """The records apply appends to a journal (:mod:`iez.rebalance.journal`'s format), read as they come."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def new(self) -> list[dict]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line without its newline is still being written
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "file" in record:
                out.append(record)
        return out


def fills(osts) -> tuple[float, float, float]:
    """(max fill, mean fill, spread) of planner OSTs."""
    if not osts:
        return 0.0, 0.0, 0.0
    f = [o.used / o.capacity for o in osts]
    return max(f), sum(o.used for o in osts) / sum(o.capacity for o in osts), max(f) - min(f)


class Balancer:
    def __init__(self, settings: BalanceSettings, state_dir: Path, status_path: Path | None = None,
                 dry_run: bool = False, log: Callable[[str], None] | None = None):
        from iez.rebalance.status import StatusFile

        self.settings, self.dry_run = settings, dry_run
        self.state_dir = Path(state_dir)
        self.log = log or (lambda text: None)
        self.stop = threading.Event()
        self.own = liveview.OwnTraffic()
        root = settings.root
        if not root:
            raise ValueError("no file system to balance: give --root DIR (a Lustre mount point or an emulated "
                             "cluster's root) or root in the config file")
        self.emulated = (Path(root) / "cluster.json").is_file()
        if not Path(root).is_dir():
            raise ValueError(f"--root {root}: no such directory")
        self.root: str = root  # settings.root, checked above
        self.db_settings: Settings | None
        self.view: liveview.DbView | liveview.EmulatedView
        if settings.db or not self.emulated:
            from iez.config import Settings

            self.db_settings = Settings.from_env(db=settings.db)
            self.view = liveview.DbView(self.db_settings)
        else:
            self.db_settings = None
            self.view = liveview.EmulatedView(root)
        self.pools: dict[str | None, PoolStatus] = {}
        self.status = StatusFile(status_path, self) if status_path else None
        if self.status:
            for entry in self.status.previous_pools():
                self.pools[entry.get("pool")] = PoolStatus(
                    entry.get("pool"), in_pass=bool(entry.get("in_pass")),
                    bytes_moved_total=int(entry.get("bytes_moved_total") or 0),
                    files_moved_total=int(entry.get("files_moved_total") or 0), passes=int(entry.get("passes") or 0))
        self.started = time.time()
        self.last_action = "idle"
        self.error = ""  # why the last look failed (the service retries)

    # -- what there is ------------------------------------------------------------------------------------
    def inventory(self):
        from iez.rebalance import inventory

        if self.db_settings is not None:
            roots = [self.root]
            if self.emulated:
                from iez.emulate.cluster import ClusterLayout

                roots = ClusterLayout.load(self.root).data
            return inventory.from_db(self.db_settings, roots)
        return inventory.from_cluster(self.root)

    def domains(self, inv) -> list[tuple[str | None, list[int], list[int]]]:
        """(pool, usable OSTs, every member) per balancing domain, the configured pools only when given."""
        from iez.rebalance.pools import domains

        pooled = set().union(*map(set, inv.pools.values())) if inv.pools else set()
        out = []
        for name, usable in domains(inv):
            if self.settings.pools and name not in self.settings.pools:
                continue
            members = inv.pools[name] if name is not None else [o.index for o in inv.osts if o.index not in pooled]
            out.append((name, usable, sorted(members)))
        return out

    def _pool(self, name: str | None) -> PoolStatus:
        if name not in self.pools:
            self.pools[name] = PoolStatus(name)
        return self.pools[name]

    def _measure(self, status: PoolStatus, inv, usable: list[int]) -> None:
        osts = [o for o in inv.osts if o.index in set(usable)]
        status.osts = len(osts)
        status.max_fill, status.mean_fill, status.spread = fills(osts)

    def _goal(self, status: PoolStatus) -> bool:
        s = self.settings
        return status.max_fill <= s.low_water + 1e-9 and status.spread <= s.target + 1e-9

    def _trigger(self, status: PoolStatus) -> str | None:
        s = self.settings
        if status.max_fill > s.high_water:
            return f"an OST is {status.max_fill:.1%} full, above the high-water mark {s.high_water:.0%}"
        if status.spread > s.target + s.hysteresis:
            return f"fill spread {status.spread:.3f} above target {s.target} + hysteresis {s.hysteresis}"
        return None

    def _save(self) -> None:
        if self.status:
            self.status.write()

    # -- planning -----------------------------------------------------------------------------------------
    def plan(self, inv, name: str | None, usable: list[int]):
        """The pool's plan: the widest spread target whose band tops out under low water (the target alone
        when the pool is too full for that), narrowed once if the plan's fullest OST still ends above it."""
        from iez.rebalance.plan import target_under
        from iez.rebalance.pools import build

        s = self.settings
        osts = [o for o in inv.osts if o.index in set(usable)]
        if name is None and inv.pools:  # the OSTs in no pool: a domain of their own
            inv = replace(inv, osts=[o for o in inv.osts if not o.pools], pools={})
        target = target_under(osts, s.low_water, s.target)
        plan = build(inv, target or s.target, name, improve_s=IMPROVE_S)
        if target is not None:
            _, mean, _ = fills(osts)
            after = max((plan.after[o.index] / o.capacity for o in osts), default=0.0)
            narrower = min(target, s.low_water - mean)
            if after > s.low_water + 1e-9 and 0.002 < narrower < target:
                plan = build(inv, narrower, name, improve_s=IMPROVE_S)
        return plan, target is None

    # -- executing ------------------------------------------------------------------------------------------
    def _hold(self, members: list[int], touched: set[int]) -> str | None:
        """Why moves on ``touched`` in a pool of ``members`` must wait now (None: they need not)."""
        reason = liveview.degraded(self.view.states(), members)
        if reason is None and touched:
            reason = liveview.busy(self.view.jobs_rates(self.own), touched, self.settings.busy_mib_s)
        return reason

    def execute(self, plan_path: Path, status: PoolStatus, members: list[int], step: Step) -> str | None:
        """Run the plan at ``plan_path`` through apply and its journal; the reason when it paused, else None
        (the plan is over: its files and journal are kept as ``last-pass.*``)."""
        from iez.rebalance.apply import apply

        doc = json.loads(plan_path.read_text())
        moves = {m["file"]: m for m in doc["moves"]}
        journal = self.state_dir / JOURNAL
        tail = JournalTail(journal)
        settled: dict[str, str] = {}
        done_bytes = 0

        def account(records: list[dict], start: float, now: float, counted: bool) -> None:
            nonlocal done_bytes
            for record in records:
                m = moves.get(record["file"])
                if m is None or record["event"] not in ("done", "skipped") or record["file"] in settled:
                    continue
                settled[record["file"]] = record["event"]
                if record["event"] == "done":
                    done_bytes += m["bytes"]
                    if counted:
                        self.own.add(start, now, m)
                        step.bytes_moved += m["bytes"]
                        step.files_moved += 1
                        status.pass_bytes_moved += m["bytes"]
                        status.bytes_moved_total += m["bytes"]
                        status.files_moved_total += 1
                elif counted:
                    step.files_skipped += 1

        account(tail.new(), 0.0, 0.0, counted=False)  # what earlier runs of this plan did
        total = sum(m["bytes"] for m in moves.values())

        def left() -> int:
            return total - sum(moves[f]["bytes"] for f in settled)

        def touched() -> set[int]:
            return {j for f, m in moves.items() if f not in settled for j in (*m.get("from", ()), *m["to"])}

        status.bytes_left = left()
        reason = self._hold(members, touched())
        if reason:
            status.state, status.reason, status.eta_s = "paused", reason, None
            self._save()
            return reason
        status.state, status.reason = "moving", ""
        self._save()
        began = last = last_check = last_save = time.time()
        moved_here = 0

        def progress(text: str) -> None:
            nonlocal last, last_check, last_save, moved_here
            now = time.time()
            before = step.bytes_moved
            account(tail.new(), last, now, counted=True)
            moved_here += step.bytes_moved - before
            last = now
            status.bytes_left = left()
            status.eta_s = status.bytes_left / (moved_here / (now - began)) if moved_here else None
            self.log(text)
            if now - last_save >= 0.5:
                last_save = now
                self._save()
            if self.stop.is_set():
                raise _Pause("stopping")
            if now - last_check >= CHECK_S:
                last_check = now
                why = self._hold(members, touched())
                if why:
                    raise _Pause(why)

        try:
            apply(str(plan_path), str(journal), progress)
        except _Pause as why:
            account(tail.new(), last, time.time(), counted=True)
            status.bytes_left = left()
            status.state, status.reason, status.eta_s = "paused", str(why), None
            self._save()
            return str(why)
        account(tail.new(), last, time.time(), counted=True)
        os.replace(journal, self.state_dir / "last-pass.journal")
        os.replace(plan_path, self.state_dir / "last-pass.json")
        status.bytes_left, status.eta_s = 0, None
        if isinstance(self.view, liveview.DbView):  # the DB's fills lag the moves by a report
            self.view.wait_fresh(time.time(), self.stop)
        return None

    def _write_plan(self, doc: dict) -> Path:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / JOURNAL).unlink(missing_ok=True)  # a journal is its plan's: none may outlive it
        path = self.state_dir / PLAN
        tmp = path.with_name(PLAN + ".tmp")
        with open(tmp, "w") as handle:
            json.dump(doc, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fd = os.open(self.state_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return path

    # -- one look at every pool ----------------------------------------------------------------------------
    def step(self) -> Step:
        step = Step()
        pending = self.state_dir / PLAN
        if pending.exists() and not self.dry_run:
            doc = json.loads(pending.read_text())
            name = doc.get("balance", {}).get("pool")
            status = self._pool(name)
            status.in_pass = True
            inv = self.inventory()
            members = next((m for n, _, m in self.domains(inv) if n == name), [])
            self.log(f"pool {name or '(all)'}: finishing the interrupted plan ({len(doc['moves'])} moves)")
            reason = self.execute(pending, status, members, step)
            if reason:
                return self._finish(step, "paused", reason)
        inv = self.inventory()
        before = {}
        for name, usable, members in self.domains(inv):
            status = self._pool(name)
            self._measure(status, inv, usable)
            before[name] = status.spread
            reason = self._pool_pass(inv, name, usable, members, status, step)
            if reason:
                step.pools = [p.to_json() for p in self.pools.values()]
                return self._finish(step, "paused", reason, before)
            if step.bytes_moved:
                inv = self.inventory()
        return self._finish(step, "moved" if step.bytes_moved or (self.dry_run and step.moves) else "idle", "",
                            before)

    def _pool_pass(self, inv, name, usable, members, status: PoolStatus, step: Step) -> str | None:
        """Balance one pool as far as its pass goes; the pause reason, if it had to stop."""
        s = self.settings
        label = name or "(all)"
        if not status.in_pass:
            why = self._trigger(status)
            if why is None:
                status.state = "idle"
                status.reason = (f"balanced: max fill {status.max_fill:.1%} (high water {s.high_water:.0%}), "
                                 f"spread {status.spread:.3f} (start above {s.target + s.hysteresis:.3f})")
                status.bytes_left, status.eta_s = 0, None
                return None
            self.log(f"pool {label}: pass starts: {why}")
            if not self.dry_run:
                status.in_pass, status.pass_bytes_moved = True, 0
                status.passes += 1
        for _ in range(PLANS_PER_PASS):
            if self._goal(status):
                break
            reason = liveview.degraded(self.view.states(), members)
            if reason:
                status.state, status.reason = "paused", reason
                self._save()
                return reason
            plan, too_full = self.plan(inv, name, usable)
            doc = plan.to_json()
            if not doc["moves"]:
                status.reason = ("nothing to move: " + (f"mean fill {status.mean_fill:.1%} is above the low-water "
                                 f"mark {s.low_water:.0%} (add OSTs or remove files)" if too_full else
                                 "no file fits the plan"))
                break
            if self.dry_run:
                step.moves += doc["moves"]
                step.bytes_moved += doc["bytes_moved"]
                step.files_moved += doc["files_moved"]
                status.state, status.bytes_left = "idle", doc["bytes_moved"]
                status.reason = f"dry run: would move {doc['files_moved']} files, {doc['bytes_moved']} bytes"
                status.spread = doc["spread_after"]
                return None
            doc["balance"] = {"pool": name, "created": time.time(), "low_water": s.low_water, "target": s.target}
            self.log(f"pool {label}: moving {doc['files_moved']} files, {doc['bytes_moved']} bytes "
                     f"(spread {doc['spread_before']:.3f} -> {doc['spread_after']:.3f})")
            moved = step.bytes_moved
            reason = self.execute(self._write_plan(doc), status, members, step)
            if reason:
                return reason
            inv = self.inventory()
            self._measure(status, inv, usable)
            if step.bytes_moved == moved:
                status.reason = "nothing moved: every planned file was skipped (open, changed or gone)"
                break
        else:
            status.reason = f"stopped after {PLANS_PER_PASS} plans"
        if self._goal(status):
            status.reason = (f"done: max fill {status.max_fill:.1%} <= low water {s.low_water:.0%}, "
                             f"spread {status.spread:.3f} <= target {s.target}")
        self.log(f"pool {label}: pass over: {status.reason}")
        status.state, status.in_pass, status.bytes_left, status.eta_s = "idle", False, 0, None
        self._save()
        return None

    def _finish(self, step: Step, action: str, reason: str, before: dict | None = None) -> Step:
        step.action, step.reason = action, reason
        if not self.dry_run and action != "paused":
            inv = self.inventory() if step.bytes_moved else None
            if inv is not None:
                for name, usable, _ in self.domains(inv):
                    self._measure(self._pool(name), inv, usable)
        spreads = {p.pool: p.spread for p in self.pools.values()}
        step.spread_before = max((before or spreads).values(), default=0.0)
        step.spread_after = max(spreads.values(), default=0.0)
        step.pools = [p.to_json() for p in self.pools.values()]
        self.last_action = action
        self._save()
        return step

    # -- the service ---------------------------------------------------------------------------------------
    def serve(self) -> None:
        """Look at every pool every ``interval`` seconds (a paused pool: every few seconds) until :attr:`stop`."""
        while not self.stop.is_set():
            try:
                step = self.step()
                self.error = ""
            except Exception as err:  # noqa: BLE001 - a failed look (DB away, a tree unreadable) is retried, said
                self.error = f"{type(err).__name__}: {err}"
                self.log(f"this look failed ({self.error}); again in {min(self.settings.interval, 30.0):g} s")
                self._save()
                self.stop.wait(min(self.settings.interval, 30.0))
                continue
            if self.stop.is_set():
                break
            if step.action == "paused":
                wait = min(self.settings.interval, 5.0)
            elif any(p.in_pass for p in self.pools.values()):
                wait = 0.0
            else:
                wait = self.settings.interval
            self.stop.wait(wait)
        self.last_action = "stopped"
        self._save()

    def close(self) -> None:
        if isinstance(self.view, liveview.DbView):
            self.view.close()
