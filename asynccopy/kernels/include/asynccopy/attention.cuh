// asynccopy/attention.cuh — what the attention kernels share: the order in which a causal grid's blocks
// take their query tiles.
//
// causal_item(lin, q_tiles, heads, batch, kv_bytes, qt, h, b)
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

__device__ __forceinline__ void causal_item(long long lin, int q_tiles, int heads, int batch, long long kv_bytes,
                                            int& qt, int& h, int& b)
{
    const int pairs = heads * batch;
    long long fit = ASYNCCOPY_ATTN_L2_BUDGET / (kv_bytes > 0 ? kv_bytes : 1);
    const int chunk = fit < 1 ? 1 : fit > pairs ? pairs : static_cast<int>(fit);
    const long long per_chunk = static_cast<long long>(chunk) * q_tiles;
    const int c = static_cast<int>(lin / per_chunk);
    const int first = c * chunk;
    const int size = pairs - first < chunk ? pairs - first : chunk;
    const int r = static_cast<int>(lin - c * per_chunk);
    qt = q_tiles - 1 - r / size;
    const int pair = first + r % size;
    h = pair % heads;
    b = pair / heads;
}

__device__ __forceinline__ void causal_tile(int q_tiles, int heads, int batch, long long kv_bytes, int& qt, int& h,
                                            int& b)
{
    const long long lin =
        blockIdx.x + static_cast<long long>(gridDim.x) * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
    causal_item(lin, q_tiles, heads, batch, kv_bytes, qt, h, b);
}

}  // namespace asynccopy
