// asynccopy/cluster.cuh — one named wrapper per cluster-scope operation a kernel of a thread-block cluster
// needs beside the mbarrier ones (asynccopy/mbarrier.cuh).
//
// What: an arrival on an mbarrier in another block's shared memory, two ways (and a bulk copy into another
// block's shared memory, bulk_copy_to_rank):
//   mbarrier_arrive_remote      release at cluster scope, on the address cooperative_groups'
//                               cluster.map_shared_rank returned for it (its shared::cluster window); the owner
//                               waits at cluster scope (mbarrier_wait_parity_cluster), so that the arriving
//                               block's earlier ordinary writes are visible to it (the STAS ring's data);
//   mbarrier_arrive_remote_cta  release at CTA scope, on the barrier at a local barrier's offset in block
//                               `rank` (mapa); the owner waits with the plain mbarrier_wait_parity: for a
//                               barrier that only hands a buffer back (below: no fence either side).
// Use: #include <asynccopy/cluster.cuh> in a kernel launched in clusters (CC 9.0).
#pragma once

#include <asynccopy/mbarrier.cuh>

#include <cuda/ptx>

namespace asynccopy {

// mbarrier.arrive.release.cluster.shared::cluster.b64 on a barrier of another block of the cluster.
__device__ __forceinline__ void mbarrier_arrive_remote(mbarrier_t* remote)
{
    cuda::ptx::mbarrier_arrive(cuda::ptx::sem_release, cuda::ptx::scope_cluster, cuda::ptx::space_cluster,
                               reinterpret_cast<cuda::std::uint64_t*>(remote));
}

// mbarrier.arrive.shared::cluster.b64 on the barrier at `bar`'s offset in block `rank` of the cluster (mapa),
// with the default semantics: release at CTA scope. It orders only this thread's own earlier accesses, which
// is what a consumer freeing a buffer needs (its reads are done; the owner's producer then overwrites the
// buffer by TMA), and it costs no fence: the release.cluster form above compiles to MEMBAR.ALL.GPU before
// the arrive, and its waiter's acquire.cluster to CCTL.IVALL (seen in gemm_wgmma's SASS, where one per
// consumer warp and stage made a pipeline of clusters 40% slower). The owner waits with the plain,
// CTA-scope mbarrier_wait_parity.
__device__ __forceinline__ void mbarrier_arrive_remote_cta(mbarrier_t* bar, unsigned rank)
{
    asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
                 "r"(rank)
                 : "memory");
}

// cp.async.bulk.shared::cluster.shared::cta: `bytes` (a multiple of 16) from this block's shared memory at `src` to
// the same offset as `dst` in block `rank` of the cluster, completing on the barrier at `bar`'s offset there (the
// receiver announces the bytes with its own arrive_expect_tx). The source may be overwritten only once the
// receiver says the copy is complete (its barrier's phase: the receiver's word, through another barrier). Ordinary
// writes of the source before it need fence_proxy_async_shared (asynccopy/tma.cuh) and a barrier.
__device__ __forceinline__ void bulk_copy_to_rank(const void* dst, const void* src, unsigned bytes, const mbarrier_t* bar,
                                                  unsigned rank)
{
    asm volatile("{\n .reg .b32 d, b;\n mapa.shared::cluster.u32 d, %0, %4;\n mapa.shared::cluster.u32 b, %3, %4;\n"
                 " cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [d], [%1], %2, [b];\n}\n"
                 ::"r"(smem_addr(dst)), "r"(smem_addr(src)), "r"(bytes), "r"(smem_addr(bar)), "r"(rank)
                 : "memory");
}

}  // namespace asynccopy
