// gemm_simt.cu — C = A x B in fp32 on the CUDA cores (FFMA; no tensor cores, no TF32): a STAGES-deep
// LDGSTS (cp.async) pipeline with zero-fill at the edges, 8x8 (4x4, 8x16, 16x8) register blocking per thread,
// 128-bit shared loads from a bank-conflict-free layout.
//
// What: C [m x n] (row-major, leading dimension ldc; f32, bf16 or f16, converted once at the store) =
// A [m x k] x B [k x n], A and B f32, accumulated in f32. Any m, n, k >= 1, any leading dimension, and
// either operand K-major or MN-major in memory:
//   A_MN = 0: A row-major, a[i * lda + kk]       A_MN = 1: A column-major, a[kk * lda + i] (m contiguous)
//   B_MN = 0: B column-major, b[j * ldb + kk]    B_MN = 1: B row-major, b[kk * ldb + j] (n contiguous)
//             (x @ w.T with w row-major [n x k])
// How: one block of 256 threads per BM x BN output tile (blockIdx.x visited in groups of GROUP_M tile-
// rows, so blocks that run together share A and B tiles in L2). Thread (ty, tx) of a 16 x 16 grid owns
// a TM x TN = (BM / 16) x (BN / 16) sub-tile, as GM x GN groups of 4 x 4: rows g * BM / GM + 4 ty + r,
// columns h * BN / GN + 4 tx + c. For every kk of a BK = 16 slice it reads its TM values of A at kk and
// its TN values of B at kk with one LDS.128 per group of 4 and does TM * TN FFMA (outer product).
// Both operands therefore live in shared memory k-outer, MN contiguous: A as [BK][BM], B as [BK][BN].
// Filling that layout depends on the operand's global major:
//   * MN-major (A_MN = 1, B_MN = 1): a k-row of the tile is contiguous in global memory too; each
//     cp.async moves ALIGN bytes (ALIGN / 4 consecutive m or n of one k) to the same place in shared
//     memory; 16-byte copies bypass L1 (.cg). A vector hanging over m (n) copies its valid floats and
//     zero-fills the rest (src-size < cp-size; a vector wholly past m reads 0 bytes from column 0);
//     k-rows past k (the last slice) copy nothing (src-size 0, source = the array base). Stored
//     unswizzled: a quarter-warp writes 8 consecutive 16-byte chunks of one k-row, all 32 banks.
//   * K-major (A_MN = 0, B_MN = 0): four consecutive k of one row are contiguous in global memory but
//     must land in four different k-rows of shared memory, and cp.async writes its bytes contiguously:
//     no copy wider than 4 bytes can transpose. So K-major operands move as 4-byte cp.async (.ca, any
//     ALIGN), one element each: the copy engine does the transpose, and all four layouts share one
//     inner loop with 16 fragment registers. (Keeping a K-major A as [BM][BK] and reading 4 k per
//     LDS.128 instead needs all 4 k of 8 rows at once: 32 fragment registers per K-major operand.)
//     One pass of the block covers 32 rows x 8 k; warp w copies rows 4w .. 4w + 3, lane l row
//     4w + l / 8 at k l % 8: per instruction 4 rows x 32 bytes, 4 sectors of global memory. Each
//     thread repeats at rows + 32 r and at k + 8; its shared destinations differ by immediates.
//     In shared memory element (kk, mn) sits in k-row kk at column mn ^ (kk & 7) << 2: the 16-byte
//     chunks of a k-row are XOR-permuted by kk & 7. A warp's 8 k then write 8 different chunks and
//     its 4 rows 4 banks inside a chunk: 32 banks, no conflict (unswizzled, every k-row starts at
//     bank 0 and the 8 k of a row-quad would be an 8-way conflict). The permutation keeps chunks
//     whole and aligned, so the reads stay LDS.128; within one LDS.128 every thread reads the same
//     kk, and XOR with one constant permutes chunks inside each aligned group of 8, so reads that were
//     conflict-free stay so. Cost: no shared memory, one LOP3 per (kk & 7) and operand per slice.
//   Inside the matrix (all of a thread's rows or its column exist, the slice lies within k: every
//   slice but the last, every tile but the edge ones) the copies need no address check; otherwise
//   each copy's source is checked and redirected as above. Every source address stays inside the
//   matrix, even those reading 0 bytes.
// Bank conflicts of the inner loop: a warp is 8 (ty) x 4 (tx) threads, lane = 4 * (ty % 8) + tx % 4,
// and one LDS.128 reads chunk ty (A) or tx (B) of a k-row (then the column group + 64 floats, BM =
// 128). Per quarter-warp phase (8 lanes, 128 bytes) the lanes hold 2 ty x 4 tx: 2 different A chunks
// and 4 different B chunks, in different banks (adjacent chunks, or adjacent chunks XOR one
// constant), lanes of equal ty (tx) reading one address (a broadcast): conflict-free. Whole warp: 8
// consecutive A chunks (128 bytes, one of each bank quad) or 4 B chunks. The 2 x 2 groups of 4 x 4,
// rather than 8 consecutive m per thread, are what keep a warp's chunks inside one 128-byte row of
// banks: 8 consecutive floats per thread would read every other chunk of 256 bytes, two chunks per
// bank quad, one wavefront more where the warp is served as a whole.
// Registers: 64 accumulators (128 x 128) plus fragments prefetched a k or two ahead: 120..170 per
// thread, so __launch_bounds__(256, 1) (one block of 8 warps per SM by registers; at a 128 cap ptxas
// spilled for some layouts). BM = 64: 16 accumulators, under 96 registers, (256, 2). The wide tiles
// (128 x 256: 8 x 16 a thread as 2 x 4 groups; 256 x 128: 16 x 8) hold 128 accumulators in 207..255
// registers, one block per SM as cuBLAS's own fp32 kernel (256 x 128 x 8, 254 registers): 6 LDS.128
// feed 128 FFMA a k (4 feed 64 in the square tile), and a K-major operand on the 128 side keeps its
// 4-byte copies at 8 a thread and slice.
// Pipeline: STAGES-1 slices are prefetched; per slice: wait_group<STAGES-2> (this thread's copies of
// the slice have landed), __syncthreads (everyone's have, and everyone finished computing the slice
// before, whose stage the next copies overwrite), issue the copies of slice + STAGES-1 into that
// freed stage, commit (every thread, converged, even with no copies: the group count must advance
// identically in every thread for wait_group's "N most recent" to mean the same slice), compute.
// STAGES = 1: copy, commit, wait, sync, compute, sync.
// Shared memory (dynamic, STAGES * 4 * BK * (BM + BN) bytes, no padding):
//   [STAGES][BK * BM + BK * BN] f32: per stage A [BK][BM] then B [BK][BN]; each K-major operand's
//   16-byte chunks XOR-swizzled by (kk & 7) within its k-row.
// Constraints: sm_80+; 256 threads; (BM, BN) in {(64, 64), (128, 128), (128, 256), (256, 128)}; ALIGN in {4, 8, 16} divides
// the MN-major operands' base addresses and leading-dimension bytes; grid = ceil(m / BM) * ceil(n / BN).
// Run: asynccopy.gemm(a, b, kernel="simt") (a, b float32).
#include <asynccopy/gemm.cuh>
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/pipeline.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ac = asynccopy;

