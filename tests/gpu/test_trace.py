"""Traced runs on the GPU: the copy of tile k+1 overlaps the compute of tile k in a multi-stage
pipeline, and never in `sync`."""

import pytest

from asynccopy import mechanism, trace
from tests.gpu.conftest import require_cc


@pytest.mark.parametrize("name, stages", [("ldgsts", 4), ("pipeline", 3), ("sync_double", None), ("tma_2d", 3)])
def test_multi_stage_copies_overlap_compute(facts, name, stages):
    require_cc(facts, mechanism.get(name).min_cc)
    cfg, blocks = trace.run(name, stages, intensity=8, tiles_per_block=16)
    assert cfg.trace and cfg.stages == (stages or 2)
    block = blocks[0]
    assert len(block.tiles) == 16 and len(blocks) == facts.sm_count
    hits = trace.overlapping(block.tiles)
    assert len(hits) >= 12, f"only tiles {hits} overlap the next copy"
    t = block.tiles[5]
    assert t.issued <= t.ready <= t.compute_start < t.compute_end  # one time axis, in ns


def test_sync_never_overlaps():
    _, blocks = trace.run("sync", intensity=8, tiles_per_block=16)
    for block in blocks[:8]:
        assert trace.overlapping(block.tiles) == []


@pytest.mark.parametrize("name", [pytest.param("ws_tma", marks=pytest.mark.cc(9, 0)),
                                  pytest.param("ws_ldgsts", marks=pytest.mark.cc(8, 0))])
def test_warp_specialized_kernels_trace(name):
    _, blocks = trace.run(name, 4, intensity=8, tiles_per_block=16, producers=1)
    assert len(blocks[0].tiles) == 16
    assert len(trace.overlapping(blocks[0].tiles)) >= 12


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_trace_events_come_in_order(causal, head_dim, tmp_path):
    pytest.importorskip("torch")
    from asynccopy import attention_trace

    cfg, blocks = attention_trace.run(batch=1, heads=4, q_len=1000, k_len=1500, head_dim=head_dim, causal=causal,
                                      stages=2)
    assert cfg.trace and cfg.kernel == "wgmma" and len(blocks) == -(-1000 // cfg.tile[0]) * 4
    block = blocks[0]
    # a column per consumer warpgroup: as many as the launch model gives this one-wave problem (two at 64 here:
    # 32 blocks of 128 queries finish before 24 of 192)
    from asynccopy import device
    from asynccopy.attention_kernels import KERNELS
    from asynccopy.attention_schedule import consumers_for_problem

    want = consumers_for_problem(KERNELS["wgmma"], head_dim, 1000, 1500, 4, 1, causal, device.current().sm_count)
    assert block.tiles() >= 2 and len(block.consumers) == cfg.consumers == want == 2
    for tiles in block.consumers:
        for t in tiles:
            issued = block.k_issued[t.tile]
            assert issued <= t.k_ready <= t.s_done <= t.softmax_done <= t.pv_done
            assert block.v_issued[t.tile] <= t.v_ready <= t.pv_done
    med = attention_trace.summary(block)
    assert all(v >= 0 for v in med.values())
    pytest.importorskip("matplotlib")
    attention_trace.timeline_png(block, str(tmp_path / "a.png"), stages=cfg.stages, head_dim=head_dim, keys=cfg.keys)
