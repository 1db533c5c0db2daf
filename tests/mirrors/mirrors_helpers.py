"""Random clusters with failure domains, and the checks the mirror tests share."""

from __future__ import annotations

from hypothesis import strategies as st

from iez.model import OSS, OST, ClusterState, WriteRequest

GiB = 1 << 30


@st.composite
def clusters(draw, racks: bool | None = None) -> ClusterState:
    """2 to 8 OSSs of 1 to 4 OSTs each; with ``racks`` (drawn when None) OSSs share a ``domain`` by pairs or threes."""
    n_oss = draw(st.integers(2, 8))
    grouped = draw(st.booleans()) if racks is None else racks
    per_rack = draw(st.integers(2, 3)) if grouped else 1
    osses, osts = [], []
    for s in range(n_oss):
        domain = f"rack{s // per_rack}" if grouped else ""
        osses.append(OSS(f"oss{s}", bandwidth=draw(st.sampled_from([400.0, 600.0, 1200.0])) * (1 << 20),
                         domain=domain))
        for _ in range(draw(st.integers(1, 4))):
            total = 64 * GiB // 1024
            load = draw(st.sampled_from([0.0, 0.0, 50.0, 150.0])) * (1 << 20)
            osts.append(OST(len(osts), f"oss{s}", total, total, load=load))
    return ClusterState.build(osts, osses)


@st.composite
def batches(draw, cluster: ClusterState) -> list[WriteRequest]:
    n = draw(st.integers(1, 24))
    out = []
    for i in range(n):
        out.append(WriteRequest("app", f"/f/{i}", draw(st.integers(1, 4)) * GiB // 8, draw(st.integers(1, 3)),
                                rank=i, mirror_count=draw(st.sampled_from([1, 2, 2, 3]))))
    return out
