"""The chunk suite's configurations and crossover (asynccopy.bench.chunks_bench; running it needs a GPU)."""

from dataclasses import replace

import pytest

from asynccopy import device
from asynccopy.bench import chunks_bench
from asynccopy.bench.chunks_bench import ChunkRow
from asynccopy.errors import ArgumentError, DeviceError


@pytest.mark.parametrize("chunk, tile, threads, blocks_per_sm", [
    (512, 128, 32, 16),       # 64 KiB / (4 x 512 B) = 32 blocks per SM, at most 16
    (4096, 1024, 256, 4),     # 64 KiB / 16 KiB
    (16384, 4096, 256, 1),
    (32768, 8192, 256, 1),    # 128 KiB of buffers: still one block
])
def test_both_sides_get_the_same_shape(chunk, tile, threads, blocks_per_sm):
    got = chunks_bench.chunk_configs(chunk)
    assert [cfg.mechanism for cfg, _ in got] == ["ldgsts", "tma_1d_pipeline"]
    for cfg, bps in got:
        assert (cfg.tile, cfg.threads, cfg.stages, bps) == (tile, threads, chunks_bench.CHUNK_STAGES, blocks_per_sm)
        assert cfg.tile * 4 == chunk


def test_another_pair():
    got = chunks_bench.chunk_configs(8192, ("cg", "ws_tma"))
    assert [(cfg.mechanism, cfg.tile, cfg.producers) for cfg, _ in got] == [("cg", 2048, 0), ("ws_tma", 2048, 1)]


def test_a_chunk_that_does_not_split_over_the_threads_is_named():
    with pytest.raises(ArgumentError, match=r"tile must be a positive multiple of 4 x threads = 128 elements, got 25"):
        chunks_bench.chunk_configs(100)


def _rows(gbps_by_chunk, pair=chunks_bench.DEFAULT_PAIR):
    rows = []
    for chunk, speeds in gbps_by_chunk.items():
        rows += [ChunkRow(chunk, m, 256, 4, 1, 1.0, g, 50.0) for m, g in zip(pair, speeds)]
    return rows


@pytest.mark.parametrize("speeds, at", [
    ({512: (1000, 500), 1024: (1200, 900), 4096: (2000, 2100), 8192: (2500, 3000)}, 4096),
    ({512: (1000, 500), 4096: (2000, 2100), 8192: (3000, 2500), 16384: (3000, 3100)}, 16384),  # overtaken again
    ({512: (1000, 1000), 1024: (900, 1000)}, 512),  # a tie counts as overtaken
    ({512: (1000, 500), 1024: (1200, 900)}, None),  # never
])
def test_crossover_is_where_tma_stays_ahead(speeds, at):
    assert chunks_bench.crossover(_rows(speeds)) == at


def test_crossover_of_another_pair():
    pair = ("cg", "ws_tma")
    rows = _rows({1024: (900, 1000), 2048: (1000, 1100)}, pair)
    assert chunks_bench.crossover(rows, pair) == 1024
    assert chunks_bench.crossover(rows, pair[::-1]) is None  # cg never overtakes ws_tma


def test_the_suite_needs_a_hopper(monkeypatch):
    monkeypatch.setattr(device, "current", lambda device_id=None: replace(device.KNOWN["A100-80GB"], device_id=0))
    with pytest.raises(DeviceError, match=r"^the LDGSTS / TMA chunk sweep needs compute capability 9.0 or newer; "
                                          r"A100-80GB is 8.0$"):
        chunks_bench.run((4096,))
