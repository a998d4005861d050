// asynccopy/mbarrier.cuh — one named wrapper per mbarrier PTX instruction (sm_90 forms; init, arrive and
// waits also build for sm_80).
//
// An mbarrier in shared memory completes a phase when its pending arrival count reaches zero *and*
// its transaction count (bytes announced with expect_tx, subtracted by async copies' complete_tx)
// reaches zero. Waiters name the phase by parity: a fresh barrier is in phase 0, and waiting for
// parity 1 on it returns at once (the "previous" phase counts as complete) — the usual way a
// producer starts on its empty barriers. Arrive has release and a successful wait acquire semantics
// at CTA scope, so ordinary writes before an arrive are visible to threads after the wait.
#pragma once

#include <asynccopy/address.cuh>
#include <asynccopy/debug.cuh>

namespace asynccopy {

using mbarrier_t = unsigned long long;  // the 8-byte barrier object

__device__ __forceinline__ void mbarrier_init(mbarrier_t* bar, unsigned arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Make initialized barriers visible to other threads and to the async proxy (TMA) before use.
// (sm_80 has no such fence: there the __syncthreads that must follow the init is enough.)
__device__ __forceinline__ void fence_barrier_init()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ unsigned long long mbarrier_arrive(mbarrier_t* bar)
{
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(smem_addr(bar)) : "memory");
    return state;
}

// Arrive once and announce `bytes` more bytes of transactions for the current phase.
__device__ __forceinline__ unsigned long long mbarrier_arrive_expect_tx(mbarrier_t* bar, unsigned bytes)
{
    unsigned long long state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
                 : "=l"(state)
                 : "r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
    return state;
}

// Announce `bytes` more bytes of transactions without arriving.
__device__ __forceinline__ void mbarrier_expect_tx(mbarrier_t* bar, unsigned bytes)
{
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// Compile-time knob (-D), for measuring variants: ASYNCCOPY_MBARRIER_SUSPEND_NS, a suspend-time hint (ns) for the
// sm_90 try_wait below: the waiting thread may sleep inside the instruction until the phase completes or about that
// long, instead of returning after the hardware's own short limit and spinning round the loop (CUTLASS passes 10 ms).
// 0 (default): no hint, the hardware's limit.
#ifndef ASYNCCOPY_MBARRIER_SUSPEND_NS
#define ASYNCCOPY_MBARRIER_SUSPEND_NS 0
#endif
// The hint as try_wait's last operand (%3 below), or nothing: the default's PTX is the text without it.
#if ASYNCCOPY_MBARRIER_SUSPEND_NS > 0
#define ASYNCCOPY_SUSPEND_OPERAND ", %3"
#else
#define ASYNCCOPY_SUSPEND_OPERAND ""
#endif

// Has the phase of the given parity completed? sm_90: try_wait (may suspend the thread briefly
// inside the instruction); sm_80: test_wait (returns at once).
__device__ __forceinline__ bool mbarrier_try_wait_parity(mbarrier_t* bar, unsigned parity)
{
    unsigned done;
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2" ASYNCCOPY_SUSPEND_OPERAND ";\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity), "n"(ASYNCCOPY_MBARRIER_SUSPEND_NS)
        : "memory");
#else
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
#endif
    return done != 0;
}

#if __CUDA_ARCH__ >= 900
// try_wait with acquire at cluster scope: for barriers completed by another block of the cluster (a
// remote arrive with release.cluster, or st.async's complete_tx), so that its writes are visible.
__device__ __forceinline__ bool mbarrier_try_wait_parity_cluster(mbarrier_t* bar, unsigned parity)
{
    unsigned done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2" ASYNCCOPY_SUSPEND_OPERAND
        ";\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity), "n"(ASYNCCOPY_MBARRIER_SUSPEND_NS)
        : "memory");
    return done != 0;
}

__device__ __forceinline__ void mbarrier_wait_parity_cluster(mbarrier_t* bar, unsigned parity,
                                                             WaitSite site = {"?", "mbarrier", -1})
{
    bounded_wait([&] { return mbarrier_try_wait_parity_cluster(bar, parity); }, site, parity);
}
#endif

// Block until the phase of the given parity has completed. `site` names the wait for the hang
// check (asynccopy/debug.cuh): with ASYNCCOPY_HANG_TIMEOUT_NS set, a wait past it reports and traps.
__device__ __forceinline__ void mbarrier_wait_parity(mbarrier_t* bar, unsigned parity,
                                                     WaitSite site = {"?", "mbarrier", -1})
{
    bounded_wait([&] { return mbarrier_try_wait_parity(bar, parity); }, site, parity);
}

}  // namespace asynccopy
