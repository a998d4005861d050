// asynccopy/cluster.cuh — one named wrapper per cluster-scope operation a kernel of a thread-block cluster
// needs beside the mbarrier ones (asynccopy/mbarrier.cuh).
//
// What: an arrival, with release at cluster scope, on an mbarrier in another block's shared memory, given
// by the address cooperative_groups' cluster.map_shared_rank returned for it (its shared::cluster
// window). The block that owns the barrier waits on it at cluster scope (mbarrier_wait_parity_cluster),
// so that the arriving block's earlier writes and reads are ordered before what the waiter does next.
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

}  // namespace asynccopy
