// gemm_mma.cu — C = A x B on Ampere and later (sm_80+): a multistage cp.async (LDGSTS) pipeline into
// XOR-swizzled shared memory, ldmatrix, mma.sync m16n8k16. Plain pointers: any m, n, k >= 1, any
// leading dimension, any alignment down to one element.
//
// What: C [m x n] (row-major, leading dimension ldc, bf16 / f16 / f32) = A [m x k] x B [k x n], A and B
// bf16 or f16, accumulated in f32 and rounded once at the store. Either operand may be K-major or
// MN-major in memory:
//   A_MN = 0: A row-major, a[i * lda + kk]       A_MN = 1: A column-major, a[kk * lda + i]
//   B_MN = 0: B column-major, b[j * ldb + kk]    B_MN = 1: B row-major, b[kk * ldb + j]
//             (x @ w.T with w row-major [n x k])
// How: one block of 256 threads (128 with ASYNCCOPY_MMA_WARPS=4, below) per BM x BN output tile (a 1D grid of
// exactly tiles_m * tiles_n blocks, visited in groups of GROUP_M tile-rows so that concurrently running
// blocks share A and B tiles in L2). The 8 warps form a 2 x 4 grid; a warp owns a (BM / 2) x (BN / 4) piece of the tile:
// MI x NI = 4 x 4 (128 x 128), 4 x 8 (128 x 256) or 6 x 8 (192 x 256: each fragment byte read from shared memory
// serves more mma) tiles of 16 x 8, MI * NI * 4 f32 accumulators per thread.
// k is walked in slices of BK = 64 through STAGES shared-memory stages (group_pipeline.cuh's protocol,
// written out: this kernel has no trace buffer): the first STAGES - 1 slices are copied ahead; for
// slice kt every thread waits for its own copies of it (wait_group<STAGES - 2>), a barrier makes
// everyone's visible and proves slice kt - 1 fully read, the copies of slice kt + STAGES - 1 go into
// kt - 1's stage, one commit (empty past the last slice, so that every thread's group count stays
// one per slice and one compile-time N serves every wait), and the warps compute slice kt: per k16
// step, ldmatrix .x4 fragments (.trans for an MN-major operand) and MI * NI mma.sync. By default
// (ASYNCCOPY_MMA_EARLY_SYNC) the wait and barrier for slice kt + 1 sit inside slice kt, before its last
// step's mma, and the copies go out at slice kt + 1's first step (the loop itself says why). STAGES = 1
// copies, waits, computes and synchronizes in turn.
// Copies: each operand's tile is split into copies of ALIGN bytes (ALIGN: the largest power of two up
// to 16 dividing both operands' addresses and leading dimensions in bytes), 256 threads each taking
// every 256th copy in the order of global memory. ALIGN 16, 8, 4: cp.async of that many bytes
// (16: .cg, cached in L2 only: the data is reused from shared memory, not L1). A copy that straddles
// the end of the matrix's contiguous dimension reads only its valid bytes (src-size) and the rest of
// its destination is zero-filled; one wholly outside (past k, or past m / n) reads nothing, from the
// array's base address, and is zero-filled whole. The zeros in both operands make the padded k terms
// exactly 0 (no 0 x garbage NaN). ALIGN 2 (cp.async copies 4 bytes at least): each copy is 8
// two-byte loads (the missing ones 0) into registers and one 16-byte shared store; the loads of slice
// kt + STAGES - 1 are issued before slice kt is computed and stored after it, so their latency still
// hides behind the mma.
// Shared memory, per stage (dynamic, STAGES * 2 * BK * (BM + BN) bytes, 1024-byte aligned):
//   A: A_MN = 0: [BM][BK]   (rows of 128 bytes)      A_MN = 1: [BK][BM]   (rows of 256 bytes)
//   B: B_MN = 0: [BN][BK]   (rows of 128 bytes)      B_MN = 1: [BK][BN]   (rows of 256 / 512 bytes)
// always with the operand's global contiguous dimension contiguous, 16-byte chunks XOR-swizzled per
// row (see swizzled() for why that is conflict-free for the copies and for ldmatrix).
// Constraints: sm_80+; T bf16 or f16; BM x BN = 128 x 128, 128 x 256 or 192 x 256; m, n >= 1 (k = 0 stores zeros, though
// asynccopy.gemm zeroes C itself then); the ALIGN the caller computed must hold for a, b, lda, ldb.
// Run: asynccopy.gemm(a, b, kernel="mma") or `asynccopy bench gemm`.
#include <asynccopy/gemm.cuh>
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/mma.cuh>
#include <asynccopy/pipeline.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ac = asynccopy;

