"""Every kernel the package ships, once, on a small input: what `scripts/sanitize.sh` runs under each
compute-sanitizer tool (memcheck, racecheck, synccheck, initcheck). Inputs end in a partial tile, so
the boundary paths run too; every result is checked, so a tool that perturbs timing cannot hide a
wrong answer. Run alone: `python -m pytest tests/gpu -m sanitize`."""

import numpy as np
import pytest

from asynccopy import mechanism, stream
from asynccopy.buffers import Scratch
from tests.gpu.conftest import require_cc

pytestmark = pytest.mark.sanitize

TILE, THREADS = 1024, 128
N = 5 * TILE + 7  # five whole tiles and a partial one


def _variants():
    for name, opts in mechanism.variants():
        mech = mechanism.get(name)
        for stages in ([mech.fixed_stages] if mech.fixed_stages else [1, 3]):
            label = "-".join(f"{k}{v}" for k, v in opts.items())
            yield pytest.param(name, opts, stages, id=f"{name}-{label}-s{stages}".replace("--", "-"))


@pytest.fixture(scope="module")
def scratch(facts):
    from cuda.core import Device

    s = Device(facts.device_id).create_stream()
    yield Scratch(s, facts)
    s.close()


@pytest.mark.parametrize("name, opts, stages", list(_variants()))
def test_tile_stream_kernel(scratch, facts, name, opts, stages):
    require_cc(facts, mechanism.get(name).min_cc)
    cfg = stream.StreamConfig.make(name, stages, tile=TILE, threads=THREADS, **opts)
    x, y = scratch.alloc(N), scratch.alloc(N)
    try:
        scratch.fill_random(x, N, seed=7)
        host = scratch.to_host(x, N)
        for intensity in (0, 2):
            scratch.fill_value(y, N, float("nan"))
            stream.launch(cfg, int(x.handle), int(y.handle), N, intensity, stream=scratch.stream, facts=facts)
            assert stream.matches_reference(scratch.to_host(y, N), host, intensity, TILE), f"intensity {intensity}"
    finally:
        x.close()
        y.close()


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.mark.cc(9, 0)  # TMA
def test_tma_box_load_and_store(cupy):
    from asynccopy import swizzle, tma

    host = np.arange(40 * 64, dtype=np.uint16).reshape(40, 64)
    x = cupy.asarray(host)
    got = tma.load_box(x, (16, 64), (32, 0), swizzle="128B")  # hangs off the end: zero-filled rows
    want = np.zeros((16, 64), np.uint16)
    want[:8] = host[32:]
    assert np.array_equal(swizzle.undo(got, want.nbytes, "128B").view(np.uint16).reshape(16, 64), want)
    y = cupy.zeros((40, 64), dtype=cupy.uint16)
    tma.store_box(y, (16, 64), (8, 0), swizzle.apply(want, "128B"), swizzle="128B")
    assert np.array_equal(cupy.asnumpy(y)[8:24], want)


@pytest.mark.cc(9, 0)  # TMA
def test_tma_bulk_round_trip_and_device_edited_maps(cupy):
    from asynccopy import tma

    x = cupy.arange(3 * 4096 + 12, dtype=cupy.float32)
    # the output poisoned first: initcheck does not count bytes written by TMA bulk stores as initialized
    # (docs/design.md, compute-sanitizer), so an output left uninitialized before the kernel is reported
    y = cupy.full(x.shape, cupy.nan, dtype=cupy.float32)
    tma.scale_bulk(x, chunk=4096, out=y)
    assert np.array_equal(cupy.asnumpy(y), 2 * cupy.asnumpy(x))
    tensors = [cupy.random.rand(20, 40, dtype=cupy.float32), cupy.random.rand(17, 64, dtype=cupy.float32)]
    got = tma.walk(tensors, (16, 32))
    for g, t in zip(got, tensors):
        assert np.array_equal(g, cupy.asnumpy(t)[:16, :32])


@pytest.mark.cc(9, 0)  # st.async and clusters
@pytest.mark.parametrize("via", ["dsmem", "global"])
def test_stas_ring(via):
    from asynccopy import stas

    r = stas.ring(2, 1024, 4, via=via, slots=2, clusters=2)
    assert r.errors == 0 and np.array_equal(r.last, stas.expected_last(r))


