"""The layout-aware mover (seed 000, sections IV.B-C) and what every movement shares.

A movement is a list of ``(src, dst, dst_layout or None)``. Layout-aware (the default): each source
file is cut into stripe-sized chunks (:mod:`iez.move.chunks`), each chunk queued on the OST that
serves it (the source's OST; for a source without a layout, the destination's), and ``workers``
threads visit the OST queues round-robin, each from where it last stopped: an OST another worker is
on is passed by, and so is an OST the congestion detector (:mod:`iez.move.congestion`) marked, for
its next M picks. Uncongested OSTs thus progress faster than congested ones, and no two workers
queue behind each other on one OST. Destination files are placed a batch at a time, just before
their chunks are queued, so later files see the congestion found by then (:mod:`iez.move.placement`).
``naive`` (:mod:`iez.move.naive`) is the paper's baseline over the same copy code.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from iez.layout.model import Layout
from iez.layout.read import LayoutReader
from iez.move import files as fileops
from iez.move import temps
from iez.move.chunks import DEFAULT_CHUNK, MAX_CHUNK, Chunk, cut, cut_mirrored, ost_at
from iez.move.congestion import Detector, Settings
from iez.move.placement import Placer

MiB = 1024 * 1024
#: Files are placed just in time: a batch of one file per worker (at least ``BATCH``) is placed and queued
#: when fewer than ``LOW_WATER`` chunks per worker are queued outside congested OSTs, or fewer OSTs than
#: workers (or than the OSTs not congested) have ``LOW_WATER`` chunks queued...
BATCH = 4
LOW_WATER = 8
#: ... and while fewer than this many low waters are queued in all (chunks deferred on congested OSTs count).
QUEUE_CAP = 32
#: How long the live view of a mirrored source's OSTs is trusted before it is read again (seconds).
LIVE_VIEW_S = 1.0
#: A terminal shows progress for movements running longer than this.
PROGRESS_AFTER_S = 2.0


@dataclass
class MoveOptions:
    naive: bool = False
    workers: int = 4
    congestion: Settings = field(default_factory=Settings)
    #: Chunks of zeros become holes in the destination (``cp --sparse=always``): nothing written there.
    sparse: bool = False
    #: Every byte written, the source's holes as zeros (``cp --sparse=never``); by default (neither) the
    #: source's holes stay holes (``cp --sparse=auto``, as ``cp -a``).
    dense: bool = False
    #: Destination stripe count; None: the source's (1 for a source without a layout, as the paper's sink).
    stripe_count: int | None = None
    #: Allocator for destinations (``--naive`` always places round-robin).
    policy: str = "iez"
    #: None: on a terminal after 2 s; False: never.
    progress: bool | None = None
    #: Called with each failure's one line as it happens (the others go on).
    on_error: Callable[[str], None] | None = None
    #: A mirrored source (FLR) is read from every in-sync copy: chunks dealt to the copies in turn and moved off
    #: a copy whose OST is congested (CEFT's split reads and hot-spot skipping). False: the preferred copy only.
    mirror_skip: bool = True
    #: Before copying, remove the temporaries of dead movers beside the destinations (:mod:`iez.move.temps`);
    #: False where the caller sweeps itself (the stager, once per run).
    sweep: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 1024:
            raise ValueError(f"--workers {self.workers} is outside 1..1024")
        if self.sparse and self.dense:
            raise ValueError("--sparse and --dense exclude each other")
        if self.stripe_count is not None and self.stripe_count < 1:
            raise ValueError(f"--stripe-count {self.stripe_count} must be at least 1")


@dataclass
class MoveReport:
    mode: str
    workers: int
    files: int = 0
    failed: list[dict] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0
    chunks: dict[str, int] = field(default_factory=dict)
    src_chunks: dict[str, int] = field(default_factory=dict)
    dst_chunks: dict[str, int] = field(default_factory=dict)
    mean_chunk_s: dict[str, dict[str, float]] = field(default_factory=dict)
    congested: list[dict] = field(default_factory=list)
    placement: str = ""
    dst_files_per_ost: dict[str, int] = field(default_factory=dict)
    #: Chunks per OST moved while every OST queue still held chunks (layout-aware: all files queued), the
    #: window in which a congested OST should have served fewer than the others.
    mixed_chunks: dict[str, int] = field(default_factory=dict)
    #: Destinations placed again before their first byte because an OST of theirs was found congested.
    replaced: int = 0
    #: Files whose chunks more than one worker copied (0 for --naive: a file is one worker's).
    files_by_several_workers: int = 0
    #: Chunks of mirrored sources read from each copy (its 1-based mirror id, as FLR numbers them).
    mirror_chunks: dict[str, int] = field(default_factory=dict)
    #: Temporaries that movers killed before left beside the destinations, removed before the copy began
    #: (:mod:`iez.move.temps`), and those kept (their process still runs, or runs where it cannot be seen).
    temporaries_removed: int = 0
    temporaries_kept: int = 0
    settings: dict = field(default_factory=dict)

    @property
    def throughput_mib_s(self) -> float:
        return self.bytes / MiB / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {"mode": self.mode, "files": self.files, "failed": self.failed, "bytes": self.bytes,
                "seconds": round(self.seconds, 4), "throughput_mib_s": round(self.throughput_mib_s, 2),
                "chunks": self.chunks, "src_chunks": self.src_chunks, "dst_chunks": self.dst_chunks,
                "mean_chunk_s": self.mean_chunk_s, "congested": self.congested, "workers": self.workers,
                "placement": self.placement, "dst_files_per_ost": self.dst_files_per_ost,
                "mixed_chunks": self.mixed_chunks, "replaced": self.replaced, "files_by_several_workers": self.files_by_several_workers,
                "mirror_chunks": self.mirror_chunks, "temporaries_removed": self.temporaries_removed,
                "temporaries_kept": self.temporaries_kept, **self.settings}


def _key(ost: int | None) -> str:
    return "none" if ost is None else str(ost)


class Movement:
    """The files, the detectors, the placement and the counters of one movement."""

    def __init__(self, items: Sequence[tuple[str, str, Layout | None]], options: MoveOptions):
        self.options = options
        self.started = time.monotonic()
        self.read_detector = Detector(options.congestion, "read", self.started)
        self.write_detector = Detector(options.congestion, "write", self.started)
        self.report = MoveReport("naive" if options.naive else "layout-aware", options.workers)
        self.crashes: list[str] = []
        self._crash_lock = threading.Lock()
        self.report.settings = {"window": options.congestion.window, "threshold_s": options.congestion.threshold_s,
                                "skip": options.congestion.skip, "mirror_skip": options.mirror_skip}
        self.lock = threading.Lock()
        self._time_sums: dict[tuple[str, str], list[float]] = {}
        self._placers: dict[tuple, Placer] = {}
        self._placer_of: dict[str, Placer] = {}
        self._headroom: dict[str, tuple[float, dict[int, float]]] = {}
        self.jobs: list[fileops.FileJob] = []
        self.bytes_done = 0
        reader = LayoutReader()
        for src, dst, dst_layout in items:
            job = fileops.FileJob(len(self.jobs), src, dst, 0, 0o644, (0, 0), dst_layout=dst_layout)
            self.jobs.append(job)
            try:
                job.size, job.mode, job.times, job.attrs = fileops.describe(src)
                found = reader.layout(src)
                job.src_layout = found[0] if found else None
            except (OSError, ValueError) as err:
                self.fail(job, err)
        self.total_bytes = sum(j.size for j in self.jobs if j.error is None)
        self.zeros = bytes(MAX_CHUNK)

    # -- failures -------------------------------------------------------------------------------------

    def fail(self, job: fileops.FileJob, err: BaseException | str) -> None:
        with self.lock:
            if job.error is not None:
                return
            text = str(err) if not isinstance(err, OSError) or not err.strerror else \
                f"{err.filename or job.src}: {err.strerror}"
            if job.src not in text and job.dst not in text and (job.tmp or "?") not in text:
                text = f"{job.src}: {text}"
            job.error = text
            self.report.failed.append({"src": job.src, "dst": job.dst, "error": text})
        fileops.discard(job)
        if self.options.on_error:
            self.options.on_error(text)

    # -- placement ------------------------------------------------------------------------------------

    def placer(self, dst: str) -> Placer:
        parent = os.path.dirname(os.path.abspath(dst))
        placer = self._placer_of.get(parent)
        if placer is None:
            policy = "rr" if self.options.naive else self.options.policy
            probe = Placer.for_destination(dst, policy)
            key = (probe.where, str(probe.cluster_file))
            placer = self._placers.setdefault(key, probe)
            self._placer_of[parent] = placer
            if not self.report.placement:
                self.report.placement = f"{placer.where} ({policy})" if placer.active else f"none: {placer.reason}"
        return placer

    def hot_source_osts(self, job: fileops.FileJob) -> set[int]:
        """OSTs of ``job``'s mirrored source that the live view shows hot: less than half the headroom
        (bandwidth less load) of the best OST holding a copy. Read again at most every
        ``LIVE_VIEW_S`` seconds; empty where there is no live view."""
        now = time.monotonic()
        parent = os.path.dirname(os.path.abspath(job.src))
        cached = self._headroom.get(parent)
        if cached is None or now - cached[0] > LIVE_VIEW_S:
            try:
                probe = Placer.for_destination(job.src, "iez")
                view = probe.cluster() if probe.active else None
                room = {o.index: max(0.0, o.bandwidth - o.load) for o in view.osts} if view else {}
            except Exception:  # noqa: BLE001 - no live view: the congestion detector alone decides
                room = {}
            cached = self._headroom[parent] = (now, room)
        room = cached[1]
        osts = {ost for copy in job.src_layout.mirrors for c in copy for ost in c.osts} if job.src_layout else set()
        best = max((room.get(o, 0.0) for o in osts), default=0.0)
        return {o for o in osts if o in room and room[o] < best / 2}

    def measured(self) -> dict[int, float]:
        """Bytes/s of the OSTs found congested, reading or writing (the lower when both)."""
        out = self.write_detector.measured()
        for ost, rate in self.read_detector.measured().items():
            out[ost] = min(rate, out.get(ost, rate))
        return out

    def prepare(self, batch: list[fileops.FileJob]) -> None:
        """Place the batch's destinations that have no layout yet and create them under their temporary names."""
        todo: dict[int, list[fileops.FileJob]] = {}
        placers: dict[int, Placer] = {}
        for job in batch:
            if job.error is not None or job.dst_layout is not None:
                continue
            try:
                placer = self.placer(job.dst)
            except ValueError as err:
                self.fail(job, err)
                continue
            if placer.active:
                todo.setdefault(id(placer), []).append(job)
                placers[id(placer)] = placer
        measured = self.measured() if todo else {}
        chosen: dict[int, Layout | None] = {}
        for pid, jobs in todo.items():
            items = []
            for job in jobs:
                src = job.src_layout
                plain = src if src is not None and not src.components else None
                count = self.options.stripe_count or (plain.stripe_count if plain else 1)
                stripe = plain.stripe_size if plain else MiB
                items.append((job.dst, job.size, count, stripe))
            try:
                layouts = placers[pid].place(items, measured)
            except (OSError, ValueError) as err:  # no live view: copy without placement, say why
                layouts = [None] * len(jobs)
                self.report.placement = f"none: {err}"
            for job, layout in zip(jobs, layouts):
                chosen[job.index] = layout
        for job in batch:
            if job.error is not None:
                continue
            layout = job.dst_layout if job.dst_layout is not None else chosen.get(job.index)
            job.extra["placed"] = job.index in chosen and layout is not None
            try:
                apply = self.placer(job.dst).apply if layout is not None else None
                if layout is not None and self.placer(job.dst).where == "none":
                    from iez.move.placement import apply_emulated as apply
                fileops.create(job, layout, apply)
            except (OSError, ValueError) as err:
                self.fail(job, err)
                continue
            if layout is not None:
                with self.lock:
                    for ost in set(layout.osts):
                        k = _key(ost)
                        self.report.dst_files_per_ost[k] = self.report.dst_files_per_ost.get(k, 0) + 1

    def unplace(self, job: fileops.FileJob) -> None:
        """Forget a destination placed by this movement and not yet written (it is placed again)."""
        fileops.discard(job)
        with self.lock:
            for ost in set(job.dst_layout.osts if job.dst_layout else ()):
                self.report.dst_files_per_ost[_key(ost)] -= 1
            self.report.replaced += 1
        job.dst_layout, job.tmp = None, ""

    def chunks_of(self, job: fileops.FileJob) -> list[Chunk]:
        if job.src_layout is not None and job.src_layout.mirrors:
            chunks = cut_mirrored(job.index, job.size, job.src_layout, self.options.mirror_skip)
        else:
            chunks = cut(job.index, job.size, job.src_layout, DEFAULT_CHUNK)
        job.chunks_left = len(chunks)
        return chunks

    # -- copying --------------------------------------------------------------------------------------

    def copy(self, job: fileops.FileJob, chunk: Chunk, key: int | None, buf: bytearray) -> None:
        """One chunk, timed and counted; a failure fails its file (the others go on)."""
        if job.error is None:
            try:
                read_s, write_s, wrote = fileops.copy_chunk(job, chunk.offset, chunk.length, buf,
                                                            self.options.sparse, self.zeros, chunk.mirror,
                                                            dense=self.options.dense)
            except Exception as err:  # noqa: BLE001 - any failure is this file's, and the others go on
                self.fail(job, err)
            else:
                dst_ost = ost_at(job.dst_layout, chunk.offset)
                if chunk.ost is not None:
                    self.read_detector.record(chunk.ost, read_s, chunk.length)
                if wrote and dst_ost is not None:
                    self.write_detector.record(dst_ost, write_s, chunk.length)
                with self.lock:
                    self.bytes_done += chunk.length
                    job.extra.setdefault("workers", set()).add(threading.get_ident())
                    r = self.report
                    for table, ost in ((r.chunks, key), (r.src_chunks, chunk.ost), (r.dst_chunks, dst_ost)):
                        table[_key(ost)] = table.get(_key(ost), 0) + 1
                    if chunk.mirror is not None:
                        mid = str(chunk.mirror + 1)
                        r.mirror_chunks[mid] = r.mirror_chunks.get(mid, 0) + 1
                    self._add_time("read", chunk.ost, read_s)
                    if wrote:
                        self._add_time("write", dst_ost, write_s)
        self.chunk_done(job)

    def _add_time(self, side: str, ost: int | None, seconds: float) -> None:
        acc = self._time_sums.setdefault((side, _key(ost)), [0.0, 0])
        acc[0] += seconds
        acc[1] += 1

    def chunk_done(self, job: fileops.FileJob) -> None:
        with self.lock:
            job.chunks_left -= 1
            last = job.chunks_left == 0
        if last:
            self.finish(job)

    def finish(self, job: fileops.FileJob) -> None:
        if job.error is None:
            try:
                fileops.finish(job)
            except OSError as err:
                self.fail(job, err)
                return
            with self.lock:
                job.done = True
                self.report.files += 1
                self.report.bytes += job.size
                self.report.files_by_several_workers += len(job.extra.get("workers", ())) > 1
        else:
            fileops.discard(job)

    # -- the run --------------------------------------------------------------------------------------

    def guarded(self, work):
        """``work`` for a worker thread: an unexpected error ends that worker, is kept, and fails the files
        not yet in place (never a copy that exits 0 having copied nothing)."""
        def run(*args) -> None:
            try:
                work(*args)
            except Exception as err:  # noqa: BLE001 - reported with every file it leaves undone
                with self._crash_lock:
                    self.crashes.append(f"{type(err).__name__}: {err}")

        return run

    def run(self, workers: list[threading.Thread]) -> MoveReport:
        from iez.progress import Progress, on_terminal

        show = self.options.progress if self.options.progress is not None else on_terminal()
        bar: Progress | None = None
        shown = 0
        for w in workers:
            w.start()
        try:
            for w in workers:
                while w.is_alive():
                    w.join(0.2)
                    if show and bar is None and time.monotonic() - self.started > PROGRESS_AFTER_S:
                        bar = Progress(f"iez copy ({self.report.mode})", total=self.total_bytes or None,
                                       enabled=True).__enter__()
                    if bar is not None:
                        done = self.bytes_done
                        bar.advance(done - shown)
                        bar.step(f"{done / MiB:,.0f} MiB")
                        shown = done
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)
        r = self.report
        if self.crashes:
            for job in self.jobs:
                if job.error is None and not job.done:
                    job.error = f"{job.src}: not copied: the mover failed ({self.crashes[0][:200]})"
                    r.failed.append({"src": job.src, "dst": job.dst, "error": job.error})
                    if self.options.on_error:
                        self.options.on_error(job.error)
        r.seconds = time.monotonic() - self.started
        r.congested = sorted(self.read_detector.events + self.write_detector.events, key=lambda e: e["at_s"])
        for (side, ost), (total, n) in sorted(self._time_sums.items()):
            r.mean_chunk_s.setdefault(side, {})[ost] = round(total / n, 5)
        return r


