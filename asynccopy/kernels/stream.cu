// stream.cu — the tile-stream workload (asynccopy/tile_stream.cuh), one kernel per mechanism.
//
// What: every kernel computes the same function of the same input; they differ only in how a tile
// gets from global to shared memory and how many tiles are in flight:
//   stream_sync          ordinary loads, __syncthreads, one buffer (the baseline: nothing overlaps)
//   stream_sync_double   ordinary loads staged through registers into a second buffer
//   stream_ldgsts        inline-PTX cp.async + commit_group / wait_group<STAGES-2>, STAGES buffers
//   stream_pipeline      cuda::pipeline (block scope) + cuda::memcpy_async
//   stream_barrier       cuda::memcpy_async completed on one cuda::barrier per stage
//   stream_cg            cooperative_groups::memcpy_async + cg::wait_prior
//   stream_primitives    __pipeline_memcpy_async / __pipeline_commit / __pipeline_wait_prior
// How: a persistent grid; block b computes tiles b, b + gridDim.x, ... . With STAGES buffers, the
// copies of the next STAGES-1 tiles are in flight while the current tile is computed. The four
// cp.async-group-style kernels (ldgsts, barrier, cg, primitives) share one loop,
// asynccopy/group_pipeline.cuh, and differ only in their issue / wait functors.
// Boundary tiles: cp.async-based kernels zero-fill through the copy's source size (src pointer
// clamped to the array base when no byte is read); collective-copy kernels copy the valid prefix
// asynchronously and zero the rest with ordinary stores. Commits always happen in converged
// control flow, empty ones included.
// Constraints: TILE % (4 * THREADS) == 0; dynamic shared memory = STAGES * TILE * 4 bytes.
// Run: asynccopy.stream.run(x, "ldgsts", stages=4) or `asynccopy bench`.
#include <asynccopy/group_pipeline.cuh>
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tile_stream.cuh>
#include <asynccopy/trace.cuh>
#include <asynccopy/waits.cuh>

#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cuda_pipeline_primitives.h>

namespace ac = asynccopy;
namespace acs = asynccopy::stream;
namespace cg = cooperative_groups;
using u64 = unsigned long long;

// ---------------------------------------------------------------------------------------------
// sync: load (registers → shared), barrier, compute, barrier. Nothing overlaps inside a block.
template <int THREADS, int TILE>
__global__ void __launch_bounds__(THREADS) stream_sync(const float* __restrict__ in, float* __restrict__ out,
                                                       u64 n, int intensity AC_TRACE_PARAM)
{
    float* tile = ac::dynamic_smem<float>();  // [TILE] f32
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    acs::TileRegs<THREADS, TILE> regs;
    AC_TRACE_BEGIN(threadIdx.x == 0);
    for (u64 k = 0; k < my_tiles; ++k) {
        const u64 t = ac::tile_of_block(k);
        AC_TRACE(k, ISSUED);
        acs::load_regs<THREADS, TILE>(regs, in, t, n);
        acs::store_regs<THREADS, TILE>(tile, regs);
        __syncthreads();  // the tile is complete and visible to every thread
        AC_TRACE(k, READY);
        AC_TRACE(k, COMPUTE_START);
        acs::compute_tile<THREADS, TILE>(tile, out, t, n, intensity);
        AC_TRACE(k, COMPUTE_END);
        __syncthreads();  // every thread is done reading before the next load overwrites it
        AC_TRACE(k, RELEASED);
    }
    AC_TRACE_END(threadIdx.x == 0);
}

