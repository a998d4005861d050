// gemm_wgmma.cu — C = A x B on Hopper (sm_90a): TMA tensor loads into a STAGES-deep ring of shared-
// memory stages, wgmma straight from shared memory, warp specialization, a persistent grid.
//
// What: C [m x n] (row-major, leading dimension ldc, bf16 / f16 / f32) = A [m x k] x B [k x n], A and B
// bf16 or f16, accumulated in f32. Either operand may be K-major or MN-major in memory:
//   A_MN = 0: A row-major (k contiguous)         A_MN = 1: A column-major (m contiguous: a transposed view)
//   B_MN = 0: B column-major (k contiguous:      B_MN = 1: B row-major (n contiguous)
//             x @ w.T with w row-major [n x k])
// How: a block is 3 warpgroups. Warpgroup 0 is the producer: its warp 0 walks the block's output
// tiles and their BK-deep slices of k, waits for a free stage (empty[s]), announces the stage's bytes
// on full[s] and its lane 0 issues the TMA loads (128B swizzle; boxes hanging off the matrices come back zero-
// filled, so any m, n, k work). Warpgroups 1 and 2 are consumers: each owns 64 rows of the BM = 128-row
// tile and all its BN columns; per stage it waits on full[s], issues BK / 16 wgmma m64nBNk16 from
// shared memory, waits for them, and hands the stage back (one arrival per consumer warp on empty[s]).
// After a tile's last slice each consumer writes its accumulators to C (masked at the edges) while
// the producer already loads the next tile.
// Split k (splits > 1, for shapes of fewer tiles than SMs): a work unit is one tile's share of the k-
// blocks; C is then an f32 workspace [splits][m][ldc] (OutT = float, ALIGN = 8: ordinary stores, which
// compute-sanitizer's initcheck counts as writes, unlike TMA stores) that gemm_splitk.cu sums into C.
// Stream-K (sk_tiles > 0, one split, no PAIR_K): the last sk_tiles units' k-blocks are shared out among all
// blocks (clusters of a pair sharing an operand: a unit is then the pair's two tiles) after their whole units
// (Schedule; asynccopy/gemm.cuh); a piece that starts inside a tile leaves its f32 accumulators in `partials`
// under a flag, which the tile's owner (in a cluster, the owner cluster's block of the same rank) waits for and
// adds in before it stores.
// setmaxnreg moves registers from the producer (40) to the consumers (232). Tiles are visited in groups of
// GROUP_M tile-rows so that concurrently running blocks share A and B tiles in L2.
// Shared memory, per stage (1024-byte aligned, 128B-swizzled by TMA):
//   A: A_MN = 0: [BM][BK]          (rows of 64 k = 128 bytes)
//      A_MN = 1: [BM / 64][BK][64] (panels of 64 m, one per consumer)
//   B: B_MN = 0: [BN][BK]
//      B_MN = 1: [BN / 64][BK][64] (panels of 64 n)
// Tensor maps (asynccopy.matmul builds them): A_MN = 0: dims (k, m), box (64, 128) (64, 64 when a pair shares A:
// each block loads half); A_MN = 1: dims (m, k),
// box (64, 64); B_MN = 0: dims (k, n), box (64, BN) (64, BN / 2 when a pair shares B); B_MN = 1: dims (n, k), box (64, 64); C (ALIGN 16):
// dims (n, m), box (128 bytes, 64); all 128B swizzle.
// Constraints: sm_90a; BN in {64, 128, 256}; global strides of A and B multiples of 16 bytes (TMA).
// Run: asynccopy.gemm(a, b) or `asynccopy bench gemm`.
#include <asynccopy/cluster.cuh>
#include <asynccopy/gemm.cuh>
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tma.cuh>
#include <asynccopy/wgmma.cuh>

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ac = asynccopy;
namespace cg = cooperative_groups;
using u64 = unsigned long long;

