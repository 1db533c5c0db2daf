"""The mover's parts without processes: chunks follow the stripes (composite layouts too) and the congestion
detector marks, skips and takes up an OST as seed 000's W/T/M rule (with the probe) says."""

from __future__ import annotations

from iez.layout.model import Layout
from iez.model import EOF_END, Component
from iez.move.chunks import MAX_CHUNK, MiB, cut, ost_at
from iez.move.congestion import Detector, Settings


def test_chunks_are_stripes_on_their_osts():
    chunks = cut(0, 5 * MiB + 10, Layout(MiB, (3, 7)))
    assert [(c.offset, c.length, c.ost) for c in chunks] == [
        (0, MiB, 3), (MiB, MiB, 7), (2 * MiB, MiB, 3), (3 * MiB, MiB, 7), (4 * MiB, MiB, 3), (5 * MiB, 10, 7)]
    assert cut(0, 0, Layout(MiB, (1,))) == []
    # no layout: 1 MiB pieces on no OST
    assert [(c.length, c.ost) for c in cut(1, 2 * MiB + 1, None)] == [(MiB, None), (MiB, None), (1, None)]
    # a stripe larger than MAX_CHUNK is moved in pieces, each still on its OST
    big = cut(0, 64 * MiB, Layout(64 * MiB, (2, 5)))
    assert all(c.length <= MAX_CHUNK and c.ost == 2 for c in big) and sum(c.length for c in big) == 64 * MiB


def test_composite_layout_chunks_follow_each_component():
    layout = Layout.from_components([Component(0, 2 * MiB, 1, MiB, None, (4,)),
                                     Component(2 * MiB, EOF_END, 2, 2 * MiB, None, (0, 6))])
    chunks = cut(0, 7 * MiB, layout)
    assert [(c.offset // MiB, c.length // MiB, c.ost) for c in chunks] == [
        (0, 1, 4), (1, 1, 4), (2, 2, 0), (4, 2, 6), (6, 1, 0)]
    assert ost_at(layout, 5 * MiB) == 6 and ost_at(None, 0) is None


def test_detector_marks_on_the_mean_over_the_sides_last_w_chunks_skips_m_picks_and_probes():
    d = Detector(Settings(window=4, threshold_s=0.05, skip=3), "read")
    d.record(1, 0.02, MiB)
    d.record(2, 0.02, MiB)
    d.record(1, 0.07, MiB)  # OST 1's mean over the window: 0.045, within T
    assert d.congested() == set()
    d.record(1, 0.2, MiB)  # 0.0967 over its three chunks of the last four: marked
    assert d.congested() == {1} and d.events[-1]["congested"]
    assert abs(d.measured()[1] - 3 * MiB / 0.29) < 1
    assert [d.passes_by(1) for _ in range(4)] == [True, True, True, False]  # M = 3 picks, then a probe
    d.record(1, 0.3, MiB)  # the probe is slow: passed by twice as long
    assert d.congested() == {1} and sum(d.passes_by(1) for _ in range(8)) == 6
    d.record(1, 0.3, MiB)  # slow again: four times M
    assert sum(d.passes_by(1) for _ in range(20)) == 12
    d.record(1, 0.01, MiB)  # a probe within T: taken up again at once, and the back-off is forgotten
    assert d.congested() == set() and not d.passes_by(1) and not d.events[-1]["congested"]
    d.record(1, 0.2, MiB)  # the mean of its chunks in the window (0.3, 0.3, 0.01, 0.2) is over T: marked anew
    assert d.congested() == {1} and sum(d.passes_by(1) for _ in range(10)) == 3


def test_detector_window_spans_every_ost_so_old_times_age_out():
    d = Detector(Settings(window=4, threshold_s=0.05, skip=3), "read")
    for _ in range(3):
        d.record(1, 0.02, MiB)
    d.record(1, 0.2, MiB)  # one slow chunk among four: mean 0.065, marked
    assert d.congested() == {1}
    d.record(1, 0.01, MiB)  # recovered
    for ost in (2, 3, 2, 3):  # four chunks elsewhere: OST 1's times have left the window
        d.record(ost, 0.02, MiB)
    d.record(1, 0.06, MiB)  # its only chunk in the window is slow: marked at once
    assert d.congested() == {1}
    # a fast OST is never marked, however many chunks it serves
    for _ in range(10):
        d.record(2, 0.02, MiB)
    assert 2 not in d.congested() and not d.passes_by(2)


def test_detector_judges_chunks_larger_than_a_mib_per_mib():
    d = Detector(Settings(window=4, threshold_s=0.05, skip=3), "read")
    for _ in range(4):
        d.record(1, 0.1, 4 * MiB)  # 4 MiB at 40 MiB/s: 25 ms per MiB, an idle OST
    assert d.congested() == set()
    d.record(2, 0.6, 4 * MiB)  # 150 ms per MiB
    assert d.congested() == {2} and abs(d.measured()[2] - 4 * MiB / 0.6) < 1
    d.record(3, 0.04, 64 * 1024)  # a small chunk is judged by its own time: within T
    assert 3 not in d.congested()
