// attention_mma.cu — attention forward on Ampere and later (sm_80+), the FlashAttention-2 design: Q held in
// registers, K and V tiles through a multistage cp.async (LDGSTS) pipeline into XOR-swizzled shared memory,
// ldmatrix, mma.sync m16n8k16 for both products, online softmax in registers.
//
// What: out[b, h, i, :] = softmax_j(scale * q[b, h, i, :] . k[b, h / group, j, :]) v[b, h / group, j, :]
// for bf16 or f16 q, k, v (head dim D = 64 or 128), the products accumulated and the softmax computed in
// f32, out rounded once at the store; with CAUSAL = 1 query i sees keys j <= i only (PyTorch SDPA's
// is_causal: a lower-triangular mask aligned top-left, tril(ones(q_len, k_len))); group = query heads per
// key/value head (grouped-query attention). With lse != nullptr, lse[b, h, i] = ln sum_j exp(scale s_ij)
// (f32, contiguous [batch][heads][q_len]), what a backward pass needs.
// How: one block of 256 threads (8 warps; 128 threads, 4 warps, with MW = 2 or BM = 64) per BM = 128 queries
// (64 with ASYNCCOPY_ATTN_MMA_BM=64: the launch's causal head dim 128 build, Q in shared memory of its own, two
// blocks an SM) of one (batch, head): grid (query tiles, heads, batch), causal ones the longest first
// (asynccopy/attention.cuh).
// Each warp owns 16 query rows (MW = 1: one m16 of both products; MW = 2: 32 rows, two m16 pieces; the
// launch passes MW: asynccopy.attention_kernels builds head dim 64 with 2, 128 with 1). Why, at 16 rows a
// warp, 128 x 8 warps and not 64 x 4: a thread's registers are the same either way (they depend on the 16 rows a warp owns), the registers allow 8 warps an SM
// either way at D = 128, and a K/V tile in shared memory then serves 128 queries instead of 64: half the
// global and L2 traffic per product.
//   Q: its [BM][D] tile is copied once (cp.async, zero-filled past q_len) into the last stage's buffer,
//      which the pipeline fills only after every warp has read Q into registers: per k16 step of D one
//      ldmatrix .x4, the mma A fragment of the warp's 16 rows (D / 16 x 4 registers a thread). With MW = 2
//      (Q_SMEM) the tile goes to shared memory of its own after the stages instead, never overwritten, and
//      scores() reads each piece's A fragment there at every k step.
//   K, V: key tiles of BN = 64 keys walked through STAGES stages of [K tile | V tile] (the protocol of
//      gemm_mma.cu: one commit group per tile, empty past the last; wait_group<STAGES - 2>, one barrier,
//      the refill of the stage read last, compute). Keys past k_len are zero-filled (src-size 0): V's
//      zeros make the masked P x V terms exactly 0, never 0 x garbage.
//   Per tile: S = Q K^T (16 x 64 per warp, f32, 32 registers) by D / 16 x 8 mma, the K fragments by
//      ldmatrix (no .trans) from the row-major K tile; x = S * scale * log2(e); keys >= k_len and
//      (CAUSAL) keys > query to -inf, only in the tiles that need it; the row maximum over the 4 threads
//      of a row (shuffles); the running sums and O rescaled by exp2(old max - new max); P = exp2(x - max)
//      rounded to T in registers and used as the A operand of P V without a trip through shared memory;
//      V fragments by ldmatrix .trans. Causal: key tiles wholly past the block's last query are never
//      loaded, and a warp skips the products of a tile wholly past its own last row.
//   Epilogue: each row's sum over its 4 threads, O / sum rounded to T and stored in pairs (rows past
//   q_len skipped); the log-sum-exp from the same max and sum.
// Shared memory (dynamic, STAGES * 2 * BN * D * 2 bytes: D = 64 16 KiB a stage, D = 128 32 KiB; the
// default 3 stages at D = 64 (48 KiB) and 4 at D = 128 (128 KiB, with ASYNCCOPY_ATTN_MMA_OVERLAP and _XOR, which
// the launch sets there; 3 where 4 do not fit, as in the 99 KiB of CC 8.6 / 8.9; _XOR at D = 64 too):
//   [STAGES][K [BN][D] | V [BN][D]] T, rows of 2D bytes, 16-byte chunks XOR-swizzled per row (swizzled());
//   Q [BM][D] (one stage at BM = 128, half of one at 64) in stage STAGES - 1 until it is in registers (MW = 1),
//   or in its own [BM][D] after the stages (Q_SMEM: STAGES x stage + BM x D x 2 bytes).
// Registers (NVRTC 13.5, no local memory at any default configuration; ASYNCCOPY_ATTN_MMA_OVERLAP at 32 rows a
// warp or at D = 128 without XOR spills 24-144 bytes, docs/design.md 11b): D = 64 162-171 a thread, D = 128
// 223-245: one block of 8 warps an SM either way. __launch_bounds__(256, 2) at D = 64 (128 registers)
// spilled 24-64 bytes of stack, so both head dims ask for one block an SM. The 32-row build (MW = 2, D = 64):
// 211-238 registers, no stack, with its Q K^T k steps rolled (unrolled it loaded every K fragment of a
// tile ahead and spilled 24-112 bytes); two 4-warp blocks an SM; shared memory STAGES x 16 KiB + Q's 16 KiB.
// With XOR (the D = 64 default): 214 (causal 222) under NVRTC 13.5, 213 (221) under 13.0, no stack.
// The causal D = 128 build (BM = 64, Q in shared memory): 188 registers (187 under NVRTC 13.0), no stack, two
// 4-warp blocks an SM; shared memory STAGES x 32 KiB + Q's 16 KiB. The D = 128 default (4 stages, OVERLAP and XOR):
// 245 registers (causal 255) under NVRTC 13.0, 250 (255) under 13.5, no stack (load_rows' bounded copies from one
// base: with an address precomputed a copy, 251-255 and 32 bytes of stack under 13.5).
// Constraints: sm_80+; T bf16 or f16; D 64 or 128 (256 would need 64 registers of Q and 128 of O a
// thread: asynccopy.attention refuses it); STAGES 1..4; q_len, k_len >= 1; q, k, v, out rows (head_dim)
// contiguous, their base addresses and batch / head / seq strides 16-byte multiples (asynccopy.attention
// checks); strides in elements.
// Run: asynccopy.attention(q, k, v, causal=..., kernel="mma").
#include <asynccopy/attention.cuh>
#include <asynccopy/fastmath.cuh>
#include <asynccopy/gemm.cuh>
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/mma.cuh>
#include <asynccopy/pipeline.cuh>