// ---------------------------------------------------------------------------------------------
// sync_double: the next tile's global loads are issued into registers before the current tile is
// computed, and stored into the other buffer afterwards: the classic software double buffering.
template <int THREADS, int TILE>
__global__ void __launch_bounds__(THREADS)
    stream_sync_double(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [2][TILE] f32
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    if (my_tiles == 0) return;
    acs::TileRegs<THREADS, TILE> regs;
    AC_TRACE_BEGIN(threadIdx.x == 0);
    AC_TRACE(0, ISSUED);
    acs::load_regs<THREADS, TILE>(regs, in, ac::tile_of_block(0), n);
    acs::store_regs<THREADS, TILE>(smem, regs);
    __syncthreads();
    for (u64 k = 0; k < my_tiles; ++k) {
        const bool more = k + 1 < my_tiles;
        AC_TRACE(k, READY);
        if (more) {
            AC_TRACE(k + 1, ISSUED);
            acs::load_regs<THREADS, TILE>(regs, in, ac::tile_of_block(k + 1), n);
        }
        AC_TRACE(k, COMPUTE_START);
        acs::compute_tile<THREADS, TILE>(smem + (k & 1) * TILE, out, ac::tile_of_block(k), n, intensity);
        AC_TRACE(k, COMPUTE_END);
        // Buffer (k+1)&1 was last read in iteration k-1, which ended with a barrier.
        if (more) acs::store_regs<THREADS, TILE>(smem + ((k + 1) & 1) * TILE, regs);
        __syncthreads();
        AC_TRACE(k, RELEASED);
    }
    AC_TRACE_END(threadIdx.x == 0);
}

// ---------------------------------------------------------------------------------------------
// The compute functor of group_pipeline (asynccopy/group_pipeline.cuh): tile k of the block, read
// from stage s of the [STAGES][TILE] buffers at smem.
template <int THREADS, int TILE>
__device__ __forceinline__ auto compute_stage(float* smem, float* __restrict__ out, u64 n, int intensity)
{
    return [=](u64 k, int s) {
        acs::compute_tile<THREADS, TILE>(smem + s * TILE, out, ac::tile_of_block(k), n, intensity);
    };
}

// ---------------------------------------------------------------------------------------------
// ldgsts: each thread copies its VEC-byte chunks of a tile with cp.async and commits one group
// per tile — an empty group for a tile past the block's range, so group counts stay uniform.
template <int THREADS, int TILE, int VEC, bool BYPASS_L1>
__device__ __forceinline__ void issue_tile_ldgsts(float* buf, const float* __restrict__ in, u64 k,
                                                  u64 my_tiles, u64 n)
{
    constexpr int EPC = VEC / 4;  // elements per chunk
    constexpr int CHUNKS = TILE / EPC;
    static_assert(CHUNKS % THREADS == 0, "a tile must split into whole chunks per thread");
    if (k < my_tiles) {
        const u64 t = ac::tile_of_block(k);
        const u64 start = t * TILE;
        const u64 valid = acs::valid_elems<TILE>(t, n);
        if (valid == TILE) {  // every tile but the array's last: whole chunks, no source-size arithmetic
#pragma unroll
            for (int c = 0; c < CHUNKS / THREADS; ++c) {
                const int e = (threadIdx.x + c * THREADS) * EPC;
                ac::cp_async<VEC, BYPASS_L1>(buf + e, in + start + e);
            }
        } else {
#pragma unroll
            for (int c = 0; c < CHUNKS / THREADS; ++c) {
                const int e = (threadIdx.x + c * THREADS) * EPC;
                acs::cp_async_chunk<VEC, BYPASS_L1>(buf + e, in, start, e, valid);
            }
        }
    }
    ac::commit_group();
}

template <int THREADS, int TILE, int STAGES, int VEC, bool BYPASS_L1>
__global__ void __launch_bounds__(THREADS)
    stream_ldgsts(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::group_pipeline<STAGES, ac::IssuePolicy::every_index>(
        my_tiles,
        [&](u64 k, int s) { issue_tile_ldgsts<THREADS, TILE, VEC, BYPASS_L1>(smem + s * TILE, in, k, my_tiles, n); },
        [&](u64, int) {
            ac::wait_group<ac::lag_of<STAGES>()>();  // this thread's copies of the tile have landed
            __syncthreads();  // ... and every other thread's; the previous tile is fully read
        },
        compute_stage<THREADS, TILE>(smem, out, n, intensity) AC_TRACE_ARG);
    ac::wait_all();  // nothing may be in flight into shared memory when the block exits
    AC_TRACE_END(threadIdx.x == 0);
}

