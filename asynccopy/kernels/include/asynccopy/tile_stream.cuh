// asynccopy/tile_stream.cuh — the tile-stream workload every mechanism runs.
//
// What: a float32 array of n elements is cut into tiles of TILE elements. A persistent block takes
// tiles blockIdx.x, blockIdx.x + gridDim.x, ...; each tile goes global → shared → compute → global.
// The compute has a tunable intensity r >= 0:
//   intensity 0:  out[i] = tile[i]                              (a pure copy through shared memory)
//   intensity r:  acc = tile[i]; repeat r times:
//                   acc = acc * 0.5 + tile4[(v + k * NEIGHBOR) mod TILE/4]   (k = 1..r, float4 v)
//                   acc = acc * 0.9375 + 0.0625   (INNER_FMAS times)
// so every round reads a float4 that *another* thread copied into shared memory (a thread's own wait
// on its async copies is not enough: the tile needs a block-wide barrier) and spends
// 2 * (1 + INNER_FMAS) flops per element.
// The tile beyond n is zero: a boundary tile is padded with zeros before it is computed on.
// Thread t owns the float4s v = t + j * THREADS of a tile (coalesced 16-byte loads and stores).
// Constraints: TILE is a multiple of 4 * THREADS; in and out are 16-byte aligned.
#pragma once

#include <asynccopy/ldgsts.cuh>

