"""Every tile-stream mechanism on the GPU: bit-exact copies, float64-referenced arithmetic."""

import numpy as np
import pytest

import asynccopy
from asynccopy import mechanism, stream
from tests.gpu.conftest import check_stream_output, require_cc

STAGES = (1, 2, 3, 4, 8)
TILE = 4096
SIZES = ("one", "partial_float4", "one_tile", "few_tiles", "many_tiles")


def _cases():
    for name, opts in mechanism.variants():
        mech = mechanism.get(name)
        tag = "-".join(f"{k}{v}" for k, v in opts.items())
        for s in [mech.fixed_stages] if mech.fixed_stages else STAGES:
            yield pytest.param(name, opts, s, id=f"{name}{'-' + tag if tag else ''}-s{s}")


def _size(label, facts):
    return {
        "one": 1,
        "partial_float4": 1003,  # smaller than a tile, not a multiple of 4
        "one_tile": TILE,
        "few_tiles": 3 * TILE + 5,
        "many_tiles": facts.sm_count * TILE * 3 + TILE + 2,  # several tiles per persistent block
    }[label]


def _check(got, host, intensity, tile=TILE):
    check_stream_output(got, host, intensity, tile)


@pytest.mark.parametrize("intensity", [0, 3])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name, opts, stages", list(_cases()))
def test_mechanism_matches_reference(any_xp, facts, rng, name, opts, stages, size, intensity):
    require_cc(facts, mechanism.get(name).min_cc)
    n = _size(size, facts)
    x, host = any_xp.rand(n, rng)
    out = any_xp.nan(n)
    if name == "tma_2d" and n < 64:
        with pytest.raises(asynccopy.ArgumentError, match=r"tma_2d views the array as rows of 64 floats and needs n >= 64"):
            asynccopy.run(x, name, stages=stages, intensity=intensity, tile=TILE, out=out, **opts)
        return
    y = asynccopy.run(x, name, stages=stages, intensity=intensity, tile=TILE, out=out, **opts)
    assert y is out
    any_xp.sync()
    _check(any_xp.to_numpy(y), host, intensity)


@pytest.mark.cc(8, 0)
def test_output_is_the_callers_kind_and_shape(xp, rng):
    x, host = xp.rand((64, 1000), rng)
    y = asynccopy.run(x, "ldgsts", stages=3)
    assert type(y) is type(x) and tuple(y.shape) == (64, 1000)
    xp.sync()
    _check(xp.to_numpy(y), host, 0)


@pytest.mark.cc(8, 0)
def test_runs_on_the_callers_stream(xp, rng):
    x, host = xp.rand(1 << 20, rng)
    if xp.name == "cupy":
        s = xp.mod.cuda.Stream(non_blocking=True)
        with s:
            y = asynccopy.run(x, "pipeline", stages=4, intensity=2)
        s.synchronize()
    else:
        s = xp.mod.cuda.Stream()
        s.wait_stream(xp.mod.cuda.current_stream())
        with xp.mod.cuda.stream(s):
            y = asynccopy.run(x, "pipeline", stages=4, intensity=2)
        s.synchronize()
    _check(xp.to_numpy(y), host, 2)


@pytest.mark.cc(8, 0)
def test_jax_arrays_in_and_out(rng):
    jnp = pytest.importorskip("jax.numpy")
    import jax

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    host = rng.uniform(-1, 1, 50_003).astype(np.float32)
    x = jax.device_put(jnp.asarray(host), jax.devices("gpu")[0])
    y = asynccopy.run(x, "ldgsts", stages=4, intensity=1)
    assert isinstance(y, jax.Array)
    _check(np.asarray(y), host, 1)


@pytest.mark.cc(8, 0)
@pytest.mark.parametrize("stages, tile, threads, blocks_per_sm", [(12, 4096, 256, 1), (3, 8192, 512, 2), (5, 2048, 128, 3)])
def test_other_shapes(any_xp, facts, rng, stages, tile, threads, blocks_per_sm):
    n = facts.sm_count * tile * 2 + 77
    x, host = any_xp.rand(n, rng)
    y = asynccopy.run(x, "ldgsts", stages=stages, intensity=2, tile=tile, threads=threads,
                      blocks_per_sm=blocks_per_sm, out=any_xp.nan(n))
    any_xp.sync()
    _check(any_xp.to_numpy(y), host, 2, tile)


