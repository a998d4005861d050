"""`bench --plan`'s measurements on the GPU (asynccopy.bench.model_traces): the baseline's compute per tile
and each variant's own costs, from traced runs."""

import pytest

from asynccopy.bench import model_traces
from asynccopy.bench.stream_bench import Row, StreamBench


@pytest.mark.cc(8, 0)
def test_compute_per_tile_grows_with_the_intensity():
    got = model_traces.measured_compute_ns((0, 4, 16))
    assert sorted(got) == [0, 4, 16]
    assert 0 < got[0] < got[4] < got[16] < 100_000


@pytest.mark.cc(9, 0)  # ws_tma
def test_overheads_from_real_traces():
    """bench --plan's calibration: a variant's own costs, measured from its traces, are sane."""
    rows = [Row("ldgsts", "ldgsts vec16 .cg", 4, 16, "cg", "LDGSTS", 0, 1.0, 1.0, 1.0),
            Row("ws_tma", "ws_tma p1", 4, None, None, "UBLKCP", 0, 1.0, 1.0, 1.0, producers=1),
            Row("pipeline", "pipeline", 4, None, None, "LDGSTS", 0, 1.0, 1.0, 1.0),
            Row("sync", "sync", 1, None, None, "LDG", 0, 1.0, 1.0, 1.0)]  # a fixed stage count is not traced
    lines = []
    ov = model_traces.measured_overheads(StreamBench({}, 1 << 20, 4096, 256, 1, 0.5, 4000.0, rows), 8,
                                        progress=lines.append)
    assert set(ov) == {"ldgsts vec16 .cg", "ws_tma p1", "pipeline"} and len(lines) == 3
    ld, ws = ov["ldgsts vec16 .cg"], ov["ws_tma p1"]
    assert not ld.producer and ws.producer and ld.intensity_hi == ws.intensity_hi == 8
    for o in (ld, ws):
        assert 0 < o.compute_lo < o.compute_hi < 20_000 and 0 < o.issue_ns < 5_000 and 0 <= o.barrier_ns < 5_000
        assert 0 < o.issue_at(0) < 5_000
    assert ws.handoff_ns > 0 and ld.handoff_ns == 0
    for o in ov.values():  # the records of 64 tiles can cost something, never more than a tile's compute
        assert -o.compute_hi / 4 < o.trace_ns < o.compute_hi
    assert ov["pipeline"].issue_first and not ld.issue_first and not ws.issue_first


@pytest.mark.cc(8, 0)
def test_the_traces_own_cost_per_tile_is_timed_against_the_untraced_build():
    from asynccopy import trace
    from asynccopy.bench import trace_cost

    cost = trace_cost.cost_per_tile("ldgsts", 4, intensity=8, tile=1024, threads=256, rounds=2, reps=5)
    _, blocks = trace.run("ldgsts", 4, intensity=8, tile=1024, threads=256, tiles_per_block=trace.MAX_TILES,
                          check_all=False)
    period = (blocks[0].tiles[-1].compute_end - blocks[0].tiles[0].compute_start) / len(blocks[0].tiles)
    assert -period / 4 < cost < period  # a share of the traced period, noise aside
