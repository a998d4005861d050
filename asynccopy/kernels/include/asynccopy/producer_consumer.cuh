// asynccopy/producer_consumer.cuh — the mbarrier producer / consumer loop of a warp-specialized
// pipeline, for the tile-stream kernels and for your own. (The form in which every thread both copies
// and computes is asynccopy/group_pipeline.cuh.)
//
// The first PRODUCERS warps only copy, the next THREADS threads only compute. Per stage s (tile k
// in stage k % STAGES, phase (k / STAGES) & 1):
//   full[s]:  FULL_ARRIVALS arrivals, plus any transaction bytes they announce: produce() makes them
//             (an arrive_expect_tx and a TMA copy, or cp.async.mbarrier.arrive.noinc per thread);
//   empty[s]: THREADS arrivals, one per computing thread after consume() returns.
// Producers wait on empty[s] with the opposite parity, which a fresh barrier satisfies at once
// (every buffer starts empty), so the first STAGES tiles are issued without waiting.
//
//   produce(k, s, &full[s])  every producer thread; issues tile k into stage s
//   consume(k, s, tid)       every computing thread, tid in [0, THREADS); tile k is visible
//
// Traced builds (-DASYNCCOPY_TRACE=1) record `issued` before produce(), `ready` and `compute_start`
// before consume() and `compute_end` after it; pass the kernel's buffer with AC_TRACE_ARG.
// Each barrier wait is bounded under the hang check (ASYNCCOPY_HANG_TIMEOUT_MS) and names `kernel`.
// Constraints: STAGES <= 32; the block is 32 * PRODUCERS + THREADS threads, producers first.
#pragma once

#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/trace.cuh>

#ifndef ASYNCCOPY_FAULT_FULL_ARRIVALS  // test hook: expect this many arrivals too many on full[] (a deadlock)
#define ASYNCCOPY_FAULT_FULL_ARRIVALS 0
#endif

namespace asynccopy {

template <int PRODUCERS, int THREADS, int TILE, int STAGES, unsigned FULL_ARRIVALS, class Produce, class Consume>
__device__ __forceinline__ void producer_consumer(unsigned long long n, Produce produce, Consume consume,
                                                  const char* kernel AC_TRACE_PARAM)
{
    constexpr int PT = 32 * PRODUCERS;
    __shared__ mbarrier_t full[STAGES], empty[STAGES];
    static_assert(STAGES <= 32, "thread s of the first warp sets up stage s");
    if (threadIdx.x < STAGES) {  // thread s sets up stage s: no loop whose shape depends on STAGES
        mbarrier_init(&full[threadIdx.x], FULL_ARRIVALS + ASYNCCOPY_FAULT_FULL_ARRIVALS);
        mbarrier_init(&empty[threadIdx.x], THREADS);
        fence_barrier_init();
    }
    __syncthreads();
    const unsigned long long my_tiles = tiles_of_block((n + TILE - 1) / TILE);
    if (threadIdx.x < PT) {
        for (unsigned long long k = 0; k < my_tiles; ++k) {
            const int s = stage_of<STAGES>(k);
            mbarrier_wait_parity(&empty[s], phase_of<STAGES>(k) ^ 1u, {kernel, "empty", s});
            AC_TRACE(k, ISSUED);
            produce(k, s, &full[s]);
        }
    } else {
        for (unsigned long long k = 0; k < my_tiles; ++k) {
            const int s = stage_of<STAGES>(k);
            mbarrier_wait_parity(&full[s], phase_of<STAGES>(k), {kernel, "full", s});
            AC_TRACE_BY(threadIdx.x == PT, k, READY);
            AC_TRACE_BY(threadIdx.x == PT, k, COMPUTE_START);
            consume(k, s, static_cast<int>(threadIdx.x) - PT);
            AC_TRACE_BY(threadIdx.x == PT, k, COMPUTE_END);
            mbarrier_arrive(&empty[s]);
        }
    }
}

}  // namespace asynccopy