@pytest.mark.cc(8, 0)
def test_largest_buffer_opts_into_shared_memory(any_xp, facts, rng):
    # as many 16 KiB stages as the device allows: far above the 48 KB default
    stages = min(stream.MAX_STAGES, (facts.smem_per_block_optin - 1024) // (TILE * 4))
    assert stages * TILE * 4 > 48 * 1024
    n = facts.sm_count * TILE * 4 + 9
    x, host = any_xp.rand(n, rng)
    y = asynccopy.run(x, "primitives", stages=stages, out=any_xp.nan(n))
    any_xp.sync()
    _check(any_xp.to_numpy(y), host, 0)


@pytest.mark.cc(8, 0)
def test_too_large_for_this_device_is_named(any_xp, facts, rng):
    x, _ = any_xp.rand(1024, rng)
    with pytest.raises(asynccopy.ArgumentError, match=rf"needs \d+ KiB of shared memory per block; {facts.name} allows"):
        asynccopy.run(x, "ldgsts", stages=16, tile=16384, threads=1024)


@pytest.mark.cc(8, 0)
def test_wrong_output_size_is_named(any_xp, rng):
    x, _ = any_xp.rand(1000, rng)
    with pytest.raises(asynccopy.ArgumentError, match=r"out has 999 elements, x has 1000"):
        asynccopy.run(x, "ldgsts", out=any_xp.nan(999))


@pytest.mark.cc(8, 0)
def test_empty_input(any_xp):
    x = any_xp.nan(0)
    y = asynccopy.run(x, "ldgsts")
    assert tuple(y.shape) == (0,)


@pytest.mark.parametrize("name, producers, threads, tile, stages", [
    ("ws_ldgsts", 4, 128, 8192, 3), ("ws_tma", 3, 192, 4608, 4), ("ws_pipeline", 1, 512, 8192, 2),
    ("ws_tma", 8, 256, 4096, 2), ("ws_ldgsts", 1, 64, 1024, 6), ("ws_pipeline", 4, 256, 4096, 5),
])
@pytest.mark.parametrize("intensity", [0, 2])
def test_warp_specialized_splits(any_xp, facts, rng, name, producers, threads, tile, stages, intensity):
    require_cc(facts, mechanism.get(name).min_cc)
    n = facts.sm_count * tile * 2 + tile // 3 + 1  # several tiles per block and a ragged last tile
    x, host = any_xp.rand(n, rng)
    y = asynccopy.run(x, name, stages=stages, intensity=intensity, tile=tile, threads=threads, producers=producers,
                      out=any_xp.nan(n))
    any_xp.sync()
    _check(any_xp.to_numpy(y), host, intensity, tile)


def _runs_cases():
    for n, o in mechanism.variants():  # every mechanism with runs of 2; the TMA pipeline with 1 and 5 too
        for t in ((1, 2, 5) if n == "tma_1d_pipeline" else (2,)):
            yield pytest.param(n, o, t, id=f"{n}-{'-'.join(f'{k}{v}' for k, v in o.items())}-runs{t}")


@pytest.mark.parametrize("name, opts, tiles_per_block", list(_runs_cases()))
def test_contiguous_tile_runs(any_xp, facts, rng, name, opts, tiles_per_block):
    mech = mechanism.get(name)
    require_cc(facts, mech.min_cc)
    stages = mech.fixed_stages or 3
    n = facts.sm_count * TILE * 3 + 2 * TILE + 7  # more blocks than SMs, and a ragged last tile
    x, host = any_xp.rand(n, rng)
    for intensity in (0, 3):
        y = asynccopy.run(x, name, stages=stages, intensity=intensity, tile=TILE, tiles_per_block=tiles_per_block,
                          out=any_xp.nan(n), **opts)
        any_xp.sync()
        _check(any_xp.to_numpy(y), host, intensity)