@pytest.mark.parametrize("kernel", ["wgmma", "mma", "simt"])
@pytest.mark.parametrize("ldc", [136, 137])  # C rows 544 bytes apart (TMA stores) and 548 (register stores)
@pytest.mark.parametrize("k", [72, 1000])  # 1000: wgmma splits k in two (4 tiles, 16 k-blocks) and sums
def test_gemm(cupy, facts, kernel, ldc, k):
    from asynccopy import matmul

    rec = matmul.KERNELS[kernel]
    require_cc(facts, rec.min_cc)
    dtype = np.float32 if "float32" in rec.dtypes else np.float16
    rng = np.random.default_rng(ldc)
    m, n = 130, 136  # partial tiles in every dimension
    a = cupy.asarray(rng.standard_normal((m, k)).astype(dtype))
    b = cupy.asarray(rng.standard_normal((k, n)).astype(dtype))
    out = cupy.full((m, ldc), np.nan, dtype=np.float32)[:, :n]
    matmul.gemm(a, b, out=out, kernel=kernel, stages=2, out_dtype="float32")
    ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
    got = cupy.asnumpy(out)
    assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max()


@pytest.mark.parametrize("tile, a_mn, b_mn", [((128, 256), False, True), ((128, 256), True, True),
                                             ((256, 128), True, False), ((256, 128), False, False)],
                         ids=["128x256-nn", "128x256-tn", "256x128-tt", "256x128-nt"])
def test_gemm_simt_wide_tiles(cupy, facts, tile, a_mn, b_mn):
    """gemm_simt's 8 x 16 and 16 x 8 register blocks, each operand either major, partial tiles every way."""
    from asynccopy import matmul

    rng = np.random.default_rng(tile[0] + 2 * a_mn + b_mn)
    m, n, k = 300, 270, 37
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ga = cupy.asfortranarray(cupy.asarray(a)) if a_mn else cupy.asarray(a)
    gb = cupy.asarray(b) if b_mn else cupy.asfortranarray(cupy.asarray(b))
    out = cupy.full((m, n), np.nan, dtype=np.float32)
    matmul.gemm(ga, gb, out=out, kernel="simt", tile=tile, stages=3)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(cupy.asnumpy(out) - ref).max() < 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("stream_k", [False, True], ids=["whole", "stream_k"])
