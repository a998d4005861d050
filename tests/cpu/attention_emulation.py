"""NumPy emulations of the two attention kernels, instruction by instruction, for CPU tests of their index
and bookkeeping (tests/cpu/test_attention_emulation.py).

``emulate_mma`` transcribes asynccopy/kernels/attention_mma.cu (FlashAttention-2: cp.async, ldmatrix,
mma.sync m16n8k16); ``emulate_wgmma`` transcribes asynccopy/kernels/attention_wgmma.cu (FlashAttention-3
structure: a TMA producer, two consumer warpgroups, wgmma from shared memory and from registers). Both take
q [batch, heads, q_len, D] and k, v [batch, kv_heads, k_len, D] (float arrays whose values are exactly
representable in ``dtype``), run every block of the grid asynccopy.attention launches, and return (out, lse)
as the kernel leaves them: out rounded to ``dtype`` (as float64), lse (natural log) of every row. Every
array index, register index, global offset, shared-memory byte address, mask, stage and barrier phase is
computed by the kernel's own expressions; the comments quote the .cu lines each part transcribes
(verbatim, so that they can be found after edits). The threads of a warp (mma: and the 8 row pieces of the
block) or of a warpgroup are the leading axes of NumPy arrays: one array expression runs one line of the
kernel for all of them.

What is modelled, and how:
  * Shared memory is bytes at exact addresses (class Shared), poisoned with 0xFF (0xFFFF is a NaN in f16
    and in bf16): reading anything no copy wrote gives a NaN output. Every access is checked to be
    naturally aligned and inside the dynamic allocation the Python record launches with
    (asynccopy.attention_kernels.AttentionConfig.smem_bytes; for wgmma from a ``smem_base`` address that
    need not be 1024-aligned, so the kernel's own round-up is exercised).
  * Registers of 16-bit pairs are uint32 bit patterns (the lower-indexed element in the low half); f32
    values are float64 here. Rounding happens where the kernel rounds and only there: P and the output to
    T (f16: numpy's round-to-nearest-even; bf16: round-to-nearest-even on the float32 bits), from the f32
    value (float64 first cast to float32, as the kernel holds them).
  * Global memory: mma reads and writes flat arrays through the kernel's pointer arithmetic and the
    strides of a (batch, heads, seq, D) or (batch, seq, heads, D) layout; wgmma reads them through its TMA
    maps' coordinates (the maps' strides are asynccopy.tensormap's business, checked elsewhere). Every
    output element must be written exactly once (NaN where never, an error where twice).
  * mma kernel: cp.async copies (16 bytes, zero-fill for src-size 0) grouped by commit_group and landed
    either at issue (copies="eager": the earliest a refill can overwrite a stage) or only when a
    wait_group needs them (copies="late": the latest a copy may land): a stage refilled too early shows in
    the first, a wait_group too shallow in the second. __syncthreads is a no-op: the warps run in
    lockstep; a warp that skips a tile is computed and its result discarded.
  * wgmma kernel: the producer thread and the two consumer warpgroups are Python generators run by a
    scheduler that switches at every mbarrier wait and arrival, by a given priority order (so one consumer
    can run ahead of the other, or the producer refill a stage the moment it is released); mbarriers
    follow PTX's phase / parity / pending-arrivals / transaction-bytes rules (a wait on parity P returns
    once the phase of that parity completed; a phase completes when its arrivals and its transaction
    bytes are both down to 0; more bytes than announced is an error; all agents blocked is a deadlock).
    TMA loads land at issue (tma="eager") or only on demand, when every agent is blocked and one waits on
    the load's barrier (tma="late": the oldest such first, "lifo": the newest); wgmma groups
    execute (read shared memory and registers, write accumulators) at the wgmma.wait_group that retires
    them, the latest the PTX allows. One schedule per call: the tests pick several, not all.
  * wgmma's key split (no causal mask; asynccopy.attention_launch's ``split``, clamped as it clamps it): the
    1-D grid of whole items, then ``pieces`` blocks for each of the last ``tail`` items, run in linear order,
    each piece over its own range of key tiles (absolute tile numbers for the keys and the mask, its own count
    for stages and phases). A piece's consumer warpgroups stop where merge_pieces begins and resume after
    every block ran, in a given order of finishing (the kernel orders nothing between blocks): each writes its
    slot, arrives on its item's counter, and the last to arrive merges the others' slots and runs the
    epilogue. split_partial is float4s poisoned with NaN (a merge that reads a slot its piece has not yet
    written gives NaN), split_counter zero before the launch and checked down again after it.
  * wgmma's persistent build (ASYNCCOPY_ATTN_PERSISTENT, the causal default): a block takes a list of items in
    order (its own, then those the unit counter handed it; the counter's atomics are not modelled, only which
    items each block gets), with the K / V ring's stages and phases running on across items, Q's buffer handed
    back on empty_q after each consumer warp's last Q K^T, O staged in the item's last K / V stage behind a
    barrier of every consumer warpgroup (a named barrier: it blocks here, so a warpgroup cannot stage O while
    another still reads the stage) and that stage handed back after the stores, and the producer's final plain
    arrival on full_q that ends the consumers.
  * ldmatrix, mma.sync m16n8k16, wgmma m64nNk16 (A and B from shared memory through matrix descriptors, or
    A from registers), the accumulator layouts, the TMA tensor copies (4-D boxes, 128B swizzle, zero fill
    out of bounds counted in the transaction bytes, stores clipped), shuffles (xor of the lane index) as
    the PTX ISA describes them (cited where each is modelled).

What it assumes, honestly: the semantics of those instructions as read from the PTX ISA and from CUTLASS
(the same reading the kernels' author had: this catches bookkeeping slips, not a misreading of the ISA):
the ldmatrix / mma fragment layouts (PTX "Matrix fragments for mma.m16n8k16", "ldmatrix"); the wgmma
accumulator and register-A layouts (PTX 9.7.15.5.1.1 "Register Fragments", whose figures are images;
CUTLASS cute/atom/mma_traits_sm90_gmma.hpp: ``CLayout_64xN = ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512))``
and ``ALayout_64x16 = CLayout_64x16`` for 16-bit A in registers); the descriptor fields and the canonical
layouts of the 128B swizzle (PTX 9.7.15.5.1.2 "Matrix Descriptor Format" and "Canonical Layouts": K-major
((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 two-byte elements,
Swizzle<3,4,3> on the address, base offset 0 when the pattern starts at a 1024-byte boundary; LBO unused
for a swizzled K-major operand); TMA's 128B swizzle as asynccopy/swizzle.py models it (address bits
[4, 7) ^= bits [7, 10), hardware-tested). The descriptor model is cross-checked against gemm_wgmma.cu,
which builds the same descriptors and passes on an H200 in all four operand layouts (the test file
emulates its A / B addressing with these functions). Not modelled: the f32 rounding of the products'
accumulation and of the softmax (float64 here; the tests' tolerance is the rounding of P and of the
output alone), ex2.approx / lg2.approx's exact results, timing, bank conflicts, fences and named barriers
(no-ops in a lockstep model), setmaxnreg, register pressure.
"""

from __future__ import annotations

import math

import numpy as np

from asynccopy import device, swizzle
from asynccopy.attention_kernels import (
    CONSUMERS_KNOB,
    KEYS_KNOB,
    MMA_BM_KNOB,
    MMA_MW_KNOB,
    MMA_OVERLAP_KNOB,
    MMA_QSMEM_KNOB,
    O_BUFFER_KNOB,
    PERSISTENT_KNOB,
    AttentionConfig,
)
from asynccopy.attention_kernels import KERNELS as ATTENTION_KERNELS
from asynccopy.sdpa import Problem, configure
from asynccopy.workspace import FLAG_BYTES, SPLIT_FLAGS

DTYPES = ("float16", "bfloat16")
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
NEG_INF = -np.inf


# ---------------------------------------------------------------------------------------------
# 16-bit types and registers


def to_bits(x, dtype: str) -> np.ndarray:
    """float -> T bits (uint16), round to nearest even, from the float32 value (as __floats2half2_rn /
    __floats2bfloat162_rn get it)."""
    x32 = np.asarray(x, dtype=np.float64).astype(np.float32)
    if dtype == "float16":
        return x32.astype(np.float16).view(np.uint16)
    if dtype != "bfloat16":
        raise ValueError(f"dtype must be float16 or bfloat16, got {dtype!r}")
    b = x32.view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(bits, dtype: str) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.uint16)
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_to(x, dtype: str) -> np.ndarray:
    return from_bits(to_bits(x, dtype), dtype)


def global_bits(x, dtype: str) -> np.ndarray:
    """An input tensor as the kernel's global memory holds it: T bits; its values must be exact in T."""
    x = np.asarray(x, dtype=np.float64)
    bits = to_bits(x, dtype)
    if not np.array_equal(from_bits(bits, dtype), x):
        raise ValueError(f"inputs must be exactly representable in {dtype} (round them first)")
    return bits


def pack2(lo, hi, dtype: str) -> np.ndarray:
    """pack2<T> / Pair<T>::pack: two floats rounded to T in one 32-bit register, lo in the low half."""
    return to_bits(lo, dtype).astype(np.uint32) | (to_bits(hi, dtype).astype(np.uint32) << 16)


def unpack2(reg, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    reg = np.asarray(reg, dtype=np.uint32)
    return from_bits((reg & 0xFFFF).astype(np.uint16), dtype), from_bits((reg >> 16).astype(np.uint16), dtype)


def quad_shfl_xor(x, mask: int, axis: int = -1) -> np.ndarray:
    """__shfl_xor_sync(0xffffffff, x, mask) with the lanes (or a warpgroup's threads) along ``axis``."""
    idx = np.arange(x.shape[axis]) ^ mask
    return np.take(x, idx, axis=axis)


# ---------------------------------------------------------------------------------------------
# Shared memory


class Shared:
    """The block's dynamic shared memory: bytes at exact addresses [lo, lo + size), read and written in
    naturally aligned 2-, 4- and 16-byte units, poisoned with 0xFF bytes (0xFFFF: NaN in f16 and bf16)."""

    def __init__(self, lo: int, size: int):
        if lo % 16:
            raise ValueError("dynamic shared memory starts 16-byte aligned")
        self.lo, self.hi = lo, lo + size
        self.mem = np.full(self.hi + (-self.hi % 16), 0xFF, dtype=np.uint8)
        self.cells = self.mem.view("<u2")  # the 2-byte cells: byte address a is cell a // 2 (a even)

    def _check(self, addr, width: int) -> np.ndarray:
        addr = np.asarray(addr, dtype=np.int64)
        if addr.size and (addr.min() < self.lo or addr.max() + width > self.hi):
            raise AssertionError(f"shared-memory access of {width} bytes at [{addr.min()}, {addr.max() + width}) "
                                 f"outside the allocation [{self.lo}, {self.hi})")
        if np.any(addr % width):
            raise AssertionError(f"misaligned {width}-byte shared-memory access")
        return addr

    def read16(self, addr) -> np.ndarray:
        return self.cells[self._check(addr, 2) >> 1]

    def write16(self, addr, bits) -> None:
        self.cells[self._check(addr, 2) >> 1] = bits

    def write32(self, addr, reg) -> None:
        """A 4-byte store of a register (little-endian: its low half at the lower address)."""
        a = self._check(addr, 4) >> 1
        reg = np.asarray(reg, dtype=np.uint32)
        self.cells[a] = (reg & 0xFFFF).astype(np.uint16)
        self.cells[a + 1] = (reg >> 16).astype(np.uint16)

    def read32(self, addr) -> np.ndarray:
        a = self._check(addr, 4) >> 1
        return self.cells[a].astype(np.uint32) | (self.cells[a + 1].astype(np.uint32) << 16)

    def write_chunk16(self, addr, bits8) -> None:
        """A 16-byte write (8 cells) at each address (16-byte aligned); bits8 [..., 8]."""
        a = self._check(addr, 16) >> 1
        self.cells[a[..., None] + np.arange(8)] = bits8

    def read_chunk16(self, addr) -> np.ndarray:
        a = self._check(addr, 16) >> 1
        return self.cells[a[..., None] + np.arange(8)]


def _bijection(shape, entries) -> np.ndarray:
    """A gather map: out[i] = src[map[i]] over ``shape``, from (destination index, source index) pairs,
    checked to be one-to-one and onto (a layout slip in a map below fails at import)."""
    m = np.full(int(np.prod(shape)), -1, dtype=np.int64)
    for dst, src in entries:
        if m[dst] != -1:
            raise AssertionError(f"layout map: element {dst} assigned twice")
        m[dst] = src
    if np.any(m < 0):
        raise AssertionError("layout map: elements left unassigned")
    return m


# ---------------------------------------------------------------------------------------------
# mma.sync m16n8k16 and ldmatrix (PTX ISA "Matrix fragments for mma.m16n8k16 with floating point type"
# and "ldmatrix"; the header comment of asynccopy/kernels/include/asynccopy/mma.cuh says the same)

# A (16 x 16, row): a0 = (g, 2q..2q+1), a1 = (g+8, 2q..2q+1), a2 = (g, 2q+8..2q+9), a3 = (g+8, 2q+8..2q+9);
# B (16 x 8, col): b0 = (k 2q..2q+1, n g), b1 = (k 2q+8..2q+9, n g); C: c0, c1 = (g, 2q..2q+1), c2, c3 = (g+8, ..)
# Register values are indexed [lane][reg][half] (half 0: the low 16 bits).
_MMA_A = _bijection((16, 16), [((g + 8 * (reg & 1)) * 16 + 2 * q + e + 8 * (reg >> 1), (4 * g + q) * 8 + reg * 2 + e)
                               for g in range(8) for q in range(4) for reg in range(4) for e in range(2)])
_MMA_B = _bijection((16, 8), [((2 * q + e + 8 * reg) * 8 + g, (4 * g + q) * 4 + reg * 2 + e)
                              for g in range(8) for q in range(4) for reg in range(2) for e in range(2)])
_MMA_C = _bijection((32, 4), [((4 * g + q) * 4 + i, (g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1))
                              for g in range(8) for q in range(4) for i in range(4)])


def mma_m16n8k16(d, a, b, dtype: str) -> np.ndarray:
    """mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32: D = A x B + C for one warp (any leading axes):
    d [..., 32, 4] f32 (as float64), a [..., 32, 4] and b [..., 32, 2] packed T pairs. Returns the new d."""
    alo, ahi = unpack2(a, dtype)
    blo, bhi = unpack2(b, dtype)
    av = np.stack([alo, ahi], axis=-1).reshape(*alo.shape[:-2], 256)
    bv = np.stack([blo, bhi], axis=-1).reshape(*blo.shape[:-2], 128)
    amat = av[..., _MMA_A].reshape(*av.shape[:-1], 16, 16)
    bmat = bv[..., _MMA_B].reshape(*bv.shape[:-1], 16, 8)
    c = np.matmul(amat, bmat).reshape(*np.broadcast_shapes(amat.shape[:-2], bmat.shape[:-2]), 128)
    return d + c[..., _MMA_C].reshape(*c.shape[:-1], 32, 4)


def ldmatrix_x4(sm: Shared, addr, trans: bool) -> np.ndarray:
    """ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 for one warp (any leading axes): lane 8i + r gives
    the address of row r of matrix i (``addr`` [..., 32], 16-byte aligned); register i of lane 4g + q gets
    matrix i's row g, elements 2q, 2q + 1 (with .trans: rows 2q, 2q + 1 of column g). Returns [..., 32, 4]."""
    rows = sm.read_chunk16(addr)  # [..., 32, 8]: row (8i + r)'s 8 elements
    mats = rows.reshape(*rows.shape[:-2], 4, 8, 8)  # [..., matrix i, row r, column]
    lane = np.arange(32)
    g, q = lane // 4, lane % 4
    if trans:
        lo, hi = mats[..., 2 * q, g], mats[..., 2 * q + 1, g]  # [..., 4, 32]
    else:
        lo, hi = mats[..., g, 2 * q], mats[..., g, 2 * q + 1]
    regs = lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)
    return np.swapaxes(regs, -1, -2)


