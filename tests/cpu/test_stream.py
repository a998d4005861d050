"""asynccopy.stream without a GPU: a configuration's checks (each error names the problem), its names,
the planner's default stage count, the launch's own checks, and the float64 reference."""

from dataclasses import replace

import numpy as np
import pytest

from asynccopy import device, stream
from asynccopy.device import smem_limits_of_arch
from asynccopy.errors import ArgumentError

make = stream.StreamConfig.make


def _live(table_name="H200", **changes):
    """A table entry dressed as a live device (device_id 0)."""
    return replace(device.lookup(table_name), device_id=0, **changes)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mechanism": "dma"}, r"unknown mechanism 'dma'; choose one of: sync, sync_double, ldgsts, pipeline"),
        ({"mechanism": "ldgsts", "stages": 0}, r"stages must be >= 1, got 0"),
        ({"mechanism": "ldgsts", "stages": -3}, r"stages must be >= 1, got -3"),
        ({"mechanism": "ldgsts", "stages": 17}, r"stages must be <= 16, got 17"),
        ({"mechanism": "ldgsts", "stages": 2.5}, r"stages must be an integer, got 2.5"),
        ({"mechanism": "ldgsts", "stages": True}, r"stages must be an integer, got True"),
        ({"mechanism": "sync", "stages": 3}, r"mechanism 'sync' has exactly 1 stage\(s\); got stages=3"),
        ({"mechanism": "sync_double", "stages": 4}, r"mechanism 'sync_double' has exactly 2 stage\(s\); got stages=4"),
        ({"mechanism": "ldgsts", "threads": 100}, r"threads must be a multiple of 32 in \[32, 1024\], got 100"),
        ({"mechanism": "ldgsts", "threads": 2048}, r"threads must be a multiple of 32 in \[32, 1024\], got 2048"),
        ({"mechanism": "ldgsts", "tile": 1000}, r"tile must be a positive multiple of 4 x threads = 1024 elements, got 1000"),
        ({"mechanism": "ldgsts", "tile": 0}, r"tile must be a positive multiple of 4 x threads = 1024 elements, got 0"),
        ({"mechanism": "ldgsts", "tile": 1 << 16}, r"tile / threads = 256 elements per thread exceeds 64"),
        ({"mechanism": "ldgsts", "vec": 2}, r"vec must be one of 4, 8, 16 bytes for 'ldgsts', got 2"),
        ({"mechanism": "ldgsts", "vec": 8, "cache": "cg"}, r"cache='cg' \(L1 bypass\) needs vec=16"),
        ({"mechanism": "ldgsts", "cache": "lu"}, r"cache must be one of 'ca', 'cg', got 'lu'"),
        ({"mechanism": "pipeline", "vec": 8}, r"mechanism 'pipeline' takes no vec option"),
        ({"mechanism": "cg", "cache": "ca"}, r"mechanism 'cg' takes no cache option"),
        ({"mechanism": "ldgsts", "producers": 1}, r"mechanism 'ldgsts' takes no producers option$"),
        ({"mechanism": "tma_2d", "producers": 2}, r"mechanism 'tma_2d' takes no producers option \(it has 1 producer warp\)"),
        ({"mechanism": "ws_ldgsts", "producers": 9}, r"producers must be a number of warps in \[1, 8\], got 9"),
        ({"mechanism": "ws_ldgsts", "producers": 0}, r"producers must be a number of warps in \[1, 8\], got 0"),
        ({"mechanism": "ldgsts", "tiles_per_block": -1}, r"tiles_per_block must be 0 \(a persistent grid\) or a run length"),
        ({"mechanism": "ldgsts", "tiles_per_block": (1 << 20) + 1}, r"or a run length in \[1, 2\^20\], got 1048577"),
    ],
)
def test_bad_config_is_named(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        make(**kwargs)


def test_defaults():
    cfg = make("ldgsts")
    assert (cfg.stages, cfg.vec, cfg.cache, cfg.producers) == (4, 16, "cg", 0)
    assert (make("ldgsts", vec=8).vec, make("ldgsts", vec=8).cache) == (8, "ca")  # .cg is for 16-byte copies only
    assert (make("barrier").vec, make("barrier").cache) == (16, None)
    assert make("sync").stages == 1 and make("sync_double").stages == 2 and make("tma_1d").stages == 1
    assert make("ws_tma", 2).producers == 1 and make("ws_ldgsts", 2).producers == 2
    assert make("tma_1d_pipeline", 2).producers == 1  # its producer warp is not an option, but it is there


@pytest.mark.parametrize("tile, stages", [(4096, 4), (16384, 2), (1024, 13)])
def test_default_stages_keep_the_h200s_bytes_in_flight(tile, stages):
    # an H200 needs 48 KiB in flight per SM (Little's law), one block per SM: 48 KiB / tile bytes prefetched
    assert stream.default_stages(tile) == stages == 1 + -(-48 * 1024 // (4 * tile))


def test_run_asks_the_planner_for_the_live_device():
    cfg = make("ldgsts")
    h200 = _live("H200", name="NVIDIA H200")
    assert stream.planned_stages(cfg, h200, blocks_per_sm=1) == 4
    assert stream.planned_stages(cfg, h200, blocks_per_sm=4) == 2  # 4 blocks x 16 KiB prefetched >= 48 KiB
    big = make("ldgsts", tile=16384, threads=512)
    assert stream.planned_stages(big, h200, blocks_per_sm=1) == 2  # one 64 KiB tile in flight covers 48 KiB
    assert stream.planned_stages(cfg, _live("A100-40GB"), blocks_per_sm=1) == 2  # an A100 needs 16 KiB


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_tile_that_cannot_fit_shared_memory(arch):
    per_block, _ = smem_limits_of_arch(arch)
    cfg = make("ldgsts", 16, tile=16384, threads=1024)  # 16 x 64 KiB = 1 MiB
    with pytest.raises(ArgumentError, match=rf"ldgsts with 16 stage\(s\) x tile 16384 floats needs 1024 KiB of shared "
                                            rf"memory per block; {arch} allows {per_block // 1024} KiB"):
        cfg.check_fits(per_block, arch)
    make("ldgsts", 8).check_fits(per_block, arch)  # 128 KiB fits on both


def test_the_barriers_reserve_counts_against_the_limit():
    cfg = make("ldgsts", 2)  # 32 KiB of buffers + 1 KiB reserved
    cfg.check_fits(33 * 1024, "here")
    with pytest.raises(ArgumentError, match=r"here allows 33 KiB \(less 1024 B for barriers\)"):
        cfg.check_fits(33 * 1024 - 1, "here")


def test_seed_example_a100_double_buffer_does_not_fit():
    # seed 000 §5.2: a double buffer of 128x128 fp32 A and B tiles is 256 KiB; an A100 has 164 KiB
    per_block, _ = smem_limits_of_arch("sm_80")
    cfg = make("ldgsts", 2, tile=2 * 128 * 128, threads=512)
    with pytest.raises(ArgumentError, match=r"needs 256 KiB of shared memory per block; sm_80 allows 163 KiB"):
        cfg.check_fits(per_block, "sm_80")


def test_names_and_labels():
    assert make("ldgsts", 2, vec=8).name_expression() == "stream_ldgsts<256, 4096, 2, 8, false>"
    assert make("ldgsts", 2).name_expression(7) == "stream_ldgsts<256, 4096, 7, 16, true>"
    assert make("barrier", 2).name_expression() == "stream_barrier<256, 4096, 2, 16>"
    assert make("sync").name_expression() == "stream_sync<256, 4096>"
    assert make("ws_tma", 3).name_expression() == "stream_ws_tma<1, 256, 4096, 3>"
    assert [make(*a, **k).label() for a, k in [(("ws_tma", 2), {}), (("ldgsts", 2), {"vec": 8}), (("barrier", 2), {}),
                                               (("pipeline", 2), {"tiles_per_block": 3})]] == \
        ["ws_tma p1", "ldgsts vec8 .ca", "barrier vec16", "pipeline 3/block"]


def test_producer_warps_are_checked_and_counted_in_the_block():
    cfg = make("ws_ldgsts", 2, threads=256, producers=3, tile=3 * 1024)
    assert cfg.block == 256 + 96 and cfg.label() == "ws_ldgsts p3"
    assert cfg.name_expression() == "stream_ws_ldgsts<3, 256, 3072, 2>"
    assert make("tma_1d_pipeline", 2).block == 256 + 32
    with pytest.raises(ArgumentError, match=r"the tile's 1024 16-byte chunks must split evenly over 96 producer"):
        make("ws_ldgsts", 2, producers=3)
    with pytest.raises(ArgumentError, match=r"adds 8 producer warp\(s\): threads \+ 256 must be <= 1024"):
        make("ws_tma", 2, threads=1024, tile=4096, producers=8)
    with pytest.raises(ArgumentError, match=r"'tma_1d_pipeline' adds 1 producer warp\(s\): threads \+ 32 must be <= 1024"):
        make("tma_1d_pipeline", 2, threads=1024, tile=4096)


def test_ws_tma_splits_a_tile_into_whole_chunks_per_producer():
    with pytest.raises(ArgumentError, match=r"ws_tma: each of 3 producer warps copies whole 16-byte chunks: tile "
                                            r"must be a multiple of 12 floats, got 4096"):
        make("ws_tma", 2, tile=4096, threads=256, producers=3)
    assert make("ws_tma", 2, tile=4608, threads=192, producers=3).producers == 3


def test_tma_2d_tile_rule():
    with pytest.raises(ArgumentError, match=r"tma_2d loads a tile as a box of rows of 64 floats: tile must be a "
                                            r"multiple of 64 and at most 256 rows \(16384 floats\), got 32768"):
        make("tma_2d", 2, tile=32768, threads=512)


@pytest.mark.parametrize("arch, ok", [("sm_80", False), ("sm_90a", True), ("sm_90", True), ("sm_100a", True)])
def test_compiles_for_follows_the_mechanisms_compute_capability(arch, ok):
    assert make("tma_1d").compiles_for(arch) is ok
    assert make("ldgsts").compiles_for(arch)


def test_a_config_below_its_arch_is_refused_before_compiling():
    with pytest.raises(ArgumentError, match=r"mechanism 'ws_tma' needs compute capability 9.0; sm_80 is below it"):
        make("ws_tma", 2).compile("sm_80")


def test_expected_sass_follows_the_record():
    assert make("barrier", 2, vec=16).expected_sass("sm_90a") == "UBLKCP"
    assert make("barrier", 2, vec=16).expected_sass("sm_80") == "LDGSTS"
    assert make("barrier", 2, vec=8).expected_sass("sm_90a") == "LDGSTS"
    assert make("tma_2d", 2).expected_sass("sm_90a") == "UTMALDG"
    assert make("sync").expected_sass("sm_90a") is None


# ---------------------------------------------------------------------------------------------
# The launch's own checks (before any device use) and run()'s


@pytest.mark.parametrize("value, message", [(-1, r"intensity must be in \[0, 2\^31\), got -1"),
                                            (1 << 31, r"intensity must be in \[0, 2\^31\), got 2147483648"),
                                            ("2", r"intensity must be an integer")])
def test_bad_intensity(value, message):
    with pytest.raises(ArgumentError, match=message):
        stream.check_intensity(value)
    assert stream.check_intensity(np.int64(3)) == 3


def test_bad_blocks_per_sm():
    with pytest.raises(ArgumentError, match=r"blocks_per_sm must be >= 1, got 0"):
        stream.check_blocks_per_sm(0)


def test_traces_need_their_buffer_and_the_persistent_grid():
    with pytest.raises(ArgumentError, match=r"a traced kernel needs a trace buffer \(trace_ptr\)"):
        stream.launch(replace(make("ldgsts"), trace=True), 0, 0, 10, 0, stream=None, facts=_live())
    cfg = replace(make("ldgsts", 2, tiles_per_block=2), trace=True)
    with pytest.raises(ArgumentError, match=r"traces record a persistent grid's blocks: use tiles_per_block=0"):
        stream.launch(cfg, 0, 0, 4096, 0, stream=None, facts=None, trace_ptr=1)


def test_nothing_to_do_launches_nothing():
    stream.launch(make("ldgsts"), 0, 0, 0, 0, stream=None, facts=None)  # would fail on any device use


def test_a_block_keeps_its_tile_counter_below_the_exact_division_limit():
    one_sm = _live(sm_count=1)
    with pytest.raises(ArgumentError, match=r"536870912 tiles per block: at most 536870911"):
        stream.launch(make("ldgsts", 4), 0, 0, 4096 << 29, 0, stream=None, facts=one_sm)


def test_contiguous_runs_need_a_grid_the_gpu_can_launch():
    with pytest.raises(ArgumentError, match=r"2147483648 tiles in runs of 1 need 2147483648 blocks \(at most 2\^31 - 1\)"):
        stream.launch(make("ldgsts", 2, tiles_per_block=1), 0, 0, 4096 << 31, 0, stream=None, facts=_live())


def test_tma_2d_needs_a_row_of_64_floats():
    # the record's launch_args build the tensor map before the kernel is looked up
    with pytest.raises(ArgumentError, match=r"tma_2d views the array as rows of 64 floats and needs n >= 64, got n=63"):
        stream.launch(make("tma_2d", 2), 0, 0, 63, 0, stream=None, facts=_live())


@pytest.mark.parametrize("kwargs, message", [({"mechanism": "dma"}, "unknown mechanism 'dma'"),
                                             ({"intensity": -2}, r"intensity must be in \[0, 2\^31\), got -2"),
                                             ({"blocks_per_sm": 0}, "blocks_per_sm must be >= 1, got 0"),
                                             ({"producers": 2}, "mechanism 'ldgsts' takes no producers option")])
def test_run_checks_its_arguments_before_any_device_use(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        stream.run(object(), **kwargs)


# ---------------------------------------------------------------------------------------------
# The reference


def test_reference_is_a_copy_at_intensity_zero_and_pads_with_zeros():
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    assert np.array_equal(stream.reference(x, 0, 4096), x)
    # with intensity > 0 the last (partial) tile mixes in zeros, not wrapped data
    y = stream.reference(x, 1, 4096)
    nv, nb = 1024, 513
    v = np.zeros((2, nv, 4))
    v.reshape(-1)[:5000] = x
    want = v[1, 0] * 0.5 + v[1, nb]
    for _ in range(4):
        want = want * 0.9375 + 0.0625
    assert np.allclose(y[4096:4100], want)
    assert y.shape == x.shape and stream.reference(x.reshape(50, 100), 1, 4096).shape == (50, 100)


def test_reference_rounds_by_hand():
    # a tile of 8 floats: 2 float4s, the neighbour of float4 v in round k is (v + k * 2) mod 2 = v itself
    x = np.arange(8, dtype=np.float32)
    acc = x.astype(np.float64)
    for _ in range(2):
        acc = acc * 0.5 + x
        for _ in range(4):
            acc = acc * 0.9375 + 0.0625
    assert np.allclose(stream.reference(x, 2, 8), acc, rtol=0, atol=1e-12)


def test_matches_reference_is_exact_at_zero_and_catches_unwritten_outputs():
    x = np.random.default_rng(3).uniform(-1, 1, 5000).astype(np.float32)
    assert stream.matches_reference(x.copy(), x, 0, 4096)
    off = x.copy()
    off[17] = np.nextafter(off[17], np.float32(2))
    assert not stream.matches_reference(off, x, 0, 4096)  # one ulp is a failure for a copy
    y = stream.reference(x, 2, 4096).astype(np.float32)
    assert stream.matches_reference(y, x, 2, 4096)
    y[4999] = np.nan
    assert not stream.matches_reference(y, x, 2, 4096)
    z = stream.reference(x, 2, 4096).astype(np.float32)
    z[0] *= 1.001
    assert not stream.matches_reference(z, x, 2, 4096)