namespace asynccopy {
namespace stream {

using u64 = unsigned long long;

constexpr float MIX = 0.5f;
constexpr float GAIN = 0.9375f;
constexpr float BIAS = 0.0625f;
constexpr int INNER_FMAS = 4;

// Elements of tile t that lie inside the array: TILE for a full tile, fewer for the last, 0 past it.
template <int TILE>
__device__ __forceinline__ u64 valid_elems(u64 t, u64 n)
{
    const u64 start = t * TILE;
    return start >= n ? 0 : (n - start < TILE ? n - start : TILE);
}

// Where a zero-filling async copy (cp.async's source size, __pipeline_memcpy_async's zfill) of the
// EPC-float chunk at element e of a tile reads from, for a tile that starts at element `start` of
// `in` and has `valid` elements inside the array: `bytes` is 4 * EPC for a chunk inside, fewer for
// the chunk the array's end cuts, 0 past it (the copy zero-fills the rest of the chunk). No
// out-of-bounds pointer is formed: a chunk that reads nothing reads its 0 bytes at `in`.
struct ChunkSource {
    const float* src;
    unsigned bytes;
};

template <int EPC>
__device__ __forceinline__ ChunkSource chunk_source(const float* __restrict__ in, u64 start, int e, u64 valid)
{
    const unsigned bytes = e >= valid ? 0u : 4u * static_cast<unsigned>(valid - e < EPC ? valid - e : EPC);
    return {bytes ? in + start + e : in, bytes};
}

// One VEC-byte chunk of a boundary tile by cp.async, zero-filled past the array's end. The chunk the
// end cuts (0 < bytes < VEC) goes as 4-byte copies: a VEC-byte copy of it addresses bytes past the
// array even though its source size stops at the end, and compute-sanitizer's memcheck reports that as
// an out-of-bounds read of the whole VEC bytes (seen on an H200 for 16-byte copies).
template <int VEC, bool BYPASS_L1>
__device__ __forceinline__ void cp_async_chunk(float* dst, const float* __restrict__ in, u64 start, int e, u64 valid)
{
    constexpr int EPC = VEC / 4;
    const ChunkSource from = chunk_source<EPC>(in, start, e, valid);
    if (EPC == 1 || from.bytes == 0 || from.bytes == VEC) {
        cp_async<VEC, BYPASS_L1>(dst, from.src, from.bytes);
        return;
    }
#pragma unroll
    for (int i = 0; i < EPC; ++i) {
        const ChunkSource one = chunk_source<1>(in, start, e + i, valid);
        cp_async<4>(dst + i, one.src, one.bytes);
    }
}

__device__ __forceinline__ float4 mix(float4 acc, float4 nb)
{
    acc.x = fmaf(acc.x, MIX, nb.x);
    acc.y = fmaf(acc.y, MIX, nb.y);
    acc.z = fmaf(acc.z, MIX, nb.z);
    acc.w = fmaf(acc.w, MIX, nb.w);
    return acc;
}

__device__ __forceinline__ float4 damp(float4 acc)
{
    acc.x = fmaf(acc.x, GAIN, BIAS);
    acc.y = fmaf(acc.y, GAIN, BIAS);
    acc.z = fmaf(acc.z, GAIN, BIAS);
    acc.w = fmaf(acc.w, GAIN, BIAS);
    return acc;
}

// Compute one tile from its shared-memory copy `tile` ([TILE] floats) into dst (global or shared):
// all TILE results when valid == TILE, else only the first `valid`. Every one of the THREADS
// computing threads calls it with its index tid in [0, THREADS); the caller guarantees the whole
// tile is visible to them.
template <int THREADS, int TILE>
__device__ __forceinline__ void compute_tile_to(const float* tile, float* dst, u64 valid, int intensity,
                                                int tid = threadIdx.x)
{
    static_assert(TILE % (4 * THREADS) == 0, "TILE must be a multiple of 4 * THREADS");
    constexpr int NV = TILE / 4;
    constexpr int NEIGHBOR = NV / 2 + 1;  // a float4 in the other half of the tile: another thread's
    constexpr int NJ = NV / THREADS;      // float4s per thread
    const float4* tile4 = reinterpret_cast<const float4*>(tile);
    float* out_tile = dst;
    float4 acc[NJ];
#pragma unroll
    for (int j = 0; j < NJ; ++j) acc[j] = tile4[tid + j * THREADS];
    // Rounds outside, a thread's float4s inside, every step taken for all NJ float4s before the
    // next, and the shared loads one round ahead in the source: NJ loads together, then 4 * NJ
    // independent FMA chains. On an H200 this ran 9-16% faster at high intensity than the earlier
    // form, one load-then-FMAs step per float4, for which ptxas chose per stage count between
    // interleaving all 16 chains and running them 4 at a time (24 dependent FFMAs issued 4
    // instructions after their producer).
    int nb = tid;  // neighbour of float4 j in round k is (nb + j * THREADS) mod NV
    float4 next[NJ];
    const auto load_round = [&] {
        nb += NEIGHBOR;
        if (nb >= NV) nb -= NV;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            int idx = nb + j * THREADS;
            if (idx >= NV) idx -= NV;
            next[j] = tile4[idx];
        }
    };
    if (intensity > 0) load_round();
    for (int k = 0; k < intensity; ++k) {
        float4 cur[NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j) cur[j] = next[j];
        load_round();  // one round past the last is loaded and unused: indices stay inside the tile
#pragma unroll
        for (int j = 0; j < NJ; ++j) acc[j] = mix(acc[j], cur[j]);
#pragma unroll
        for (int q = 0; q < INNER_FMAS; ++q) {
#pragma unroll
            for (int j = 0; j < NJ; ++j) acc[j] = damp(acc[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const int v = tid + j * THREADS;
        if (valid == TILE) {
            reinterpret_cast<float4*>(out_tile)[v] = acc[j];
        } else {
            const u64 e = 4ull * v;
            if (e + 0 < valid) out_tile[e + 0] = acc[j].x;
            if (e + 1 < valid) out_tile[e + 1] = acc[j].y;
            if (e + 2 < valid) out_tile[e + 2] = acc[j].z;
            if (e + 3 < valid) out_tile[e + 3] = acc[j].w;
        }
    }
}

// Compute tile t from its shared-memory copy and store it to out (see compute_tile_to).
template <int THREADS, int TILE>
__device__ __forceinline__ void compute_tile(const float* tile, float* __restrict__ out, u64 t, u64 n,
                                             int intensity, int tid = threadIdx.x)
{
    compute_tile_to<THREADS, TILE>(tile, out + t * TILE, valid_elems<TILE>(t, n), intensity, tid);
}

// A thread's share of one tile held in registers: the float4s it owns.
template <int THREADS, int TILE>
struct TileRegs {
    float4 v[TILE / 4 / THREADS];
};

// Ordinary (synchronous) global loads of this thread's float4s of tile t; zeros past n.
template <int THREADS, int TILE>
__device__ __forceinline__ void load_regs(TileRegs<THREADS, TILE>& r, const float* __restrict__ in, u64 t,
                                          u64 n)
{
    const u64 valid = valid_elems<TILE>(t, n);
    const u64 start = t * TILE;
#pragma unroll
    for (int j = 0; j < TILE / 4 / THREADS; ++j) {
        const int v = threadIdx.x + j * THREADS;
        if (valid == TILE) {
            r.v[j] = reinterpret_cast<const float4*>(in + start)[v];
        } else {
            const u64 e = 4ull * v;
            r.v[j].x = e + 0 < valid ? in[start + e + 0] : 0.0f;
            r.v[j].y = e + 1 < valid ? in[start + e + 1] : 0.0f;
            r.v[j].z = e + 2 < valid ? in[start + e + 2] : 0.0f;
            r.v[j].w = e + 3 < valid ? in[start + e + 3] : 0.0f;
        }
    }
}

template <int THREADS, int TILE>
__device__ __forceinline__ void store_regs(float* tile, const TileRegs<THREADS, TILE>& r)
{
#pragma unroll
    for (int j = 0; j < TILE / 4 / THREADS; ++j)
        reinterpret_cast<float4*>(tile)[threadIdx.x + j * THREADS] = r.v[j];
}

// Elements [from, TILE) of a shared tile by ordinary loads and stores: src[e] where e < valid, zero
// after. This thread takes from + first, from + first + step, ... . For the part of a boundary tile
// that no async copy covers (a bulk copy moves whole 16-byte chunks, a collective copy the prefix).
template <int TILE>
__device__ __forceinline__ void fill_tail(float* tile, const float* __restrict__ src, u64 from, u64 valid,
                                          unsigned first, unsigned step)
{
    for (u64 e = from + first; e < TILE; e += step) tile[e] = e < valid ? src[e] : 0.0f;
}

// Zeros over elements [from, TILE) of a shared tile, shared by all THREADS (fill_tail without a
// source: written apart, the compiler cannot prove that it reads nothing and keeps the compare).
template <int THREADS, int TILE>
__device__ __forceinline__ void zero_tail(float* tile, u64 from)
{
    for (u64 e = from + threadIdx.x; e < TILE; e += THREADS) tile[e] = 0.0f;
}

}  // namespace stream
}  // namespace asynccopy
