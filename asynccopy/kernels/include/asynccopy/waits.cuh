// asynccopy/waits.cuh — libcu++'s barrier and pipeline waits, bounded under the hang check.
//
// Built normally these are exactly bar.wait(token), bar.arrive_and_wait() and pipe.consumer_wait().
// Built with ASYNCCOPY_HANG_TIMEOUT_NS (asynccopy/debug.cuh) they poll the timed forms
// (try_wait_for, consumer_wait_for) and report the WaitSite and trap once the timeout has passed.
// libcu++ has no timed producer_acquire(): a producer stuck there is caught by the consumers' own
// bounded waits, which cannot complete either.
#pragma once

#include <asynccopy/debug.cuh>

#include <cuda/barrier>
#include <cuda/pipeline>
#include <cuda/std/chrono>
#include <cuda/std/utility>

namespace asynccopy {

template <class Barrier>
__device__ __forceinline__ void barrier_wait(Barrier& bar, typename Barrier::arrival_token&& token, WaitSite site)
{
#if ASYNCCOPY_HANG_TIMEOUT_NS > 0
    bounded_wait(
        [&] {
            auto t = token;
            return bar.try_wait_for(cuda::std::move(t), cuda::std::chrono::nanoseconds(1000));
        },
        site, NO_PARITY);
#else
    (void)site;
    bar.wait(cuda::std::move(token));
#endif
}

template <class Barrier>
__device__ __forceinline__ void barrier_arrive_and_wait(Barrier& bar, WaitSite site)
{
#if ASYNCCOPY_HANG_TIMEOUT_NS > 0
    barrier_wait(bar, bar.arrive(), site);
#else
    (void)site;
    bar.arrive_and_wait();
#endif
}

template <class Pipeline>
__device__ __forceinline__ void pipeline_consumer_wait(Pipeline& pipe, WaitSite site)
{
#if ASYNCCOPY_HANG_TIMEOUT_NS > 0
    bounded_wait([&] { return pipe.consumer_wait_for(cuda::std::chrono::nanoseconds(1000)); }, site, NO_PARITY);
#else
    (void)site;
    pipe.consumer_wait();
#endif
}

}  // namespace asynccopy