#include <cuda/std/limits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ac = asynccopy;

namespace {

// Compile-time knob (-D), for measuring variants: ASYNCCOPY_ATTN_MMA_BM, the queries a block (128; 64: half the
// warps, so that two blocks an SM run out of phase, one block's softmax beside the other's products, at twice the
// K/V copies a query). The launch follows it (AttentionConfig.tile).
#ifndef ASYNCCOPY_ATTN_MMA_BM
#define ASYNCCOPY_ATTN_MMA_BM 128
#endif
constexpr int BM = ASYNCCOPY_ATTN_MMA_BM;  // queries per block
static_assert(BM == 64 || BM == 128, "64 or 128 queries a block");
constexpr int BN = 64;                     // keys per K / V tile
// Compile-time knob (-D), for measuring variants: ASYNCCOPY_ATTN_MMA_MW, the m16 row pieces a warp owns (1:
// 16 rows, 8 warps a block; 2: 32 rows, 4 warps, FlashAttention-2's shape, each K and V fragment read from
// shared memory once for two pieces: half the ldmatrix traffic a product; head dim 64 only, whose 32 rows
// keep Q, S and O in about 200 registers; at 128 they would need 256 before any fragment).
#ifndef ASYNCCOPY_ATTN_MMA_MW
#define ASYNCCOPY_ATTN_MMA_MW 1
#endif
constexpr int MW = ASYNCCOPY_ATTN_MMA_MW;
static_assert(MW == 1 || MW == 2, "16 or 32 rows a warp");
// With 32 rows a warp Q stays in shared memory of its own (after the stages) and its A fragments are read
// there at every k step (FlashAttention-2's way): in registers they would take 32 of a thread's 255.
// ASYNCCOPY_ATTN_MMA_QSMEM: 1, the same at 16 rows a warp (32 registers fewer: NVRTC 13.0 builds head dim 128
// with 16 rows in 255 registers and 8-40 bytes of stack, and in 210-230 and none this way; docs/design.md,
// Toolchain); 0, Q's fragments in registers (16 rows a warp only); -1 (default): in shared memory at 32 rows.
// The Python side reads it too (AttentionConfig.mma_q_smem: Q's bytes in shared memory).
#ifndef ASYNCCOPY_ATTN_MMA_QSMEM
#define ASYNCCOPY_ATTN_MMA_QSMEM -1
#endif
constexpr bool Q_SMEM = ASYNCCOPY_ATTN_MMA_QSMEM < 0 ? MW == 2 : ASYNCCOPY_ATTN_MMA_QSMEM != 0;
// ASYNCCOPY_ATTN_MMA_XOR: 1, every ldmatrix address of a key tile from two lane offsets by one XOR with its step's
// constant (lane_offsets()), the lane offsets made opaque to the compiler at each tile so that it cannot hoist the
// per-step addresses out of the key loop into registers of their own (the launch sets 1 at both head dims); 0
// (the macro's default), swizzled() at every access.
#ifndef ASYNCCOPY_ATTN_MMA_XOR
#define ASYNCCOPY_ATTN_MMA_XOR 0
#endif
// ASYNCCOPY_ATTN_MMA_OVERLAP: 1 (at 3 or more stages), the next key tile's Q K^T issued beside this tile's softmax
// and P V, in one stretch of code the compiler may interleave (the tensor cores busy under the softmax's FFMA and
// MUFU); its scores take a second set of registers, and the K/V ring keeps tile t + 1 landed while tile t is
// folded (one stage more in use). 0 (default): each tile's Q K^T, softmax and P V in turn.
#ifndef ASYNCCOPY_ATTN_MMA_OVERLAP
#define ASYNCCOPY_ATTN_MMA_OVERLAP 0
#endif
static_assert(Q_SMEM || MW == 1, "32 rows a warp keep Q in shared memory");
constexpr int WARPS = BM / (16 * MW);
constexpr int THREADS = 32 * WARPS;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float NEG_INF = -cuda::std::numeric_limits<float>::infinity();

// The byte offset of byte `col_byte` of row `row` in a tile of rows of ROW_BYTES (a multiple of 128)
// bytes whose 16-byte chunks are XOR-swizzled: chunk c of row r is stored as chunk c ^ (r % 8).
// Why: shared memory serves a warp in 128-byte wavefronts over 32 four-byte banks; eight 16-byte accesses
// share one wavefront only if they fall in the 8 different bank groups (address / 16 % 8). Each 8x8
// matrix of an ldmatrix is eight 16-byte rows at one column chunk of 8 consecutive, 8-aligned tile rows;
// unswizzled, rows of whole 128-byte lines put all 8 in one bank group (8-way conflict). Swizzled, the
// bank group is (c ^ r) % 8: 8 groups. The XOR touches only the low 3 bits of the chunk index, so it
// permutes the chunks inside each 128-byte line: the copies, 8 consecutive threads on the 8 chunks of a
// line, stay conflict-free too.
template <int ROW_BYTES>
__device__ __forceinline__ int swizzled(int row, int col_byte)
{
    static_assert(ROW_BYTES % 128 == 0, "rows of whole 128-byte lines");
    return row * ROW_BYTES + (col_byte ^ ((row & 7) << 4));
}

// Rows row0 .. row0 + ROWS - 1 of one head's [rows_n][D] matrix (row stride ld elements, head_dim
// contiguous) into a [ROWS][D] tile, by 16-byte cp.async (.cg: the data is reused from shared memory, not
// L1); consecutive threads take consecutive chunks. A row past rows_n reads nothing (src-size 0, from the
// head's base: a valid address) and is zero-filled. The caller commits.
template <class T, int D, int ROWS>
__device__ __forceinline__ void load_rows(unsigned char* tile, const T* g, long long ld, int row0, int rows_n)
{
    constexpr int CHUNKS = D * sizeof(T) / 16;  // per row
    constexpr int COPIES = ROWS * CHUNKS / THREADS;
    static_assert(ROWS * CHUNKS % THREADS == 0, "whole copies per thread");
    // A thread's copy j + 1 lies STEP rows below copy j, a multiple of 8: the same swizzle, so one shared offset
    // plus an immediate and one global address plus j * STEP rows. Where every row is inside (all but the last
    // tile) the copies take no bound: a bounded copy costs a 64-bit product and a compare, about 20 instructions.
    constexpr int STEP = THREADS / CHUNKS;
    static_assert(THREADS % CHUNKS == 0 && STEP % 8 == 0, "a thread's copies 8k rows apart");
    const int row = static_cast<int>(threadIdx.x) / CHUNKS, chunk = static_cast<int>(threadIdx.x) % CHUNKS;
    const long long at = static_cast<long long>(row0 + row) * ld + 8 * chunk;  // copy 0's element offset
    unsigned char* dst = tile + swizzled<2 * D>(row, 16 * chunk);
    const long long step = STEP * ld;
    if (row0 + ROWS <= rows_n) {
#pragma unroll
        for (int j = 0; j < COPIES; ++j) ac::cp_async<16, true>(dst + j * STEP * 2 * D, g + (at + j * step));
        return;
    }
    // The same addresses with a bound (one base, not a precomputed address a copy: those would stay live across
    // the key loop); a row past rows_n copies nothing from the head's base (no pointer past the head is formed).
#pragma unroll
    for (int j = 0; j < COPIES; ++j) {
        const bool inside = row0 + row + j * STEP < rows_n;
        ac::cp_async<16, true>(dst + j * STEP * 2 * D, inside ? g + (at + j * step) : g, inside ? 16u : 0u);
    }
}

// Key tile `next`'s K and V into its stage where it exists, then one commit group by every thread, converged,
// copies or none: one group per tile index keeps the waits exact.
template <class T, int D, int STAGES>
__device__ __forceinline__ void refill(unsigned char* smem, const T* kg, long long k_ss, const T* vg, long long v_ss,
                                       int next, int tiles, int k_len)
{
    constexpr int TILE = BN * D * static_cast<int>(sizeof(T));  // one K or V tile's bytes
    if (next < tiles) {
        unsigned char* stage = smem + ac::stage_of<STAGES>(next) * 2 * TILE;
        load_rows<T, D, BN>(stage, kg, k_ss, next * BN, k_len);
        load_rows<T, D, BN>(stage + TILE, vg, v_ss, next * BN, k_len);
    }
    ac::commit_group();
}

// Two floats as one register of two T (lo in the low half: the lower-indexed element of a fragment pair).
template <class T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi)
    {
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const unsigned*>(&v);
    }
};
template <>
struct Pair<__half> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi)
    {
        const __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const unsigned*>(&v);
    }
};