namespace {

// Compile-time knobs (-D; asynccopy.matmul passes a configuration's `defines`), for measuring variants:
//   ASYNCCOPY_MMA_BK          k per stage, 32 or 64 (default 64)
//   ASYNCCOPY_MMA_FRAG_AHEAD  1: the next k16 step's fragments are loaded before this step's mma (2 (MI + NI / 2)
//                             ldmatrix registers of two steps live); 0: each step's just before its mma; 2: row by
//                             row, a step's B in two halves and A one row of mma ahead (24 registers at 96 x 64 a
//                             warp, the loop Fragments::slice and the kernel's FRAG == 2 branch describe); -1
//                             (default): 2 at BM = 192 (192 accumulators: two steps' fragments spill), else 1
//   ASYNCCOPY_MMA_XOR         1: ldmatrix addresses as XORs of the lane's first one (Fragments::a_at); 0:
//                             swizzled() at each; -1 (default): 1 at BM = 192 (whose hoisted addresses spilled), else 0
//   ASYNCCOPY_MMA_UNROLL      bounded copies (a slice at the matrix's edge) per thread and slice up to which their
//                             loop is unrolled; 0 (default): 8, 4 with 4 warps (whose 8 spilled in some layouts), and
//                             1 (rolled) for 128 x 256 tiles under the early barrier, whose unrolled copies' hoisted
//                             addresses spilled 112-248 bytes beside the fragments that barrier keeps live
//   ASYNCCOPY_MMA_EARLY_SYNC  1 (default): a slice's wait and barrier come before its last k16 step's mma, whose
//                             fragments are already in registers, and the next slice's first fragments load under
//                             those mma (CUTLASS's Ampere mainloop); 0: the wait and barrier open each slice, so the
//                             tensor pipe idles through the barrier and the first step's ldmatrix
//   ASYNCCOPY_MMA_SPLIT_COPIES 1 (default): under the early barrier a slice's refill copies of A go out at its first
//                             k16 step and those of B at its second (one commit there); measured faster, not profiled (a
//                             reading: fewer copies queue before one step's ldmatrix); 0: both at the first step
//   ASYNCCOPY_MMA_WARPS       8 (default): 256 threads, a 2 x 4 warp grid, one block an SM; 4: 128 threads, a
//                             2 x 2 grid of 64 x 64 warp pieces over a 128 x 128 tile, built for two blocks
//                             an SM (3 stages of 32 KiB fit twice), so that one block's barrier and copies
//                             overlap the other's products (CUTLASS's usual Ampere shape). The launch
//                             follows it (GemmConfig.threads). 203-220 registers, no spill, for copies of 16,
//                             8 or 4 bytes; two-byte operands (registers staging a slice) spill 88-300 bytes.
#ifndef ASYNCCOPY_MMA_WARPS
#define ASYNCCOPY_MMA_WARPS 8
#endif
#ifndef ASYNCCOPY_MMA_BK
#define ASYNCCOPY_MMA_BK 64
#endif
#ifndef ASYNCCOPY_MMA_FRAG_AHEAD
#define ASYNCCOPY_MMA_FRAG_AHEAD -1
#endif
#ifndef ASYNCCOPY_MMA_EARLY_SYNC
#define ASYNCCOPY_MMA_EARLY_SYNC 1
#endif
#ifndef ASYNCCOPY_MMA_SPLIT_COPIES
#define ASYNCCOPY_MMA_SPLIT_COPIES 1
#endif
#ifndef ASYNCCOPY_MMA_UNROLL
#define ASYNCCOPY_MMA_UNROLL 0
#endif
#ifndef ASYNCCOPY_MMA_XOR
#define ASYNCCOPY_MMA_XOR -1
#endif
constexpr int BK = ASYNCCOPY_MMA_BK;  // k per stage: BK / 16 mma k16 steps
static_assert(BK == 32 || BK == 64, "slices of 32 or 64 k");
static_assert(ASYNCCOPY_MMA_WARPS == 8 || ASYNCCOPY_MMA_WARPS == 4, "blocks of 8 or 4 warps");
constexpr int WARPS_M = 2;   // the block's warps as a 2 x 4 (or 2 x 2) grid over the output tile
constexpr int WARPS_N = ASYNCCOPY_MMA_WARPS / 2;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int MIN_BLOCKS = ASYNCCOPY_MMA_WARPS == 4 ? 2 : 1;  // blocks an SM the registers must allow
constexpr int GROUP_M = 8;   // tile-rows visited together (L2 reuse)

// The byte offset of byte `col_byte` of row `row` in a shared tile of rows of ROW_BYTES bytes whose
// 16-byte chunks are XOR-swizzled per row.
// Why: shared memory serves a warp in 128-byte wavefronts over 32 four-byte banks, so eight 16-byte
// accesses share one wavefront only if they fall in the eight different 16-byte bank groups
// (address / 16 % 8). ldmatrix hands it one 8x8 matrix as eight 16-byte rows at the same column of
// eight consecutive tile rows (8-aligned). Unswizzled, those land in 2 bank groups when rows are 64
// bytes (a 4-way conflict) and in 1 when rows are whole 128-byte lines (8-way).
//   ROW_BYTES = 64: chunk c of row r is stored as chunk c ^ (r / 2 % 4). Rows r and r ^ 1 share the
//     128-byte line r / 2, so the bank group is 4 (r % 2) + (c ^ (r / 2 % 4)); over 8 consecutive rows
//     (r % 2, r / 2 % 4) takes each of its 8 values once: 8 groups.
//   ROW_BYTES % 128 == 0: chunk c of row r is stored as c ^ (r % 8) (its low three bits, so it stays in
//     its 128-byte line): the bank group is (c ^ r) % 8, again 8 groups over 8 consecutive rows.
// Both only permute the chunks inside each 128-byte line, so the copies, where consecutive threads
// take consecutive chunks (or parts of chunks) of global memory in order, still cover the 8 bank
// groups of a line once per 128 bytes: the writes are conflict-free too. The bytes inside a chunk keep
// their order, so a copy of 4 or 8 bytes, or a row of an 8x8 matrix, stays contiguous.
template <int ROW_BYTES>
__device__ __forceinline__ int swizzled(int row, int col_byte)
{
    static_assert(ROW_BYTES == 64 || ROW_BYTES % 128 == 0, "rows of 64 bytes or of whole 128-byte lines");
    if constexpr (ROW_BYTES == 64)
        return row * 64 + (col_byte ^ ((row >> 1 & 3) << 4));
    else
        return row * ROW_BYTES + (col_byte ^ ((row & 7) << 4));
}

// One operand of the product (A: ROWS = BM along m; B: ROWS = BN along n): where its elements sit in
// a stage, and the copies that bring a slice of BK k there.
// The tile is [OUTER][INNER] two-byte elements, INNER the operand's contiguous dimension in global
// memory, so every copy moves contiguous bytes to contiguous bytes:
//   K-major  (A_MN = 0 / B_MN = 0): [ROWS][BK]  OUTER = m or n, INNER = k
//   MN-major (A_MN = 1 / B_MN = 1): [BK][ROWS]  OUTER = k, INNER = m or n
template <class T, int MN_MAJOR, int ROWS, int ALIGN, int UNROLL_MAX>
struct Operand {
    static constexpr bool MN = MN_MAJOR;  // read with ldmatrix .trans
    static constexpr int OUTER = MN_MAJOR ? BK : ROWS;
    static constexpr int INNER = MN_MAJOR ? ROWS : BK;
    static constexpr int ROW_BYTES = 2 * INNER;
    static constexpr int TILE_BYTES = OUTER * ROW_BYTES;
    static constexpr bool ASYNC = ALIGN >= 4;          // cp.async copies 4, 8 or 16 bytes
    static constexpr int VEC = ASYNC ? ALIGN / 2 : 8;  // elements per copy (ALIGN 2: one 16-byte store)
    static constexpr int PER_ROW = INNER / VEC;
    static constexpr int COPIES = OUTER * PER_ROW / THREADS;  // per thread and slice
    static_assert(sizeof(T) == 2 && OUTER * PER_ROW % THREADS == 0, "whole copies of two-byte elements per thread");
    // Unrolled, each copy's global address and bounds are loop-invariant across slices, and the
    // compiler keeps them live through the whole k loop, one set per copy: the 8 to 16 copies per
    // operand of ALIGN 4 crowded out the accumulators (128 x 256 spilled). More than 4 copies (the
    // small ones of ALIGN 8 and 4) run as a loop.
    static constexpr int UNROLL = COPIES <= (ALIGN == 16 ? UNROLL_MAX : 4) ? COPIES : 1;

