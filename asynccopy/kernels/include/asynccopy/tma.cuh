// asynccopy/tma.cuh — one named wrapper per TMA PTX instruction (compute capability 9.0; the
// tensormap.replace family needs sm_90a).
//
// What: bulk (1D) and tensor (1-5D) copies between global and shared memory by the Tensor Memory
// Accelerator, and the fences and tensor-map edits that go with them.
// Completion:
//   * global → shared completes on an mbarrier: the issuing thread announces the bytes
//     (mbarrier_arrive_expect_tx / mbarrier_expect_tx) and the copy's complete_tx subtracts them;
//   * shared → global is tracked per thread in bulk async-groups: bulk_commit_group(), then
//     bulk_wait_group_read<N>() before the shared source is overwritten (the global writes may still
//     be in flight), or bulk_wait_group<N>() for the writes themselves.
// Proxies: TMA runs in the async proxy. Ordinary stores to shared memory that TMA reads next (a bulk
// or tensor store, or a buffer TMA overwrites after ordinary writes) need fence_proxy_async_shared()
// in each writing thread before the barrier that publishes them. A tensor map written in global
// memory by ordinary code (or tensormap_cp_fenceproxy) needs fence_proxy_tensormap_acquire() before
// the first TMA use by a thread.
// Alignment: global addresses and sizes of bulk copies are multiples of 16 bytes; a tensor copy's
// shared destination is 128-byte aligned, and 256/512/1024-byte aligned for the 32B/64B/128B
// swizzles if the layout is to follow the swizzle pattern from its first byte.
#pragma once

#include <asynccopy/address.cuh>
#include <asynccopy/mbarrier.cuh>

namespace asynccopy {

// The 128-byte CUtensorMap, passed as `const __grid_constant__ TensorMap` (cuda.h is not usable
// under NVRTC).
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// ---- 1D bulk copies ----------------------------------------------------------------------------

// cp.async.bulk global → shared, completing `bytes` transaction bytes on `bar`.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, unsigned bytes, mbarrier_t* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(smem_dst)),
                 "l"(gmem_addr(gmem_src)), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

// An L2 cache policy that marks the lines it is used with as first to be evicted (streams read once).
__device__ __forceinline__ unsigned long long l2_policy_evict_first()
{
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

// bulk_load with an L2 cache policy (l2_policy_evict_first()).
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, unsigned bytes, mbarrier_t* bar,
                                          unsigned long long l2_policy)
{
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
            "r"(smem_addr(smem_dst)),
        "l"(gmem_addr(gmem_src)), "r"(bytes), "r"(smem_addr(bar)), "l"(l2_policy)
        : "memory");
}

// cp.async.bulk.prefetch.L2: start bringing `bytes` (a multiple of 16) at gmem_src into L2; no completion.
__device__ __forceinline__ void bulk_prefetch_l2(const void* gmem_src, unsigned bytes)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(gmem_addr(gmem_src)), "r"(bytes) : "memory");
}

// cp.async.bulk shared → global, in this thread's current bulk async-group.
__device__ __forceinline__ void bulk_store(void* gmem_dst, const void* smem_src, unsigned bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem_addr(gmem_dst)),
                 "r"(smem_addr(smem_src)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void bulk_commit_group()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// At most N of this thread's bulk groups may still be *reading* their shared sources.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// At most N of this thread's bulk groups may still be pending at all.
template <int N>
__device__ __forceinline__ void bulk_wait_group()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Order this thread's earlier generic-proxy accesses to shared memory before later async-proxy ones.
__device__ __forceinline__ void fence_proxy_async_shared()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- tensor copies -----------------------------------------------------------------------------

// cp.async.bulk.tensor global → shared of the box at `c` (innermost coordinate first), completing on bar.
template <int RANK>
__device__ __forceinline__ void tensor_load(void* smem_dst, const TensorMap* map, const int (&c)[RANK],
                                            mbarrier_t* bar)
{
    static_assert(RANK >= 1 && RANK <= 5, "tensor copies have rank 1 to 5");
    const unsigned dst = smem_addr(smem_dst), mbar = smem_addr(bar);
    const unsigned long long tmap = reinterpret_cast<unsigned long long>(map);
    if constexpr (RANK == 1)
        asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2}], [%3];\n" ::"r"(dst), "l"(tmap), "r"(c[0]), "r"(mbar)
                     : "memory");
    else if constexpr (RANK == 2)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(tmap), "r"(c[0]), "r"(c[1]), "r"(mbar)
                     : "memory");
    else if constexpr (RANK == 3)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst), "l"(tmap), "r"(c[0]), "r"(c[1]), "r"(c[2]),
                     "r"(mbar)
                     : "memory");
    else if constexpr (RANK == 4)
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst), "l"(tmap), "r"(c[0]), "r"(c[1]),
                     "r"(c[2]), "r"(c[3]), "r"(mbar)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst), "l"(tmap), "r"(c[0]), "r"(c[1]),
                     "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(mbar)
                     : "memory");
}