def test_gemm_default_pairs(cupy, facts, stream_k):
    """The default of a large product whose B rows are on 128-byte lines, on a small one (B's rows 896 bytes apart):
    128 x 256 tiles as cluster pairs sharing B, 3 stages, four staging buffers a consumer (the whole 64 x 256 block
    stored after one wait), an odd last pair (3 x 3 tiles), with and without the pairs' units shared out by stream-K
    (16 k-blocks a unit)."""
    from dataclasses import replace

    from cuda.core import Stream

    from asynccopy import gemm_kernels, matmul

    require_cc(facts, (9, 0))
    rng = np.random.default_rng(7)
    m, n, k = 300, 448, 1000
    a = cupy.asarray(rng.standard_normal((m, k)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((k, n)).astype(np.float16))
    out = cupy.full((m, n), np.nan, dtype=np.float16)
    stream = Stream.from_handle(cupy.cuda.get_current_stream().ptr)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = replace(matmul.configure(ma, mb, "float16", facts, kernel="wgmma", tile=(128, 256)), splits=1)
    cfg = replace(gemm_kernels.paired_config(cfg, ma, mb, facts), stream_k=stream_k)
    assert cfg.stages == 3 and gemm_kernels.epi_bufs_of(cfg) == 4
    matmul.launch(cfg, ma, mb, out.data.ptr, n, stream=stream, facts=facts)
    stream.sync()
    ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
    assert np.abs(cupy.asnumpy(out).astype(np.float64) - ref).max() < 2e-2 * np.abs(ref).max()


@pytest.mark.parametrize("share", ["0", "1"], ids=["share_a", "share_b"])
@pytest.mark.parametrize("stream_k", [False, True], ids=["whole", "stream_k"])
@pytest.mark.parametrize("epi_bufs", [2, 4], ids=["bufs2", "bufs4"])
def test_gemm_cluster_pairs(cupy, facts, share, stream_k, epi_bufs):
    """gemm_wgmma in clusters of two sharing A or B by multicast, with an odd last pair either way (3 x 3 tiles);
    with stream-K, 16 k-blocks a unit and its pieces shared among up to 24 pairs (4 pieces a unit); C through two
    staging buffers a consumer or four (the whole block at once)."""
    from dataclasses import replace

    from cuda.core import Stream

    from asynccopy import matmul

    require_cc(facts, (9, 0))
    rng = np.random.default_rng(int(share))
    m, n, k = 300, 264, 1000 if stream_k else 200  # B's and C's rows 528 bytes apart: off the 128-byte lines
    a = cupy.asarray(rng.standard_normal((m, k)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((k, n)).astype(np.float16))
    out = cupy.full((m, n), np.nan, dtype=np.float16)
    stream = Stream.from_handle(cupy.cuda.get_current_stream().ptr)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = replace(matmul.configure(ma, mb, "float16", facts, kernel="wgmma", tile=(128, 128), stages=2),
                  defines=((matmul.CLUSTER_KNOB, 2), (matmul.SHARE_KNOB, share), (matmul.EPI_BUFS_KNOB, epi_bufs)),
                  splits=1, stream_k=stream_k)
    matmul.launch(cfg, ma, mb, out.data.ptr, n, stream=stream, facts=facts)
    stream.sync()
    ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
    assert np.abs(cupy.asnumpy(out).astype(np.float64) - ref).max() < 2e-2 * np.abs(ref).max()


@pytest.mark.parametrize("bulk", [0, 1], ids=["st_async", "bulk_copy"])
def test_gemm_pairs_splitting_k(cupy, facts, bulk):
    """gemm_wgmma's pairs splitting each tile's k-blocks (PAIR_K): block 1's accumulators into block 0 by st.async
    or bulk copies; 81 tiles of 128 x 128 over at most 66 resident pairs, so that exchange buffers are handed back
    and reused."""
    from dataclasses import replace

    from cuda.core import Stream

    from asynccopy import matmul

    require_cc(facts, (9, 0))
    rng = np.random.default_rng(3)
    m, n, k = 1100, 1040, 200  # 9 x 9 tiles, 4 k-blocks: 2 a block
    a = cupy.asarray(rng.standard_normal((m, k)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((k, n)).astype(np.float16))
    out = cupy.full((m, n), np.nan, dtype=np.float16)
    stream = Stream.from_handle(cupy.cuda.get_current_stream().ptr)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = matmul.configure(ma, mb, "float16", facts, kernel="wgmma", tile=(128, 128), stages=2)
    cfg = matmul.pair_k_config(cfg, facts, stages=2)
    cfg = replace(cfg, defines=cfg.defines + ((matmul.PAIR_BULK_KNOB, bulk),))
    matmul.launch(cfg, ma, mb, out.data.ptr, n, stream=stream, facts=facts)
    stream.sync()
    ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
    assert np.abs(cupy.asnumpy(out).astype(np.float64) - ref).max() < 2e-2 * np.abs(ref).max()


def _attention64(cupy, q, k, v, causal):
    """SDPA in float64 on the host: (batch, heads, seq, head_dim), key/value heads dividing the query heads,
    the causal mask aligned top left."""
    q64, k64, v64 = (cupy.asnumpy(x).astype(np.float64) for x in (q, k, v))
    group, (lq, lk) = q.shape[1] // k.shape[1], (q.shape[2], k.shape[2])
    s = np.einsum("bhqd,bhkd->bhqk", q64, np.repeat(k64, group, 1)) / np.sqrt(q.shape[3])
    if causal:
        s = np.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ np.repeat(v64, group, 1)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["consumers3", "persistent", "obuffer", "rows32"])
def test_attention_variants(cupy, facts, causal, variant):
    """At head dim 64: wgmma with three consumer warpgroups (long problems' build; the launch model gives small
    ones two, which test_attention below runs); wgmma's persistent build on a grid of 2 blocks for 4 units, so
    each block takes a second unit (O staged in a K/V stage that TMA refills next, or in its own buffer whose stores
    are waited for at the next unit's epilogue; Q handed back and reloaded);
    mma with 32 rows a warp (Q in shared memory of its own)."""
    from cuda.core import Stream

    from asynccopy import sdpa as att
    from asynccopy.attention_kernels import VARIANTS

    kernel = "mma" if variant == "rows32" else "wgmma"
    require_cc(facts, (9, 0) if kernel == "wgmma" else (8, 0))
    rng = np.random.default_rng(3 + causal)
    b, h, hkv, lq, lk, d = 1, 2, 1, 250, 200, 64  # two query tiles of 192, the second partial
    q, k, v = (cupy.asarray(rng.standard_normal((b, hh, s, d)).astype(np.float16))
               for hh, s in ((h, lq), (hkv, lk), (hkv, lk)))
    out = cupy.full((b, h, lq, d), np.nan, dtype=np.float16)
    stream = Stream.from_handle(cupy.cuda.get_current_stream().ptr)
    tq, tk, tv, to = (att.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v), ("out", out)))
    p = att.check_inputs(tq, tk, tv)
    cfg = att.configure(p, facts, kernel=kernel, stages=2, causal=causal).with_variant(VARIANTS[kernel][variant],
                                                                                       facts.smem_per_block_optin)
    if variant in ("persistent", "obuffer"):
        assert cfg.persistent and cfg.o_buffer == (variant == "obuffer")
        att.launch(cfg, p, tq, tk, tv, to, 0, 1.0 / np.sqrt(d), stream=stream, facts=facts, blocks=2)
    else:
        assert (cfg.consumers, cfg.threads) == ((3, 512) if kernel == "wgmma" else (None, 128))
        att.launch(cfg, p, tq, tk, tv, to, 0, 1.0 / np.sqrt(d), stream=stream, facts=facts)
    stream.sync()
    assert np.abs(cupy.asnumpy(out).astype(np.float64) - _attention64(cupy, q, k, v, causal)).max() < 2e-2


