// stream_ws.cu — the tile-stream workload (asynccopy/tile_stream.cuh) with warp specialization:
// PRODUCERS warps only copy, THREADS consumer threads only compute (asynccopy/producer_consumer.cuh
// for ws_ldgsts and ws_tma).
//
//   stream_ws_pipeline  a partitioned cuda::pipeline: make_pipeline(block, state, role); producers
//                       producer_acquire → cuda::memcpy_async (16 B per call) → producer_commit,
//                       consumers consumer_wait → compute → consumer_release (CC 8.0)
//   stream_ws_ldgsts    the low-level form: producers issue cp.async and tie their completion to the
//                       stage's full mbarrier with cp.async.mbarrier.arrive.noinc; consumers wait on
//                       full, compute, and arrive on the stage's empty mbarrier (CC 8.0)
//   stream_ws_tma       lane 0 of each producer warp issues one TMA bulk copy (its 1/PRODUCERS of the
//                       tile) with arrive.expect_tx on the full mbarrier (CC 9.0)
// Barrier protocol of ws_ldgsts / ws_tma, per stage s (tile k in stage k % STAGES, phase (k / STAGES) & 1):
//   full[s]:  ws_ldgsts: PRODUCERS * 32 arrivals, each the async arrive of one producer thread's copies;
//             ws_tma:    PRODUCERS * 32 arrivals (every producer lane, lane 0's with expect_tx) + the bytes;
//   empty[s]: THREADS arrivals, one per consumer thread after computing the tile. Producers wait on it
//             with the opposite parity, which a fresh barrier satisfies at once (buffers start empty).
// Boundary tiles: ws_ldgsts zero-fills through cp.async's source size; ws_pipeline and ws_tma copy the
// whole 16-byte chunks asynchronously and load the last < 4 valid floats with ordinary loads; the
// zero padding is written with ordinary stores. Both happen before the producer's arrive/commit
// (release), which the consumer's wait acquires.
// Constraints: TILE % (4 * THREADS) == 0; TILE / 4 % (32 * PRODUCERS) == 0; ws_tma: TILE % (4 *
// PRODUCERS) == 0. Block = 32 * PRODUCERS + THREADS threads, producers first.
// Run: asynccopy.run(x, "ws_ldgsts", stages=4, producers=2) or `asynccopy bench`.
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/producer_consumer.cuh>
#include <asynccopy/tile_stream.cuh>
#include <asynccopy/trace.cuh>
#include <asynccopy/waits.cuh>
#if __CUDA_ARCH__ >= 900
#include <asynccopy/tma.cuh>
#endif

#include <cooperative_groups.h>
#include <cuda/pipeline>

namespace ac = asynccopy;
namespace acs = asynccopy::stream;
namespace cg = cooperative_groups;
using u64 = unsigned long long;

// ---------------------------------------------------------------------------------------------
template <int PRODUCERS, int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(32 * PRODUCERS + THREADS)
    stream_ws_ldgsts(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    constexpr int PT = 32 * PRODUCERS;
    constexpr int CHUNKS = TILE / 4;  // 16-byte chunks per tile
    static_assert(CHUNKS % PT == 0, "a tile must split into whole 16-byte chunks per producer thread");
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    auto produce = [&](u64 k, int s, ac::mbarrier_t* full) {
        float* buf = smem + s * TILE;
        const u64 t = ac::tile_of_block(k);
        const u64 valid = acs::valid_elems<TILE>(t, n);
        if (valid == TILE) {  // every tile but the array's last: whole chunks
#pragma unroll 8
            for (int c = 0; c < CHUNKS / PT; ++c) {
                const int e = (threadIdx.x + c * PT) * 4;
                ac::cp_async<16, true>(buf + e, in + t * TILE + e);
            }
        } else {
            for (int c = 0; c < CHUNKS / PT; ++c) {
                const int e = (threadIdx.x + c * PT) * 4;
                acs::cp_async_chunk<16, true>(buf + e, in, t * TILE, e, valid);
            }
        }
        ac::cp_async_mbarrier_arrive_noinc(full);  // this thread's copies complete full[s] when landed
    };
    auto consume = [&](u64 k, int s, int tid) {
        acs::compute_tile<THREADS, TILE>(smem + s * TILE, out, ac::tile_of_block(k), n, intensity, tid);
    };
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::producer_consumer<PRODUCERS, THREADS, TILE, STAGES, PT>(n, produce, consume, "stream_ws_ldgsts" AC_TRACE_ARG);
    AC_TRACE_END(threadIdx.x == PT);
}

