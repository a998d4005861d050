"""asynccopy.attention without a GPU: the mma kernel compiles for sm_80 and sm_90a at every dtype, head dim
and causal flag (stage counts 1..4 spread over the two archs) to the instructions of its design (16-byte
LDGSTS, ldmatrix plain for Q and K and .trans for V, HMMA.16816 of the input type, MUFU.EX2) without a
spill; the record's shared memory fits; and every bad input is named by the checks before anything runs."""

import itertools
import re

import numpy as np
import pytest

import asynccopy
from asynccopy import build, device
from asynccopy import sdpa as att
from asynccopy.attention_kernels import MMA_OVERLAP_KNOB, MMA_XOR_KNOB, VARIANTS
from asynccopy.errors import ArgumentError
from asynccopy.sdpa import AttentionConfig, Tensor4

A100 = device.lookup("A100-40GB")
H200 = device.lookup("H200")
L40S = device.lookup("L40S")
V100 = device.lookup("V100")
STAGES = {"sm_80": (1, 3), "sm_90a": (2, 4)}
# each as the launch builds it (the record's knobs for the mask and the head dim)
CASES = [(arch, AttentionConfig("mma", dtype, d, stages, causal,
                                defines=att.KERNELS["mma"].knobs_for(d, causal)[0]
                                + att.KERNELS["mma"].head_knobs_for(d)))
         for arch in STAGES for dtype, d, causal, stages in itertools.product(att.DTYPES, (64, 128), (False, True),
                                                                              STAGES[arch])]