// ---------------------------------------------------------------------------------------------
// Collective copies (cuda::memcpy_async / cg::memcpy_async) cover the valid prefix of a tile;
// the zero padding of a boundary tile is written with ordinary stores (disjoint bytes).
template <int THREADS, int TILE, int ALIGN, class Group, class Completion>
__device__ __forceinline__ void collective_copy(const Group& group, float* buf, const float* __restrict__ in,
                                                u64 t, u64 n, Completion& completion)
{
    const u64 valid = acs::valid_elems<TILE>(t, n);
    if (valid == TILE) {
        cuda::memcpy_async(group, buf, in + t * TILE, cuda::aligned_size_t<ALIGN>(TILE * sizeof(float)), completion);
    } else {
        if (valid > 0)
            cuda::memcpy_async(group, buf, in + t * TILE, cuda::aligned_size_t<4>(valid * sizeof(float)),
                               completion);
        acs::zero_tail<THREADS, TILE>(buf, valid);
    }
}

// pipeline: cuda::pipeline with STAGES slots; producer_acquire / producer_commit /
// consumer_wait / consumer_release. A block-scope pipeline's consumer_wait completes only when every
// thread's copies of the stage have landed, so no extra barrier is needed for cross-thread reads.
template <int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS)
    stream_pipeline(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
    auto cta = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(cta, &state);
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    u64 fetch = 0;
    AC_TRACE_BEGIN(threadIdx.x == 0);
    for (u64 k = 0; k < my_tiles; ++k) {
        #pragma unroll 1  // one loop for every stage count: the same code, the same schedule (pipeline.cuh)
        for (; fetch < my_tiles && fetch < k + STAGES; ++fetch) {
            pipe.producer_acquire();  // waits until the stage's previous tile was released
            AC_TRACE(fetch, ISSUED);
            collective_copy<THREADS, TILE, 16>(cta, smem + ac::stage_of<STAGES>(fetch) * TILE, in,
                                               ac::tile_of_block(fetch), n, pipe);
            pipe.producer_commit();
        }
        ac::pipeline_consumer_wait(pipe, {"stream_pipeline", "pipeline (oldest stage)", -1});
        AC_TRACE(k, READY);
        AC_TRACE(k, COMPUTE_START);
        acs::compute_tile<THREADS, TILE>(smem + ac::stage_of<STAGES>(k) * TILE, out, ac::tile_of_block(k), n,
                                         intensity);
        AC_TRACE(k, COMPUTE_END);
        pipe.consumer_release();
        AC_TRACE(k, RELEASED);
    }
    AC_TRACE_END(threadIdx.x == 0);
}

// barrier: cuda::memcpy_async completed on a block-scope cuda::barrier, one barrier per stage.
// With ALIGN 16 on sm_90, libcu++ turns this into a bulk copy (TMA, UBLKCP) with transaction
// bytes; with ALIGN 4 or 8, or below sm_90, into cp.async tied to the barrier.
#pragma nv_diag_suppress static_var_with_dynamic_init
template <int THREADS, int TILE, int STAGES, int ALIGN>
__global__ void __launch_bounds__(THREADS)
    stream_barrier(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    using barrier_t = cuda::barrier<cuda::thread_scope_block>;
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    __shared__ barrier_t bars[STAGES];        // bars[s] completes when tile in stage s has landed
    auto cta = cg::this_thread_block();
    static_assert(STAGES <= 32, "thread s of the first warp sets up stage s");
    if (threadIdx.x < STAGES) init(&bars[threadIdx.x], THREADS);  // thread s sets up stage s
    __syncthreads();
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::group_pipeline<STAGES, ac::IssuePolicy::real_tiles>(
        my_tiles,
        [&](u64 k, int s) {
            collective_copy<THREADS, TILE, ALIGN>(cta, smem + s * TILE, in, ac::tile_of_block(k), n, bars[s]);
        },
        [&](u64, int s) {
            // All threads arrive: tile k has landed and every thread has finished computing tile k-1.
            ac::barrier_arrive_and_wait(bars[s], {"stream_barrier", "bars", s});
        },
        compute_stage<THREADS, TILE>(smem, out, n, intensity) AC_TRACE_ARG);
    AC_TRACE_END(threadIdx.x == 0);
}

