"""The demo's steps: on an emulated cluster where another job is already busy, trace a first run, learn
(AIPA), let the MDS allocate from what the servers' counters showed it, then run the same predicted job
placed by iez, by Lustre's round-robin and by its weighted (QoS) allocator, each measured wall-clock
through the emulated bandwidth beside its modelled I/O time.

The model of each placement uses the live view the MDS had when it placed the job (the loads it learnt
from the counters, the servers' bandwidths) and the job's bytes per OST from the layouts the library
really applied. OSTCost follows the paper (eq. 7): an OST's utilisation is the bytes the run stored on
it over the space it had available when the run started; it stays a column, not the verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sqlalchemy import select

from iez.allocate.lustre_qos import QosPolicy
from iez.allocate.lustre_rr import RoundRobinPolicy
from iez.config import database_url
from iez.db.allocations import lookup, pin
from iez.db.engine import make_engine, read, write_session
from iez.db.models import Application, OstRow, WriteRequestRow, utcnow
from iez.db.schema import upgrade
from iez.db.stats import usable_cluster
from iez.demo import competitor
from iez.demo.scenarios import Scenario, demo as demo_scenario
from iez.demo.services import Services
from iez.demo.writers import Writer, measure
from iez.layout.usage import usage
from iez.placement import readable_requests
from iez.model import ClusterState, WriteRequest, io_time, oss_loads, oss_usable_bandwidth, raid0_bytes
from iez.traffic import WINDOW_REPORTS
from iez.errors import IezError

#: In the measured runs each byte written stands for this many (IEZ_EMULATE_SCALE): 6.4 GB of logical
#: output costs 200 MB of real writes, and the emulated cluster still serves the full sizes.
MEASURE_SCALE = 32
POLICIES = ("iez", "rr", "qos")
#: The agents' interval in the demo (seconds): the MDS sees a new load within WINDOW_REPORTS of them.
INTERVAL_S = 2


class StepFailed(IezError, RuntimeError):
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
    bytes_per_ost: dict[int, int] = field(default_factory=dict)
    makespan_s: float = 0.0  # modelled I/O time on the live view the MDS placed the job with
    measured_s: float | None = None  # wall-clock I/O time through the emulated bandwidth
    seconds_per_ost: dict[int, float] = field(default_factory=dict)  # bytes over what the job gets there
    seconds_per_oss: dict[str, float] = field(default_factory=dict)
    max_fill: float = 0.0  # the fullest OST after the run's bytes (the fill cap is a promise to the site)


def find_library(build: bool = True) -> Path:
    """libiez.so (:func:`iez.runtime.find_library`), as a failed demo step when there is none."""
    from iez.runtime import LibraryNotFound
    from iez.runtime import find_library as find

    try:
        return find(build=build)
    except LibraryNotFound as err:
        raise StepFailed(str(err)) from None


class Demo:
    def __init__(self, work: Path, ranks: int | None = None, prefer_mpi: bool = True, log=print,
                 scenario: Scenario | None = None):
        scenario = scenario or demo_scenario()
        if ranks is not None:  # --ranks: the demo's one job with that many processes, the same total bytes
            job = scenario.jobs[0]
            total = job.ranks * job.file_bytes
            scenario = replace(scenario, jobs=(replace(job, ranks=ranks, file_bytes=total // ranks),))
        self.work, self.scenario, self.prefer_mpi, self.log = work, scenario, prefer_mpi, log
        self.steps: list[Step] = []
        self.runs: dict[str, PolicyRun] = {}
        self.facts: dict = {"scenario": scenario.name, "cluster": scenario.summary}
        self.db = str(work / "iez.db")
        self.services: Services | None = None
        self.competitors: list[competitor.RunningCompetitor] = []

    @property
    def started(self) -> Services:
        """The services the start-services step started (every later step runs with them)."""
        if self.services is None:
            raise StepFailed("the services are not started")
        return self.services

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
            if self.scenario.competitors:
                self.step("start-other-job", self._start_competitors)
            self.step("traced-run", self._traced_run)
            self.step("see-load", self._see_load)
            self.step("learn", self._learn)
            self.step("allocate", self._await_allocations)
            self.step("baselines", self._baselines)
            for policy in POLICIES:
                self.step(f"run-{policy}", lambda p=policy: self._placed_run(p))
            self.step("compare", self._compare)
        except StepFailed:
            pass
        finally:
            for c in self.competitors:
                c.stop()
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
            "io_time_s": {p: {"modelled": round(r.makespan_s, 3), "measured": round(r.measured_s, 3)}
                          for p, r in self.runs.items() if r.measured_s is not None},
            "runs": {p: {"ost_cost": round(r.ost_cost, 4), "max_util": round(r.max_util, 5),
                         "mean_util": round(r.mean_util, 5), "makespan_s": round(r.makespan_s, 3),
                         "measured_s": None if r.measured_s is None else round(r.measured_s, 3),
                         "util": {str(k): round(v, 5) for k, v in sorted(r.util.items())},
                         "seconds_per_ost": {str(k): round(v, 4) for k, v in sorted(r.seconds_per_ost.items())},
                         "seconds_per_oss": {k: round(v, 4) for k, v in sorted(r.seconds_per_oss.items())},
                         "max_fill": round(r.max_fill, 4)}
                     for p, r in self.runs.items()},
            **self.facts,
        }

    # -- steps ----------------------------------------------------------------------
    def _build(self) -> str:
        self.lib = find_library()
        self.writers = {job.app: Writer(self.work, job.ranks, self.prefer_mpi, job.file_bytes, job.prefix)
                        for job in self.scenario.jobs}
        engine = make_engine(database_url(self.db))
        upgrade(engine)
        self.engine = engine
        first = next(iter(self.writers.values()))
        self.facts["application"] = "; ".join(f"{app}: {w.describe()}" for app, w in self.writers.items())
        self.facts["writer"] = first.kind
        self.facts["sizes"] = "real logical sizes in sparse files (64 KiB header + last byte written per file)"
        return f"{self.lib.name}; {self.facts['application']}"

    def _start(self) -> str:
        self.services = Services(self.work, self.db, self.scenario.description)
        status = self.services.start()
        self.data = self.services.data
        self.facts["oss_of"] = {str(k): v for k, v in sorted(self._oss_of().items())}
        return f"MDS {self.services.mds_endpoint}, API :{self.services.api_port}, {status['osts']} OSTs fresh"

    def _oss_of(self) -> dict[int, str]:
        return {o["index"]: oss["id"] for oss in self.scenario.description["oss"] for o in oss["osts"]}

    def _start_competitors(self) -> str:
        env = {"IEZ_STATE_DIR": str(self.work / "state")}
        for spec in self.scenario.competitors:
            self.competitors.append(competitor.start(spec, self.lib, self.started.cluster_root, self.data,
                                                     self._oss_of(), env))
        self.load_since = time.time()
        return "; ".join(f"{c.spec.name} re-reads its dataset on OSTs {','.join(map(str, c.spec.osts))} "
                         f"(its own I/O class, at most {c.spec.share:.0%} of each server)" for c in self.competitors)

    def _env(self, job, mode: str, tag: str) -> dict[str, str]:
        env = {"LD_PRELOAD": str(self.lib), "IEZ_MODE": mode, "IEZ_DB": self.db, "IEZ_INCLUDE": str(self.data),
               "IEZ_APP": job.app, "IEZ_RUN_ID": tag, "IEZ_STATE_DIR": str(self.work / "state"),
               "IEZ_DEFAULT_STRIPE_COUNT": str(job.stripe_count),
               # the demo compares placements, so a create waits up to 1 s for its layout (default 100 ms): 16
               # writers starting at once on a crowded 2-core node missed lookups at 100 ms and ran unplaced
               "IEZ_TIMEOUT_MS": "1000"}
        env["IEZ_TRACE_DIR"] = str(self.work / ("traces" if mode == "trace" else "counts") / job.app / tag)
        return env

    def _out(self, policy: str) -> Path:
        """Where a run writes: iez's run writes where the traced run did (the predicted paths)."""
        return self.data / ("run" if policy in ("trace", "iez") else f"run-{policy}")

    def _traced_run(self) -> str:
        counts = []
        for job in self.scenario.jobs:
            self.writers[job.app].run(self._out("trace"), self._env(job, "trace", "run-0001"))
            traces = list((self.work / "traces" / job.app / "run-0001").glob("iez-trace.*.csv"))
            if len(traces) != job.ranks:
                raise StepFailed(f"{job.app}: {len(traces)} trace files for {job.ranks} ranks")
            counts.append(f"{job.app} {len(traces)}")
        self._clear(self._out("trace"))
        return f"per-process traces: {', '.join(counts)}"

    def _mds_loads(self) -> dict[int, float]:
        return {int(k): v for k, v in self.started.status().get("loads_mib_s", {}).items()}

    def _see_load(self) -> str:
        """Wait until the MDS has a full window of reports since the other job started (it learns of it only
        from the counters), then say what it sees per OSS."""
        if self.competitors:
            busy = {o for c in self.competitors for o in c.spec.osts}
            settle = self.load_since + (WINDOW_REPORTS + 0.5) * INTERVAL_S
            self.started.wait(lambda: time.time() > settle and busy <= set(self._mds_loads()), 60,
                               "the MDS to see the other job's load in the counters")
        loads = self._mds_loads()
        per_oss: dict[str, float] = {}
        for ost, mib_s in loads.items():
            per_oss[self._oss_of()[ost]] = per_oss.get(self._oss_of()[ost], 0.0) + mib_s
        self.facts["live_load_mib_s"] = {k: round(v, 1) for k, v in sorted(per_oss.items())}
        shown = ", ".join(f"{k} {v:.0f} MiB/s" for k, v in sorted(per_oss.items())) or "none"
        return f"the MDS's live view, from the agents' counters: {shown}"

    def _learn(self) -> str:
        self.predicted: list[WriteRequest] = []
        orders = {}
        for job in self.scenario.jobs:
            done = subprocess.run([sys.executable, "-m", "iez.cli", "learn", job.app, "--trace",
                                   str(self.work / "traces" / job.app), "--db", self.db, "--json"],
                                  capture_output=True, text=True,
                                  env={**os.environ, "IEZ_STATE_DIR": str(self.work / "state")})
            if done.returncode != 0:
                raise StepFailed(f"iez learn {job.app} exited with {done.returncode}: {done.stderr.strip()[-300:]}")
            orders[job.app] = json.loads(done.stdout).get("orders")
            mine = self._app_requests(job.app)
            if len(mine) != job.ranks:
                raise StepFailed(f"{job.app}: {len(mine)} predicted requests for {job.ranks} files")
            self.predicted += mine
        self.facts["orders"] = orders
        self.facts["predicted_requests"] = len(self.predicted)
        return f"{len(self.predicted)} requests predicted and stored"

    def _app_requests(self, app: str) -> list[WriteRequest]:
        """The application's stored requests, read as the MDS reads them (:func:`iez.placement.readable_requests`)."""
        def query(conn):
            return list(conn.execute(select(WriteRequestRow).join(Application, Application.id == WriteRequestRow.app_id)
                                     .where(Application.name == app).order_by(WriteRequestRow.rank)))

        requests, unreadable = readable_requests(app, read(self.engine, query))
        if unreadable:
            raise StepFailed(f"{app}: {len(unreadable)} stored requests do not read: {next(iter(unreadable.values()))}")
        return requests

    def _await_allocations(self) -> str:
        paths = [r.file for r in self.predicted]

        def allocated(path: str) -> bool:
            return bool(read(self.engine, lambda conn: lookup(conn, path)))

        self.started.wait(lambda: all(allocated(p) for p in paths), 60, "the MDS to allocate the predicted files")
        return f"{len(paths)} files allocated by the MDS (policy iez, on its live view)"

    def _baselines(self) -> str:
        """The view the MDS placed with (free space, bandwidths, the loads it learnt), and Lustre's allocators'
        layouts for the same files on it, pinned for their runs (they never see the file's size or the load)."""
        with write_session(self.engine) as session:
            from iez.freshness import StaleRule  # the MDS's rule: the view it placed with

            view = usable_cluster(session, utcnow(), stale_s=StaleRule(), with_load=True)
        bandwidth = {o["index"]: o["bandwidth_mib_s"] * (1 << 20)
                     for oss in self.scenario.description["oss"] for o in oss["osts"]}
        oss_bw = {oss["id"]: oss["bandwidth_mib_s"] * (1 << 20) for oss in self.scenario.description["oss"]}
        self.model = ClusterState.build([replace(o, bandwidth=bandwidth[o.index]) for o in view.osts],
                                        [replace(s, bandwidth=oss_bw[k]) for k, s in view.osses.items()],
                                        self.scenario.description.get("fill_cap", view.fill_cap))
        self.start_avail = dict(read(self.engine, lambda c: c.execute(
            select(OstRow.ost_index, OstRow.kbytes_avail)).all()))
        self.facts["makespan_bound_s"] = round(self._bound(), 3)
        pinned = 0
        for policy, placer in (("rr", RoundRobinPolicy(seed=0)), ("qos", QosPolicy(seed=0))):
            requests = [replace(r, file=str(self._out(policy) / Path(r.file).name)) for r in self.predicted]
            for allocation in placer.allocate(view, requests):
                pin(self.engine, allocation.file, allocation.stripe_size, allocation.osts)
                pinned += 1
        return f"rr and qos layouts for the same {len(self.predicted)} files on the same view ({pinned} pinned)"

    def _bound(self) -> float:
        """The I/O time no placement within the fill cap can beat on the MDS's view (the simulator's bound:
        whole stripe objects, each OST's and OSS's bandwidth left for the job)."""
        import numpy as np

        from iez.allocate.base import StripeRules
        from iez.sim.metrics import Bandwidths, makespan_bound

        rules = StripeRules()
        objects = [b for r in self.predicted for b in raid0_bytes(r.write_bytes, rules.size(r.write_bytes,
                                                                                            r.stripe_count),
                                                                  r.stripe_count) * r.mirror_count]
        osts = self.model.osts
        room = np.array([o.room_bytes(self.model.fill_cap) for o in osts], dtype=np.int64)
        mask = np.array([o.takes_stripes for o in osts], dtype=bool)
        return makespan_bound(np.array(objects, dtype=np.int64), mask, room, Bandwidths.of(self.model))

    def _clear(self, out: Path) -> None:
        if out.exists():
            shutil.rmtree(out)

    def _placed_run(self, policy: str) -> str:
        """The jobs' writers under the library (placement mode) create their files with the policy's layouts;
        then every rank rewrites its file through the emulated bandwidth, all jobs at once, timed."""
        out = self._out(policy)
        for job in self.scenario.jobs:
            self.writers[job.app].run(out, self._env(job, "place", f"run-{policy}"))
        found = usage(str(out))
        files = [f for w in self.writers.values() for f in w.files(out)]
        if found.placed_files != len(files):
            raise StepFailed(f"{found.placed_files} of {len(files)} files carry a layout")
        run = self.runs[policy] = self._judge(policy, found.bytes_per_ost)
        env = {"LD_PRELOAD": str(self.lib), "IEZ_MODE": "off", "IEZ_EMULATE": str(self.started.cluster_root),
               "IEZ_STATE_DIR": str(self.work / "state"),
               # a Lustre client keeps a file's dirty pages for all its OSTs in flight at once (write-back up
               # to max_dirty_mb per OSC): 32 MiB per server per rank here, each standing for MEASURE_SCALE
               "IEZ_EMULATE_WINDOW": str(32 << 20)}
        sizes = {w.prefix: w.nbytes for w in self.writers.values()}
        run.measured_s = measure([(f, sizes[f.name.split("-Part")[0]]) for f in files], env, MEASURE_SCALE)
        return (f"{found.placed_files} files placed, OSTCost {run.ost_cost:.3f}; I/O time "
                f"{run.measured_s:.2f} s measured, {run.makespan_s:.2f} s modelled")

    def _judge(self, policy: str, bytes_per_ost: dict[int, int]) -> PolicyRun:
        """Modelled I/O time on the MDS's view, each OST's and OSS's seconds of work, and OSTCost."""
        util = {ost: bytes_per_ost.get(ost, 0) / max(1, kb * 1024) for ost, kb in self.start_avail.items()}
        mean = sum(util.values()) / len(util)
        per_ost = {o.index: bytes_per_ost.get(o.index, 0) / o.usable_bandwidth for o in self.model.osts}
        loads = oss_loads(self.model)
        per_oss_bytes: dict[str, int] = {}
        for o in self.model.osts:
            per_oss_bytes[o.oss_id] = per_oss_bytes.get(o.oss_id, 0) + bytes_per_ost.get(o.index, 0)
        per_oss = {k: b / oss_usable_bandwidth(self.model.osses[k], loads[k]) for k, b in per_oss_bytes.items()}
        modelled: dict[int, float] = dict(bytes_per_ost)
        fill = max((o.bytes_total - self.start_avail.get(o.index, 0) * 1024 + bytes_per_ost.get(o.index, 0))
                   / o.bytes_total for o in self.model.osts)
        return PolicyRun(policy, max(util.values()) / mean if mean else 0.0, max(util.values()), mean, util,
                         dict(bytes_per_ost), io_time(self.model, modelled), None, per_ost, per_oss, fill)

    def _compare(self) -> str:
        """What users feel is the job's time: iez must be at least as fast as Lustre's allocators, modelled
        and measured (5 % for the machine's noise)."""
        modelled = {p: r.makespan_s for p, r in self.runs.items()}
        measured = {p: r.measured_s for p, r in self.runs.items() if r.measured_s is not None}  # each placed run's
        detail = ", ".join(f"{p} {measured[p]:.2f} s ({modelled[p]:.2f} s modelled)" for p in POLICIES)
        if modelled["iez"] > min(modelled["rr"], modelled["qos"]) * 1.01 or \
                measured["iez"] > min(measured["rr"], measured["qos"]) * 1.05:
            raise StepFailed(f"iez is slower than Lustre's allocators: {detail}")
        return (f"I/O time measured: {detail}; iez takes {measured['iez'] / measured['rr']:.2f}x rr's time and "
                f"{measured['iez'] / measured['qos']:.2f}x qos's")


