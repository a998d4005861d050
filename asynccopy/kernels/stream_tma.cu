// stream_tma.cu — the tile-stream workload (asynccopy/tile_stream.cuh) moved by TMA (CC 9.0).
//
//   stream_tma_1d           one stage; thread 0 issues cuda::device::memcpy_async_tx and
//                           barrier_arrive_tx on a block-scope cuda::barrier, the others arrive;
//                           all wait: the low-level 1D bulk-copy form with a single buffer
//   stream_tma_1d_pipeline  warp 0 is the producer: one lane keeps STAGES bulk copies in flight
//                           (full / empty mbarriers, phase parity); THREADS consumer threads compute
//   stream_tma_2d           the same pipeline with 2D tensor copies: the array seen as rows of 64
//                           floats, a tile = a box of TILE/64 rows through a __grid_constant__ map;
//                           rows past the array come back zero-filled by TMA
// Boundary tiles: bulk copies move whole 16-byte chunks; the last < 4 valid floats and the zero
// padding are written with ordinary stores before the arrive that publishes the tile (tma_2d: the
// partial last row is written by the consumers after the tile landed, then a named barrier).
// Constraints: TILE % (4 * THREADS) == 0; tma_2d: TILE % 64 == 0, TILE / 64 <= 256, n >= 64.
// Run: asynccopy.run(x, "tma_1d_pipeline", stages=4) or `asynccopy bench`.
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/producer_consumer.cuh>
#include <asynccopy/tile_stream.cuh>
#include <asynccopy/tma.cuh>
#include <asynccopy/trace.cuh>
#include <asynccopy/waits.cuh>

#include <cuda/barrier>
#include <cuda/std/utility>

namespace ac = asynccopy;
namespace acs = asynccopy::stream;
using u64 = unsigned long long;

// ---------------------------------------------------------------------------------------------
#pragma nv_diag_suppress static_var_with_dynamic_init
template <int THREADS, int TILE>
__global__ void __launch_bounds__(THREADS) stream_tma_1d(const float* __restrict__ in, float* __restrict__ out, u64 n,
                                                         int intensity AC_TRACE_PARAM)
{
    using barrier_t = cuda::barrier<cuda::thread_scope_block>;
    float* tile = ac::dynamic_smem<float>();  // [TILE] f32
    __shared__ barrier_t bar;                 // completes when all threads arrived and the bytes landed
    if (threadIdx.x == 0) init(&bar, THREADS);
    __syncthreads();
    const u64 my_tiles = ac::tiles_of_block((n + TILE - 1) / TILE);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    for (u64 k = 0; k < my_tiles; ++k) {
        const u64 t = ac::tile_of_block(k);
        const u64 valid = acs::valid_elems<TILE>(t, n);
        const u64 whole = valid & ~3ull;  // floats in whole 16-byte chunks: the bulk copy's share
        __syncthreads();                  // every thread has finished reading the previous tile
        if (k) AC_TRACE(k - 1, RELEASED);
        AC_TRACE(k, ISSUED);
        acs::fill_tail<TILE>(tile, in + t * TILE, whole, valid, threadIdx.x, THREADS);
        barrier_t::arrival_token token;
        if (threadIdx.x == 0) {
            if (whole)
                cuda::device::memcpy_async_tx(tile, in + t * TILE, cuda::aligned_size_t<16>(whole * sizeof(float)), bar);
            token = cuda::device::barrier_arrive_tx(bar, 1, whole * sizeof(float));
        } else {
            token = bar.arrive();
        }
        ac::barrier_wait(bar, cuda::std::move(token), {"stream_tma_1d", "bar", -1});
        AC_TRACE(k, READY);
        AC_TRACE(k, COMPUTE_START);
        acs::compute_tile<THREADS, TILE>(tile, out, t, n, intensity);
        AC_TRACE(k, COMPUTE_END);
    }
    AC_TRACE_END(threadIdx.x == 0);
}