namespace {

constexpr int THREADS = 256;
// Compile-time knob (-D), for measuring variants: ASYNCCOPY_SIMT_MIN_BLOCKS, the blocks per SM the
// register allocation must allow (__launch_bounds__; 2: at most 128 registers a thread, which spills a
// few words in some layouts and stage counts of 128 x 128). Default: 2 for 64 x 64 tiles, 1 for 128 x 128.
#ifndef ASYNCCOPY_SIMT_MIN_BLOCKS
#define ASYNCCOPY_SIMT_MIN_BLOCKS (BM == 64 ? 2 : 1)
#endif
constexpr int BK = 16;       // k per stage
constexpr int GRID_T = 16;   // the threads form a GRID_T x GRID_T grid over the output tile
constexpr int GROUP_M = 8;   // tile-rows visited together (L2 reuse)

template <class X>
struct is_f32 {
    static constexpr bool value = false;
};
template <>
struct is_f32<float> {
    static constexpr bool value = true;
};

// f32 → OutT: four adjacent values with one vector store (16 bytes for f32, 8 for 16-bit).
template <class OutT>
struct Out;
template <>
struct Out<float> {
    static __device__ __forceinline__ void four(float* p, float x, float y, float z, float w)
    {
        *reinterpret_cast<float4*>(p) = make_float4(x, y, z, w);
    }
};
template <>
struct Out<__half> {
    static __device__ __forceinline__ unsigned pair(float x, float y)
    {
        return static_cast<unsigned>(__half_as_ushort(__float2half_rn(x))) |
               static_cast<unsigned>(__half_as_ushort(__float2half_rn(y))) << 16;
    }
    static __device__ __forceinline__ void four(__half* p, float x, float y, float z, float w)
    {
        *reinterpret_cast<uint2*>(p) = make_uint2(pair(x, y), pair(z, w));
    }
};
template <>
struct Out<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned pair(float x, float y)
    {
        return static_cast<unsigned>(__bfloat16_as_ushort(__float2bfloat16_rn(x))) |
               static_cast<unsigned>(__bfloat16_as_ushort(__float2bfloat16_rn(y))) << 16;
    }
    static __device__ __forceinline__ void four(__nv_bfloat16* p, float x, float y, float z, float w)
    {
        *reinterpret_cast<uint2*>(p) = make_uint2(pair(x, y), pair(z, w));
    }
};