def _id(case):
    arch, c = case
    return f"{arch}-{c.dtype}-d{c.head_dim}-s{c.stages}-{'causal' if c.causal else 'full'}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_configuration_compiles_with_its_instructions_and_no_spill(case):
    arch, cfg = case
    module = cfg.compile(arch)
    sass = module.sass()
    for op in cfg.record.sass + ("LDSM.16.M88.4", "LDSM.16.MT88.4", "MUFU.EX2"):
        assert op in sass, f"no {op} in {cfg.name_expression()} ({arch})"
    # every copy a 16-byte cp.async that bypasses L1 (zero-fill past the sequence: its src-size operand)
    assert set(re.findall(r"LDGSTS[.A-Z0-9]*", sass)) <= {"LDGSTS.E.BYPASS.128", "LDGSTS.E.BYPASS.128.ZFILL"}
    hmma = re.findall(r"HMMA\.16816\.F32[.A-Z0-9]*", sass)
    assert set(hmma) == {"HMMA.16816.F32.BF16" if cfg.dtype == "bfloat16" else "HMMA.16816.F32"}, set(hmma)
    # two variants of a key tile (masked, unmasked), each D/16 x BN/8 mma for Q K^T and as many for P V a row
    # piece; with Q in shared memory (32 rows a warp at head dim 64; 64 queries a block causal at 128) the Q K^T k
    # steps are a rolled loop of BN/8 a piece
    bn, pieces, steps = cfg.record.tile[1], cfg.mma_pieces, cfg.head_dim // 16
    assert pieces == (2 if cfg.head_dim == 64 else 1)
    assert cfg.mma_q_smem == (cfg.head_dim == 64 or cfg.causal)
    assert cfg.tile[0] == (64 if cfg.head_dim == 128 and cfg.causal else 128)
    plain = 2 * pieces * (bn // 8) * ((1 if cfg.mma_q_smem else steps) + steps)
    if int(dict(cfg.defines).get(MMA_OVERLAP_KNOB, 0)) and cfg.stages >= 3:
        # the overlapped loop: tile 0's Q K^T before the loop, each tile's fold with or without the next Q K^T (how
        # many copies of each the compiler keeps varies with the target)
        assert len(hmma) >= plain, len(hmma)
    else:
        assert len(hmma) == plain, len(hmma)
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    assert "LDL" not in sass and "STL" not in sass


ROWS16 = [(arch, AttentionConfig("mma", dtype, 64, stages, causal, defines=VARIANTS["mma"]["rows16"]))
          for arch in STAGES for dtype, causal, stages in itertools.product(att.DTYPES, (False, True), STAGES[arch])]


@pytest.mark.parametrize("case", ROWS16, ids=_id)
def test_the_16_row_mma_build_at_head_dim_64_keeps_q_in_registers_with_no_spill(case):
    """attention_mma.cu with ASYNCCOPY_ATTN_MMA_MW=1 at head dim 64 (the build before 32 rows a warp, kept as a
    variant): 8 warps of 16 rows, Q in registers, every k step unrolled."""
    arch, cfg = case
    assert cfg.threads == 256 and cfg.smem_bytes == cfg.stages * 2 * 64 * 64 * 2  # Q in the last stage first
    module = cfg.compile(arch)
    hmma = re.findall(r"HMMA\.16816\.F32[.A-Z0-9]*", module.sass())
    assert len(hmma) == 2 * 2 * (64 // 16) * (cfg.record.tile[1] // 8), len(hmma)
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage


@pytest.mark.parametrize("d, causal", [(128, False), (128, True), (64, True)])
def test_the_16_row_mma_build_with_q_in_shared_memory(d, causal):
    """ASYNCCOPY_ATTN_MMA_QSMEM=1 (variant qsmem): 16 rows a warp with Q's A fragments read from shared memory of
    its own at every k step (a rolled loop of them), the build that keeps head dim 128 off the stack under NVRTC 13.0
    as well (docs/design.md, Toolchain); Q's tile counts in shared memory; 32 rows a warp refuse Q in registers."""
    cfg = AttentionConfig("mma", "bfloat16", d, 2, causal, defines=VARIANTS["mma"]["qsmem"])
    assert cfg.mma_q_smem and cfg.threads == 256 and cfg.smem_bytes == 2 * 2 * 64 * d * 2 + 128 * d * 2
    module = cfg.compile("sm_90a")
    sass = module.sass()
    hmma = re.findall(r"HMMA\.16816\.F32[.A-Z0-9]*", sass)
    assert len(hmma) == 2 * (64 // 8) * (1 + d // 16), len(hmma)  # Q K^T: one k step's, rolled; P V: every step
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    with pytest.raises(build.CompileError, match="32 rows a warp keep Q in shared memory"):
        AttentionConfig("mma", "bfloat16", 64, 2, causal,
                        defines=(("ASYNCCOPY_ATTN_MMA_MW", 2), ("ASYNCCOPY_ATTN_MMA_QSMEM", 0))).compile("sm_90a")


@pytest.mark.parametrize("d", [64, 128])
def test_the_mma_build_of_64_queries_a_block_launches_half_the_warps(d):
    """ASYNCCOPY_ATTN_MMA_BM=64 (variant bm64): 4 warps of 16 rows, the grid's query tiles of 64 (the launch follows
    the knob), Q in the last stage at first (half of it), every k step unrolled as in the 128-query build; any
    other block height is refused by the kernel."""
    cfg = AttentionConfig("mma", "bfloat16", d, 2, True, defines=VARIANTS["mma"]["bm64"])
    assert (cfg.tile, cfg.threads, cfg.mma_pieces, cfg.mma_q_smem) == ((64, 64), 128, 1, False)
    assert cfg.smem_bytes == 2 * 2 * 64 * d * 2
    q_own = cfg.with_defines((("ASYNCCOPY_ATTN_MMA_QSMEM", 1),))
    assert q_own.smem_bytes == cfg.smem_bytes + 64 * d * 2
    for arch in ("sm_80", "sm_90a"):
        hmma = re.findall(r"HMMA\.16816\.F32[.A-Z0-9]*", cfg.compile(arch).sass())
        assert len(hmma) == 2 * 2 * (d // 16) * (64 // 8), len(hmma)
    with pytest.raises(build.CompileError, match="64 or 128 queries a block"):
        cfg.with_defines((("ASYNCCOPY_ATTN_MMA_BM", 32),)).compile("sm_90a")


def test_the_xor_addresses_are_the_swizzled_ones_and_the_xor_build_keeps_its_products():
    """attention_mma.cu's LaneOffsets (ASYNCCOPY_ATTN_MMA_XOR, variant xor), as its comment derives them: for every
    lane, step and row block, (k ^ 32 kk) + 16 p rows is K's swizzled() address in Q K^T and (v ^ 32 step) + 16 rows
    V's in P V and Q's; the build compiles to the same products without a stack."""
    def swizzled(row_bytes, row, col_byte):  # the .cu's swizzled<ROW_BYTES>
        return row * row_bytes + (col_byte ^ ((row & 7) << 4))

    for d in (64, 128):
        rb = 2 * d
        for lane in range(32):
            mat, r = lane // 8, lane % 8
            k = (8 * (mat >> 1) + r) * rb + 16 * ((mat & 1) ^ r)
            v = (8 * (mat & 1) + r) * rb + 16 * ((mat >> 1) ^ r)
            for kk in range(d // 16):
                for p in range(64 // 16):
                    assert (k ^ 32 * kk) + 16 * p * rb == swizzled(rb, 16 * p + 8 * (mat >> 1) + r,
                                                                   2 * (16 * kk + 8 * (mat & 1)))
                for piece in range(8):
                    assert (v ^ 32 * kk) + 16 * piece * rb == swizzled(rb, 16 * piece + 8 * (mat & 1) + r,
                                                                      2 * (16 * kk + 8 * (mat >> 1)))
            for kk in range(64 // 16):
                for p in range(d // 16):
                    assert (v ^ 32 * p) + 16 * kk * rb == swizzled(rb, 16 * kk + 8 * (mat & 1) + r,
                                                                   2 * (16 * p + 8 * (mat >> 1)))
    for d, causal in ((128, False), (64, True)):  # (the plain loop's builds, at 2 stages: no overlap)
        base = att.configure(att.check_inputs(*_qkv(d=d)), H200, kernel="mma", causal=causal, stages=2)
        base = base.with_defines(VARIANTS["mma"]["plain"])
        xor = base.with_defines(VARIANTS["mma"]["xor"])
        assert dict(xor.defines)[MMA_XOR_KNOB] == 1 and dict(base.defines)[MMA_XOR_KNOB] == 0
        got, want = (re.findall(r"HMMA\.16816\.F32[.A-Z0-9]*", c.compile("sm_90a").sass()) for c in (xor, base))
        assert got == want
        usage = build.disassemble(xor.compile("sm_90a").cubin, what="--dump-resource-usage")
        assert re.search(r"STACK:0\b", usage), usage


def test_the_default_mma_block_follows_its_rows_a_warp():
    rec = att.KERNELS["mma"]
    at64, at128 = (AttentionConfig("mma", "bfloat16", d, 3, False) for d in (64, 128))
    assert (at64.threads, at128.threads) == (128, 256) and (at64.mma_pieces, at128.mma_pieces) == (2, 1)
    assert at64.smem_bytes == 3 * 16384 + 128 * 64 * 2 and at128.smem_bytes == 3 * 32768  # Q's own 16 KiB at 64
    assert rec.fit(64, L40S.smem_per_block_optin) == 4 and rec.threads_for(64) == 128


def test_the_record_launches_what_the_kernel_assumes():
    rec = att.KERNELS["mma"]
    assert (rec.tile, rec.threads, rec.min_cc, rec.head_dims) == ((128, 64), 256, (8, 0), (64, 128))
    # a stage is a K and a V tile of 64 keys; Q (128 x D, as large) lives in the last stage at first (16 rows a
    # warp), or beside the stages (32 rows a warp: head dim 64)
    assert AttentionConfig("mma", "float16", 128, 3, True).smem_bytes == 3 * 2 * 64 * 128 * 2
    assert AttentionConfig("mma", "bfloat16", 64, 2, False).smem_bytes == 2 * 2 * 64 * 64 * 2 + 128 * 64 * 2
    assert AttentionConfig("mma", "bfloat16", 64, 2, True).name_expression() == "attention_mma<__nv_bfloat16, 64, 2, 1>"
    for d in rec.head_dims:
        assert rec.fit(d, A100.smem_per_block_optin) == 4
        assert AttentionConfig("mma", "bfloat16", d, 4, False).smem_bytes + rec.smem_reserve <= A100.smem_per_block_optin
    assert rec.fit(128, L40S.smem_per_block_optin) == 3  # 99 KiB a block: 3 x 32 KiB


def test_the_kernel_needs_sm_80():
    with pytest.raises(ArgumentError, match=r"attention kernel 'mma' needs sm_80; got sm_75"):
        AttentionConfig("mma", "bfloat16", 64, 2, False).compile("sm_75")


# ---------------------------------------------------------------------------------------------
# The checks, on shapes, dtypes and strides alone


def _t(name, shape, dtype="bfloat16", strides=None, ptr=1 << 30, device_id=0):
    strides = strides if strides is not None else att._contiguous_strides(shape)
    return Tensor4(name, tuple(shape), tuple(strides), dtype, ptr, device_id)


def _qkv(b=2, hq=8, hkv=2, lq=100, lk=300, d=128, dtype="bfloat16"):
    return _t("q", (b, hq, lq, d), dtype), _t("k", (b, hkv, lk, d), dtype), _t("v", (b, hkv, lk, d), dtype)


def test_good_inputs_pose_their_problem():
    p = att.check_inputs(*_qkv())
    assert (p.batch, p.heads, p.kv_heads, p.q_len, p.k_len, p.head_dim, p.dtype) == (2, 8, 2, 100, 300, 128, "bfloat16")
    assert p.group == 4
    # (batch, seq, heads, head_dim) memory viewed as (batch, heads, seq, head_dim): taken as it is
    b, s, h, d = 2, 77, 4, 64
    bshd = (s * h * d, d, h * d, 1)
    q, k, v = (_t(n, (b, h, s, d), "float16", bshd) for n in "qkv")
    assert att.check_inputs(q, k, v).q_len == s
    cfg = att.configure(att.check_inputs(q, k, v), A100, causal=True)
    assert (cfg.kernel, cfg.stages, cfg.causal, cfg.head_dim) == ("mma", 3, True, 64)


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v: (_t("q", (8, 100, 128)), k, v), r"q must be 4-D \(batch, heads, seq, head_dim\), got 3 dimensions"),
    (lambda q, k, v: (q, k, _t("v", (2, 2, 300, 128), "float32")), r"v must be bfloat16 or float16, got float32"),
    (lambda q, k, v: (q, _t("k", (2, 2, 300, 128), "float16"), v), r"one dtype, got q bfloat16 and k float16"),
    (lambda q, k, v: (q, _t("k", (3, 2, 300, 128)), v), r"k's batch 3 differs from q's 2"),
    (lambda q, k, v: (q, _t("k", (2, 2, 300, 64)), _t("v", (2, 2, 300, 64))), r"k's head_dim 64 differs from q's 128"),
    (lambda q, k, v: (q, k, _t("v", (2, 2, 299, 128))), r"k and v must have one shape"),
    (lambda q, k, v: (q, _t("k", (2, 3, 300, 128)), _t("v", (2, 3, 300, 128))), r"heads \(3\) must divide q's heads \(8\)"),
    (lambda q, k, v: (q, _t("k", (2, 2, 0, 128)), _t("v", (2, 2, 0, 128))), r"at least one key: their seq is 0"),
    (lambda q, k, v: (_t("q", (2, 8, 100, 128), strides=(204800, 25600, 256, 2)), k, v),
     r"q's head_dim must be contiguous \(element stride 1\), got stride 2"),
    (lambda q, k, v: (q, k, _t("v", (2, 2, 300, 128), ptr=(1 << 30) + 2)), r"v's data pointer 0x40000002 is not 16-byte"),
    (lambda q, k, v: (q, _t("k", (2, 2, 300, 128), strides=(2 * 300 * 132, 300 * 132, 132 + 1, 1)), v),
     r"k's seq stride 133 elements \(266 bytes\) is not a multiple of 16 bytes"),
    (lambda q, k, v: (_t("q", (2, 8, 100, 128), strides=(8 * 100 * 128 + 4, 100 * 128, 128, 1)), k, v),
     r"q's batch stride 102404 elements"),
    (lambda q, k, v: (q, _t("k", (2, 2, 300, 128), device_id=1), v), r"q is on device 0 and k on device 1"),
])
def test_each_bad_input_is_named(change, message):
    with pytest.raises(ArgumentError, match=message):
        att.check_inputs(*change(*_qkv()))


def test_strides_of_extent_one_axes_are_not_checked():
    # one query, one head: PyTorch reports any stride there; it is never used
    q = _t("q", (1, 1, 1, 64), strides=(7, 5, 3, 1))
    k = _t("k", (1, 1, 10, 64))
    assert att.check_inputs(q, k, _t("v", (1, 1, 10, 64))).q_len == 1


@pytest.mark.parametrize("d, message", [
    (96, r"wgmma takes head_dim 64 or 128, got 96; mma takes head_dim 64 or 128, got 96"),
    (256, r"wgmma takes head_dim 64 or 128, got 256 .*; mma takes head_dim 64 or 128, got 256 \(256 would need more "
          r"registers"),
])
def test_an_unsupported_head_dim_is_named(d, message):
    p = att.check_inputs(*_qkv(d=d))
    with pytest.raises(ArgumentError, match=r"no attention kernel can take these inputs here: " + message):
        att.configure(p, H200)


def test_kernels_and_stages_are_checked_against_the_device():
    p = att.check_inputs(*_qkv())
    with pytest.raises(ArgumentError, match=r"unknown attention kernel 'fa3'; choose one of: wgmma, mma"):
        att.configure(p, H200, kernel="fa3")
    with pytest.raises(ArgumentError, match=r"mma needs compute capability 8.0; V100 is 7.0"):
        att.configure(p, V100)
    with pytest.raises(ArgumentError, match=r"stages must be in \[1, 4\], got 5"):
        att.configure(p, H200, kernel="mma", stages=5)
    with pytest.raises(ArgumentError, match=r"5 stages of 64 KiB \(head_dim 128\) do not fit .* H200; at most 3"):
        att.configure(p, H200, stages=5)  # the default kernel there, wgmma
    with pytest.raises(ArgumentError, match=r"4 stages of 32 KiB \(head_dim 128\) do not fit the 99 KiB .* L40S; at most 3"):
        att.configure(p, L40S, stages=4)
    # mma there, its default 4 stages cut to the 3 that fit its 99 KiB
    assert att.configure(p, L40S).stages == 3 < att.KERNELS["mma"].default_stages[1] == 4
    assert att.configure(p, H200, kernel="mma", stages=1).stages == 1


def test_the_mma_plan_adds_the_stage_the_overlapped_loop_holds():
    """At head dim 128 the mma launch builds the overlapped loop at 3 or more stages, which keeps tile t + 1 landed
    while it folds tile t: STAGES - 2 tiles in flight, the plain loop's at one stage fewer. plan_stages plans the
    ring's depth and adds that stage, so a compute-bound tile that one tile in flight covers gets 3 stages at head dim
    128 (2 at 64, the plain loop), and no pick there is 2 (the plain loop's build)."""
    from asynccopy.attention_kernels import KERNELS, plan_stages

    rec = KERNELS["mma"]
    picks = {d: [plan_stages(rec, d, "bfloat16", H200, tile_ns=ns, memory=None).recommended
                 for ns in (100, 400, 1000, 2000, 5000)] for d in (64, 128)}
    assert picks[64][-1] == 2 and picks[128][-1] == 3, picks
    assert 2 not in picks[128] and max(picks[128]) <= rec.fit(128, H200.smem_per_block_optin, 2), picks
    # a compute so long that one buffer does (the plain loop, which the 1-stage build runs): no stage added
    assert plan_stages(rec, 128, "bfloat16", H200, tile_ns=50_000, memory=None).recommended == 1


def test_the_mma_kernel_runs_causal_head_dim_128_as_two_blocks_an_sm_where_they_fit():
    """The record's knobs for a mask (mask_knobs): causal at head dim 128 the mma launch builds 64 queries a block
    with Q in shared memory of its own (a grid of twice the query tiles); without the mask, or at head dim 64, the
    128-query build; where two such blocks would not fit an SM's shared memory (3 or 4 stages on an A100; 2 or more
    on an L40S's 100 KiB an SM) the launch keeps the 128-query build. The default 4 stages at head dim 128 (the
    overlapped loop's) are such a case everywhere: 64 queries are built where a caller asks for fewer stages."""
    p = att.check_inputs(*_qkv())  # head dim 128
    default = att.configure(p, H200, kernel="mma", causal=True)
    assert (default.tile[0], default.threads, default.mma_q_smem, default.stages) == (128, 256, False, 4)
    for cfg in (default, att.configure(p, H200, kernel="mma")):  # head dim 128: the overlapped loop, XOR addresses
        assert dict(cfg.defines)[MMA_OVERLAP_KNOB] == 1 and dict(cfg.defines)[MMA_XOR_KNOB] == 1, cfg.defines
    d64 = att.configure(att.check_inputs(*_qkv(d=64)), H200, kernel="mma")
    assert MMA_OVERLAP_KNOB not in dict(d64.defines) and dict(d64.defines)[MMA_XOR_KNOB] == 1, d64.defines
    causal = att.configure(p, H200, kernel="mma", causal=True, stages=2)
    assert (causal.tile[0], causal.threads, causal.mma_q_smem, causal.stages) == (64, 128, True, 2)
    assert causal.smem_bytes == 2 * 2 * 64 * 128 * 2 + 64 * 128 * 2
    full = att.configure(p, H200, kernel="mma", causal=False, stages=2)
    assert (full.tile[0], full.threads, full.mma_q_smem) == (128, 256, False)
    at64 = att.configure(att.check_inputs(*_qkv(d=64)), H200, kernel="mma", causal=True)
    assert (at64.tile[0], at64.mma_pieces) == (128, 2)
    assert att.configure(p, A100, causal=True, stages=2).tile[0] == 64  # two blocks of 2 stages and Q: 162 KiB of 164
    assert att.configure(p, A100, causal=True, stages=3).tile[0] == 128  # 2 x 113 KiB > 164
    deep = att.configure(p, A100, causal=True, stages=4)  # 4 x 32 KiB and Q's 16: one block an SM
    assert (deep.tile[0], deep.mma_q_smem, deep.stages) == (128, False, 4) and deep.fits(A100.smem_per_block_optin)
    one = att.configure(p, L40S, causal=True)  # 80 KiB fit a block of 99 KiB, but only one an SM of 100
    assert (one.tile[0], one.threads, one.mma_q_smem) == (128, 256, False)
    assert att.configure(p, L40S, causal=True, stages=1).tile[0] == 64  # 2 x 49 KiB fit 100


def test_a_variant_that_outgrows_shared_memory_is_refused_before_the_driver():
    """A build whose knobs enlarge its blocks (three consumer warpgroups at head dim 128) is checked at launch:
    the driver would only say CUDA_ERROR_INVALID_VALUE of its dynamic shared memory."""
    q, k, v = _qkv()
    p = att.check_inputs(q, k, v)
    cfg = att.configure(p, H200, stages=3).with_defines(((att.CONSUMERS_KNOB, 3),))
    assert cfg.smem_bytes > H200.smem_per_block_optin
    with pytest.raises(ArgumentError, match=r"3 stages of wgmma at head dim 128 in 192 x 128 tiles need \d+ bytes"):
        att.launch(cfg, p, q, k, v, q, 0, 1.0, stream=None, facts=H200)


def test_out_is_checked_against_the_problem():
    p = att.check_inputs(*_qkv())
    att.check_out(_t("out", (2, 8, 100, 128)), p)
    with pytest.raises(ArgumentError, match=r"out must have q's shape \(2, 8, 100, 128\), got \(2, 8, 100, 64\)"):
        att.check_out(_t("out", (2, 8, 100, 64)), p)
    with pytest.raises(ArgumentError, match=r"out must be bfloat16 \(q's dtype\), got float16"):
        att.check_out(_t("out", (2, 8, 100, 128), "float16"), p)
    with pytest.raises(ArgumentError, match=r"out's seq stride 130 elements"):
        att.check_out(_t("out", (2, 8, 100, 128), strides=(8 * 100 * 130, 100 * 130, 130, 1)), p)
    with pytest.raises(ArgumentError, match=r"out overlaps itself \(a broadcast view\?"):
        att.check_out(_t("out", (2, 8, 100, 128), strides=(0, 100 * 128, 128, 1)), p)


def test_broadcast_keys_and_values_are_read_as_they_are():
    # k and v expanded over the heads (stride 0): every head reads the one stored
    k, v = (_t(name, (2, 8, 300, 128), strides=(300 * 128, 0, 128, 1)) for name in "kv")
    assert att.check_inputs(_t("q", (2, 8, 100, 128)), k, v).kv_heads == 8


class _FakeCudaArray:
    """Passes the 'is it a CUDA array' check without a GPU (never viewed: the checks before it fail)."""

    __cuda_array_interface__ = {"shape": (1, 1, 1, 64), "typestr": "<f2", "data": (1 << 30, False), "version": 3}


def test_host_arrays_and_bad_flags_are_refused_before_any_gpu_work():
    dev = _FakeCudaArray()
    host = np.zeros((1, 1, 4, 64), dtype=np.float16)
    with pytest.raises(ArgumentError, match=r"k is a host \(NumPy\) array; pass a CUDA array"):
        asynccopy.attention(dev, host, dev)
    with pytest.raises(ArgumentError, match=r"v must be a CUDA array speaking DLPack or __cuda_array_interface__, got list"):
        asynccopy.attention(dev, dev, [[1.0]])
    with pytest.raises(ArgumentError, match=r"out is a host \(NumPy\) array"):
        asynccopy.attention(dev, dev, dev, out=host)
    with pytest.raises(ArgumentError, match=r"causal must be True or False, got 'yes'"):
        asynccopy.attention(dev, dev, dev, causal="yes")
    with pytest.raises(ArgumentError, match=r"scale must be a finite number, got nan"):
        asynccopy.attention(dev, dev, dev, scale=float("nan"))
    with pytest.raises(ArgumentError, match=r"stages must be in \[1, 8\], got 0"):
        asynccopy.attention(dev, dev, dev, stages=0)


@pytest.mark.parametrize("q_tiles, heads, batch, kv_bytes", [(6, 16, 4, 1 << 20), (43, 16, 4, 4 << 20),
                                                             (5, 3, 2, 100 << 20), (1, 7, 1, 0), (9, 5, 3, 9 << 20)])
def test_the_causal_block_order_is_the_headers_and_runs_every_tile_once_longest_first(q_tiles, heads, batch,
                                                                                     kv_bytes):
    from asynccopy.attention_schedule import L2_BUDGET, causal_order
    from tests.cpu.attention_emulation import causal_tile

    order = causal_order(q_tiles, heads, batch, kv_bytes)
    blocks = q_tiles * heads * batch
    assert [causal_tile(i, q_tiles, heads, batch, kv_bytes) for i in range(blocks)] == order
    assert sorted(order) == sorted(itertools.product(range(q_tiles), range(heads), range(batch)))
    chunk = max(1, min(heads * batch, L2_BUDGET // max(1, kv_bytes)))
    for first in range(0, blocks, chunk * q_tiles):  # inside a chunk of pairs: the query tiles never grow
        tiles = [qt for qt, _, _ in order[first:first + chunk * q_tiles]]
        assert tiles == sorted(tiles, reverse=True)


def test_the_launch_model_gives_short_causal_problems_smaller_blocks():
    from asynccopy.attention_kernels import KERNELS
    from asynccopy.attention_schedule import consumers_for_problem, grid_time

    rec = KERNELS["wgmma"]
    # 1024 x 64 causal: 6 tiles of 192 a head waste a partial tile and a coarser diagonal; 8 of 128 finish sooner
    assert consumers_for_problem(rec, 64, 1024, 1024, 16, 4, True, 132) == 2
    assert consumers_for_problem(rec, 64, 8192, 8192, 16, 4, True, 132) == 3
    assert consumers_for_problem(rec, 64, 8192, 8192, 16, 4, False, 132) == 3
    assert consumers_for_problem(rec, 128, 1024, 1024, 16, 4, True, 132) == 2  # no choice at 128
    # equal blocks: whole waves; 132 SMs take 132 blocks in one wave, 133 in two
    assert grid_time(128, 128, 128 * 132, 256, 1, 1, False, 132, 0) == 2 * 128
    assert grid_time(128, 128, 128 * 133, 256, 1, 1, False, 132, 0) == 2 * 2 * 128
    # causal: one SM runs the tiles in turn (1 + 2 + 3 key tiles of 128 queries), each with its overhead
    assert grid_time(128, 128, 384, 384, 1, 1, True, 1, 0) == 6 * 128
    assert grid_time(128, 128, 384, 384, 1, 1, True, 1, 0, 0.5) == 7.5 * 128
    # two SMs: the longest tile on one, the other two after each other on the other
    assert grid_time(128, 128, 384, 384, 1, 1, True, 2, 0) == 3 * 128
    # measured (H200): at 2048 x 64 causal three consumers were 3.6% faster than two
    assert consumers_for_problem(rec, 64, 2048, 2048, 16, 4, True, 132) == 3
    p = att.check_inputs(*_qkv(b=4, hq=16, hkv=16, lq=1024, lk=1024, d=64))
    assert dict(att.configure(p, H200, causal=True).defines).get(att.CONSUMERS_KNOB) == 2
    assert att.configure(p, H200, causal=True).tile == (128, 128)
    assert att.CONSUMERS_KNOB not in dict(att.configure(p, H200, causal=False).defines)


def test_the_last_wave_is_cut_along_the_keys_where_it_leaves_sms_idle():
    from asynccopy.attention_schedule import MAX_PIECES, PARTIAL_TILES, key_split, tail_split

    # 8192 x 128, B 4 x H 16: 4096 items of 47 key tiles on 132 SMs leave 4 for a last wave
    assert tail_split(4096, 47, 132, 3.0) > 8
    assert tail_split(132 * 31, 47, 132, 3.0) == 1  # whole waves: nothing to cut
    assert tail_split(5, 1, 132, 3.0) == 1  # one key tile: nothing to cut
    assert tail_split(100, 12, 132, 3.0) == 1  # 100 of 132 SMs busy: cutting in two needs two rounds
    for items, tiles, overhead in ((4096, 47, 3.0), (704, 16, 3.0), (2, 24, 3.0), (7, 300, 0.0), (131, 3, 3.0)):
        rest = items % 132

        def time(n, tiles=tiles, overhead=overhead, rest=rest):  # the last wave, its items in n pieces each (1: whole)
            if n == 1:
                return tiles + overhead
            return -(-rest * n // 132) * (tiles / n + overhead + PARTIAL_TILES) + PARTIAL_TILES * (n - 1)

        p = tail_split(items, tiles, 132, overhead)
        assert p == min(range(1, min(tiles, MAX_PIECES) + 1), key=time)
    p = att.check_inputs(*_qkv(b=4, hq=16, hkv=16, lq=8192, lk=8192, d=128))
    cfg = att.configure(p, H200, causal=False)
    tail, pieces = key_split(cfg, 8192, 8192, 16, 4, 132)
    assert (tail, pieces) == (4, tail_split(4096, 47, 132, cfg.record.block_overhead)) and pieces > 1
    assert key_split(att.configure(p, H200, causal=True), 8192, 8192, 16, 4, 132) == (0, 1)  # short tiles run last
    assert key_split(att.configure(p, H200, kernel="mma", causal=False), 8192, 8192, 16, 4, 132) == (0, 1)


def test_the_consumers_take_turns_at_head_dim_128_on_items_of_few_key_tiles():
    from asynccopy.attention_schedule import PINGPONG_KNOB, mean_key_tiles

    def turns(lq, lk, d=128, causal=False, stages=None, kernel=None):
        p = att.check_inputs(*_qkv(b=4, hq=16, hkv=16, lq=lq, lk=lk, d=d))
        return dict(att.configure(p, H200, causal=causal, stages=stages, kernel=kernel).defines).get(PINGPONG_KNOB)

    assert mean_key_tiles(128, 176, 2048, 2048, False) == 12 and mean_key_tiles(128, 128, 384, 384, True) == 2
    assert turns(2048, 2048) == 1 and turns(4096, 4096) == 1 and turns(4096, 4096, causal=True) == 1
    assert turns(8192, 8192) is None and turns(16384, 16384, causal=True) is None  # 47 and 64.5 key tiles an item
    assert turns(100, 8192) is None and turns(8192, 100) == 1  # the keys an item reads decide, not the queries
    assert turns(2048, 2048, d=64) is None  # at 64 the kernel's own default takes turns already
    assert turns(2048, 2048, kernel="mma") is None  # no warpgroups
    assert turns(2048, 2048, stages=1) == 1
    p = att.check_inputs(*_qkv(b=4, hq=16, hkv=16, lq=2048, lk=2048, d=128))
    overlap = att.configure(p, H200).with_defines(VARIANTS["wgmma"]["overlap"])  # a variant's knob wins
    assert dict(overlap.defines)[PINGPONG_KNOB] == 0
