// asynccopy/pipeline.cuh — the names of pipeline state, computed in one place.
//
// An N-stage pipeline walks a sequence of tiles i = 0, 1, 2, ... through N shared-memory buffers.
// Tile i lives in buffer stage_of(i) and, for barrier-based pipelines, completes the barrier of that
// stage in phase phase_of(i): a barrier's phase flips each time all its arrivals (and transaction
// bytes) complete, so a waiter must name the parity it waits for.
#pragma once

namespace asynccopy {

// Tile i's stage and phase. For 2..8 stages the quotient i / STAGES is one multiply-high by a
// multiplier read from constant memory, so every stage count runs the same instructions (only an
// immediate and a constant-bank offset differ). Folded at compile time, each stage count got its own
// division sequence (a shift for 2, 4, 8; a multiply-high and fix-ups for 3, 5, 6; another for 7),
// and with it its own register allocation and schedule of the whole loop: on an H200 the stage counts
// of one class ran the compute 5-18% slower than those of another at high intensity (traced
// tma_1d_pipeline: a tile's compute 3955 ns with 2, 4 or 8 stages, 3388 ns with 3, 5 or 6, the waits
// and the SM clock equal). Exact while i * (STAGES * m - 2^32) < 2^32 for the multiplier m; that
// excess is at most 4 (STAGES = 5), so for every i < 2^30. stream.launch keeps a block's tile
// counter below 2^29.
static __constant__ unsigned stage_magic[9] = {0u, 0u, 0x80000000u, 0x55555556u, 0x40000000u,
                                        0x33333334u, 0x2AAAAAABu, 0x24924925u, 0x20000000u};

template <int STAGES>
__device__ __forceinline__ unsigned long long stage_quotient(unsigned long long i)
{
    static_assert(STAGES >= 1, "a pipeline has at least one stage");
    if constexpr (STAGES >= 2 && STAGES <= 8)
        return __umulhi(static_cast<unsigned>(i), stage_magic[STAGES]);
    else
        return i / STAGES;
}

template <int STAGES>
__device__ __forceinline__ int stage_of(unsigned long long i)
{
    return static_cast<int>(i - stage_quotient<STAGES>(i) * STAGES);
}

template <int STAGES>
__device__ __forceinline__ unsigned phase_of(unsigned long long i)
{
    return static_cast<unsigned>(stage_quotient<STAGES>(i) & 1ull);
}

// Which tiles a block takes. By default the grid is persistent: tile k of block b is b + k * gridDim.x.
// Built with -DASYNCCOPY_TILES_PER_BLOCK=T (T > 0), the grid is one block per T tiles and block b
// takes the contiguous run b * T, ..., b * T + T - 1: blocks come and go, and the whole GPU sweeps
// the array front to back (on the H200 the faster order for a pure copy).
#ifndef ASYNCCOPY_TILES_PER_BLOCK
#define ASYNCCOPY_TILES_PER_BLOCK 0
#endif

__device__ __forceinline__ unsigned long long tiles_of_block(unsigned long long n_tiles)
{
#if ASYNCCOPY_TILES_PER_BLOCK > 0
    const unsigned long long first = static_cast<unsigned long long>(blockIdx.x) * ASYNCCOPY_TILES_PER_BLOCK;
    return first < n_tiles ? (n_tiles - first < ASYNCCOPY_TILES_PER_BLOCK ? n_tiles - first : ASYNCCOPY_TILES_PER_BLOCK)
                           : 0;
#else
    return blockIdx.x < n_tiles ? (n_tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
#endif
}

__device__ __forceinline__ unsigned long long tile_of_block(unsigned long long k)
{
#if ASYNCCOPY_TILES_PER_BLOCK > 0
    return static_cast<unsigned long long>(blockIdx.x) * ASYNCCOPY_TILES_PER_BLOCK + k;
#else
    return blockIdx.x + k * gridDim.x;
#endif
}

// bar.sync on a named barrier (1..15) for `count` threads (a multiple of 32): a barrier for a
// subset of the block, e.g. the consumer warps of a warp-specialized kernel.
__device__ __forceinline__ void named_barrier_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// bar.arrive on a named barrier: count this thread in (count threads complete it, those that sync and
// those that arrive) without waiting, e.g. to let another group of warps past its bar.sync.
__device__ __forceinline__ void named_barrier_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// The block's dynamic shared memory, 1024-byte aligned (the strictest TMA swizzle alignment).
template <class T>
__device__ __forceinline__ T* dynamic_smem()
{
    extern __shared__ __align__(1024) unsigned char asynccopy_dynamic_smem[];
    return reinterpret_cast<T*>(asynccopy_dynamic_smem);
}

}  // namespace asynccopy