// Fragment indices used below (mma.cuh has the PTX layouts): lane = 4 g + q. A thread holds, of a 16 x 8
// f32 C tile, c0, c1 = (row g, columns 2q, 2q + 1) and c2, c3 = (row g + 8, the same columns); of a 16 x 16
// A tile, a0 = (g, 2q..2q+1), a1 = (g+8, 2q..2q+1), a2 = (g, 2q+8..2q+9), a3 = (g+8, 2q+8..2q+9); of a
// 16 x 8 B tile (k x n), b0 = (k 2q..2q+1, n g), b1 = (k 2q+8..2q+9, n g). For ldmatrix .x4, lane 8i + r
// gives the address of row r of matrix i; register i is matrix i's (row g, elements 2q, 2q+1), or with
// .trans its (rows 2q, 2q+1 of column g).

// The running softmax state of this thread's two rows (g and g + 8 of the warp's 16): the maximum of x
// so far (x = score * scale * log2 e, -inf until a key was seen) and this thread's part of the sum of
// exp2(x - max) (its 2 columns of each n8 tile; the 4 threads of a row add theirs at the end).
struct RowState {
    float max[2];
    float sum[2];
};

// The mma A fragment of Q's row piece `piece` (rows 16 piece ..) at k step kk, from Q's [BM][D] tile at qs:
// matrices (rows +0, d +0), (rows +8, d +0), (rows +0, d +8), (rows +8, d +8) = a0..a3, so lane 8 mat + r
// addresses row 16 piece + 8 (mat & 1) + r, dim 16 kk + 8 (mat >> 1).
template <int D>
__device__ __forceinline__ void load_q_fragment(unsigned (&a)[4], const unsigned char* qs, int piece, int kk)
{
    const int lane = static_cast<int>(threadIdx.x) % 32, mat = lane / 8, r = lane % 8;
    ac::ldmatrix_x4(a, qs + swizzled<2 * D>(16 * piece + 8 * (mat & 1) + r, 2 * (16 * kk + 8 * (mat >> 1))));
}

