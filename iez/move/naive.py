"""The paper's baseline (seed 000, IV.B-C): file per thread, no layout awareness.

One global queue of files; each worker takes the next file and copies it whole, chunk after chunk in
offset order, before it takes another. Destinations are placed round-robin (Lustre's ``rr``
allocator, blind to load), the "file-per-server" sink. The copy code, the chunk size and the
figures are the mover's own (:mod:`iez.move.mover`), so the two differ only in scheduling and placement.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

from iez.move.chunks import MAX_CHUNK

if TYPE_CHECKING:  # iez.move.mover imports this module
    from iez.move.mover import MoveReport


def file_per_thread(movement) -> MoveReport:
    todo = deque(j for j in movement.jobs if j.error is None)
    lock = threading.Lock()

    def worker() -> None:
        buf = bytearray(MAX_CHUNK)
        while True:
            with lock:
                if not todo:
                    return
                job = todo.popleft()
                movement.prepare([job])
            if job.error is not None:
                continue
            chunks = movement.chunks_of(job)
            if not chunks:
                movement.finish(job)
            for chunk in chunks:
                movement.copy(job, chunk, chunk.ost, buf)

    threads = [threading.Thread(target=movement.guarded(worker), name=f"iez-copy-{n}", daemon=True)
               for n in range(movement.options.workers)]
    return movement.run(threads)
