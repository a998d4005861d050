// asynccopy/group_pipeline.cuh — the loop of a multistage pipeline in which every thread of the block
// both copies and computes (cp.async groups, collective copies, a barrier per stage), for the
// tile-stream kernels and for your own. The warp-specialized form, where some warps only copy, is
// asynccopy/producer_consumer.cuh.
//
// What: a block walks its tiles k = 0 .. my_tiles - 1 through STAGES shared-memory buffers, tile k
// in stage s = stage_of<STAGES>(k) (asynccopy/pipeline.cuh). With STAGES >= 2 the copies of the next
// STAGES - 1 tiles are in flight while tile k is computed; with STAGES == 1 a tile is copied, waited
// for and computed in turn. group_pipeline owns the schedule (prologue, steady state, one-stage
// loop) and the trace events; three functors, called by every thread of the block, own the mechanism:
//
//   issue(k, s)           start the copies of tile k into stage s
//   wait(k, s)            return once tile k (in stage s) is visible to every thread AND every thread
//                         has finished compute(k - 1, ...): a block-wide barrier ends it, because the
//                         issue that follows refills the buffer tile k - 1 was read from. At most
//                         lag_of<STAGES>() tiles issued after tile k may still be in flight then
//                         (STAGES - 2, or 0 for one stage): a compile-time count, the N of
//                         wait_group<N> / wait_prior<N>
//   compute(k, s)         read tile k from stage s
//
// Protocol, STAGES >= 2:
//   prologue:  issue(i, i) for i = 0 .. STAGES - 2;
//   tile k:    wait(k, s) → issue(k + STAGES - 1, its stage) → compute(k, s).
//   The refill is issued before the compute, so STAGES - 1 tiles are in flight during compute(k).
// Protocol, STAGES == 1, tile k: BlockSync{}() (every thread has finished computing tile k - 1)
//   → issue(k, 0) → wait(k, 0) → compute(k, 0). BlockSync is __syncthreads() unless the
//   kernel names its own block barrier (a cooperative-groups kernel: its group's sync()).
// Indices past the block's last tile (k >= my_tiles), chosen by POLICY:
//   IssuePolicy::every_index  issue() is called for them too, in the prologue and the steady state,
//       and must commit an EMPTY group there. cp.async groups (commit_group / wait_group<N>,
//       __pipeline_commit / __pipeline_wait_prior(N)) are counted per thread, and a wait means "all
//       but my N most recent groups": with exactly one group per index, empty or not, tile k is
//       always STAGES - 2 groups behind the newest, so one compile-time N serves every tile, the
//       block's last ones included. Commits must be reached in converged control flow.
//   IssuePolicy::real_tiles   issue() is called only for k < my_tiles. A collective copy
//       (cuda::memcpy_async on a group, cooperative_groups::memcpy_async) has no empty form: every
//       call copies bytes, completed on the stage's barrier (whose phases are counted per tile) or
//       as a batch that the next cg::wait_prior counts. Past the last tile there is nothing to copy
//       and no wait() to consume a barrier phase, so only real tiles are issued; a wait() that
//       counts batches must then drain everything (cg::wait) where fewer than N tiles follow
//       tile k (k + N >= my_tiles).
// Every stage count runs the same compute loop: the prologue stays a loop (#pragma unroll 1) and
// stages come from stage_of (a multiply-high by a constant-memory multiplier), so stage counts
// differ only in immediates. A division by a compile-time stage count gave each class of stage counts
// its own register allocation and schedule, and on an H200 some ran the compute 5-18% slower than
// others at high intensity (2, 4, 8 stages against 3, 5, 6; pipeline.cuh). The CPU test
// test_every_stage_count_runs_the_same_compute_loop checks it for the stage counts it lists.
// Traced builds (-DASYNCCOPY_TRACE=1; pass the kernel's buffer with AC_TRACE_ARG) record, from thread
// 0: `issued` before issue() (with every_index also for indices past the last tile, which
// asynccopy.trace ignores), `ready` after wait(), `released` of tile k - 1 after the barrier that
// proves every thread has left its compute, `compute_start` / `compute_end` around compute().
// Constraints: every thread of the block calls group_pipeline with the same my_tiles; the functors
// decide where stage s lives (e.g. smem + s * TILE); whatever may still fly after the loop (the empty
// groups of every_index) is the caller's to drain before the block exits (wait_all /
// __pipeline_wait_prior(0)).
//
// Use, e.g. cp.async of this thread's chunks of a tile of TILE floats:
//   float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE]
//   const u64 my_tiles = ac::tiles_of_block(n_tiles);
//   ac::group_pipeline<STAGES, ac::IssuePolicy::every_index>(
//       my_tiles,
//       [&](u64 k, int s) {
//           if (k < my_tiles) { /* ac::cp_async<16>(smem + s * TILE + e, src, bytes) per chunk */ }
//           ac::commit_group();  // empty past the last tile
//       },
//       [&](u64, int) {
//           ac::wait_group<ac::lag_of<STAGES>()>();  // this thread's copies of tile k landed
//           __syncthreads();                          // everyone's; tile k - 1 is fully read
//       },
// (The functors are plain lambdas: NVRTC 13.0 takes a generic lambda, one with an `auto` parameter,
// for a host function and refuses it in device code.)
//       [&](u64 k, int s) { /* compute on smem + s * TILE */ } AC_TRACE_ARG);
//   ac::wait_all();  // nothing in flight into shared memory when the block exits
#pragma once

