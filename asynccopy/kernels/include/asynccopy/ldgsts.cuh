// asynccopy/ldgsts.cuh — one named wrapper per LDGSTS (cp.async) PTX instruction.
//
// What: global → shared asynchronous copies of 4, 8 or 16 bytes per thread (compute capability 8.0+),
// batched into commit groups that a thread waits on with wait_group<N>.
// How:  each wrapper is a single inline-PTX instruction; kernels call these names, never raw asm.
// Constraints (PTX ISA, "cp.async"):
//   * source and destination aligned to the copy size; the source must be a valid global address
//     even when no byte is read (pass the array's base pointer for an all-zero-fill copy);
//   * `.cg` (bypass L1, cache in L2 only) exists only for 16-byte copies; `.ca` caches in L1 and L2;
//   * a thread's wait covers only the copies *it* issued: a tile that other threads read after the
//     wait needs a block (or group) barrier as well: the copies of other threads become visible
//     only through it;
//   * commit_group() must be reached in converged control flow by every thread, even one that
//     issued nothing this round: an empty group is legal and keeps every thread's group count equal.
// Use: #include <asynccopy/ldgsts.cuh> in a kernel built with asynccopy.compile(...).
#pragma once

#include <asynccopy/address.cuh>

namespace asynccopy {

// cp.async.{ca,cg}.shared.global [dst], [src], BYTES, src_bytes;
// Copies src_bytes (0..BYTES) from global and zero-fills the rest of the BYTES destination bytes:
// this zero fill is how a boundary tile is padded without forming an out-of-bounds pointer.
template <int BYTES, bool BYPASS_L1 = false>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src, unsigned src_bytes = BYTES)
{
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    static_assert(!BYPASS_L1 || BYTES == 16, "cp.async.cg (L1 bypass) exists only for 16-byte copies");
    if constexpr (BYPASS_L1) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem_dst)),
                     "l"(gmem_addr(gmem_src)), "n"(BYTES), "r"(src_bytes)
                     : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem_dst)),
                     "l"(gmem_addr(gmem_src)), "n"(BYTES), "r"(src_bytes)
                     : "memory");
    }
}

// cp.async.commit_group: closes this thread's current batch of cp.async into one group.
__device__ __forceinline__ void commit_group()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// cp.async.wait_group N: returns once at most N of this thread's most recent groups are pending.
template <int N>
__device__ __forceinline__ void wait_group()
{
    static_assert(N >= 0, "wait_group<N> needs N >= 0");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// cp.async.wait_all: every group this thread committed has landed.
__device__ __forceinline__ void wait_all()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// cp.async.mbarrier.arrive.noinc: an arrive-on operation on the mbarrier `bar`, triggered once every
// cp.async this thread issued before it has landed. With .noinc the arrival counts against the
// barrier's expected count (init it with one arrival per thread that calls this); without .noinc
// (__pipeline_arrive_on in cuda_pipeline_primitives.h) the pending count is raised first and the
// thread must also arrive normally. Either way the landed bytes are visible to a thread whose wait on
// the barrier's phase returned — no commit group, no wait_group, no __syncthreads.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(unsigned long long* bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

}  // namespace asynccopy
