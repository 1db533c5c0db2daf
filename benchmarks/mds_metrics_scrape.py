"""Cost of one scrape of the MDS's /metrics (iez.mds.metrics) for a view of N OSTs on M OSSs: the time the
HTTP thread holds the interpreter while it renders, and the body size Prometheus stores per scrape.

    python benchmarks/mds_metrics_scrape.py [--osts 1000] [--oss 125] [--scrapes 20]
"""

from __future__ import annotations

import argparse
import time
import types

from prometheus_client import generate_latest

from iez.mds.metrics import MdsMetrics
from iez.mds.service import Counters
from iez.mds.view import ClusterView, OssState, OstState


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--osts", type=int, default=1000, help="OSTs in the view (default 1000)")
    parser.add_argument("--oss", type=int, default=125, help="OSSs they are spread over (default 125)")
    parser.add_argument("--scrapes", type=int, default=20, help="scrapes timed (default 20)")
    args = parser.parse_args()
    view, now = ClusterView(), time.time()
    per = max(1, args.osts // args.oss)
    for s in range(args.oss):
        indices = range(s * per, min(args.osts, (s + 1) * per))
        view.osses[f"oss{s}"] = OssState(f"oss{s}", 1, now, now, 60.0, 1.0, 1.0, tuple(indices))
        for i in indices:
            view.osts[i] = OstState(i, f"fs-OST{i:04x}", f"oss{s}", 10**9, 5 * 10**8)
    service = types.SimpleNamespace(view=view, counters=Counters(), started=now, engine=None,  # no DB: no reservations
                                    config=types.SimpleNamespace(curve_secret_key=None, insecure=True))
    metrics = MdsMetrics(service)
    start = time.perf_counter()
    for _ in range(args.scrapes):
        body = generate_latest(metrics.registry)
    ms = (time.perf_counter() - start) / args.scrapes * 1000
    print(f"{len(view.osts)} OSTs on {args.oss} OSS: {ms:.1f} ms per scrape, {len(body) / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
