// asynccopy/cluster.cuh — one named wrapper per cluster-scope operation a kernel of a thread-block cluster
// needs beside the mbarrier ones (asynccopy/mbarrier.cuh).
//
// What: an arrival on an mbarrier in another block's shared memory, two ways:
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

}  // namespace asynccopy