namespace {

constexpr int BM = 128;           // rows of an output tile: 64 per consumer warpgroup
constexpr int BK = 64;            // k per stage: one 128-byte swizzle span of 2-byte elements
constexpr int CONSUMERS = 2;      // consumer warpgroups
// Compile-time knobs (-D), for measuring variants:
//   ASYNCCOPY_WGMMA_GROUP_M   the tile-rows visited together (default 8)
//   ASYNCCOPY_WGMMA_CLUSTER   2: blocks in clusters of two, the pair on two neighbouring tiles of one tile-
//                             row; each loads half of their shared A tile and multicasts it to both, so A
//                             crosses L2 once per pair (launched with cluster = 2; no split k). Default 1.
#ifndef ASYNCCOPY_WGMMA_GROUP_M
#define ASYNCCOPY_WGMMA_GROUP_M 8
#endif
//   ASYNCCOPY_WGMMA_SHARE     with CLUSTER 2, what the pair shares: 0 (default) A, the pair on two tiles of
//                             one tile-row; 1 B, the pair on two tiles of one tile-column, each loading half
//                             of B's tile (BN >= 128) and multicasting it; 2 one tile, its k-blocks split
//                             between the two (block 0 the first half, block 1 the second), block 1's f32
//                             accumulators sent into block 0's staging buffers of C (bulk copies or st.async:
//                             ASYNCCOPY_WGMMA_PAIR_BULK) and added there (pair_reduce: no shared memory beyond
//                             the unpaired kernel's).
#ifndef ASYNCCOPY_WGMMA_CLUSTER
#define ASYNCCOPY_WGMMA_CLUSTER 1
#endif
#ifndef ASYNCCOPY_WGMMA_SHARE
#define ASYNCCOPY_WGMMA_SHARE 0
#endif
//   ASYNCCOPY_WGMMA_PAIR_BULK with SHARE 2: 1 (default), block 1 writes each round of its accumulators into its own
//                             staging buffers and one thread copies them to block 0's by a bulk copy (the TMA
//                             engine); 0: every thread st.async's its own 16-byte pieces
#ifndef ASYNCCOPY_WGMMA_PAIR_BULK
#define ASYNCCOPY_WGMMA_PAIR_BULK 1
#endif
//   ASYNCCOPY_WGMMA_EPI_BUFS  staging buffers of C a consumer warpgroup holds (64 rows x 128 bytes each): 2 (default),
//                             filled in turn, each waiting for the TMA store that last read it; 4, as many as a
//                             64 x 256 bf16 block's chunks: the whole block written at once, after one wait for the
//                             previous tile's stores (issued a tile earlier), and stored by four TMA stores
#ifndef ASYNCCOPY_WGMMA_EPI_BUFS
#define ASYNCCOPY_WGMMA_EPI_BUFS 2
#endif
//   ASYNCCOPY_WGMMA_PREFETCH_MAPS 1: thread 0 prefetches the three tensor maps into the TMA unit's descriptor cache
//                             at the kernel's start (so the first loads need not wait for the maps' fetch); 0
//                             (default until it is timed on a GPU): no prefetch
#ifndef ASYNCCOPY_WGMMA_PREFETCH_MAPS
#define ASYNCCOPY_WGMMA_PREFETCH_MAPS 0
#endif
constexpr int GROUP_M = ASYNCCOPY_WGMMA_GROUP_M;  // tile-rows visited together (L2 reuse)
constexpr int CLUSTER = ASYNCCOPY_WGMMA_CLUSTER;
static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two blocks");
static_assert(ASYNCCOPY_WGMMA_SHARE >= 0 && ASYNCCOPY_WGMMA_SHARE <= 2, "a pair shares A (0), B (1) or a tile's k (2)");
constexpr bool SHARE_A = CLUSTER > 1 && ASYNCCOPY_WGMMA_SHARE == 0;  // the pair multicasts A
constexpr bool SHARE_B = CLUSTER > 1 && ASYNCCOPY_WGMMA_SHARE == 1;  // the pair multicasts B
constexpr bool PAIR_K = CLUSTER > 1 && ASYNCCOPY_WGMMA_SHARE == 2;   // the pair splits one tile's k-blocks
constexpr bool MULTICAST = SHARE_A || SHARE_B;
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = 232;

constexpr int EPI_BUF = 64 * 128;  // bytes of one staging buffer of C: 64 rows of 128 bytes
constexpr int EPI_BUFS = ASYNCCOPY_WGMMA_EPI_BUFS;  // staging buffers a consumer warpgroup holds
static_assert(EPI_BUFS == 2 || EPI_BUFS == 4, "two or four staging buffers of C a consumer");

// Register i of consumer thread t (0..127) after m64nNk16 holds C row 16 (t / 32) + (t % 32) / 4 + 8 ((i >> 1) & 1),
// column 8 (i >> 2) + 2 (t % 4) + (i & 1) of the warpgroup's 64 x N block: pairs (i, i + 1) are adjacent.

// C written straight from the registers, masked at the edges: pairs of columns in one store where the
// alignment allows (ALIGN: bytes dividing C's address and row pitch).
template <class OutT, int BN, int ALIGN>
__device__ __forceinline__ void store_direct(const float (&acc)[BN / 2], OutT* c, long long ldc, int m, int n,
                                             int row0, int col0, int t)
{
    const int lane = t % 32;
    const int r = row0 + 16 * (t / 32) + lane / 4;
    const int cbase = col0 + 2 * (lane % 4);
    constexpr bool PAIRS = ALIGN >= 2 * int(sizeof(OutT));
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
        const int row = r + 8 * ((i >> 1) & 1);
        const int col = cbase + 8 * (i >> 2);
        if (row >= m) continue;
        OutT* p = c + static_cast<long long>(row) * ldc + col;
        if (PAIRS && col + 1 < n) {
            ac::store_pair(p, acc[i], acc[i + 1]);
        } else {
            if (col < n) p[0] = ac::from_float<OutT>(acc[i]);
            if (col + 1 < n) p[1] = ac::from_float<OutT>(acc[i + 1]);
        }
    }
}