class Queues:
    """One queue of chunks per OST, visited round-robin; an OST being served by a worker is passed by."""

    def __init__(self, movement: Movement):
        self.m = movement
        self.cond = threading.Condition()
        self.queues: dict[int | None, deque[Chunk]] = {}
        self.ring: list[int | None] = []
        self.busy: set[int] = set()
        self.unplaced = deque(j for j in movement.jobs if j.error is None)
        self.queued = 0
        self.low_water = LOW_WATER * movement.options.workers
        self.replaced_for: set[int] = set()

    def _ready(self) -> int:
        """Chunks queued on OSTs that are not congested: what keeps the workers busy."""
        avoid = self.m.read_detector.congested() | self.m.write_detector.congested()
        if not avoid:
            return self.queued
        return self.queued - sum(len(q) for key, q in self.queues.items() if key in avoid)

    def _feed(self) -> None:
        """Place and queue the next batch while the workers could run short (under the lock): chunks deferred
        on a congested OST never starve the others, and neither does a deep queue on one OST (one worker
        at a time serves it). An OST newly found congested first sends the files placed on it and not
        started yet elsewhere."""
        congested = self.m.read_detector.congested() | self.m.write_detector.congested()
        new = congested - self.replaced_for
        self.replaced_for = (self.replaced_for & congested) | new
        if new:
            self._place_again(new)
        size = max(BATCH, self.m.options.workers)
        while self.unplaced and self.queued < QUEUE_CAP * self.low_water and (
                self._ready() < self.low_water or self._too_few_osts(congested)):
            batch = [self.unplaced.popleft() for _ in range(min(size, len(self.unplaced)))]
            self.m.prepare(batch)
            self._enqueue(batch)

    def _too_few_osts(self, congested: set[int]) -> bool:
        """Fewer OSTs not congested with a low water of chunks queued than workers (or than such OSTs):
        workers would idle, since two never serve one OST, however deep its queue."""
        clear = [key for key in self.ring if key not in congested]
        healthy = sum(1 for key in clear if len(self.queues[key]) >= LOW_WATER)
        return healthy < min(self.m.options.workers, len(clear))

    def _enqueue(self, batch: list[fileops.FileJob]) -> None:
        for job in batch:
            if job.error is not None:
                continue
            chunks = self.m.chunks_of(job)
            if not chunks:
                self.m.finish(job)
            congested = self.m.read_detector.congested()
            for n, chunk in enumerate(chunks):
                if chunk.alternatives:
                    chunk = self._dispatch(chunk, n, congested | self.m.hot_source_osts(job))
                key = chunk.ost if chunk.ost is not None else ost_at(job.dst_layout, chunk.offset)
                if key not in self.queues:
                    self.queues[key] = deque()
                    self.ring.append(key)
                self.queues[key].append(chunk)
                self.queued += 1

    @staticmethod
    def _dispatch(chunk: Chunk, n: int, avoid: set[int]) -> Chunk:
        """Chunk ``n`` of a mirrored file: dealt in turn to the copies whose OST is clear (neither found
        congested nor hot in the live view), or read from the preferred copy when none is."""
        clear = [a for a in chunk.alternatives if a[1] not in avoid]
        mirror, ost = clear[n % len(clear)] if clear else chunk.alternatives[0]
        return replace(chunk, ost=ost, mirror=mirror)

    @staticmethod
    def _other_copy(chunk: Chunk, avoid: set[int]) -> Chunk | None:
        """The chunk read from another in-sync copy whose OST is not in ``avoid`` (None: there is none)."""
        for mirror, ost in chunk.alternatives:
            if ost not in avoid and ost != chunk.ost:
                return replace(chunk, ost=ost, mirror=mirror)
        return None

    def _skip_to_other_copies(self, key: int) -> None:
        """An OST passed by as congested: its queued chunks that another copy serves from an OST not congested
        go to that OST's queue (CEFT's hot-spot skipping)."""
        avoid = self.m.read_detector.congested() | {key}
        kept: deque[Chunk] = deque()
        for chunk in self.queues[key]:
            other = self._other_copy(chunk, avoid) if chunk.alternatives else None
            if other is None:
                kept.append(chunk)
                continue
            if other.ost not in self.queues:
                self.queues[other.ost] = deque()
                self.ring.append(other.ost)
            self.queues[other.ost].append(other)
        self.queues[key] = kept

    def _place_again(self, osts: set[int]) -> None:
        """Queued files not started whose destination iez placed on one of ``osts``: placed anew."""
        files = {c.file for q in self.queues.values() for c in q}
        again = [self.m.jobs[i] for i in sorted(files)
                 if (job := self.m.jobs[i]).extra.get("placed") and not job.extra.get("started")
                 and job.error is None and job.dst_layout is not None and set(job.dst_layout.osts) & osts]
        if not again:
            return
        ids = {j.index for j in again}
        for key, queue in self.queues.items():
            kept = deque(c for c in queue if c.file not in ids)
            self.queued -= len(queue) - len(kept)
            self.queues[key] = kept
        for job in again:
            self.m.unplace(job)
        self.m.prepare(again)
        self._enqueue(again)

    def take(self, position: list[int]) -> tuple[int | None, Chunk] | None:
        detector = self.m.read_detector
        with self.cond:
            while True:
                self._feed()
                if self.queued == 0:
                    if not self.unplaced:
                        self.cond.notify_all()
                        return None
                    continue
                n = len(self.ring)
                waiting_on_busy = False
                skipped: int | None | bool = False
                for i in range(n):
                    k = (position[0] + i) % n
                    key = self.ring[k]
                    queue = self.queues[key]
                    if not queue:
                        continue
                    if key is not None and key in self.busy:
                        waiting_on_busy = True
                        continue
                    side = detector if key is not None and self._keyed_by_source(queue[0]) else self.m.write_detector
                    if key is not None and side.passes_by(key):
                        if side is detector:
                            self._skip_to_other_copies(key)
                            n = len(self.ring)  # a queue may have been added
                        if skipped is False:
                            skipped = key
                        continue
                    position[0] = k + 1
                    return self._pop(key)
                if skipped is not False and not waiting_on_busy:
                    return self._pop(skipped)  # only congested OSTs left: better slow than idle
                self.cond.wait(0.05)

    def _keyed_by_source(self, chunk: Chunk) -> bool:
        return chunk.ost is not None

    def _pop(self, key: int | None) -> tuple[int | None, Chunk]:
        queue = self.queues[key]
        chunk = queue.popleft()
        self.queued -= 1
        self.m.jobs[chunk.file].extra["started"] = True
        if not queue and not self.unplaced and not self.m.report.mixed_chunks:
            with self.m.lock:  # the first OST queue ran dry with every file queued: the mixed window ends
                self.m.report.mixed_chunks = dict(self.m.report.chunks) or {"none": 0}
        if key is not None:
            self.busy.add(key)
        return key, chunk

    def release(self, key: int | None) -> None:
        with self.cond:
            if key is not None:
                self.busy.discard(key)
            self.cond.notify_all()