// Where byte `byte` (0..127) of row `row` lies within that row, in a 1024-byte-aligned tile of 128-byte rows
// that a 128B-swizzled tensor map loads or stores (the row itself starts at row * 128): its 16-byte chunk
// index XORed with the row's index mod 8 (eight rows' same chunk then fall in eight different bank groups).
__device__ __forceinline__ int swizzle_128b(int row, int byte)
{
    return (((byte >> 4) ^ (row & 7)) << 4) | (byte & 15);
}

// cp.async.bulk.tensor.2d global → shared::cluster .multicast::cluster: the box at `c` lands at the same
// shared-memory offset (smem_dst's) in every block of the cluster whose rank is set in cta_mask, and
// completes its bytes on the mbarrier at bar's offset in each of them.
template <int RANK>
__device__ __forceinline__ void tensor_load_multicast(void* smem_dst, const TensorMap* map, const int (&c)[RANK],
                                                      mbarrier_t* bar, unsigned short cta_mask)
{
    static_assert(RANK == 2, "the multicast wrapper is written for rank 2 (the GEMM operands)");
    const unsigned dst = smem_addr(smem_dst), mbar = smem_addr(bar);
    const unsigned long long tmap = reinterpret_cast<unsigned long long>(map);
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst), "l"(tmap), "r"(c[0]), "r"(c[1]), "r"(mbar),
                 "h"(cta_mask)
                 : "memory");
}

// cp.async.bulk.tensor shared → global of the box at `c`, in this thread's current bulk async-group.
// Elements of the box outside the tensor are not written.
template <int RANK>
__device__ __forceinline__ void tensor_store(const TensorMap* map, const int (&c)[RANK], const void* smem_src)
{
    static_assert(RANK >= 1 && RANK <= 5, "tensor copies have rank 1 to 5");
    const unsigned src = smem_addr(smem_src);
    const unsigned long long tmap = reinterpret_cast<unsigned long long>(map);
    if constexpr (RANK == 1)
        asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%1}], [%2];\n" ::"l"(tmap),
                     "r"(c[0]), "r"(src)
                     : "memory");
    else if constexpr (RANK == 2)
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                         tmap),
                     "r"(c[0]), "r"(c[1]), "r"(src)
                     : "memory");
    else if constexpr (RANK == 3)
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                         tmap),
                     "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(src)
                     : "memory");
    else if constexpr (RANK == 4)
        asm volatile(
            "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(tmap),
            "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(src)
            : "memory");
    else
        asm volatile(
            "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n" ::"l"(
                tmap),
            "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(src)
            : "memory");
}

// ---- tensor maps edited on the device (sm_90a) ---------------------------------------------------

// tensormap.replace on a 128-byte map in shared memory (128-byte aligned).
__device__ __forceinline__ void tensormap_replace_address(TensorMap* smem_map, const void* global_address)
{
    asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n" ::"r"(smem_addr(smem_map)),
                 "l"(reinterpret_cast<unsigned long long>(global_address))
                 : "memory");
}

// Extent (elements) of dimension ORD, innermost = 0.
template <int ORD>
__device__ __forceinline__ void tensormap_replace_dim(TensorMap* smem_map, unsigned extent)
{
    asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], %1, %2;\n" ::"r"(smem_addr(smem_map)),
                 "n"(ORD), "r"(extent)
                 : "memory");
}

// Stride (bytes) of dimension ORD + 1 (the innermost dimension has no stride field).
template <int ORD>
__device__ __forceinline__ void tensormap_replace_stride(TensorMap* smem_map, unsigned long long stride_bytes)
{
    asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], %1, %2;\n" ::"r"(
                     smem_addr(smem_map)),
                 "n"(ORD), "l"(stride_bytes)
                 : "memory");
}

// Copy a 128-byte map from shared to global memory and release it to the tensormap proxy at GPU
// scope. Executed by all 32 lanes of a warp together (.sync.aligned).
__device__ __forceinline__ void tensormap_cp_fenceproxy(TensorMap* gmem_map, const TensorMap* smem_map)
{
    asm volatile(
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n" ::"l"(
            gmem_addr(gmem_map)),
        "r"(smem_addr(smem_map))
        : "memory");
}

// Acquire a tensor map in global memory for this thread's TMA use after it was written.
__device__ __forceinline__ void fence_proxy_tensormap_acquire(const TensorMap* gmem_map)
{
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(
                     reinterpret_cast<unsigned long long>(gmem_map))
                 : "memory");
}

// Start fetching a tensor map (a kernel's __grid_constant__ parameter or one in global memory) into the TMA
// unit's descriptor cache, so that the first copy through it does not wait for that fetch; no completion.
__device__ __forceinline__ void tensormap_prefetch(const TensorMap* map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

}  // namespace asynccopy