// ---------------------------------------------------------------------------------------------
// cg: cooperative_groups::memcpy_async; every call is one batch, cg::wait_prior<N> waits until at
// most N batches are pending and then synchronizes the group. No empty batch exists in this API,
// so the last tiles of a block wait for everything (cg::wait) instead of wait_prior<STAGES-2>.
template <int THREADS, int TILE>
__device__ __forceinline__ void issue_tile_cg(const cg::thread_block& cta, float* buf, const float* __restrict__ in,
                                              u64 t, u64 n)
{
    const u64 valid = acs::valid_elems<TILE>(t, n);
    if (valid == TILE) {
        cg::memcpy_async(cta, buf, in + t * TILE, cuda::aligned_size_t<16>(TILE * sizeof(float)));
    } else {
        if (valid > 0) cg::memcpy_async(cta, buf, in + t * TILE, cuda::aligned_size_t<4>(valid * sizeof(float)));
        acs::zero_tail<THREADS, TILE>(buf, valid);
    }
}

// The one-stage loop's block barrier, as the group's own: cg's barrier.sync rather than bar.sync.
struct CtaSync {
    __device__ void operator()() const { cg::thread_block::sync(); }
};

template <int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS)
    stream_cg(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    auto cta = cg::this_thread_block();
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::group_pipeline<STAGES, ac::IssuePolicy::real_tiles, CtaSync>(
        my_tiles,
        [&](u64 k, int s) { issue_tile_cg<THREADS, TILE>(cta, smem + s * TILE, in, ac::tile_of_block(k), n); },
        [&](u64 k, int) {
            constexpr int N = ac::lag_of<STAGES>();
            if (k + N < my_tiles)
                cg::wait_prior<N>(cta);  // batches k+1 .. k+N may still fly
            else
                cg::wait(cta);  // fewer batches follow tile k: drain them all
        },
        compute_stage<THREADS, TILE>(smem, out, n, intensity) AC_TRACE_ARG);
    AC_TRACE_END(threadIdx.x == 0);
}

// ---------------------------------------------------------------------------------------------
// primitives: __pipeline_memcpy_async(dst, src, 16, zfill) per 16-byte chunk, __pipeline_commit()
// per tile (empty past the range), __pipeline_wait_prior(STAGES-2) and a barrier.
template <int THREADS, int TILE>
__device__ __forceinline__ void issue_tile_primitives(float* buf, const float* __restrict__ in, u64 k, u64 my_tiles,
                                                      u64 n)
{
    if (k < my_tiles) {
        const u64 t = ac::tile_of_block(k);
        const u64 start = t * TILE;
        const u64 valid = acs::valid_elems<TILE>(t, n);
        if (valid == TILE) {  // a constant zfill: a run-time one compiles to a 17-way switch per copy
#pragma unroll
            for (int c = 0; c < TILE / 4 / THREADS; ++c) {
                const int e = (threadIdx.x + c * THREADS) * 4;
                __pipeline_memcpy_async(buf + e, in + start + e, 16, 0);
            }
        } else {
#pragma unroll
            for (int c = 0; c < TILE / 4 / THREADS; ++c) {
                const int e = (threadIdx.x + c * THREADS) * 4;
                const acs::ChunkSource from = acs::chunk_source<4>(in, start, e, valid);
                if (from.bytes == 0 || from.bytes == 16) {
                    __pipeline_memcpy_async(buf + e, from.src, 16, 16 - from.bytes);
                } else {  // the chunk the array's end cuts, as 4-byte copies (see acs::cp_async_chunk)
                    for (int i = 0; i < 4; ++i) {
                        const acs::ChunkSource one = acs::chunk_source<1>(in, start, e + i, valid);
                        __pipeline_memcpy_async(buf + e + i, one.src, 4, 4 - one.bytes);
                    }
                }
            }
        }
    }
    __pipeline_commit();
}

template <int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS)
    stream_primitives(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    ac::group_pipeline<STAGES, ac::IssuePolicy::every_index>(
        my_tiles,
        [&](u64 k, int s) { issue_tile_primitives<THREADS, TILE>(smem + s * TILE, in, k, my_tiles, n); },
        [&](u64, int) {
            __pipeline_wait_prior(ac::lag_of<STAGES>());  // this thread's copies of the tile have landed
            __syncthreads();                                  // ... and every other thread's
        },
        compute_stage<THREADS, TILE>(smem, out, n, intensity) AC_TRACE_ARG);
    __pipeline_wait_prior(0);  // nothing may be in flight into shared memory when the block exits
    AC_TRACE_END(threadIdx.x == 0);
}