// The ldmatrix addresses as XORs of two lane offsets (ASYNCCOPY_ATTN_MMA_XOR). An 8x8 matrix's rows start at a
// multiple of 8 (so row & 7 = r, the lane's row in it) and its 16-byte chunk c = 2 step + half (half: which
// matrix of the .x4 pair), so swizzled(8 (row / 8) + r, 16 c) = row part + 16 ((2 step + half) ^ r) = row part +
// (16 (half ^ r) ^ 32 step): the step enters by one XOR below the row part's bits (rows of at least 128 bytes, 32
// step < the row's bytes). K's (key rows, d chunks; half = mat & 1, rows + 8 (mat >> 1)): k_lane ^ 32 kk + 16 p
// rows; V's and Q's (rows + 8 (mat & 1), chunks by step; half = mat >> 1): v_lane ^ 32 step + 16 rows.
template <int ROW_BYTES>
struct LaneOffsets {
    int k = 0, v = 0;
    __device__ __forceinline__ LaneOffsets()
    {
        if constexpr (ASYNCCOPY_ATTN_MMA_XOR) {
            const int lane = static_cast<int>(threadIdx.x) % 32, mat = lane / 8, r = lane % 8;
            k = (8 * (mat >> 1) + r) * ROW_BYTES + 16 * ((mat & 1) ^ r);
            v = (8 * (mat & 1) + r) * ROW_BYTES + 16 * ((mat >> 1) ^ r);
            asm volatile("" : "+r"(k), "+r"(v));  // opaque here: no per-step copy of them is kept across tiles
        }
    }
};

