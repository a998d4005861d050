// hang_demo.cu — a deadlock on purpose, for the hang check (asynccopy/debug.cuh) and its test.
//
// The barrier expects blockDim.x + extra arrivals; every thread arrives once and waits, so with
// extra > 0 the phase never completes. Built with ASYNCCOPY_HANG_TIMEOUT_NS (environment variable
// ASYNCCOPY_HANG_TIMEOUT_MS) the wait reports "kernel wrong_arrival_count, barrier bar[0], waiting for
// phase parity 0" and traps. Never launch it with extra > 0 without the switch: it would hang the GPU.
#include <asynccopy/mbarrier.cuh>

extern "C" __global__ void wrong_arrival_count(unsigned extra)
{
    __shared__ asynccopy::mbarrier_t bar;
    if (threadIdx.x == 0) asynccopy::mbarrier_init(&bar, blockDim.x + extra);
    __syncthreads();
    asynccopy::mbarrier_arrive(&bar);
    asynccopy::mbarrier_wait_parity(&bar, 0, {"wrong_arrival_count", "bar", 0});
}
