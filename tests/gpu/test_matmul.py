"""asynccopy.gemm on the GPU against float64: every kernel, random and edge shapes, all four layouts (each
operand row-major or a transposed view), every operand alignment the kernels take, bf16 / f16 / f32 in,
bf16 / f16 / f32 out, outputs poisoned first, PyTorch and CuPy arrays on side streams."""

import numpy as np
import pytest

import asynccopy
from asynccopy import gemm_kernels, matmul
from tests.gpu.conftest import require_cc

# (m, k, n): ones, edges of the 128 x 256 x 64 tiles, odd sizes, long and skinny
SHAPES = [(1, 1, 1), (1, 64, 1), (7, 13, 5), (128, 64, 256), (129, 65, 257), (300, 1000, 200), (1000, 17, 999),
          (2048, 512, 1024), (64, 4096, 64), (3000, 200, 130)]
# ||C - C64|| / ||C64||: the rounding of C to its dtype, f32 accumulation far below it
TOL = {"bfloat16": 8e-3, "float16": 1.5e-3, "float32": 2e-5}
# (kernel, input dtype, out_dtype)
KERNELS = [("wgmma", "bfloat16", None), ("wgmma", "float16", None), ("wgmma", "bfloat16", "float32"),
           ("mma", "bfloat16", None), ("mma", "float16", "float32"), ("simt", "float32", None),
           ("simt", "float32", "bfloat16")]


def _operand(torch, rows, cols, column_major, dtype, *, pad=8, offset=0):
    """A [rows, cols] CUDA matrix: a row-major array, or the transposed view of one (column-major), whose
    leading dimension is its contiguous extent rounded up to ``pad`` elements and whose first element
    sits ``offset`` elements into its allocation; and its exact values in float64."""
    inner, outer = (rows, cols) if column_major else (cols, rows)
    padded = -(-inner // pad) * pad
    store = torch.randn(outer * padded + offset, device="cuda").to(dtype)
    view = store[offset:].view(outer, padded)[:, :inner]
    t = view.T if column_major else view
    return t, t.double().cpu().numpy()


def _check(torch, kernel, m, k, n, layout, dtype, out_dtype, *, pad=8, offset=0, ldc_pad=0, **kw):
    tdt = getattr(torch, dtype)
    a, ha = _operand(torch, m, k, layout[0] == "t", tdt, pad=pad, offset=offset)
    b, hb = _operand(torch, k, n, layout[1] == "t", tdt, pad=pad, offset=offset)
    out_name = out_dtype or dtype
    store = torch.full((m, n + ldc_pad), float("nan"), device="cuda", dtype=getattr(torch, out_name))
    out = store[:, :n]
    got = asynccopy.gemm(a, b, out=out, out_dtype=out_dtype, kernel=kernel, **kw)
    assert got is out
    c = out.double().cpu().numpy()
    assert not np.isnan(c).any(), f"{np.isnan(c).sum()} of {m * n} outputs never written"
    if ldc_pad:
        assert store[:, n:].isnan().all().item(), "wrote past the last column"
    ref = ha @ hb
    # C's rounding to its dtype is relative to C; the f32 sum of k products is not: one output whose products
    # cancel to near 0 (1 x 64 x 1 does, about once in a hundred draws) keeps an error of the products' size.
    # So the bound adds eight times the random-walk size of k f32 roundings of |A| |B|.
    slack = 8 * np.sqrt(k) * 2.0**-24 * np.linalg.norm(np.abs(ha) @ np.abs(hb))
    err = np.linalg.norm(c - ref)
    assert err <= TOL[out_name] * np.linalg.norm(ref) + slack, \
        f"error {err:.2e}: relative {err / max(np.linalg.norm(ref), 1e-30):.2e}, f32 slack {slack:.2e}"


@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])  # a, b: n = row-major, t = a transposed view
@pytest.mark.parametrize("kernel, dtype, out_dtype", KERNELS)
def test_gemm_matches_float64(torch, facts, kernel, dtype, out_dtype, m, k, n, layout):
    require_cc(facts, matmul.KERNELS[kernel].min_cc)
    _check(torch, kernel, m, k, n, layout, dtype, out_dtype)