// S = Q K^T of one key tile (the K tile at ks), unscaled, into s.
// With MW = 2 every K fragment serves both row pieces (s[i], qf[i]: rows row_g + 16 i, + 8).
template <class T, int D>
__device__ __forceinline__ void scores(float (&s)[MW][BN / 8][4], const unsigned (&qf)[MW][D / 16][4],
                                       const unsigned char* qs, const unsigned char* ks)
{
    using Tag = typename ac::MmaType<T>::tag;
    constexpr int ROW_BYTES = 2 * D;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int mat = lane / 8, r = lane % 8;

    // S = Q K^T: the B operand (k = head dim d, n = key j) is B(d, j) = K[j][d], so an 8x8 matrix of the
    // row-major K tile at keys j0.., dims d0.. read without .trans (register: key j0 + g, dims d0 + 2q,
    // +1) is b0 of the n8 tile j0 at k step d0 (b0 = (k 2q..2q+1, n g)); with dims d0 + 8.. it is b1. The
    // .x4 matrices: (keys +0, d +0), (keys +0, d +8), (keys +8, d +0), (keys +8, d +8) = b0, b1 of n8
    // tile 2p, b0, b1 of tile 2p + 1: lane 8 mat + r addresses key 16p + 8 (mat >> 1) + r, dim
    // 16 kk + 8 (mat & 1).
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[i][nt][e] = 0.0f;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    // Q from shared memory: one k step at a time (unrolled, the compiler loads every K fragment of the tile
    // ahead and runs out of registers)
    constexpr int QK_UNROLL = Q_SMEM ? 1 : D / 16;
    [[maybe_unused]] const LaneOffsets<ROW_BYTES> lo;
#pragma unroll QK_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
        unsigned qa[MW][4];
#pragma unroll
        for (int i = 0; i < MW; ++i) {
            if constexpr (Q_SMEM && ASYNCCOPY_ATTN_MMA_XOR) {
                ac::ldmatrix_x4(qa[i], qs + ((lo.v ^ (32 * kk)) + 16 * (MW * warp + i) * ROW_BYTES));
            } else if constexpr (Q_SMEM) {
                load_q_fragment<D>(qa[i], qs, MW * warp + i, kk);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) qa[i][e] = qf[i][kk][e];
            }
        }
#pragma unroll
        for (int p = 0; p < BN / 16; ++p) {
            unsigned f[4];
            if constexpr (ASYNCCOPY_ATTN_MMA_XOR)
                ac::ldmatrix_x4(f, ks + ((lo.k ^ (32 * kk)) + 16 * p * ROW_BYTES));
            else
                ac::ldmatrix_x4(f, ks + swizzled<ROW_BYTES>(16 * p + 8 * (mat >> 1) + r, 2 * (16 * kk + 8 * (mat & 1))));
            const unsigned b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
#pragma unroll
            for (int i = 0; i < MW; ++i) {
                ac::mma_m16n8k16<Tag>(s[i][2 * p], qa[i], b0);
                ac::mma_m16n8k16<Tag>(s[i][2 * p + 1], qa[i], b1);
            }
        }
    }
}