    const T* g;      // the matrix
    long long ld;    // elements between consecutive OUTER indices
    int outer_n;     // the matrix's extent along OUTER (k, or m / n) ...
    int inner_n;     // ... and along INNER
    int mn0;         // the block's first row of A (m) or column of B (n)
    uint4 staged[ASYNC ? 1 : COPIES];  // ALIGN 2: the next slice on its way through registers

    // Element (mn, k) of the tile: its byte offset in the stage's tile.
    __device__ __forceinline__ static int offset(int mn, int k)
    {
        return MN_MAJOR ? swizzled<ROW_BYTES>(k, 2 * mn) : swizzled<ROW_BYTES>(mn, 2 * k);
    }

    // This thread's copy j: tile row and first element, consecutive threads on consecutive copies.
    __device__ __forceinline__ static void position(int j, int& row, int& col)
    {
        const int v = j * THREADS + static_cast<int>(threadIdx.x);
        row = v / PER_ROW;
        col = v % PER_ROW * VEC;
    }

    // The global source of copy (row, col) of slice kt and how many of its VEC elements are inside the
    // matrix; none inside: the array's base (a valid address, nothing read).
    __device__ __forceinline__ const T* source(int kt, int row, int col, int& valid) const
    {
        const int go = (MN_MAJOR ? kt * BK : mn0) + row;
        const int gi = (MN_MAJOR ? mn0 : kt * BK) + col;
        const int left = inner_n - gi;
        valid = go < outer_n && left > 0 ? (left < VEC ? left : VEC) : 0;
        return valid > 0 ? g + go * ld + gi : g;
    }

    // Copy j + 1 lies STEP tile rows below copy j. Where STEP is a multiple of 8 the swizzle of a row (its low
    // three bits, or bits 1-2 for rows of 64 bytes) is the same for all of a thread's copies, so they sit at
    // one shared offset plus j * STEP rows (an immediate) and at one global address plus j * STEP * ld.
    static constexpr int STEP = THREADS / PER_ROW;
    static constexpr bool STRIDED = ASYNC && THREADS % PER_ROW == 0 && STEP % 8 == 0;

