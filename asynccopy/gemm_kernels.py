"""What each GEMM kernel is (one GemmKernel record per kernel in KERNELS: source, template, what it takes,
the instructions its SASS must show, its tiles and stage counts) and one configuration of one (GemmConfig:
the record, dtypes, tile, stages, the operands' majors and alignment, the split of k), which compiles
itself. asynccopy.matmul chooses and launches them."""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import build
from .errors import ArgumentError
from .gemm_schedule import split_count, stream_k_pays, stream_k_plan, work_units
from .matrix import ITEMSIZE

DTYPES = ("bfloat16", "float16", "float32")
MMA_WARPS_KNOB = "ASYNCCOPY_MMA_WARPS"  # gemm_mma.cu's warps a block (8; 4: 128 x 128 tiles, two blocks an SM)
CLUSTER_KNOB = "ASYNCCOPY_WGMMA_CLUSTER"  # gemm_wgmma.cu's clusters of two blocks
SHARE_KNOB = "ASYNCCOPY_WGMMA_SHARE"  # what a pair shares: "0" A (multicast), "1" B (multicast), "2" one tile's k
PAIRED = ((CLUSTER_KNOB, 2), (SHARE_KNOB, "1"))  # pairs sharing B: the default where B's rows are off 128-byte lines
PAIR_K = ((CLUSTER_KNOB, 2), (SHARE_KNOB, "2"))  # pairs splitting one tile's k-blocks, summed in shared memory
PAIR_BULK_KNOB = "ASYNCCOPY_WGMMA_PAIR_BULK"  # with PAIR_K, 1: block 1's accumulators go by bulk copies (else st.async)
EPI_BUFS_KNOB = "ASYNCCOPY_WGMMA_EPI_BUFS"  # gemm_wgmma.cu's staging buffers of C a consumer (2; 4: a 64 x 256 block's)
OUT_DTYPES = ("bfloat16", "float16", "float32")
_STORAGE = {"bfloat16": "__nv_bfloat16", "float16": "__half", "float32": "float"}


@dataclass(frozen=True)
class Pairing:
    """How a tile runs as cluster pairs sharing B: its stage count, the staging buffers of C a consumer holds
    (gemm_wgmma.cu's EPI_BUFS), and whether the pairs' last wave may be shared out (stream-K, where stream_k_pays on
    pair units over half the SMs)."""

    stages: int
    epi_bufs: int = 2
    stream_k: bool = False


