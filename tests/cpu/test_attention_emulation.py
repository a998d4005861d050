"""The two attention kernels' index and bookkeeping, without a GPU: tests/cpu/attention_emulation.py runs
attention_mma.cu and attention_wgmma.cu (its default build: overlapped, with the ping-pong at head dim 64, and the
serial / overlap / pingpong variants, its key split: the last items cut along their keys and merged by whichever
piece finishes last, and its persistent build: blocks taking item after item) instruction by instruction in NumPy
(every lane's fragments, shared memory as bytes at the kernels' addresses, the swizzles, masks, stages, barrier
phases, epilogues), under several legal orders of copies, of the producer and consumers and of the pieces'
finishing, and the results must match a float64 reference of PyTorch SDPA's semantics (top-left causal mask, GQA h
-> h // group, default scale 1 / sqrt(D), lse in natural log) to within what rounding P and the output to the dtype
can explain, element by element. The emulators share the kernels' reading of the PTX ISA (see their docstring):
these tests catch slips of index, address and bookkeeping, not a misreading of an instruction. The descriptor model
is checked against gemm_wgmma.cu's addressing, which passes on an H200 (docs/design.md: tests/gpu/test_matmul.py,
all four layouts)."""

import math

import numpy as np
import pytest

from tests.cpu import attention_emulation as emu

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def reference(q, k, v, causal, scale):
    """float64 SDPA: softmax(scale q k^T, masked j <= i when causal) v, GQA by h // (hq / hkv); lse (ln)."""
    group = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, kk) * scale
    if causal:
        s = np.where(np.tril(np.ones((q.shape[2], k.shape[2]), dtype=bool)), s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    p = np.exp(s - mx)
    l_ = p.sum(axis=-1)
    out = np.einsum("bhqk,bhkd->bhqd", p, vv) / l_[..., None]
    # what rounding P (relative u each) and the output (u) can change: u (sum_j p |v_j| / l + |out|)
    spread = np.einsum("bhqk,bhkd->bhqd", p, np.abs(vv)) / l_[..., None]
    return out, mx[..., 0] + np.log(l_), spread


def inputs(batch, heads, kv_heads, q_len, k_len, d, dtype, seed):
    rng = np.random.default_rng(seed)
    q = emu.round_to(rng.standard_normal((batch, heads, q_len, d)), dtype)
    k = emu.round_to(rng.standard_normal((batch, kv_heads, k_len, d)), dtype)
    v = emu.round_to(rng.standard_normal((batch, kv_heads, k_len, d)), dtype)
    return q, k, v


def check(out, lse, q, k, v, causal, scale, dtype):
    d, k_len = q.shape[3], k.shape[2]
    ref, ref_lse, spread = reference(q, k, v, causal, 1.0 / math.sqrt(d) if scale is None else scale)
    assert not np.isnan(out).any(), f"{int(np.isnan(out).sum())} output elements NaN (unwritten or poisoned)"
    assert not np.isnan(lse).any(), f"{int(np.isnan(lse).sum())} lse entries NaN (unwritten)"
    u = UNIT_ROUNDOFF[dtype]
    # f16 subnormal P (below 2^-14) rounds with an absolute error up to 2^-25 per key
    floor = k_len * 2.0**-25 * np.abs(v).max() if dtype == "float16" else 0.0
    tol = 1.001 * u * (spread + np.abs(ref)) + floor + 1e-9
    err = np.abs(out - ref)
    bad = err > tol
    assert not bad.any(), (f"{int(bad.sum())} of {out.size} outputs off by more than the rounding bound: worst "
                           f"{err.max():.3g} at {np.unravel_index(np.argmax(err - tol), err.shape)}")
    np.testing.assert_allclose(lse, ref_lse, rtol=0, atol=1e-5)


# (batch, heads, kv_heads, q_len, k_len, head_dim, causal, stages, dtype, scale, variant)
# variant: mma: (cp.async landing policy, memory layout of q, k, v, out); wgmma: (TMA landing policy, scheduling
# priority of the producer and consumer warpgroups 0, 1, the dynamic shared memory's address, kernel variant)
MMA_CASES = [
    (1, 1, 1, 1, 1, 64, False, 1, "float16", None, ("eager", "bhsd")),
    (1, 1, 1, 5, 300, 128, True, 3, "bfloat16", None, ("eager", "bshd")),
    (1, 1, 1, 300, 5, 64, True, 2, "float16", None, ("late", "bhsd")),
    (1, 1, 1, 64, 64, 128, True, 1, "bfloat16", None, ("late", "bshd")),
    (1, 1, 1, 129, 129, 64, True, 3, "float16", None, ("late", "bhsd")),
    (1, 1, 1, 200, 129, 128, False, 2, "bfloat16", None, ("eager", "bhsd")),
    (1, 1, 1, 300, 200, 64, True, 3, "float16", -0.3, ("eager", "bshd")),
    (1, 1, 1, 129, 64, 64, False, 1, "bfloat16", None, ("eager", "bhsd")),
    (1, 1, 1, 200, 300, 128, True, 2, "float16", None, ("late", "bhsd")),
    (1, 1, 1, 64, 300, 64, False, 3, "bfloat16", -0.7, ("late", "bshd")),
    (1, 1, 1, 5, 1, 128, True, 2, "float16", None, ("eager", "bhsd")),
    (2, 4, 2, 129, 200, 64, True, 2, "bfloat16", None, ("eager", "bshd")),
    (1, 1, 1, 300, 300, 128, True, 3, "bfloat16", None, ("late", "bhsd")),
    (1, 1, 1, 1, 129, 64, True, 1, "float16", None, ("late", "bhsd")),
    (1, 2, 1, 200, 64, 64, True, 4, "float16", None, ("late", "bshd")),
    (2, 2, 1, 65, 250, 128, False, 4, "float16", None, ("late", "bshd")),
    # the 16-row build at head dim 64 (the variant rows16; the default there has 32 rows a warp)
    (1, 1, 1, 129, 129, 64, True, 3, "float16", None, ("late", "bhsd", 1)),
    (2, 4, 2, 129, 200, 64, True, 1, "bfloat16", None, ("eager", "bshd", 1)),
    (1, 1, 1, 64, 300, 64, False, 2, "bfloat16", -0.7, ("late", "bhsd", 1)),
    # 16 rows a warp with Q read from shared memory of its own (the variant qsmem: ASYNCCOPY_ATTN_MMA_QSMEM=1)
    (1, 1, 1, 200, 300, 128, True, 2, "bfloat16", None, ("late", "bhsd", 1, True)),
    (2, 2, 1, 65, 250, 128, False, 1, "float16", None, ("eager", "bshd", 1, True)),
    (1, 1, 1, 129, 129, 64, True, 3, "float16", None, ("late", "bhsd", 1, True)),
    # 64 queries a block (4 warps of 16 rows), Q in registers (the variant bm64) or in shared memory of its own (the
    # launch's build causal at head dim 128, which the cases above without a build run)
    (1, 1, 1, 200, 300, 128, False, 2, "bfloat16", None, ("late", "bhsd", 1, False, 64)),
    (2, 2, 1, 65, 130, 64, True, 1, "float16", -0.5, ("eager", "bshd", 1, False, 64)),
    (1, 1, 1, 129, 129, 64, True, 3, "bfloat16", None, ("late", "bhsd", 1, True, 64)),
    (1, 2, 1, 300, 250, 128, False, 2, "float16", None, ("eager", "bshd", 1, True, 64)),
    # NaN rows after each head's sequence (a strided view): a row read past the sequence, not zero-filled, shows
    (2, 2, 1, 130, 200, 64, False, 3, "bfloat16", None, ("late", "padded")),
    (1, 2, 2, 77, 150, 128, True, 4, "float16", None, ("eager", "padded")),
    (1, 1, 1, 200, 90, 128, False, 4, "bfloat16", None, ("late", "padded")),
]
WGMMA_CASES = [
    (1, 1, 1, 1, 1, 64, False, 1, "float16", None, ("eager", ("producer", 0, 1), 96, "default")),
    (1, 1, 1, 5, 300, 128, True, 3, "bfloat16", None, ("late", (1, 0, "producer"), 16, "serial")),
    (1, 1, 1, 300, 5, 64, True, 2, "float16", None, ("eager", ("producer", 1, 0), 1024, "default")),
    (1, 1, 1, 64, 64, 128, True, 1, "bfloat16", None, ("late", (0, 1, "producer"), 96, "default")),
    (1, 1, 1, 129, 129, 64, True, 3, "float16", None, ("eager", ("producer", 0, 1), 48, "serial")),
    (1, 1, 1, 200, 129, 128, False, 2, "bfloat16", None, ("lifo", (1, "producer", 0), 96, "default")),
    (1, 1, 1, 300, 200, 64, True, 3, "float16", -0.3, ("eager", (1, 0, "producer"), 96, "default")),
    (1, 1, 1, 129, 64, 64, False, 1, "bfloat16", None, ("eager", ("producer", 1, 0), 96, "serial")),
    (1, 1, 1, 200, 300, 128, True, 2, "float16", None, ("late", ("producer", 0, 1), 96, "default")),
    (1, 1, 1, 64, 300, 64, False, 3, "bfloat16", -0.7, ("eager", ("producer", 0, 1), 96, "default")),
    (1, 1, 1, 5, 1, 128, True, 2, "float16", None, ("eager", (0, 1, "producer"), 96, "default")),
    (2, 4, 2, 129, 200, 64, True, 2, "bfloat16", None, ("late", ("producer", 1, 0), 96, "default")),
    (1, 1, 1, 300, 300, 128, True, 1, "bfloat16", None, ("eager", ("producer", 1, 0), 96, "serial")),
    (1, 1, 1, 1, 129, 64, True, 2, "float16", None, ("lifo", (1, 0, "producer"), 96, "default")),
    (1, 2, 1, 300, 300, 64, False, 2, "float16", None, ("eager", ("producer", 0, 1), 96, "default")),
    (1, 1, 1, 200, 300, 64, True, 6, "bfloat16", None, ("eager", ("producer", 1, 0), 96, "default")),
    # more key tiles than stages, the consumers run apart: a stage refilled too early shows
    (1, 1, 1, 200, 300, 128, False, 1, "bfloat16", None, ("eager", (0, "producer", 1), 96, "serial")),
    (1, 1, 1, 129, 300, 64, False, 2, "float16", -0.5, ("eager", (1, "producer", 0), 64, "serial")),
    (2, 2, 1, 64, 300, 64, False, 1, "float16", None, ("late", ("producer", 1, 0), 96, "default")),
    # the variants (ASYNCCOPY_ATTN_OVERLAP 1 with _PINGPONG 0 or 1) at both head dims
    (1, 1, 1, 200, 300, 64, False, 2, "float16", None, ("eager", ("producer", 0, 1), 96, "overlap")),
    (1, 1, 1, 300, 300, 128, True, 3, "bfloat16", -0.4, ("lifo", (1, "producer", 0), 96, "overlap")),
    (1, 1, 1, 129, 600, 64, False, 2, "bfloat16", None, ("late", (0, 1, "producer"), 16, "overlap")),
    (1, 1, 1, 100, 200, 64, True, 1, "float16", None, ("eager", ("producer", 0, 1), 96, "overlap")),
    (1, 1, 1, 64, 300, 128, False, 2, "float16", None, ("eager", (1, "producer", 0), 96, "pingpong")),
    (1, 1, 1, 300, 260, 64, True, 3, "bfloat16", None, ("lifo", ("producer", 1, 0), 96, "pingpong")),
    (2, 2, 1, 129, 384, 64, False, 2, "float16", None, ("late", (0, "producer", 1), 48, "pingpong")),
    (1, 1, 1, 129, 300, 64, True, 1, "bfloat16", None, ("late", (0, 1, "producer"), 96, "pingpong")),
    (1, 1, 1, 200, 300, 128, False, 2, "float16", -0.6, ("lifo", ("producer", 0, 1), 96, "pingpong")),
    # scale 0: uniform weights over the keys a query sees (the kernel scales by the least normal float)
    (1, 1, 1, 64, 200, 64, True, 2, "float16", 0.0, ("eager", ("producer", 0, 1), 96, "default")),
    (1, 1, 1, 130, 260, 128, False, 1, "bfloat16", 0.0, ("late", (1, 0, "producer"), 96, "pingpong")),
    # three consumer warpgroups (192 queries a block; the default at head dim 64) and two at 64, three at 128
    (1, 1, 1, 400, 390, 64, True, 2, "bfloat16", None, ("lifo", (2, 1, 0, "producer"), 96, "default")),
    (2, 2, 1, 193, 300, 64, False, 1, "float16", -0.5, ("late", (1, "producer", 2, 0), 48, "default")),
    (1, 1, 1, 200, 300, 64, True, 3, "float16", None, ("eager", ("producer", 2, 0, 1), 96, "serial")),
    (1, 1, 1, 300, 260, 64, False, 2, "bfloat16", None, ("late", (0, "producer", 1), 96, "consumers2")),
    (1, 1, 1, 250, 300, 128, True, 2, "float16", None, ("lifo", (2, 0, "producer", 1), 16, "consumers3")),
    # 176-key tiles (the default at head dim 128 without the mask): tails of 177, 353 and 1 keys, one stage too
    (1, 1, 1, 130, 353, 128, False, 2, "bfloat16", -0.3, ("lifo", ("producer", 1, 0), 96, "default")),
    (1, 2, 1, 64, 177, 128, False, 1, "float16", None, ("late", (0, "producer", 1), 48, "serial")),
    (1, 1, 1, 200, 529, 128, False, 2, "float16", None, ("eager", (1, 0, "producer"), 96, "pingpong")),
    (1, 1, 1, 129, 300, 128, False, 2, "bfloat16", None, ("late", ("producer", 0, 1), 96, "keys128")),
    # 176-key tiles under the causal mask (the variant "keys176"): diagonal tiles of 128 queries across 176 keys
    (1, 1, 1, 400, 400, 128, True, 2, "bfloat16", None, ("eager", (0, 1, "producer"), 96, "keys176")),
]


def _id(c):
    b, h, hk, lq, lk, d, causal, stages, dtype, scale, variant = c
    extra = ("-".join(variant) if len(variant) == 2 else f"{variant[0]}-{variant[1]}-rows{16 * variant[2]}"
             if len(variant) == 3 else f"{variant[0]}-{variant[1]}-rows{16 * variant[2]}"
             f"{'-qsmem' if variant[3] else ''}{f'-bm{variant[4]}' if len(variant) > 4 else ''}"
             if isinstance(variant[3], bool) else f"{variant[0]}-base{variant[2]}-{variant[3]}")
    short = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    return (f"b{b}h{h}kv{hk}-q{lq}-k{lk}-d{d}-{'causal' if causal else 'full'}-s{stages}-{short}"
            f"{'' if scale is None else f'-scale{scale}'}-{extra}")


# ASYNCCOPY_ATTN_MMA_OVERLAP (variant overlap) on the launch's build of each problem: (batch, heads, kv_heads, q_len,
# k_len, head_dim, causal, stages, dtype, copies); at 2 stages the kernel keeps its plain loop
OVERLAP_CASES = [
    (1, 1, 1, 300, 300, 128, False, 3, "bfloat16", "late"),
    (1, 1, 1, 300, 300, 128, True, 3, "float16", "eager"),
    (1, 1, 1, 129, 513, 64, False, 4, "float16", "late"),
    (2, 2, 1, 200, 200, 64, True, 3, "bfloat16", "late"),
    (1, 1, 1, 65, 64, 128, True, 4, "bfloat16", "late"),
    (1, 1, 1, 5, 1, 64, False, 3, "float16", "eager"),
    (1, 1, 1, 200, 129, 128, False, 2, "float16", "late"),
    # 16 rows a warp at head dim 64 (the overlap's second register set fits there without a stack)
    (1, 1, 1, 300, 300, 64, False, 3, "bfloat16", "late", 1),
    (2, 2, 1, 129, 250, 64, True, 4, "float16", "eager", 1),
]


@pytest.mark.parametrize("case", OVERLAP_CASES, ids=lambda c: "-".join(map(str, c)))
def test_mma_overlap_emulation_matches_sdpa(case):
    """The next tile's scores taken beside this tile's fold: the K/V ring's wait keeps tile t + 1 landed and the
    refill takes tile t - 1's stage; a wait one group short, or a refill of tile t's or t + 1's stage, reads a stage
    that has not landed or was overwritten (the "late" and "eager" landings show either)."""
    b, h, hk, lq, lk, d, causal, stages, dtype, copies, *pieces = case
    q, k, v = inputs(b, h, hk, lq, lk, d, dtype, seed=lq * 1000 + lk + 7)
    out, lse = emu.emulate_mma(q, k, v, causal, None, stages, dtype=dtype, copies=copies, overlap=True,
                               pieces=pieces[0] if pieces else None)
    check(out, lse, q, k, v, causal, None, dtype)


@pytest.mark.parametrize("case", MMA_CASES, ids=_id)
def test_mma_emulation_matches_sdpa(case):
    b, h, hk, lq, lk, d, causal, stages, dtype, scale, (copies, layout, *build) = case
    q, k, v = inputs(b, h, hk, lq, lk, d, dtype, seed=lq * 1000 + lk)
    out, lse = emu.emulate_mma(q, k, v, causal, scale, stages, dtype=dtype, copies=copies, layout=layout,
                               pieces=build[0] if build else None, q_smem=build[1] if len(build) > 1 else None,
                               bm=build[2] if len(build) > 2 else None)
    check(out, lse, q, k, v, causal, scale, dtype)


@pytest.mark.parametrize("case", WGMMA_CASES, ids=_id)
def test_wgmma_emulation_matches_sdpa(case):
    b, h, hk, lq, lk, d, causal, stages, dtype, scale, (tma, order, base, variant) = case
    q, k, v = inputs(b, h, hk, lq, lk, d, dtype, seed=lq * 1000 + lk + 1)
    # "default": the kernel's default build (ASYNCCOPY_ATTN_OVERLAP 1, _PINGPONG -1: the ping-pong at head dim 64,
    # _CONSUMERS 0: three consumer warpgroups at 64, two at 128); "consumers2" / "consumers3": the default
    # with that many consumer warpgroups
    # with the default key tiles (176 keys at head dim 128 without the causal mask, else 128) or "keys128"
    consumers = {"consumers2": 2, "consumers3": 3}.get(variant)
    keys = {"keys128": 128, "keys176": 176}.get(variant)
    pingpong = variant == "pingpong" or (variant not in ("serial", "overlap") and d == 64)
    out, lse = emu.emulate_wgmma(q, k, v, causal, scale, stages, dtype=dtype, tma=tma, order=order, smem_base=base,
                                 overlap=variant != "serial", pingpong=pingpong, consumers=consumers, keys=keys)
    check(out, lse, q, k, v, causal, scale, dtype)


@pytest.mark.parametrize("a_mn, b_mn", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_descriptor_model_reads_what_gemm_wgmma_addresses(a_mn, b_mn):
    """gemm_wgmma.cu (tested on an H200 in all four layouts) loads A and B with the same TMA boxes and
    builds the same descriptors (wgmma.cuh make_desc_k_major / make_desc_mn_major) as attention_wgmma.cu:
    its consumer's addressing, emulated with the same functions, must give A x B, through the accumulator
    layout its store_direct reads back. BN = 128: two 64-column panels of an MN-major B, as V has at D 128."""
    dtype, bm, bn, bk, k_len = "float16", 128, 128, 64, 128
    rng = np.random.default_rng(7)
    a = emu.round_to(rng.standard_normal((bm, k_len)), dtype)
    b = emu.round_to(rng.standard_normal((k_len, bn)), dtype)
    a_elems, b_elems = bm * bk, bn * bk
    panel_bytes = 2 * bk * 64
    base = 1024
    sm = emu.Shared(base, 2 * (a_elems + b_elems))
    tma = emu.Tma(sm, "eager", dtype)
    a_mem = emu.global_bits(a.T if a_mn else a, dtype)[None, None]  # A_MN: column-major A, maps over (m, k)
    b_mem = emu.global_bits(b if b_mn else b.T, dtype)[None, None]  # B_MN = 0: column-major B, maps over (k, n)
    acc = np.zeros((2, 128, bn // 2))
    for kb in range(k_len // bk):
        bar = emu.MBarrier(1, "full")
        bar.arrive_expect_tx(2 * (a_elems + b_elems))
        sa, sb = base, base + 2 * a_elems
        if a_mn == 0:
            tma.load(sa, a_mem, bm, (kb * bk, 0, 0, 0), bar)
        else:
            for p in range(bm // 64):
                tma.load(sa + 2 * (p * bk * 64), a_mem, bk, (64 * p, kb * bk, 0, 0), bar)
        if b_mn == 0:
            tma.load(sb, b_mem, bn, (kb * bk, 0, 0, 0), bar)
        else:
            for p in range(bn // 64):
                tma.load(sb + 2 * (p * bk * 64), b_mem, bk, (64 * p, kb * bk, 0, 0), bar)
        assert bar.done(0)
        for w in range(2):
            wg = emu.Warpgroup(sm, dtype)
            for kk in range(bk // 16):
                da = (emu.make_desc_k_major(sa + 2 * (w * 64 * bk + kk * 16)) if a_mn == 0
                      else emu.make_desc_mn_major(sa + 2 * (w * bk * 64 + kk * 16 * 64), panel_bytes))
                db = (emu.make_desc_k_major(sb + 2 * (kk * 16)) if b_mn == 0
                      else emu.make_desc_mn_major(sb + 2 * (kk * 16 * 64), panel_bytes))
                wg.mma_ss(acc[w], da, db, bn, a_mn, b_mn, 1 if (kb > 0 or kk > 0) else 0)
            wg.commit()
            wg.wait(0)
    c = np.full((bm, bn), np.nan)
    rows, cols = emu._acc_map(bn)
    for w in range(2):
        c[64 * w + rows, cols] = acc[w]
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_layout_maps_and_swizzle_formulas_agree():
    """The kernels' own swizzle expressions against asynccopy/swizzle.py's TMA model (hardware-tested):
    attention_wgmma's epilogue address is TMA's 128B swizzle on 1024-aligned panels (the store reads it
    back that way); the accumulator map is one-to-one."""
    from asynccopy import swizzle

    row = np.arange(64)[:, None]
    byte = np.arange(0, 128, 4)[None, :]
    for panel in (0, 8192, 16384 + 8192):
        kernel = panel + row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15))
        assert np.array_equal(kernel, swizzle.swizzle_address(panel + row * 128 + byte, "128B"))
    for n in (64, 128):
        rows, cols = emu._acc_map(n)
        assert len(set(zip(rows.ravel(), cols.ravel()))) == 128 * n // 2 == 64 * n


def test_mbarrier_parity_and_transaction_rules():
    bar = emu.MBarrier(2, "b")
    assert bar.done(1) and not bar.done(0)  # a fresh barrier: the phase "before" it (parity 1) counts as done
    bar.arrive_expect_tx(32)
    bar.arrive()
    assert not bar.done(0)  # arrivals are in, 32 bytes are not
    bar.complete_tx(32)
    assert bar.done(0) and not bar.done(1)
    bar.arrive_expect_tx(16)
    with pytest.raises(AssertionError, match="more than announced"):
        bar.complete_tx(32)


# The key split of attention_wgmma (no causal mask): the grid's last `tail` items cut into `pieces` ranges of
# their key tiles, merged by the last piece to finish. (batch, heads, kv_heads, q_len, k_len, head_dim, stages,
# dtype, scale, TMA landing policy, scheduling priority, kernel variant (as WGMMA_CASES), (tail, pieces), order in
# which the pieces' warpgroups finish: "blocks" (the grid's order: each item's last piece merges), "reverse" (its
# first piece merges), "mixed" (an item's warpgroups have different last pieces) or "seed<n>" (a random order))
SPLIT_CASES = [
    # every item cut (2 query tiles of 192 x 2 heads, GQA; 5 key tiles, the last of 88 keys: pieces of 2 and 3)
    (1, 2, 1, 200, 600, 64, 2, "float16", None, "eager", ("producer", 0, 1), "default", (4, 2), "blocks"),
    # 3 whole items, then 5 cut into 3 (176-key tiles, the last of 1 key: pieces of 1, 1, 2), GQA over 2 batches
    (2, 2, 1, 130, 529, 128, 2, "bfloat16", -0.3, "lifo", (1, "producer", 0), "default", (5, 3), "seed1"),
    # as many pieces as key tiles: one tile a piece (the ping-pong's 2 turns a block; the serial build, one stage)
    (1, 1, 1, 64, 390, 64, 2, "bfloat16", None, "late", (0, 1, "producer"), "default", (1, 4), "reverse"),
    (1, 1, 1, 129, 353, 128, 1, "float16", None, "eager", ("producer", 1, 0), "serial", (2, 3), "mixed"),
    # more pieces than key tiles and a longer tail than the grid: the launch clamps them to (2 items, 3 pieces)
    (1, 2, 2, 100, 300, 64, 3, "float16", -0.5, "eager", ("producer", 0, 1), "overlap", (9, 7), "seed2"),
    # uneven pieces (6 tiles in 4: 1, 2, 1, 2), some of fewer tiles than stages; the first item whole
    (1, 3, 1, 64, 900, 128, 2, "bfloat16", None, "late", (0, "producer", 1), "pingpong", (2, 4), "mixed"),
    # three consumer warpgroups at head dim 128 (three counters an item); two at 64, scale 0 (every maximum about 0)
    (1, 1, 1, 250, 300, 128, 2, "float16", None, "lifo", (2, 0, "producer", 1), "consumers3", (2, 2), "reverse"),
    (1, 1, 1, 129, 450, 64, 2, "bfloat16", 0.0, "eager", (1, "producer", 0), "consumers2", (2, 3), "seed3"),
]


def _finish_order(name: str, pieces: int):
    """emulate_wgmma's finish_order for a SPLIT_CASES name (see there)."""
    if name == "blocks":
        return None
    if name.startswith("seed"):
        return int(name[4:])
    if name == "reverse":
        return lambda finishes: finishes[::-1]
    if name == "mixed":  # warpgroup w of tail item i finishes last in piece (i + w) % pieces
        return lambda finishes: sorted(finishes, key=lambda f: f[1] == (f[0] + f[2]) % pieces)
    raise ValueError(name)


def _split_id(c):
    b, h, hk, lq, lk, d, stages, dtype, scale, tma, order, variant, (tail, pieces), finish = c
    short = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    return (f"b{b}h{h}kv{hk}-q{lq}-k{lk}-d{d}-s{stages}-{short}{'' if scale is None else f'-scale{scale}'}-{tma}-"
            f"{variant}-tail{tail}x{pieces}-{finish}")


def _emulate_split(q, k, v, scale, stages, dtype, tma, order, variant, split, finish_order):
    d = q.shape[3]
    consumers = {"consumers2": 2, "consumers3": 3}.get(variant)
    pingpong = variant == "pingpong" or (variant not in ("serial", "overlap") and d == 64)
    return emu.emulate_wgmma(q, k, v, False, scale, stages, dtype=dtype, tma=tma, order=order, overlap=variant != "serial",
                             pingpong=pingpong, consumers=consumers, split=split, finish_order=finish_order)


@pytest.mark.parametrize("case", SPLIT_CASES, ids=_split_id)
def test_wgmma_key_split_matches_sdpa(case):
    b, h, hk, lq, lk, d, stages, dtype, scale, tma, order, variant, split, finish = case
    q, k, v = inputs(b, h, hk, lq, lk, d, dtype, seed=lq * 1000 + lk + 2)
    out, lse = _emulate_split(q, k, v, scale, stages, dtype, tma, order, variant, split,
                              _finish_order(finish, split[1]))
    check(out, lse, q, k, v, False, scale, dtype)


@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_key_split_any_finish_order(d):
    """The pieces of an item may finish in any order (nothing in the kernel orders them): whichever arrives last
    on a warpgroup's counter merges, and every order gives the same rows to within the merge's f32 rounding
    (float64 here), so within one unit in the last place of T after the output's rounding; lse likewise."""
    dtype = "float16"
    lq, lk = (150, 400) if d == 64 else (100, 529)  # 4 key tiles either way, cut into pieces of 1, 1, 2
    q, k, v = inputs(1, 2, 1, lq, lk, d, dtype, seed=d)
    pieces = 3
    # the last piece (block order), the first (reverse), the middle one the last to finish for every item and
    # warpgroup; each warpgroup of an item a different last piece; two random orders
    orders = [None, _finish_order("reverse", pieces), lambda f: sorted(f, key=lambda x: x[1] == 1),
              _finish_order("mixed", pieces), 0, 1]
    runs = [_emulate_split(q, k, v, None, 2, dtype, "eager", ("producer", 0, 1), "default", (2, pieces), o)
            for o in orders]
    out0, lse0 = runs[0]
    check(out0, lse0, q, k, v, False, None, dtype)
    for out, lse in runs[1:]:
        assert not np.isnan(out).any()
        ulp = 2 * UNIT_ROUNDOFF[dtype] * np.maximum(np.abs(out), np.abs(out0)) + 2.0**-24
        assert (np.abs(out - out0) <= ulp).all(), f"worst {np.abs(out - out0).max():.3g}"
        np.testing.assert_allclose(lse, lse0, rtol=0, atol=1e-12)


def test_wgmma_key_split_as_launched():
    """(tail, pieces) as asynccopy.attention_schedule.key_split chooses them for a 3-SM device: the last wave's item
    cut into 3 pieces (the emulation clamps them as _launch_tma does); with one key tile the launch cuts nothing."""
    from asynccopy.attention_kernels import AttentionConfig
    from asynccopy.attention_schedule import key_split

    for d, lq, lk in ((64, 200, 600), (128, 130, 900)):
        dtype = "bfloat16"
        cfg = AttentionConfig("wgmma", dtype, d, 2, False)
        split = key_split(cfg, lq, lk, 2, 1, 3)
        assert split == (1, 3)
        q, k, v = inputs(1, 2, 1, lq, lk, d, dtype, seed=lk)
        out, lse = emu.emulate_wgmma(q, k, v, False, None, 2, dtype=dtype, overlap=True, pingpong=d == 64, split=split)
        check(out, lse, q, k, v, False, None, dtype)
    q, k, v = inputs(1, 1, 1, 70, 100, 64, "float16", seed=5)
    whole = emu.emulate_wgmma(q, k, v, overlap=True, pingpong=True)
    clamped = emu.emulate_wgmma(q, k, v, overlap=True, pingpong=True, split=(1, 4))
    assert all(np.array_equal(a, b) for a, b in zip(whole, clamped))
    q, k, v = inputs(1, 1, 1, 70, 300, 64, "float16", seed=5)
    with pytest.raises(ValueError, match="causal"):  # the causal kernel ignores the split: the launch must not ask
        emu.emulate_wgmma(q, k, v, True, split=(1, 2))


# The persistent build (ASYNCCOPY_ATTN_PERSISTENT; the causal default): (batch, heads, kv_heads, q_len, k_len,
# head_dim, causal, stages, dtype, blocks, takers, TMA landing policy, scheduling priority, kernel variant). Fewer
# blocks than items, so each block takes several and the K / V ring, Q's hand-back and O's stage run across them.
PERSISTENT_CASES = [
    (1, 2, 1, 300, 300, 64, True, 2, "bfloat16", 2, None, "eager", ("producer", 0, 1), "default"),
    (1, 2, 2, 300, 200, 128, True, 1, "float16", 3, 7, "late", (1, 0, "producer"), "default"),
    (2, 2, 1, 200, 300, 128, False, 2, "bfloat16", 2, None, "lifo", (0, "producer", 1), "default"),
    (1, 3, 3, 129, 129, 64, False, 3, "float16", 2, 3, "eager", (1, "producer", 0), "serial"),
    (1, 2, 1, 400, 390, 64, True, 3, "bfloat16", 3, None, "late", (2, 1, 0, "producer"), "consumers3"),
    (2, 1, 1, 250, 300, 128, True, 2, "float16", 1, None, "eager", ("producer", 1, 0), "pingpong"),
    (1, 2, 2, 64, 177, 128, False, 1, "bfloat16", 2, 11, "late", (0, "producer", 1), "overlap"),
    (1, 4, 2, 129, 260, 64, True, 1, "float16", 4, 5, "eager", (0, 1, "producer"), "default"),
    # the producer first and loads landing at once: it runs as far ahead as the barriers let it (a Q or a stage
    # handed back too early is overwritten before it is read)
    (1, 3, 1, 128, 256, 64, False, 3, "float16", 2, None, "eager", ("producer", 0, 1), "overlap"),
    (1, 2, 2, 200, 177, 128, False, 2, "bfloat16", 1, None, "eager", ("producer", 1, 0), "default"),
    # warpgroup 0 ahead of 1 by up to the stages: O staged in the last K tile before warpgroup 1's last Q K^T has read
    # it shows here (without the wait on empty_q's phase these fail)
    (1, 2, 2, 256, 700, 128, False, 2, "bfloat16", 1, None, "eager", ("producer", 0, 1), "overlap"),
    (1, 2, 2, 256, 700, 128, True, 1, "bfloat16", 1, None, "eager", (0, "producer", 1), "overlap"),
]


@pytest.mark.parametrize("case", PERSISTENT_CASES, ids=lambda c: f"b{c[0]}h{c[1]}kv{c[2]}-q{c[3]}-k{c[4]}-d{c[5]}-"
                         f"{'causal' if c[6] else 'full'}-s{c[7]}-blocks{c[9]}-{c[11]}-{c[13]}")
@pytest.mark.parametrize("o_buffer", [False, True], ids=["o-in-stage", "o-buffer"])
def test_wgmma_persistent_emulation_matches_sdpa(case, o_buffer):
    """Blocks taking item after item: the ring's stages and phases run on across items (a wrong count waits forever
    or reads another item's K), Q is reloaded only after every consumer warp's last Q K^T of the item before (the
    eager TMA policy lands the reload at once: an early one gives the wrong Q), O is staged in the item's last K / V
    stage and that stage refilled only after the stores read it (or in a buffer of its own, every stage handed back
    as it is read), the consumers' ring of turns runs on across items, and the counter's -1 ends every consumer."""
    b, h, hk, lq, lk, d, causal, stages, dtype, blocks, takers, tma, order, variant = case
    q, k, v = inputs(b, h, hk, lq, lk, d, dtype, seed=lq * 1000 + lk + 2)
    consumers = {"consumers2": 2, "consumers3": 3}.get(variant)
    pingpong = variant == "pingpong" or (variant not in ("serial", "overlap") and d == 64 and consumers != 2)
    out, lse = emu.emulate_wgmma(q, k, v, causal, None, stages, dtype=dtype, tma=tma, order=order,
                                 overlap=variant != "serial", pingpong=pingpong, consumers=consumers,
                                 persistent=blocks, takers=takers, o_buffer=o_buffer)
    check(out, lse, q, k, v, causal, None, dtype)


# The turn ring of the ping-pong (head dim 64) either way in a persistent block: run on across units (RING_ONCE,
# the default without the mask) or closed and opened again at each unit (the default with it): (batch, heads,
# kv_heads, q_len, k_len, causal, stages, dtype, blocks, consumers, scheduling priority, ring_once, key split: the
# last items cut along their keys, taken by the persistent blocks after the whole ones, merged by the last piece).
RING_CASES = [
    (1, 2, 1, 300, 300, True, 2, "bfloat16", 2, 2, (1, "producer", 0), True, (0, 1)),
    (1, 3, 1, 400, 390, True, 3, "float16", 2, 3, (2, 0, "producer", 1), True, (0, 1)),
    (1, 2, 2, 300, 450, False, 2, "bfloat16", 1, 3, ("producer", 2, 1, 0), False, (0, 1)),
    (2, 2, 1, 129, 260, False, 1, "float16", 3, 2, (0, "producer", 1), False, (0, 1)),
    (1, 3, 1, 130, 700, False, 2, "bfloat16", 2, 3, (1, "producer", 0, 2), False, (2, 3)),
    (1, 2, 1, 64, 600, False, 1, "float16", 1, 2, ("producer", 1, 0), True, (1, 4)),
]


@pytest.mark.parametrize("case", RING_CASES, ids=lambda c: f"b{c[0]}h{c[1]}-q{c[3]}-k{c[4]}-"
                         f"{'causal' if c[5] else 'full'}-s{c[6]}-blocks{c[8]}-c{c[9]}-ring{'once' if c[11] else 'unit'}"
                         f"-split{c[12][0]}x{c[12][1]}")
def test_wgmma_persistent_turn_ring_either_way(case):
    """Every bar.sync of a turn barrier meets one bar.arrive, over all of a block's units, whether the ring runs on
    across them or closes at each (an extra or a missing pass leaves a warpgroup waiting, or one turn early: the
    emulation's named barriers check both)."""
    b, h, hk, lq, lk, causal, stages, dtype, blocks, consumers, order, ring_once, split = case
    q, k, v = inputs(b, h, hk, lq, lk, 64, dtype, seed=lq * 1000 + lk + 5)
    out, lse = emu.emulate_wgmma(q, k, v, causal, None, stages, dtype=dtype, order=order, overlap=True, pingpong=True,
                                 consumers=consumers, persistent=blocks, ring_once=ring_once, split=split)
    check(out, lse, q, k, v, causal, None, dtype)


# The persistent build on a key-split grid: (batch, heads, kv_heads, q_len, k_len, head_dim, stages, dtype, blocks,
# takers, split (items, pieces), TMA landing policy, scheduling priority). Blocks take pieces after whole items and
# pieces after pieces (one block all of an item's: case 3), ranges of unequal length (8 tiles in 3 pieces).
PERSISTENT_SPLIT_CASES = [
    (1, 2, 1, 130, 700, 64, 2, "float16", 2, None, (2, 3), "eager", ("producer", 0, 1)),
    (1, 2, 2, 200, 600, 128, 1, "bfloat16", 3, 7, (1, 4), "late", (1, 0, "producer")),
    (2, 1, 1, 64, 500, 64, 2, "bfloat16", 1, None, (2, 2), "lifo", (0, "producer", 1, 2)),
    (1, 3, 1, 100, 900, 64, 3, "float16", 2, 4, (2, 3), "eager", ("producer", 2, 1, 0)),
]


@pytest.mark.parametrize("case", PERSISTENT_SPLIT_CASES, ids=lambda c: f"b{c[0]}h{c[1]}-q{c[3]}-k{c[4]}-d{c[5]}-"
                         f"s{c[6]}-blocks{c[8]}-split{c[10][0]}x{c[10][1]}-{c[11]}")
@pytest.mark.parametrize("o_buffer", [False, True], ids=["o-in-stage", "o-buffer"])
def test_wgmma_persistent_blocks_take_key_split_pieces(case, o_buffer):
    """A persistent block that takes a piece writes its partial, arrives on the item's counter and, the last to
    arrive, merges there and then (the run on code of the default build's merge, inside the unit loop's second
    instance); a piece that does not store still hands its held stage back, or the ring stalls; the counters end
    down. Each piece's key range: the equal split of the kernel's decode, the first all % pieces one tile longer."""
    b, h, hk, lq, lk, d, stages, dtype, blocks, takers, split, tma, order = case
    q, k, v = inputs(b, h, hk, lq, lk, d, dtype, seed=lq * 1000 + lk + 3)
    out, lse = emu.emulate_wgmma(q, k, v, False, None, stages, dtype=dtype, tma=tma, order=order, overlap=True,
                                 pingpong=d == 64, split=split, persistent=blocks, takers=takers, o_buffer=o_buffer)
    check(out, lse, q, k, v, False, None, dtype)