    // Slice kt lies wholly inside the matrix: no copy needs a bound.
    __device__ __forceinline__ bool whole(int kt) const
    {
        const int outer_end = MN_MAJOR ? (kt + 1) * BK : mn0 + ROWS;
        const int inner_end = MN_MAJOR ? mn0 + ROWS : (kt + 1) * BK;
        return outer_end <= outer_n && inner_end <= inner_n;
    }

    // ALIGN >= 4: slice kt into `tile` by cp.async (the caller commits).
    // Why two paths: with bounds, each copy's address is a 64-bit product and three compares (about 25
    // instructions; 12 copies a thread and slice at 128 x 256 were 300 of the loop's 550 instructions a warp,
    // issued by all warps at once after the barrier while the tensor cores waited). A slice inside the matrix
    // takes one address a slice and a 64-bit add a copy.
    __device__ __forceinline__ void copy_async(unsigned char* tile, int kt) const
    {
        if constexpr (STRIDED) {
            if (whole(kt)) {
                int row, col, valid;
                position(0, row, col);
                const T* src = source(kt, row, col, valid);
                unsigned char* dst = tile + swizzled<ROW_BYTES>(row, 2 * col);
                const long long step = STEP * ld;
#pragma unroll
                for (int j = 0; j < COPIES; ++j)
                    ac::cp_async<ALIGN, ALIGN == 16>(dst + j * STEP * ROW_BYTES, src + j * step);
                return;
            }
        }
#pragma unroll UNROLL
        for (int j = 0; j < COPIES; ++j) {
            int row, col, valid;
            position(j, row, col);
            const T* src = source(kt, row, col, valid);
            ac::cp_async<ALIGN, ALIGN == 16>(tile + swizzled<ROW_BYTES>(row, 2 * col), src, 2u * valid);
        }
    }

    // ALIGN 2: slice kt into registers (elements outside the matrix are 0) ...
    __device__ __forceinline__ void fetch(int kt)
    {
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            int row, col, valid;
            position(j, row, col);
            const unsigned short* src = reinterpret_cast<const unsigned short*>(source(kt, row, col, valid));
            unsigned h[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) h[e] = e < valid ? src[e] : 0u;
            staged[j] = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
        }
    }

    // ... and from registers into `tile`, in the layout cp.async would have written.
    __device__ __forceinline__ void store(unsigned char* tile) const
    {
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            int row, col;
            position(j, row, col);
            *reinterpret_cast<uint4*>(tile + swizzled<ROW_BYTES>(row, 2 * col)) = staged[j];
        }
    }

    // Slice kt into `tile` now: cp.async (the caller commits), or loads and stores (ALIGN 2).
    __device__ __forceinline__ void load(unsigned char* tile, int kt)
    {
        if constexpr (ASYNC) {
            copy_async(tile, kt);
        } else {
            fetch(kt);
            store(tile);
        }
    }
};

// The fragments of a warp's MI x NI mma tiles for one k16 step, two steps' worth (step kk + 1's ldmatrix are
// issued before step kk's mma, so their latency hides behind the mma; the asm statements are volatile: they
// stay in this order). Lane l gives the row address of row l % 8 of matrix l / 8 of each ldmatrix .x4;
// (a_mn, a_k) and (b_mn, b_k) are that row's first element in the warp's first 16 x 16 A and B (n 16 x k 16)
// blocks:
//   A (m x k), matrices in the order of a0..a3: (m +0, k +0), (m +8, k +0), (m +0, k +8), (m +8, k +8)
//   B (n x k), matrices in the order b0, b1 of n8 tile 2p, b0, b1 of tile 2p + 1:
//              (n +0, k +0), (n +0, k +8), (n +8, k +0), (n +8, k +8)
// A K-major matrix's rows run along k (row r at mn + r), an MN-major one's along m / n (row r at k + r,
// read with .trans): see mma.cuh for why either arrives as the fragment mma expects.
template <class Tag, class OpA, class OpB, int MI, int NI, int FRAG, bool XOR>
struct Fragments {
    unsigned a[2][MI][4], b[2][NI][2];
    int a_mn, a_k, b_mn, b_k;

    // ASYNCCOPY_MMA_XOR: every ldmatrix address of a slice from the lane's first one (a_lane, b_lane: the offsets of
    // (a_mn, a_k), (b_mn, b_k)) by one XOR and an immediate. The swizzle XORs a row's chunk index with row % 8, and an
    // 8x8 matrix's rows start at a multiple of 8, so row % 8 is the lane's r wherever the matrix sits; what moves
    // is the chunk, by a step (K-major: 2 chunks a k16 step) or a 16-wide block (MN-major: 2 chunks a block), and
    // it moves by an XOR where those chunk bits are clear in the lane's own (bits 5-6 of the byte offset: 32 a unit,
    // four units at most, inside rows of whole 128-byte lines); the other coordinate adds whole rows. K-major with
    // rows of 128 bytes (BK = 64); MN-major where the warp's piece is a power of two wide (its first chunk then
    // has those bits clear). hide() makes the lane offsets opaque once a slice, so the compiler cannot hoist the
    // slice's 8-12 addresses out of the k loop (at 192 x 256 they were spilled and reloaded, 43 LDL a slice).
    static constexpr bool A_XOR = XOR && OpA::ROW_BYTES % 128 == 0 && (!OpA::MN || (MI & (MI - 1)) == 0);
    static constexpr bool B_XOR = XOR && OpB::ROW_BYTES % 128 == 0 &&
                                  (!OpB::MN || ((NI / 2) & (NI / 2 - 1)) == 0);
    int a_lane = 0, b_lane = 0;

