"""Helpers shared by the tests of the learning phase."""

from __future__ import annotations

from datetime import datetime, timezone

from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.stats import OssReport, OstReport, ingest


def add_cluster(db: str, osts: int = 6) -> None:
    engine = make_engine(database_url(db))
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    with write_session(engine) as session:
        for oss in range(2):
            ingest(session, OssReport(f"oss{oss}", 1, now, 10.0, 20.0, [
                OstReport(f"fs-OST{i:04x}", i, 100 * 2**20, 90 * 2**20) for i in range(oss, osts, 2)]))
    engine.dispose()