def layout_aware(movement: Movement) -> MoveReport:
    queues = Queues(movement)
    buf_size = MAX_CHUNK

    def worker(n: int) -> None:
        buf = bytearray(buf_size)
        position = [n]  # workers start on different OSTs
        while True:
            got = queues.take(position)
            if got is None:
                return
            key, chunk = got
            try:
                movement.copy(movement.jobs[chunk.file], chunk, key, buf)
            finally:
                queues.release(key)

    threads = [threading.Thread(target=movement.guarded(worker), args=(n,), name=f"iez-copy-{n}", daemon=True)
               for n in range(movement.options.workers)]
    return movement.run(threads)


def move(files: Sequence[tuple[str, str, Layout | None]], options: MoveOptions | None = None) -> MoveReport:
    """Copy each ``src`` to ``dst`` (a file path), the destination with ``dst_layout`` or, when None, placed
    by iez (see :mod:`iez.move.placement`). Failures are per file, in ``report.failed``; the rest is copied.
    The caller's environment decides the emulation: under ``IEZ_EMULATE`` run with libiez preloaded (``iez
    copy`` re-executes itself so) or the I/O takes no emulated time."""
    options = options or MoveOptions()
    # the temporaries of dead movers beside the destinations (a live mover's are kept): iez.move.temps
    swept = temps.sweep_beside([dst for _, dst, _ in files]) if options.sweep else None
    movement = Movement(files, options)
    if swept is not None:
        movement.report.temporaries_removed, movement.report.temporaries_kept = swept.removed, swept.kept
    if options.naive:
        from iez.move.naive import file_per_thread

        return file_per_thread(movement)
    return layout_aware(movement)
