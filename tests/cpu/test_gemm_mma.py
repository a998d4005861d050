"""kernels/gemm_mma.cu without a GPU: every axis of the mma GEMM (arch, dtypes, tile, operand majors,
alignment, stages) compiles to the instructions of its design (LDGSTS of the alignment's width, LDSM
with .trans where an operand is MN-major, HMMA.16816 of the input type) and without a spill."""

import itertools
import re
from dataclasses import replace

import pytest

import asynccopy
from asynccopy import build, device, matmul
from asynccopy.matmul import GemmConfig

A100 = device.lookup("A100-40GB")
ARCHS = ("sm_80", "sm_90a")
TILES = ((128, 128), (128, 256))
DTYPES = (("bfloat16", "bfloat16"), ("float16", "float16"), ("bfloat16", "float32"), ("float16", "float32"),
          ("bfloat16", "float16"))
MAJORS = ((False, False), (False, True), (True, False), (True, True))
ALIGNS = (16, 8, 4, 2)
STAGES = (1, 2, 4)
# the cp.async each alignment compiles to (ALIGN 2 has none: cp.async copies 4 bytes at least)
LDGSTS = {16: "LDGSTS.E.BYPASS.128", 8: "LDGSTS.E.64", 4: "LDGSTS.E"}  # .ZFILL: the bounded copies at the edges


