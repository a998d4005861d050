"""What each attention kernel is (one AttentionKernel record per kernel in KERNELS: source, template, what it
takes, its tile, its stage counts, the instructions its SASS must show) and one configuration of one
(AttentionConfig: the record, dtype, head dim, stages, causal), which compiles itself. asynccopy.attention
chooses and launches them."""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import build
from .matrix import ITEMSIZE

DTYPES = ("bfloat16", "float16")
_STORAGE = {"bfloat16": "__nv_bfloat16", "float16": "__half"}


@dataclass(frozen=True)
class AttentionKernel:
    """What one attention kernel is. Every kernel is ``template <class T, int D, int STAGES, int CAUSAL>``,
    launched on a grid of (query tiles, query heads, batch) blocks. Its arguments are either pointers
    (``operands="pointers"``: q, k, v, out, lse (0: none), q/k/v/out strides (batch, head, seq; elements,
    int64), group, q_len, k_len, scale) or TMA maps (``"tma"``: map_q, map_k, map_v, map_o over
    (head_dim, seq, heads, batch), lse, heads, group, q_len, k_len, scale x log2 e); head_dim is
    contiguous."""

    name: str
    api: str
    source: str
    template: str
    min_cc: tuple[int, int]
    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    tile: tuple[int, int]  # (queries per block, keys per K/V tile); with `consumers`, 64 queries per consumer instead
    threads: int
    sass: tuple[str, ...]  # opcodes its cubin must hold
    default_stages: tuple[int, ...]  # per head dim, in the order of head_dims (fewer where they do not fit)
    max_stages: int = 4
    arch_specific: bool = False  # needs the sm_90a-style target
    smem_reserve: int = 1024  # shared memory the system keeps per block (CC 8.0+), beside the dynamic stages
    operands: str = "pointers"  # or "tma": tensor maps (see above)
    q_smem: bool = False  # Q's tile keeps shared memory of its own, beside the stages (+ 1024 bytes of slack to
    # align the 128B-swizzled buffers at run time)
    # per head dim (the order of head_dims): consumer warpgroups of 64 queries each beside one producer warpgroup
    # (the block is 64 x that many queries, 128 x (that + 1) threads); () for a kernel without warpgroups
    consumers: tuple[int, ...] = ()
    # (head_dim, causal, keys): key tiles wider than tile[1] where they pay (the stage counts that fit them; a
    # deeper pipeline asked for takes tile[1] instead: asynccopy.sdpa.configure)
    wide_keys: tuple[tuple[int, bool, int], ...] = ()
    # (head_dim, consumers, speed): another consumer count the launch model may choose at that head dim, with its
    # queries a second relative to the default's (measured); it takes it where fewer, smaller blocks finish first
    fewer_consumers: tuple[tuple[int, int, float], ...] = ()
    # a block's fixed cost beside its key tiles (Q's load, the pipeline's fill, the epilogue), in key tiles
    block_overhead: float = 0.0
    # per head dim (the order of head_dims; mma): query rows a warp, 16 or 32 (32: 4 warps a block, Q in shared
    # memory of its own beside the stages); () for 16
    rows_per_warp: tuple[int, ...] = ()
    # (head_dim, tiles): where the kernel's default build has no ping-pong of its consumer warpgroups, the launch
    # turns it on for problems whose items read at most this many key tiles on average (attention_schedule.with_turns)
    pingpong_tiles: tuple[tuple[int, int], ...] = ()
    # (TMA kernels) the masks (causal True / False) whose problems the launch builds persistent (PERSISTENT_KNOB: one
    # block an SM taking item after item, the next item's Q and first K loading under the last one's end;
    # attention_schedule.with_persistence)
    persistent_masks: tuple[bool, ...] = ()
    # (TMA kernels; head_dim, tiles) a persistent build stages O in a buffer of its own (O_BUFFER_KNOB) for problems
    # whose items read at most this many key tiles on average, where the buffer fits beside its stages
    # (attention_schedule.with_persistence)
    o_buffer_tiles: tuple[tuple[int, int], ...] = ()
    # (head_dim, causal, knobs, blocks): compile-time knobs the launch sets for problems of that head dim and mask,
    # where the build with them fits a block's shared memory and ``blocks`` such blocks fit an SM's (what the knobs
    # were measured with; sdpa.configure)
    mask_knobs: tuple[tuple[int, bool, tuple[tuple[str, object], ...], int], ...] = ()
    # (head_dim, knobs): compile-time knobs the launch sets for every problem of that head dim (before mask_knobs,
    # whose own knobs win where both set one; sdpa.configure)
    head_knobs: tuple[tuple[int, tuple[tuple[str, object], ...]], ...] = ()

    def head_knobs_for(self, head_dim: int) -> tuple[tuple[str, object], ...]:
        """The knobs every problem of this head dim builds with: () where there are none."""
        return next((k for d, k in self.head_knobs if d == head_dim), ())

    def knobs_for(self, head_dim: int, causal: bool) -> tuple[tuple[tuple[str, object], ...], int]:
        """(knobs, blocks an SM they need) for this head dim and mask: ((), 1) where there are none."""
        return next(((k, b) for d, c, k, b in self.mask_knobs if d == head_dim and c == bool(causal)), ((), 1))

    def pieces_for(self, head_dim: int) -> int:
        """m16 row pieces a warp owns at this head dim (attention_mma.cu's MW)."""
        return dict(zip(self.head_dims, self.rows_per_warp)).get(head_dim, 16) // 16

    def keys_for(self, head_dim: int, causal: bool = False) -> int:
        """Keys per K/V tile at this head dim, with or without the causal mask."""
        return next((k for d, c, k in self.wide_keys if d == head_dim and c == bool(causal)), self.tile[1])

    def consumers_for(self, head_dim: int) -> int | None:
        return dict(zip(self.head_dims, self.consumers)).get(head_dim) if self.consumers else None

    def tile_for(self, head_dim: int, consumers: int | None = None, keys: int | None = None) -> tuple[int, int]:
        """(queries per block, keys per K/V tile) at this head dim (with this many consumer warpgroups, and
        ``keys`` keys a tile: default tile[1])."""
        c = consumers or self.consumers_for(head_dim)
        return (64 * c if c else self.tile[0], keys or self.tile[1])

    def threads_for(self, head_dim: int, consumers: int | None = None, pieces: int | None = None,
                    queries: int | None = None) -> int:
        """Threads a block: a producer and ``consumers`` warpgroups, or (mma) the record's warps over the row
        pieces a warp owns (``pieces``, default the record's at this head dim), for ``queries`` queries a block
        (default tile[0])."""
        c = consumers or self.consumers_for(head_dim)
        if c:
            return 128 * (c + 1)
        return self.threads * (queries or self.tile[0]) // self.tile[0] // (pieces or self.pieces_for(head_dim))

    def stage_bytes(self, head_dim: int, itemsize: int = 2, keys: int | None = None) -> int:
        """One stage: a K and a V tile (of ``keys`` keys, default tile[1]). (The mma kernel with 16 rows a warp
        reads its Q tile, as large as one stage, into registers before the pipeline fills the last stage, so
        it takes no memory of its own; with 32 rows a warp Q has its own: static_bytes.)"""
        return 2 * (keys or self.tile[1]) * head_dim * itemsize

    def static_bytes(self, head_dim: int, itemsize: int = 2, consumers: int | None = None,
                     pieces: int | None = None, q_own: bool | None = None, queries: int | None = None) -> int:
        """Dynamic shared memory beside the stages: Q's tile and the alignment slack, where it has them (the
        mma kernel's Q with 32 rows a warp, ``pieces`` = 2, default the record's at this head dim; or where
        ``q_own`` says so: its Q kept in shared memory at 16 rows a warp too)."""
        if self.q_smem:
            return self.tile_for(head_dim, consumers)[0] * head_dim * itemsize + 1024
        own = q_own if q_own is not None else (pieces or self.pieces_for(head_dim)) == 2
        return (queries or self.tile[0]) * head_dim * itemsize if own else 0

    def fit(self, head_dim: int, smem_limit: int, itemsize: int = 2, consumers: int | None = None,
            keys: int | None = None) -> int:
        """The most stages (up to max_stages) that fit ``smem_limit`` bytes a block may use."""
        room = smem_limit - self.smem_reserve - self.static_bytes(head_dim, itemsize, consumers)
        return max(0, min(self.max_stages, room // self.stage_bytes(head_dim, itemsize, keys)))


# The kernels' compile-time knobs (-D) that the launch follows or sets.
CONSUMERS_KNOB = "ASYNCCOPY_ATTN_CONSUMERS"  # the wgmma kernel's consumer warpgroups (its launch follows it)
MMA_MW_KNOB = "ASYNCCOPY_ATTN_MMA_MW"  # attention_mma.cu's m16 row pieces a warp (1; 2: 32 rows, 4 warps a block)
MMA_BM_KNOB = "ASYNCCOPY_ATTN_MMA_BM"  # attention_mma.cu's queries a block (128; 64: half the warps, two blocks an SM)
MMA_XOR_KNOB = "ASYNCCOPY_ATTN_MMA_XOR"  # attention_mma.cu's ldmatrix addresses as XORs of opaque lane offsets
MMA_OVERLAP_KNOB = "ASYNCCOPY_ATTN_MMA_OVERLAP"  # attention_mma.cu's next Q K^T beside this tile's fold (3+ stages)
MMA_QSMEM_KNOB = "ASYNCCOPY_ATTN_MMA_QSMEM"  # its Q in shared memory of its own (1), in registers (0), by rows (-1)
KEYS_KNOB = "ASYNCCOPY_ATTN_BN"  # its keys per K/V tile (the maps and shared memory follow it)
PERSISTENT_KNOB = "ASYNCCOPY_ATTN_PERSISTENT"  # its blocks taking item after item, one an SM (the grid follows it)
O_BUFFER_KNOB = "ASYNCCOPY_ATTN_O_BUFFER"  # (persistent) O staged in a buffer of its own (shared memory follows it)

KERNELS: dict[str, AttentionKernel] = {
    k.name: k
    for k in (
        # kernel=None takes the first record that can take the inputs: wgmma on Hopper, mma elsewhere (README results)
        AttentionKernel("wgmma", "FlashAttention-3 structure: a TMA producer warp (Q once, K and V on their own "
                        "full barriers per stage, 128B swizzle), two consumer warpgroups with wgmma from shared "
                        "memory for Q K^T and from registers for P V, online softmax in registers, O through "
                        "shared memory and TMA stores, setmaxnreg",
                        "attention_wgmma.cu", "attention_wgmma", (9, 0), DTYPES, (64, 128), (128, 128), 384,
                        ("UTMALDG", "HGMMA", "UTMASTG"), (3, 2), max_stages=8, arch_specific=True, operands="tma",
                        q_smem=True, smem_reserve=2048, consumers=(3, 2), wide_keys=((128, False, 176),),
                        # two consumers at head dim 64: 436 against three's 497 TFLOP/s (H200, 8192 x 64, one run)
                        fewer_consumers=((64, 2, 436 / 497),),
                        # fitted to one run (H200, 2026-12-02, causal 64, B 4 x H 16: two consumers against
                        # three took 0.907x the time at 1024 and 1.036x at 2048; the model says 0.912 and 1.032)
                        block_overhead=3.0,
                        # ping-pong at head dim 128 (H200, 2026-12-02, bf16, B 4 x H 16, one run, TFLOP/s, without ->
                        # with; key tiles an item): 1024 452 -> 492 (6), 2048 558 -> 597 (12), 4096 634 -> 649 (24),
                        # 8192 681 -> 662 (47); causal (mean of 128-key tiles) 303 -> 312 (4.5), 469 -> 482 (8.5),
                        # 539 -> 563 (16.5), 623 -> 629 (32.5)
                        pingpong_tiles=((128, 32),),
                        # causal, default -> persistent (H100, 2026-12-07, bf16, B 4 x H 16, TFLOP/s, one run):
                        # 1024 x 64 214 -> 236, 2048 x 128 428 -> 466, 8192 x 64 451 -> 456; an earlier build of it
                        # (a bench run): 2048 x 64 311 -> 327, 4096 x 128 556 -> 574, 8192 x 128 603 -> 622. Without
                        # the mask it gave -4% to +4% (8192 x 128 673 -> 647) while it took no key split; with the
                        # split (its pieces after the whole items): see docs/design.md 11b
                        persistent_masks=(True, False),
                        # O in a buffer of its own on items of at most 32 key tiles at head dim 64 (H100, 2026-12-07:
                        # +0-4% on items of 5-32 key tiles, -1% at 64; the table is in docs/design.md 11b)
                        o_buffer_tiles=((64, 32),)),
        AttentionKernel("mma", "FlashAttention-2: Q in registers, K/V tiles through a multistage LDGSTS pipeline "
                        "(zero-fill past the sequence) into an XOR-swizzled shared layout, ldmatrix, mma.sync "
                        "m16n8k16 for Q K^T and P V, online softmax in registers, causal tiles skipped",
                        "attention_mma.cu", "attention_mma", (8, 0), DTYPES, (64, 128), (128, 64), 256,
                        # 4 stages at head dim 128, with the next tile's Q K^T beside this tile's fold (head_knobs:
                        # the ring keeps tile t + 1 landed, so 4 stages keep 2 in flight); at 64, 2 and 3 alike
                        ("LDGSTS", "LDSM", "HMMA"), (3, 4),
                        # 32 rows a warp at head dim 64 (H200, 2026-12-02: +6-18%, 8192 232 -> 267 TFLOP/s); at 128
                        # they spill and did not pay (design.md 11b)
                        rows_per_warp=(32, 16),
                        # causal at head dim 128, at the 2-3 stages a caller may ask for: 64 queries a block (4 warps,
                        # two blocks an SM) with Q in shared memory of its own, +5-13% at 2 stages (H100, 2026-12-07;
                        # docs/design.md 11b has the table). Where two such blocks do not fit an SM's shared memory
                        # (the default 4 stages; CC 8.6 / 8.9's 100 KiB at 2 or more, an A100 at 3 or more) the launch
                        # keeps the 128-query build
                        mask_knobs=((128, True, ((MMA_BM_KNOB, 64), (MMA_QSMEM_KNOB, 1)), 2),),
                        # head dim 128: the next key tile's Q K^T beside this tile's softmax and P V, with the
                        # ldmatrix addresses as XORs (without them the overlap spills under NVRTC 13.0), 4 stages
                        # (H100, 2026-12-07, bf16, B 4 x H 16, against the 2-stage build before): without the mask
                        # +3-10% (8192 301 -> 331 TFLOP/s, flash 350), causal +4-19% (8192 266 -> 316, flash 330).
                        # At head dim 64 the XORs alone: +1-4% on 14 problems; the overlap lost 10-18% (design.md 11b)
                        head_knobs=((128, ((MMA_OVERLAP_KNOB, 1), (MMA_XOR_KNOB, 1))), (64, ((MMA_XOR_KNOB, 1),)))),
    )
}


# Compile-time variants of a kernel, by name, for the bench to time beside its default build: kernel -> name ->
# the -D macros (the kernel file's header says what each does).
VARIANTS: dict[str, dict[str, tuple[tuple[str, object], ...]]] = {
    "wgmma": {"serial": (("ASYNCCOPY_ATTN_OVERLAP", 0), ("ASYNCCOPY_ATTN_PINGPONG", 0)),
              "overlap": (("ASYNCCOPY_ATTN_OVERLAP", 1), ("ASYNCCOPY_ATTN_PINGPONG", 0)),
              "pingpong": (("ASYNCCOPY_ATTN_OVERLAP", 1), ("ASYNCCOPY_ATTN_PINGPONG", 1)),
              "consumers2": ((CONSUMERS_KNOB, 2),), "consumers3": ((CONSUMERS_KNOB, 3),),
              "keys128": ((KEYS_KNOB, 128),), "keys176": ((KEYS_KNOB, 176),),
              # a block an SM taking unit after unit, the next unit's Q and K loading under the last one's end
              "persistent": ((PERSISTENT_KNOB, 1), (O_BUFFER_KNOB, 0)),
              # the same with O staged in a buffer of its own: a warpgroup's epilogue waits for no other
              "obuffer": ((PERSISTENT_KNOB, 1), (O_BUFFER_KNOB, 1)),
              # a chunk of one (batch, head): each head's causal tiles last-first, head after head (the order before)
              "headmajor": (("ASYNCCOPY_ATTN_L2_BUDGET", 1),),
              # the tensor maps prefetched into the TMA unit's descriptor cache as a block starts
              "prefetch": (("ASYNCCOPY_ATTN_PREFETCH_MAPS", 1),),
              # every mbarrier wait asleep on the barrier for up to 1 ms rather than spinning (mbarrier.cuh)
              "suspend": (("ASYNCCOPY_MBARRIER_SUSPEND_NS", 1000000),)},
    # 32 query rows a warp, 4 warps a block: each K/V fragment read once for two row pieces (head dim 64 only)
    "mma": {"rows16": ((MMA_MW_KNOB, 1),), "rows32": ((MMA_MW_KNOB, 2),),
            # 16 rows a warp with Q read from shared memory of its own at every k step (32 registers fewer)
            "qsmem": ((MMA_MW_KNOB, 1), (MMA_BM_KNOB, 128), (MMA_QSMEM_KNOB, 1)),
            # 64 queries a block (4 warps of 16 rows, Q in registers): two blocks an SM, each one's softmax beside the
            # other's products
            "bm64": ((MMA_MW_KNOB, 1), (MMA_BM_KNOB, 64), (MMA_QSMEM_KNOB, 0)),
            # 128 queries a block of 16 rows a warp with Q in registers (the default at head dim 128 without the mask;
            # before 64 queries a block, causal too)
            "bm128": ((MMA_MW_KNOB, 1), (MMA_BM_KNOB, 128), (MMA_QSMEM_KNOB, 0)),
            # every ldmatrix address one XOR of an opaque lane offset (fewer registers; the default at both head dims)
            "xor": ((MMA_XOR_KNOB, 1),),
            # (at 3 or more stages) the next key tile's Q K^T beside this tile's softmax and P V (the default at head
            # dim 128, with the XORs)
            "overlap": ((MMA_OVERLAP_KNOB, 1),),
            # each tile's Q K^T, softmax and P V in turn, the addresses swizzled at every access (the loop of the
            # default before, which ran it at 2 stages; the variant keeps the launch's stage count)
            "plain": ((MMA_OVERLAP_KNOB, 0), (MMA_XOR_KNOB, 0))},
}
VARIANT_HEAD_DIMS = {"rows32": (64,), "bm128": (128,)}  # the head dims a variant builds at (others: all)


@dataclass(frozen=True)
class AttentionConfig:
    kernel: str
    dtype: str
    head_dim: int
    stages: int
    causal: bool
    trace: bool = False  # built with -DASYNCCOPY_TRACE=1: one more argument, the trace buffer (asynccopy.attention_trace)
    defines: tuple[tuple[str, object], ...] = ()  # the kernel's compile-time knobs (-D), for measuring variants

    @property
    def record(self) -> AttentionKernel:
        return KERNELS[self.kernel]

    @property
    def is_mma(self) -> bool:
        """The mma kernel, or a copy of its file registered under another name (its template): its knobs of rows a
        warp, block height and Q's buffer shape the launch."""
        return self.record.template == KERNELS["mma"].template

    def with_defines(self, defines) -> AttentionConfig:
        """This configuration with more compile-time knobs (``defines`` win where both set one)."""
        return replace(self, defines=tuple({**dict(self.defines), **dict(defines)}.items()))

    def with_variant(self, defines, smem_limit: int | None = None) -> AttentionConfig:
        """This configuration with a variant's knobs on top (VARIANTS): as with_defines, except that an O buffer the
        launch chose (not the variant) goes where the variant's build would not fit ``smem_limit`` bytes a block
        with it (a variant of more consumers or wider key tiles needs the room; O is then staged in a stage)."""
        out = self.with_defines(defines)
        if smem_limit is not None and out.o_buffer and O_BUFFER_KNOB not in dict(defines) and not out.fits(smem_limit):
            out = out.with_defines(((O_BUFFER_KNOB, 0),))
        return out

    def fits(self, smem_limit: int) -> bool:
        """Its shared memory (stages, Q's and O's buffers where it has them) and the record's reserve within
        ``smem_limit`` bytes a block (as fit() counts)."""
        return self.smem_bytes + self.record.smem_reserve <= smem_limit

    @property
    def consumers(self) -> int | None:
        """The consumer warpgroups of a block: the kernel's knob where a variant sets it, else the record's."""
        knob = dict(self.defines).get(CONSUMERS_KNOB)
        return int(knob) if knob is not None and int(knob) > 0 else self.record.consumers_for(self.head_dim)

    @property
    def keys(self) -> int:
        """Keys per K/V tile: the kernel's knob where the configuration sets it, else the record's."""
        knob = dict(self.defines).get(KEYS_KNOB)
        return int(knob) if knob is not None and int(knob) > 0 else self.record.keys_for(self.head_dim, self.causal)

    @property
    def persistent(self) -> bool:
        """The wgmma kernel's blocks take the grid's units round after round, at most one block an SM (the knob);
        never in a traced build (the kernel follows one item a block there)."""
        return self.record.operands == "tma" and not self.trace and bool(int(dict(self.defines).get(PERSISTENT_KNOB, 0)))

    @property
    def o_buffer(self) -> bool:
        """A persistent build's O staged in shared memory of its own, after the stages (the knob), rather than in a
        unit's last K / V stage."""
        return self.persistent and bool(int(dict(self.defines).get(O_BUFFER_KNOB, 0)))

    @property
    def tile(self) -> tuple[int, int]:
        bm, bn = self.record.tile_for(self.head_dim, self.consumers, self.keys)
        knob = dict(self.defines).get(MMA_BM_KNOB) if self.is_mma else None
        return (int(knob) if knob is not None and int(knob) > 0 else bm, bn)

    @property
    def threads(self) -> int:
        return self.record.threads_for(self.head_dim, self.consumers, self._pieces, self.tile[0])

    def name_expression(self) -> str:
        return f"{self.record.template}<{_STORAGE[self.dtype]}, {self.head_dim}, {self.stages}, {int(self.causal)}>"

    @property
    def smem_bytes(self) -> int:
        size = ITEMSIZE[self.dtype]
        o_buffer = self.tile[0] * self.head_dim * size if self.o_buffer else 0  # as large as Q's tile
        return (self.stages * self.record.stage_bytes(self.head_dim, size, self.keys)
                + self.record.static_bytes(self.head_dim, size, self.consumers, self._pieces,
                                           self.mma_q_smem if self.is_mma else None, self.tile[0]) + o_buffer)

    @property
    def mma_pieces(self) -> int:
        """The mma kernel's m16 row pieces a warp: the knob where a variant sets it, else the record's."""
        knob = dict(self.defines).get(MMA_MW_KNOB)
        return int(knob) if knob is not None and int(knob) > 0 else self.record.pieces_for(self.head_dim)

    @property
    def mma_q_smem(self) -> bool:
        """The mma kernel keeps Q in shared memory of its own: the knob where a variant sets it (0 or 1), else with
        32 rows a warp (attention_mma.cu's Q_SMEM)."""
        knob = int(dict(self.defines).get(MMA_QSMEM_KNOB, -1))
        return knob != 0 if knob >= 0 else self.mma_pieces == 2

    @property
    def _pieces(self) -> int | None:
        return self.mma_pieces if self.is_mma else None

    def compile(self, arch: str | None = None) -> build.Module:
        args, kwargs = self.compile_job(arch)
        return build.compile_record(*args, **kwargs)

    def compile_job(self, arch: str | None = None) -> tuple[tuple, dict]:
        """build.compile_record's arguments for this build: plain values another process can compile from (the
        record's source file by path, so a copy registered under another name in this process compiles there too)."""
        rec = self.record
        defines = {**dict(self.defines), **({"ASYNCCOPY_TRACE": 1} if self.trace else {})}
        if self.is_mma:
            defines[MMA_MW_KNOB] = self.mma_pieces  # the kernel builds what the launch assumes
        return ((f"attention kernel {self.kernel!r}", rec.source, rec.template, self.name_expression()),
                {"min_cc": rec.min_cc, "arch_specific": rec.arch_specific, "arch": arch, "defines": defines})



# ---------------------------------------------------------------------------------------------
# The stage count the pipeline model gives


TMA_LOAD_NS = 25.0  # a producer thread's issue of one TMA box (gemm_kernels.TMA_ISSUE_NS: two of them, 50 ns)


def model_inputs(rec: AttentionKernel, head_dim: int, facts, memory="cached"):
    """What the pipeline model is given for ``rec``'s K/V pipeline (the planner's plan_stages and the traced
    timeline's prediction alike): the device with the unloaded latency (the K/V tiles of one (batch, head)
    are read by each of its query tiles, mostly from L2), the kernel's own costs (a TMA producer issues a
    stage's 2 x head_dim / 64 boxes once the stage's release reaches it), and the bandwidth (to spare)."""
    from .gemm_kernels import HANDOFF_NS, L2_HEADROOM
    from .model import planner
    from .model.simulate import NO_COSTS, KernelCosts

    dev = planner.unloaded_device(facts, memory)
    loads = 2 * -(-head_dim // 64)
    costs = KernelCosts(loads * TMA_LOAD_NS, 0.0, True, HANDOFF_NS) if rec.operands == "tma" else NO_COSTS
    return dev, costs, facts.bandwidth * L2_HEADROOM


def plan_stages(rec: AttentionKernel, head_dim: int, dtype: str, facts, *, tile_ns: float, memory="cached",
                causal: bool = False):
    """The pipeline model's plan (asynccopy.model.planner.Plan) for one stage of K and V (BN keys x head_dim
    each) per key tile, ``tile_ns`` of compute each (both products and the softmax of a block's queries),
    one block per SM, with :func:`model_inputs`. For the overlapped loop its rows are the plain loop's depths (one
    stage fewer than the build; ``recommended`` is the build's stage count)."""
    from .model import planner

    size = ITEMSIZE[dtype]
    bn = rec.keys_for(head_dim, causal)
    ops = [planner.Operand("K", (bn, head_dim), dtype), planner.Operand("V", (bn, head_dim), dtype)]
    dev, costs, bandwidth = model_inputs(rec, head_dim, facts, memory)
    fit = rec.fit(head_dim, facts.smem_per_block_optin, size, keys=bn)
    # The overlapped loop (OVERLAP, 3+ stages) keeps tile t + 1 landed as it folds tile t: STAGES - 2 in flight.
    ahead = 1 if dict(rec.head_knobs_for(head_dim)).get(MMA_OVERLAP_KNOB) == 1 and fit >= 3 else 0
    p = planner.plan(ops, threads=rec.threads_for(head_dim), device=dev, compute_ns=tile_ns, blocks_per_sm=1,
                     max_stages=max(1, fit - ahead), static_smem=rec.static_bytes(head_dim, size) + rec.smem_reserve,
                     costs=costs, memory=None, bandwidth=bandwidth)
    if ahead and p.recommended >= 2:
        p.recommended += 1
        p.reasons.append(f"{p.recommended} stages: the overlapped loop keeps the next tile's K and V beside those")
    return p
