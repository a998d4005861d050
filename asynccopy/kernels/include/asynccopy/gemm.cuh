// asynccopy/gemm.cuh — what the GEMM kernels share: the f32 → output conversion, stores of two adjacent
// outputs, and the grouped order in which output tiles are visited.
//
// from_float<OutT>(v)       v rounded once to OutT (float, __nv_bfloat16, __half), round to nearest even
// store_pair(p, x, y)       p[0] = x, p[1] = y as one 8- or 4-byte store (p aligned to two elements)
// grouped_tile<G>(...)      output tile `tile` of a tiles_m x tiles_n grid when tiles are visited in
//                           groups of G tile-rows, column by column inside a group: blocks that run
//                           together share their A rows and B columns in L2
// stream_k_begin(b, ...)    where worker b's share of a stream-K region starts, in k-blocks (below)
// flag_release(p, v)        *p = v, release at GPU scope: the block's writes before it (a barrier
//                           away) are visible to a thread that acquires v
// flag_acquire(p)           *p, acquire at GPU scope (pairs with flag_release)
// counter_arrive(p)         ++*p, returning the value before, acquire-release at GPU scope: the last of n
//                           arrivals (the one that reads n - 1) sees every write the others made before theirs
// Use: #include <asynccopy/gemm.cuh> (sm_80+).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace asynccopy {

template <class OutT>
__device__ __forceinline__ OutT from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ void store_pair(float* p, float x, float y)
{
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float x, float y)
{
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store_pair(__half* p, float x, float y)
{
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}

template <int GROUP_M>
__device__ __forceinline__ void grouped_tile(int tile, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP_M * tiles_n;
    const int first_m = tile / per_group * GROUP_M;
    const int size_m = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
    const int in_group = tile % per_group;
    tm = first_m + in_group % size_m;
    tn = in_group / size_m;
}

// Stream-K (Osama et al., PPoPP 2023): instead of a last wave of whole tiles that leaves SMs idle, the
// k-blocks of a region of `sk_tiles` tiles (sk_tiles x k_blocks of them, tile after tile) are shared out in
// near-equal ranges among `workers`: worker b takes [stream_k_begin(b), stream_k_begin(b + 1)), cut at tile
// boundaries into pieces. A piece that holds a tile's first k-block is its owner's; one that starts inside a
// tile (only a worker's first piece can) is a contributor's, whose partial sums the owner adds in. The
// contributors of a tile are the workers after its owner whose ranges start inside it.
__device__ __forceinline__ long long stream_k_begin(int b, int workers, int sk_tiles, int k_blocks)
{
    return static_cast<long long>(b) * sk_tiles * k_blocks / workers;
}

__device__ __forceinline__ void flag_release(int* p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int flag_acquire(const int* p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ int counter_arrive(int* p)
{
    int v;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

}  // namespace asynccopy