class CpAsync:
    """cp.async with commit groups. copies="eager": a copy lands when issued; "late": a group lands only
    when a wait_group leaves it no longer pending (both are executions the PTX allows)."""

    def __init__(self, sm: Shared, policy: str):
        if policy not in ("eager", "late"):
            raise ValueError(f"copies must be 'eager' or 'late', got {policy!r}")
        self.sm, self.policy = sm, policy
        self.current: list = []
        self.groups: list[list] = []

    def copy16(self, dst, bits8) -> None:
        if self.policy == "eager":
            self.sm.write_chunk16(dst, bits8)
        else:
            self.current.append((np.array(dst), np.array(bits8)))

    def commit(self) -> None:  # cp.async.commit_group (an empty group too)
        self.groups.append(self.current)
        self.current = []

    def wait(self, n: int) -> None:  # cp.async.wait_group n: all but the newest n groups complete
        while len(self.groups) > n:
            for dst, bits8 in self.groups.pop(0):
                self.sm.write_chunk16(dst, bits8)


# ---------------------------------------------------------------------------------------------
# emulate_mma: attention_mma.cu

MMA_BM, MMA_BN = 128, 64  # .cu: "BM = ASYNCCOPY_ATTN_MMA_BM" (default 128), "BN = 64;"
# The block's 16-row pieces: BM / 16, its warps of one piece each (MW = 1), or of two (MW = 2: .cu "WARPS =
# BM / (16 * MW)"). The emulation's leading axis runs over the pieces, piece v = MW * warp + i.


def _swizzled(row_bytes: int, row, col_byte):
    """.cu swizzled<ROW_BYTES>: "return row * ROW_BYTES + (col_byte ^ ((row & 7) << 4));"."""
    assert row_bytes % 128 == 0
    return row * row_bytes + (col_byte ^ ((row & 7) << 4))


def _mma_load_rows(cp: CpAsync, tile: int, gmem, g: int, ld: int, row0: int, rows_n: int, d: int, rows: int,
                   threads: int) -> None:
    """.cu load_rows<T, D, ROWS>(tile, g, ld, row0, rows_n), every thread's copies at once: "row = threadIdx.x /
    CHUNKS, chunk = threadIdx.x % CHUNKS; at = (row0 + row) * ld + 8 * chunk; dst = tile + swizzled<2 * D>(row, 16 *
    chunk); step = STEP * ld", copy j "inside = row0 + row + j * STEP < rows_n; cp_async<16, true>(dst + j * STEP *
    2 * D, inside ? g + (at + j * step) : g, inside ? 16u : 0u)" (STEP = THREADS / CHUNKS, a
    multiple of 8, so row + j STEP keeps the row's swizzle). ``gmem``: global memory as flat T bits; ``g``: the head's
    element offset in it."""
    chunks = d * 2 // 16
    copies = rows * chunks // threads
    assert rows * chunks % threads == 0 and threads % chunks == 0
    step = threads // chunks
    assert step % 8 == 0
    tid = np.arange(threads)[None, :]
    row0_t, chunk = tid // chunks, tid % chunks
    j = np.arange(copies)[:, None]
    row = row0_t + j * step
    inside = row0 + row < rows_n
    src = np.where(inside, g + (row0 + row0_t) * ld + 8 * chunk + j * step * ld, g)
    data = np.where(inside[..., None], gmem[src[..., None] + np.arange(8)], 0).astype(np.uint16)  # src-size 0: zeros
    dst = tile + _swizzled(2 * d, row0_t, 16 * chunk) + j * step * 2 * d
    cp.copy16(dst, data)