// C through shared memory and TMA stores: the warpgroup's 64 x BN block goes out in chunks of 64 rows x
// 128 bytes, each written into one of EPI_BUFS 128B-swizzled staging buffers (the swizzle makes the eight
// rows a warp writes land in eight different 16-byte bank groups) and stored by one thread while the
// warpgroup fills the next buffer. The TMA store clips the box at the matrix edges. Where the buffers hold
// every chunk of the block (WHOLE), the warpgroup waits once for the previous tile's stores to have read
// them, writes the whole block and one thread stores every chunk.
template <class OutT, int BN>
__device__ __forceinline__ void store_tma(const float (&acc)[BN / 2], const ac::TensorMap* map_c,
                                          unsigned char* staging, int col0, int row0, int t, int w,
                                          unsigned& stores)
{
    constexpr int CW = 128 / int(sizeof(OutT));  // columns per chunk
    constexpr int PER = CW / 2;                  // registers per chunk: CW / 8 column groups x 2 rows x 2
    constexpr int CHUNKS = BN / CW;
    const int lane = t % 32;
    const int rr = 16 * (t / 32) + lane / 4;     // rows rr and rr + 8 of the block
    if constexpr (EPI_BUFS >= CHUNKS) {
        if (t == 0) ac::bulk_wait_group_read<0>();  // the previous tile's stores are done reading the buffers
        ac::named_barrier_sync(1 + w, 128);
#pragma unroll
        for (int chunk = 0; chunk < CHUNKS; ++chunk) {
            unsigned char* buf = staging + chunk * EPI_BUF;
#pragma unroll
            for (int j = 0; j < PER; j += 2) {
                const int i = chunk * PER + j;
                const int row = rr + 8 * ((j >> 1) & 1);
                const int byte = (8 * (j >> 2) + 2 * (lane % 4)) * int(sizeof(OutT));
                unsigned char* p = buf + row * 128 + ac::swizzle_128b(row, byte);
                ac::store_pair(reinterpret_cast<OutT*>(p), acc[i], acc[i + 1]);
            }
        }
        ac::fence_proxy_async_shared();  // these generic-proxy writes before the TMA engine's reads
        ac::named_barrier_sync(1 + w, 128);
        if (t == 0) {
#pragma unroll
            for (int chunk = 0; chunk < CHUNKS; ++chunk) {
                const int at[2] = {col0 + chunk * CW, row0};
                ac::tensor_store<2>(map_c, at, staging + chunk * EPI_BUF);
            }
            ac::bulk_commit_group();
        }
        stores += CHUNKS;
        return;
    }
#pragma unroll
    for (int chunk = 0; chunk < CHUNKS; ++chunk, ++stores) {
        unsigned char* buf = staging + (stores % EPI_BUFS) * EPI_BUF;
        if (t == 0) ac::bulk_wait_group_read<EPI_BUFS - 1>();  // the store that last read this buffer is done reading
        ac::named_barrier_sync(1 + w, 128);
#pragma unroll
        for (int j = 0; j < PER; j += 2) {
            const int i = chunk * PER + j;
            const int row = rr + 8 * ((j >> 1) & 1);
            const int byte = (8 * (j >> 2) + 2 * (lane % 4)) * int(sizeof(OutT));  // within the 128-byte row
            unsigned char* p = buf + row * 128 + ac::swizzle_128b(row, byte);
            ac::store_pair(reinterpret_cast<OutT*>(p), acc[i], acc[i + 1]);
        }
        ac::fence_proxy_async_shared();  // these generic-proxy writes before the TMA engine's reads
        ac::named_barrier_sync(1 + w, 128);
        if (t == 0) {
            const int at[2] = {col0 + chunk * CW, row0};
            ac::tensor_store<2>(map_c, at, buf);
            ac::bulk_commit_group();
        }
    }
}

// Work unit u of tiles x splits: output tile u % tiles (in the grouped order) and its k-blocks
// [kb0, kb1), the (u / tiles)-th of `splits` near-equal ranges of the k_blocks (splits <= k_blocks: none
// is empty).
// With CLUSTER = 2 a unit is a pair of neighbouring tiles of one tile-row (tiles_n counts pairs then) and
// block `rank` of the cluster takes tile column 2 pair + rank (past the matrix for an odd last pair: that
// block still loads and multicasts its half of A, computes zeros and stores nothing); with SHARE_B the
// pair is two tiles of one tile-column (tiles_m counts pairs) and `rank` picks the tile-row; with PAIR_K both
// blocks take the same tile, block 0 the first half of the unit's k-blocks and block 1 the rest (block 0's
// half is empty where the unit has one k-block).
__device__ __forceinline__ void unit_coords(int u, int tiles, int tiles_m, int tiles_n, int splits, int k_blocks,
                                            int& tm, int& tn, int& kb0, int& kb1, int rank = 0)
{
    const int split = u / tiles;
    ac::grouped_tile<GROUP_M>(u - split * tiles, tiles_m, tiles_n, tm, tn);
    if (SHARE_B)
        tm = CLUSTER * tm + rank;
    else if (SHARE_A)
        tn = CLUSTER * tn + rank;
    kb0 = static_cast<int>(static_cast<long long>(split) * k_blocks / splits);
    kb1 = static_cast<int>(static_cast<long long>(split + 1) * k_blocks / splits);
    if (PAIR_K) {
        const int mid = kb0 + (kb1 - kb0) / 2;
        (rank == 0 ? kb1 : kb0) = mid;
    }
}