// ---------------------------------------------------------------------------------------------
// The 1D and 2D pipelines: one producer warp (lane 0 issues the copy) and THREADS computing threads on
// asynccopy/producer_consumer.cuh's full / empty mbarriers. tma_1d_pipeline's full[s] takes the producer
// warp's 32 arrivals (lane 0's arrive_expect_tx among them) plus the copy's bytes; tma_2d's, thread 0's
// one arrival plus the box's bytes.
template <int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS + 32)
    stream_tma_1d_pipeline(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    const int lane = threadIdx.x % 32;
    auto produce = [&](u64 k, int s, ac::mbarrier_t* full) {
        float* buf = smem + s * TILE;
        const u64 t = ac::tile_of_block(k);
        const u64 valid = acs::valid_elems<TILE>(t, n);
        const u64 whole = valid & ~3ull;
        if (valid < TILE)  // the block's last tile: tail and padding by the producer warp's lanes
            acs::fill_tail<TILE>(buf, in + t * TILE, whole, valid, lane, 32);
        // Every lane arrives (full[s] counts the warp's 32): a lane's tail stores are released by its own
        // arrive, a synchronization compute-sanitizer's racecheck follows (it does not follow a
        // __syncwarp before lane 0's arrive, which the memory model makes equally sound).
        if (lane == 0) {
            ac::mbarrier_arrive_expect_tx(full, static_cast<unsigned>(whole * sizeof(float)));
            if (whole) ac::bulk_load(buf, in + t * TILE, static_cast<unsigned>(whole * sizeof(float)), full);
        } else {
            ac::mbarrier_arrive(full);
        }
    };
    auto consume = [&](u64 k, int s, int tid) {
        acs::compute_tile<THREADS, TILE>(smem + s * TILE, out, ac::tile_of_block(k), n, intensity, tid);
    };
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::producer_consumer<1, THREADS, TILE, STAGES, 32>(n, produce, consume, "stream_tma_1d_pipeline" AC_TRACE_ARG);
    AC_TRACE_END(threadIdx.x == 32);
}

template <int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS + 32)
    stream_tma_2d(const __grid_constant__ ac::TensorMap map, const float* __restrict__ in, float* __restrict__ out,
                  u64 n, int intensity AC_TRACE_PARAM)
{
    constexpr int ROW = 64;            // floats per row of the 2D view
    constexpr int ROWS = TILE / ROW;   // box: {ROW, ROWS}, innermost first
    static_assert(TILE % ROW == 0 && ROWS <= 256, "a tile is a box of at most 256 rows of 64 floats");
    float* smem = ac::dynamic_smem<float>();  // [STAGES][ROWS][ROW] f32, unswizzled
    const u64 full_rows = n / ROW, rem = n % ROW;
    auto produce = [&](u64 k, int s, ac::mbarrier_t* full) {
        if (threadIdx.x == 0) {
            ac::mbarrier_arrive_expect_tx(full, TILE * sizeof(float));  // OOB-filled rows count too
            const int coords[2] = {0, static_cast<int>(ac::tile_of_block(k) * ROWS)};
            ac::tensor_load<2>(smem + s * TILE, &map, coords, full);
        }
    };
    auto consume = [&](u64 k, int s, int tid) {
        float* buf = smem + s * TILE;
        const u64 t = ac::tile_of_block(k);
        if (rem && full_rows >= t * ROWS && full_rows < (t + 1) * ROWS) {
            // The partial last row is outside the map (TMA wrote zeros): fill in its valid floats.
            for (u64 i = tid; i < rem; i += THREADS) buf[(full_rows - t * ROWS) * ROW + i] = in[full_rows * ROW + i];
            ac::named_barrier_sync(1, THREADS);
        }
        acs::compute_tile<THREADS, TILE>(buf, out, t, n, intensity, tid);
    };
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::producer_consumer<1, THREADS, TILE, STAGES, 1>(n, produce, consume, "stream_tma_2d" AC_TRACE_ARG);
    AC_TRACE_END(threadIdx.x == 32);
}
