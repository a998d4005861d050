"""kernels/gemm_simt.cu without a GPU: the fp32 CUDA-core GEMM compiles for sm_80 and sm_90a in every
value of every template axis (tile, A/B major, ALIGN, stages, output type) with the instructions its
record claims, the copy width ALIGN asks for, an inner loop of exactly BK * TM * TN FFMA fed by
128-bit shared loads, and no local memory."""

import itertools
import re

import pytest

from asynccopy import build, matmul
from asynccopy.matmul import GemmConfig
from tests import sass as sass_of

BK = matmul.KERNELS["simt"].bk
ARCHS = ("sm_80", "sm_90a")
TILES = ((64, 64), (128, 128), (128, 256), (256, 128))
LAYOUTS = ((False, False), (False, True), (True, False), (True, True))
ALIGNS = (16, 8, 4)
STAGES = (1, 2, 3, 4)
OUTS = ("float32", "bfloat16", "float16")


def _configs():
    """Every tile x layout on both archs; ALIGN, stages and the output type cycle through all their
    values across those (a Latin-square-like cover, not the full cross product)."""
    out = []
    for n, (arch, tile, (a_mn, b_mn)) in enumerate(itertools.product(ARCHS, TILES, LAYOUTS)):
        cfg = GemmConfig("simt", "float32", OUTS[n % 3], tile, STAGES[n % 4], a_mn, b_mn, ALIGNS[n % 3])
        out.append(pytest.param(arch, cfg, id=f"{arch}-{tile[0]}-a{int(a_mn)}b{int(b_mn)}-al{cfg.align}-"
                                               f"s{cfg.stages}-{cfg.out_dtype}"))
    return out


CONFIGS = _configs()


def test_the_cover_holds_every_value_of_every_axis():
    cfgs = [p.values for p in CONFIGS]
    for axis, values in ((lambda a, c: a, ARCHS), (lambda a, c: c.tile, TILES),
                         (lambda a, c: (c.a_mn, c.b_mn), LAYOUTS), (lambda a, c: c.align, ALIGNS),
                         (lambda a, c: c.stages, STAGES), (lambda a, c: c.out_dtype, OUTS)):
        assert {axis(a, c) for a, c in cfgs} == set(values)


@pytest.mark.parametrize("arch, cfg", CONFIGS)
def test_compiles_with_its_instructions_and_no_spill(arch, cfg):
    module = cfg.compile(arch)
    sass = module.sass()
    for op in cfg.record.sass:
        assert op in sass, f"no {op} in {cfg.name_expression()} for {arch}"
    assert "HMMA" not in sass and not re.search(r"\bLDG\.E", sass), "tensor cores, or loads through registers"

    # the copy width: MN-major operands move ALIGN bytes per LDGSTS (16: L1 bypass), K-major ones 4
    copies = set(re.findall(r"LDGSTS\.E(?:\.BYPASS)?(?:\.64|\.128)?", sass))
    widths = {"LDGSTS.E"} if not (cfg.a_mn and cfg.b_mn) else set()
    if cfg.a_mn or cfg.b_mn:
        widths.add({16: "LDGSTS.E.BYPASS.128", 8: "LDGSTS.E.64", 4: "LDGSTS.E"}[cfg.align])
    assert copies == widths, (copies, widths)

    # the compute loop: BK outer products of TM x TN, operands by LDS.128 only (GM + GN per k)
    tm, tn = cfg.tile[0] // 16, cfg.tile[1] // 16
    loop = sass_of.compute_loop(sass)
    assert loop.count("FFMA") == BK * tm * tn
    loads = [line for line in loop.splitlines() if re.search(r"\bLDS\b", line) and not line.startswith("@!PT")]
    assert len(loads) == BK * (tm // 4 + tn // 4) and all("LDS.128" in line for line in loads), loads[:4]

    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    # no static shared memory: at most the 1024-byte alignment slack of ac::dynamic_smem (sm_90a shows it)
    assert int(re.search(r"SHARED:(\d+)", usage).group(1)) <= min(1024, cfg.record.smem_reserve), usage


@pytest.mark.parametrize("tile, layouts", matmul.KERNELS["simt"].layout_tiles, ids=lambda x: str(x))
@pytest.mark.parametrize("align", ALIGNS)
def test_the_wide_tiles_keep_no_stack_in_the_layouts_that_take_them(tile, layouts, align):
    """The default gives 128 x 256 / 256 x 128 to these layouts at any alignment: 128 accumulators a thread
    beside the copies' registers, so each must still compile without local memory (sm_90a, 4 stages)."""
    for a_mn, b_mn in layouts:
        cfg = GemmConfig("simt", "float32", "float32", tile, 4, a_mn, b_mn, align)
        usage = build.disassemble(cfg.compile("sm_90a").cubin, what="--dump-resource-usage")
        assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), (cfg.name_expression(), usage)


def test_name_expression_and_shared_memory_of_a_configuration():
    cfg = GemmConfig("simt", "float32", "bfloat16", (128, 128), 3, False, True, 8)
    assert cfg.name_expression() == "gemm_simt<float, __nv_bfloat16, 128, 128, 3, 0, 1, 8>"
    assert cfg.smem_bytes == 3 * 4 * BK * (128 + 128)  # the kernel's [STAGES][BK * (BM + BN)] f32, unpadded
