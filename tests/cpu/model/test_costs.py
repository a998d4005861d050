"""A kernel's own costs fitted from synthetic traces (asynccopy.model.costs): compute, issue, the cost
between computes and a producer's handoff, and the KernelCosts they hand the simulator."""

from dataclasses import replace

import pytest

from asynccopy import trace
from asynccopy.errors import ArgumentError
from asynccopy.model import KernelCosts
from asynccopy.model.costs import Overheads, overheads_from_traces
from asynccopy.model.simulate import TileEvents


def _trace(tiles):
    """One block's trace: (issued, ready, compute_start, compute_end) per tile, in tile order."""
    return [trace.BlockTrace(0, [TileEvents(0, k, *t) for k, t in enumerate(tiles)], {}, 1.0)]


def test_overheads_of_threads_that_issue_their_own_copies():
    # 2 stages: tile k + 1 is issued 10 ns before tile k's compute starts; computes are 15 ns apart
    starts = [1000 + 115 * k for k in range(6)]
    hi = _trace([(starts[k - 1] - 10 if k else 0, s - 1, s, s + 100) for k, s in enumerate(starts)])
    lo = _trace([(10 * k - 13 if k else 0, 0, 10 * k, 10 * k + 40) for k in range(4)])  # issues 3 ns at intensity 0
    ov = overheads_from_traces(lo, hi, stages=2, intensity_hi=24, producer=False)
    assert (ov.compute_lo, ov.compute_hi, ov.issue_ns, ov.barrier_ns) == (40, 100, 10, 5)  # 15 between, less 10
    assert ov.issue_lo_ns == 3 and ov.issue_at(12) == 6.5 and ov.issue_at(0) == 3 and ov.issue_at(24) == 10
    assert ov.compute_ns(12) == 70 and ov.compute_ns(0) == 40 and not ov.producer and ov.handoff_ns == 0


def test_overheads_of_a_producer_warp():
    # 3 stages: the producer fills them 30 ns apart; then computes 20 ns apart
    starts = [500 + 120 * k for k in range(8)]
    hi = _trace([(30 * k if k < 3 else s - 200, s - 1, s, s + 100) for k, s in enumerate(starts)])
    ov = overheads_from_traces(hi, hi, stages=3, intensity_hi=8, producer=True)
    assert (ov.issue_ns, ov.barrier_ns, ov.producer) == (30, 20, True)  # a producer's barrier is the whole gap
    assert ov.handoff_ns == 120 * 3 - 200 - 100  # tile k + 3 issued 200 ns before its compute, 3 computes on


def test_overheads_of_a_producer_that_falls_behind():
    # 2 stages; the producer issues a tile every 300 ns (100 at intensity 0), never waiting for a
    # buffer: its spacing is its cost, and it was never idle when a buffer came free (no handoff)
    def run(spacing, compute):
        return _trace([(spacing * k, spacing * k + 50, spacing * k + 60, spacing * k + 60 + compute) for k in range(20)])

    ov = overheads_from_traces(run(100, 20), run(300, 100), stages=2, intensity_hi=24, producer=True, issue_first=False)
    assert (ov.issue_lo_ns, ov.issue_ns, ov.handoff_ns, ov.barrier_ns) == (100, 300, 0, 200)
    assert ov.issue_at(12) == 200 and ov.costs(12).issue_ns == 200 and ov.costs(24).issue_ns == 300
    assert ov.costs(0) == KernelCosts(issue_ns=100, barrier_ns=200, producer=True, handoff_ns=0, issue_first=False,
                                      solo_issue_ns=100)
    assert ov.costs(24).solo_issue_ns == 100  # one stage issues as at intensity 0, nothing computing beside it


