"""asynccopy.matmul without a GPU: every GEMM configuration compiles for sm_90a with the instructions
its record claims and no spill; the checks name what is wrong before anything runs."""

import re
from dataclasses import replace

import pytest

from asynccopy import build, device, matmul
from asynccopy.errors import ArgumentError
from asynccopy.gemm_kernels import epi_bufs_of
from asynccopy.matmul import GemmConfig, Matrix

H200 = device.lookup("H200")
A100 = device.lookup("A100-40GB")


def _m(rows, cols, *, dtype="bfloat16", row_major=True, lead=None, ptr=1 << 30):
    lead = lead if lead is not None else (cols if row_major else rows)
    return Matrix(None, ptr, rows, cols, lead if row_major else 1, 1 if row_major else lead, dtype, 0)


CONFIGS = [GemmConfig("wgmma", dt, out, (128, bn), 4 if bn == 256 else 6, a_mn, b_mn, align)
           for dt, out, align in (("bfloat16", "bfloat16", 16), ("float16", "float16", 4), ("bfloat16", "float32", 16),
                                  ("float16", "float32", 2))
           for bn in (128, 256) for a_mn in (False, True) for b_mn in (False, True)]


def _id(c):
    return f"{c.dtype}-{c.out_dtype}-n{c.tile_n}-a{int(c.a_mn)}b{int(c.b_mn)}-al{c.align}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_every_configuration_compiles_with_its_instructions_and_no_spill(cfg):
    module = cfg.compile("sm_90a")
    sass = module.sass()
    for op in cfg.record.sass + ("USETMAXREG",):
        assert op in sass, f"no {op} in {cfg.name_expression()}"
    assert ("UTMASTG" in sass) == (cfg.align == 16), "C leaves through TMA stores exactly when it is 16-byte aligned"
    # f16 inputs print as HGMMA.64xNx16.F32 (no input type), bf16 as ...F32.BF16
    assert re.search(rf"HGMMA\.64x{cfg.tile_n}x16\.F32{'.BF16' if cfg.dtype == 'bfloat16' else ' '}", sass)
    # the transposes: an MN-major operand is read with the transpose flag
    hgmma = [line for line in sass.splitlines() if "HGMMA" in line]
    assert all(("tnspA" in line) == cfg.a_mn and ("tnspB" in line) == cfg.b_mn for line in hgmma), hgmma[:2]
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and "STACK:0" in usage, usage
    assert cfg.smem_bytes + 2048 <= H200.smem_per_block_optin


def test_the_map_prefetch_knob_prefetches_the_three_tensor_maps():
    """ASYNCCOPY_WGMMA_PREFETCH_MAPS=1: thread 0's prefetch.tensormap of A's, B's and C's maps (tma.cuh
    tensormap_prefetch) compiles to the TMA unit's cache control; the default build has none."""
    from dataclasses import replace

    cfg = GemmConfig("wgmma", "bfloat16", "bfloat16", (128, 256), 3, False, True, 16)
    on = replace(cfg, defines=(("ASYNCCOPY_WGMMA_PREFETCH_MAPS", 1),)).compile("sm_90a").sass()
    assert on.count("UTMACCTL") == 3 and "UTMACCTL" not in cfg.compile("sm_90a").sass()


def test_the_suspend_hint_knob_sleeps_a_waiting_thread_on_the_barrier():
    """ASYNCCOPY_MBARRIER_SUSPEND_NS (mbarrier.cuh): try_wait with a suspend-time hint compiles to a sleep the barrier's
    completion ends (NANOSLEEP.SYNCS of that many ns) in the waits' retry paths, where the default spins (no sleep)."""
    from dataclasses import replace

    cfg = GemmConfig("wgmma", "bfloat16", "bfloat16", (128, 256), 3, False, True, 16)
    default = cfg.compile("sm_90a").sass()
    on = replace(cfg, defines=(("ASYNCCOPY_MBARRIER_SUSPEND_NS", 1000000),)).compile("sm_90a").sass()
    assert "NANOSLEEP" not in default
    sleeps = re.findall(r"NANOSLEEP\.SYNCS (0x[0-9a-f]+)", on)
    assert sleeps and {int(x, 16) for x in sleeps} == {1000000}
    assert len(sleeps) >= 2  # the producer's wait for a free stage and the consumers' for a full one