    __device__ __forceinline__ void lanes()
    {
        a_lane = OpA::offset(a_mn, a_k);
        b_lane = OpB::offset(b_mn, b_k);
    }
    __device__ __forceinline__ void hide()
    {
        if constexpr (A_XOR || B_XOR) asm volatile("" : "+r"(a_lane), "+r"(b_lane));
    }
    // Row mi (A) or block p (B) of step kk's fragments: its offset in the operand's tile.
    __device__ __forceinline__ int a_at(int mi, int kk) const
    {
        if constexpr (!A_XOR) return OpA::offset(a_mn + 16 * mi, a_k + kk);
        else if constexpr (OpA::MN) return (a_lane ^ (32 * mi)) + kk * OpA::ROW_BYTES;
        else return (a_lane ^ (2 * kk)) + 16 * mi * OpA::ROW_BYTES;
    }
    __device__ __forceinline__ int b_at(int p, int kk) const
    {
        if constexpr (!B_XOR) return OpB::offset(b_mn + 16 * p, b_k + kk);
        else if constexpr (OpB::MN) return (b_lane ^ (32 * p)) + kk * OpB::ROW_BYTES;
        else return (b_lane ^ (2 * kk)) + 16 * p * OpB::ROW_BYTES;
    }

    // Step kk's fragments (k offset kk inside the slice) of the stage at sa (A) and sb (B) into buffer buf.
    __device__ __forceinline__ void fetch(int buf, const unsigned char* sa, const unsigned char* sb, int kk)
    {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) fetch_a(a[buf][mi], mi, sa, kk);
        fetch_b(buf, sb, kk);
    }

    // Row mi's products with the n8 tiles [n0, n1), A's fragment af, B's from buffer 0 (the row-by-row schedule).
    __device__ __forceinline__ void mma_row(float (&acc)[MI][NI][4], int mi, const unsigned (&af)[4], int n0,
                                            int n1) const
    {
#pragma unroll
        for (int ni = n0; ni < n1; ++ni) ac::mma_m16n8k16<Tag>(acc[mi][ni], af, b[0][ni]);
    }

    // The MI * NI products of the step in buffer buf.
    __device__ __forceinline__ void mma(float (&acc)[MI][NI][4], int buf) const
    {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) ac::mma_m16n8k16<Tag>(acc[mi][ni], a[buf][mi], b[buf][ni]);
    }

    // Step kk's B fragments into buffer buf (half h: the n8 tiles [h NI / 2, (h + 1) NI / 2); -1: all).
    __device__ __forceinline__ void fetch_b(int buf, const unsigned char* sb, int kk, int h = -1)
    {
#pragma unroll
        for (int p = h < 0 ? 0 : h * NI / 4; p < (h < 0 ? NI / 2 : (h + 1) * NI / 4); ++p) {
            unsigned f[4];
            const unsigned char* row = sb + b_at(p, kk);
            if constexpr (OpB::MN)
                ac::ldmatrix_x4_trans(f, row);
            else
                ac::ldmatrix_x4(f, row);
            b[buf][2 * p][0] = f[0];
            b[buf][2 * p][1] = f[1];
            b[buf][2 * p + 1][0] = f[2];
            b[buf][2 * p + 1][1] = f[3];
        }
    }
    // Step kk's A fragment of row mi into dst.
    __device__ __forceinline__ void fetch_a(unsigned (&dst)[4], int mi, const unsigned char* sa, int kk) const
    {
        const unsigned char* row = sa + a_at(mi, kk);
        if constexpr (OpA::MN)
            ac::ldmatrix_x4_trans(dst, row);
        else
            ac::ldmatrix_x4(dst, row);
    }

    // One whole slice (BK k) of the stage at sa, sb.
    __device__ __forceinline__ void slice(float (&acc)[MI][NI][4], const unsigned char* sa, const unsigned char* sb)
    {
        constexpr int STEPS = BK / 16;
        if constexpr (FRAG == 2) {
            // Row by row: a step's B fragments, then each A row loaded one row ahead of its NI mma (24 fragment
            // registers live, not 2 x (4 MI + 2 NI)).
#pragma unroll
            for (int step = 0; step < STEPS; ++step) {
                fetch_b(0, sb, 16 * step);
                fetch_a(a[0][0], 0, sa, 16 * step);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    if (mi + 1 < MI) fetch_a(a[(mi + 1) & 1][0], mi + 1, sa, 16 * step);
                    mma_row(acc, mi, a[mi & 1][0], 0, NI);
                }
            }
            return;
        }
        constexpr bool AHEAD = FRAG != 0;
        if (AHEAD) fetch(0, sa, sb, 0);