def test_handoff_is_measured_where_the_producer_waits_briefly():
    # 2 stages; the producer refills a buffer 30 ns after its release at intensity 0, 500 ns after it
    # at the top (it waited a whole compute there): the two-stage critical path sees the first
    def run(period, compute, handoff):
        tiles = []
        for k in range(12):
            start = period * k + 60
            issued = (0, 10)[k] if k < 2 else period * (k - 2) + 60 + compute + handoff
            tiles.append((issued, start - 1, start, start + compute))
        return _trace(tiles)

    ov = overheads_from_traces(run(200, 100, 30), run(1100, 1000, 500), stages=2, intensity_hi=24, producer=True)
    assert ov.issue_ns == ov.issue_lo_ns == 10 and ov.handoff_ns == 30
    assert ov.costs(5) == KernelCosts(issue_ns=10, barrier_ns=ov.barrier_ns, producer=True, handoff_ns=30,
                                      solo_issue_ns=10)


def test_issue_first_kernels_time_their_issue_where_the_data_is_there():
    # cuda::pipeline's order: `issued` of tile k + 1, then the wait for tile k, then its compute; at
    # intensity 0 the wait (300 ns) falls inside that span, at the top the data is there (10 ns)
    def run(period, wait):
        return _trace([(period * (k - 1) + 50 if k else 0, period * k + 49, period * k + 50 + wait,
                        period * k + 100 + wait) for k in range(10)])

    ov = overheads_from_traces(run(400, 300), run(400, 10), stages=2, intensity_hi=24, producer=False,
                               issue_first=True)
    assert ov.issue_lo_ns == ov.issue_ns == 10 and ov.issue_first
    assert ov.costs(0).issue_first and not ov.costs(0).producer


def test_an_old_calibration_without_issue_at_intensity_0_keeps_one_issue_time():
    ov = Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)
    assert ov.issue_at(0) == ov.issue_at(8) == 120.0 and not ov.issue_first
    assert ov.costs(0) == KernelCosts(issue_ns=120.0, barrier_ns=20.0, solo_issue_ns=120.0)


def test_compute_between_the_two_runs_and_beyond():
    ov = Overheads(100.0, 900.0, 8, 50.0, 10.0, False, issue_lo_ns=30.0)
    assert [ov.compute_ns(k) for k in (0, 2, 8, 16)] == [100.0, 300.0, 900.0, 1700.0]  # linear, extrapolated
    assert [ov.issue_at(k) for k in (0, 4, 8)] == [30.0, 40.0, 50.0]
    flat = Overheads(100.0, 900.0, 0, 50.0, 10.0, False, issue_lo_ns=30.0)  # no high run: intensity 0's figures
    assert flat.compute_ns(8) == 100.0 and flat.issue_at(8) == 30.0


def test_as_dict_round_trips():
    ov = Overheads(150.0, 1500.0, 8, 120.0, 20.0, True, 30.0, 90.0, False)
    assert Overheads(**ov.as_dict()) == ov
    assert ov.as_dict()["handoff_ns"] == 30.0 and ov.as_dict()["issue_lo_ns"] == 90.0


def test_the_traces_own_cost_comes_off_the_compute_at_every_intensity():
    ov = Overheads(100.0, 900.0, 8, 50.0, 30.0, False, issue_lo_ns=30.0, trace_ns=20.0)
    quiet = ov.untraced()
    assert (quiet.compute_lo, quiet.compute_hi, quiet.compute_ns(4), quiet.trace_ns) == (80.0, 880.0, 480.0, 0.0)
    assert (quiet.barrier_ns, quiet.issue_ns, quiet.issue_lo_ns) == (30.0, 50.0, 30.0)  # left as traced
    assert replace(ov, trace_ns=500.0).untraced().compute_lo == 0.0  # never below nothing
    assert replace(ov, trace_ns=-5.0).untraced() == replace(ov, trace_ns=0.0)  # noise below zero costs nothing
    assert Overheads(100.0, 900.0, 8, 50.0, 30.0, False).untraced() == Overheads(100.0, 900.0, 8, 50.0, 30.0, False)


def test_overheads_need_enough_traced_tiles():
    few = _trace([(0, 1, 2, 3), (1, 4, 5, 6)])
    with pytest.raises(ArgumentError, match=r"the traces hold no issue records: trace more tiles per block "
                                            r"\(at least 6\)"):
        overheads_from_traces(few, few, stages=4, intensity_hi=8, producer=False)
