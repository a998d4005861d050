// asynccopy/address.cuh — state-space addresses of generic pointers, as PTX operands want them.
#pragma once

namespace asynccopy {

// Shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Global-window address of a generic pointer into global memory.
__device__ __forceinline__ unsigned long long gmem_addr(const void* p)
{
    return static_cast<unsigned long long>(__cvta_generic_to_global(p));
}

}  // namespace asynccopy