#include <asynccopy/pipeline.cuh>
#include <asynccopy/trace.cuh>

namespace asynccopy {

// How group_pipeline treats the tile indices past the block's last tile (see above).
enum class IssuePolicy {
    every_index,  // issue() for every index: an empty commit past the last tile (cp.async groups)
    real_tiles,   // issue() only for k < my_tiles (collective copies, barriers)
};

// How many tiles issued after the awaited one may still be in flight when wait() returns.
template <int STAGES>
__host__ __device__ constexpr int lag_of()
{
    return STAGES >= 2 ? STAGES - 2 : 0;
}

// BlockSync by default: the one-stage loop's block-wide barrier.
struct SyncThreads {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

template <int STAGES, IssuePolicy POLICY, class BlockSync = SyncThreads, class Issue, class Wait, class Compute>
__device__ __forceinline__ void group_pipeline(unsigned long long my_tiles, Issue issue, Wait wait, Compute compute
                                               AC_TRACE_PARAM)
{
    static_assert(STAGES >= 1, "a pipeline has at least one stage");
    using u64 = unsigned long long;
    constexpr bool EVERY = POLICY == IssuePolicy::every_index;
    if constexpr (STAGES == 1) {
        for (u64 k = 0; k < my_tiles; ++k) {
            BlockSync{}();  // every thread has finished reading the previous tile
            if (k) AC_TRACE(k - 1, RELEASED);
            AC_TRACE(k, ISSUED);
            issue(k, 0);
            wait(k, 0);
            AC_TRACE(k, READY);
            AC_TRACE(k, COMPUTE_START);
            compute(k, 0);
            AC_TRACE(k, COMPUTE_END);
        }
    } else {
        #pragma unroll 1  // one loop for every stage count: the same code, the same schedule (see above)
        for (int i = 0; i < STAGES - 1 && (EVERY || i < my_tiles); ++i) {
            AC_TRACE(i, ISSUED);
            issue(i, i);
        }
        for (u64 k = 0; k < my_tiles; ++k) {
            const int s = stage_of<STAGES>(k);
            wait(k, s);
            AC_TRACE(k, READY);
            if (k) AC_TRACE(k - 1, RELEASED);
            const u64 next = k + STAGES - 1;
            if (EVERY || next < my_tiles) {
                AC_TRACE(next, ISSUED);
                issue(next, stage_of<STAGES>(next));
            }
            AC_TRACE(k, COMPUTE_START);
            compute(k, s);
            AC_TRACE(k, COMPUTE_END);
        }
    }
}

}  // namespace asynccopy
