// asynccopy/attention.cuh — what the attention kernels share: the order in which a causal grid's blocks
// take their query tiles.
//
// causal_item(lin, q_tiles, heads, pairs, chunk, qt, h, b), with chunk = causal_chunk(pairs, kv_bytes)
// causal_tile(q_tiles, heads, batch, kv_bytes, qt, h, b)
//     The query tile, head and batch of item `lin` of a causal grid's (q_tiles, heads, batch) items in
//     running order; causal_tile: of this block of a (q_tiles, heads, batch) grid, numbered linearly
//     (blockIdx.x fastest). When the work is causal, query tile qt sees qt + 1 of the q_tiles' worth of
//     keys, so the last tiles are the longest. The (batch, head) pairs go in chunks whose K and V
//     (kv_bytes each pair) fit in L2_BUDGET bytes together; inside a chunk every pair's last query tile
//     comes first, then every pair's last but one, and so on. The GPU starts blocks in linear order, so
//     the longest blocks start first across the whole chunk (a pair's short tiles fill the gaps at the end)
//     while the blocks running together read K and V from at most one chunk's worth of L2. Head-major
//     order with each head's tiles last-first instead starts the last head's longest tile near the end of
//     the grid, where nothing is left to run beside it.
//     asynccopy.attention_kernels.causal_order is the same order in Python (the launch model's).
// Use: #include <asynccopy/attention.cuh>; the kernel launched on a (q_tiles, heads, batch) grid.
#pragma once

namespace asynccopy {

#ifndef ASYNCCOPY_ATTN_L2_BUDGET
#define ASYNCCOPY_ATTN_L2_BUDGET (24ll << 20)  // bytes of K and V a chunk of (batch, head) pairs may hold
#endif

// The chunk: how many (batch, head) pairs' K and V (kv_bytes each) fit ASYNCCOPY_ATTN_L2_BUDGET together (1 to pairs).
__device__ __forceinline__ int causal_chunk(int pairs, long long kv_bytes)
{
    const long long fit = ASYNCCOPY_ATTN_L2_BUDGET / (kv_bytes > 0 ? kv_bytes : 1);
    return fit < 1 ? 1 : fit > pairs ? pairs : static_cast<int>(fit);
}

// In 32-bit arithmetic (a grid's items fit: 2^32 items of 64 queries would be terabytes of Q), so that a kernel that
// calls it in a loop inlines it (a 64-bit division by a run-time value is a subroutine call).
__device__ __forceinline__ void causal_item(unsigned lin, int q_tiles, int heads, int pairs, int chunk, int& qt, int& h,
                                            int& b)
{
    const unsigned per_chunk = static_cast<unsigned>(chunk) * static_cast<unsigned>(q_tiles);
    const unsigned c = lin / per_chunk;
    const int first = static_cast<int>(c) * chunk;
    const int size = pairs - first < chunk ? pairs - first : chunk;
    const unsigned r = lin - c * per_chunk;
    qt = q_tiles - 1 - static_cast<int>(r / static_cast<unsigned>(size));
    const int pair = first + static_cast<int>(r % static_cast<unsigned>(size));
    h = pair % heads;
    b = pair / heads;
}

__device__ __forceinline__ void causal_tile(int q_tiles, int heads, int batch, long long kv_bytes, int& qt, int& h,
                                            int& b)
{
    const unsigned lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int pairs = heads * batch;
    causal_item(lin, q_tiles, heads, pairs, causal_chunk(pairs, kv_bytes), qt, h, b);
}

}  // namespace asynccopy