// One key tile's scores s (keys key0 .. key0 + BN - 1; its V tile at vs) folded into O and the row state.
// MASK: some key of the tile is >= k_len or (CAUSAL) past some row of the warp.
// With MW = 2 every V fragment serves both row pieces (o[i], st[i], s[i]: rows row_g + 16 i, + 8).
template <class T, int D, bool CAUSAL, bool MASK>
__device__ __forceinline__ void fold(float (&o)[MW][D / 8][4], RowState (&st)[MW], float (&s)[MW][BN / 8][4],
                                     const unsigned char* vs, int key0, int row_g, int k_len, float scale_log2)
{
    using Tag = typename ac::MmaType<T>::tag;
    constexpr int ROW_BYTES = 2 * D;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int mat = lane / 8, r = lane % 8;
    [[maybe_unused]] const LaneOffsets<ROW_BYTES> lo;

    // x = s * scale * log2 e (the scale folded into the exp2's argument; multiplied before the maximum,
    // so a negative scale is right too); s[nt][e] is (row g + 8 (e >> 1), key key0 + 8 nt + 2q + (e & 1)).
    const int q4 = lane % 4;
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[i][nt][e] * scale_log2;
                if constexpr (MASK) {
                    const int key = key0 + 8 * nt + 2 * q4 + (e & 1);
                    if (key >= k_len || (CAUSAL && key > row_g + 16 * i + 8 * (e >> 1))) x = NEG_INF;
                }
                s[i][nt][e] = x;
            }

    // Online softmax, per piece i and row half h (row g + 16 i + 8h: elements 2h, 2h + 1 of each n8 tile).
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = st[i].max[h];
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[i][nt][2 * h], s[i][nt][2 * h + 1]));
        // the row's 64 keys are spread over the 4 threads q = 0..3 of group g: lanes 4g .. 4g + 3
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // no key seen yet (every x -inf): subtract 0, so exp2(-inf - 0) = 0 and never -inf - -inf = NaN
        const float base = mx == NEG_INF ? 0.0f : mx;
        const float rescale = ac::ex2_ftz(st[i].max[h] - base);  // 0 while the old maximum is -inf
        st[i].max[h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
            s[i][nt][2 * h] = ac::ex2_ftz(s[i][nt][2 * h] - base);
            s[i][nt][2 * h + 1] = ac::ex2_ftz(s[i][nt][2 * h + 1] - base);
            sum += s[i][nt][2 * h] + s[i][nt][2 * h + 1];
        }
        st[i].sum[h] = st[i].sum[h] * rescale + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            o[i][dt][2 * h] *= rescale;
            o[i][dt][2 * h + 1] *= rescale;
        }
    }

    // O += P V. P as the A operand (m = query row, k = key) of k step kk (keys 16 kk ..): a0 = (row g,
    // keys 16kk + 2q, +1) is c0, c1 of n8 tile 2kk; a1 = (row g + 8, same keys) its c2, c3; a2, a3 the
    // same of tile 2kk + 1 (keys + 8). So the C fragments of two n8 score tiles are, packed in pairs,
    // exactly one A fragment: no shuffle, no shared memory.
    // V as the B operand (k = key j, n = head dim d): B(j, d) = V[j][d], the tile row-major (d
    // contiguous), so an 8x8 matrix at keys j0.., dims d0.. read with .trans (register: keys j0 + 2q, +1
    // of dim d0 + g) is b0 of the n8 tile d0 at k step j0 (b0 = (k 2q..2q+1, n g)); keys j0 + 8.. give
    // b1. The .x4 matrices: (keys +0, d +0), (keys +8, d +0), (keys +0, d +8), (keys +8, d +8) = b0, b1
    // of n8 tile 2p, b0, b1 of 2p + 1: lane 8 mat + r addresses key 16 kk + 8 (mat & 1) + r, dim
    // 16 p + 8 (mat >> 1).
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned a[MW][4];
#pragma unroll
        for (int i = 0; i < MW; ++i) {
            a[i][0] = Pair<T>::pack(s[i][2 * kk][0], s[i][2 * kk][1]);
            a[i][1] = Pair<T>::pack(s[i][2 * kk][2], s[i][2 * kk][3]);
            a[i][2] = Pair<T>::pack(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
            a[i][3] = Pair<T>::pack(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
        }
#pragma unroll
        for (int p = 0; p < D / 16; ++p) {
            unsigned f[4];
            if constexpr (ASYNCCOPY_ATTN_MMA_XOR)
                ac::ldmatrix_x4_trans(f, vs + ((lo.v ^ (32 * p)) + 16 * kk * ROW_BYTES));
            else
                ac::ldmatrix_x4_trans(f, vs + swizzled<ROW_BYTES>(16 * kk + 8 * (mat & 1) + r, 2 * (16 * p + 8 * (mat >> 1))));
            const unsigned b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
#pragma unroll
            for (int i = 0; i < MW; ++i) {
                ac::mma_m16n8k16<Tag>(o[i][2 * p], a[i], b0);
                ac::mma_m16n8k16<Tag>(o[i][2 * p + 1], a[i], b1);
            }
        }
    }
}

}  // namespace

