"""The demo's steps: trace a first run, learn (AIPA), let the MDS allocate, place a second
run, and compare its OST usage with Lustre's round-robin on the same cluster.

OSTCost follows the paper (eq. 7): an OST's utilisation is the bytes the run
stored on it over the space it had available when the run started, and
OSTCost is the largest utilisation over the mean, over all OSTs of the pool.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import timezone
from pathlib import Path

from sqlalchemy import delete, select

from iez.config import database_url
from iez.db.allocations import lookup, pin
from iez.db.engine import make_engine, read, write_session
from iez.db.models import Application, OstRow, WriteRequestRow, utcnow
from iez.db.schema import upgrade
from iez.db.stats import usable_cluster
from iez.demo.services import Services
from iez.demo.writers import Writer, measure
from iez.layout.usage import usage
from iez.allocate.lustre_qos import QosPolicy
from iez.model import WriteRequest, io_time, raid0_bytes

#: In the measured runs each byte written stands for this many (IEZ_EMULATE_SCALE): 6.4 GB of logical
#: output costs 200 MB of real writes, and the emulated cluster still serves the full sizes.
MEASURE_SCALE = 32


class StepFailed(RuntimeError):
    pass


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class PolicyRun:
    policy: str
    ost_cost: float
    max_util: float
    mean_util: float
    util: dict[int, float] = field(default_factory=dict)
    makespan_s: float = 0.0  # modelled I/O time of the job under this placement
    emulated_modelled_s: float | None = None  # the same on the emulated cluster's own bandwidths, no load
    emulated_measured_s: float | None = None  # wall-clock I/O time of the job through the emulated bandwidth
    measured: bool = True  # OSTCost from the files a real run wrote (else from the layouts alone)


def find_library(build: bool = True) -> Path:
    """libiez.so: $IEZ_PRELOAD_LIB, else placement_lib/ in the working directory or beside the package (built if needed)."""
    given = os.environ.get("IEZ_PRELOAD_LIB")
    if given:
        if not Path(given).is_file():
            raise StepFailed(f"IEZ_PRELOAD_LIB={given} does not exist")
        return Path(given)
    for src in (Path.cwd() / "placement_lib", Path(__file__).resolve().parents[2] / "placement_lib"):
        if (src / "Makefile").is_file():
            lib = src / "build" / "libiez.so"
            if build:
                done = subprocess.run(["make", "-s", "-C", str(src)], capture_output=True, text=True)
                if done.returncode != 0:
                    raise StepFailed(f"make -C {src} failed: {done.stderr.strip()[-300:]}")
            if lib.is_file():
                return lib
    raise StepFailed("placement_lib/ not found: run iez demo from the iez source tree or set IEZ_PRELOAD_LIB")


class Demo:
    def __init__(self, work: Path, ranks: int = 16, app: str = "hacc-io", prefer_mpi: bool = True,
                 stripe_count: int = 8, log=print):
        self.work, self.ranks, self.app, self.prefer_mpi, self.stripe_count = work, ranks, app, prefer_mpi, stripe_count
        self.log = log
        self.steps: list[Step] = []
        self.runs: dict[str, PolicyRun] = {}
        self.facts: dict = {}
        self.db = str(work / "iez.db")
        self.services: Services | None = None

    # -- bookkeeping ----------------------------------------------------------------
    def step(self, name: str, action):
        start = time.monotonic()
        try:
            detail = action() or ""
        except KeyboardInterrupt:
            self.steps.append(Step(name, False, round(time.monotonic() - start, 2), "interrupted"))
            raise
        except Exception as err:
            message = str(err) if isinstance(err, (StepFailed, RuntimeError, OSError, ValueError)) else \
                traceback.format_exc(limit=3)
            self.steps.append(Step(name, False, round(time.monotonic() - start, 2), message.strip()[:500]))
            self.log(f"  [fail] {name}: {message.strip()[:300]}")
            raise StepFailed(name) from err
        self.steps.append(Step(name, True, round(time.monotonic() - start, 2), str(detail)))
        self.log(f"  [ok]   {name} ({time.monotonic() - start:.1f} s) {detail}")

    # -- the pipeline ---------------------------------------------------------------
    def run(self) -> dict:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self.step("build", self._build)
            self.step("start-services", self._start)
            self.step("traced-run", self._traced_run)
            self.step("learn", self._learn)
            self.step("allocate", self._await_allocations)
            self.step("placed-run-iez", lambda: self._placed_run("iez"))
            self.step("reset-cluster", self._reset)
            self.step("placed-run-rr", self._rr_run)
            self.step("model-qos", self._qos_model)
            self.step("compare", self._compare)
        except StepFailed:
            pass
        finally:
            if self.services:
                problems = self.services.stop()
                self.steps.append(Step("stop-services", not problems, 0.0, "; ".join(problems)))
        return self.report()

    def report(self) -> dict:
        return {
            "ok": all(s.ok for s in self.steps),
            "steps": [asdict(s) for s in self.steps],
            "ost_cost": {p: round(r.ost_cost, 4) for p, r in self.runs.items()},
            "makespan_s": {p: round(r.makespan_s, 3) for p, r in self.runs.items()},
            "io_time_s": {p: {"modelled": round(r.emulated_modelled_s, 3), "measured": round(r.emulated_measured_s, 3)}
                          for p, r in self.runs.items() if r.emulated_measured_s is not None},
            "runs": {p: {"ost_cost": round(r.ost_cost, 4), "max_util": round(r.max_util, 5),
                         "mean_util": round(r.mean_util, 5), "makespan_s": round(r.makespan_s, 3),
                         "measured": r.measured,
                         "util": {str(k): round(v, 5) for k, v in sorted(r.util.items())}} for p, r in self.runs.items()},
            **self.facts,
        }

    # -- steps ----------------------------------------------------------------------
    def _build(self) -> str:
        self.lib = find_library()
        self.writer = Writer(self.work, self.ranks, self.prefer_mpi)
        engine = make_engine(database_url(self.db))
        upgrade(engine)
        self.engine = engine
        self.facts["application"] = self.writer.describe()
        self.facts["writer"] = self.writer.kind
        self.facts["sizes"] = "real logical sizes in sparse files (64 KiB header + last byte written per file)"
        return f"{self.lib.name}; writer: {self.writer.describe()}"

    def _start(self) -> str:
        self.services = Services(self.work, self.db)
        status = self.services.start()
        self.out = self.services.data / "run"
        self.facts["cluster"] = ("3 OSS x 5 OSTs of 10 GiB, 20-80 % full (skewed, seeded), one iez-agent per OSS; "
                                 "modelled bandwidth 200 MiB/s per OST, 600 MiB/s per OSS")
        return f"MDS {self.services.mds_endpoint}, API :{self.services.api_port}, {status['osts']} OSTs fresh"

    def _env(self, mode: str, tag: str) -> dict[str, str]:
        env = {"LD_PRELOAD": str(self.lib), "IEZ_MODE": mode, "IEZ_DB": self.db, "IEZ_INCLUDE": str(self.services.data),
               "IEZ_APP": self.app, "IEZ_RUN_ID": tag, "IEZ_STATE_DIR": str(self.work / "state"),
               "IEZ_DEFAULT_STRIPE_COUNT": str(self.stripe_count)}
        env["IEZ_TRACE_DIR"] = str(self.work / ("traces" if mode == "trace" else "counts") / tag)
        return env

    def _traced_run(self) -> str:
        self.writer.run(self.out, self._env("trace", "run-0001"))
        traces = list((self.work / "traces" / "run-0001").glob("iez-trace.*.csv"))
        if len(traces) != self.ranks:
            raise StepFailed(f"{len(traces)} trace files for {self.ranks} ranks")
        return f"{len(traces)} per-process traces"

    def _learn(self) -> str:
        done = subprocess.run([sys.executable, "-m", "iez.cli", "learn", self.app, "--trace",
                               str(self.work / "traces"), "--db", self.db, "--json"],
                              capture_output=True, text=True, env={**os.environ, "IEZ_STATE_DIR": str(self.work / "state")})
        if done.returncode != 0:
            raise StepFailed(f"iez learn exited with {done.returncode}: {done.stderr.strip()[-300:]}")
        result = json.loads(done.stdout)
        self.predicted = self._app_requests()
        if len(self.predicted) != self.ranks:
            raise StepFailed(f"{len(self.predicted)} predicted requests for {self.ranks} files")
        self.facts["orders"] = result.get("orders")
        self.facts["predicted_requests"] = len(self.predicted)
        return f"{len(self.predicted)} requests predicted and stored, orders {result.get('orders')}"

    def _app_requests(self) -> list[WriteRequest]:
        def query(conn):
            rows = conn.execute(select(WriteRequestRow.path, WriteRequestRow.write_bytes, WriteRequestRow.stripe_count,
                                       WriteRequestRow.rank)
                                .join(Application, Application.id == WriteRequestRow.app_id)
                                .where(Application.name == self.app).order_by(WriteRequestRow.rank))
            return [WriteRequest(self.app, p, b, c, r) for p, b, c, r in rows]

        return read(self.engine, query)

    def _await_allocations(self) -> str:
        self._clear_outputs()
        paths = [r.file for r in self.predicted]
        self.services.wait(lambda: all(read(self.engine, lambda c, p=p: lookup(c, p)) for p in paths), 60,
                           "the MDS to allocate the predicted files")
        return f"{len(paths)} files allocated by the MDS (policy iez, live view)"

    def _clear_outputs(self) -> None:
        if self.out.exists():
            shutil.rmtree(self.out)

    def _avail_now(self) -> dict[int, int]:
        return dict(read(self.engine, lambda c: c.execute(select(OstRow.ost_index, OstRow.kbytes_avail)).all()))

    def _placed_run(self, policy: str) -> str:
        t0 = time.time() + 1.1
        self.services.wait(lambda: self._settled_since(t0), 60, "settled OST statistics before the run")
        start = self._avail_now()
        self.writer.run(self.out, self._env("place", f"run-{policy}"))
        found = usage(str(self.out))
        if found.placed_files != self.ranks:
            raise StepFailed(f"{found.placed_files} of {self.ranks} files carry a layout")
        run = self.runs[policy] = self._judge(policy, found.bytes_per_ost, start, measured=True)
        self.start_avail = start
        self._measure(run, found.bytes_per_ost)
        return (f"{found.placed_files} files placed, OSTCost {run.ost_cost:.3f}, "
                f"modelled I/O time {run.makespan_s:.2f} s; through the emulated bandwidth "
                f"{run.emulated_measured_s:.2f} s measured, {run.emulated_modelled_s:.2f} s modelled")

    def _measure(self, run: PolicyRun, bytes_per_ost: dict[int, int]) -> None:
        """The same job through the emulated cluster's bandwidth (libiez, IEZ_EMULATE): each rank rewrites
        1/MEASURE_SCALE of its placed file, each byte standing for MEASURE_SCALE, so the wall clock shows
        what the layouts cost; beside it the model on the emulated bandwidths (no background load)."""
        from iez.emulate.cluster import ClusterLayout

        emulated = ClusterLayout.load(self.services.cluster_root).cluster_state()
        run.emulated_modelled_s = io_time(emulated, bytes_per_ost)
        # a Lustre client keeps a file's dirty pages for all its OSTs in flight at once (write-back up to
        # max_dirty_mb per OSC): 32 MiB per server per rank here, each standing for MEASURE_SCALE
        env = {"LD_PRELOAD": str(self.lib), "IEZ_MODE": "off", "IEZ_EMULATE": str(self.services.cluster_root),
               "IEZ_STATE_DIR": str(self.work / "state"), "IEZ_EMULATE_WINDOW": str(32 << 20)}
        run.emulated_measured_s = measure(self.ranks, self.out, env, MEASURE_SCALE)

    def _judge(self, policy: str, bytes_per_ost: dict[int, int], start: dict[int, int], measured: bool) -> PolicyRun:
        """OSTCost (bytes over the free space at the start) and modelled I/O time of one placement."""
        util = {ost: bytes_per_ost.get(ost, 0) / (kb * 1024) for ost, kb in start.items()}
        mean = sum(util.values()) / len(util)
        with write_session(self.engine) as session:
            cluster = usable_cluster(session, utcnow(), stale_s=30)
        return PolicyRun(policy, max(util.values()) / mean, max(util.values()), mean, util,
                         io_time(cluster, bytes_per_ost), measured)

    def _settled_since(self, t0: float) -> bool:
        """The DB holds a report sampled after ``t0`` for every OST (the MDS stores every few seconds)."""
        def oldest(conn):
            return conn.execute(select(OstRow.sample_time)).scalars().all()

        times = read(self.engine, oldest)
        return len(times) == 15 and min(t.replace(tzinfo=timezone.utc).timestamp() for t in times) > t0

    def _reset(self) -> str:
        """Remove the run's files and wait until the agents report the space free again."""
        before = self.start_avail
        self._clear_outputs()
        t0 = time.time() + 1.1  # the emulator rewrites its trees every half interval
        self.services.wait(lambda: self._settled_since(t0), 60, "fresh reports after the files were removed")
        self.services.wait(lambda: all(abs(self._avail_now().get(o, 0) - kb) <= max(1024, kb // 1000)
                                       for o, kb in before.items()), 30, "the agents to report the space freed")
        return "outputs removed; OSTs back to their starting free space"

    def _rr_run(self) -> str:
        from iez.allocate.lustre_rr import RoundRobinPolicy

        def place(session):
            cluster = usable_cluster(session, utcnow(), stale_s=30)
            return RoundRobinPolicy(seed=0).allocate(cluster, self.predicted)

        with write_session(self.engine) as session:
            # the comparison run is pinned by hand: without this, retiring the iez layouts would make the
            # app's requests pending again and the MDS would (rightly) place them with iez once more
            app_id = session.scalar(select(Application.id).where(Application.name == self.app))
            session.execute(delete(WriteRequestRow).where(WriteRequestRow.app_id == app_id))
            placed = place(session)
        for allocation in placed:  # pinned by hand, as Lustre's own allocator would have chosen
            pin(self.engine, allocation.file, allocation.stripe_size, allocation.osts)
        return self._placed_run("rr")

    def _qos_model(self) -> str:
        """Lustre's weighted allocator on the same cluster and requests, judged from its layouts (not run)."""
        with write_session(self.engine) as session:
            cluster = usable_cluster(session, utcnow(), stale_s=30)
        placed = QosPolicy(seed=0).allocate(cluster, self.predicted)
        per_ost: dict[int, int] = {}
        for request, allocation in zip(self.predicted, placed):
            for ost, b in zip(allocation.osts, raid0_bytes(request.write_bytes, allocation.stripe_size,
                                                           allocation.stripe_count)):
                per_ost[ost] = per_ost.get(ost, 0) + b
        self.runs["qos"] = self._judge("qos", per_ost, self.start_avail, measured=False)
        return f"OSTCost {self.runs['qos'].ost_cost:.3f}, modelled I/O time {self.runs['qos'].makespan_s:.2f} s"

    def _compare(self) -> str:
        """The job's I/O time is what users feel: iez must be at least as fast as Lustre's allocators."""
        times = {p: r.makespan_s for p, r in self.runs.items()}
        fastest_lustre = min(times["rr"], times["qos"])
        detail = ", ".join(f"{p} {t:.2f} s (OSTCost {self.runs[p].ost_cost:.3f})" for p, t in times.items())
        measured = ", ".join(f"{p} {r.emulated_measured_s:.2f} s against {r.emulated_modelled_s:.2f} s modelled"
                             for p, r in self.runs.items() if r.emulated_measured_s is not None)
        if times["iez"] > fastest_lustre * 1.01:
            raise StepFailed(f"iez is slower than Lustre's allocators: {detail}")
        return f"modelled I/O time {detail}; measured through the emulated bandwidth: {measured}"


def plot(report: dict, path: Path) -> None:
    """Per-OST utilisation under each policy, as in the paper's Fig. 7."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.6), sharey=True, squeeze=False)
    colours = {"rr": "#d62728", "iez": "#2ca02c", "qos": "#ff7f0e"}
    for ax, (policy, run) in zip(axes[0], runs.items()):
        osts = sorted(int(k) for k in run["util"])
        ax.bar(osts, [100 * run["util"][str(o)] for o in osts], color=colours.get(policy, "#1f77b4"))
        ax.axhline(100 * run["mean_util"], color="black", linestyle="--", linewidth=1)
        ax.set_title(f"{policy}: I/O time {run['makespan_s']:.2f} s, OSTCost {run['ost_cost']:.3f}"
                     + ("" if run["measured"] else " (modelled)"), fontsize=9)
        ax.set_xlabel("OST index")
        ax.set_xticks(osts)
    axes[0][0].set_ylabel("utilisation of free space (%)")
    fig.suptitle("iez demo: the same predicted job placed by iez and by Lustre's round-robin and QoS allocators")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
