// A kernel that calls the public wrappers no package kernel uses (tests/cpu/test_headers.py compiles
// it and checks their instructions in the SASS; tests/gpu/test_headers.py runs it): an L2 prefetch,
// expect_tx without an arrival, a bulk load with an evict-first L2 policy, a plain bulk load.
// One block of 256 threads copies in[0, 1024) to out[0, 1024) through shared memory.
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/tma.cuh>

namespace ac = asynccopy;

extern "C" __global__ void wrappers_smoke(const float* __restrict__ in, float* __restrict__ out)
{
    __shared__ alignas(128) float buf[1024];
    __shared__ ac::mbarrier_t bar;
    if (threadIdx.x == 0) {
        ac::mbarrier_init(&bar, 1);
        ac::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        ac::bulk_prefetch_l2(in + 512, 2048);               // the second half, ahead of its load
        ac::mbarrier_expect_tx(&bar, 2048);                  // the first load's bytes, no arrival
        ac::mbarrier_arrive_expect_tx(&bar, 2048);           // the second's, and the one arrival
        ac::bulk_load(buf, in, 2048, &bar, ac::l2_policy_evict_first());
        ac::bulk_load(buf + 512, in + 512, 2048, &bar);
    }
    ac::mbarrier_wait_parity(&bar, 0);
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) out[i] = buf[i];
}