// One piece of a block's work: output tile (tm, tn), its k-blocks [kb0, kb1), the split of k it belongs to
// (its f32 partials' slice of C's workspace) and, for a tile of the stream-K region, the tile's index in it
// (sk < 0 elsewhere).
struct Piece {
    int tm, tn, kb0, kb1, split, sk;
};

// The pieces of one block (cluster) in turn, the same walk for its producer and its consumers: first its
// data-parallel units (u = first, first + step, ... of the tiles before the stream-K region, times the
// splits of k), then its share of the stream-K region, the last sk_tiles tiles of the grouped order
// (asynccopy/gemm.cuh, stream_k_begin, over the clusters; sk_tiles > 0 only with one split and no PAIR_K).
struct Schedule {
    int u, step, dp_units, tiles, rows, cols, splits, k_blocks, rank, dp_tiles;
    int sk_j, sk_kb, sk_left;  // where this block's stream-K share goes on (tile of the region, k-block), and its rest

    __device__ __forceinline__ Schedule(int first, int step_, int tiles_, int rows_, int cols_, int splits_,
                                        int k_blocks_, int sk_tiles, int rank_)
        : u(first), step(step_), dp_units((tiles_ - sk_tiles) * splits_), tiles(tiles_), rows(rows_), cols(cols_),
          splits(splits_), k_blocks(k_blocks_), rank(rank_), dp_tiles(tiles_ - sk_tiles)
    {
        const long long at = ac::stream_k_begin(first, step_, sk_tiles, k_blocks_);
        sk_j = static_cast<int>(at / k_blocks_);
        sk_kb = static_cast<int>(at - static_cast<long long>(sk_j) * k_blocks_);
        // a share holds at most one and a half tiles' k-blocks (gemm_kernels.stream_k_plan): an int
        sk_left = static_cast<int>(ac::stream_k_begin(first + 1, step_, sk_tiles, k_blocks_) - at);
    }

    __device__ __forceinline__ bool next(Piece& p)
    {
        if (u < dp_units) {
            unit_coords(u, tiles, rows, cols, splits, k_blocks, p.tm, p.tn, p.kb0, p.kb1, rank);
            p.split = u / tiles;
            p.sk = -1;
            u += step;
            return true;
        }
        if (sk_left <= 0) return false;
        int whole0, whole1;  // the tile's whole range, unused: the share sets the piece's
        unit_coords(dp_tiles + sk_j, tiles, rows, cols, 1, k_blocks, p.tm, p.tn, whole0, whole1, rank);
        p.kb0 = sk_kb;
        p.kb1 = k_blocks - sk_kb < sk_left ? k_blocks : sk_kb + sk_left;
        p.split = 0;
        p.sk = sk_j;
        sk_left -= p.kb1 - p.kb0;
        sk_kb = 0;
        ++sk_j;
        return true;
    }
};

