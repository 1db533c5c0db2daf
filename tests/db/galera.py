"""A real MariaDB Galera cluster on loopback for the tests: N ``mariadbd`` processes, one data directory each.

:func:`galera_cluster` starts them (the first with ``--wsrep-new-cluster``, the others joining it by
state transfer with ``rsync``), waits until every node reports ``wsrep_cluster_size`` = N and
``wsrep_ready`` = ON (a deadline that says which node it waited for and what it last saw), and always
stops them by pid, start failures included, removing their data. Debian's ``galera-4`` (the provider),
``mariadb-server`` and ``rsync`` (the state transfer) must be installed (``scripts/test`` installs them).

Each node listens on 127.0.0.1 ports of its own (SQL, group communication, incremental and full state
transfer); ``root`` connects over TCP without a password. Run as root, ``mariadbd`` gets ``--user=root``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
MARIADBD = "/usr/sbin/mariadbd"
#: How long a whole cluster may take to form (node starts and state transfers on a busy 2-core machine).
START_DEADLINE_S = 120.0


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (held open together while chosen, so never one twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Node:
    name: str
    datadir: Path
    sql_port: int
    gcomm_port: int
    ist_port: int
    sst_port: int
    proc: subprocess.Popen | None = None
    log: Path | None = None

    @property
    def socket(self) -> Path:
        return self.datadir.parent / f"{self.name}.sock"

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.sql_port}/{database}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class GaleraCluster:
    nodes: list[Node]
    root: Path
    started: list[Node] = field(default_factory=list)

    def urls(self, database: str) -> list[str]:
        return [n.url(database) for n in self.nodes]

    def sql(self, node: Node, statement: str) -> list[tuple]:
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", port=node.sql_port, user="root", connect_timeout=5)
        try:
            conn.autocommit(True)
            cur = conn.cursor()
            cur.execute(statement)
            return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def status(self, node: Node, variable: str) -> str | None:
        rows = self.sql(node, f"SHOW GLOBAL STATUS LIKE '{variable}'")
        return rows[0][1] if rows else None

    def create_database(self, name: str) -> None:
        """A fresh database ``name`` on every node (DDL replicates by total order isolation)."""
        self.sql(self.nodes[0], f"DROP DATABASE IF EXISTS `{name}`")
        self.sql(self.nodes[0], f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        self.wait_synced(f"database {name} on every node",
                         lambda n: bool(self.sql(n, f"SHOW DATABASES LIKE '{name}'")))

    def wait_synced(self, what: str, check, deadline_s: float = 30.0) -> None:
        deadline = time.monotonic() + deadline_s
        for node in self.nodes:
            while not check(node):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {deadline_s:g} s for {what}: not on {node.name}")
                time.sleep(0.05)

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self, node: Node, addresses: str, first: bool) -> None:
        node.datadir.mkdir(parents=True, exist_ok=True)
        if not first and os.geteuid() == 0:
            # the joiner's rsync daemon, started by root, writes as 'nobody' (rsyncd's default uid and gid):
            # the data directory is given to it (mariadbd, as root, reads and writes whatever it leaves)
            import pwd

            nobody = pwd.getpwnam("nobody")
            os.chown(node.datadir, nobody.pw_uid, nobody.pw_gid)
        if first:
            subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={node.datadir}", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           check=True, capture_output=True, timeout=120)
        node.log = node.datadir.parent / f"{node.name}.log"
        provider_options = (f"gmcast.listen_addr=tcp://127.0.0.1:{node.gcomm_port};"
                            f"ist.recv_addr=127.0.0.1:{node.ist_port};gcache.size=16M;"
                            "evs.inactive_check_period=PT0.5S;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S")
        args = [MARIADBD, "--no-defaults", f"--datadir={node.datadir}", f"--socket={node.socket}",
                f"--port={node.sql_port}", "--bind-address=127.0.0.1", f"--pid-file={node.datadir.parent / node.name}.pid",
                f"--log-error={node.log}", "--skip-name-resolve",
                "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}", f"--wsrep-cluster-address=gcomm://{addresses}",
                f"--wsrep-node-address=127.0.0.1:{node.gcomm_port}", f"--wsrep-node-name={node.name}",
                f"--wsrep-node-incoming-address=127.0.0.1:{node.sql_port}",
                f"--wsrep-sst-receive-address=127.0.0.1:{node.sst_port}", "--wsrep-sst-method=rsync",
                f"--wsrep-provider-options={provider_options}", "--wsrep-cluster-name=iez-test",
                "--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
                "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=0", "--max-connections=200",
                "--performance-schema=OFF"]
        if first:
            args.append("--wsrep-new-cluster")
        if os.geteuid() == 0:
            args.append("--user=root")
        with open(os.devnull, "rb") as devnull:
            node.proc = subprocess.Popen(args, stdin=devnull, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
        self.started.append(node)

    def _wait_ready(self, node: Node, size: int, deadline: float) -> None:
        seen = "no answer"
        while True:
            if node.proc.poll() is not None:
                raise RuntimeError(f"Galera node {node.name} exited with {node.proc.returncode} while starting; "
                                   f"its log ends:\n{node.log_tail()}")
            try:
                cluster_size = self.status(node, "wsrep_cluster_size")
                ready = self.status(node, "wsrep_ready")
                state = self.status(node, "wsrep_local_state_comment")
                seen = f"wsrep_cluster_size={cluster_size}, wsrep_ready={ready}, state={state}"
                if cluster_size == str(size) and ready == "ON" and state == "Synced":
                    return
            except Exception as err:  # not listening yet
                seen = f"no answer on port {node.sql_port} ({str(err).splitlines()[0][:120]})"
            if time.monotonic() > deadline:
                raise TimeoutError(f"Galera node {node.name} not ready (wanted wsrep_cluster_size={size}, "
                                   f"wsrep_ready=ON, Synced) within {START_DEADLINE_S:g} s; last seen: {seen}; "
                                   f"its log ends:\n{node.log_tail()}")
            time.sleep(0.1)

    def start(self) -> None:
        addresses = ",".join(f"127.0.0.1:{n.gcomm_port}" for n in self.nodes)
        deadline = time.monotonic() + START_DEADLINE_S
        for i, node in enumerate(self.nodes):
            # one joiner at a time: each state transfer is from a donor that is Synced
            self._start(node, addresses, first=i == 0)
            self._wait_ready(node, i + 1, deadline)
        for node in self.nodes:
            self._wait_ready(node, len(self.nodes), deadline)

    def stop(self) -> None:
        """Stop every node started, by pid (SIGTERM, then SIGKILL after 30 s), and remove the data."""
        for node in reversed(self.started):
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)
                node.proc.terminate()
        for node in reversed(self.started):
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(timeout=30)
        self.started.clear()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def galera_cluster(size: int = 3) -> Iterator[GaleraCluster]:
    """A running ``size``-node Galera cluster, stopped and removed on exit (also when it failed to start)."""
    root = Path(tempfile.mkdtemp(prefix="iez-galera-"))
    root.chmod(0o755)  # see Node's data directory: the state transfer's rsync daemon runs as 'nobody'
    ports = free_ports(4 * size)
    nodes = [Node(f"node{i + 1}", root / f"node{i + 1}", *ports[4 * i:4 * i + 4]) for i in range(size)]
    cluster = GaleraCluster(nodes, root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


# -- the allocation race, on any iez database (the tests and benchmarks/galera_lock.py) ------------------------

GiB_KB = 1 << 20  # KiB in a GiB


def iez_database(cluster: GaleraCluster, name: str = "iez") -> list[str]:
    """A fresh iez database ``name`` at the current schema on the cluster; its URL on each node (each node has
    applied the schema before this returns)."""
    from iez.config import database_url
    from iez.db.engine import make_engine
    from iez.db.schema import upgrade

    cluster.create_database(name)
    engine = make_engine(database_url(cluster.nodes[0].url(name)))
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    cluster.wait_synced(f"the iez schema of {name}", lambda n: bool(
        cluster.sql(n, f"SET STATEMENT wsrep_sync_wait=15 FOR SELECT id FROM `{name}`.iez_lock")))
    return cluster.urls(name)


@dataclass
class Race:
    """One run of ``writers`` allocators at once, each placing one file of its own application, on one OST."""

    placed: int  # files placed
    reserved_bytes: int  # bytes reserved on the OST afterwards
    free_bytes: int  # what the OST had free
    retries: int  # writing transactions run again (refused by Galera, deadlocks)
    errors: list[str]  # what any allocator raised (a 503 would be a DatabaseUnavailable here)
    latencies_s: list[float]  # per allocator, its place_app call (retries included)

    @property
    def over_reserved_bytes(self) -> int:
        return max(0, self.reserved_bytes - self.free_bytes)


class AllocationRace:
    """Allocators on the real iez allocation path (:func:`iez.placement.place_app`, policy iez, fill cap 1):
    one OST with ``free_bytes`` free, allocator ``i`` places one ``file_bytes`` file of application ``app<i>``
    through node ``i % len(urls)``. Each run starts the allocators at one instant (a barrier) and then
    reads what was reserved (causally)."""

    def __init__(self, urls: list[str], writers: int, free_bytes: int, file_bytes: int):
        from iez.config import database_url
        from iez.db.engine import make_engine

        self.writers, self.free_bytes, self.file_bytes = writers, free_bytes, file_bytes
        self.engines = [make_engine(database_url(u)) for u in urls]
        self._setup()

    def _setup(self) -> None:
        from iez.db.engine import write_transaction
        from iez.db.requests import RequestIn, upsert_requests
        from iez.db.stats import OssReport, OstReport, record
        from iez.db.models import utcnow

        free_kb = self.free_bytes // 1024

        def body(session) -> None:
            record(session, OssReport("oss0", 1, utcnow(), 10.0, 10.0,
                                      [OstReport("fs-OST0000", 0, 2 * free_kb, free_kb)]))
            for i in range(self.writers):
                upsert_requests(session, f"app{i}", [RequestIn(f"/lustre/app{i}/out", self.file_bytes, 1, rank=0)])

        write_transaction(self.engines[0], body)

    def reset(self) -> None:
        """Every request pending again, no reservation: the OST has ``free_bytes`` free."""
        from sqlalchemy import delete

        from iez.db.engine import write_transaction
        from iez.db.models import AllocationRow, Reservation

        def body(session) -> None:
            session.execute(delete(Reservation))
            session.execute(delete(AllocationRow))

        write_transaction(self.engines[0], body)

    def reserved(self) -> int:
        from sqlalchemy import text

        with self.engines[0].connect() as conn:
            return int(conn.execute(text("SET STATEMENT wsrep_sync_wait=15 FOR "
                                         "SELECT COALESCE(SUM(bytes), 0) FROM reservations")).scalar_one())

    def run(self) -> Race:
        import threading

        from iez.db import engine as db_engine
        from iez.placement import PlacementSettings, place_app

        self.reset()
        settings = PlacementSettings(policy="iez", fill_cap=1.0)
        barrier = threading.Barrier(self.writers)
        placed, errors, latencies = [0] * self.writers, [], [0.0] * self.writers
        before = db_engine.write_retries.value

        def allocate(i: int) -> None:
            barrier.wait()
            started = time.perf_counter()
            try:
                done = place_app(self.engines[i % len(self.engines)], f"app{i}", settings, stale_s=3600,
                                 reservation_ttl_s=3600)
                placed[i] = len(done.placed)
            except Exception as err:  # noqa: BLE001 - reported, and the tests assert there is none
                errors.append(f"app{i}: {type(err).__name__}: {str(err).splitlines()[0]}")
            latencies[i] = time.perf_counter() - started

        threads = [threading.Thread(target=allocate, args=(i,)) for i in range(self.writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return Race(sum(placed), self.reserved(), self.free_bytes, db_engine.write_retries.value - before,
                    errors, latencies)

    def close(self) -> None:
        for engine in self.engines:
            engine.dispose()