def _configs():
    """Every (majors, alignment) pair on each arch; tile, dtypes and stages rotate so that each arch
    sees every value of every axis, and each (arch, alignment) both tiles."""
    out = []
    for x, arch in enumerate(ARCHS):
        for i, ((a_mn, b_mn), align) in enumerate(itertools.product(MAJORS, ALIGNS)):
            tile = TILES[(i // len(ALIGNS) + i + x) % 2] if align == 16 else TILES[0]
            dtype, out_dtype = DTYPES[(i + 2 * x) % len(DTYPES)]
            stages = STAGES[(i + x) % len(STAGES)]
            out.append((arch, GemmConfig("mma", dtype, out_dtype, tile, stages, a_mn, b_mn, align)))
    return out


CONFIGS = _configs()


def test_the_configurations_cover_every_value_of_every_axis():
    for arch in ARCHS:
        cfgs = [cfg for a, cfg in CONFIGS if a == arch]
        assert {c.tile for c in cfgs} == set(TILES)
        assert {(c.dtype, c.out_dtype) for c in cfgs} == set(DTYPES)
        assert {(c.a_mn, c.b_mn) for c in cfgs} == set(MAJORS)
        assert {c.align for c in cfgs} == set(ALIGNS)
        assert {c.stages for c in cfgs} == set(STAGES)
        # under 16-byte alignment the 128 x 256 tile spills (the narrower copies' registers): 128 x 128 only
        assert {(c.align, c.tile) for c in cfgs} == {(16, TILES[1])} | set(itertools.product(ALIGNS, TILES[:1]))


def _id(case):
    arch, c = case
    return (f"{arch}-{c.dtype}-{c.out_dtype}-{c.tile[0]}x{c.tile[1]}-a{int(c.a_mn)}b{int(c.b_mn)}-al{c.align}"
            f"-s{c.stages}")


@pytest.mark.parametrize("case", CONFIGS, ids=_id)
def test_every_configuration_compiles_with_its_instructions_and_no_spill(case):
    arch, cfg = case
    module = cfg.compile(arch)
    sass = module.sass()
    claimed = [op for op in cfg.record.sass if op != "LDGSTS" or cfg.align != 2]
    for op in claimed:
        assert op in sass, f"no {op} in {cfg.name_expression()} ({arch})"
    # the copies: cp.async of exactly the alignment's width, bounded (zero-filling) at the matrix's edges and
    # unbounded inside it where a thread's copies share a swizzle, or (ALIGN 2) loads and 16-byte shared stores
    # (.LTC128B: an L2 128-byte prefetch hint ptxas adds by itself to every copy of the early-barrier mainloop; it
    # does not change the width or the bounds, so it is left out of the comparison)
    widths = {w.replace(".LTC128B", "") for w in re.findall(r"LDGSTS[.A-Z0-9]*", sass)}
    if cfg.align == 2:
        assert not widths and "STS.128" in sass, widths
    else:
        assert LDGSTS[cfg.align] + ".ZFILL" in widths, widths
        assert {w.removesuffix(".ZFILL") for w in widths} == {LDGSTS[cfg.align]}, widths
    # ldmatrix: .trans (MT88) exactly where an operand is MN-major, plain (M88) where one is K-major
    assert ("LDSM.16.MT88.4" in sass) == (cfg.a_mn or cfg.b_mn)
    assert ("LDSM.16.M88.4" in sass) == (not cfg.a_mn or not cfg.b_mn)
    # the mma of the input type: f16 prints without a type suffix
    hmma = set(re.findall(r"HMMA\.16816\.F32[.A-Z0-9]*", sass))
    assert hmma == {"HMMA.16816.F32.BF16" if cfg.dtype == "bfloat16" else "HMMA.16816.F32"}, hmma
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    assert cfg.smem_bytes + cfg.record.smem_reserve <= A100.smem_per_block_optin


def test_the_record_launches_what_the_kernel_assumes():
    rec = matmul.KERNELS["mma"]
    assert (rec.operands, rec.threads, rec.bk, rec.persistent) == ("pointers", 256, 64, False)
    assert rec.tiles == TILES and rec.tiles_for(8) == TILES[:1]
    # dynamic shared memory = STAGES * 2 * BK * (BM + BN): one [BM][BK] and one [BN][BK] tile per stage
    assert GemmConfig("mma", "float16", "float16", (128, 256), 3, False, True, 16).smem_bytes == 3 * 2 * 64 * 384
    name = GemmConfig("mma", "bfloat16", "float32", (128, 128), 2, True, False, 4).name_expression()
    assert name == "gemm_mma<__nv_bfloat16, float, 128, 128, 2, 1, 0, 4>"


BOTH_HEADERS = r"""
#include <asynccopy/{first}.cuh>
#include <asynccopy/{second}.cuh>
namespace ac = asynccopy;
extern "C" __global__ void both(const unsigned short* in, float* out) {{
    __shared__ __align__(16) unsigned short s[4 * 64];
    for (int i = threadIdx.x; i < 4 * 64; i += 32) s[i] = in[i];
    __syncwarp();
    unsigned a[4], b[4];
    ac::ldmatrix_x4(a, s + 8 * threadIdx.x);
    ac::ldmatrix_x4_trans(b, s + 8 * threadIdx.x);
    const unsigned bb[2] = {{b[0], b[1]}};
    float d[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    ac::mma_m16n8k16<ac::MmaType<__half>::tag>(d, a, bb);
    ac::mma_m16n8k16<ac::MmaType<__nv_bfloat16>::tag>(d, a, bb);
    for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = d[i];
}}
"""


@pytest.mark.parametrize("order", [("mma", "wgmma"), ("wgmma", "mma")])
def test_mma_and_wgmma_headers_share_a_translation_unit(order):
    # mma.cuh only declares the Bf16 / F16 tags that wgmma.cuh defines: either include order compiles
    source = BOTH_HEADERS.format(first=order[0], second=order[1])
    sass = asynccopy.compile(source, arch="sm_90a", name="both_headers").sass()
    assert "LDSM.16.M88.4" in sass and "LDSM.16.MT88.4" in sass
    assert "HMMA.16816.F32.BF16" in sass and re.search(r"HMMA\.16816\.F32 ", sass)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("a_mn, b_mn", MAJORS)
@pytest.mark.parametrize("align", (16, 4))
def test_the_four_warp_variant_builds_for_two_blocks_an_sm(arch, a_mn, b_mn, align):
    """ASYNCCOPY_MMA_WARPS=4: 128 threads, 64 x 64 warp pieces; registers for two blocks an SM, no spill (copies
    of 16, 8 or 4 bytes: two-byte operands spill, as the kernel's header says)."""
    cfg = GemmConfig("mma", "bfloat16", "bfloat16", (128, 128), 3, a_mn, b_mn, align,
                     defines=((matmul.MMA_WARPS_KNOB, 4),))
    assert cfg.threads == 128 and GemmConfig("mma", "bfloat16", "bfloat16", (128, 128), 3, a_mn, b_mn, align).threads == 256
    module = cfg.compile(arch)
    sass = module.sass()
    # 4 x 8 mma tiles of 16 x 8 a warp per k16 step, 4 steps a slice: 128 HMMA in the unrolled slice
    assert sass.count("HMMA.16816.F32.BF16") == 128, sass.count("HMMA.16816.F32.BF16")
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    regs = int(re.search(r"REG:(\d+)", usage).group(1))
    assert 2 * 128 * (-(-regs // 8) * 8) <= A100.regs_per_sm, regs  # two blocks' registers fit an SM
    # and their stages: 3 of 32 KiB twice on an H200 (228 KiB an SM), 2 on an A100 (164 KiB)
    assert 2 * (cfg.smem_bytes + cfg.record.smem_reserve) <= device.lookup("H200").smem_per_sm
    assert 2 * (replace(cfg, stages=2).smem_bytes + cfg.record.smem_reserve) <= A100.smem_per_sm


@pytest.mark.parametrize("a_mn, b_mn", MAJORS)
@pytest.mark.parametrize("tile, knobs", [((192, 256), ()), ((128, 256), (("ASYNCCOPY_MMA_FRAG_AHEAD", 2),
                                                                         ("ASYNCCOPY_MMA_XOR", 1)))])
def test_fragments_row_by_row_build_without_spill(a_mn, b_mn, tile, knobs):
    """96 x 64 warp pieces (192 accumulators a thread) fit beside fragments loaded row by row (B a step, A one row
    ahead) with XOR addresses, the 192-row tile's defaults; the k loop issues every mma and ldmatrix of a slice
    once (4 k16 steps: MI * NI mma and MI + NI / 2 ldmatrix .x4 each) and reloads nothing from the stack."""
    cfg = GemmConfig("mma", "bfloat16", "bfloat16", tile, 4 if a_mn else 3, a_mn, b_mn, 16, defines=knobs)
    module = cfg.compile("sm_90a")
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    mi, ni = tile[0] // 2 // 16, tile[1] // 4 // 8
    loops = build.innermost_loops(module.sass(), ("HMMA",))
    assert len(loops) == 1, len(loops)
    ops = [op.split()[0] if not op.startswith("@") else op.split()[1] for op in loops[0]]
    assert sum(op.startswith("HMMA") for op in ops) == 4 * mi * ni
    assert sum(op.startswith("LDSM") for op in ops) == 4 * (mi + ni // 2)
    assert not any(op.startswith("LDL") for op in ops)
    assert cfg.smem_bytes + cfg.record.smem_reserve <= device.lookup("H200").smem_per_block_optin