def plot(report: dict, path: Path) -> None:
    """What users feel: per OST, the seconds of work each policy gave it (its bytes over the bandwidth the job
    could get there), each OSS's seconds as a step over its OSTs, the modelled and measured job time as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 3.8), sharey=True, squeeze=False)
    colours = {"rr": "#d62728", "iez": "#2ca02c", "qos": "#ff7f0e"}
    oss_of = report.get("oss_of", {})
    for ax, (policy, run) in zip(axes[0], runs.items()):
        osts = sorted(int(k) for k in run["seconds_per_ost"])
        ax.bar(osts, [run["seconds_per_ost"][str(o)] for o in osts], color=colours.get(policy, "#1f77b4"),
               label="OST: its bytes / bandwidth left for the job")
        for oss, seconds in run["seconds_per_oss"].items():
            members = [o for o in osts if oss_of.get(str(o)) == oss]
            if members:
                ax.hlines(seconds, min(members) - 0.4, max(members) + 0.4, colors="black", linewidth=2,
                          label="OSS: the same over its OSTs" if oss == min(run["seconds_per_oss"]) else None)
        ax.axhline(run["makespan_s"], color="grey", linestyle="--", linewidth=1, label="job, modelled")
        if run.get("measured_s") is not None:
            ax.axhline(run["measured_s"], color="blue", linestyle=":", linewidth=1.5, label="job, measured")
        measured = "" if run.get("measured_s") is None else f", measured {run['measured_s']:.2f} s"
        ax.set_title(f"{policy}: I/O time {run['makespan_s']:.2f} s modelled{measured}\nOSTCost {run['ost_cost']:.3f}",
                     fontsize=9)
        ax.set_xlabel("OST index")
        ax.set_xticks(osts)
        ax.tick_params(axis="x", labelsize=7)
    axes[0][0].set_ylabel("seconds of I/O the placement gives each server")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle("iez demo: the same predicted job placed by iez and by Lustre's round-robin and QoS allocators, "
                 "beside another busy job", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