// A stream-K piece that is not a whole tile, at the end of its products: a contributor (its piece starts
// inside the tile) writes warpgroup w's accumulators to its own slot of `partials` and raises its flag, and
// returns false (nothing to store); the owner adds in the slot of every contributor of its tile (the blocks
// after it whose ranges start inside the tile), each once its flag is up, lowers the flags for the next
// launch, and returns true. A slot is [BN / 8][128 threads][4] floats: each warp's float4 stores coalesce.
template <int BN>
__device__ __forceinline__ bool stream_k_fixup(float (&acc)[BN / 2], const Piece& p, float* partials, int* flags,
                                               int sk_tiles, int k_blocks, int w, int t, int rank)
{
    constexpr int SLOT = 64 * BN;  // floats of one warpgroup's 64 x BN accumulators
    if (p.kb0 > 0) {
        float4* mine = reinterpret_cast<float4*>(partials + (static_cast<long long>(blockIdx.x) * CONSUMERS + w) * SLOT);
#pragma unroll
        for (int i = 0; i < BN / 2; i += 4)
            __stcg(mine + (i / 4) * 128 + t, make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]));
        ac::named_barrier_sync(1 + w, 128);  // the warpgroup's partials are written before its flag goes up
        if (t == 0) ac::flag_release(flags + blockIdx.x * CONSUMERS + w, 1);
        return false;
    }
    // the workers are the clusters (blocks, where CLUSTER is 1); worker b's block of this rank took the same
    // pieces' tiles of this rank's side
    const long long end = static_cast<long long>(p.sk + 1) * k_blocks;
    const int workers = static_cast<int>(gridDim.x) / CLUSTER;
    for (int b = static_cast<int>(blockIdx.x) / CLUSTER + 1; b < workers; ++b) {
        const long long lo = ac::stream_k_begin(b, workers, sk_tiles, k_blocks);
        if (lo >= end) break;
        if (ac::stream_k_begin(b + 1, workers, sk_tiles, k_blocks) == lo) continue;  // an empty range
        const int block = b * CLUSTER + rank;
        int* flag = flags + block * CONSUMERS + w;
        if (t == 0) {
            ac::bounded_wait([&] { return ac::flag_acquire(flag) != 0; }, {"gemm_wgmma", "stream_k flag", block},
                             ac::NO_PARITY);
            *flag = 0;  // read by no one else in this launch; the next one finds it down
        }
        ac::named_barrier_sync(1 + w, 128);  // thread 0 saw the flag: the slot is complete
        const float4* theirs = reinterpret_cast<const float4*>(partials + (static_cast<long long>(block) * CONSUMERS + w) * SLOT);
#pragma unroll
        for (int i = 0; i < BN / 2; i += 4) {
            const float4 v = __ldcg(theirs + (i / 4) * 128 + t);
            acc[i] += v.x;
            acc[i + 1] += v.y;
            acc[i + 2] += v.z;
            acc[i + 3] += v.w;
        }
    }
    return true;
}

// Whether this thread is its warp's lane 0, read afresh from %laneid at every use (volatile): a value the
// consumers would otherwise hold in a register through the products, where they have none to spare.
__device__ __forceinline__ bool lane_zero()
{
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
    return lane == 0;
}

// A consumer warp hands stage s back: to its own block's producer and, in a cluster of two that multicasts, to
// its pair's (whose multicast writes into this block's stage s too): a remote arrive, release at CTA scope (no
// fence: asynccopy/cluster.cuh says why).
__device__ __forceinline__ void release_stage(ac::mbarrier_t* empty, int s, int rank)
{
    ac::mbarrier_arrive(&empty[s]);
    if constexpr (MULTICAST) ac::mbarrier_arrive_remote_cta(&empty[s], static_cast<unsigned>(rank ^ 1));
}

// PAIR_K, at the end of a tile's products: block 1's warpgroup w sends its f32 accumulators into block 0's staging
// buffers of C (the warpgroup's 2 x EPI_BUF bytes) in rounds of what fits there ([ROUND][128 threads] float4: each
// warp's 16-byte stores fill whole lines), each round by one bulk copy from block 1's own staging buffers
// (PAIR_BULK) or by every thread's st.async, its bytes completing on block 0's red_full, and
// returns false (block 0 stores the tile). Block 0's warpgroup announces each round's bytes, waits for them
// (acquire at cluster scope: another block's writes), adds them in and, but for the last round, hands the buffers
// back on block 1's red_empty once the whole warpgroup has read them; it returns true, and hands the last round's
// back once its stores of C from the same buffers have been read (pair_release). `sends` counts the warpgroup's
// rounds so far in either block (the barriers' phases); block 1 waits for the buffers only from its second round
// on, so across tiles it is already on its next tile's products while block 0 adds and stores.
template <int BN>
__device__ __forceinline__ bool pair_reduce(float (&acc)[BN / 2], unsigned char* staging, ac::mbarrier_t* red_full,
                                            ac::mbarrier_t* red_empty, int rank, unsigned& sends, int w, int t)
{
    constexpr int QUADS = BN / 8;                    // float4 of accumulators a thread
    constexpr int ROUND = 2 * EPI_BUF / (128 * 16);  // float4 a thread the buffers hold
    constexpr int ROUNDS = (QUADS + ROUND - 1) / ROUND;
    float4* buf = reinterpret_cast<float4*>(staging);
    if (rank == 1) {
        cg::cluster_group cluster = cg::this_cluster();
        unsigned* remote = reinterpret_cast<unsigned*>(cluster.map_shared_rank(buf, 0));
        auto* bar = reinterpret_cast<cuda::std::uint64_t*>(cluster.map_shared_rank(red_full, 0));
#pragma unroll
        for (int r = 0; r < ROUNDS; ++r, ++sends) {
            ac::mbarrier_wait_parity(red_empty, (sends & 1u) ^ 1u, {"gemm_wgmma", "pair buffers free", w});
            if constexpr (ASYNCCOPY_WGMMA_PAIR_BULK != 0) {
                // the round into this block's own buffers (free: block 0 has received the last copy from them),
                // then one bulk copy of them into block 0's
                const int quads = QUADS - r * ROUND < ROUND ? QUADS - r * ROUND : ROUND;
#pragma unroll
                for (int j = 0; j < ROUND && r * ROUND + j < QUADS; ++j) {
                    const int i = 4 * (r * ROUND + j);
                    buf[j * 128 + t] = make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]);
                }
                ac::fence_proxy_async_shared();  // these generic writes before the copy engine reads them
                ac::named_barrier_sync(1 + w, 128);
                if (t == 0) ac::bulk_copy_to_rank(buf, buf, 128u * 16u * quads, red_full, 0);
                continue;
            }
#pragma unroll
            for (int j = 0; j < ROUND && r * ROUND + j < QUADS; ++j) {
                const int i = 4 * (r * ROUND + j);
                const unsigned v[4] = {__float_as_uint(acc[i]), __float_as_uint(acc[i + 1]),
                                       __float_as_uint(acc[i + 2]), __float_as_uint(acc[i + 3])};
                cuda::ptx::st_async(remote + 4 * (j * 128 + t), v, bar);
            }
        }
        return false;
    }
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r, ++sends) {
        const int quads = QUADS - r * ROUND < ROUND ? QUADS - r * ROUND : ROUND;
        if (t == 0) ac::mbarrier_arrive_expect_tx(red_full, 128u * 16u * quads);
        ac::mbarrier_wait_parity_cluster(red_full, sends & 1u, {"gemm_wgmma", "pair buffers full", w});
#pragma unroll
        for (int j = 0; j < ROUND && r * ROUND + j < QUADS; ++j) {
            const int i = 4 * (r * ROUND + j);
            const float4 v = buf[j * 128 + t];
            acc[i] += v.x;
            acc[i + 1] += v.y;
            acc[i + 2] += v.z;
            acc[i + 3] += v.w;
        }
        ac::named_barrier_sync(1 + w, 128);  // every thread of the warpgroup has read the buffers
        if (r + 1 < ROUNDS && t == 0) ac::mbarrier_arrive_remote_cta(red_empty, 1);
    }
    return true;
}