def _mma_scores(sm: Shared, w: int, qf, q_at, ks: int, d: int, dtype: str):
    """.cu scores<T, D>(s, qf, qs, ks): S = Q K^T of the K tile at ``ks`` for the block's ``w`` row pieces ([W]
    leading axis). ``q_at``: None (Q's fragments ``qf`` in registers) or Q's own shared-memory offset (Q_SMEM: read
    at every k step). Returns s [W, BN/8, 32, 4]."""
    row_bytes = 2 * d
    lane = np.arange(32)
    mat, r = lane // 8, lane % 8
    # S = Q K^T, the p loop as an axis (addresses [1, BN/16, 32]): .cu "ldmatrix_x4(f, ks + swizzled<ROW_BYTES>(16 * p +
    # 8 * (mat >> 1) + r, 2 * (16 * kk + 8 * (mat & 1)))); b0 = {f[0], f[1]}, b1 = {f[2], f[3]}; mma(s[2 * p], qf[kk], b0);
    # mma(s[2 * p + 1], qf[kk], b1)"
    s = np.zeros((w, MMA_BN // 8, 32, 4))
    p = np.arange(MMA_BN // 16)[None, :, None]
    piece = np.arange(w)[:, None]
    for kk in range(d // 16):
        # .cu "if constexpr (Q_SMEM) ldmatrix_x4(qa[i], qs + swizzled<ROW_BYTES>(16 * (MW * warp + i) + 8 * (mat & 1)
        # + r, 2 * (16 * kk + 8 * (mat >> 1)))); else qa[i][e] = qf[i][kk][e]"
        qa = qf[kk] if q_at is None else ldmatrix_x4(
            sm, q_at + _swizzled(row_bytes, 16 * piece + 8 * (mat & 1) + r, 2 * (16 * kk + 8 * (mat >> 1))), trans=False)
        f = ldmatrix_x4(sm, ks + _swizzled(row_bytes, 16 * p + 8 * (mat >> 1) + r, 2 * (16 * kk + 8 * (mat & 1))),
                        trans=False)  # [1, P, 32, 4]
        b = np.stack([f[..., 0:2], f[..., 2:4]], axis=2).reshape(1, MMA_BN // 8, 32, 2)  # n8 tiles 2p, 2p + 1
        s = mma_m16n8k16(s, qa[:, None], b, dtype)
    return s


def _mma_fold(sm: Shared, o, st_max, st_sum, s, vs: int, key0: int, row_g, k_len: int, scale_log2: float, d: int,
              causal: bool, mask, dtype: str):
    """.cu fold<T, D, CAUSAL, MASK>(o, st, s, vs, key0, row_g, k_len, scale_log2): the scores ``s`` [W, BN/8, 32, 4]
    of one key tile scaled, masked, through the online softmax and P V. Returns the new (o, st_max, st_sum)."""
    row_bytes = 2 * d
    lane = np.arange(32)
    mat, r = lane // 8, lane % 8
    # .cu "float x = s[nt][e] * scale_log2; if constexpr (MASK) { const int key = key0 + 8 * nt + 2 * q4 + (e & 1);
    # if (key >= k_len || (CAUSAL && key > row_g + 8 * (e >> 1))) x = NEG_INF; }"
    q4 = lane % 4
    nt = np.arange(MMA_BN // 8)[:, None, None]
    e = np.arange(4)[None, None, :]
    x = s * scale_log2
    key = key0 + 8 * nt + 2 * q4[None, :, None] + (e & 1)  # [BN/8, 32, 4]
    hit = (key >= k_len) | (causal & (key > row_g[:, None, :, None] + 8 * (e >> 1)))  # [W, BN/8, 32, 4]
    s = np.where(mask[:, None, None, None], np.where(hit, NEG_INF, x), x)
    # online softmax per row half h: .cu "mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1])); (shfl_xor 1, 2);
    # base = mx == NEG_INF ? 0 : mx; rescale = exp2f(st.max[h] - base); ... st.sum[h] = st.sum[h] * rescale + sum;
    # o[dt][2 * h] *= rescale; o[dt][2 * h + 1] *= rescale"
    o, st_max, st_sum = o.copy(), st_max.copy(), st_sum.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        for h in range(2):
            mx = st_max[:, :, h]
            mx = np.fmax(mx, np.fmax(s[:, :, :, 2 * h], s[:, :, :, 2 * h + 1]).max(axis=1))
            mx = np.fmax(mx, quad_shfl_xor(mx, 1))
            mx = np.fmax(mx, quad_shfl_xor(mx, 2))
            base = np.where(mx == NEG_INF, 0.0, mx)
            rescale = np.exp2(st_max[:, :, h] - base)
            st_max[:, :, h] = mx
            s[:, :, :, 2 * h] = np.exp2(s[:, :, :, 2 * h] - base[:, None, :])
            s[:, :, :, 2 * h + 1] = np.exp2(s[:, :, :, 2 * h + 1] - base[:, None, :])
            total = (s[:, :, :, 2 * h] + s[:, :, :, 2 * h + 1]).sum(axis=1)
            st_sum[:, :, h] = st_sum[:, :, h] * rescale + total
            o[:, :, :, 2 * h] *= rescale[:, None, :]
            o[:, :, :, 2 * h + 1] *= rescale[:, None, :]
    # O += P V: .cu "a[4] = {pack(s[2kk][0], s[2kk][1]), pack(s[2kk][2], s[2kk][3]), pack(s[2kk+1][0], s[2kk+1][1]),
    # pack(s[2kk+1][2], s[2kk+1][3])}; ldmatrix_x4_trans(f, vs + swizzled<ROW_BYTES>(16 * kk + 8 * (mat & 1) + r,
    # 2 * (16 * p + 8 * (mat >> 1))))"
    p = np.arange(d // 16)[None, :, None]
    for kk in range(MMA_BN // 16):
        a = np.stack([pack2(s[:, 2 * kk, :, 0], s[:, 2 * kk, :, 1], dtype),
                      pack2(s[:, 2 * kk, :, 2], s[:, 2 * kk, :, 3], dtype),
                      pack2(s[:, 2 * kk + 1, :, 0], s[:, 2 * kk + 1, :, 1], dtype),
                      pack2(s[:, 2 * kk + 1, :, 2], s[:, 2 * kk + 1, :, 3], dtype)], axis=-1)  # [W, 32, 4]
        f = ldmatrix_x4(sm, vs + _swizzled(row_bytes, 16 * kk + 8 * (mat & 1) + r, 2 * (16 * p + 8 * (mat >> 1))),
                        trans=True)
        b = np.stack([f[..., 0:2], f[..., 2:4]], axis=2).reshape(1, d // 8, 32, 2)
        o = mma_m16n8k16(o, a[:, None], b, dtype)
    return o, st_max, st_sum


def _mma_attend(sm: Shared, o, st_max, st_sum, qf, q_at, ks: int, vs: int, key0: int, row_g, k_len: int,
                scale_log2: float, d: int, causal: bool, mask, dtype: str):
    """.cu's non-overlapped tile: scores() then fold<MASK>() (``mask`` [W] picks the instantiation per warp)."""
    s = _mma_scores(sm, o.shape[0], qf, q_at, ks, d, dtype)
    return _mma_fold(sm, o, st_max, st_sum, s, vs, key0, row_g, k_len, scale_log2, d, causal, mask, dtype)


def _mma_block(a: dict, block: tuple[int, int, int], grid: tuple[int, int], d: int, stages: int, causal: bool,
               dtype: str, copies: str, pieces: int, q_smem: bool | None = None, bm: int = MMA_BM,
               overlap: bool = False) -> None:
    """One block (blockIdx ``block`` = (x, y, z), gridDim ``grid`` = (x, y)) of the kernel attention_mma<T, D,
    STAGES, CAUSAL> built with MW = ``pieces`` and BM = ``bm``; ``a``: its arguments by name (q, k, v, out: flat global memory;
    lse flat; the strides in elements; group, q_len, k_len, scale) and ``writes``, a count per element of out."""
    q, k, v, out, lse, writes = a["q"], a["k"], a["v"], a["out"], a["lse"], a["writes"]
    group, q_len, k_len, scale = a["group"], a["q_len"], a["k_len"], a["scale"]
    bx, head, batch = block
    grid_x, grid_y = grid
    row_bytes = 2 * d
    tile_bytes = MMA_BN * row_bytes
    stage_bytes = 2 * tile_bytes
    assert bm * row_bytes <= stage_bytes  # .cu "the Q tile fits one stage"
    knobs = ((MMA_MW_KNOB, pieces), (MMA_BM_KNOB, bm)) + (() if q_smem is None else ((MMA_QSMEM_KNOB, int(q_smem)),))
    ov = overlap and stages >= 3  # .cu "OVERLAP = ASYNCCOPY_ATTN_MMA_OVERLAP != 0 && STAGES >= 3"
    cfg = AttentionConfig("mma", dtype, d, stages, causal, defines=knobs)
    threads = cfg.threads  # .cu "THREADS = 32 * WARPS", WARPS = BM / (16 * MW)
    assert threads == 32 * bm // (16 * pieces) and cfg.tile[0] == bm
    w = bm // 16  # the block's row pieces
    sm = Shared(0, cfg.smem_bytes)  # the kernel addresses offsets from the dynamic base only (16-byte aligned)
    cp = CpAsync(sm, copies)
    # .cu "Q_SMEM = ASYNCCOPY_ATTN_MMA_QSMEM < 0 ? MW == 2 : ASYNCCOPY_ATTN_MMA_QSMEM != 0"
    q_own = pieces == 2 if q_smem is None else q_smem
    assert q_own == cfg.mma_q_smem
    # .cu "q_smem = smem + (Q_SMEM ? STAGES : STAGES - 1) * STAGE_BYTES"
    q_smem = (stages if q_own else stages - 1) * stage_bytes
    m0 = bx * bm  # .cu "m0 = qt * BM" (qt: blockIdx.x, or causal_tile's)
    qg = batch * a["q_sb"] + head * a["q_sh"]  # .cu "qg = q + batch * q_sb + head * q_sh; kg = k + batch * k_sb +
    kg = batch * a["k_sb"] + head // group * a["k_sh"]  # head / group * k_sh; vg likewise"
    vg = batch * a["v_sb"] + head // group * a["v_sh"]
    # .cu "kv_end = CAUSAL ? min(k_len, min(m0 + BM, q_len)) : k_len"
    kv_end = min(k_len, min(m0 + bm, q_len)) if causal else k_len
    tiles = (kv_end + MMA_BN - 1) // MMA_BN

    # .cu "load_rows<T, D, BM>(q_smem, qg, q_ss, m0, q_len); commit_group(); for (s = 0; s < STAGES - 1; ++s) {...}"
    _mma_load_rows(cp, q_smem, q, qg, a["q_ss"], m0, q_len, d, bm, threads)
    cp.commit()
    for s in range(stages - 1):
        if s < tiles:
            _mma_load_rows(cp, s * stage_bytes, k, kg, a["k_ss"], s * MMA_BN, k_len, d, MMA_BN, threads)
            _mma_load_rows(cp, s * stage_bytes + tile_bytes, v, vg, a["v_ss"], s * MMA_BN, k_len, d, MMA_BN, threads)
        cp.commit()

    piece = np.arange(w)[:, None]  # MW * warp + i
    lane = np.arange(32)[None, :]
    mat, r = lane // 8, lane % 8
    # .cu "wait_group<STAGES - 1>(); __syncthreads(); ldmatrix_x4(qf[i][kk], q_smem + swizzled<ROW_BYTES>(16 * (MW *
    # warp + i) + 8 * (mat & 1) + r, 2 * (16 * kk + 8 * (mat >> 1))))" (MW = 1 only: "kk < D / 16 && !Q_SMEM")
    cp.wait(stages - 2 if ov else stages - 1)  # .cu "wait_group<OVERLAP ? STAGES - 2 : STAGES - 1>()"
    qf = None if q_own else [
        ldmatrix_x4(sm, q_smem + _swizzled(row_bytes, 16 * piece + 8 * (mat & 1) + r, 2 * (16 * kk + 8 * (mat >> 1))),
                    trans=False) for kk in range(d // 16)]  # each [W, 32, 4]

    o = np.zeros((w, d // 8, 32, 4))  # .cu "float o[D / 8][4] ... RowState st{{NEG_INF, NEG_INF}, {0, 0}}"
    st_max = np.full((w, 32, 2), NEG_INF)
    st_sum = np.zeros((w, 32, 2))
    # .cu "row_g = m0 + 16 * MW * warp + lane / 4" (piece i's rows 16 i further: "row_g + 16 * i + 8 * (e >> 1)");
    # "warp_first = m0 + 16 * MW * warp, warp_last = warp_first + 16 * MW - 1", per piece the bounds of its warp
    row_g = m0 + 16 * piece + lane // 4  # [W, 32]
    warp_first = m0 + 16 * pieces * (np.arange(w) // pieces)
    warp_last = warp_first + 16 * pieces - 1
    scale_log2 = float(np.float32(np.float32(scale) * np.float32(LOG2E)))

    # .cu "for (int t = 0; t < tiles; ++t)": STAGES == 1: load, commit, wait_group<0>; else wait_group<STAGES - 2>,
    # refill stage_of(t + STAGES - 1) if it is a tile, commit; then attend on stage_of(t) unless the warp skips it
    q_at = q_smem if q_own else None

    def refill(nxt):  # .cu refill(): tile nxt's K and V into its stage where it exists, one commit either way
        if nxt < tiles:
            at = (nxt % stages) * stage_bytes
            _mma_load_rows(cp, at, k, kg, a["k_ss"], nxt * MMA_BN, k_len, d, MMA_BN, threads)
            _mma_load_rows(cp, at + tile_bytes, v, vg, a["v_ss"], nxt * MMA_BN, k_len, d, MMA_BN, threads)
        cp.commit()

    if ov:
        # .cu "if (tiles > 0) scores(s, qf, q_smem, smem); for (t...) { wait_group<STAGES - 3>(); refill(t +
        # STAGES - 1); vs = stage_of(t) + TILE_BYTES; kn = stage_of(t + 1); if (CAUSAL && key0 > warp_last)
        # continue; if (t + 1 < tiles && (!CAUSAL || key0 + BN <= warp_last)) { scores(sn, .., kn); fold<mask>(s, vs);
        # s = sn } else fold<mask>(s, vs) }"
        sc = _mma_scores(sm, w, qf, q_at, 0, d, dtype)
        for t in range(tiles):
            key0 = t * MMA_BN
            cp.wait(stages - 3)
            refill(t + stages - 1)
            vs = (t % stages) * stage_bytes + tile_bytes
            kn = ((t + 1) % stages) * stage_bytes
            active = np.full(w, True) if not causal else key0 <= warp_last
            has_next = active & (t + 1 < tiles) & ((not causal) | (key0 + MMA_BN <= warp_last))
            mask = (key0 + MMA_BN > k_len) | (causal & (key0 + MMA_BN - 1 > warp_first))
            sn = _mma_scores(sm, w, qf, q_at, kn, d, dtype) if has_next.any() else sc
            o2, m2, s2 = _mma_fold(sm, o, st_max, st_sum, sc, vs, key0, row_g, k_len, scale_log2, d, causal, mask,
                                   dtype)
            keep = active[:, None, None]
            o = np.where(active[:, None, None, None], o2, o)
            st_max, st_sum = np.where(keep, m2, st_max), np.where(keep, s2, st_sum)
            sc = np.where(has_next[:, None, None, None], sn, sc)
    for t in range(tiles if not ov else 0):
        key0 = t * MMA_BN
        if stages == 1:
            _mma_load_rows(cp, 0, k, kg, a["k_ss"], key0, k_len, d, MMA_BN, threads)
            _mma_load_rows(cp, tile_bytes, v, vg, a["v_ss"], key0, k_len, d, MMA_BN, threads)
            cp.commit()
            cp.wait(0)
        else:
            cp.wait(stages - 2)
            refill(t + stages - 1)
        ks = (t % stages) * stage_bytes
        active = np.full(w, True) if not causal else key0 <= warp_last
        mask = (key0 + MMA_BN > k_len) | (causal & (key0 + MMA_BN - 1 > warp_first))
        o2, m2, s2 = _mma_attend(sm, o, st_max, st_sum, qf, q_at, ks, ks + tile_bytes, key0, row_g, k_len,
                                 scale_log2, d, causal, mask, dtype)
        keep = active[:, None, None]
        o = np.where(active[:, None, None, None], o2, o)  # a skipped warp's state is untouched
        st_max, st_sum = np.where(keep, m2, st_max), np.where(keep, s2, st_sum)
    if stages > 1:
        cp.wait(0)

    # epilogue: .cu "sum += shfl_xor(sum, 1); sum += shfl_xor(sum, 2); inv = sum > 0 ? 1 / sum : 0; if (row >= q_len) continue;
    # store_pair(orow + 8 * dt + 2 * (lane % 4), o[dt][2h] * inv, o[dt][2h + 1] * inv); lse[at] = sum > 0 ? (st.max[h] +
    # log2f(sum)) * LN2 : NEG_INF"
    lane1 = lane[0]
    for h in range(2):
        total = st_sum[:, :, h]
        total = total + quad_shfl_xor(total, 1)
        total = total + quad_shfl_xor(total, 2)
        inv = np.where(total > 0, 1.0 / np.where(total > 0, total, 1.0), 0.0)
        row = row_g + 8 * h  # [W, 32]
        ok = row < q_len
        orow = batch * a["o_sb"] + head * a["o_sh"] + row * a["o_ss"]  # .cu "out + batch * o_sb + head * o_sh + row * o_ss"
        for dt in range(d // 8):
            at = np.broadcast_to(orow + 8 * dt + 2 * (lane1 % 4), ok.shape)[ok]
            assert np.all(at % 2 == 0)  # store_pair: one aligned pair of T
            lo, hi = unpack2(pack2(o[:, dt, :, 2 * h] * inv, o[:, dt, :, 2 * h + 1] * inv, dtype)[ok], dtype)
            for where, val in ((at, lo), (at + 1, hi)):
                np.add.at(writes, where, 1)
                out[where] = val
        first = ok & (lane % 4 == 0)
        with np.errstate(divide="ignore"):
            val = np.where(total > 0, (st_max[:, :, h] + np.log2(np.where(total > 0, total, 1.0))) * LN2, NEG_INF)
        lse[((batch * grid_y + head) * q_len + row)[first]] = val[first]  # .cu "at = (batch * gridDim.y + head) * q_len + row"


PAD_ROWS = 64  # layout "padded": NaN rows after each (batch, head)'s sequence


def _memory(bits, layout: str):
    """A [b][h][s][D] tensor as flat global memory in ``layout`` ("bhsd", or "bshd": the transpose(1, 2) view
    of a (batch, seq, heads, head_dim) array, or "padded": bhsd with PAD_ROWS rows of NaN bits (0xFFFF) after each
    head's sequence, a strided view, so that a row read past the sequence instead of zero-filled poisons the
    result) and its (batch, head, seq) strides in elements."""
    b, h, s, d = bits.shape
    if layout == "bhsd":
        return np.ascontiguousarray(bits).ravel(), (h * s * d, s * d, d)
    if layout == "bshd":
        return np.ascontiguousarray(bits.transpose(0, 2, 1, 3)).ravel(), (s * h * d, d, h * d)
    if layout == "padded":
        mem = np.full((b, h, s + PAD_ROWS, d), 0xFFFF, dtype=bits.dtype)
        mem[:, :, :s] = bits
        return mem.ravel(), (h * (s + PAD_ROWS) * d, (s + PAD_ROWS) * d, d)
    raise ValueError(f"layout must be 'bhsd', 'bshd' or 'padded', got {layout!r}")


def emulate_mma(q, k, v, causal: bool = False, scale: float | None = None, stages: int = 3, *,
                dtype: str = "float16", copies: str = "eager", layout: str = "bhsd", pieces: int | None = None,
                q_smem: bool | None = None, bm: int | None = None, overlap: bool | None = None):
    """attention_mma<T, D, STAGES, CAUSAL> on q [b, h, q_len, D], k, v [b, h_kv, k_len, D] held in global memory
    in ``layout`` (out too): (out, lse), launched as asynccopy.attention launches it (grid (query tiles, heads,
    batch), the strides of the arrays, group = heads / kv_heads). The build: as the launch configures it on an H200
    (the record's rows a warp at this head dim and its knobs for the mask: 64 queries a block with Q in shared
    memory causal at head dim 128 where two such blocks fit an SM), or, where any of them is given, a variant's:
    ``pieces`` its MW (default the record's at this head dim), ``q_smem`` Q in shared memory of its own, ``bm`` its
    queries a block (default 128). ``overlap``: ASYNCCOPY_ATTN_MMA_OVERLAP (at 3 or more stages, the next tile's
    Q K^T beside this tile's fold); None: as the launch builds it on an H200 (on at head dim 128)."""
    qb, kb, vb = (global_bits(x, dtype) for x in (q, k, v))
    batch, heads, q_len, d = qb.shape
    a = {"group": heads // kb.shape[1], "q_len": q_len, "k_len": kb.shape[2],
         "scale": 1.0 / math.sqrt(d) if scale is None else float(scale)}
    for name, x in (("q", qb), ("k", kb), ("v", vb), ("o", np.zeros_like(qb))):
        mem, strides = _memory(x, layout)
        a[name if name != "o" else "out"] = mem if name != "o" else np.full(mem.shape, np.nan)
        a[f"{name}_sb"], a[f"{name}_sh"], a[f"{name}_ss"] = strides
    a["writes"] = np.zeros(a["out"].shape, dtype=np.int64)
    a["lse"] = np.full(batch * heads * q_len, np.nan)
    rec = ATTENTION_KERNELS["mma"]
    problem = Problem(batch, heads, kb.shape[1], q_len, a["k_len"], d, dtype)
    launch = dict(configure(problem, device.lookup("H200"), kernel="mma", stages=stages, causal=causal).defines)
    if pieces is None and q_smem is None and bm is None:  # the build the launch gives this problem on an H200
        bm = int(launch.get(MMA_BM_KNOB, MMA_BM))
        q_smem = bool(int(launch[MMA_QSMEM_KNOB])) if MMA_QSMEM_KNOB in launch else None
    if overlap is None:
        overlap = bool(int(launch.get(MMA_OVERLAP_KNOB, 0)))
    bm = bm or MMA_BM
    grid = (-(-q_len // bm), heads, batch)
    for block in grid_blocks(grid, causal, 2 * 2 * a["k_len"] * d // a["group"]):
        _mma_block(a, block, grid[:2], d, stages, causal, dtype, copies, pieces or rec.pieces_for(d), q_smem, bm,
                   overlap)
    if np.any(a["writes"] > 1):
        raise AssertionError(f"{int((a['writes'] > 1).sum())} output elements written more than once")
    b_, h_, s_ = a["o_sb"], a["o_sh"], a["o_ss"]
    idx = (np.arange(batch)[:, None, None, None] * b_ + np.arange(heads)[None, :, None, None] * h_
           + np.arange(q_len)[None, None, :, None] * s_ + np.arange(d))
    if a["writes"].sum() != idx.size:  # every element of out once, nothing past it (a padded layout's NaN rows)
        raise AssertionError(f"{int(a['writes'].sum())} output writes for {idx.size} elements")
    return a["out"][idx], a["lse"].reshape(batch, heads, q_len)


# ---------------------------------------------------------------------------------------------
# wgmma m64nNk16 (PTX "Asynchronous Warpgroup Level Matrix ..."; asynccopy/kernels/include/asynccopy/wgmma.cuh)

SWIZZLE_128B_LAYOUT = 1


def make_desc(addr: int, lbo_bytes: int, sbo_bytes: int, layout: int) -> int:
    """wgmma.cuh make_desc, bit for bit: "((addr & 0x3FFFF) >> 4) | ((lbo_bytes & 0x3FFFF) >> 4) << 16 |
    ((sbo_bytes & 0x3FFFF) >> 4) << 32 | layout << 62"."""
    return (((addr & 0x3FFFF) >> 4) | (((lbo_bytes & 0x3FFFF) >> 4) << 16) | (((sbo_bytes & 0x3FFFF) >> 4) << 32)
            | (layout << 62))


def make_desc_k_major(addr: int) -> int:  # wgmma.cuh: "make_desc(tile, 16, 1024, SWIZZLE_128B_LAYOUT)"
    return make_desc(addr, 16, 1024, SWIZZLE_128B_LAYOUT)


def make_desc_mn_major(addr: int, panel_bytes: int) -> int:  # wgmma.cuh: "make_desc(tile, panel_bytes, 1024, ...)"
    return make_desc(addr, panel_bytes, 1024, SWIZZLE_128B_LAYOUT)


def desc_matrix(sm: Shared, desc: int, mn_major: bool, mn: int, dtype: str) -> np.ndarray:
    """The [mn][16] operand (row = the M or N index, column = k) a wgmma reads through ``desc``.
    Decoding (PTX "Matrix Descriptor Format"): start = bits 0-13 << 4, LBO = bits 16-29 << 4, SBO = bits
    32-45 << 4, base offset bits 49-51, layout bits 62-63 (1: 128B swizzle, the only one modelled).
    Canonical 128B layouts (PTX "Canonical Layouts", T = 8 two-byte elements, strides in elements; LBO and
    SBO are bytes here):
      K-major  ((8,m),(T,2k)):((8T,SBO),(1,T)):   byte (i, k) = 128 (i % 8) + SBO (i / 8) + 2 k
      MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): byte (i, k) = 2 (i % 64) + LBO (i / 64) + 128 (k % 8)
                                                                   + SBO (k / 8)
    then Swizzle<3,4,3> on the shared-memory address start + byte (bits [4, 7) ^= bits [7, 10), the TMA
    128B pattern: asynccopy.swizzle.swizzle_address), which is what a base offset of 0 means (the pattern
    repeats from 1024-byte boundaries of the address). K-major's LBO is unused for swizzled layouts (PTX
    "Leading Dimension Byte Offset")."""
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    base_offset = (desc >> 49) & 7
    layout = desc >> 62
    if layout != SWIZZLE_128B_LAYOUT or base_offset != 0:
        raise AssertionError(f"descriptor {desc:#x}: only the 128B swizzle with base offset 0 is modelled")
    i = np.arange(mn)[:, None]
    k = np.arange(16)[None, :]
    if mn_major:
        off = 2 * (i % 64) + lbo * (i // 64) + 128 * (k % 8) + sbo * (k // 8)
    else:
        off = 128 * (i % 8) + sbo * (i // 8) + 2 * k
    phys = swizzle.swizzle_address(start + off, "128B")
    return from_bits(sm.read16(phys), dtype)


def _acc_map(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Accumulator register i of warpgroup thread t after m64nN (PTX Figure "WGMMA .m64nNk16 register
    fragment layout for accumulator matrix D"; CUTLASS CLayout_64xN): row 16 (t / 32) + (t % 32) / 4 +
    8 ((i >> 1) & 1), column 8 (i >> 2) + 2 (t % 4) + (i & 1). Returns (row, col), each [128, n / 2]."""
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    return 16 * (t // 32) + (t % 32) // 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (t % 4) + (i & 1)


def _rs_a_map() -> np.ndarray:
    """The register-A operand of wgmma m64nNk16 (16-bit types), as wgmma.cuh's WgmmaRS comment says: warp w of the
    warpgroup holds rows 16w .. 16w + 15 in mma.m16n8k16's A layout: a0 (row g, k 2q, 2q + 1), a1 (row g + 8,
    same k), a2 (row g, k 2q + 8, 2q + 9), a3 (row g + 8, k 2q + 8, 2q + 9), lower k in the low half; PTX
    Figure "WGMMA .m64nNk16 register fragment layout for matrix A"; CUTLASS ALayout_64x16 = CLayout_64x16.
    A gather map from the [thread][reg][half] values to A [64][16]."""
    entries = []
    for t in range(128):
        w, lane = t // 32, t % 32
        g, q = lane // 4, lane % 4
        for x in range(4):
            for e in range(2):
                row, col = 16 * w + g + 8 * (x & 1), 2 * q + e + 8 * (x >> 1)
                entries.append((row * 16 + col, t * 8 + x * 2 + e))
    return _bijection((64, 16), entries)


_RS_A = _rs_a_map()


class Warpgroup:
    """The wgmma issue queue of one warpgroup: mma_async appends to the open group, commit_group closes it,
    wait_group(n) executes every group but the newest n (reading shared memory and registers then)."""

    def __init__(self, sm: Shared, dtype: str):
        self.sm, self.dtype = sm, dtype
        self.open: list = []
        self.groups: list[list] = []

    def fence(self) -> None:  # wgmma.fence: nothing to model (accumulators are only touched at execution)
        pass

    def mma_ss(self, acc, desc_a: int, desc_b: int, n: int, trans_a: int, trans_b: int, scale_d: int) -> None:
        """wgmma.mma_async.m64nNk16.f32.T.T acc, desc_a, desc_b, scale_d, 1, 1, trans_a, trans_b."""
        def run():
            a = desc_matrix(self.sm, desc_a, bool(trans_a), 64, self.dtype)  # [64][16]
            b = desc_matrix(self.sm, desc_b, bool(trans_b), n, self.dtype)  # [n][16]
            _accumulate(acc, a @ b.T, scale_d)
        self.open.append(run)

    def mma_rs(self, acc, a_regs, desc_b: int, n: int, trans_b: int, scale_d: int) -> None:
        """wgmma.mma_async.m64nNk16.f32.T.T acc, {a0..a3}, desc_b, scale_d, 1, 1, trans_b; a_regs [128][4]
        uint32 (read when the group executes, as the PTX allows until it is waited for)."""
        def run():
            lo, hi = unpack2(a_regs, self.dtype)
            vals = np.stack([lo, hi], axis=-1).reshape(128 * 8)
            a = vals[_RS_A].reshape(64, 16)
            b = desc_matrix(self.sm, desc_b, bool(trans_b), n, self.dtype)
            _accumulate(acc, a @ b.T, scale_d)
        self.open.append(run)

    def commit(self) -> None:
        self.groups.append(self.open)
        self.open = []

    def wait(self, n: int) -> None:
        while len(self.groups) > n:
            for run in self.groups.pop(0):
                run()


def _accumulate(acc, prod, scale_d: int) -> None:
    rows, cols = _acc_map(2 * acc.shape[1])
    acc[...] = prod[rows, cols] + (acc if scale_d else 0.0)


class MBarrier:
    """An mbarrier (PTX "Parallel Synchronization and Communication Instructions: mbarrier"): a phase
    completes when its pending arrivals and its transaction count are both 0; then the next phase starts
    with ``count`` pending arrivals. ``phase`` counts the completed phases; try_wait.parity P succeeds once
    the phase of parity P completed, i.e. while the current (incomplete) phase's parity is not P."""

    def __init__(self, count: int, name: str):
        self.count, self.pending, self.tx, self.phase, self.name = count, count, 0, 0, name

    def _complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self) -> None:
        self.pending -= 1
        self._complete()

    def arrive_expect_tx(self, nbytes: int) -> None:  # expect-tx, then arrive-on
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        if self.tx < 0:
            raise AssertionError(f"mbarrier {self.name}: {-self.tx} bytes more than announced landed")
        self._complete()

    def done(self, parity: int) -> bool:
        return (self.phase & 1) != parity


class Wait:
    """What a blocked agent waits for: mbarrier ``bar``'s phase of parity ``parity`` (try_wait.parity)."""

    __slots__ = ("bar", "parity")

    def __init__(self, bar: MBarrier, parity: int):
        self.bar, self.parity = bar, parity

    def ready(self) -> bool:
        return self.bar.done(self.parity)

    def __repr__(self) -> str:
        return f"mbarrier {self.bar.name} parity {self.parity}"


class NamedBarrier:
    """A named barrier (PTX bar.sync / bar.arrive with a thread count): ``count`` threads complete it, those
    that sync (and wait for the completion) and those that arrive (and go on); then it starts over. More
    arrivals than ``count`` before it completes are an error here (PTX leaves it undefined)."""

    def __init__(self, ident: int, count: int):
        self.ident, self.count, self.arrived, self.generation = ident, count, 0, 0

    def arrive(self, threads: int) -> None:
        self.arrived += threads
        if self.arrived > self.count:
            raise AssertionError(f"named barrier {self.ident}: {self.arrived} arrivals for a count of {self.count}")
        if self.arrived == self.count:
            self.generation += 1
            self.arrived = 0

    def sync(self, threads: int):
        """bar.sync by ``threads`` threads: a generator to ``yield from`` (it blocks until completion)."""
        gen = self.generation
        self.arrive(threads)
        yield NamedWait(self, gen)


class NamedWait:
    __slots__ = ("bar", "generation")

    def __init__(self, bar: NamedBarrier, generation: int):
        self.bar, self.generation = bar, generation

    def ready(self) -> bool:
        return self.bar.generation > self.generation

    def __repr__(self) -> str:
        return f"named barrier {self.bar.ident}"


class Tma:
    """TMA tensor copies on 4-D maps over (D, seq, heads, batch) of a [batch][heads][seq][D] T tensor,
    128B swizzle (asynccopy/swizzle.py: the box is written densely from the destination, then 16-byte
    chunks are moved by address bits [4, 7) ^= [7, 10)). Boxes: 64 elements x ``rows`` (the maps of
    asynccopy.attention_launch: Q 128 rows, K / V 128, out 64). Out-of-bounds elements load as zeros
    and still count their bytes; stores are clipped. Loads land (``policy``): "eager" when issued; "late"
    only on demand: when every agent is blocked, one load whose mbarrier a blocked agent waits on, the
    oldest such; "lifo" likewise, the newest such (TMA completes copies in any order, at any time before
    their barrier's phase can complete)."""

    def __init__(self, sm: Shared, policy: str, dtype: str):
        if policy not in ("eager", "late", "lifo"):
            raise ValueError(f"tma must be 'eager', 'late' or 'lifo', got {policy!r}")
        self.sm, self.policy, self.dtype = sm, policy, dtype
        self.queue: list = []

    @staticmethod
    def _box(tensor_shape, coords, rows: int):
        batch, heads, seq, d = tensor_shape
        c0, c1, c2, c3 = coords
        rr, cc = np.meshgrid(np.arange(rows), np.arange(64), indexing="ij")
        gr, gc = c1 + rr, c0 + cc
        inside = (gr >= 0) & (gr < seq) & (gc >= 0) & (gc < d) & (0 <= c2 < heads) & (0 <= c3 < batch)
        return rr, cc, gr, gc, inside

    def load(self, dst: int, tensor, rows: int, coords, bar: MBarrier) -> None:
        """cp.async.bulk.tensor shared <- global of the box at ``coords``, completing its bytes on ``bar``."""
        def land():
            if dst % 1024:
                raise AssertionError(f"128B-swizzled TMA destination {dst:#x} not 1024-byte aligned")
            rr, cc, gr, gc, inside = self._box(tensor.shape, coords, rows)
            vals = np.zeros(rr.shape, dtype=np.uint16)  # out of bounds: zeros
            vals[inside] = tensor[coords[3], coords[2], gr[inside], gc[inside]]
            self.sm.write16(swizzle.swizzle_address(dst + rr * 128 + 2 * cc, "128B"), vals)
            bar.complete_tx(rows * 64 * 2)
        if self.policy == "eager":
            land()
        else:
            self.queue.append((bar, land))

    def land_one(self, waited) -> bool:
        """Land one deferred load whose barrier is in ``waited`` (the mbarriers blocked agents wait on)."""
        hits = [i for i, (bar, _) in enumerate(self.queue) if any(bar is w for w in waited)]
        if not hits:
            return False
        self.queue.pop(hits[-1] if self.policy == "lifo" else hits[0])[1]()
        return True

    def store(self, src: int, out, writes, rows: int, coords) -> None:
        """cp.async.bulk.tensor global <- shared of the box at ``coords`` (out: float64 [b][h][seq][D])."""
        if src % 1024:
            raise AssertionError(f"128B-swizzled TMA source {src:#x} not 1024-byte aligned")
        rr, cc, gr, gc, inside = self._box(out.shape, coords, rows)
        vals = from_bits(self.sm.read16(swizzle.swizzle_address(src + rr * 128 + 2 * cc, "128B")), self.dtype)
        b, h = coords[3], coords[2]
        np.add.at(writes, (b, h, gr[inside], gc[inside]), 1)
        out[b, h, gr[inside], gc[inside]] = vals[inside]


def run_agents(agents: dict, order, tma: Tma) -> None:
    """Run generator agents (each yields a Wait / NamedWait to block, or None at a switch point): at each
    yield the first agent in ``order`` that can go runs; when none can, a deferred TMA load lands; when
    none is left either, a deadlock."""
    blocked = {name: None for name in agents}
    live = [name for name in order if name in agents]
    while live:
        for name in live:
            w = blocked[name]
            if w is None or w.ready():
                break
        else:
            if tma.land_one([blocked[n].bar for n in live if isinstance(blocked[n], Wait)]):
                continue
            raise AssertionError("deadlock: " + ", ".join(f"{n} waits on {blocked[n]}" for n in live))
        try:
            blocked[name] = next(agents[name])
        except StopIteration:
            live.remove(name)


# ---------------------------------------------------------------------------------------------
# emulate_wgmma: attention_wgmma.cu

WG_PANEL = 64  # .cu "PANEL = 64"; per block BM = 64 * CONSUMERS queries, BN = BN_OF<D, CAUSAL> keys a tile
TURN_BARRIER = 4  # .cu "constexpr int TURN_BARRIER = 4;" (named barriers TURN_BARRIER + w)
ALL_CONSUMERS_BARRIER = 7  # .cu "constexpr int ALL_CONSUMERS_BARRIER = 7;"


L2_BUDGET = 24 << 20  # attention.cuh "#define ASYNCCOPY_ATTN_L2_BUDGET (24ll << 20)"


def causal_tile(lin: int, q_tiles: int, heads: int, batch: int, kv_bytes: int) -> tuple[int, int, int]:
    """attention.cuh's causal_tile, line by line: (qt, h, b) of linear block ``lin``."""
    pairs = heads * batch
    fit = L2_BUDGET // (kv_bytes if kv_bytes > 0 else 1)  # .cu "fit = ASYNCCOPY_ATTN_L2_BUDGET / (kv_bytes ...)"
    chunk = 1 if fit < 1 else pairs if fit > pairs else fit  # .cu "chunk = fit < 1 ? 1 : fit > pairs ? pairs : fit"
    per_chunk = chunk * q_tiles
    c = lin // per_chunk
    first = c * chunk
    size = pairs - first if pairs - first < chunk else chunk
    r = lin - c * per_chunk
    pair = first + r % size
    return q_tiles - 1 - r // size, pair % heads, pair // heads  # .cu "qt = q_tiles - 1 - r / size; h, b"


def grid_blocks(grid: tuple[int, int, int], causal: bool, kv_bytes: int):
    """(qt, h, b) of each block of a (q_tiles, heads, batch) grid in linear order: blockIdx itself, or (causal)
    causal_tile's."""
    q_tiles, heads, batch = grid
    for lin in range(q_tiles * heads * batch):
        if causal:
            yield causal_tile(lin, q_tiles, heads, batch, kv_bytes)
        else:
            yield lin % q_tiles, lin // q_tiles % heads, lin // (q_tiles * heads)


def split_blocks(blocks: int, whole_items: int, pieces: int, q_tiles: int, heads: int):
    """(qt, h, b, tail, piece) of each block of the key split's 1-D grid of ``blocks`` blocks in linear order (tail
    -1, piece 0: a whole item): .cu "long long item = blockIdx.x; if (item >= whole_items) { tail = (item -
    whole_items) / pieces; piece = (item - whole_items) % pieces; item = whole_items + tail; } qt = item % q_tiles;
    h = item / q_tiles % heads; b = item / q_tiles / heads"."""
    for item in range(blocks):
        tail, piece = -1, 0
        if item >= whole_items:
            tail, piece = (item - whole_items) // pieces, (item - whole_items) % pieces
            item = whole_items + tail
        yield item % q_tiles, item // q_tiles % heads, item // q_tiles // heads, tail, piece


def default_consumers(d: int) -> int:  # .cu "CONSUMERS_OF<D> = ... D == 64 ? 3 : 2"
    return 3 if d == 64 else 2


def default_keys(d: int, causal: bool) -> int:  # .cu "BN_OF<D, CAUSAL> = ... D == 128 && !CAUSAL ? 176 : 128"
    return 176 if d == 128 and not causal else 128


def _issue_qk(wg: Warpgroup, acc_s, q_w: int, k_s: int, d: int, bm: int) -> None:  # acc_s [128][BN / 2]
    """.cu issue_qk<Tag, D>(acc_s, q_w, k_s): "wgmma_fence(); for kk < D / 16: p = kk / 4, off = (kk % 4) * 16;
    dq = make_desc_k_major(q_w + p * BM * PANEL + off); dk = make_desc_k_major(k_s + p * BN * PANEL + off);
    Wgmma<BN, Tag>::mma<0, 0>(acc_s, dq, dk, kk > 0 ? 1 : 0); wgmma_commit()" (q_w, k_s: byte addresses)."""
    bn = 2 * acc_s.shape[1]
    wg.fence()
    for kk in range(d // 16):
        p, off = kk // 4, (kk % 4) * 16
        dq = make_desc_k_major(q_w + 2 * (p * bm * WG_PANEL + off))
        dk = make_desc_k_major(k_s + 2 * (p * bn * WG_PANEL + off))
        wg.mma_ss(acc_s, dq, dk, bn, 0, 0, 1 if kk > 0 else 0)
    wg.commit()


def _issue_pv(wg: Warpgroup, acc_o, pa, v_s: int, d: int) -> None:
    """.cu issue_pv<Tag, D>(acc_o, pa, v_s): "wgmma_fence(); for c < BN / 16: dv = make_desc_mn_major(v_s + c * 16 *
    PANEL, 2u * BN * PANEL); WgmmaRS<D, Tag>::mma<1>(acc_o, pa[c], dv, 1); wgmma_commit()"."""
    bn = 16 * pa.shape[1]
    wg.fence()
    for c in range(bn // 16):
        dv = make_desc_mn_major(v_s + 2 * (c * 16 * WG_PANEL), 2 * bn * WG_PANEL)
        wg.mma_rs(acc_o, pa[:, c], dv, d, 1, 1)
    wg.commit()


def _softmax_tile(acc_s, m, l_, rescale, scale_log2: float, j: int, lane, k_len: int, q0w: int, qrow,
                  causal: bool) -> None:
    """.cu softmax_tile<CAUSAL, POSITIVE = scale_log2 > 0>(acc_s, m, l, rescale, scale_log2, j, lane, k_len, q0w,
    qrow), in place, all 128 threads: "masked = POSITIVE ? NEG_INF : -NEG_INF; key0 = j * BN + 2 * (lane % 4); edge =
    (j + 1) * BN > k_len || (CAUSAL && (j + 1) * BN - 1 > q0w); if (edge) { key = key0 + 8 * (i >> 2) + (i & 1); row =
    (i >> 1) & 1; if (key >= k_len || (CAUSAL && key > qrow[row])) acc_s[i] = masked; } mx[r] = POSITIVE ?
    fmaxf(mx[r], acc_s[i]) : fminf(mx[r], acc_s[i]); tile_max = quad_extreme<POSITIVE>(mx[r]) * scale_log2; new_m =
    fmaxf(m[r], tile_max); rescale[r] = m[r] == NEG_INF ? 0 : ex2(m[r] - new_m); m[r] = new_m; neg_base[r] = new_m ==
    NEG_INF ? 0 : -new_m; acc_s[i] = ex2(fmaf(acc_s[i], scale_log2, neg_base[r])); sum[r] += acc_s[i]; l[r] = l[r] *
    rescale[r] + quad_sum(sum[r])", with one chain a row (the kernel's C = 1; with 2 or 4 chains, SOFTMAX_CHAINS, the
    max is the same and the sum's order of additions differs: float64 here, the kernel's f32 rounding not modelled)."""
    positive = scale_log2 > 0
    masked = NEG_INF if positive else -NEG_INF
    bn = 2 * acc_s.shape[1]
    i = np.arange(bn // 2)
    key0 = j * bn + 2 * (lane % 4)
    edge = (j + 1) * bn > k_len or (causal and (j + 1) * bn - 1 > q0w)
    if edge:
        key = key0[:, None] + 8 * (i >> 2) + (i & 1)
        row = (i >> 1) & 1
        qr = np.where(row == 1, qrow[1][:, None], qrow[0][:, None])
        acc_s[(key >= k_len) | (causal & (key > qr))] = masked
    extreme = np.fmax if positive else np.fmin
    with np.errstate(invalid="ignore", over="ignore"):
        sel = (i >> 1) & 1
        neg_base = [None, None]
        for r in range(2):
            mx = (acc_s[:, sel == r].max if positive else acc_s[:, sel == r].min)(axis=1)
            mx = extreme(mx, quad_shfl_xor(mx, 1))
            mx = extreme(mx, quad_shfl_xor(mx, 2))
            new_m = np.fmax(m[r], mx * scale_log2)
            rescale[r] = np.where(m[r] == NEG_INF, 0.0, np.exp2(m[r] - new_m))
            m[r] = new_m
            neg_base[r] = np.where(new_m == NEG_INF, 0.0, -new_m)
        acc_s[...] = np.exp2(acc_s * scale_log2 + np.where(sel == 1, neg_base[1][:, None], neg_base[0][:, None]))
        for r in range(2):
            total = acc_s[:, sel == r].sum(axis=1)
            total = total + quad_shfl_xor(total, 1)
            total = total + quad_shfl_xor(total, 2)
            l_[r] = l_[r] * rescale[r] + total


def _rescale_o(acc_o, rescale) -> None:
    """.cu rescale_o<D>: "acc_o[i] *= rescale[(i >> 1) & 1]"."""
    i = np.arange(acc_o.shape[1])
    acc_o *= np.where(((i >> 1) & 1) == 1, rescale[1][:, None], rescale[0][:, None])


def _pack_p(pa, acc_s, dtype: str) -> None:
    """.cu pack_p<T>: "pa[c][x] = pack2<T>(acc_s[8 * c + 2 * x], acc_s[8 * c + 2 * x + 1])" (in place)."""
    for c in range(pa.shape[1]):
        for x in range(4):
            pa[:, c, x] = pack2(acc_s[:, 8 * c + 2 * x], acc_s[:, 8 * c + 2 * x + 1], dtype)


def _stcg(partial, at, vals) -> None:
    """__stcg of a float4 by each thread: ``partial`` global memory as float4s [n][4], ``at`` [128] float4 indices,
    ``vals`` [128][4]."""
    if at.min() < 0 or at.max() >= partial.shape[0]:
        raise AssertionError(f"split_partial store at float4 [{at.min()}, {at.max()}] outside the launch's "
                             f"{partial.shape[0]}")
    partial[at] = vals


def _ldcg(partial, at) -> np.ndarray:
    """__ldcg of a float4 by each thread (as _stcg): [128][4]."""
    if at.min() < 0 or at.max() >= partial.shape[0]:
        raise AssertionError(f"split_partial load at float4 [{at.min()}, {at.max()}] outside the launch's "
                             f"{partial.shape[0]}")
    return partial[at].copy()


def _counter_arrive(counter, at: int) -> int:
    """gemm.cuh counter_arrive: "atom.acq_rel.gpu.global.add.u32 %0, [%1], 1": ++counter[at], the value before."""
    if not 0 <= at < counter.shape[0]:
        raise AssertionError(f"split_counter {at} outside the flags' {counter.shape[0]} (workspace.FLAG_BYTES)")
    before = int(counter[at])
    counter[at] += 1
    return before


def _merge_pieces(acc_o, m, l_, counter, partial, tail: int, piece: int, pieces: int, consumers: int, w: int, t,
                  last: list, d: int):
    """.cu merge_pieces<D>(acc_o, m, l, counter, partial, tail, piece, pieces, consumers, w, t, last) for the
    warpgroup's 128 threads (t on axis 0; acc_o [128][D / 2], m and l lists of two [128], changed in place): a
    generator to ``yield from`` whose value is the kernel's: True for the last of the item's pieces to arrive on
    its counter (acc_o, m and l then hold the merged rows), False for the others. ``counter``: split_counter
    (ints, zero before the launch); ``partial``: split_partial as float4s [n][4], f32 values as float64, NaN
    where no piece wrote (a merge that read a slot before its piece arrived gives NaN). ex2_ftz is exp2 (as in
    _softmax_tile), fmaxf np.fmax (the non-NaN operand)."""
    quads = d // 8 + 1  # .cu "QUADS = D / 8 + 1;  // float4s a thread: its O registers, then (m, l)"

    def slot(p):  # .cu "at = (tail * pieces + p) * consumers + w; return (float4*)partial + at * QUADS * 128 + t"
        at = (tail * pieces + p) * consumers + w
        return at * quads * 128 + t

    mine = slot(piece)
    for i in range(0, d // 2, 4):  # .cu "__stcg(mine + (i / 4) * 128, make_float4(acc_o[i], .., acc_o[i + 3]))"
        _stcg(partial, mine + (i // 4) * 128, acc_o[:, i:i + 4])
    # .cu "__stcg(mine + (D / 8) * 128, make_float4(m[0], m[1], l[0], l[1]))"
    _stcg(partial, mine + (d // 8) * 128, np.stack([m[0], m[1], l_[0], l_[1]], axis=1))
    yield from NamedBarrier(1 + w, 128).sync(128)  # .cu "named_barrier_sync(1 + w, 128);  // the warpgroup's slot ..."
    # .cu "if (t == 0) { int* c = counter + tail * consumers + w; last[w] = counter_arrive(c) == pieces - 1;
    # if (last[w]) *c = 0; }" (thread 0's, for the warpgroup)
    c = tail * consumers + w
    last[w] = _counter_arrive(counter, c) == pieces - 1
    if last[w]:
        counter[c] = 0
    yield from NamedBarrier(1 + w, 128).sync(128)  # .cu "named_barrier_sync(1 + w, 128);  // thread 0 saw ..."
    if not last[w]:  # .cu "if (!last[w]) return false;"
        return False
    for p in range(pieces):  # .cu "for (int p = 0; p < pieces; ++p) { if (p == piece) continue; ..."
        if p == piece:
            continue
        theirs = slot(p)
        ml = _ldcg(partial, theirs + (d // 8) * 128)  # .cu "ml = __ldcg(theirs + (D / 8) * 128)"
        their_m, their_l = [ml[:, 0], ml[:, 1]], [ml[:, 2], ml[:, 3]]  # .cu "their_m[2] = {ml.x, ml.y}, their_l = {ml.z, ml.w}"
        mine_f, their_f = [None, None], [None, None]
        with np.errstate(invalid="ignore"):
            for r in range(2):
                # .cu "new_m = fmaxf(m[r], their_m[r]); mine_f[r] = m[r] == NEG_INF ? 0.0f : ex2_ftz(m[r] - new_m);
                # their_f[r] = their_m[r] == NEG_INF ? 0.0f : ex2_ftz(their_m[r] - new_m); m[r] = new_m;
                # l[r] = l[r] * mine_f[r] + their_l[r] * their_f[r]"
                new_m = np.fmax(m[r], their_m[r])
                mine_f[r] = np.where(m[r] == NEG_INF, 0.0, np.exp2(m[r] - new_m))
                their_f[r] = np.where(their_m[r] == NEG_INF, 0.0, np.exp2(their_m[r] - new_m))
                m[r] = new_m
                l_[r] = l_[r] * mine_f[r] + their_l[r] * their_f[r]
        for i in range(0, d // 2, 4):
            # .cu "o = __ldcg(theirs + (i / 4) * 128);  // registers i, i + 1: row 0; i + 2, i + 3: row 1";
            # "acc_o[i] = acc_o[i] * mine_f[0] + o.x * their_f[0]; .. acc_o[i + 3] = acc_o[i + 3] * mine_f[1] +
            # o.w * their_f[1]"
            o = _ldcg(partial, theirs + (i // 4) * 128)
            for x in range(4):
                r = x >> 1
                acc_o[:, i + x] = acc_o[:, i + x] * mine_f[r] + o[:, x] * their_f[r]
    return True


def _wgmma_block(qt_bits, kt_bits, vt_bits, out, lse, writes, units, group: int, d: int,
                 stages: int, causal: bool, scale_log2: float, dtype: str, tma_policy: str, order,
                 smem_base: int, overlap: bool, pingpong: bool, consumers: int, keys: int, *, persistent: bool = False,
                 o_buffer: bool = False, pieces: int = 1, workspace=None, finishes: list | None = None,
                 ring_once: bool = True) -> None:
    """One block of the kernel attention_wgmma<T, D, STAGES, CAUSAL> built with ASYNCCOPY_ATTN_OVERLAP =
    ``overlap``, ASYNCCOPY_ATTN_PINGPONG = ``pingpong``, ``consumers`` consumer warpgroups (ASYNCCOPY_ATTN_CONSUMERS),
    ``keys`` keys a K/V tile (ASYNCCOPY_ATTN_BN), ASYNCCOPY_ATTN_PERSISTENT = ``persistent`` and (with it)
    ASYNCCOPY_ATTN_O_BUFFER = ``o_buffer``, ASYNCCOPY_ATTN_RING = ``ring_once``. ``units``: the
    (qt, h, b, tail, piece) of the units the block takes, in order (tail -1, piece 0: a whole item; else piece
    ``piece`` of the key split's item ``tail``, as split_blocks gives them): one (its blockIdx's), or (persistent) its
    own and those it took from the unit counter after it. qt_bits [batch][heads][q_len][D] etc.: the tensors the maps
    describe; out, writes [batch][heads][q_len][D]; lse flat. ``pieces``: the key split's pieces an item. A piece's
    consumers in the default build stop at merge_pieces and append their rest, (tail, piece, w, generator, tma), to
    ``finishes``, for the caller to run in the order the pieces finish; a persistent block's merge there and then
    (the blocks run one after another, so the last of them to take one of an item's pieces merges it);
    ``workspace``: (split_counter, split_partial) as _merge_pieces takes them."""
    if len(units) < 1 or not persistent and len(units) != 1:
        raise ValueError("a block of the default build takes one unit, a persistent one one or more")
    heads, q_len, k_len = qt_bits.shape[1], qt_bits.shape[2], kt_bits.shape[2]  # the kernel's arguments
    panels = d // WG_PANEL  # .cu "PANELS = D / PANEL; Q_ELEMS = BM * D; KV_ELEMS = BN * D; Q_BYTES = 2u * Q_ELEMS ..."
    bm = 64 * consumers  # .cu "BM = 64 * CONSUMERS"
    bn = keys  # .cu "BN = BN_OF<D, CAUSAL>"
    q_elems, kv_elems = bm * d, bn * d
    q_bytes, kv_bytes = 2 * q_elems, 2 * kv_elems
    assert q_bytes % 1024 == 0 and kv_bytes % 1024 == 0
    o_buffer = persistent and o_buffer  # .cu "O_BUFFER = PERSISTENT && ASYNCCOPY_ATTN_O_BUFFER != 0"
    hold_last = persistent and not o_buffer  # .cu "HOLD_LAST = PERSISTENT && !O_BUFFER"
    if hold_last:  # .cu "static_assert(!HOLD_LAST || Q_ELEMS <= 2 * KV_ELEMS, ...)": O fits a K / V stage
        assert q_elems <= 2 * kv_elems
    o_in_k = hold_last and q_elems <= kv_elems  # .cu "O_IN_K = HOLD_LAST && Q_ELEMS <= KV_ELEMS"

    knobs = ((CONSUMERS_KNOB, consumers), (KEYS_KNOB, keys)) + (
        ((PERSISTENT_KNOB, 1), (O_BUFFER_KNOB, 1)) if o_buffer else ())
    smem_bytes = AttentionConfig("wgmma", dtype, d, stages, causal, defines=knobs).smem_bytes
    if smem_base + smem_bytes > 1 << 18:  # make_desc keeps "addr & 0x3FFFF": a descriptor would wrap
        raise ValueError(f"{smem_bytes} bytes of shared memory from {smem_base}: past the 256 KiB a wgmma descriptor "
                         "addresses (an H200 block has 227 KiB; the launch refuses it)")
    sm = Shared(smem_base, smem_bytes)
    smem = smem_base + (-smem_base & 1023)  # .cu "smem = (unsigned short*)(base + (-smem_addr(base) & 1023u))"
    q_s = smem  # .cu "q_s = smem" (unsigned short*: the element offsets below are doubled into byte addresses)
    # .cu "mbarrier_init(&full_q, 1); empty_q: 4 * CONSUMERS; full_k[s], full_v[s]: 1; empty_k[s], empty_v[s]: 4 *
    # CONSUMERS"
    full_q = MBarrier(1, "full_q")
    empty_q = MBarrier(4 * consumers, "empty_q")
    full_k = [MBarrier(1, f"full_k[{s}]") for s in range(stages)]
    full_v = [MBarrier(1, f"full_v[{s}]") for s in range(stages)]
    empty_k = [MBarrier(4 * consumers, f"empty_k[{s}]") for s in range(stages)]
    empty_v = [MBarrier(4 * consumers, f"empty_v[{s}]") for s in range(stages)]
    turn_bar = [NamedBarrier(TURN_BARRIER + w, 256) for w in range(consumers)]
    all_consumers = NamedBarrier(ALL_CONSUMERS_BARRIER, 128 * consumers)
    tma = Tma(sm, tma_policy, dtype)
    last_piece = [0] * consumers  # .cu "__shared__ int last_piece[CONSUMERS]" (merge_pieces' last)

    def unit_tiles(qt, tail, piece):  # .cu decode: "u.kv_tiles = (k_len + BN - 1) / BN ... min(u.kv_tiles, last / BN + 1)"
        kv_tiles, kv_first = (k_len + bn - 1) // bn, 0
        if causal:
            last = min(qt * bm + bm, q_len) - 1
            kv_tiles = min(kv_tiles, last // bn + 1)
        elif tail >= 0:  # .cu "each = all / pieces; longer = all - each * pieces; kv_first = piece * each + min(piece,
            # longer); kv_tiles = each + (piece < longer ? 1u : 0u)"
            each = kv_tiles // pieces
            longer = kv_tiles - each * pieces
            kv_first, kv_tiles = piece * each + min(piece, longer), each + (1 if piece < longer else 0)
        return kv_tiles, kv_first

    def producer():  # .cu "if (warpgroup == 0) { ... if (threadIdx.x != 0) return; ...": thread 0 of warpgroup 0
        j0 = 0  # .cu "j0": the block's key tiles before this unit (the ring runs on across units)
        for n, (qt, h, b, tail, piece) in enumerate(units):
            if n > 0:  # .cu "mbarrier_wait_parity(&empty_q, (n - 1) & 1u, ...)": the consumers are done with Q
                yield Wait(empty_q, (n - 1) & 1)
            full_q.arrive_expect_tx(q_bytes)
            yield None
            for p in range(panels):
                tma.load(q_s + 2 * (p * bm * WG_PANEL), qt_bits, bm, (WG_PANEL * p, qt * bm, h, b), full_q)
            hk = h // group
            kv_tiles, kv_first = unit_tiles(qt, tail, piece)
            for j in range(kv_tiles):
                s = (j0 + j) % stages
                free_phase = (((j0 + j) // stages) & 1) ^ 1
                k_s = smem + 2 * (q_elems + s * 2 * kv_elems)
                v_s = k_s + 2 * kv_elems
                yield Wait(empty_k[s], free_phase)
                full_k[s].arrive_expect_tx(kv_bytes)
                yield None
                for p in range(panels):  # .cu "at[4] = {PANEL * p, (u.kv_first + j) * BN, hk, u.b}"
                    tma.load(k_s + 2 * (p * bn * WG_PANEL), kt_bits, bn, (WG_PANEL * p, (kv_first + j) * bn, hk, b),
                             full_k[s])
                yield Wait(empty_v[s], free_phase)
                full_v[s].arrive_expect_tx(kv_bytes)
                yield None
                for p in range(panels):
                    tma.load(v_s + 2 * (p * bn * WG_PANEL), vt_bits, bn, (WG_PANEL * p, (kv_first + j) * bn, hk, b),
                             full_v[s])
            j0 += kv_tiles
        if persistent:  # .cu "unit >= units": after the last unit's Q is free, unit_slot = -1 and a plain arrive
            yield Wait(empty_q, (len(units) - 1) & 1)
            full_q.arrive()

    def consumer(w: int):  # .cu "const int w = warpgroup - 1; const int t = threadIdx.x % 128": 128 threads on axis 0
        wg = Warpgroup(sm, dtype)
        t = np.arange(128)
        lane = t % 32
        r0 = 64 * w + 16 * (t // 32) + lane // 4
        q_w = q_s + 2 * (w * 64 * WG_PANEL)  # .cu "q_w = q_s + w * 64 * PANEL"

        def release(bar: MBarrier):  # .cu "release(bar): if (lane == 0) mbarrier_arrive(bar)": one arrival per warp
            for _ in range(int(np.sum(lane == 0))):
                bar.arrive()
                yield None

        ring_once_here = pingpong and overlap and ring_once  # .cu RING_ONCE

        def turn_ring(opening: bool):
            # .cu "turn_ring(open)": the last warpgroup hands warpgroup 0 its first turn (RING_ONCE: as the block
            # starts, else at each unit's start), and (RING_ONCE) warpgroup 0 takes the turn the last one passes after
            # its very last issue as the block ends
            if opening and w == consumers - 1:
                turn_bar[0].arrive(128)
                yield None
            if not opening and w == 0:
                yield from turn_bar[0].sync(128)

        if ring_once_here:
            yield from turn_ring(True)
        j0 = 0
        for n in range(len(units) + (1 if persistent else 0)):
            yield Wait(full_q, n & 1)  # .cu "mbarrier_wait_parity(&full_q, n & 1u, ...)"
            if n == len(units):  # .cu "if (slot < 0) break;": the producer's -1
                break
            qt, h, b, tail, piece = units[n]
            q0 = qt * bm
            kv_tiles, kv_first = unit_tiles(qt, tail, piece)
            qrow = [q0 + r0, q0 + r0 + 8]
            acc_s = np.zeros((128, bn // 2))
            acc_o = np.zeros((128, d // 2))
            m = [np.full(128, NEG_INF), np.full(128, NEG_INF)]
            l_ = [np.zeros(128), np.zeros(128)]
            pa = np.zeros((128, bn // 16, 4), dtype=np.uint32)
            rescale = [None, None]

            def stage(j, j0=j0):  # .cu "stage(j): stage_of<STAGES>(j0 + j); phase(j): phase_of<STAGES>(j0 + j)"
                return (j0 + j) % stages

            def phase(j, j0=j0):
                return ((j0 + j) // stages) & 1

            def k_tile(j):  # .cu "k_tile(j): smem + Q_ELEMS + stage(j) * 2 * KV_ELEMS; v_tile(j): k_tile(j) + KV_ELEMS"
                return smem + 2 * (q_elems + stage(j) * 2 * kv_elems)

            def v_tile(j):
                return k_tile(j) + 2 * kv_elems

            def k_done(j, kv_tiles=kv_tiles):
                # .cu "if (!HOLD_LAST || j != kv_tiles - 1) release(&empty_k[stage(j)]); if (PERSISTENT && j ==
                # kv_tiles - 1) release(&empty_q);": the unit's last stage stages O (HOLD_LAST)
                if not hold_last or j != kv_tiles - 1:
                    yield from release(empty_k[stage(j)])
                if persistent and j == kv_tiles - 1:
                    yield from release(empty_q)

            def softmax(j, kv_first=kv_first, q0=q0, qrow=qrow, acc_s=acc_s, m=m, l_=l_, rescale=rescale):
                # .cu "softmax_tile<..>(acc_s, m, l, rescale, scale_log2, kv_first + j, ...)": j the unit's own count
                _softmax_tile(acc_s, m, l_, rescale, scale_log2, kv_first + j, lane, k_len, q0 + 64 * w, qrow, causal)

            if not overlap:  # .cu "if constexpr (!OVERLAP)": K, S, softmax, V, P V in turn
                for j in range(kv_tiles):
                    s = stage(j)
                    yield Wait(full_k[s], phase(j))
                    _issue_qk(wg, acc_s, q_w, k_tile(j), d, bm)
                    wg.wait(0)
                    yield from k_done(j)
                    softmax(j)
                    _rescale_o(acc_o, rescale)
                    _pack_p(pa, acc_s, dtype)
                    yield Wait(full_v[s], phase(j))
                    _issue_pv(wg, acc_o, pa, v_tile(j), d)
                    wg.wait(0)
                    if not hold_last or o_in_k or j != kv_tiles - 1:
                        yield from release(empty_v[s])
            else:
                # .cu OVERLAP: Q K^T of tile j issued with P V of tile j - 1 (O rescaled between the two issues), tile
                # j's softmax under that P V; with PINGPONG each issue waits for the warpgroup's turn (bar.sync
                # TURN_BARRIER + w, 256) and passes it (bar.arrive TURN_BARRIER + (w + 1) % CONSUMERS, 256), the ring
                # running on across units (RING_ONCE: turn_ring opens and closes it once a block) or opened at each
                # unit's start with the last warpgroup keeping the unit's last turn
                def my_turn():
                    if pingpong:
                        yield from turn_bar[w].sync(128)

                turns_left = [kv_tiles + 1]

                def pass_turn(turns_left=turns_left):  # .cu "if (RING_ONCE || w != CONSUMERS - 1 || --turns_left > 0)
                    if pingpong:  # named_barrier_arrive(TURN_BARRIER + (w + 1) % CONSUMERS, 256)"
                        turns_left[0] -= 1
                        if ring_once_here or w != consumers - 1 or turns_left[0] > 0:
                            turn_bar[(w + 1) % consumers].arrive(128)
                            yield None

                if pingpong and not ring_once_here:
                    yield from turn_ring(True)

                yield Wait(full_k[stage(0)], phase(0))
                yield from my_turn()
                _issue_qk(wg, acc_s, q_w, k_tile(0), d, bm)
                yield from pass_turn()
                wg.wait(0)
                yield from k_done(0)
                softmax(0)
                _pack_p(pa, acc_s, dtype)  # .cu "O is still zero: its rescale (0) is harmless"
                for j in range(1, kv_tiles):
                    s, sp = stage(j), stage(j - 1)
                    yield Wait(full_k[s], phase(j))
                    yield Wait(full_v[sp], phase(j - 1))
                    yield from my_turn()
                    _issue_qk(wg, acc_s, q_w, k_tile(j), d, bm)
                    _rescale_o(acc_o, rescale)  # .cu "tile j - 1's factor, before its P V adds in"
                    _issue_pv(wg, acc_o, pa, v_tile(j - 1), d)
                    yield from pass_turn()
                    wg.wait(1)  # .cu "wgmma_wait<1>();  // Q K^T of tile j is done; P V of tile j - 1 may still run"
                    yield from k_done(j)
                    softmax(j)
                    wg.wait(0)
                    yield from release(empty_v[sp])
                    _pack_p(pa, acc_s, dtype)
                last, sl = kv_tiles - 1, stage(kv_tiles - 1)
                yield Wait(full_v[sl], phase(last))
                yield from my_turn()
                _rescale_o(acc_o, rescale)
                _issue_pv(wg, acc_o, pa, v_tile(last), d)
                yield from pass_turn()
                wg.wait(0)
                if not hold_last or o_in_k:
                    yield from release(empty_v[sl])

            # .cu "o_s = q_s; if constexpr (O_BUFFER) o_s = smem + Q_ELEMS + STAGES * 2 * KV_ELEMS; if constexpr
            # (O_IN_K) { mbarrier_wait_parity(&empty_q, n & 1u, ...); o_s = k_tile(kv_tiles - 1); } else if constexpr
            # (HOLD_LAST) { named_barrier_sync(ALL_CONSUMERS_BARRIER, 128 * CONSUMERS); o_s = k_tile(kv_tiles - 1); }":
            # every warp's last Q K^T has read the K tile O goes to, or every warpgroup's last products the stage
            sl = stage(kv_tiles - 1)
            o_s = q_s
            if o_buffer:
                o_s = smem + 2 * (q_elems + stages * 2 * kv_elems)
            if o_in_k:
                yield Wait(empty_q, n & 1)
                o_s = k_tile(kv_tiles - 1)
            elif hold_last:
                yield from all_consumers.sync(128)
                o_s = k_tile(kv_tiles - 1)
            j0 += kv_tiles

            def epilogue(o_s=o_s, q0=q0, qrow=qrow, h=h, b=b, m=m, l_=l_, acc_o=acc_o):
                # .cu "if (lse != nullptr && lane % 4 == 0) ... if (qrow[r] < q_len) out_lse[qrow[r]] = (m[r] +
                # __log2f(l[r])) * ln 2"
                for r in range(2):
                    ok = (lane % 4 == 0) & (qrow[r] < q_len)
                    with np.errstate(divide="ignore"):
                        # .cu "out_lse = lse + (u.b * heads + u.h) * q_len"
                        lse[(b * heads + h) * q_len + qrow[r][ok]] = (m[r][ok] + np.log2(l_[r][ok])) * 0.69314718055994530942
                # .cu O_BUFFER: "if (t == 0) bulk_wait_group_read<0>(); named_barrier_sync(1 + w, 128)": the stores of
                # the warpgroup's previous unit have read the buffer (they read it at issue here, tma.store below)
                if o_buffer:
                    yield from NamedBarrier(1 + w, 128).sync(128)
                # O / l into the warpgroup's rows of the staging buffer: .cu "row = 16 * (t / 32) + lane / 4 + 8 * r;
                # col = 8 * (i >> 2) + 2 * (lane % 4); p = col / PANEL, byte = 2 * (col % PANEL); panel = o_s + p * BM *
                # PANEL + w * 64 * PANEL; at = panel + row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15))"
                inv = [np.where(l_[r] > 0, 1.0 / np.where(l_[r] > 0, l_[r], 1.0), 0.0) for r in range(2)]
                for i in range(0, d // 2, 2):
                    r = (i >> 1) & 1
                    row = 16 * (t // 32) + lane // 4 + 8 * r
                    col = 8 * (i >> 2) + 2 * (lane % 4)
                    p, byte = col // WG_PANEL, 2 * (col % WG_PANEL)
                    panel = o_s + 2 * (p * bm * WG_PANEL + w * 64 * WG_PANEL)
                    at = panel + row * 128 + ((((byte >> 4) ^ (row & 7)) << 4) | (byte & 15))
                    sm.write32(at, pack2(acc_o[:, i] * inv[r], acc_o[:, i + 1] * inv[r], dtype))
                # .cu "fence_proxy_async_shared(); named_barrier_sync(1 + w, 128)": the warpgroup's own barrier
                yield from NamedBarrier(1 + w, 128).sync(128)
                # .cu "if (t == 0) tensor_store<4>(&map_o, {PANEL * p, q0 + 64 * w, u.h, u.b}, o_s + p * BM * PANEL + w *
                # 64 * PANEL); bulk_wait_group_read<0>()": the stores read O before the stage goes back
                for p in range(panels):
                    tma.store(o_s + 2 * (p * bm * WG_PANEL + w * 64 * WG_PANEL), out, writes, 64,
                              (WG_PANEL * p, q0 + 64 * w, h, b))

            # .cu "if (!CAUSAL && MERGE && pieces > 1 && unit >= whole) { tail = (unit - whole) / pieces; piece = ...;
            # store = merge_pieces<D>(acc_o, m, l, split_counter, split_partial, tail, piece, pieces, CONSUMERS, w, t,
            # last_piece); }"
            if not causal and tail >= 0 and persistent:
                if (yield from _merge_pieces(acc_o, m, l_, *workspace, tail, piece, pieces, consumers, w, t, last_piece,
                                             d)):
                    yield from epilogue()
                if hold_last:  # .cu "stage_done()" whether or not this piece stored (V already, O_IN_K)
                    yield from release(empty_k[sl])
                    if not o_in_k:
                        yield from release(empty_v[sl])
                continue
            if not causal and tail >= 0:
                # nothing orders the pieces of an item, so the default build's warpgroup stops here, before it writes its
                # slot, and the caller resumes it in the order of finishing
                def finish(acc_o=acc_o, m=m, l_=l_, epilogue=epilogue, tail=tail, piece=piece):
                    if (yield from _merge_pieces(acc_o, m, l_, *workspace, tail, piece, pieces, consumers, w, t,
                                                 last_piece, d)):
                        yield from epilogue()

                finishes.append((tail, piece, w, finish(), tma))
                if ring_once_here:  # (before the merge here, after it in the kernel: the two are independent)
                    yield from turn_ring(False)
                return
            yield from epilogue()
            if hold_last:  # .cu "stage_done(): release(&empty_k[sl]); if (!O_IN_K) release(&empty_v[sl]);" once the
                # stores read O
                yield from release(empty_k[sl])
                if not o_in_k:
                    yield from release(empty_v[sl])
        if ring_once_here:
            yield from turn_ring(False)

    agents = {"producer": producer(), **{w: consumer(w) for w in range(consumers)}}
    run_agents(agents, tuple(order) + tuple(n for n in agents if n not in order), tma)
    if tma.queue:
        raise AssertionError(f"{len(tma.queue)} TMA loads never waited for")
    for bar in (*turn_bar, all_consumers):
        if bar.arrived:
            raise AssertionError(f"named barrier {bar.ident} left with {bar.arrived} arrivals no sync met")


def _finishing(finishes: list, finish_order) -> list:
    """The key-split pieces' parked warpgroups (emulate_wgmma's ``finishes``) in the order they finish (see
    emulate_wgmma's ``finish_order``)."""
    if finish_order is None:
        return finishes
    if isinstance(finish_order, (int, np.integer)):
        return [finishes[i] for i in np.random.default_rng(int(finish_order)).permutation(len(finishes))]
    keys = [f[:3] for f in finishes]
    chosen = [tuple(x) for x in finish_order(list(keys))]
    if sorted(chosen) != sorted(keys):
        raise ValueError("finish_order must return each (tail, piece, warpgroup) it is given, once")
    return [finishes[keys.index(x)] for x in chosen]


def emulate_wgmma(q, k, v, causal: bool = False, scale: float | None = None, stages: int = 2, *,
                  dtype: str = "float16", tma: str = "eager", order=("producer", 0, 1), smem_base: int = 96,
                  overlap: bool = False, pingpong: bool = False, consumers: int | None = None,
                  keys: int | None = None, split: tuple[int, int] = (0, 1), finish_order=None,
                  persistent: int | None = None, takers: int | None = None, o_buffer: bool = False,
                  ring_once: bool | None = None):
    """attention_wgmma<T, D, STAGES, CAUSAL> on q [b, h, q_len, D], k, v [b, h_kv, k_len, D]: (out, lse).
    ``order``: the scheduling priority of the producer and the consumer warpgroups 0, 1; ``smem_base``:
    the dynamic shared memory's address (the static mbarriers come first; any 16-byte multiple);
    ``overlap``, ``pingpong``, ``consumers``: the kernel's compile-time knobs ASYNCCOPY_ATTN_OVERLAP / _PINGPONG /
    _CONSUMERS / _BN (None: the defaults for the head dim and mask; warpgroups left out of ``order`` come
    last). ``split``: the key split, (tail, pieces) as asynccopy.sdpa.launch's ``split`` (clamped as _plan
    clamps it; (0, 1): none; without the causal mask only): the grid's last ``tail`` items cut into ``pieces``
    ranges of their key tiles, one block each, in a 1-D grid run in linear order; each piece's consumer
    warpgroups stop at merge_pieces and finish afterwards in ``finish_order``: None, the blocks' order (each
    item's last piece merges); an int, a seed of a random order of all the pieces' warpgroups (an item's
    warpgroups may then have different last pieces); or a function of the list of (tail, piece, warpgroup) in
    the blocks' order that returns them in the order they finish. The counters must all be down at the end
    (the next launch on the stream finds them so). ``persistent``: the build with ASYNCCOPY_ATTN_PERSISTENT, on a grid
    of that many blocks (attention_launch's ``blocks``; at most one a unit): block g takes unit g, then units from
    the counter, in increasing order, as ``takers`` hands them out (None: in turn, g = 0, 1, ..; an int: a seed of
    a random block for each, so that some blocks take many and some none). The blocks run one after another (they
    share nothing but the outputs and the key split's workspace); with ``split`` their units are the split grid's, and
    a piece merges as it finishes (``finish_order`` is the default build's). ``o_buffer``: the persistent build with
    ASYNCCOPY_ATTN_O_BUFFER (O staged in a buffer of its own after the stages, every stage handed back as it is read).
    ``ring_once``: ASYNCCOPY_ATTN_RING (with ``pingpong``: the turn ring run on across a block's units; None: the
    kernel's default, without the causal mask only)."""
    if pingpong and not overlap:
        raise ValueError("the ping-pong alternates the issue of both products: build with OVERLAP too")
    qb, kb, vb = (global_bits(x, dtype) for x in (q, k, v))
    batch, heads, q_len, d = qb.shape
    group = heads // kb.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    scale_log2 = float(np.float32(scale * LOG2E))  # asynccopy.attention_launch passes float32(scale x log2 e)
    if scale_log2 == 0.0:  # .cu "if (scale_log2 == 0.0f) scale_log2 = __int_as_float(0x00800000)"
        scale_log2 = float(np.finfo(np.float32).tiny)
    out = np.full(qb.shape, np.nan)
    lse = np.full(batch * heads * q_len, np.nan)
    writes = np.zeros(qb.shape, dtype=np.int64)
    consumers = consumers or default_consumers(d)
    keys = keys or default_keys(d, causal)
    ring_once = not causal if ring_once is None else bool(ring_once)
    q_tiles = -(-q_len // (64 * consumers))
    k_len = kb.shape[2]
    # attention_launch._plan: "items = -(-p.q_len // bm) * p.heads * p.batch"; "tail, pieces = min(tail, items,
    # workspace.SPLIT_FLAGS // cfg.consumers), min(pieces, -(-p.k_len // bn))"; "if pieces > 1 and tail > 0:
    # grid = (items - tail + tail * pieces, 1, 1); slot = 16 * 128 * (p.head_dim // 8 + 1); partial_bytes = tail *
    # pieces * cfg.consumers * slot" (launch: workspace.stream_k, the flags zeroed, the partials what earlier launches
    # left: NaN here); "else: grid, pieces = (-(-p.q_len // bm), p.heads, p.batch), 1"; the kernel's whole_items =
    # items - tail
    items = q_tiles * heads * batch
    tail, pieces = split
    if tail < 0 or pieces < 1:
        raise ValueError(f"split (tail, pieces) must have tail >= 0 and pieces >= 1, got {split}")
    tail, pieces = min(tail, items, SPLIT_FLAGS // consumers), min(pieces, -(-k_len // keys))
    split_grid = pieces > 1 and tail > 0
    if split_grid and causal:  # the kernel reads the split only without the mask (.cu "!CAUSAL && pieces > 1")
        raise ValueError("the key split is for the kernel without the causal mask (key_split gives (0, 1) with it)")
    counter = np.zeros(FLAG_BYTES // 4, dtype=np.int64)
    partial = np.full((max(1, tail * pieces * consumers * 128 * (d // 8 + 1)), 4), np.nan)
    # the kernel's units in index order: .cu decode (causal: causal_item's order; a split grid's whole items, then each
    # cut item's pieces)
    if split_grid:
        ordered = list(split_blocks(items - tail + tail * pieces, items - tail, pieces, q_tiles, heads))
    else:
        ordered = [(qt, h, b, -1, 0) for qt, h, b in grid_blocks((q_tiles, heads, batch), causal, 4 * k_len * d // group)]
    if persistent is not None:
        blocks = min(len(ordered), persistent)  # attention_launch: "grid = (min(units, blocks or sm_count), 1, 1)"
        taken = [[g] for g in range(blocks)]  # .cu "unit = own" first, then "gridDim.x + counter_arrive(unit_counter)"
        rng = None if takers is None else np.random.default_rng(takers)
        for unit in range(blocks, len(ordered)):
            taken[(unit - blocks) % blocks if rng is None else int(rng.integers(blocks))].append(unit)
        for units in taken:
            _wgmma_block(qb, kb, vb, out, lse, writes, [ordered[u] for u in units], group, d, stages, causal,
                         scale_log2, dtype, tma, order, smem_base, overlap, pingpong, consumers, keys, persistent=True,
                         o_buffer=o_buffer, pieces=pieces if split_grid else 1, workspace=(counter, partial),
                         ring_once=ring_once)
    else:
        finishes: list = []
        for unit in ordered:
            _wgmma_block(qb, kb, vb, out, lse, writes, [unit], group, d, stages, causal, scale_log2, dtype, tma,
                         order, smem_base, overlap, pingpong, consumers, keys, pieces=pieces if split_grid else 1,
                         workspace=(counter, partial), finishes=finishes, ring_once=ring_once)
        for _, _, w, gen, block_tma in _finishing(finishes, finish_order):
            run_agents({w: gen}, (w,), block_tma)
    if split_grid:
        if np.any(counter):
            raise AssertionError(f"split counters left up at {np.flatnonzero(counter).tolist()}: the next launch on the "
                                 "stream would take the wrong piece for the last")
    if np.any(writes > 1):
        raise AssertionError(f"{int((writes > 1).sum())} output elements written more than once")
    return out, lse.reshape(batch, heads, q_len)
