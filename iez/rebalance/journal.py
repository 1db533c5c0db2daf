"""The apply journal: what happened to each move, durable before the next step, so a killed run resumes.

One JSON object per line, appended and ``fsync``ed: first ``{"plan": SHA256}``
(the plan's bytes: a journal is never reused for another plan), then per file
``start`` (about to copy), ``copied`` (the copy is durable; its ``ino``),
``done`` (renamed over the original) or ``skipped`` (with its ``reason``). The
last record of a file says where it stands. A last line without its newline is
a write the kill cut short and is ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

START, COPIED, DONE, SKIPPED = "start", "copied", "done", "skipped"


class Journal:
    def __init__(self, path: str | Path, plan_sha256: str):
        self.path = Path(path)
        self.last: dict[str, dict] = {}
        lines = []
        try:
            data = self.path.read_bytes()
            lines = data.split(b"\n")[:-1]  # after the last newline: empty or cut short
            if data and not data.endswith(b"\n"):
                os.truncate(self.path, data.rfind(b"\n") + 1)  # the next record starts on a line of its own
        except FileNotFoundError:
            pass
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                raise ValueError(f"{self.path}: line {number} is not a journal record") from None
            if "plan" in record:
                if record["plan"] != plan_sha256:
                    raise ValueError(f"{self.path}: the journal of another plan (give --journal a new file)")
                continue
            self.last[record["file"]] = record
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if not lines:
            self._append({"plan": plan_sha256})

    def _append(self, record: dict) -> None:
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        os.fsync(self._fd)

    def record(self, file: str, event: str, **data) -> None:
        record = {"file": file, "event": event, **data}
        self._append(record)
        self.last[file] = record

    def state(self, file: str) -> dict | None:
        return self.last.get(file)

    def close(self) -> None:
        os.close(self._fd)