@pytest.mark.parametrize("tile_n, out_dtype", [(256, "bfloat16"), (128, "float16"), (256, "float32")])
def test_four_staging_buffers_store_a_whole_block_after_one_wait(tile_n, out_dtype):
    """ASYNCCOPY_WGMMA_EPI_BUFS=4: 32 KiB more shared memory; where a consumer's 2-byte 64 x BN block fits the four
    buffers, two warpgroup barriers a tile instead of two a chunk (f32: the chunks rotate through four buffers, the
    same barriers as two); the same TMA stores, no local memory."""
    from dataclasses import replace

    cfg = GemmConfig("wgmma", "bfloat16", out_dtype, (128, tile_n), 3, False, True, 16)
    four = replace(cfg, defines=((matmul.EPI_BUFS_KNOB, 4),))
    assert four.smem_bytes == cfg.smem_bytes + 2 * 2 * 64 * 128 <= H200.smem_per_block_optin
    one, two = cfg.compile("sm_90a").sass(), four.compile("sm_90a").sass()
    # (SASS counts: at 128 columns ptxas keeps the two-buffer loop of two chunks rolled, so only 256 shows them)
    bars, commits = ([x.count(op) for x in (one, two)] for op in ("BAR.SYNC", "UTMACMDFLUSH"))
    if (tile_n, out_dtype) == (256, "bfloat16"):  # four chunks: one commit a tile, not one a chunk
        assert commits == [4, 1] and bars[1] == bars[0] - 6, (bars, commits)
    elif out_dtype == "float32":  # eight chunks through four buffers: the two-buffer build's code
        assert commits[1] == commits[0] and bars[1] == bars[0], (bars, commits)
    assert two.count("UTMASTG") == one.count("UTMASTG") > 0
    usage = build.disassemble(four.compile("sm_90a").cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and "STACK:0" in usage, usage


def test_the_default_pairs_multicast_b_and_store_a_whole_block_after_one_wait():
    """A large a @ b by default: cluster pairs sharing B (each block multicasts its half of B's tile, two panels of
    64 columns), four staging buffers of C a consumer (one commit of TMA stores a tile), the cluster's syncs; no
    local memory (an 8-byte stack slot outside the k-loop, written once)."""
    cfg = matmul.configure(_m(8192, 8192), _m(8192, 8192), "bfloat16", H200)
    module = cfg.compile("sm_90a")
    sass = module.sass()
    assert sass.count("UTMALDG.2D.MULTICAST") == 2 and sass.count("UTMACMDFLUSH") == 1 and "UCGABAR" in sass, sass
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage), usage


