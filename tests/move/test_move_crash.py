"""A worker of the mover that meets an unexpected error fails the files it leaves undone, loudly: a copy never
ends with exit status 0 having copied nothing."""

from __future__ import annotations

import pytest

from iez.move import MoveOptions, move
from iez.move import mover

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("naive", [False, True])
def test_a_crashing_worker_fails_the_files_it_leaves(tmp_path, monkeypatch, naive):
    src = tmp_path / "src"
    src.write_bytes(b"x" * 4096)
    lines: list[str] = []

    def broken(self, job, chunk, key, buf):
        raise RuntimeError("a bug in the copy")

    monkeypatch.setattr(mover.Movement, "copy", broken)
    report = move([(str(src), str(tmp_path / "dst"), None)],
                  MoveOptions(naive=naive, workers=2, progress=False, on_error=lines.append))
    assert [f["src"] for f in report.failed] == [str(src)]
    assert "the mover failed (RuntimeError: a bug in the copy)" in report.failed[0]["error"]
    assert lines == [report.failed[0]["error"]]
    assert not (tmp_path / "dst").exists()