# operands whose addresses and leading dimensions are 2, 4 or 8 bytes aligned: the LDGSTS kernels copy
# narrower (mma down to two-byte loads), the TMA kernel refuses them; C 2 or 4 bytes aligned: wgmma
# stores it from registers, not through TMA
@pytest.mark.parametrize("pad, offset", [(1, 0), (2, 1), (4, 2), (8, 4)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("kernel, dtype", [("mma", "float16"), ("simt", "float32")])
def test_narrow_alignments(torch, facts, kernel, dtype, pad, offset, layout):
    _check(torch, kernel, 131, 77, 67, layout, dtype, None, pad=pad, offset=offset, ldc_pad=3)


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("ldc_pad", [1, 2, 8])
def test_wgmma_stores_c_of_any_alignment(torch, ldc_pad):
    _check(torch, "wgmma", 200, 192, 136, "nt", "bfloat16", None, ldc_pad=ldc_pad)


@pytest.mark.parametrize("kernel, dtype", [("wgmma", "float16"), ("mma", "bfloat16"), ("simt", "float32")])
def test_every_stage_count_and_tile_computes_the_same_product(torch, facts, kernel, dtype):
    rec = matmul.KERNELS[kernel]
    require_cc(facts, rec.min_cc)
    size = 4 if dtype == "float32" else 2
    for tile in rec.tiles:
        fit = min(rec.max_stages(tile, facts.smem_per_block_optin, size), 8)
        for stages in sorted({1, 2, 3, fit}):
            _check(torch, kernel, 515, 693, 384, "nn", dtype, "float32", stages=stages, tile=tile)


@pytest.mark.parametrize("kernel", ["wgmma", "mma", "simt"])
def test_k_zero_gives_zeros(torch, facts, kernel):
    rec = matmul.KERNELS[kernel]
    require_cc(facts, rec.min_cc)
    dt = getattr(torch, rec.dtypes[0])
    a = torch.empty(5, 0, device="cuda", dtype=dt)
    b = torch.empty(0, 7, device="cuda", dtype=dt)
    out = torch.full((5, 7), float("nan"), device="cuda", dtype=dt)
    asynccopy.gemm(a, b, out=out, kernel=kernel)
    assert (out == 0).all()


def test_torch_on_a_side_stream_gets_a_new_array_of_its_kind(torch):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)  # made on s, not yet finished
        w = torch.randn(520, 256, device="cuda", dtype=torch.bfloat16)
        c = asynccopy.gemm(a, w.T)
        d = c.float() * 2  # read on s at once: gemm must have run on s
    s.synchronize()
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16 and tuple(c.shape) == (300, 520)
    ref = a.double() @ w.double().T
    assert ((d.double() / 2 - ref).norm() / ref.norm()).item() < TOL["bfloat16"]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_cupy_on_a_side_stream(rng, dtype):
    cp = pytest.importorskip("cupy")
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        a = cp.asarray(rng.standard_normal((200, 136)).astype(dtype))
        b = cp.asarray(rng.standard_normal((72, 136)).astype(dtype)).T  # column-major
        c = asynccopy.gemm(a, b)
        d = c * 2
    s.synchronize()
    assert isinstance(c, cp.ndarray) and c.dtype == np.dtype(dtype)
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    assert np.linalg.norm(cp.asnumpy(d) / 2 - ref) / np.linalg.norm(ref) < TOL[dtype]


def test_a_kernel_asked_for_by_name_that_cannot_take_the_operands_says_why(torch):
    a = torch.randn(64, 30, device="cuda", dtype=torch.bfloat16)  # rows 60 bytes apart: no TMA
    b = torch.randn(30, 16, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(asynccopy.ArgumentError, match=r"wgmma a's leading dimension 30 x 2 bytes"):
        asynccopy.gemm(a, b, kernel="wgmma")
    with pytest.raises(asynccopy.ArgumentError, match=r"simt takes float32, not bfloat16"):
        asynccopy.gemm(a, b, kernel="simt")
    c = asynccopy.gemm(a, b)  # the default falls back to the LDGSTS kernel
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < TOL["bfloat16"]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("splits", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("out_dtype, ldc_pad", [("bfloat16", 3), ("float32", 0), ("float16", 8)])
def test_split_k_sums_the_same_product(torch, facts, splits, out_dtype, ldc_pad):
    from dataclasses import replace

    m, k, n = 200, 1000, 301  # 16 k-blocks of 64: every split count here leaves none empty
    a, ha = _operand(torch, m, k, False, torch.bfloat16)
    b, hb = _operand(torch, k, n, True, torch.bfloat16)
    store = torch.full((m, n + ldc_pad), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    s = torch.cuda.current_stream()
    from cuda.core import Stream

    stream = Stream.from_handle(s.cuda_stream)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = replace(matmul.configure(ma, mb, out_dtype, facts, kernel="wgmma"), splits=splits)
    matmul.launch(cfg, ma, mb, store.data_ptr(), n + ldc_pad, stream=stream, facts=facts)
    c = store[:, :n].double().cpu().numpy()
    assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
    ref = ha @ hb
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < TOL[out_dtype]


def test_few_tiles_split_k(facts):
    # 128 x 8192 x 8192 is 32 tiles of 128 x 256: four splits of k keep 128 of the 132 SMs busy
    assert matmul.split_count(32, 128, 132) == 4
    assert matmul.split_count(400, 128, 132) == 1 and matmul.split_count(1, 3, 132) == 1


@pytest.mark.cc(9, 0)
def test_tune_keeps_the_fastest_candidate_and_gemm_uses_it(torch, facts, tmp_path, monkeypatch):
    from asynccopy import tuning

    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    result = asynccopy.gemm.tune(384, 640, 512, "bfloat16", kernels=["wgmma"], reps=3, warmup=1)
    assert result.best.ms == min(t.ms for t in result.trials) and len(result.trials) >= 8
    assert {t.stages for t in result.trials} >= {1, 2, 3}
    assert {t.tile for t in result.trials} == set(matmul.KERNELS["wgmma"].tiles)
    tuning._known.clear()  # read back from the file, as a new process would
    # the same shape class (257-512, 513-1024, 257-512), rows 16-byte aligned so that wgmma can take it
    a = torch.randn(400, 504, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(504, 600, device="cuda", dtype=torch.bfloat16)
    ma, mb = (matmul.matrix(x, "x", stream=asynccopy.arrays.resolve_stream(None, x)) for x in (a, b))
    cfg = matmul.configure(ma, mb, "bfloat16", facts)
    assert (cfg.tile, cfg.stages, cfg.splits) == (result.best.tile, result.best.stages, result.best.splits)
    c = asynccopy.gemm(a, b)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < TOL["bfloat16"]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("shape", [(200, 763, 1000), (128, 512, 64), (1000, 130, 200), (1, 300, 77)])
@pytest.mark.parametrize("a_mn, b_mn", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("share", ["0", "1"])
def test_the_cluster_variant_computes_the_same_product(torch, facts, shape, a_mn, b_mn, tile_n, share):
    """gemm_wgmma built with ASYNCCOPY_WGMMA_CLUSTER=2: pairs of blocks on neighbouring tiles sharing A (of
    one tile-row) or B (of one tile-column, ASYNCCOPY_WGMMA_SHARE=1), multicast; odd tile counts leave the
    last pair's second block past the matrix."""
    from dataclasses import replace

    m, n, k = shape
    a, ha = _operand(torch, m, k, a_mn, torch.bfloat16)
    b, hb = _operand(torch, k, n, not b_mn, torch.bfloat16)  # B_MN = 1: row-major B
    store = torch.full((m, n + 8), float("nan"), device="cuda", dtype=torch.bfloat16)
    from cuda.core import Stream

    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = replace(matmul.configure(ma, mb, "bfloat16", facts, kernel="wgmma", tile=(128, tile_n), stages=3),
                  defines=((matmul.CLUSTER_KNOB, 2), (matmul.SHARE_KNOB, share)), splits=1)
    matmul.launch(cfg, ma, mb, store.data_ptr(), n + 8, stream=stream, facts=facts)
    c = store[:, :n].double().cpu().numpy()
    assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
    ref = ha @ hb
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < TOL["bfloat16"]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("shape", [(128, 1000, 4096), (300, 520, 1), (200, 263, 130), (2000, 1900, 700)])
@pytest.mark.parametrize("a_mn, b_mn", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("tile_n", [64, 128])
@pytest.mark.parametrize("bulk", [0, 1])
def test_the_pair_k_variant_computes_the_same_product(torch, facts, shape, a_mn, b_mn, tile_n, bulk):
    """gemm_wgmma with PAIR_K: the two blocks of a cluster split each tile's k-blocks and block 1's accumulators
    are added in block 0's shared memory. One k-block (block 0's half empty), three (halves of 1 and 2), C's rows
    off 16 bytes (stored from the registers), an f32 C, and more tiles than pairs (each pair's exchange buffer
    reused tile after tile); twice on one stream. Block 1's accumulators by st.async or by bulk copies."""
    from dataclasses import replace

    from cuda.core import Stream

    m, n, k = shape
    out_dtype = "float32" if (a_mn, tile_n) == (True, 64) else "bfloat16"
    a, ha = _operand(torch, m, k, a_mn, torch.bfloat16)
    b, hb = _operand(torch, k, n, not b_mn, torch.bfloat16)  # B_MN = 1: row-major B
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = matmul.configure(ma, mb, out_dtype, facts, kernel="wgmma", tile=(128, tile_n), stages=3)
    cfg = matmul.pair_k_config(replace(cfg, splits=1), facts, stages=3)
    cfg = replace(cfg, defines=cfg.defines + ((matmul.PAIR_BULK_KNOB, bulk),))
    ref = ha @ hb
    for _ in range(2):
        store = torch.full((m, n + 8), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        matmul.launch(cfg, ma, mb, store.data_ptr(), n + 8, stream=stream, facts=facts)
        c = store[:, :n].double().cpu().numpy()
        assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
        assert np.linalg.norm(c - ref) / max(np.linalg.norm(ref), 1e-30) < TOL["bfloat16"]


@pytest.mark.parametrize("shape", [(200, 763, 1000), (1, 300, 77), (1000, 130, 200), (256, 256, 1)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("pad, offset", [(8, 0), (1, 0), (4, 2)])  # copies of 16, 2 and 8 bytes
def test_the_four_warp_mma_variant_computes_the_same_product(torch, facts, shape, layout, pad, offset):
    """gemm_mma built with ASYNCCOPY_MMA_WARPS=4: 128 threads, 64 x 64 warp pieces of 128 x 128 tiles."""
    from dataclasses import replace

    from cuda.core import Stream

    require_cc(facts, (8, 0))
    m, n, k = shape
    a, ha = _operand(torch, m, k, layout[0] == "t", torch.float16, pad=pad, offset=offset)
    b, hb = _operand(torch, k, n, layout[1] == "t", torch.float16, pad=pad, offset=offset)
    store = torch.full((m, n + 3), float("nan"), device="cuda", dtype=torch.float16)
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = replace(matmul.configure(ma, mb, "float16", facts, kernel="mma", tile=(128, 128), stages=3),
                  defines=((matmul.MMA_WARPS_KNOB, 4),))
    assert cfg.threads == 128
    matmul.launch(cfg, ma, mb, store.data_ptr(), n + 3, stream=stream, facts=facts)
    c = store[:, :n].double().cpu().numpy()
    assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
    ref = ha @ hb
    assert np.linalg.norm(c - ref) / max(np.linalg.norm(ref), 1e-30) < TOL["float16"]


# (tile, knobs): the 192 x 256 tile (rows of fragments one ahead, XOR addresses: its defaults) and those two knobs on
# the 128-row tiles, whose defaults are step-wise fragments and swizzled() addresses
FRAGMENT_BUILDS = [((192, 256), ()),
                   ((128, 256), (("ASYNCCOPY_MMA_FRAG_AHEAD", 2), ("ASYNCCOPY_MMA_XOR", 1))),
                   ((128, 128), (("ASYNCCOPY_MMA_FRAG_AHEAD", 2), ("ASYNCCOPY_MMA_XOR", 1))),
                   ((128, 256), (("ASYNCCOPY_MMA_XOR", 1),)),
                   ((192, 256), (("ASYNCCOPY_MMA_EARLY_SYNC", 0),))]


@pytest.mark.parametrize("tile, knobs", FRAGMENT_BUILDS, ids=[
    f"{t[0]}x{t[1]}-" + (",".join(f"{k.removeprefix('ASYNCCOPY_MMA_')}={x}" for k, x in v) or "default")
    for t, v in FRAGMENT_BUILDS])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_the_mma_fragment_schedules_compute_the_same_product(torch, facts, tile, knobs, layout):
    """gemm_mma's fragments row by row (A one row of mma ahead, B in halves) and its XOR ldmatrix addresses, at
    every stage count that fits (1: the plain loop; 2+: the early barrier, its last row holding the slice's wait),
    on shapes with tails of every tile dimension and one k slice or many."""
    from cuda.core import Stream

    from asynccopy.gemm_kernels import GemmConfig

    require_cc(facts, (8, 0))
    rec = matmul.KERNELS["mma"]
    fit = min(rec.max_stages(tile, facts.smem_per_block_optin), 8)
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    shapes = [(385, 700, 300), (1, 64, 257), (200, 1100, 513), (577, 129, 255)]
    for i, stages in enumerate(sorted({1, 2, 3, fit})):
        m, k, n = shapes[i % len(shapes)]
        a, ha = _operand(torch, m, k, layout[0] == "t", torch.bfloat16)
        b, hb = _operand(torch, k, n, layout[1] == "t", torch.bfloat16)
        store = torch.full((m, n + 3), float("nan"), device="cuda", dtype=torch.float32)
        ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
        # built as named: the 192-row tile is a variant the record does not offer yet
        cfg = GemmConfig("mma", "bfloat16", "float32", tile, stages, not ma.row_major, mb.row_major,
                        matmul.alignment(ma, mb), knobs)
        matmul.launch(cfg, ma, mb, store.data_ptr(), n + 3, stream=stream, facts=facts)
        c = store[:, :n].double().cpu().numpy()
        assert not np.isnan(c).any() and store[:, n:].isnan().all().item(), (m, k, n, stages)
        ref = ha @ hb
        slack = 8 * np.sqrt(k) * 2.0**-24 * np.linalg.norm(np.abs(ha) @ np.abs(hb))
        assert np.linalg.norm(c - ref) <= TOL["float32"] * np.linalg.norm(ref) + slack, (m, k, n, stages)


# (m, k, n, tile): more tiles than SMs with a last wave's rest under and over half the SMs (a wave joins the
# region, or the rest alone), fewer tiles than SMs (every tile shared, up to 8 pieces), and a region of short
# shares (5 k-blocks per tile)
STREAM_K_SHAPES = [(1000, 640, 2200, (128, 64)), (2100, 3000, 2000, (128, 128)), (1100, 700, 1000, (128, 64)),
                   (300, 5000, 700, (128, 256)), (129, 300, 4000, (128, 64))]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("m, k, n, tile", STREAM_K_SHAPES)
@pytest.mark.parametrize("a_mn, b_mn", [(False, True), (True, False)])
@pytest.mark.parametrize("out_dtype, ldc_pad", [("bfloat16", 0), ("float32", 3)])  # C by TMA, and from registers
def test_stream_k_computes_the_same_product(torch, facts, m, k, n, tile, a_mn, b_mn, out_dtype, ldc_pad):
    """The last tiles' k-blocks shared among all blocks: contributors' partials added in by each tile's owner.
    Two products in a row on one stream: the flags the first raised are down for the second."""
    from dataclasses import replace

    from cuda.core import Stream

    tiles = -(-m // tile[0]) * -(-n // tile[1])
    assert matmul.stream_k_plan(tiles, -(-k // 64), facts.sm_count)[0] > 0 or facts.sm_count != 132
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    for _ in range(2):
        a, ha = _operand(torch, m, k, a_mn, torch.bfloat16)
        b, hb = _operand(torch, k, n, not b_mn, torch.bfloat16)
        store = torch.full((m, n + ldc_pad), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
        cfg = replace(matmul.configure(ma, mb, out_dtype, facts, kernel="wgmma", tile=tile), stream_k=True, splits=1,
                      defines=())
        matmul.launch(cfg, ma, mb, store.data_ptr(), n + ldc_pad, stream=stream, facts=facts)
        c = store[:, :n].double().cpu().numpy()
        assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
        ref = ha @ hb
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < TOL[out_dtype]


# (m, k, n, tile, share, a_mn, b_mn, out_dtype, ldc_pad): pairs of tiles (sharing A or B) as the stream-K units, with
# an odd tile count (the last pair's second block past the matrix, in the region), a last wave's rest under and
# over half the resident pairs, and fewer pairs than resident pairs (every unit shared, up to 8 pieces)
PAIRED_STREAM_K = [(2100, 3000, 2000, (128, 128), "1", False, True, "bfloat16", 0),
                   (2100, 3000, 2000, (128, 128), "0", True, False, "float32", 3),
                   (1100, 700, 3000, (128, 128), "1", True, False, "bfloat16", 0),
                   (1100, 700, 3000, (128, 128), "0", False, True, "bfloat16", 0),
                   (300, 5000, 4000, (128, 256), "1", False, True, "float32", 3)]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("m, k, n, tile, share, a_mn, b_mn, out_dtype, ldc_pad", PAIRED_STREAM_K)
@pytest.mark.parametrize("epi_bufs", [2, 4])
def test_pairs_share_a_last_wave_out(torch, facts, m, k, n, tile, share, a_mn, b_mn, out_dtype, ldc_pad, epi_bufs):
    """Stream-K over cluster pairs: the last pair-units' k-blocks shared among all resident pairs, each block's
    partials added in by the same rank of the owner pair; C through two or four staging buffers a consumer. Two
    products in a row on one stream (flags down)."""
    from dataclasses import replace

    from cuda.core import Stream

    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    for _ in range(2):
        a, ha = _operand(torch, m, k, a_mn, torch.bfloat16)
        b, hb = _operand(torch, k, n, not b_mn, torch.bfloat16)
        store = torch.full((m, n + ldc_pad), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
        cfg = replace(matmul.configure(ma, mb, out_dtype, facts, kernel="wgmma", tile=tile, stages=3),
                      defines=((matmul.CLUSTER_KNOB, 2), (matmul.SHARE_KNOB, share), (matmul.EPI_BUFS_KNOB, epi_bufs)),
                      splits=1, stream_k=True)
        matmul.launch(cfg, ma, mb, store.data_ptr(), n + ldc_pad, stream=stream, facts=facts)
        c = store[:, :n].double().cpu().numpy()
        assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
        ref = ha @ hb
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < TOL[out_dtype]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("m, k, n", [(300, 200, 1000), (1000, 130, 263), (129, 1000, 520)])
@pytest.mark.parametrize("tile_n", [64, 128, 256])
@pytest.mark.parametrize("out_dtype, ldc_pad", [("bfloat16", 0), ("float16", 8), ("float32", 4)])
def test_four_staging_buffers_compute_the_same_product(torch, facts, m, k, n, tile_n, out_dtype, ldc_pad):
    """gemm_wgmma with ASYNCCOPY_WGMMA_EPI_BUFS=4: a consumer's whole 64 x BN block of 2-byte C written at once and
    stored by one thread (f32 C: its 8 chunks of a 256-column block rotate through the four buffers); partial tiles
    every way, C's padding untouched, two products in a row on one stream."""
    from dataclasses import replace

    from cuda.core import Stream

    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    for layout in ((False, True), (True, False)):
        a, ha = _operand(torch, m, k, layout[0], torch.bfloat16)
        b, hb = _operand(torch, k, n, not layout[1], torch.bfloat16)
        store = torch.full((m, n + ldc_pad), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
        ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
        cfg = replace(matmul.configure(ma, mb, out_dtype, facts, kernel="wgmma", tile=(128, tile_n), stages=3),
                      defines=((matmul.EPI_BUFS_KNOB, 4),), splits=1)
        matmul.launch(cfg, ma, mb, store.data_ptr(), n + ldc_pad, stream=stream, facts=facts)
        c = store[:, :n].double().cpu().numpy()
        assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
        ref = ha @ hb
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < TOL[out_dtype]


@pytest.mark.cc(9, 0)
def test_the_default_shares_a_last_wave_out_on_a_side_stream(torch, facts):
    """More tiles than SMs and a partial last wave: gemm's default configuration is stream-K, and the product
    on a side stream (its own workspace) is right."""
    m, k, n = 2000, 2048, 2200  # 288 tiles of 128 x 128: 24 over two waves
    a, ha = _operand(torch, m, k, False, torch.bfloat16)
    b, hb = _operand(torch, k, n, False, torch.bfloat16)
    ma, mb = (matmul.matrix(x, "x", stream=asynccopy.arrays.resolve_stream(None, x)) for x in (a, b))
    cfg = matmul.configure(ma, mb, "bfloat16", facts)
    tiles = -(-m // cfg.tile[0]) * -(-n // cfg.tile[1])
    assert cfg.stream_k == (matmul.stream_k_pays(tiles, -(-k // 64), facts.sm_count) and not cfg.defines)
    assert cfg.stream_k or facts.sm_count != 132
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        c = asynccopy.gemm(a, b)
    side.synchronize()
    ref = ha @ hb
    assert np.linalg.norm(c.double().cpu().numpy() - ref) / np.linalg.norm(ref) < TOL["bfloat16"]


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("m, k, n, layout, paired_stages", [
    (3072, 3072, 3072, "nn", 3),  # B's rows on 128-byte lines: 3 stages, four staging buffers, stream-K
    (3072, 3072, 3072, "nt", 3),  # x @ w.T: B K-major
    (4000, 1536, 3000, "nn", 4),  # B's rows 6000 bytes apart, off the lines: 4 stages, two buffers
])
def test_the_default_pairs_of_a_large_product(torch, facts, m, k, n, layout, paired_stages):
    """The default of a product of several waves of 128 x 256 tiles on a GPU of 132 SMs: cluster pairs sharing B
    (the configuration gemm_kernels.pairing gives for how B sits), through asynccopy.gemm into a poisoned C."""
    a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(k, n, device="cuda", dtype=torch.bfloat16) if layout == "nn" else \
        torch.empty(n, k, device="cuda", dtype=torch.bfloat16).T
    ma, mb = (matmul.matrix(x, "x", stream=asynccopy.arrays.resolve_stream(None, x)) for x in (a, b))
    cfg = matmul.configure(ma, mb, "bfloat16", facts)
    if facts.sm_count == 132:
        assert cfg.tile == (128, 256) and dict(cfg.defines).get(matmul.CLUSTER_KNOB) == 2, cfg
        assert cfg.stages == paired_stages and (cfg.stages == 3) == (gemm_kernels.epi_bufs_of(cfg) == 4), cfg
    _check(torch, None, m, k, n, layout, "bfloat16", None)


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("shape", [(1, 64, 1), (300, 1000, 520), (2000, 700, 1900)])
@pytest.mark.parametrize("knob", [("ASYNCCOPY_WGMMA_PREFETCH_MAPS", 1), ("ASYNCCOPY_MBARRIER_SUSPEND_NS", 1000000)],
                         ids=["prefetch", "suspend"])
def test_the_map_prefetch_and_suspend_builds_compute_the_same_product(torch, facts, shape, knob):
    """gemm_wgmma built with ASYNCCOPY_WGMMA_PREFETCH_MAPS=1 (thread 0 prefetches the three tensor maps as the block
    starts) or with ASYNCCOPY_MBARRIER_SUSPEND_NS (waits asleep on their barrier): the product into a poisoned C with
    padded rows, against float64."""
    from dataclasses import replace

    from cuda.core import Stream

    m, k, n = shape
    a, ha = _operand(torch, m, k, False, torch.bfloat16)
    b, hb = _operand(torch, k, n, False, torch.bfloat16)
    store = torch.full((m, n + 8), float("nan"), device="cuda", dtype=torch.bfloat16)
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    ma, mb = matmul.matrix(a, "a", stream=stream), matmul.matrix(b, "b", stream=stream)
    cfg = matmul.configure(ma, mb, "bfloat16", facts, kernel="wgmma")
    cfg = replace(cfg, defines=cfg.defines + (knob,))
    matmul.launch(cfg, ma, mb, store.data_ptr(), n + 8, stream=stream, facts=facts)
    c = store[:, :n].double().cpu().numpy()
    assert not np.isnan(c).any() and store[:, n:].isnan().all().item()
    ref = ha @ hb
    slack = 8 * np.sqrt(k) * 2.0**-24 * np.linalg.norm(np.abs(ha) @ np.abs(hb))  # f32 sums that cancel (see _check)
    assert np.linalg.norm(c - ref) <= TOL["bfloat16"] * np.linalg.norm(ref) + slack


@pytest.mark.parametrize("kernel, dtype", [("wgmma", "bfloat16"), ("mma", "float16"), ("simt", "float32")])
def test_one_column_into_a_contiguous_column_out(torch, facts, kernel, dtype):
    """N = 1 into a contiguous [m x 1] out (row stride 1): C's leading dimension is out's row stride."""
    if kernel == "wgmma":
        require_cc(facts, (9, 0))
    tdt = getattr(torch, dtype)
    a, ha = _operand(torch, 300, 64, False, tdt)
    b, hb = _operand(torch, 64, 1, False, tdt, pad=1)
    out = torch.full((300, 1), float("nan"), device="cuda", dtype=tdt)
    asynccopy.gemm(a, b, out=out, kernel=kernel)
    c = out.double().cpu().numpy()
    ref = ha @ hb
    slack = 8 * np.sqrt(64) * 2.0**-24 * np.linalg.norm(np.abs(ha) @ np.abs(hb))
    assert not np.isnan(c).any() and np.linalg.norm(c - ref) <= TOL[dtype] * np.linalg.norm(ref) + slack


def test_out_beside_its_input_is_taken_and_out_on_an_input_refused(torch):
    """Columns of one buffer side by side (x = buf[:, :64], out = buf[:, 64:]) do not overlap: the product lands in
    out and x is untouched; out = an input is named."""
    from asynccopy.errors import ArgumentError

    buf = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    x, y = buf[:, :64], buf[:, 64:]
    w = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    before = x.clone()
    ref = x.double() @ w.double()
    asynccopy.gemm(x, w, out=y)
    assert torch.equal(x, before)
    assert (y.double() - ref).norm() <= TOL["float16"] * ref.norm() + 1e-6
    with pytest.raises(ArgumentError, match="out overlaps a"):
        asynccopy.gemm(w, w, out=w)
