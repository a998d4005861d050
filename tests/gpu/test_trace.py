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