@dataclass(frozen=True)
class GemmKernel:
    """What one GEMM kernel is: its source and template, what it takes, what its SASS must show.

    Every kernel is ``template <class T, class OutT, int BM, int BN, int STAGES, int A_MN, int B_MN, int ALIGN>``
    (T, OutT: __nv_bfloat16 / __half / float; A_MN: A is column-major; B_MN: B is row-major). Its
    arguments are either TMA maps (``operands="tma"``: map_a, map_b, map_c, c, m, n, k, ldc, splits) or
    pointers (``"pointers"``: a, lda, b, ldb, c, ldc, m, n, k). ALIGN is the power of two (16 at most) that divides
    the addresses and leading dimensions in bytes of both operands (pointer kernels: the copy width) or of
    C (TMA kernels: 16 stores C with TMA through shared memory, less writes it from the registers). A
    tile-per-block kernel is launched on one block per output tile; a persistent one on min(tiles, SMs).
    """

    name: str
    api: str
    source: str
    template: str
    min_cc: tuple[int, int]
    dtypes: tuple[str, ...]
    tiles: tuple[tuple[int, int], ...]  # (BM, BN) choices, narrowest first (default_tile weighs them)
    bk: int
    sass: tuple[str, ...]  # opcodes its cubin must hold
    threads: int
    operands: str  # "tma" or "pointers"
    persistent: bool = False
    arch_specific: bool = False  # needs the sm_90a-style target (wgmma, setmaxnreg)
    smem_reserve: int = 2048  # static shared memory beside the dynamic stages (barriers, alignment slack)
    epilogue_bytes: int = 0  # dynamic shared memory after the stages (staging of C)
    max_stages_default: int = 8
    narrow_tiles: tuple[tuple[int, int], ...] | None = None  # the tiles it takes under 16-byte alignment
    split_k: bool = False  # can split k into work units (a persistent kernel's f32 partials, summed after)
    stream_k: bool = False  # can share the last tiles' k-blocks among all blocks (stream_k_plan)
    ceiling: str | None = None  # the instruction whose measured peak bounds it (bench.peaks), if not wgmma's
    # per tile (in the order of `tiles`): its speed relative to the widest when every SM has one (the tile
    # choice weighs it against the idle SMs of a last wave), and its stage count (None: as many as fit)
    tile_speed: tuple[float, ...] | None = None
    tile_stages: tuple[int | None, ...] | None = None
    # (tile, layouts): a tile the default choice gives only to operands of those layouts, each (A is MN-major,
    # B is MN-major); a tile named nowhere here serves every layout
    layout_tiles: tuple[tuple[tuple[int, int], tuple[tuple[bool, bool], ...]], ...] = ()
    # a -D macro that asks the compiler for two blocks per SM (at most 128 registers a thread): taken
    # where the kernel then needs no local memory (some layouts spill a few words under that cap)
    two_blocks_knob: str | None = None
    two_blocks_tiles: tuple[tuple[int, int], ...] = ()  # the tiles the knob is tried on (wider ones cannot fit 128)
    # the tile that may run in clusters of two blocks on neighbouring tile-rows sharing B (each loads half, multicast),
    # and how by default where B's rows are off 128-byte lines and where they are on them (pairs_pay; measured)
    paired_b: tuple[int, int] | None = None
    pairing_off_lines: Pairing | None = None
    pairing_on_lines: Pairing | None = None
    # the tile whose k-blocks a cluster pair may split between its two blocks (block 1's f32 accumulators added in
    # block 0's staging buffers of C), where that beats every tile alone (pair_k_pays)
    pair_k_tile: tuple[int, int] | None = None

    def pairs_share_b(self, tile: tuple[int, int], a, b, splits: int = 1) -> bool:
        """Whether this tile of A x B (asynccopy.matrix.Matrix operands) can run as cluster pairs sharing B: the
        record's paired tile, two tile-rows to pair, and k not split (whether it does by default: pairs_pay)."""
        return self.paired_b is not None and tile == self.paired_b and -(-a.rows // tile[0]) >= 2 and splits == 1

    def pairing(self, b) -> Pairing | None:
        """How the paired tile runs for this B: B's rows off 128-byte lines (its row pitch or address not a multiple
        of 128 bytes: each box row then spans two lines) or on them."""
        return self.pairing_off_lines if (b.lead * ITEMSIZE[b.dtype] | b.ptr) % 128 else self.pairing_on_lines

    def pairs_pay(self, tile: tuple[int, int], a, b, sms: int) -> bool:
        """Whether pairs sharing B are the default where pairs_share_b says they can be. Off 128-byte lines: always,
        sharing halves B's requests (H200, 3000x5000x7000 69% -> 93% of cuBLAS). On the lines it halves the L2
        traffic of B a flop, which paid where the tiles alone take more than one wave (H100, 2026-12-07, % of cuBLAS:
        16384^3 93 -> 97, 4096^3 93 -> 97; in one wave it lost: 2048^3 94 -> 88), and only where the pair units (two
        tile-rows each: an odd last one leaves half a cluster idle) take no more waves over the resident pairs than
        the tiles alone over the SMs (fractional waves on a side whose last wave stream-K shares out): at m 300,
        n 20000 the 237 tiles of 128 x 256 fill 2 waves and their 158 pair units 3."""
        pairing = self.pairing(b)
        if pairing is None or sms < 2:
            return False
        if pairing is self.pairing_off_lines:
            return True
        tiles_m, tiles_n, kb = -(-a.rows // tile[0]), -(-b.cols // tile[1]), -(-a.cols // self.bk)
        tiles, units = tiles_m * tiles_n, work_units(tiles_m, tiles_n, "b")

        def waves(count: int, workers: int, stream_k: bool) -> float:
            return count / workers if stream_k and stream_k_pays(count, kb, workers) else -(-count // workers)

        return tiles > sms and waves(units, sms // 2, self.stream_k and pairing.stream_k) <= waves(tiles, sms,
                                                                                                   self.stream_k)

    def stage_bytes(self, tile: tuple[int, int], itemsize: int = 2) -> int:
        return itemsize * self.bk * (tile[0] + tile[1])

    def max_stages(self, tile: tuple[int, int], smem_limit: int, itemsize: int = 2, epi_bufs: int = 2) -> int:
        """The stages that fit beside the reserve and C's staging (``epi_bufs`` buffers a consumer: the record's
        epilogue_bytes is two)."""
        epilogue = self.epilogue_bytes * epi_bufs // 2
        return max(0, (smem_limit - self.smem_reserve - epilogue) // self.stage_bytes(tile, itemsize))

    def tiles_for(self, align: int = 16) -> tuple[tuple[int, int], ...]:
        """The tiles it takes at this operand alignment: under 16 bytes the narrower copies need more
        registers, and a pointer kernel's widest tile would spill."""
        return self.tiles if align >= 16 or self.narrow_tiles is None else self.narrow_tiles

    def default_tile(self, m: int, n: int, sms: int, align: int = 16,
                     layout: tuple[bool, bool] = (False, True)) -> tuple[int, int]:
        """The tile of least estimated time for an m x n output: the waves of tiles over the SMs, times
        a tile's area over its relative speed (the first, narrowest tile on a tie), among the tiles the
        operands' layout (A MN-major, B MN-major; default a @ b of row-major arrays) may take."""
        only = dict(self.layout_tiles)
        tiles = [t for t in self.tiles_for(align) if t not in only or tuple(layout) in only[t]]
        return min(tiles, key=lambda t: self.tile_cost(t, m, n, sms))

    def tile_cost(self, tile: tuple[int, int], m: int, n: int, sms: int, blocks_a_tile: int = 1) -> float:
        """The estimated time of an m x n output in this tile: the waves of its blocks over the SMs times the
        area a block computes over the tile's relative speed (``blocks_a_tile`` blocks share each tile's k)."""
        speed = dict(zip(self.tiles, self.tile_speed or (1.0,) * len(self.tiles)))[tile]
        waves = -(-(-(-m // tile[0]) * -(-n // tile[1]) * blocks_a_tile) // max(sms, 1))
        return waves * tile[0] * tile[1] / blocks_a_tile / speed

    def pair_k_pays(self, m: int, n: int, k: int, sms: int, align: int = 16,
                    layout: tuple[bool, bool] = (False, True)) -> bool:
        """Whether cluster pairs splitting the k-blocks of ``pair_k_tile`` are the default for an m x n x k product:
        where the pairs fit in one wave (measured only there: the exchange of accumulators, about 2.5 us a tile on
        the H200, would be paid once a tile in every wave), the tile alone would not split k (split_count: too many
        tiles for it), each block keeps at least MIN_PAIR_K_BLOCKS k-blocks, and the pairs' estimated time
        (tile_cost, two blocks a tile) is below the best tile's alone."""
        tile = self.pair_k_tile
        if tile is None or tile not in self.tiles_for(align):
            return False
        tiles, kb = -(-m // tile[0]) * -(-n // tile[1]), -(-k // self.bk)
        if 2 * tiles > sms or split_count(tiles, kb, sms) > 1 or kb < 2 * MIN_PAIR_K_BLOCKS:
            return False
        alone = self.default_tile(m, n, sms, align, layout)
        return self.tile_cost(tile, m, n, sms, 2) < self.tile_cost(alone, m, n, sms)

    def default_stages(self, tile: tuple[int, int], fit: int) -> int:
        """The tile's measured stage count where the record has one (within what fits), else all that fit."""
        want = dict(zip(self.tiles, self.tile_stages or (None,) * len(self.tiles))).get(tile)
        return min(fit, want or self.max_stages_default)


def itemsize(dtype: str) -> int:
    return ITEMSIZE[dtype]


KERNELS: dict[str, GemmKernel] = {
    k.name: k
    for k in (
        GemmKernel("wgmma", "TMA (128B swizzle) + wgmma from shared memory, a producer warp and two consumer "
                   "warpgroups on full/empty mbarriers, persistent grid in L2-friendly tile order",
                   "gemm_wgmma.cu", "gemm_wgmma", (9, 0), ("bfloat16", "float16"), ((128, 64), (128, 128), (128, 256)),
                   64, ("UTMALDG", "HGMMA", "SYNCS"), 384, "tma", persistent=True, arch_specific=True,
                   epilogue_bytes=2 * 2 * 64 * 128, split_k=True, stream_k=True, tile_speed=(0.57, 0.8, 1.0),
                   tile_stages=(8, 6, 3),
                   # % of cuBLAS. B off 128-byte lines (H200, 2026-12-02), unpaired 3 stages -> paired 4: 3000x5000x7000
                   # 69 -> 93, 5000^3 72 -> 88, 4000x6000x5000 101 -> 106 (H100, 2026-12-07: 3000x5000x7000 paired at 4
                   # stages 91, at 3 with four buffers and stream-K 86). On the lines (H100, 2026-12-07), unpaired ->
                   # paired at 3 stages with four staging buffers and stream-K: 16384^3 93 -> 97, 4096^3 93 -> 97,
                   # 8192^3 97 -> 97 (H200, 2026-12-04, sustained 94-95 -> 98), 8192x8192x1024 90 -> 91
                   paired_b=(128, 256), pairing_off_lines=Pairing(4), pairing_on_lines=Pairing(3, 4, True),
                   pair_k_tile=(128, 128)),
        GemmKernel("mma", "multistage LDGSTS (zero-fill at the edges) into an XOR-swizzled shared layout, ldmatrix, "
                   "mma.sync m16n8k16; the Ampere design, and the fallback where TMA cannot take the operands",
                   "gemm_mma.cu", "gemm_mma", (8, 0), ("bfloat16", "float16"), ((128, 128), (128, 256)), 64,
                   ("LDGSTS", "LDSM", "HMMA"), 256, "pointers", narrow_tiles=((128, 128),), ceiling="mma.sync",
                   tile_speed=(0.8, 1.0)),
        GemmKernel("simt", "fp32 on the CUDA cores: multistage LDGSTS (zero-fill at the edges), register blocking, "
                   "128-bit shared loads from a conflict-free layout", "gemm_simt.cu", "gemm_simt", (8, 0),
                   ("float32",), ((64, 64), (128, 128), (128, 256), (256, 128)), 16, ("LDGSTS", "FFMA", "LDS.128"),
                   256, "pointers", ceiling="FFMA", two_blocks_knob="ASYNCCOPY_SIMT_MIN_BLOCKS=2",
                   two_blocks_tiles=((128, 128),),
                   # H200, 2026-12-02, % of cuBLAS at 4096^3, 128 x 128 -> the wide tile (3-6 stages alike): a @ b
                   # 81-82 -> 90-91 (128 x 256); A MN-major 91-92 -> 92-94; both K-major (x @ w.T) 81-85 -> 75-83
                   # (128 x 256) or 81 (256 x 128). The wide tile puts a K-major operand (4-byte copies) on its
                   # 128 side; with both K-major the square tile stays
                   tile_speed=(0.5, 1.0, 1.1, 1.1), tile_stages=(None, None, 4, 4),
                   layout_tiles=(((128, 256), ((False, True), (True, True))), ((256, 128), ((True, False),)))),
    )
}


@dataclass(frozen=True)
class GemmConfig:
    kernel: str
    dtype: str
    out_dtype: str
    tile: tuple[int, int]  # (BM, BN)
    stages: int
    a_mn: bool  # A is MN-major in memory (a column-major view)
    b_mn: bool  # B is MN-major in memory (row-major [k, n])
    align: int = 16  # bytes dividing the addresses and leading dimensions of the operands (pointer kernels)
    # or of C (TMA kernels: 16 stores C with TMA)
    defines: tuple[tuple[str, object], ...] = ()  # the kernel's compile-time knobs (-D), for measuring variants
    splits: int = 1  # k split into this many ranges, each a work unit (split_k kernels; gemm_splitk.cu sums them)
    l2_promotion: str = "none"  # the operand maps' L2 promotion (TMA kernels): none, 64B, 128B, 256B
    stream_k: bool = False  # the last tiles' k-blocks shared among all blocks (stream_k_plan; one split, no cluster)

    @property
    def pair_k(self) -> bool:
        """Cluster pairs splitting each tile's k-blocks (PAIR_K)."""
        knobs = dict(self.defines)
        return int(knobs.get(CLUSTER_KNOB, 1) or 1) == 2 and str(knobs.get(SHARE_KNOB)) == "2"

    @property
    def record(self) -> GemmKernel:
        return KERNELS[self.kernel]

    @property
    def tile_n(self) -> int:
        return self.tile[1]

    @property
    def threads(self) -> int:
        """Threads a block: the record's, or 128 for the mma kernel built with four warps (ASYNCCOPY_MMA_WARPS=4)."""
        warps = dict(self.defines).get(MMA_WARPS_KNOB)
        return 32 * int(warps) if self.kernel == "mma" and warps is not None else self.record.threads

    def name_expression(self) -> str:
        args = [_STORAGE[self.dtype], _STORAGE[self.out_dtype], *map(str, self.tile), str(self.stages),
                str(int(self.a_mn)), str(int(self.b_mn)), str(self.align)]
        return f"{self.record.template}<{', '.join(args)}>"

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of a launch: the stages, C's staging and, for TMA's 1024-byte-aligned
        stages, 1024 bytes of slack to align them in."""
        slack = 1024 if self.record.operands == "tma" else 0
        # the record's figure is two buffers a consumer; wgmma's knob may hold four
        epilogue = self.record.epilogue_bytes * (epi_bufs_of(self) if self.kernel == "wgmma" else 2) // 2
        return self.stages * self.record.stage_bytes(self.tile, ITEMSIZE[self.dtype]) + epilogue + slack

    def compile(self, arch: str | None = None) -> build.Module:
        rec = self.record
        return build.compile_record(f"GEMM kernel {self.kernel!r}", rec.source, rec.template, self.name_expression(),
                                    min_cc=rec.min_cc, arch_specific=rec.arch_specific, arch=arch,
                                    defines=dict(self.defines))


def cluster_of(cfg: GemmConfig) -> tuple[int, str | None]:
    """The blocks a cluster of this configuration holds (1 or 2) and what a pair shares: "a" or "b" (that
    operand's tile, multicast), "k" (one tile's k-blocks), None for one block."""
    knobs = dict(cfg.defines)
    cluster = int(knobs.get(CLUSTER_KNOB, 1) or 1)
    if cluster not in (1, 2) or (cluster == 2 and cfg.splits > 1):
        raise ArgumentError(f"{CLUSTER_KNOB}={cluster}: clusters of 1 or 2 blocks, and 2 only without split k "
                            f"(splits={cfg.splits})")
    if cluster == 1:
        return 1, None
    share = {"0": "a", "1": "b", "2": "k"}.get(str(knobs.get(SHARE_KNOB, "0")))
    if share is None:
        raise ArgumentError(f"{SHARE_KNOB}={knobs[SHARE_KNOB]!r}: a pair shares A (0), B (1) or a tile's k (2)")
    if share == "b" and cfg.tile[1] < 128:
        raise ArgumentError(f"{SHARE_KNOB}=1: a shared B tile needs 128 or more columns (tile {cfg.tile[0]} x "
                            f"{cfg.tile[1]})")
    return cluster, share


def pair_k_config(cfg: GemmConfig, facts, stages=None) -> GemmConfig:
    """``cfg`` as cluster pairs splitting each tile's k-blocks (PAIR_K), at the caller's stage count, else the
    tile's default within what fits."""
    rec = cfg.record
    fit = min(rec.max_stages(cfg.tile, facts.smem_per_block_optin, ITEMSIZE[cfg.dtype]), rec.max_stages_default)
    if stages is not None and stages > fit:
        raise ArgumentError(f"{stages} stages of tile {cfg.tile[0]} x {cfg.tile[1]} do not fit; at most {fit}")
    return replace(cfg, defines=PAIR_K, stream_k=False, splits=1,
                   stages=stages if stages is not None else rec.default_stages(cfg.tile, fit))


def paired_config(cfg: GemmConfig, a, b, facts, stages=None) -> GemmConfig:
    """``cfg`` (the record's paired tile) as cluster pairs sharing B, as the record's pairing for this B says
    (GemmKernel.pairing): its stage count and staging buffers of C, or the caller's stage count with its buffers
    where they fit beside it (else two); the pairs' last wave shared out where the pairing allows it and that pays on
    pair units (stream_k_pays over half the SMs)."""
    rec = cfg.record
    pairing = rec.pairing(b) or Pairing(cfg.stages)
    bufs, size, limit = pairing.epi_bufs, ITEMSIZE[cfg.dtype], facts.smem_per_block_optin
    if stages is None:
        stages = min(pairing.stages, rec.max_stages(cfg.tile, limit, size, bufs))
    elif stages > rec.max_stages(cfg.tile, limit, size, bufs):
        bufs = 2
    units, kb = work_units(-(-a.rows // cfg.tile[0]), -(-b.cols // cfg.tile[1]), "b"), -(-a.cols // rec.bk)
    sk = rec.stream_k and pairing.stream_k and cfg.splits == 1 and stream_k_pays(units, kb, facts.sm_count // 2)
    return replace(cfg, stages=stages, defines=paired_defines(bufs), stream_k=sk)


def paired_defines(epi_bufs: int = 2) -> tuple[tuple[str, object], ...]:
    """The knobs of cluster pairs sharing B with ``epi_bufs`` staging buffers of C a consumer."""
    return PAIRED + (((EPI_BUFS_KNOB, epi_bufs),) if epi_bufs != 2 else ())


def epi_bufs_of(cfg: GemmConfig) -> int:
    """The staging buffers of C a consumer of this configuration holds (gemm_wgmma.cu's EPI_BUFS)."""
    return int(dict(cfg.defines).get(EPI_BUFS_KNOB, 2))


# k-blocks each block of a pair splitting k keeps at least: its exchange of accumulators costs about as much as
# a few k-blocks (H200, 64 tiles of 128 x 128 as pairs against 128 x 64 tiles alone, % of cuBLAS: 1024^3, 8 a block,
# 77-84 -> 70; 1024x1024x4096, 32 a block, 64-66 -> 70; 128x8192x8192, 64 a block, 82-83 -> 92); 16 is between
# the two measured sides, the crossover itself not measured
MIN_PAIR_K_BLOCKS = 16
# ---------------------------------------------------------------------------------------------
# The stage count the pipeline model gives


TMA_ISSUE_NS = 50.0  # a producer thread's two TMA loads of a stage (the tile-stream traces: tens of ns)
HANDOFF_NS = 100.0  # a stage's release reaching the producer (the tile-stream traces on the H200: 50-120 ns)
L2_HEADROOM = 100.0  # the operands' bandwidth in the model, x the device's DRAM bandwidth: not what limits stages


def k_blocks_per_sm(rec: GemmKernel, tile: tuple[int, int], m: int, n: int, k: int, sms: int,
                    stream_k: bool | None = None) -> int:
    """The k-blocks the busiest SM computes for an m x n x k product (tile-per-block kernels: one block
    per SM at a time; persistent ones: their work units, with split k where the record takes it, or their whole
    tiles and a share of the stream-K region: ``stream_k`` None as the default configuration decides)."""
    tiles = -(-m // tile[0]) * -(-n // tile[1])
    kb = -(-k // rec.bk)
    splits = split_count(tiles, kb, sms) if rec.split_k else 1
    if stream_k is None:
        stream_k = rec.stream_k and splits == 1 and stream_k_pays(tiles, kb, sms)
    region, grid = stream_k_plan(tiles, kb, sms) if stream_k else (0, sms)
    if region:
        return (tiles - region) // grid * kb + -(-region * kb // grid)
    return -(-tiles * splits // sms) * -(-kb // splits)


def plan_stages(rec: GemmKernel, tile: tuple[int, int], dtype: str, facts, *, k_block_ns: float, memory="cached"):
    """The pipeline model's plan (asynccopy.model.planner.Plan) for one stage of A (BM x BK) and B (BK x BN)
    per k-block, ``k_block_ns`` of compute each, on ``facts``' GPU, one block per SM.

    The operands come mostly from L2 (each tile of A is read by every tile-column): the stages must cover
    a load's latency, and the DRAM bandwidth is not their limit, so the model gives the loads the
    unloaded latency (a calibrated curve's, else the device table's) and bandwidth to spare. A TMA kernel's
    producer thread issues a stage's two loads once the stage's release reaches it."""
    from .model import planner
    from .model.simulate import NO_COSTS, KernelCosts

    size = itemsize(dtype)
    ops = [planner.Operand("A", (tile[0], rec.bk), dtype), planner.Operand("B", (rec.bk, tile[1]), dtype)]
    dev = planner.unloaded_device(facts, memory)
    costs = KernelCosts(TMA_ISSUE_NS, 0.0, True, HANDOFF_NS) if rec.operands == "tma" else NO_COSTS
    fit = min(rec.max_stages(tile, facts.smem_per_block_optin, size), rec.max_stages_default)
    slack = 1024 if rec.operands == "tma" else 0
    return planner.plan(ops, threads=rec.threads, device=dev, compute_ns=k_block_ns, blocks_per_sm=1,
                        max_stages=max(1, fit), static_smem=rec.smem_reserve + rec.epilogue_bytes + slack,
                        costs=costs, memory=None, bandwidth=facts.bandwidth * L2_HEADROOM)