// ---------------------------------------------------------------------------------------------
#if __CUDA_ARCH__ >= 900
template <int PRODUCERS, int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(32 * PRODUCERS + THREADS)
    stream_ws_tma(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    constexpr int PT = 32 * PRODUCERS;
    constexpr int PIECE = TILE / PRODUCERS;  // floats per producer warp
    static_assert(TILE % (4 * PRODUCERS) == 0, "each producer warp copies whole 16-byte chunks");
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    auto produce = [&](u64 k, int s, ac::mbarrier_t* full) {
        const u64 t = ac::tile_of_block(k);
        const u64 valid = acs::valid_elems<TILE>(t, n);
        const u64 lo = static_cast<u64>(warp) * PIECE;                       // this warp's piece: [lo, lo + PIECE)
        const u64 mine = valid > lo ? (valid - lo < PIECE ? valid - lo : PIECE) : 0;  // valid floats in it
        const u64 whole = mine & ~3ull;                                      // in whole 16-byte chunks
        float* buf = smem + s * TILE + lo;
        if (mine < PIECE)  // the block's last tile: partial chunk and padding by this warp's lanes
            acs::fill_tail<PIECE>(buf, in + t * TILE + lo, whole, mine, lane, 32);
        // Every lane arrives (full[s] counts 32 per producer warp), so each lane's tail stores are released
        // by its own arrive: racecheck follows that, not a __syncwarp before lane 0's arrive.
        if (lane == 0) {
            ac::mbarrier_arrive_expect_tx(full, static_cast<unsigned>(whole * sizeof(float)));
            if (whole) ac::bulk_load(buf, in + t * TILE + lo, static_cast<unsigned>(whole * sizeof(float)), full);
        } else {
            ac::mbarrier_arrive(full);
        }
    };
    auto consume = [&](u64 k, int s, int tid) {
        acs::compute_tile<THREADS, TILE>(smem + s * TILE, out, ac::tile_of_block(k), n, intensity, tid);
    };
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::producer_consumer<PRODUCERS, THREADS, TILE, STAGES, 32 * PRODUCERS>(n, produce, consume, "stream_ws_tma"
                                                                         AC_TRACE_ARG);
    AC_TRACE_END(threadIdx.x == PT);
}
#endif

// ---------------------------------------------------------------------------------------------
template <int PRODUCERS, int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(32 * PRODUCERS + THREADS)
    stream_ws_pipeline(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    constexpr int PT = 32 * PRODUCERS;
    constexpr int CHUNKS = TILE / 4;
    static_assert(CHUNKS % PT == 0, "a tile must split into whole 16-byte chunks per producer thread");
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
    const bool producer = threadIdx.x < PT;
    auto pipe = cuda::make_pipeline(cg::this_thread_block(), &state,
                                    producer ? cuda::pipeline_role::producer : cuda::pipeline_role::consumer);
    const u64 my_tiles = ac::tiles_of_block((n + TILE - 1) / TILE);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    if (producer) {
        for (u64 k = 0; k < my_tiles; ++k) {
            pipe.producer_acquire();  // the stage's previous tile has been released by every consumer
            AC_TRACE(k, ISSUED);
            float* buf = smem + ac::stage_of<STAGES>(k) * TILE;
            const u64 t = ac::tile_of_block(k);
            const u64 valid = acs::valid_elems<TILE>(t, n);
            if (valid == TILE) {
#pragma unroll 8
                for (int c = 0; c < CHUNKS / PT; ++c) {
                    const int e = (threadIdx.x + c * PT) * 4;
                    cuda::memcpy_async(buf + e, in + t * TILE + e, cuda::aligned_size_t<16>(16), pipe);
                }
            } else {  // the block's last tile: whole chunks async, the partial one loaded, zeros after
                // (by hand, not through fill_tail: both ways of writing this with fill_tail changed
                // the register allocation and schedule of the whole kernel, the consumers' compute loop
                // included, for some stage counts)
                for (int c = 0; c < CHUNKS / PT; ++c) {
                    const int e = (threadIdx.x + c * PT) * 4;
                    if (e + 4 <= valid)
                        cuda::memcpy_async(buf + e, in + t * TILE + e, cuda::aligned_size_t<16>(16), pipe);
                    else
                        for (int i = 0; i < 4; ++i) buf[e + i] = e + i < valid ? in[t * TILE + e + i] : 0.0f;
                }
            }
            pipe.producer_commit();
        }
    } else {
        const int tid = static_cast<int>(threadIdx.x) - PT;
        for (u64 k = 0; k < my_tiles; ++k) {
            ac::pipeline_consumer_wait(pipe, {"stream_ws_pipeline", "pipeline (oldest stage)", -1});
            AC_TRACE_BY(tid == 0, k, READY);
            AC_TRACE_BY(tid == 0, k, COMPUTE_START);
            acs::compute_tile<THREADS, TILE>(smem + ac::stage_of<STAGES>(k) * TILE, out, ac::tile_of_block(k), n,
                                             intensity, tid);
            AC_TRACE_BY(tid == 0, k, COMPUTE_END);
            pipe.consumer_release();
        }
    }
    AC_TRACE_END(threadIdx.x == PT);
}