// Where element (kk, mn) of a [BK][BMN] tile lives, as a float offset into the dynamic shared memory:
// `at` is the tile's offset (a multiple of 32 floats) plus mn. SWZ (K-major operands): bits 2..4 of
// mn, the 16-byte chunk within a 128-byte row of banks, are XOR-ed with kk & 7; a multiple of 32 in
// `at` passes through untouched, so a thread can XOR its (stage offset + first column) once per kk & 7
// and reach its other columns (+64, +128 ...) and k-rows (+ kk * BMN) by immediate offsets.
template <int BMN, bool SWZ>
__device__ __forceinline__ int tile_offset(int at, int kk)
{
    return (SWZ ? at ^ (kk & 7) << 2 : at) + kk * BMN;
}

// 4 consecutive floats of shared memory, 16-byte aligned: one LDS.128.
__device__ __forceinline__ float4 lds128(const float* p)
{
    return *reinterpret_cast<const float4*>(p);
}

// The copies of one MN-major operand (A_MN = 1 or B_MN = 1) into its [BK][BMN] tile: element (kk, mn)
// of the whole matrix at g[kk * ld + mn]. V floats per cp.async (ALIGN / 4). Thread t copies the
// vector at column (t % PER_ROW) * V of k-rows t / PER_ROW + i * K_STEP, i < COPIES.
template <int BMN, int V>
struct MnMajorCopies {
    static constexpr int PER_ROW = BMN / V;                  // vectors per k-row of the tile
    static constexpr int K_STEP = THREADS / PER_ROW;         // k-rows between a thread's vectors
    static constexpr int COPIES = BK * PER_ROW / THREADS;    // vectors per thread and slice
    static_assert(THREADS % PER_ROW == 0 && COPIES * K_STEP == BK, "whole k-rows per pass of the block");
    const float* src;  // its first vector in the next slice (column 0 if its column is past the matrix)
    int dst;           // its first vector's float offset inside the tile
    unsigned bytes;    // its valid bytes along mn: V * 4, fewer at the edge, 0 past it

    __device__ __forceinline__ MnMajorCopies(const float* g, long long ld, int mn0, int mn_total, int t)
    {
        const int mn = (t % PER_ROW) * V, kk0 = t / PER_ROW;
        dst = kk0 * BMN + mn;
        const int valid = mn_total - (mn0 + mn);
        bytes = valid <= 0 ? 0u : valid >= V ? 4u * V : 4u * valid;
        src = g + static_cast<long long>(kk0) * ld + (bytes ? mn0 + mn : 0);
    }

    // Slice k0 .. k0 + BK - 1 into the tile at float offset `tile` of smem; slices come in order. Every
    // source address is inside the matrix: a whole slice's k-rows exist, a column past the matrix was
    // moved to column 0, and a k-row past k (the last slice only) is redirected to g.
    __device__ __forceinline__ void issue(float* smem, int tile, const float* g, long long ld, int k0, int k)
    {
        const long long step = K_STEP * ld;
        if (k0 + BK <= k) {
#pragma unroll
            for (int i = 0; i < COPIES; ++i)
                ac::cp_async<4 * V, V == 4>(smem + tile + dst + i * K_STEP * BMN, src + i * step, bytes);
        } else {
            const int kk0 = static_cast<int>(threadIdx.x) / PER_ROW;
#pragma unroll
            for (int i = 0; i < COPIES; ++i) {
                const bool in = k0 + kk0 + i * K_STEP < k;
                ac::cp_async<4 * V, V == 4>(smem + tile + dst + i * K_STEP * BMN, in ? src + i * step : g,
                                            in ? bytes : 0u);
            }
        }
        src += BK * ld;
    }
};