// PAIR_K, block 0 after storing a tile: its last round's buffers go back to block 1 once the TMA stores that read
// C from them are done reading (thread 0 issued them).
__device__ __forceinline__ void pair_release(ac::mbarrier_t* red_empty, int t)
{
    if (t != 0) return;
    ac::bulk_wait_group_read<0>();
    ac::mbarrier_arrive_remote_cta(red_empty, 1);
}

}  // namespace

template <class T, class OutT, int BM_, int BN, int STAGES, int A_MN, int B_MN, int ALIGN>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
    gemm_wgmma(const __grid_constant__ ac::TensorMap map_a, const __grid_constant__ ac::TensorMap map_b,
               const __grid_constant__ ac::TensorMap map_c, OutT* __restrict__ c, int m, int n, int k,
               long long ldc, int splits, int sk_tiles, float* __restrict__ partials, int* __restrict__ flags)
{
    static_assert(BM_ == BM, "tiles of 128 rows: 64 per consumer warpgroup");
    static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma tiles of 64, 128 or 256 columns");
    static_assert(!SHARE_B || BN >= 128, "a shared B tile splits into two halves of whole 64-column panels");
    using Tag = typename ac::WgmmaType<T>::tag;
    constexpr int A_ELEMS = BM * BK;  // per stage
    constexpr int B_ELEMS = BN * BK;
    constexpr unsigned STAGE_BYTES = 2u * (A_ELEMS + B_ELEMS);
    constexpr unsigned PANEL_BYTES = 2u * BK * 64;  // one [BK][64] panel of an MN-major operand
    // [STAGES][A_ELEMS + B_ELEMS] two-byte elements, 128B-swizzled; every stage 1024-byte aligned (the
    // launch gives 1024 bytes of slack, so the start is rounded up here whatever the static shared
    // memory before it)
    unsigned char* base = ac::dynamic_smem<unsigned char>();
    unsigned short* smem = reinterpret_cast<unsigned short*>(base + (-ac::smem_addr(base) & 1023u));
    __shared__ ac::mbarrier_t full[STAGES], empty[STAGES];
    __shared__ ac::mbarrier_t red_full[PAIR_K ? CONSUMERS : 1], red_empty[PAIR_K ? CONSUMERS : 1];  // pair_reduce's
    static_assert(STAGES <= 32 && (STAGE_BYTES % 1024) == 0, "stages of whole 1024-byte swizzle repeats");
    if (ASYNCCOPY_WGMMA_PREFETCH_MAPS && threadIdx.x == 0) {
        ac::tensormap_prefetch(&map_a);
        ac::tensormap_prefetch(&map_b);
        if (ALIGN == 16) ac::tensormap_prefetch(&map_c);
    }
    if (threadIdx.x < STAGES) {
        ac::mbarrier_init(&full[threadIdx.x], 1);                          // the producer's arrive_expect_tx
        ac::mbarrier_init(&empty[threadIdx.x], 4 * CONSUMERS * (MULTICAST ? CLUSTER : 1));  // one arrival per
        ac::fence_barrier_init();                                          // consumer warp of the cluster
    }
    if (PAIR_K && threadIdx.x == 0) {
        for (int i = 0; i < CONSUMERS; ++i) {
            ac::mbarrier_init(&red_full[i], 1);   // block 0's arrive_expect_tx, and block 1's copied bytes
            ac::mbarrier_init(&red_empty[i], 1);  // block 0's remote arrive
        }
        ac::fence_barrier_init();
    }
    int rank = 0;
    if constexpr (CLUSTER > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();  // both blocks' barriers are initialized before either multicasts or arrives remotely
        rank = static_cast<int>(cluster.block_rank());
    } else {
        __syncthreads();
    }
    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    // units per tile-row and tile-column: tiles, or pairs of them along the shared operand's other extent
    const int cols = SHARE_A ? (tiles_n + CLUSTER - 1) / CLUSTER : tiles_n;
    const int rows = SHARE_B ? (tiles_m + CLUSTER - 1) / CLUSTER : tiles_m;
    const int tiles = rows * cols;
    const int k_blocks = (k + BK - 1) / BK;
    const unsigned first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;  // this cluster's units, in turn
    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {  // the producer
        ac::setmaxnreg_dec<PRODUCER_REGS>();
        // warp 0 walks the units, all its lanes waiting together and lane 0 issuing (a lone thread 0 beside 31
        // lanes parked at the cluster barrier would leave its warp divergent for the whole kernel)
        if (threadIdx.x < 32) {
            const bool issuer = threadIdx.x == 0;
            u64 it = 0;
            Schedule work(first, step, tiles, rows, cols, splits, k_blocks, sk_tiles, rank);
            for (Piece p; work.next(p);) {
                const int tm = p.tm, tn = p.tn;
                for (int kb = p.kb0; kb < p.kb1; ++kb, ++it) {
                    const int s = ac::stage_of<STAGES>(it);
                    __syncwarp();  // the lanes wait together, lane 0 back from its issues
                    // released by the consumers (with a pair's too, remotely)
                    ac::mbarrier_wait_parity(&empty[s], ac::phase_of<STAGES>(it) ^ 1u, {"gemm_wgmma", "empty", s});
                    if (!issuer) continue;
                    ac::mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);  // boxes off the matrix count in full
                    unsigned short* a = smem + s * (A_ELEMS + B_ELEMS);
                    unsigned short* b = a + A_ELEMS;
                    if constexpr (SHARE_A) {
                        // this block's half of A (64 rows of the tile; with A_MN = 1 its panel of 64 m) into the
                        // same place of both blocks' stage, completing on both blocks' full[s]
                        if (A_MN == 0) {
                            const int at[2] = {kb * BK, tm * BM + 64 * rank};
                            ac::tensor_load_multicast<2>(a + rank * 64 * BK, &map_a, at, &full[s], 0x3);
                        } else {
                            const int at[2] = {tm * BM + 64 * rank, kb * BK};
                            ac::tensor_load_multicast<2>(a + rank * BK * 64, &map_a, at, &full[s], 0x3);
                        }
                    } else if (A_MN == 0) {
                        const int at[2] = {kb * BK, tm * BM};
                        ac::tensor_load<2>(a, &map_a, at, &full[s]);
                    } else {
#pragma unroll
                        for (int p = 0; p < BM / 64; ++p) {
                            const int at[2] = {tm * BM + 64 * p, kb * BK};
                            ac::tensor_load<2>(a + p * BK * 64, &map_a, at, &full[s]);
                        }
                    }
                    if constexpr (SHARE_B) {
                        // this block's half of B (BN / 2 of its columns: with B_MN = 1 half of its panels)
                        // into the same place of both blocks' stage
                        if (B_MN == 0) {
                            const int at[2] = {kb * BK, tn * BN + BN / 2 * rank};
                            ac::tensor_load_multicast<2>(b + rank * BN / 2 * BK, &map_b, at, &full[s], 0x3);
                        } else {
#pragma unroll
                            for (int q = 0; q < BN / 128; ++q) {
                                const int p = rank * (BN / 128) + q;
                                const int at[2] = {tn * BN + 64 * p, kb * BK};
                                ac::tensor_load_multicast<2>(b + p * BK * 64, &map_b, at, &full[s], 0x3);
                            }
                        }
                    } else if (B_MN == 0) {
                        const int at[2] = {kb * BK, tn * BN};
                        ac::tensor_load<2>(b, &map_b, at, &full[s]);
                    } else {
#pragma unroll
                        for (int p = 0; p < BN / 64; ++p) {
                            const int at[2] = {tn * BN + 64 * p, kb * BK};
                            ac::tensor_load<2>(b + p * BK * 64, &map_b, at, &full[s]);
                        }
                    }
                }
            }
        }
        if constexpr (CLUSTER == 1) return;
        cg::this_cluster().sync();  // no block leaves while its pair may still write into it or arrive on it
        return;
    }

    // the consumers: warpgroup w = 0, 1 computes rows 64w .. 64w + 63 of each tile
    ac::setmaxnreg_inc<CONSUMER_REGS>();
    const int w = warpgroup - 1;
    const int t = threadIdx.x % 128;
    // [CONSUMERS][EPI_BUFS][64][128 bytes] OutT, 128B-swizzled: each consumer's staging buffers of C for
    // the TMA stores, after the stages
    unsigned char* staging = reinterpret_cast<unsigned char*>(smem + STAGES * (A_ELEMS + B_ELEMS)) + w * EPI_BUFS * EPI_BUF;
    unsigned pair_sends = 0;  // PAIR_K: the rounds of accumulators this warpgroup's pair_reduce has passed so far
    float acc[BN / 2];
    u64 it = 0;
    unsigned stores = 0;  // this consumer's TMA stores so far: buffer stores % 2 is next
    Schedule work(first, step, tiles, rows, cols, splits, k_blocks, sk_tiles, rank);
    for (Piece p; work.next(p);) {
        const int tm = p.tm, tn = p.tn, kb0 = p.kb0, kb1 = p.kb1;
        int prev = -1;  // the stage whose wgmma group is still in flight
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
            const int s = ac::stage_of<STAGES>(it);
            // completed by this block's loads (and a pair's multicast)
            ac::mbarrier_wait_parity(&full[s], ac::phase_of<STAGES>(it), {"gemm_wgmma", "full", s});
            const unsigned short* a = smem + s * (A_ELEMS + B_ELEMS);
            const unsigned short* b = a + A_ELEMS;
            ac::accumulator_fence(acc);
            ac::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                const u64 da = A_MN == 0 ? ac::make_desc_k_major(a + w * 64 * BK + kk * 16)
                                         : ac::make_desc_mn_major(a + w * BK * 64 + kk * 16 * 64, PANEL_BYTES);
                const u64 db = B_MN == 0 ? ac::make_desc_k_major(b + kk * 16)
                                         : ac::make_desc_mn_major(b + kk * 16 * 64, PANEL_BYTES);
                ac::Wgmma<BN, Tag>::template mma<A_MN, B_MN>(acc, da, db, (kb > kb0 || kk > 0) ? 1 : 0);
            }
            ac::wgmma_commit();
            if constexpr (STAGES == 1) {
                // one stage: the producer refills it only once these products have read it
                ac::wgmma_wait<0>();
                ac::accumulator_fence(acc);
                if (lane_zero()) release_stage(empty, s, rank);
            } else {
                // keep this slice's products in flight; the previous slice's are done, so its stage is free
                ac::wgmma_wait<1>();
                ac::accumulator_fence(acc);
                if (prev >= 0 && lane_zero()) release_stage(empty, prev, rank);
                prev = s;
            }
        }
        ac::wgmma_wait<0>();
        ac::accumulator_fence(acc);
        if (prev >= 0 && lane_zero()) release_stage(empty, prev, rank);
        if (kb0 == kb1) {  // no k-block here (PAIR_K's block 0 of a one-k-block tile): this block's share is 0
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        }
        if constexpr (PAIR_K) {
            if (!pair_reduce<BN>(acc, staging, &red_full[w], &red_empty[w], rank, pair_sends, w, t)) continue;
        } else {
            // the second tile of an odd last pair: nothing to store (nor, in the stream-K region, to hand over: its
            // owner, the block of this rank in an earlier cluster, skips it alike)
            if (CLUSTER > 1 && (tn >= tiles_n || tm >= tiles_m)) continue;
            if (p.sk >= 0 && (kb0 > 0 || kb1 < k_blocks) &&
                !stream_k_fixup<BN>(acc, p, partials, flags, sk_tiles, k_blocks, w, t, rank))
                continue;  // a contributor's piece: its owner stores the tile
        }
        const int row0 = tm * BM + 64 * w;
        if constexpr (ALIGN == 16)
            store_tma<OutT, BN>(acc, &map_c, staging, tn * BN, row0, t, w, stores);
        else
            store_direct<OutT, BN, ALIGN>(acc, c + static_cast<long long>(p.split) * m * ldc, ldc, m, n, row0, tn * BN, t);
        if constexpr (PAIR_K) pair_release(&red_empty[w], t);
    }
    if constexpr (ALIGN == 16) {
        if (t == 0) ac::bulk_wait_group<0>();  // the staging buffers stay alive until the last store is done
    }
    if constexpr (CLUSTER > 1) cg::this_cluster().sync();
}