@pytest.mark.parametrize("kernel", ["wgmma", "mma"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_attention(cupy, facts, kernel, causal, d):
    from asynccopy.sdpa import KERNELS, attention

    require_cc(facts, KERNELS[kernel].min_cc)
    rng = np.random.default_rng(d + causal)
    b, h, hkv, lq, lk = 1, 2, 1, 150, 200  # partial query and key tiles, grouped heads
    q, k, v = (cupy.asarray(rng.standard_normal((b, hh, s, d)).astype(np.float16))
               for hh, s in ((h, lq), (hkv, lk), (hkv, lk)))
    out = cupy.full((b, h, lq, d), np.nan, dtype=np.float16)
    attention(q, k, v, out=out, causal=causal, kernel=kernel, stages=2)
    assert np.abs(cupy.asnumpy(out).astype(np.float64) - _attention64(cupy, q, k, v, causal)).max() < 2e-2


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", [3, 4])
def test_attention_mma_overlap(cupy, facts, causal, stages):
    """The mma kernel's head dim 128 build: the next key tile's scores beside this tile's fold (the ring keeping tile
    t + 1 landed) at 4 stages (the default) and 3 (causal: the 64-query build), over 10 key tiles so that the ring
    turns several times; partial tiles, grouped heads."""
    from cuda.core import Stream

    from asynccopy import sdpa as att
    from asynccopy.attention_kernels import MMA_OVERLAP_KNOB

    require_cc(facts, att.KERNELS["mma"].min_cc)
    rng = np.random.default_rng(11 + causal)
    b, h, hkv, lq, lk, d = 1, 2, 1, 600, 600, 128
    q, k, v = (cupy.asarray(rng.standard_normal((b, hh, s, d)).astype(np.float16))
               for hh, s in ((h, lq), (hkv, lk), (hkv, lk)))
    out = cupy.full((b, h, lq, d), np.nan, dtype=np.float16)
    stream = Stream.from_handle(cupy.cuda.get_current_stream().ptr)
    tq, tk, tv, to = (att.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v), ("out", out)))
    p = att.check_inputs(tq, tk, tv)
    cfg = att.configure(p, facts, kernel="mma", stages=stages, causal=causal)
    assert dict(cfg.defines).get(MMA_OVERLAP_KNOB) == 1, cfg.defines  # the launch's build at head dim 128
    att.launch(cfg, p, tq, tk, tv, to, 0, 1.0 / np.sqrt(d), stream=stream, facts=facts)
    stream.sync()
    assert np.abs(cupy.asnumpy(out).astype(np.float64) - _attention64(cupy, q, k, v, causal)).max() < 2e-2


@pytest.mark.parametrize("m, n, k", [(1100, 1000, 200), (200, 304, 2000)], ids=["rest_and_a_wave", "few_tiles"])
def test_gemm_stream_k(cupy, facts, m, n, k):
    """gemm_wgmma sharing the last tiles' k-blocks among all blocks: contributors' partials and flags, the
    owners' waits and sums (144 tiles of 128 x 64, all in the region; and 4 tiles of 128 x 256 in 8 pieces)."""
    from dataclasses import replace

    from cuda.core import Stream

    from asynccopy import matmul

    require_cc(facts, (9, 0))
    rng = np.random.default_rng(m)
    a = cupy.asarray(rng.standard_normal((m, k)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((k, n)).astype(np.float16))
    out = cupy.full((m, n), np.nan, dtype=np.float32)
    stream = Stream.from_handle(cupy.cuda.get_current_stream().ptr)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    tile = (128, 64) if m > 1000 else (128, 256)
    cfg = replace(matmul.configure(ma, mb, "float32", facts, kernel="wgmma", tile=tile, stages=2), stream_k=True,
                  splits=1, defines=())
    matmul.launch(cfg, ma, mb, out.data.ptr, n, stream=stream, facts=facts)
    stream.sync()
    ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
    assert np.abs(cupy.asnumpy(out) - ref).max() < 1e-3 * np.abs(ref).max()
