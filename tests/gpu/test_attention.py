"""asynccopy.attention on the GPU against a float64 reference computed from the same bf16 / f16 inputs:
random and awkward shapes (one query, one key, lengths off every tile, 3000, 8191, query and key lengths
apart), causal and not, grouped-query attention, both memory layouts ((batch, heads, seq, head_dim) and
(batch, seq, heads, head_dim) viewed through transpose(1, 2)), every stage count, PyTorch and CuPy inputs on
side streams, outputs poisoned first. The rule (flash-attention's): the maximum absolute error is at most
twice that of PyTorch's own SDPA (its best backend for the inputs, measured on the same inputs against the
same reference) plus a small floor; no NaN anywhere; the log-sum-exp against the reference's."""

import math

import numpy as np
import pytest

import asynccopy

pytestmark = pytest.mark.cc(8, 0)

FLOOR = 2.0**-10  # absolute: where PyTorch's error is 0 (one key: the output is v exactly)
LSE_TOL = 1e-3  # absolute + relative; the lse is computed in f32 from f32 scores

# (batch, q heads, kv heads, q_len, k_len, head_dim)
SHAPES = [(1, 1, 1, 1, 1, 64), (2, 4, 4, 1, 200, 128), (1, 2, 2, 200, 1, 64), (2, 3, 3, 129, 65, 64),
          (1, 2, 1, 77, 300, 128), (1, 4, 2, 300, 77, 64), (2, 2, 2, 128, 128, 128), (1, 8, 2, 1000, 1000, 128),
          (1, 2, 2, 3000, 3000, 64), (1, 1, 1, 257, 8191, 128)]


KERNELS = [pytest.param("mma"), pytest.param("wgmma", marks=pytest.mark.cc(9, 0))]


def _inputs(torch, shape, dtype, layout, seed):
    """q, k, v of ``shape`` in ``layout`` ("bhsd": contiguous; "bshd": (batch, seq, heads, head_dim) memory
    viewed as (batch, heads, seq, head_dim)), standard normal values rounded to dtype."""
    b, hq, hkv, lq, lk, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)

    def one(h, s):
        if layout == "bhsd":
            return torch.randn(b, h, s, d, device="cuda", generator=gen).to(tdt)
        return torch.randn(b, s, h, d, device="cuda", generator=gen).to(tdt).transpose(1, 2)

    return one(hq, lq), one(hkv, lk), one(hkv, lk)


def _poisoned(torch, like, layout, pad=8):
    """A NaN output of q's shape and layout whose rows are ``pad`` elements longer than head_dim (to see
    that nothing is written past it), and the whole allocation."""
    b, h, s, d = like.shape
    if layout == "bhsd":
        store = torch.full((b, h, s, d + pad), float("nan"), device="cuda", dtype=like.dtype)
        return store[..., :d], store
    store = torch.full((b, s, h, d + pad), float("nan"), device="cuda", dtype=like.dtype)
    return store[..., :d].transpose(1, 2), store