#pragma unroll
        for (int step = 0; step < STEPS; ++step) {
            if (!AHEAD) fetch(step & 1, sa, sb, 16 * step);
            else if (step + 1 < STEPS) fetch((step + 1) & 1, sa, sb, 16 * (step + 1));
            mma(acc, step & 1);
        }
    }
};

// Under the early barrier, k16 step `step`'s share of the copies of slice `next` into `refill` (its stage): A's at
// step 0, B's at B_STEP, and the slice's one commit there.
template <bool ASYNC, class OpA, class OpB>
__device__ __forceinline__ void refill_copies(OpA& opa, OpB& opb, int step, int next, int slices, unsigned char* refill)
{
    constexpr int B_STEP = ASYNCCOPY_MMA_SPLIT_COPIES ? 1 : 0;  // the step that copies B (A: step 0)
    if (step == 0 || step == B_STEP) {
        if (next < slices) {
            if constexpr (ASYNC) {
                if (step == 0) opa.copy_async(refill, next);
                if (step == B_STEP) opb.copy_async(refill + OpA::TILE_BYTES, next);
            } else {
                if (step == 0) opa.fetch(next);
                if (step == B_STEP) opb.fetch(next);
            }
        }
        // Reached by every thread, converged, whether or not it copied: cp.async groups are counted per thread, and
        // the waits need exactly one group per slice index in every thread.
        if constexpr (ASYNC)
            if (step == B_STEP) ac::commit_group();
    }
}

// Under the early barrier, the end of slice kt's reads and the start of slice kt + 1's: the staged registers (ALIGN 2)
// into slice kt - 1's stage, read by no warp until slice `next` (this barrier or a later one publishes them); then
// this thread's copies of slice kt + 1 (groups committed: one per slice 0 .. kt + STAGES - 1, so all but the newest
// STAGES - 2 landed means slice kt + 1's did), and the barrier that makes everyone's visible and proves slice kt's
// stage read.
template <bool ASYNC, int STAGES, class OpA, class OpB>
__device__ __forceinline__ void slice_handoff(OpA& opa, OpB& opb, int next, int slices, unsigned char* refill)
{
    if constexpr (!ASYNC) {
        if (next < slices) {
            opa.store(refill);
            opb.store(refill + OpA::TILE_BYTES);
        }
    }
    if constexpr (ASYNC) ac::wait_group<STAGES - 2>();
    __syncthreads();
}

}  // namespace

template <class T, class OutT, int BM, int BN, int STAGES, int A_MN, int B_MN, int ALIGN>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
    gemm_mma(const T* __restrict__ a, long long lda, const T* __restrict__ b, long long ldb,
             OutT* __restrict__ c, long long ldc, int m, int n, int k)
{
    static_assert(BM == 128 && (BN == 128 || BN == 256) || BM == 192 && BN == 256, "tiles of 128 x 128, 128 x 256, 192 x 256");
    static_assert(ALIGN == 16 || ALIGN == 8 || ALIGN == 4 || ALIGN == 2, "ALIGN is 16, 8, 4 or 2 bytes");
    static_assert(STAGES >= 1, "a pipeline has at least one stage");
    using Tag = typename ac::MmaType<T>::tag;
    constexpr int UNROLL_MAX = ASYNCCOPY_MMA_UNROLL > 0 ? ASYNCCOPY_MMA_UNROLL  // see the knob's note
                               : ASYNCCOPY_MMA_WARPS == 4 ? 4
                               : ASYNCCOPY_MMA_EARLY_SYNC && BN == 256 ? 1
                               : 8;
    using OpA = Operand<T, A_MN, BM, ALIGN, UNROLL_MAX>;
    using OpB = Operand<T, B_MN, BN, ALIGN, UNROLL_MAX>;
    constexpr bool ASYNC = OpA::ASYNC;
    constexpr int STAGE_BYTES = OpA::TILE_BYTES + OpB::TILE_BYTES;  // 2 * BK * (BM + BN)
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;             // a warp's piece: 64 x 32 or 64 x 64
    constexpr int MI = WM / 16, NI = WN / 8;
    static_assert(NI % 2 == 0, "B fragments in pairs of n8 tiles");
    static_assert(WN <= 64, "warp pieces of at most 64 x 64 (4 warps take 128 x 128 tiles)");

    // [STAGES][A tile | B tile], each as Operand describes: bf16 / f16, 16-byte chunks XOR-swizzled per row
    unsigned char* smem = ac::dynamic_smem<unsigned char>();

    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    int tm, tn;
    ac::grouped_tile<GROUP_M>(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tm, tn);
    OpA opa{a, lda, A_MN ? k : m, A_MN ? m : k, tm * BM, {}};
    OpB opb{b, ldb, B_MN ? k : n, B_MN ? n : k, tn * BN, {}};

    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int mat = lane / 8, r = lane % 8;  // this lane addresses row r of ldmatrix matrix `mat`
    // The fragments' schedule and addresses (the knobs; by default rows one ahead with XOR addresses at BM = 192,
    // whose step-wise double buffer spills beside 192 accumulators, and steps one ahead elsewhere)
    constexpr int FRAG = ASYNCCOPY_MMA_FRAG_AHEAD >= 0 ? ASYNCCOPY_MMA_FRAG_AHEAD : BM == 192 ? 2 : 1;
    constexpr bool XOR = ASYNCCOPY_MMA_XOR >= 0 ? ASYNCCOPY_MMA_XOR != 0 : BM == 192;
    Fragments<Tag, OpA, OpB, MI, NI, FRAG, XOR> fr;
    fr.a_mn = wm * WM + 8 * (mat & 1) + (A_MN ? 0 : r);
    fr.a_k = 8 * (mat >> 1) + (A_MN ? r : 0);
    fr.b_mn = wn * WN + 8 * (mat >> 1) + (B_MN ? 0 : r);
    fr.b_k = 8 * (mat & 1) + (B_MN ? r : 0);
    fr.lanes();

    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

    const int slices = (k + BK - 1) / BK;
    if constexpr (STAGES == 1) {
#pragma unroll 1
        for (int kt = 0; kt < slices; ++kt) {
            fr.hide();
            opa.load(smem, kt);
            opb.load(smem + OpA::TILE_BYTES, kt);
            if constexpr (ASYNC) {
                ac::commit_group();
                ac::wait_group<0>();
            }
            __syncthreads();  // every thread's copies are in place and visible
            fr.slice(acc, smem, smem + OpA::TILE_BYTES);
            __syncthreads();  // every warp has read the stage before the next slice overwrites it
        }
    } else {
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < slices) {
                opa.load(smem + s * STAGE_BYTES, s);
                opb.load(smem + s * STAGE_BYTES + OpA::TILE_BYTES, s);
            }
            if constexpr (ASYNC) ac::commit_group();  // one group per slice index, empty past the last
        }
