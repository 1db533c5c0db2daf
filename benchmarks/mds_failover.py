"""kill -9 of the active MDS service, again and again, while requests arrive (issue 25, item 2).

    PYTHONPATH=. python benchmarks/mds_failover.py [--kills 10] [--interval 2] [--db URL] [--seed 1]

Two real ``iez mds --standby`` processes on one interaction DB (a fresh SQLite file
by default; ``--db mysql://root@127.0.0.1:3306/iez_test_ha`` for MariaDB, emptied
first), one publisher doing what an agent with two endpoints does
(:class:`agents.publisher.Publishers`: 3 OSSs x 5 OSTs reporting every interval to
both services), and a writer thread storing a new application's requests every
0.15 s for the whole run. ``--kills`` times, at a random moment (0.3 to 2.5 s after
the last takeover, so inside allocation passes as often as between them), the
active service is killed with SIGKILL and restarted at once as the standby on the
same endpoint (the agents reconnect to it). Then the writer stops and the run waits
for every request to be allocated. Printed: each takeover time (the kill to the
lease claimed by the other service, and to its status saying active), in seconds and
in report intervals, median and max; requests stored, allocated once, allocated twice,
never allocated. Exit status 1 when a request was not allocated exactly once.

The services run on one node, where a standby sees at once that the holder's
process is gone (:meth:`iez.mds.lease.Holder.died_here`) and claims at its next
poll; a standby on another node waits for the lease to go stale: 3 lease intervals
(``--lease-interval``, by default half the report interval), i.e. 1.5 report intervals,
plus one poll; ``--cross-node`` measures that path (each service in a PID namespace of
its own). Extra options (e.g. ``--lease-interval 0.5``) go to both services.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GiB_KB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(oss: str, seq: int, first_ost: int, interval: float, count: int = 5) -> bytes:
    """One agent message (schema iez.oss-stats v1) for OSTs first_ost.. of ``oss``, 80 GiB free of 100."""
    return json.dumps({"schema": "iez.oss-stats", "version": 1, "oss_id": oss, "seq": seq, "time": time.time(),
                       "cpu_pct": 5.0, "mem_pct": 10.0, "interval_s": interval,
                       "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 100 * GiB_KB,
                                 "kbytes_avail": 80 * GiB_KB, "read_bytes": 0, "write_bytes": 0}
                                for i in range(first_ost, first_ost + count)]}).encode()


class Service:
    """One ``iez mds --standby`` on a fixed endpoint; restarted on the same one after a kill."""

    def __init__(self, name: str, db: str, work: Path, interval: float, extra: list[str], prefix: list[str]):
        self.name, self.db, self.work, self.interval, self.extra, self.prefix = name, db, work, interval, extra, prefix
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.status_file = work / f"{name}-status.json"
        self.log = work / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.status_file.unlink(missing_ok=True)
        self.starts += 1
        self.listening: float | None = None  # when it was seen standing by, bound (the drill's clock)
        env = {**os.environ, "IEZ_STATE_DIR": str(self.work / f"state-{self.name}")}
        with self.log.open("a") as out:
            out.write(f"--- start {self.starts}\n")
            out.flush()
            self.proc = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "iez.cli", "mds", "--db", self.db, "--bind", self.endpoint, "--standby",
                 "--interval", str(self.interval), "--cpu-max", "100", "--mem-max", "100", "--insecure",
                 "--maps-dir", "none", "--status-file", str(self.status_file), *self.extra],
                env=env, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def this_start(self) -> str:
        return self.text().rsplit(f"--- start {self.starts}\n", 1)[-1]

    def status(self) -> dict | None:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None

    def active(self) -> bool:
        status = self.status()
        return bool(status and status.get("endpoint") == self.endpoint and status.get("role") == "active")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            target = self.proc.pid
            if self.prefix:  # unshare does not pass SIGTERM on: send it to the service itself
                try:
                    with open(f"/proc/{target}/task/{target}/children") as f:
                        target = int(f.read().split()[0])
                except (OSError, IndexError, ValueError):
                    pass
            os.kill(target, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for(check, timeout: float, what: str, services=()) -> float:
    """Poll ``check`` every 20 ms until true; the time it took. AssertionError (with the logs' tails) after
    ``timeout`` seconds (generous: the machine may be loaded)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            tails = "\n".join(f"--- {s.name}:\n{s.text()[-3000:]}" for s in services)
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{tails}")
        time.sleep(0.02)
    return time.monotonic() - started


def lease_holder(engine) -> tuple[str | None, int]:
    """The endpoint of the service holding the lease (None: no one), and the lease's generation."""
    from iez.mds.lease import read_holder

    holder = read_holder(engine)
    return (holder.endpoint if holder is not None and holder.held else None), (holder.generation if holder else 0)


def drill(db: str, work: Path, kills: int, interval: float = 2.0, seed: int = 1, extra: list[str] | None = None,
          say=print, cross_node: bool = False) -> dict:
    """The run described in the module's docstring on the migrated, empty DB ``db``; its figures."""
    from agents.publisher import Publishers
    from iez.config import database_url
    from iez.db.engine import make_engine, write_session
    from iez.db.requests import RequestIn, upsert_requests

    rng = random.Random(seed)
    engine = make_engine(database_url(db))
    # cross_node: each service in a PID namespace of its own, as on another node: the heir cannot see that the
    # holder's process is gone and waits for the lease to go stale (unshare --kill-child: SIGKILL reaches it)
    prefix = ["unshare", "--pid", "--fork", "--kill-child"] if cross_node else []
    services = [Service(name, db, work, interval, extra or [], prefix) for name in ("mds-a", "mds-b")]
    stop, stop_agents = threading.Event(), threading.Event()  # the writer stops first, the agents last
    stored: list[str] = []
    errors: list[str] = []

    def agents() -> None:  # 3 OSSs, each message to both services, every interval (as iez-agent --mds A --mds B)
        pub = Publishers([s.endpoint for s in services], sndhwm=8, log=lambda m: None)
        try:
            seq = 0
            while not stop_agents.is_set():
                seq += 1
                for k in range(3):
                    pub.send(report(f"oss{k}", seq, 5 * k, interval))
                pub.wait(interval, stop_agents.is_set)
        finally:
            pub.close()

    def writer() -> None:  # a new application with 1-4 files every 0.15 s
        n = 0
        while not stop.is_set():
            n += 1
            app = f"app{n:05d}"
            paths = [f"/lustre/{app}/out.{i}" for i in range(rng.randint(1, 4))]
            try:
                with write_session(engine) as s:
                    upsert_requests(s, app, [RequestIn(p, 1 << 30, 2, rank=i) for i, p in enumerate(paths)])
                stored.extend(paths)
            except Exception as err:  # the DB busy under the kills: this app is not stored, say so
                errors.append(str(err).splitlines()[0][:200])
            stop.wait(0.15)

    threads = [threading.Thread(target=agents, daemon=True), threading.Thread(target=writer, daemon=True)]
    takeovers: list[dict] = []
    try:
        a, b = services
        a.start()
        wait_for(a.active, 120, "the first service to be active", services)
        b.start()
        wait_for(lambda: "standby: ingesting" in b.this_start(), 120, "the second service to stand by", services)
        threads[0].start()
        wait_for(lambda: (a.status() or {}).get("osses", {}).get("fresh") and len(a.status()["osses"]["fresh"]) == 3,
                 120, "the agents' reports", services)
        threads[1].start()
        for k in range(kills):
            time.sleep(rng.uniform(0.3, 2.5))
            holder, generation = lease_holder(engine)
            victim = next(s for s in services if s.alive() and s.endpoint == holder)
            heir = next(s for s in services if s is not victim)
            if heir.listening is None:
                wait_for(lambda: "standby: ingesting" in heir.this_start(), 120, "the heir to stand by", services)
                heir.listening = time.monotonic()
            # a standby that has listened for 2 report intervals (not a double fault right after its restart)
            time.sleep(max(0.0, heir.listening + 2 * interval - time.monotonic()))
            pending = len(stored)
            victim.proc.kill()  # SIGKILL: no release, no last store
            victim.proc.wait()
            claimed = wait_for(lambda: lease_holder(engine) == (heir.endpoint, generation + 1), 60,
                               f"takeover {k + 1}", services)
            active = wait_for(heir.active, 60, f"takeover {k + 1}: the heir's status", services) + claimed
            # the heir did not start from nothing: it had every OSS fresh in its view when it took over
            said = heir.this_start().split("active now (lease generation", 1)[-1][:300]
            warm = "3 OSS(s) fresh" in said and "; 0 report(s) taken in" not in said
            takeovers.append({"kill": k + 1, "claimed_s": round(claimed, 3), "active_s": round(active, 3),
                              "claimed_intervals": round(claimed / interval, 3),
                              "active_intervals": round(active / interval, 3), "warm_view": warm,
                              "requests_stored_before": pending, **({} if warm else {"said": said[:240]})})
            say(f"kill {k + 1}: {victim.name} killed; {heir.name} claimed the lease after "
                f"{claimed:.2f} s ({claimed / interval:.2f} intervals), active after {active:.2f} s; warm view: {warm}")
            victim.start()  # the killed one comes back as the standby, on the same endpoint
            wait_for(lambda: "standby: ingesting" in victim.this_start(), 120, "the restarted one to stand by",
                     services)
            victim.listening = time.monotonic()
        stop.set()
        threads[1].join()
        # every request stored is allocated, by whichever service holds the lease now
        from sqlalchemy import func, select

        from iez.db.models import AllocationRow, WriteRequestRow

        def counts() -> dict[str, int]:
            with engine.connect() as conn:
                rows = conn.execute(select(WriteRequestRow.path, func.count(AllocationRow.id))
                                    .join(AllocationRow, AllocationRow.request_id == WriteRequestRow.id, isouter=True)
                                    .group_by(WriteRequestRow.id, WriteRequestRow.path)).all()
            return {path: n for path, n in rows}

        wait_for(lambda: all(n >= 1 for n in counts().values()) and len(counts()) >= len(stored), 300,
                 "every request to be allocated", services)
        final = counts()
    finally:
        stop.set()
        stop_agents.set()
        for t in threads:
            if t.is_alive():
                t.join(timeout=30)
        for s in services:
            s.stop()
        engine.dispose()
    claimed = [t["claimed_intervals"] for t in takeovers]
    active = [t["active_intervals"] for t in takeovers]
    result = {
        "db": "sqlite" if "://" not in db else db.split("://", 1)[0], "interval_s": interval, "kills": kills,
        "cross_node": cross_node,
        "takeovers": takeovers,
        "claimed_median_intervals": round(statistics.median(claimed), 3) if claimed else None,
        "claimed_max_intervals": round(max(claimed), 3) if claimed else None,
        "active_median_intervals": round(statistics.median(active), 3) if active else None,
        "active_max_intervals": round(max(active), 3) if active else None,
        "warm_views": sum(t["warm_view"] for t in takeovers),
        "requests": len(stored), "allocated_once": sum(1 for p in stored if final.get(p) == 1),
        "allocated_twice_or_more": sum(1 for p in stored if final.get(p, 0) > 1),
        "never_allocated": sum(1 for p in stored if final.get(p, 0) == 0),
        "unknown_rows": len(set(final) - set(stored)), "writer_errors": len(errors),
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--interval", type=float, default=2.0, help="the agents' report interval, s (default 2)")
    parser.add_argument("--db", help="a MariaDB URL (emptied and migrated first); default: a fresh SQLite file")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cross-node", action="store_true",
                        help="run each service in a PID namespace of its own (unshare, as root): the standby cannot "
                             "see the holder's death and takes over when the lease goes stale, as on another node")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object at the end")
    args, extra = parser.parse_known_args()
    sys.path.insert(0, str(ROOT))
    from iez.config import database_url
    from iez.db.engine import make_engine
    from iez.db.schema import ensure_database, upgrade

    with tempfile.TemporaryDirectory(prefix="iez-failover-") as tmp:
        work = Path(tmp)
        db = args.db or str(work / "failover.db")
        if args.db:
            from sqlalchemy import text

            ensure_database(database_url(db))
            engine = make_engine(database_url(db))
            with engine.begin() as conn:
                names = [r[0] for r in conn.execute(text("SHOW TABLES"))]
                conn.execute(text("SET FOREIGN_KEY_CHECKS=0"))
                for name in names:
                    conn.execute(text(f"DROP TABLE `{name}`"))
            engine.dispose()
        engine = make_engine(database_url(db))
        upgrade(engine)
        engine.dispose()
        result = drill(db, work, args.kills, args.interval, args.seed, extra, cross_node=args.cross_node)
    print(f"{result['kills']} kill -9 of the active MDS service ({result['db']}, "
          f"{'services in separate PID namespaces (takeover on staleness), ' if result['cross_node'] else ''}report interval "
          f"{result['interval_s']:g} s): lease claimed by the standby after median {result['claimed_median_intervals']} "
          f"/ max {result['claimed_max_intervals']} intervals; its status active after median "
          f"{result['active_median_intervals']} / max {result['active_max_intervals']} intervals; "
          f"warm view at {result['warm_views']} of {result['kills']} takeovers")
    print(f"requests: {result['requests']} stored, {result['allocated_once']} allocated once, "
          f"{result['allocated_twice_or_more']} more than once, {result['never_allocated']} never "
          f"(writer errors: {result['writer_errors']})")
    if args.json:
        print(json.dumps(result))
    ok = result["allocated_once"] == result["requests"] and not result["unknown_rows"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