// The copies of one K-major operand (A_MN = 0 or B_MN = 0) into its [BK][BMN] tile, transposed one
// element per 4-byte cp.async: element (kk, mn) of the whole matrix at g[mn * ld + kk]. One pass of
// the block covers 32 rows x 8 k, warp w rows 4w .. 4w + 3: lane l takes row 4w + l / 8 and k l % 8.
// Thread t then repeats at rows + 32 r (r < BMN / 32) and k + 8 (the slice's second half): its shared
// destinations differ by immediates (32 r + 8 BMN), its sources by 32 r rows and 8 floats.
template <int BMN>
struct KMajorCopies {
    static constexpr int ROWS = BMN / 32;   // row passes
    static_assert(THREADS == 256 && BK == 16 && BMN % 32 == 0, "8 warps of 4 rows x 8 k, two k-halves");
    const float* src;  // this thread's first element in the next slice (row, k); may lie past m (n)
    int dst;           // its first element's float offset inside the tile
    unsigned rows_in;  // bit r: row + 32 r is inside the matrix
    bool all_rows;     // all of them are

    __device__ __forceinline__ KMajorCopies(const float* g, long long ld, int mn0, int mn_total, int t)
    {
        const int row = t / 8, kk0 = t % 8;  // row = 4 * warp + lane / 8
        dst = tile_offset<BMN, true>(row, kk0);
        rows_in = 0;
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
            rows_in |= (mn0 + row + 32 * r < mn_total ? 1u : 0u) << r;
        all_rows = mn0 + row + 32 * (ROWS - 1) < mn_total;
        src = g + static_cast<long long>(mn0 + row) * ld + kk0;
    }

    // As MnMajorCopies::issue. Inside (all rows exist, whole slice in k) no address needs a check;
    // else each copy outside the matrix reads 0 bytes from g.
    __device__ __forceinline__ void issue(float* smem, int tile, const float* g, long long ld, int k0, int k)
    {
        const long long step = 32 * ld;
        if (k0 + BK <= k && all_rows) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    ac::cp_async<4>(smem + tile + dst + 32 * r + 8 * h * BMN, src + r * step + 8 * h);
        } else {
            const int kk0 = static_cast<int>(threadIdx.x) % 8;
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const bool in = k0 + kk0 + 8 * h < k && (rows_in >> r & 1u);
                    ac::cp_async<4>(smem + tile + dst + 32 * r + 8 * h * BMN, in ? src + r * step + 8 * h : g,
                                    in ? 4u : 0u);
                }
        }
        src += BK;
    }
};

template <bool MN_MAJOR, int BMN, int V>
struct CopiesOf {
    using type = MnMajorCopies<BMN, V>;
};
template <int BMN, int V>
struct CopiesOf<false, BMN, V> {
    using type = KMajorCopies<BMN>;
};

}  // namespace

