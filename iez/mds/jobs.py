"""Which jobs drive each OST: per-job rates from the agents' ``job_stats`` (``agents/SCHEMA.md``).

An agent publishes, per OST, its top jobs' cumulative ``read_bytes`` / ``write_bytes`` sums (Lustre's
``obdfilter.*.job_stats``). The MDS keeps, per (OST, job), the samples of the last
:data:`iez.traffic.WINDOW_REPORTS` reports that listed it, and a job's rate is the OST rule of
:mod:`iez.traffic` applied to them: bytes over seconds across the window, a counter that went down
(the job's entry was dropped by Lustre's ``job_cleanup_interval`` and came back, the OST remounted) or
an impossible step left out. A job an OST's report no longer lists is forgotten there.

**A job's own traffic.** When the MDS places an application's next files, the load its own job drives is
taken off each OST's live load (:meth:`JobTracker.rates_of`, :func:`own_job_ids`): a job writing
checkpoint N must not steer checkpoint N+1 away from the OSTs it has just been given, as if another
job were there. A job is the application's own when its Lustre job id is the application's name (iez's
``<exe>.<user>``, the SPANK plugin's rule) or Lustre's default ``jobid_name`` for it, ``%e.%u``
(``<exe>.<uid>``). Job ids set from the scheduler (``jobid_var=SLURM_JOB_ID``) name no application and are
never discounted.

Kept in memory only (the status file and the metrics show it; nothing is stored in the DB): the top
:data:`TOP_PER_OST` jobs per OST and :data:`TOP_PER_OSS` per OSS (its OSTs' rates summed per job), so
the job labels of the metrics have a bounded cardinality (at most ``TOP_PER_OST`` per OST).
"""

from __future__ import annotations

from collections import deque

from iez.traffic import WINDOW_REPORTS, steps

#: Jobs shown per OST (status, metrics) and per OSS (status).
TOP_PER_OST = 5
TOP_PER_OSS = 10


def _rate(samples) -> float:
    kept = steps(samples)
    seconds = sum(s for s, _ in kept)
    return sum(b for _, b in kept) / seconds if seconds > 0 else 0.0


class JobTracker:
    def __init__(self, window: int = WINDOW_REPORTS):
        self.window = window
        #: OST index -> job id -> deque of (time, read sum, write sum)
        self.samples: dict[int, dict[str, deque]] = {}
        #: OST index -> the OSS that last reported it
        self.oss_of: dict[int, str] = {}

    def apply(self, oss_id: str, when: float, jobs: dict[int, list[tuple[str, int, int]]] | None) -> None:
        """One accepted report's ``job_stats`` (``when``: its sample time, Unix seconds)."""
        if jobs is None:
            return
        for index, entries in jobs.items():
            self.oss_of[index] = oss_id
            per = self.samples.setdefault(index, {})
            listed = set()
            for job_id, read, written in entries:
                listed.add(job_id)
                series = per.get(job_id)
                if series is None:
                    series = per[job_id] = deque(maxlen=self.window)
                series.append((when, read, written))
            for gone in set(per) - listed:
                del per[gone]

    def forget_ost(self, index: int) -> None:
        self.samples.pop(index, None)
        self.oss_of.pop(index, None)

    def rates(self, index: int) -> list[dict]:
        """The jobs of OST ``index``, those driving it now first (by rate over the window), then by bytes:
        ``{job_id, read_bytes_s, write_bytes_s, bytes_s, read_bytes, write_bytes}`` (the last two: the job's
        cumulative sums on the OST in its latest report, as Lustre's job_stats count them)."""
        out = []
        for job_id, series in self.samples.get(index, {}).items():
            read = _rate((t, r) for t, r, _ in series)
            write = _rate((t, w) for t, _, w in series)
            out.append({"job_id": job_id, "read_bytes_s": round(read, 1), "write_bytes_s": round(write, 1),
                        "bytes_s": round(read + write, 1), "read_bytes": series[-1][1], "write_bytes": series[-1][2]})
        out.sort(key=lambda j: (-j["bytes_s"], -(j["read_bytes"] + j["write_bytes"]), j["job_id"]))
        return out

    def rates_of(self, job_ids: set[str]) -> dict[int, float]:
        """Read+write bytes/s the jobs named drive on each OST now (OSTs where they drive none left out)."""
        out: dict[int, float] = {}
        for index, per in self.samples.items():
            rate = sum(_rate((t, r + w) for t, r, w in series) for job_id, series in per.items() if job_id in job_ids)
            if rate > 0:
                out[index] = rate
        return out

    def top_per_ost(self, top: int = TOP_PER_OST) -> dict[int, list[dict]]:
        return {index: jobs[:top] for index in sorted(self.samples) if (jobs := self.rates(index))}

    def top_per_oss(self, top: int = TOP_PER_OSS) -> dict[str, list[dict]]:
        summed: dict[str, dict[str, list[float]]] = {}
        for index in self.samples:
            oss = self.oss_of[index]  # apply() and forget_ost() keep both maps' keys the same
            for job in self.rates(index):
                entry = summed.setdefault(oss, {}).setdefault(job["job_id"], [0.0, 0.0, 0, 0])
                entry[0] += job["read_bytes_s"]
                entry[1] += job["write_bytes_s"]
                entry[2] += job["read_bytes"]
                entry[3] += job["write_bytes"]
        out = {}
        for oss, jobs in sorted(summed.items()):
            ranked = sorted(jobs.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), -(kv[1][2] + kv[1][3]), kv[0]))
            out[oss] = [{"job_id": j, "read_bytes_s": round(r, 1), "write_bytes_s": round(w, 1),
                         "bytes_s": round(r + w, 1), "read_bytes": rb, "write_bytes": wb}
                        for j, (r, w, rb, wb) in ranked[:top]]
        return out

    def status(self) -> dict:
        """What the MDS's status file carries: ``{"osts": {index: [...]}, "oss": {oss_id: [...]}}``."""
        return {"osts": {str(i): jobs for i, jobs in self.top_per_ost().items()}, "oss": self.top_per_oss()}


def own_job_ids(app: str) -> set[str]:
    """The Lustre job ids an application's own processes carry (see the module text): ``app`` itself, and
    ``<exe>.<uid>`` when ``app`` is ``<exe>.<user>`` of a user this node knows."""
    import pwd

    out = {app}
    exe, dot, user = app.rpartition(".")
    if dot and exe and user:
        try:
            out.add(f"{exe}.{pwd.getpwnam(user).pw_uid}")
        except KeyError:
            pass
    return out