#if ASYNCCOPY_MMA_EARLY_SYNC
      if constexpr (FRAG == 2) {
        // Fragments row by row under the early barrier: a step's B fragments (2 NI registers, in two halves) and
        // A's rows one ahead (two rows of 4 registers), so that 192 x 256 tiles (96 x 64 a warp, 192
        // accumulators) fit without spilling. Each load goes out half a row of mma before its first use: A's
        // row mi + 1 before row mi's mma, and the next step's B halves and first A row inside the last row,
        // around its second half's mma. The slice's barrier sits in its last row, after the first half's mma:
        // by then every fragment of the slice is in registers (or on its way), as with the step-wise loop.
        constexpr int STEPS = BK / 16;
        static_assert(MI % 2 == 0 && NI % 4 == 0, "rows in pairs (the A buffer's parity), B in two halves of pairs");
        if constexpr (ASYNC) ac::wait_group<STAGES - 2>();
        __syncthreads();
        fr.fetch_b(0, smem + OpA::TILE_BYTES, 0, 0);
        fr.fetch_b(0, smem + OpA::TILE_BYTES, 0, 1);
        fr.fetch_a(fr.a[0][0], 0, smem, 0);
#pragma unroll 1
        for (int kt = 0; kt < slices; ++kt) {
            fr.hide();
            const unsigned char* stage = smem + ac::stage_of<STAGES>(kt) * STAGE_BYTES;
            const int next = kt + STAGES - 1;
            unsigned char* refill = smem + ac::stage_of<STAGES>(next) * STAGE_BYTES;
#pragma unroll
            for (int step = 0; step < STEPS; ++step) {
                refill_copies<ASYNC>(opa, opb, step, next, slices, refill);
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    const unsigned (&af)[4] = fr.a[mi & 1][0];
                    if (mi + 1 < MI) {
                        fr.fetch_a(fr.a[(mi + 1) & 1][0], mi + 1, stage, 16 * step);
                        fr.mma_row(acc, mi, af, 0, NI);
                        continue;
                    }
                    fr.mma_row(acc, mi, af, 0, NI / 2);
                    const unsigned char* ns = stage;  // where the next step's fragments are, and its k
                    int nk = 16 * (step + 1);
                    bool more = true;
                    if (step + 1 == STEPS) {
                        slice_handoff<ASYNC, STAGES>(opa, opb, next, slices, refill);
                        ns = smem + ac::stage_of<STAGES>(kt + 1) * STAGE_BYTES;
                        nk = 0;
                        more = kt + 1 < slices;
                    }
                    if (more) {
                        fr.fetch_b(0, ns + OpA::TILE_BYTES, nk, 0);
                        fr.fetch_a(fr.a[0][0], 0, ns, nk);
                    }
                    fr.mma_row(acc, mi, af, NI / 2, NI);
                    if (more) fr.fetch_b(0, ns + OpA::TILE_BYTES, nk, 1);
                }
            }
        }
      } else {
        // The wait and the barrier for slice kt + 1 sit inside slice kt, after its last step's fragments are in
        // registers and before that step's mma: past the barrier each warp issues slice kt + 1's first ldmatrix
        // and then the last step's MI * NI mma, which cover the ldmatrix latency, so the tensor pipe idles only
        // for the warps' skew at the barrier. The barrier also proves every warp has issued its last ldmatrix of
        // slice kt's stage (those of the last step, issued a step earlier; bar.sync performs a thread's earlier
        // shared loads before it completes), which the copies at slice kt + 1's first step refill.
        constexpr int STEPS = BK / 16;
        static_assert(STEPS % 2 == 0, "an even number of k16 steps: step 0's fragments are always in buffer 0");
        if constexpr (ASYNC) ac::wait_group<STAGES - 2>();
        __syncthreads();
        fr.fetch(0, smem, smem + OpA::TILE_BYTES, 0);
#pragma unroll 1
        for (int kt = 0; kt < slices; ++kt) {
            fr.hide();
            const unsigned char* stage = smem + ac::stage_of<STAGES>(kt) * STAGE_BYTES;
            const int next = kt + STAGES - 1;  // the slice the copies of this one's first step bring in
            unsigned char* refill = smem + ac::stage_of<STAGES>(next) * STAGE_BYTES;  // slice kt - 1's stage
#pragma unroll
            for (int step = 0; step < STEPS; ++step) {
                // First the copies (before the next fragments, so that their addresses and one step's fragments
                // are all that is live beside the accumulators), then step + 1's fragments, then step's mma.
                refill_copies<ASYNC>(opa, opb, step, next, slices, refill);
                if (step + 1 < STEPS) {
                    fr.fetch((step + 1) & 1, stage, stage + OpA::TILE_BYTES, 16 * (step + 1));
                } else {
                    slice_handoff<ASYNC, STAGES>(opa, opb, next, slices, refill);
                    if (kt + 1 < slices) {
                        const unsigned char* after = smem + ac::stage_of<STAGES>(kt + 1) * STAGE_BYTES;
                        fr.fetch(0, after, after + OpA::TILE_BYTES, 0);
                    }
                }
                fr.mma(acc, step & 1);
            }
        }
      }