@pytest.mark.parametrize("a_mn, b_mn", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("share", ["0", "1"])
def test_the_cluster_variant_multicasts_the_shared_operand_and_syncs_its_pair(a_mn, b_mn, tile_n, share):
    from dataclasses import replace

    # (False, True) at 256 sharing B, 4 stages: the default pair (torch's a @ b, B's rows off 128-byte lines)
    cfg = GemmConfig("wgmma", "bfloat16", "bfloat16", (128, tile_n), 4 if (b_mn and not a_mn) else 3, a_mn, b_mn, 16)
    pair = replace(cfg, defines=((matmul.CLUSTER_KNOB, 2), (matmul.SHARE_KNOB, share)))
    one, two = cfg.compile("sm_90a").sass(), pair.compile("sm_90a").sass()
    # each block multicasts its half of the shared operand (one box, or one panel per 64 columns of B's
    # half), loads the other operand whole
    multicasts = two.count("UTMALDG.2D.MULTICAST")
    assert multicasts == (1 if share == "0" or not b_mn else tile_n // 128), two
    assert "UTMALDG.2D.MULTICAST" not in one
    # the remote releases carry no fence: GPU-scope memory barriers only at the cluster syncs (the start and the
    # ends) and the stream-K flag's release (the unpaired build's one), not one per consumer warp and stage
    # (release.cluster's MEMBAR.ALL.GPU cost 40% at 8192^3)
    assert one.count("MEMBAR.ALL.GPU") == 1, one
    assert two.count("MEMBAR.ALL.GPU") == two.count("UCGABAR_ARV") + 1 > 1, two
    assert "UCGABAR" in two and "UCGABAR" not in one  # cluster.sync at the start and the end
    usage = build.disassemble(pair.compile("sm_90a").cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage), usage


def test_wgmma_needs_the_arch_specific_hopper_target():
    cfg = CONFIGS[0]
    for arch in ("sm_90", "sm_80"):
        with pytest.raises(ArgumentError, match=rf"GEMM kernel 'wgmma' needs sm_90a.*got {arch}"):
            cfg.compile(arch)


def test_operands_are_checked_against_each_other():
    a, b = _m(64, 32), _m(32, 16)
    assert matmul.check_operands(a, b, None) == "bfloat16"
    assert matmul.check_operands(a, b, "fp32") == "float32"
    with pytest.raises(ArgumentError, match=r"a and b must have one dtype, got bfloat16 and float16"):
        matmul.check_operands(a, _m(32, 16, dtype="float16"), None)
    with pytest.raises(ArgumentError, match=r"inner dimensions differ"):
        matmul.check_operands(a, _m(31, 16), None)
    with pytest.raises(ArgumentError, match=r"a must be one of bfloat16, float16, float32, got float64"):
        matmul.check_operands(_m(64, 32, dtype="float64"), _m(32, 16, dtype="float64"), None)
    with pytest.raises(ArgumentError, match=r"wgmma takes bfloat16, float16, not float32"):
        matmul.configure(_m(64, 32, dtype="float32"), _m(32, 16, dtype="float32"), "float32", H200, kernel="wgmma")
    with pytest.raises(ArgumentError, match=r"out_dtype must be one of bfloat16, float16, float32, got int8"):
        matmul.check_operands(a, b, "int8")


def test_configuration_defaults_and_limits():
    a, b = _m(1000, 512), _m(512, 3072)
    cfg = matmul.configure(a, b, "bfloat16", H200)
    # 96 tiles of 128 x 256 fill one wave; 128 x 128 would take two: the wide tile at its measured 3 stages, alone
    # (B's rows on 128-byte lines, and one wave: pairs sharing B lost there)
    assert (cfg.kernel, cfg.tile, cfg.stages, cfg.a_mn, cfg.b_mn) == ("wgmma", (128, 256), 3, False, True)
    assert cfg.defines == () and matmul.KERNELS["wgmma"].pairs_share_b(cfg.tile, a, b)
    # B's rows 6000 bytes apart, off 128-byte lines: pairs of blocks on neighbouring tile-rows share B, 4 stages
    paired = matmul.configure(a, _m(512, 3000), "bfloat16", H200)
    assert paired.stages == 4 and paired.defines == matmul.PAIRED and not paired.stream_k
    assert matmul.configure(a, _m(512, 3000), "bfloat16", H200, stages=2).stages == 2
    # on the lines, more tiles than SMs: pairs at 3 stages with four staging buffers of C a consumer, their last wave
    # shared out where a block saves enough k-blocks (8192^3: 1024 pair units over 66 pairs)
    big = matmul.configure(_m(8192, 8192), _m(8192, 8192), "bfloat16", H200)
    assert matmul.cluster_of(big) == (2, "b") and (big.stages, epi_bufs_of(big)) == (3, 4) and big.stream_k
    assert big.smem_bytes <= H200.smem_per_block_optin
    # the caller's stage count: four buffers where they fit beside it, else two
    sq = _m(4096, 4096)
    assert [epi_bufs_of(matmul.configure(sq, sq, "bfloat16", H200, stages=s)) for s in (1, 2, 3, 4)] == [4, 4, 4, 2]
    assert matmul.configure(sq, sq, "bfloat16", H200, stages=4).smem_bytes <= H200.smem_per_block_optin
    # without enough k-blocks to save, no stream-K: 4096^3 is 256 units over 66 pairs, 8 k-blocks saved a block
    assert not matmul.configure(sq, sq, "bfloat16", H200).stream_k
    # no pairs where they would take a wave more than the tiles alone: 237 tiles in 2 waves, 158 pair units in 3
    wide = matmul.configure(_m(300, 64), _m(64, 20032), "bfloat16", H200)
    assert wide.tile == (128, 256) and wide.defines == () and matmul.KERNELS["wgmma"].pairs_share_b(wide.tile, _m(
        300, 64), _m(64, 20032))
    # one tile-row: nothing to pair
    assert matmul.configure(_m(100, 512), _m(512, 3000), "bfloat16", H200, tile=(128, 256)).defines == ()
    b = _m(512, 3000)
    narrow = matmul.configure(a, _m(512, 100, row_major=False, lead=512), "bfloat16", H200)
    # one wave either way: 16 tiles of 128 x 64 (each at 0.57 of the widest's speed) beat 8 of 128 x 128 (0.8);
    # 8 stages of 24 KiB + 32 KiB of C staging + 2 KiB fit 227 KiB
    assert (narrow.tile_n, narrow.stages, narrow.b_mn) == (64, 8, False)
    wide = matmul.configure(a, _m(512, 200, row_major=False, lead=512), "bfloat16", H200, tile=(128, 128))
    # 6 stages of 32 KiB + 32 KiB of C staging + 2 KiB fit 227 KiB; a 7th does not
    assert (wide.tile_n, wide.stages) == (128, 6)
    with pytest.raises(ArgumentError, match=r"5 stages of 48 KiB \(tile 128 x 256\) do not fit .* at most 4"):
        matmul.configure(a, b, "bfloat16", H200, stages=5)
    with pytest.raises(ArgumentError, match=r"takes tiles 128x64, 128x128, 128x256; tile=96 names none"):
        matmul.configure(a, b, "bfloat16", H200, tile=96)
    with pytest.raises(ArgumentError, match=r"unknown GEMM kernel .dma.; choose one of: wgmma, mma, simt"):
        matmul.configure(a, b, "bfloat16", H200, kernel="dma")


def test_a_kernel_that_cannot_take_the_operands_says_why():
    a, b = _m(64, 30), _m(30, 16)  # a's rows are 60 bytes apart: no TMA
    with pytest.raises(ArgumentError, match=r"wgmma a's leading dimension 30 x 2 bytes is not a multiple of 16"):
        matmul.configure(a, b, "bfloat16", H200, kernel="wgmma")
    with pytest.raises(ArgumentError, match=r"wgmma needs compute capability 9.0; A100-40GB is 8.0"):
        matmul.configure(_m(64, 32), _m(32, 16), "bfloat16", A100, kernel="wgmma")
    with pytest.raises(ArgumentError, match=r"b's data pointer 0x40000008 is not 16-byte aligned"):
        matmul.configure(_m(64, 32), _m(32, 16, ptr=(1 << 30) + 8), "bfloat16", H200, kernel="wgmma")
    one_row = _m(1, 30)  # a single row's stride is never used
    assert matmul.why_not(matmul.KERNELS["wgmma"], one_row, _m(30, 16, row_major=False, lead=32), H200) is None
    with pytest.raises(ArgumentError, match=r"no GEMM kernel can take these operands here: wgmma takes bfloat16, "
                                            r"float16, not float64; mma takes .*; simt takes float32, not float64"):
        matmul.configure(_m(64, 32, dtype="float64"), _m(32, 16, dtype="float64"), "float64", H200)


def test_the_first_kernel_that_can_take_the_operands_is_chosen():
    # TMA where it can; the LDGSTS kernel where a stride or the GPU rules TMA out; CUDA cores for float32
    assert matmul.configure(_m(64, 32), _m(32, 16), "bfloat16", H200).kernel == "wgmma"
    fallback = matmul.configure(_m(64, 30), _m(30, 16), "bfloat16", H200)
    assert (fallback.kernel, fallback.align) == ("mma", 4)  # 60-byte rows: 4-byte copies
    assert matmul.configure(_m(64, 32), _m(32, 16), "bfloat16", A100).kernel == "mma"
    odd = matmul.configure(_m(64, 31), _m(31, 16), "float16", H200)
    assert (odd.kernel, odd.align) == ("mma", 2)
    f32 = matmul.configure(_m(64, 32, dtype="float32"), _m(32, 16, dtype="float32"), "float32", H200)
    assert (f32.kernel, f32.tile, f32.align) == ("simt", (64, 64), 16)
    # 300 x 300: 25 tiles of 64 x 64 keep more SMs busy than 9 of 128 x 128; 4096 x 4096 fills every SM either way
    assert matmul.configure(_m(300, 32, dtype="float32"), _m(32, 300, dtype="float32"), "float32",
                            H200).tile == (64, 64)

    def f32_tile(a_mn, b_mn):
        a = _m(4096, 32, dtype="float32", row_major=not a_mn)
        return matmul.configure(a, _m(32, 4096, dtype="float32", row_major=b_mn), "float32", H200).tile

    # the wide tile puts a K-major operand (4-byte transposing copies) on its 128 side; both K-major: square
    assert f32_tile(False, True) == (128, 256) and f32_tile(True, True) == (128, 256)
    assert f32_tile(True, False) == (256, 128) and f32_tile(False, False) == (128, 128)


def test_the_default_tile_weighs_idle_sms_against_the_wide_tiles_speed():
    rec = matmul.KERNELS["wgmma"]
    # one wave of 128 tiles of 128 x 64 (0.57 of the widest's speed) before 64 of 128 x 128 (0.8) or 32 wide ones
    # (H200, 2026-12-01: 128x8192x8192 418 TFLOP/s at 128 x 64 against about 380 at 128 x 128)
    assert rec.default_tile(128, 8192, 132) == (128, 64)
    assert rec.default_tile(1024, 1024, 132) == (128, 64)  # 210 against 186 TFLOP/s, the same run
    assert rec.default_tile(2048, 2048, 132) == (128, 256)  # one wave of 128 wide tiles
    assert rec.default_tile(8192, 8192, 132) == (128, 256)  # full waves either way: the faster tile
    assert rec.default_tile(3000, 5000, 132) == (128, 256)
    assert rec.default_tile(100, 100, 132) == (128, 64)  # two SMs on half the columns each, not one on all


def test_layouts_name_their_majors():
    assert _m(8, 16).row_major and not _m(8, 16, row_major=False).row_major
    assert _m(8, 16, row_major=False, lead=24).lead == 24
    cfg = replace(CONFIGS[0], stages=3)
    assert cfg.name_expression() == "gemm_wgmma<__nv_bfloat16, __nv_bfloat16, 128, 128, 3, 0, 0, 16>"


def test_a_vector_is_called_the_layout_whose_elements_are_adjacent():
    # the transposed view of a row [1, k] is a column [k, 1] with unit row stride: column-major, so its
    # tensor map runs along k and the (unused) leading dimension never reaches TMA
    col = Matrix(None, 1 << 30, 64, 1, 1, 64, "bfloat16", 0)
    assert not col.row_major and matmul.why_not(matmul.KERNELS["wgmma"], _m(1, 64), col, H200) is None
    # a column cut out of a row-major matrix (row stride 8): row-major, one element per row
    assert Matrix(None, 1 << 30, 64, 1, 8, 1, "bfloat16", 0).row_major
    # a column with a row stride of 3 elements: row-major with 6-byte rows, which TMA cannot take
    bad = Matrix(None, 1 << 30, 64, 1, 3, 1, "bfloat16", 0)
    assert "leading dimension 3 x 2 bytes" in matmul.why_not(matmul.KERNELS["wgmma"], _m(1, 64), bad, H200)
    assert Matrix(None, 1 << 30, 1, 64, 64, 1, "bfloat16", 0).row_major
    assert not Matrix(None, 1 << 30, 1, 64, 1, 8, "bfloat16", 0).row_major


def test_cluster_knobs_the_launch_cannot_take_are_named():
    from asynccopy.gemm_kernels import cluster_of

    base = GemmConfig("wgmma", "bfloat16", "bfloat16", (128, 256), 3, False, True, 16)
    assert cluster_of(base) == (1, None)
    assert cluster_of(replace(base, defines=matmul.PAIRED)) == (2, "b")
    assert cluster_of(replace(base, defines=((matmul.CLUSTER_KNOB, 2),))) == (2, "a")
    assert cluster_of(replace(base, tile=(128, 128), defines=matmul.PAIR_K)) == (2, "k")
    with pytest.raises(ArgumentError, match=r"ASYNCCOPY_WGMMA_SHARE=1: a shared B tile needs 128 or more columns "
                                            r"\(tile 128 x 64\)"):
        cluster_of(replace(base, tile=(128, 64), defines=matmul.PAIRED))
    with pytest.raises(ArgumentError, match=r"ASYNCCOPY_WGMMA_SHARE='3': a pair shares A \(0\), B \(1\) or a tile's k"):
        cluster_of(replace(base, defines=((matmul.CLUSTER_KNOB, 2), (matmul.SHARE_KNOB, "3"))))
    with pytest.raises(ArgumentError, match=r"ASYNCCOPY_WGMMA_CLUSTER=2: clusters of 1 or 2 blocks, and 2 only "
                                            r"without split k \(splits=4\)"):
        cluster_of(replace(base, splits=4, defines=matmul.PAIRED))
    with pytest.raises(ArgumentError, match=r"ASYNCCOPY_WGMMA_CLUSTER=4: clusters of 1 or 2 blocks"):
        cluster_of(replace(base, defines=((matmul.CLUSTER_KNOB, 4),)))


@pytest.mark.parametrize("a_mn, b_mn", [(False, True), (True, False)])
@pytest.mark.parametrize("tile_n, out_dtype", [(128, "bfloat16"), (64, "float32"), (256, "bfloat16")])
@pytest.mark.parametrize("bulk", [None, 0])
def test_the_pair_k_variant_sends_its_accumulators_into_block_0(a_mn, b_mn, tile_n, out_dtype, bulk):
    """PAIR_K: block 1 of a pair sends its accumulators into block 0's staging buffers in rounds of what they hold
    (16 KiB a warpgroup: BN / 64 rounds), by default one bulk copy a round (UBLKCP shared to shared), with the knob
    at 0 a consumer thread's BN / 2 accumulators as BN / 8 16-byte st.async; neither block multicasts; GPU-scope
    fences only at the cluster syncs; no local memory; no more shared memory than the tile alone."""
    knob = () if bulk is None else ((matmul.PAIR_BULK_KNOB, bulk),)
    cfg = GemmConfig("wgmma", "bfloat16", out_dtype, (128, tile_n), 4, a_mn, b_mn, 16, defines=matmul.PAIR_K + knob)
    module = cfg.compile("sm_90a")
    sass = module.sass()
    if bulk is None:
        assert len(re.findall(r"\bUBLKCP\.S\.S\b", sass)) == tile_n // 64 and "STAS" not in sass
    else:
        assert len(re.findall(r"\bSTAS\.128\b", sass)) == tile_n // 8 and "UBLKCP" not in sass
    assert "MULTICAST" not in sass
    assert sass.count("MEMBAR.ALL.GPU") == sass.count("UCGABAR_ARV") > 0
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and "STACK:0" in usage, usage
    assert cfg.smem_bytes == replace(cfg, defines=()).smem_bytes


@pytest.mark.parametrize("shape, pairs", [
    ((128, 8192, 8192), True),    # 64 tiles of 128 x 128: 128 blocks of half their k, against 128 x 64 tiles
    ((1024, 1024, 4096), True),   # the same 64 tiles, 32 k-blocks a block
    ((1024, 1024, 2048), True),   # 16 a block
    ((1024, 1024, 2040), True),   # 32 k-blocks, the last partial
    ((1024, 1024, 1984), False),  # 31 k-blocks: fewer than 16 a block
    ((1024, 1024, 1024), False),  # 8 a block: the exchange costs more than the idle SMs
    ((2048, 2048, 2048), False),  # 256 tiles: 128 x 256 tiles alone fill the SMs
    ((2000, 2200, 2048), False),  # 288 tiles of 128 x 128: more pairs than one wave (stream-K instead)
    ((1024, 1152, 8192), False),  # 72 tiles: 144 blocks, one more than a wave
    ((256, 256, 16384), False),   # 4 tiles: split k into 8 instead
    ((8192, 8192, 8192), False),
])
def test_pairs_split_k_where_a_tile_alone_leaves_the_sms_idle(shape, pairs):
    m, n, k = shape
    a, b = _m(m, k), _m(k, n, row_major=True)
    cfg = matmul.configure(a, b, "bfloat16", H200)
    assert cfg.pair_k == pairs, cfg
    if pairs:
        assert cfg.tile == (128, 128) and cfg.splits == 1 and not cfg.stream_k
        assert cfg.smem_bytes + matmul.KERNELS["wgmma"].smem_reserve <= H200.smem_per_block_optin
    # a tile given by the caller is taken as given
    assert not matmul.configure(a, b, "bfloat16", H200, tile=(128, 128)).pair_k


def test_a_pair_k_stage_count_that_does_not_fit_is_named():
    cfg = GemmConfig("wgmma", "bfloat16", "bfloat16", (128, 128), 4, False, True, 16)
    assert matmul.pair_k_config(cfg, H200, 6).stages == 6
    with pytest.raises(ArgumentError, match=r"^7 stages of tile 128 x 128 do not fit; at most 6$"):
        matmul.pair_k_config(cfg, H200, 7)


def _stream_k_cases():
    import random

    rng = random.Random(7)
    cases = [(2048, 128, 132), (512, 64, 132), (8192, 256, 132), (144, 11, 132), (9, 79, 132), (126, 5, 132),
             (1, 1000, 132), (133, 4, 132)]
    cases += [(rng.randint(1, 3000), rng.randint(1, 300), rng.choice((132, 114, 16, 7))) for _ in range(400)]
    return cases


def test_stream_k_pieces_cover_every_region_tile_once_owned_by_its_first_k_block():
    """The stream-K schedule (the same walk as gemm_wgmma.cu's): every tile of the region is covered once, in
    pieces of whole k-blocks; only a block's first piece starts inside a tile, and a tile's owner (the piece of
    its first k-block) is the lowest of its blocks, so its contributors are the blocks after it whose shares
    start inside it; pieces per tile stay bounded and shares hold MIN_STREAM_K_BLOCKS k-blocks or more."""
    from asynccopy.gemm_schedule import MAX_STREAM_K_PIECES, MIN_STREAM_K_BLOCKS, stream_k_pieces, stream_k_plan

    shared = 0
    for tiles, kb, sms in _stream_k_cases():
        region, grid = stream_k_plan(tiles, kb, sms)
        assert 1 <= grid <= sms and region <= tiles
        if region == 0:
            continue
        shared += 1
        if tiles > sms:
            assert grid == sms and (tiles - region) % sms == 0, "whole waves stay whole tiles"
        pieces = stream_k_pieces(kb, region, grid)
        cover: dict[int, list[tuple[int, int, int]]] = {j: [] for j in range(region)}
        for b, share in enumerate(pieces):
            assert sum(k1 - k0 for _, k0, k1 in share) >= MIN_STREAM_K_BLOCKS
            for i, (j, k0, k1) in enumerate(share):
                assert 0 <= k0 < k1 <= kb and (i == 0 or k0 == 0)
                cover[j].append((k0, k1, b))
        begins = [b * region * kb // grid for b in range(grid + 1)]
        for j, parts in cover.items():
            parts.sort()
            assert parts[0][0] == 0 and parts[-1][1] == kb
            assert all(x[1] == y[0] for x, y in zip(parts, parts[1:])), f"tile {j}: gaps or overlaps {parts}"
            owner = parts[0][2]
            assert owner == min(b for _, _, b in parts)
            inside = [b for b in range(owner + 1, grid) if j * kb < begins[b] < (j + 1) * kb and begins[b + 1] > begins[b]]
            assert sorted(b for _, _, b in parts[1:]) == inside
            assert len(parts) <= (3 if tiles > sms else MAX_STREAM_K_PIECES + 1)
    assert shared > 100


def test_stream_k_is_the_default_where_the_last_wave_leaves_enough_idle():
    # the H200 figures the rule was set on (128 x 256 tiles, 132 SMs): tiles, k-blocks -> stream-K or not
    assert matmul.stream_k_pays(2048, 128, 132) and matmul.stream_k_pays(8192, 256, 132)  # 8192^3, 16384^3
    assert not matmul.stream_k_pays(512, 64, 132)  # 4096^3: 8 k-blocks saved, 93 -> 90% of cuBLAS
    assert not matmul.stream_k_pays(512, 128, 132)  # 16384x1024x8192: 16 saved, no change
    assert not matmul.stream_k_pays(264, 1000, 132) and not matmul.stream_k_pays(100, 1000, 132)  # no last wave
    big, small = _m(8192, 8192), _m(4096, 4096)
    assert matmul.configure(big, big, "bfloat16", H200).stream_k
    assert not matmul.configure(small, small, "bfloat16", H200).stream_k
