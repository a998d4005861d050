"""Bad arguments raise an ArgumentError that names the problem (no GPU needed)."""

import numpy as np
import pytest

from asynccopy import arrays, stream
from asynccopy.device import smem_limits_of_arch
from asynccopy.errors import ArgumentError

make = stream.StreamConfig.make


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mechanism": "dma"}, r"unknown mechanism 'dma'; choose one of: sync, sync_double, ldgsts"),
        ({"mechanism": "ldgsts", "stages": 0}, r"stages must be >= 1, got 0"),
        ({"mechanism": "ldgsts", "stages": -3}, r"stages must be >= 1, got -3"),
        ({"mechanism": "ldgsts", "stages": 17}, r"stages must be <= 16, got 17"),
        ({"mechanism": "ldgsts", "stages": 2.5}, r"stages must be an integer, got 2.5"),
        ({"mechanism": "sync", "stages": 3}, r"mechanism 'sync' has exactly 1 stage\(s\); got stages=3"),
        ({"mechanism": "sync_double", "stages": 4}, r"mechanism 'sync_double' has exactly 2 stage\(s\); got stages=4"),
        ({"mechanism": "ldgsts", "threads": 100}, r"threads must be a multiple of 32 in \[32, 1024\], got 100"),
        ({"mechanism": "ldgsts", "tile": 1000}, r"tile must be a positive multiple of 4 x threads = 1024 elements, got 1000"),
        ({"mechanism": "ldgsts", "tile": 1 << 16}, r"tile / threads = 256 elements per thread exceeds 64"),
        ({"mechanism": "ldgsts", "vec": 2}, r"vec must be one of 4, 8, 16 bytes for 'ldgsts', got 2"),
        ({"mechanism": "ldgsts", "vec": 8, "cache": "cg"}, r"cache='cg' \(L1 bypass\) needs vec=16"),
        ({"mechanism": "ldgsts", "cache": "lu"}, r"cache must be 'ca' or 'cg', got 'lu'"),
        ({"mechanism": "pipeline", "vec": 8}, r"mechanism 'pipeline' takes no vec option"),
        ({"mechanism": "cg", "cache": "ca"}, r"mechanism 'cg' takes no cache option"),
    ],
)
def test_bad_config_is_named(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        make(**kwargs)


def test_defaults():
    cfg = make("ldgsts")
    assert (cfg.vec, cfg.cache) == (16, "cg") and cfg.stages >= 2
    assert make("ldgsts", vec=8).cache == "ca"
    assert make("sync").stages == 1 and make("sync_double").stages == 2
    assert stream.default_stages(4096) == 4  # 3 tiles of 16 KiB behind the current one hold 48 KiB


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_tile_that_cannot_fit_shared_memory(arch):
    per_block, _ = smem_limits_of_arch(arch)
    cfg = make("ldgsts", 16, tile=16384, threads=1024)  # 16 x 64 KiB = 1 MiB
    with pytest.raises(ArgumentError, match=rf"ldgsts with 16 stage\(s\) x tile 16384 floats needs 1024 KiB of shared "
                                            rf"memory per block; {arch} allows {per_block // 1024} KiB"):
        cfg.check_fits(per_block, arch)
    make("ldgsts", 8).check_fits(per_block, arch)  # 128 KiB fits on both


def test_seed_example_a100_double_buffer_does_not_fit():
    # seed 000 §5.2: a double buffer of 128x128 fp32 A and B tiles is 256 KiB; an A100 has 164 KiB
    per_block, _ = smem_limits_of_arch("sm_80")
    cfg = make("ldgsts", 2, tile=2 * 128 * 128, threads=512)
    with pytest.raises(ArgumentError, match=r"needs 256 KiB of shared memory per block; sm_80 allows 163 KiB"):
        cfg.check_fits(per_block, "sm_80")


@pytest.mark.parametrize("value, message", [(-1, r"intensity must be in \[0, 2\^31\), got -1"),
                                            ("2", r"intensity must be an integer")])
def test_bad_intensity(value, message):
    with pytest.raises(ArgumentError, match=message):
        stream.check_intensity(value)


class FakeCudaArray:
    """Just enough of __cuda_array_interface__ v3 to be validated without a GPU."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7F0000000000, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "strides": strides, "data": (ptr, readonly), "version": 3,
        }


@pytest.mark.parametrize(
    "obj, message",
    [
        (np.zeros(8, np.float32), r"x is a host \(NumPy\) array; pass a CUDA array"),
        ([1.0, 2.0], r"x must be a CUDA array speaking DLPack or __cuda_array_interface__, got list"),
        (FakeCudaArray((8,), "<f8"), r"x must be float32, got float64"),
        (FakeCudaArray((8,), "<i4"), r"x must be float32, got int32"),
        (FakeCudaArray((4, 8), strides=(4, 16)), r"x must be C-contiguous; got shape \(4, 8\) with element strides \(1, 4\)"),
        (FakeCudaArray((8,), strides=(8,)), r"x must be C-contiguous; got shape \(8,\) with element strides \(2,\)"),
        (FakeCudaArray((8,), ptr=0x7F0000000004), r"x's data pointer 0x7f0000000004 is not 16-byte aligned"),
    ],
)
def test_bad_array_is_named(obj, message):
    with pytest.raises(ArgumentError, match=message):
        arrays.view(obj, "x")


def test_readonly_output_is_refused():
    with pytest.raises(ArgumentError, match=r"out is read-only"):
        arrays.view(FakeCudaArray((8,), readonly=True), "out", writable=True)


def test_good_fake_array_passes():
    a = arrays.view(FakeCudaArray((4, 8), strides=(32, 4)), "x")
    assert a.size == 32 and a.shape == (4, 8)


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


def test_bench_sweep_skips_shapes_a_family_cannot_take():
    from asynccopy.bench import stream_bench

    # 1024 threads leave no room for producer warps; a 128-float tile does not split over 64 producer threads
    for kwargs in ({"threads": 1024, "tile": 4096}, {"threads": 32, "tile": 128}):
        names = {c.mechanism for c in stream_bench.configs(stages=(2,), **kwargs)}
        assert "ldgsts" in names and "ws_pipeline" not in names
    with pytest.raises(ArgumentError, match=r"'ws_tma' adds 1 producer warp\(s\)"):
        stream_bench.configs(("ws_tma",), stages=(2,), threads=1024, tile=4096)


def test_intensity_range():
    from asynccopy import stream

    with pytest.raises(ArgumentError, match=r"intensity must be in \[0, 2\^31\), got 2147483648"):
        stream.check_intensity(1 << 31)


def test_traces_need_the_persistent_grid():
    from dataclasses import replace

    cfg = replace(stream.StreamConfig.make("ldgsts", 2, tiles_per_block=2), trace=True)
    with pytest.raises(ArgumentError, match=r"traces record a persistent grid's blocks: use tiles_per_block=0"):
        stream.launch(cfg, 0, 0, 4096, 0, stream=None, facts=None, trace_ptr=1)  # refused before any device use


def test_a_block_keeps_its_tile_counter_below_the_exact_division_limit():
    from asynccopy.device import DeviceFacts

    cfg = stream.StreamConfig.make("ldgsts", 4)
    facts = DeviceFacts("fake", (9, 0), "sm_90a", 1, 1 << 17, 1 << 17, 1, 1, 1, 1)
    with pytest.raises(ArgumentError, match=r"536870912 tiles per block: at most 536870911"):
        stream.launch(cfg, 0, 0, 4096 << 29, 0, stream=None, facts=facts)


def test_ws_tma_splits_a_tile_into_whole_chunks_per_producer():
    with pytest.raises(ArgumentError, match=r"ws_tma: each of 3 producer warps copies whole 16-byte chunks: tile "
                                            r"must be a multiple of 12 floats, got 4096"):
        stream.StreamConfig.make("ws_tma", 2, tile=4096, threads=256, producers=3)


def test_contiguous_runs_need_a_grid_the_gpu_can_launch():
    from asynccopy.device import DeviceFacts

    cfg = stream.StreamConfig.make("ldgsts", 2, tiles_per_block=1)
    facts = DeviceFacts("fake", (9, 0), "sm_90a", 1, 1 << 17, 1 << 17, 1, 1, 1, 1)
    with pytest.raises(ArgumentError, match=r"2147483648 tiles in runs of 1 need 2147483648 blocks \(at most 2\^31 - 1\)"):
        stream.launch(cfg, 0, 0, 4096 << 31, 0, stream=None, facts=facts)