template <class T, class OutT, int BM, int BN, int STAGES, int A_MN, int B_MN, int ALIGN>
__global__ void __launch_bounds__(THREADS, ASYNCCOPY_SIMT_MIN_BLOCKS)
    gemm_simt(const T* __restrict__ a, long long lda, const T* __restrict__ b, long long ldb,
              OutT* __restrict__ c, long long ldc, int m, int n, int k)
{
    static_assert(is_f32<T>::value, "gemm_simt multiplies f32 operands");
    static_assert((BM == 64 && BN == 64) || (BM == 128 && BN == 128) || (BM == 128 && BN == 256) ||
                      (BM == 256 && BN == 128),
                  "tiles of 64 x 64, 128 x 128, 128 x 256 or 256 x 128");
    static_assert(STAGES >= 1, "at least one stage");
    static_assert(ALIGN == 4 || ALIGN == 8 || ALIGN == 16, "copies of 4, 8 or 16 bytes");
    constexpr int TM = BM / GRID_T, TN = BN / GRID_T;  // the thread's sub-tile: 4 x 4, 8 x 8, 8 x 16 or 16 x 8
    constexpr int GM = TM / 4, GN = TN / 4;            // ... as GM x GN groups of 4 x 4
    constexpr int A_ELEMS = BK * BM, B_ELEMS = BK * BN;
    constexpr bool A_SWZ = A_MN == 0, B_SWZ = B_MN == 0;
    // [STAGES][A_ELEMS + B_ELEMS] f32: per stage A [BK][BM], B [BK][BN] (K-major ones chunk-swizzled)
    float* smem = ac::dynamic_smem<float>();

    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    int tm, tn;
    ac::grouped_tile<GROUP_M>(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN;
    const int t = static_cast<int>(threadIdx.x);
    const int warp = t / 32, lane = t % 32;
    const int ty = (warp / 4) * 8 + lane / 4;  // 0..15: rows 4 ty .. 4 ty + 3 of each row group
    const int tx = (warp % 4) * 4 + lane % 4;  // 0..15: columns 4 tx .. 4 tx + 3 of each column group

    typename CopiesOf<A_MN == 1, BM, ALIGN / 4>::type copy_a(a, lda, m0, m, t);
    typename CopiesOf<B_MN == 1, BN, ALIGN / 4>::type copy_b(b, ldb, n0, n, t);
    const int k_tiles = (k + BK - 1) / BK;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    constexpr int STAGE = A_ELEMS + B_ELEMS;  // floats
    if constexpr (STAGES > 1) {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < k_tiles) {
                copy_a.issue(smem, s * STAGE, a, lda, s * BK, k);
                copy_b.issue(smem, s * STAGE + A_ELEMS, b, ldb, s * BK, k);
            }
            ac::commit_group();  // converged, even empty: one group per slice in every thread
        }
    }

    for (int kt = 0; kt < k_tiles; ++kt) {
        if constexpr (STAGES > 1) {
            ac::wait_group<STAGES - 2>();  // this thread's copies of slice kt have landed
            __syncthreads();               // everyone's have; and slice kt - 1 is no longer read
            const int next = kt + STAGES - 1;
            if (next < k_tiles) {
                const int st = ac::stage_of<STAGES>(static_cast<unsigned long long>(next)) * STAGE;
                copy_a.issue(smem, st, a, lda, next * BK, k);
                copy_b.issue(smem, st + A_ELEMS, b, ldb, next * BK, k);
            }
            ac::commit_group();
        } else {
            copy_a.issue(smem, 0, a, lda, kt * BK, k);
            copy_b.issue(smem, A_ELEMS, b, ldb, kt * BK, k);
            ac::commit_group();
            ac::wait_group<0>();
            __syncthreads();
        }
        const int st = STAGES > 1 ? ac::stage_of<STAGES>(static_cast<unsigned long long>(kt)) * STAGE : 0;
        const int a_at = st + 4 * ty, b_at = st + A_ELEMS + 4 * tx;  // + column group, + kk row: immediates
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int g = 0; g < GM; ++g) {
                const float4 v = lds128(smem + tile_offset<BM, A_SWZ>(a_at, kk) + g * (BM / GM));
                fa[4 * g] = v.x, fa[4 * g + 1] = v.y, fa[4 * g + 2] = v.z, fa[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int h = 0; h < GN; ++h) {
                const float4 v = lds128(smem + tile_offset<BN, B_SWZ>(b_at, kk) + h * (BN / GN));
                fb[4 * h] = v.x, fb[4 * h + 1] = v.y, fb[4 * h + 2] = v.z, fb[4 * h + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
        }
        if constexpr (STAGES == 1) __syncthreads();  // the single stage is read by all before it is refilled
    }

    // C: 4 adjacent columns in one vector store where the whole 4 are inside and C's address and row
    // pitch keep them aligned; else element by element, inside only.
    const bool vec_ok = ((reinterpret_cast<unsigned long long>(c) |
                          static_cast<unsigned long long>(ldc) * sizeof(OutT)) % (4 * sizeof(OutT))) == 0;
    const int row0 = m0 + 4 * ty, col0 = n0 + 4 * tx;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / 4) * (BM / GM) + i % 4;
        if (row >= m) continue;
        OutT* crow = c + static_cast<long long>(row) * ldc + col0;
#pragma unroll
        for (int h = 0; h < GN; ++h) {
            const int left = n - (col0 + h * (BN / GN));  // columns of this group inside C
            OutT* p = crow + h * (BN / GN);
            if (vec_ok && left >= 4) {
                Out<OutT>::four(p, acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (j < left) p[j] = ac::from_float<OutT>(acc[i][4 * h + j]);
            }
        }
    }
}