template <class T, int D, int STAGES, int CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
    attention_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out,
                  float* __restrict__ lse, long long q_sb, long long q_sh, long long q_ss, long long k_sb,
                  long long k_sh, long long k_ss, long long v_sb, long long v_sh, long long v_ss, long long o_sb,
                  long long o_sh, long long o_ss, int group, int q_len, int k_len, float scale)
{
    static_assert(D == 64 || D == 128, "head dims 64 and 128");
    static_assert(MW == 1 || D == 64, "32 rows a warp at head dim 64 only (registers)");
    static_assert(STAGES >= 1 && STAGES <= 4, "1 to 4 stages");
    static_assert(sizeof(T) == 2, "bf16 or f16");
    constexpr int ROW_BYTES = 2 * D;
    constexpr int TILE_BYTES = BN * ROW_BYTES;   // one K or V tile
    constexpr int STAGE_BYTES = 2 * TILE_BYTES;  // [K tile | V tile]
    static_assert(BM * ROW_BYTES <= STAGE_BYTES, "the Q tile fits one stage");
    constexpr bool OVERLAP = ASYNCCOPY_ATTN_MMA_OVERLAP != 0 && STAGES >= 3;

    // [STAGES][K [BN][D] | V [BN][D]] T, 16-byte chunks XOR-swizzled per row; Q [BM][D] in the last stage first
    // (MW = 1), or after the stages for good (MW = 2)
    unsigned char* smem = ac::dynamic_smem<unsigned char>();
    unsigned char* q_smem = smem + (Q_SMEM ? STAGES : STAGES - 1) * STAGE_BYTES;

    int qt = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
    if (CAUSAL)  // the longest tiles first over chunks of heads whose K and V share L2 (asynccopy/attention.cuh)
        ac::causal_tile(gridDim.x, gridDim.y, gridDim.z, 2ll * sizeof(T) * k_len * D / group, qt, head, batch);
    const int m0 = qt * BM;
    const T* qg = q + batch * q_sb + head * q_sh;
    const T* kg = k + batch * k_sb + head / group * k_sh;
    const T* vg = v + batch * v_sb + head / group * v_sh;
    // keys any row of the block sees: all, or (causal) up to its last query
    const int kv_end = CAUSAL ? min(k_len, min(m0 + BM, q_len)) : k_len;
    const int tiles = (kv_end + BN - 1) / BN;

    load_rows<T, D, BM>(q_smem, qg, q_ss, m0, q_len);
    ac::commit_group();
    // The first STAGES - 1 key tiles, one commit group each (empty past the last tile).
#pragma unroll 1
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) {
            load_rows<T, D, BN>(smem + s * STAGE_BYTES, kg, k_ss, s * BN, k_len);
            load_rows<T, D, BN>(smem + s * STAGE_BYTES + TILE_BYTES, vg, v_ss, s * BN, k_len);
        }
        ac::commit_group();
    }

    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    // Q's group is the oldest: all but the newest STAGES - 1 landed means it did; the barrier makes every
    // thread's copies visible. With 16 rows a warp Q's fragments go to registers here (with 32, scores()
    // reads them from Q's own shared memory at every k step).
    // (OVERLAP: tile 0 as well, whose scores are taken before the loop.)
    ac::wait_group<OVERLAP ? STAGES - 2 : STAGES - 1>();
    __syncthreads();
    unsigned qf[MW][D / 16][4] = {};
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
        for (int kk = 0; kk < D / 16 && !Q_SMEM; ++kk) load_q_fragment<D>(qf[i][kk], q_smem, MW * warp + i, kk);
    if constexpr (STAGES == 1) __syncthreads();  // every warp has Q before tile 0 overwrites it

    float o[MW][D / 8][4];
    RowState st[MW];
#pragma unroll
    for (int i = 0; i < MW; ++i) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[i][dt][e] = 0.0f;
        st[i] = RowState{{NEG_INF, NEG_INF}, {0.0f, 0.0f}};
    }
    // this thread's first row (c0, c1) of piece 0; c2, c3 are row_g + 8, piece i's rows 16 i further
    const int row_g = m0 + 16 * MW * warp + lane / 4;
    const int warp_first = m0 + 16 * MW * warp, warp_last = warp_first + 16 * MW - 1;
    const float scale_log2 = scale * LOG2E;

    if constexpr (OVERLAP) {
        float s[MW][BN / 8][4];  // a key tile's scores
        // Groups: Q, tiles 0 .. STAGES - 2; at tile t the wait keeps tile t + 1 landed, the refill takes tile t - 1's
        // stage (STAGES >= 3: neither t's nor t + 1's), and tile t + 1's scores go beside tile t's fold.
        if (tiles > 0) scores<T, D>(s, qf, q_smem, smem);
#pragma unroll 1
        for (int t = 0; t < tiles; ++t) {
            const int key0 = t * BN;
            // Groups so far: Q, tiles 0 .. t + STAGES - 2; all but the newest STAGES - 3 landed: tile t + 1 did.
            ac::wait_group<STAGES - 3>();
            // Tile t + 1 from every thread is visible, and every warp is done with tile t - 1's stage (its K read
            // at iteration t - 2, its V at t - 1; at t = 0, the last stage's Q), which the copies below refill.
            __syncthreads();
            refill<T, D, STAGES>(smem, kg, k_ss, vg, v_ss, t + STAGES - 1, tiles, k_len);
            const unsigned char* vs = smem + ac::stage_of<STAGES>(t) * STAGE_BYTES + TILE_BYTES;
            const unsigned char* kn = smem + ac::stage_of<STAGES>(t + 1) * STAGE_BYTES;
            // warp-uniform: a tile wholly past this warp's last row adds nothing to its rows (nor any later tile)
            if (CAUSAL && key0 > warp_last) continue;
            const bool mask = key0 + BN > k_len || (CAUSAL && key0 + BN - 1 > warp_first);
            if (t + 1 < tiles && (!CAUSAL || key0 + BN <= warp_last)) {
                float sn[MW][BN / 8][4];
                if (mask) {
                    scores<T, D>(sn, qf, q_smem, kn);
                    fold<T, D, CAUSAL != 0, true>(o, st, s, vs, key0, row_g, k_len, scale_log2);
                } else {
                    scores<T, D>(sn, qf, q_smem, kn);
                    fold<T, D, CAUSAL != 0, false>(o, st, s, vs, key0, row_g, k_len, scale_log2);
                }
#pragma unroll
                for (int i = 0; i < MW; ++i)
#pragma unroll
                    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e) s[i][nt][e] = sn[i][nt][e];
            } else if (mask) {
                fold<T, D, CAUSAL != 0, true>(o, st, s, vs, key0, row_g, k_len, scale_log2);
            } else {
                fold<T, D, CAUSAL != 0, false>(o, st, s, vs, key0, row_g, k_len, scale_log2);
            }
        }
    }
