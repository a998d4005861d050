"""Traced runs on the GPU: the copy of tile k+1 overlaps the compute of tile k in a multi-stage
pipeline, and never in `sync`."""

import pytest

from asynccopy import trace


@pytest.mark.parametrize("mechanism, stages", [("ldgsts", 4), ("pipeline", 3), ("sync_double", None)])
def test_multi_stage_copies_overlap_compute(mechanism, stages):
    _, blocks = trace.run(mechanism, stages, intensity=8, tiles_per_block=16)
    block = blocks[0]
    assert len(block.tiles) == 16
    hits = trace.overlapping(block.tiles)
    assert len(hits) >= 12, f"only tiles {hits} overlap the next copy"


def test_sync_never_overlaps():
    _, blocks = trace.run("sync", intensity=8, tiles_per_block=16)
    for block in blocks[:8]:
        assert trace.overlapping(block.tiles) == []


@pytest.mark.parametrize("mechanism", ["ws_tma", "ws_ldgsts"])
def test_warp_specialized_kernels_trace(mechanism):
    _, blocks = trace.run(mechanism, 4, intensity=8, tiles_per_block=16, producers=1)
    assert len(blocks[0].tiles) == 16
    assert len(trace.overlapping(blocks[0].tiles)) >= 12


def test_overheads_from_real_traces():
    """bench --plan's calibration: a variant's own costs, measured from its traces, are sane."""
    from asynccopy.bench import model_check
    from asynccopy.bench.stream_bench import Row, StreamBench

    rows = [Row("ldgsts", "ldgsts vec16 .cg", 4, 16, "cg", "LDGSTS", 0, 1.0, 1.0, 1.0),
            Row("ws_tma", "ws_tma p1", 4, None, None, "UBLKCP", 0, 1.0, 1.0, 1.0, producers=1),
            Row("pipeline", "pipeline", 4, None, None, "LDGSTS", 0, 1.0, 1.0, 1.0)]
    ov = model_check.measured_overheads(StreamBench({}, 1 << 20, 4096, 256, 1, 0.5, 4000.0, rows), 8)
    ld, ws = ov["ldgsts vec16 .cg"], ov["ws_tma p1"]
    assert not ld.producer and ws.producer
    for o in (ld, ws):
        assert 0 < o.compute_lo < o.compute_hi < 20_000 and 0 < o.issue_ns < 5_000 and 0 <= o.barrier_ns < 5_000
        assert 0 < o.issue_at(0) < 5_000
    assert ws.handoff_ns > 0 and ld.handoff_ns == 0
    assert ov["pipeline"].issue_first and not ld.issue_first and not ws.issue_first