#else
#pragma unroll 1
        for (int kt = 0; kt < slices; ++kt) {
            fr.hide();
            // Groups committed so far: one per slice 0 .. kt + STAGES - 2; all but the newest STAGES - 2
            // landed means slice kt's did.
            if constexpr (ASYNC) ac::wait_group<STAGES - 2>();
            // Slice kt from every thread is visible, and every warp has finished slice kt - 1, whose
            // stage the copies below refill.
            __syncthreads();
            const int next = kt + STAGES - 1;
            unsigned char* refill = smem + ac::stage_of<STAGES>(next) * STAGE_BYTES;
            if (next < slices) {
                if constexpr (ASYNC) {
                    opa.copy_async(refill, next);
                    opb.copy_async(refill + OpA::TILE_BYTES, next);
                } else {
                    opa.fetch(next);
                    opb.fetch(next);
                }
            }
            // Reached by every thread, converged, whether or not it copied: cp.async groups are counted
            // per thread, and the wait above needs exactly one group per slice index in every thread.
            if constexpr (ASYNC) ac::commit_group();
            const unsigned char* stage = smem + ac::stage_of<STAGES>(kt) * STAGE_BYTES;
            fr.slice(acc, stage, stage + OpA::TILE_BYTES);
            if constexpr (!ASYNC) {
                // The registers into slice kt - 1's stage, which no warp reads until slice `next`; the
                // barrier at the top of the next iteration publishes them.
                if (next < slices) {
                    opa.store(refill);
                    opb.store(refill + OpA::TILE_BYTES);
                }
            }
        }
#endif
        if constexpr (ASYNC) ac::wait_all();  // only empty groups remain; nothing in flight at exit
    }

    // The accumulators to C: acc[mi][ni] is the mma tile at rows 16 mi, columns 8 ni of the warp's
    // piece; c0, c1 at (g, 2q), (g, 2q + 1) and c2, c3 eight rows below (g = lane / 4, q = lane % 4).
    const int row0 = tm * BM + wm * WM + lane / 4;
    const int col0 = tn * BN + wn * WN + 2 * (lane % 4);
    // col0 is even: two adjacent outputs are one aligned store where c and ldc allow it
    const bool pairs = ((reinterpret_cast<unsigned long long>(c) |
                         static_cast<unsigned long long>(ldc) * sizeof(OutT)) % (2 * sizeof(OutT))) == 0;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + 16 * mi + 8 * h;
            if (row >= m) continue;
            OutT* crow = c + row * ldc;
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) {
                const int col = col0 + 8 * ni;
                const float x = acc[mi][ni][2 * h], y = acc[mi][ni][2 * h + 1];
                if (pairs && col + 1 < n) {
                    ac::store_pair(crow + col, x, y);
                } else {
                    if (col < n) crow[col] = ac::from_float<OutT>(x);
                    if (col + 1 < n) crow[col + 1] = ac::from_float<OutT>(y);
                }
            }
        }
}