#pragma unroll 1
    for (int t = 0; t < tiles && !OVERLAP; ++t) {
        const int key0 = t * BN;
        if constexpr (STAGES == 1) {
            load_rows<T, D, BN>(smem, kg, k_ss, key0, k_len);
            load_rows<T, D, BN>(smem + TILE_BYTES, vg, v_ss, key0, k_len);
            ac::commit_group();
            ac::wait_group<0>();
            __syncthreads();  // every thread's copies are in place and visible
        } else {
            // Groups so far: Q, tiles 0 .. t + STAGES - 2; all but the newest STAGES - 2 landed: tile t did.
            ac::wait_group<STAGES - 2>();
            // Tile t from every thread is visible, and every warp is done with tile t - 1 (and, at t = 0,
            // with Q), whose stage the copies below refill.
            __syncthreads();
            refill<T, D, STAGES>(smem, kg, k_ss, vg, v_ss, t + STAGES - 1, tiles, k_len);
        }
        const unsigned char* ks = smem + ac::stage_of<STAGES>(t) * STAGE_BYTES;
        // warp-uniform: a tile wholly past this warp's last row adds nothing to its rows
        if (!CAUSAL || key0 <= warp_last) {
            const bool mask = key0 + BN > k_len || (CAUSAL && key0 + BN - 1 > warp_first);
            // each instantiation with its own Q K^T: one stretch of code from the first product to the last
            float sc[MW][BN / 8][4];
            if (mask) {
                scores<T, D>(sc, qf, q_smem, ks);
                fold<T, D, CAUSAL != 0, true>(o, st, sc, ks + TILE_BYTES, key0, row_g, k_len, scale_log2);
            } else {
                scores<T, D>(sc, qf, q_smem, ks);
                fold<T, D, CAUSAL != 0, false>(o, st, sc, ks + TILE_BYTES, key0, row_g, k_len, scale_log2);
            }
        }
        if constexpr (STAGES == 1) __syncthreads();  // every warp has read the stage before the next load
    }
    if constexpr (STAGES > 1) ac::wait_all();  // only empty groups remain; nothing in flight at exit

    // Epilogue: a row's sum over its 4 threads; O / sum to T, two adjacent dims a store (d even, rows
    // 16-byte aligned); lse = ln(2^max * sum) = (max + log2 sum) ln 2, written by the row's thread q = 0.
#pragma unroll
    for (int i = 0; i < MW; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = st[i].sum[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum 0 (no key at all) cannot happen: no NaN even so
        const int row = row_g + 16 * i + 8 * h;
        if (row >= q_len) continue;
        T* orow = out + batch * o_sb + head * o_sh + row * o_ss;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
            ac::store_pair(orow + 8 * dt + 2 * (lane % 4), o[i][dt][2 * h] * inv, o[i][dt][2 * h + 1] * inv);
        if (lse != nullptr && lane % 4 == 0) {
            const long long at = (static_cast<long long>(batch) * gridDim.y + head) * q_len + row;
            lse[at] = sum > 0.0f ? (st[i].max[h] + log2f(sum)) * LN2 : NEG_INF;
        }
    }
}