def _reference(torch, q, k, v, causal, scale):
    """float64 out and lse from the same values: PyTorch SDPA's definition (tril mask top-left aligned,
    k / v heads repeated for grouped-query attention)."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = q64 @ k64.transpose(-1, -2) * scale
    if causal:
        lq, lk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(lq, lk, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    return torch.softmax(s, -1) @ v64, torch.logsumexp(s, -1)


def _torch_error(torch, q, k, v, causal, scale, ref):
    """Max |PyTorch SDPA - reference| on the same inputs, PyTorch choosing its backend."""
    group = q.shape[1] // k.shape[1]
    k_rep, v_rep = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    got = torch.nn.functional.scaled_dot_product_attention(q, k_rep, v_rep, is_causal=causal, scale=scale)
    return (got.double() - ref).abs().max().item()


def _check(torch, got, lse, ref, ref_lse, base_err, what):
    if math.isnan(base_err):  # PyTorch's SDPA gives NaN for some inputs (scale <= 0 with is_causal, H200, torch 2.11)
        base_err = FLOOR  # then a rounding of f16 near 1 (our measured error there: 0.5-1.0 x 2^-10)
    g = got.double()
    assert not g.isnan().any(), f"{what}: {g.isnan().sum().item()} outputs NaN (never written?)"
    err = (g - ref).abs().max().item()
    assert err <= 2 * base_err + FLOOR, f"{what}: max abs error {err:.3e}, PyTorch SDPA's {base_err:.3e}"
    if lse is not None:
        assert lse.dtype == torch.float32 and tuple(lse.shape) == tuple(ref_lse.shape)
        lerr = ((lse.double() - ref_lse).abs() / (1 + ref_lse.abs())).max().item()
        assert lerr <= LSE_TOL, f"{what}: lse error {lerr:.3e}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_attention_matches_float64(torch, rng, shape, layout, causal, dtype, kernel):
    seed = int(rng.integers(1 << 31))
    q, k, v = _inputs(torch, shape, dtype, layout, seed)
    scale = 1.0 / math.sqrt(shape[-1])
    out, store = _poisoned(torch, q, layout)
    got, lse = asynccopy.attention(q, k, v, causal=causal, out=out, return_lse=True, kernel=kernel)
    assert got is out
    ref, ref_lse = _reference(torch, q, k, v, causal, scale)
    what = f"{kernel} {shape} {layout} {dtype} causal={causal} seed={seed}"
    _check(torch, got, lse, ref, ref_lse, _torch_error(torch, q, k, v, causal, scale, ref), what)
    assert store[..., shape[-1]:].isnan().all().item(), f"{what}: wrote past head_dim"


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_stage_count(torch, facts, rng, stages, d, causal, kernel):
    from asynccopy.sdpa import KERNELS as RECORDS

    if stages > RECORDS[kernel].fit(d, facts.smem_per_block_optin):
        pytest.skip(f"{stages} stages of {kernel} at head dim {d} do not fit {facts.name}")
    seed = int(rng.integers(1 << 31))
    q, k, v = _inputs(torch, (2, 2, 1, 333, 555, d), "bfloat16", "bhsd", seed)
    got = asynccopy.attention(q, k, v, causal=causal, kernel=kernel, stages=stages)
    assert isinstance(got, torch.Tensor) and got.shape == q.shape and got.dtype == q.dtype and got.is_contiguous()
    ref, _ = _reference(torch, q, k, v, causal, 1.0 / math.sqrt(d))
    base = _torch_error(torch, q, k, v, causal, 1.0 / math.sqrt(d), ref)
    _check(torch, got, None, ref, None, base, f"stages={stages} d={d} causal={causal} seed={seed}")


@pytest.mark.parametrize("scale", [0.3, -0.2, 0.0])
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_given_scale(torch, rng, scale, kernel):
    seed = int(rng.integers(1 << 31))
    q, k, v = _inputs(torch, (1, 2, 2, 190, 260, 64), "float16", "bshd", seed)
    got, lse = asynccopy.attention(q, k, v, scale=scale, causal=True, return_lse=True, kernel=kernel)
    ref, ref_lse = _reference(torch, q, k, v, True, scale)
    _check(torch, got, lse, ref, ref_lse, _torch_error(torch, q, k, v, True, scale, ref), f"scale={scale} seed={seed}")


def test_torch_inputs_on_a_side_stream(torch, rng):
    seed = int(rng.integers(1 << 31))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # made, computed (the current stream) and read on the side stream
        q, k, v = _inputs(torch, (2, 4, 2, 700, 900, 128), "bfloat16", "bshd", seed)
        got, lse = asynccopy.attention(q, k, v, causal=True, return_lse=True)  # the default kernel here
        ref, ref_lse = _reference(torch, q, k, v, True, 1.0 / math.sqrt(128))
        base = _torch_error(torch, q, k, v, True, 1.0 / math.sqrt(128), ref)
    side.synchronize()
    _check(torch, got, lse, ref, ref_lse, base, f"side stream seed={seed}")
    # the stream given explicitly, the inputs made on the default stream
    got2 = asynccopy.attention(q, k, v, causal=True, stream=side)
    side.synchronize()
    assert torch.equal(got2, got)


def test_cupy_inputs_on_a_side_stream(torch, rng):
    cupy = pytest.importorskip("cupy")
    b, hq, hkv, lq, lk, d = 1, 4, 1, 333, 1025, 64
    host = [rng.standard_normal((b, h, s, d)).astype(np.float16) for h, s in ((hq, lq), (hkv, lk), (hkv, lk))]
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        q, k, v = (cupy.asarray(x) for x in host)
        out = cupy.full((b, hq, lq, d), np.nan, dtype=np.float16)
        got, lse = asynccopy.attention(q, k, v, out=out, return_lse=True)
    side.synchronize()
    assert got is out and isinstance(lse, cupy.ndarray) and lse.dtype == np.float32
    tq, tk, tv = (torch.from_numpy(x).cuda() for x in host)
    ref, ref_lse = _reference(torch, tq, tk, tv, False, 1.0 / math.sqrt(d))
    base = _torch_error(torch, tq, tk, tv, False, 1.0 / math.sqrt(d), ref)
    _check(torch, torch.from_numpy(cupy.asnumpy(got)).cuda(), torch.from_numpy(cupy.asnumpy(lse)).cuda(), ref,
           ref_lse, base, "cupy")


def test_empty_queries_launch_nothing(torch):
    q = torch.zeros(2, 4, 0, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.zeros(2, 4, 10, 64, device="cuda", dtype=torch.bfloat16)
    got, lse = asynccopy.attention(q, k, k, return_lse=True)
    assert got.shape == (2, 4, 0, 64) and lse.shape == (2, 4, 0)


def test_out_overlapping_an_input_is_refused_and_empty_cupy_arrays_give_an_empty_result(torch):
    """out= the query tensor itself is named (the kernels would overwrite q while they read it); CuPy's empty arrays
    (zero strides) through the whole call give an empty result of the caller's kind."""
    from asynccopy.errors import ArgumentError

    q = torch.randn(1, 2, 77, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ArgumentError, match="out overlaps q"):
        asynccopy.attention(q, q, q, out=q)
    cupy = pytest.importorskip("cupy")
    empty = cupy.empty((2, 4, 0, 64), cupy.float16)  # no queries
    keys = cupy.zeros((2, 4, 10, 64), cupy.float16)
    got = asynccopy.attention(empty, keys, keys)
    assert isinstance(got, cupy.ndarray) and got.shape == (2, 4, 0, 64)


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("shape", [(1, 2, 1, 1, 1, 64), (1, 2, 2, 300, 77, 128), (2, 2, 1, 333, 1000, 64),
                                   (1, 4, 4, 1000, 1000, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("variant", ["serial", "overlap", "pingpong", "consumers2", "consumers3", "keys128", "keys176",
                                     "prefetch", "suspend", "persistent", "obuffer"])
def test_each_wgmma_variant_matches_float64(torch, facts, rng, shape, causal, stages, variant):
    """attention_wgmma.cu's builds (asynccopy.attention_kernels.VARIANTS): the products and the softmax in turn;
    Q K^T of the next tile under P V of this one (K and V on their own stage barriers, so one stage works
    too); and the two warpgroups' ping-pong on top; two or three consumer warpgroups (these small problems
    take two by the launch model, long ones three at head dim 64); 128- or 176-key tiles."""

    _variant_matches_float64(torch, facts, rng, "wgmma", variant, shape, causal, stages, "bfloat16", "bhsd")


@pytest.mark.parametrize("shape", [(1, 2, 1, 1, 1, 64), (2, 4, 2, 300, 77, 64), (2, 2, 1, 333, 1000, 64),
                                   (1, 4, 4, 1000, 1000, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("variant", ["rows16", "rows32"])
def test_each_mma_build_at_head_dim_64_matches_float64(torch, facts, rng, shape, causal, stages, variant):
    """attention_mma.cu with 16 query rows a warp (8 warps, Q in registers) and with 32 (4 warps, Q read from
    its own shared memory at every k step: the default at head dim 64)."""
    _variant_matches_float64(torch, facts, rng, "mma", variant, shape, causal, stages, "float16", "bshd")


@pytest.mark.parametrize("shape", [(1, 2, 1, 1, 1, 128), (2, 4, 2, 300, 77, 128), (1, 4, 4, 1000, 1000, 128),
                                   (2, 2, 1, 333, 1000, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_the_mma_build_with_q_in_shared_memory_matches_float64(torch, facts, rng, shape, causal, stages):
    """attention_mma.cu at 16 rows a warp with Q read from shared memory of its own at every k step (variant qsmem,
    ASYNCCOPY_ATTN_MMA_QSMEM=1): the head dim 128 build that needs no stack under NVRTC 13.0."""
    _variant_matches_float64(torch, facts, rng, "mma", "qsmem", shape, causal, stages, "bfloat16", "bhsd")


@pytest.mark.parametrize("shape", [(1, 2, 1, 1, 1, 128), (2, 4, 2, 300, 77, 128), (1, 4, 4, 1000, 1000, 128),
                                   (2, 2, 1, 333, 1000, 64), (1, 2, 2, 65, 130, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("variant, dtype, layout", [("bm64", "float16", "bshd"), ("xor", "bfloat16", "bhsd")])
def test_the_mma_builds_of_64_queries_and_of_xor_addresses_match_float64(torch, facts, rng, shape, causal, stages,
                                                                          variant, dtype, layout):
    """attention_mma.cu with 64 queries a block (variant bm64, ASYNCCOPY_ATTN_MMA_BM=64: 4 warps of 16 rows, Q in
    half of the last stage at first, the grid twice as many query tiles), and with every ldmatrix address one XOR of
    an opaque lane offset (variant xor, ASYNCCOPY_ATTN_MMA_XOR=1) on the launch's build of each problem."""
    _variant_matches_float64(torch, facts, rng, "mma", variant, shape, causal, stages, dtype, layout)


@pytest.mark.parametrize("shape", [(1, 2, 1, 1, 1, 128), (2, 4, 2, 300, 77, 128), (1, 4, 4, 1000, 1000, 128),
                                   (2, 2, 1, 333, 1000, 64), (1, 2, 2, 65, 130, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_mma_build_with_the_next_scores_overlapped_matches_float64(torch, facts, rng, shape, causal, stages):
    """attention_mma.cu with the next key tile's Q K^T beside this tile's fold (variant overlap,
    ASYNCCOPY_ATTN_MMA_OVERLAP=1: at 3 and 4 stages; at 2 the kernel keeps its plain loop)."""
    _variant_matches_float64(torch, facts, rng, "mma", "overlap", shape, causal, stages, "bfloat16", "bhsd")


def _variant_matches_float64(torch, facts, rng, kernel, variant, shape, causal, stages, dtype, layout):
    """One compile-time build of ``kernel`` (attention_kernels.VARIANTS) on fresh inputs, the output poisoned
    first, against the float64 reference within twice PyTorch's own error; a build that outgrows shared memory
    is refused by name and skipped."""
    from cuda.core import Stream

    from asynccopy import sdpa as att
    from asynccopy.attention_kernels import VARIANTS
    seed = int(rng.integers(1 << 31))
    q, k, v = _inputs(torch, shape, dtype, layout, seed)
    scale = 1.0 / math.sqrt(shape[-1])
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    tq, tk, tv = (att.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v)))
    p = att.check_inputs(tq, tk, tv)
    cfg = att.configure(p, facts, kernel=kernel, stages=stages, causal=causal).with_variant(
        VARIANTS[kernel][variant], facts.smem_per_block_optin)
    if cfg.smem_bytes + cfg.record.smem_reserve > facts.smem_per_block_optin:
        with pytest.raises(att.ArgumentError, match="bytes of shared memory a block"):
            att.launch(cfg, p, tq, tk, tv, tq, 0, scale, stream=stream, facts=facts)
        pytest.skip(f"{stages} stages of the {variant} build need {cfg.smem_bytes} bytes of shared memory")
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
    to = att.Tensor4("out", tuple(out.shape), tuple(out.stride()), p.dtype, out.data_ptr(), tq.device_id)
    att.launch(cfg, p, tq, tk, tv, to, lse.data_ptr(), scale, stream=stream, facts=facts)
    torch.cuda.synchronize()
    ref, ref_lse = _reference(torch, q, k, v, causal, scale)
    _check(torch, out, lse, ref, ref_lse, _torch_error(torch, q, k, v, causal, scale, ref),
           f"{kernel}+{variant} {shape} causal={causal} stages={stages} seed={seed}")


ORDER_PROBE = r"""
#include <asynccopy/attention.cuh>
extern "C" __global__ void causal_order_probe(int* out, long long kv_bytes)
{
    int qt = -1, h = -1, b = -1;
    asynccopy::causal_tile(gridDim.x, gridDim.y, gridDim.z, kv_bytes, qt, h, b);
    const long long lin = blockIdx.x + gridDim.x * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
    if (threadIdx.x == 0) {
        out[3 * lin] = qt;
        out[3 * lin + 1] = h;
        out[3 * lin + 2] = b;
    }
}
"""


@pytest.mark.parametrize("grid, kv_bytes", [((43, 16, 4), 2 << 20), ((6, 3, 2), 0), ((7, 5, 3), 9 << 20)])
def test_the_kernels_causal_block_order_is_the_launch_models(torch, grid, kv_bytes):
    """attention.cuh's causal_tile on the GPU: block by linear index, the (qt, h, b) the launch model assumes."""
    from cuda.core import Stream

    from asynccopy import build
    from asynccopy.attention_schedule import causal_order

    out = torch.full((3 * math.prod(grid),), -7, dtype=torch.int32, device="cuda")
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    kernel = build.compile(ORDER_PROBE, name="causal_order_probe").kernel("causal_order_probe")
    build.launch(kernel, out.data_ptr(), np.int64(kv_bytes), grid=grid, block=32, stream=stream)
    got = [tuple(x) for x in out.view(-1, 3).cpu().tolist()]
    assert got == causal_order(*grid, kv_bytes)


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("shape, split", [
    ((1, 2, 1, 100, 1000, 64), (2, 8)),  # every item cut, into more pieces than some ranges hold tiles
    ((2, 3, 3, 333, 700, 128), (5, 3)),  # the last 5 of 12 items cut, the others whole
    ((1, 4, 2, 129, 3000, 64), (8, 31)),  # pieces of one key tile, the last query tile partial
    ((1, 1, 1, 1, 9000, 128), (1, 60)),  # one query row, more pieces than key tiles (cut to one a tile)
], ids=lambda x: "x".join(map(str, x)))
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_items_cut_along_their_keys_merge_exactly_once(torch, facts, rng, shape, split, layout):
    """The wgmma kernel's key split (attention_schedule.key_split; here forced): the last items' key ranges run
    as separate blocks and the last to finish merges the others' O, max and sum. Twice in a row on one
    stream (each launch must leave the counters down for the next), against float64, lse included."""
    from cuda.core import Stream

    from asynccopy import sdpa as att
    seed = int(rng.integers(1 << 31))
    q, k, v = _inputs(torch, shape, "bfloat16", layout, seed)
    scale = 1.0 / math.sqrt(shape[-1])
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    tq, tk, tv = (att.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v)))
    p = att.check_inputs(tq, tk, tv)
    cfg = att.configure(p, facts, kernel="wgmma", causal=False)
    _launch_twice(torch, cfg, p, (q, k, v), (tq, tk, tv), False, scale, stream, facts,
                  f"split {split} {shape} {layout} seed={seed}", split=split)


def _launch_twice(torch, cfg, p, arrays, tensors, causal, scale, stream, facts, what, **launch):
    """``cfg`` launched twice in a row on one stream (each launch must leave its workspace counters down for the
    next), each output and lse poisoned first and checked against float64; the last output's Tensor4."""
    from asynccopy import sdpa as att
    q, k, v = arrays
    tq, tk, tv = tensors
    ref, ref_lse = _reference(torch, q, k, v, causal, scale)
    base = _torch_error(torch, q, k, v, causal, scale, ref)
    for run in range(2):
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
        to = att.Tensor4("out", tuple(out.shape), tuple(out.stride()), p.dtype, out.data_ptr(), tq.device_id)
        att.launch(cfg, p, tq, tk, tv, to, lse.data_ptr(), scale, stream=stream, facts=facts, **launch)
        torch.cuda.synchronize()
        _check(torch, out, lse, ref, ref_lse, base, f"{what} run {run}")
    return to


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("shape, causal, blocks, stages, extra", [
    ((1, 4, 4, 1000, 1000, 128), False, 3, 2, ()),  # 32 items over 3 blocks: 10-11 each
    ((1, 4, 4, 1000, 1000, 128), True, 5, 1, ()),  # causal: longest first; one stage (O staged in the only one)
    ((2, 4, 2, 333, 777, 64), False, 4, 3, ()),  # GQA
    ((2, 4, 2, 333, 777, 64), True, 7, 2, ()),  # causal, GQA
    ((1, 3, 3, 700, 129, 64), False, 2, 1, (("ASYNCCOPY_ATTN_OVERLAP", 0), ("ASYNCCOPY_ATTN_PINGPONG", 0))),
    ((3, 2, 2, 1, 5000, 128), False, 1, 2, ()),  # one block takes all 6 items of 29 key tiles each
], ids=["items-3blocks", "causal-1stage", "gqa", "gqa-causal", "serial-1stage", "1block"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("variant", ["persistent", "obuffer"])
def test_a_persistent_block_takes_unit_after_unit(torch, facts, rng, shape, causal, blocks, stages, extra, layout,
                                                  variant):
    """The wgmma kernel's persistent build (ASYNCCOPY_ATTN_PERSISTENT) on grids of fewer blocks than units, so each
    block runs several: the ring of K / V stages runs on across units (and the consumers' ring of turns), Q's buffer
    is handed back after a unit's last Q K^T and reloaded under its end, O is staged in the unit's last stage or
    (obuffer) in a buffer of its own whose stores are waited for a unit later, the next unit is taken from a counter
    the last block lowers again; without the mask, with the last items cut along their keys too (pieces taken after
    the whole items, merged by the last to finish). Twice in a row on one stream, against float64, lse included."""
    from cuda.core import Stream

    from asynccopy import sdpa as att
    from asynccopy.attention_kernels import KEYS_KNOB, VARIANTS
    seed = int(rng.integers(1 << 31))
    q, k, v = _inputs(torch, shape, "bfloat16", layout, seed)
    scale = 1.0 / math.sqrt(shape[-1])
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    tq, tk, tv = (att.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v)))
    p = att.check_inputs(tq, tk, tv)
    cfg = att.configure(p, facts, kernel="wgmma", causal=causal, stages=stages)
    cfg = cfg.with_variant(VARIANTS["wgmma"][variant] + extra, facts.smem_per_block_optin)
    if cfg.smem_bytes + cfg.record.smem_reserve > facts.smem_per_block_optin:  # O's buffer beside 176-key stages
        cfg = cfg.with_defines(((KEYS_KNOB, 128),))
    assert cfg.persistent and cfg.o_buffer == (variant == "obuffer")
    what = f"{variant} {shape} causal={causal} blocks={blocks} {layout} seed={seed}"
    _launch_twice(torch, cfg, p, (q, k, v), (tq, tk, tv), causal, scale, stream, facts, what, blocks=blocks)
    if not causal:  # the last items cut along their keys: blocks take pieces after whole items, and the last merges
        for split in ((2, 3), (5, 2)):
            _launch_twice(torch, cfg, p, (q, k, v), (tq, tk, tv), causal, scale, stream, facts, f"{what} split {split}",
                          blocks=blocks, split=split)


@pytest.mark.cc(9, 0)
def test_a_causal_grid_is_never_cut_along_its_keys(torch, facts):
    from cuda.core import Stream

    from asynccopy import sdpa as att
    q, k, v = _inputs(torch, (1, 2, 2, 100, 1000, 64), "bfloat16", "bhsd", 0)
    stream = Stream.from_handle(torch.cuda.current_stream().cuda_stream)
    tq, tk, tv = (att.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v)))
    p = att.check_inputs(tq, tk, tv)
    cfg = att.configure(p, facts, kernel="wgmma", causal=True)
    with pytest.raises(att.ArgumentError, match="causal grid is not cut"):
        att.launch(cfg, p, tq, tk, tv, tq, 0, 0.125, stream=stream, facts=facts, split=(2, 4))
