"""Experiment: how close to the device-to-device copy can any kernel get on this GPU?

Written on asynccopy's headers the way a user would (asynccopy.compile), all timed against the same
run's cudaMemcpy on 1 GiB (in + out), inputs rotated past L2, each variant checked bit-exact first:
  plain_copy        grid-stride float4 loads and stores, 16 blocks of 256 threads per SM
  plain_copy4       one pass, 4 float4 loads in flight per thread then 4 stores (as PyTorch's copy)
  tma_copy          the tma_1d_pipeline skeleton with an identity compute (producer warp, full/empty
                    mbarriers, consumers store with STG), tiles grid-strided or contiguous per block
  tma_g2s2g         one thread per block: bulk load into a stage, bulk store from it (no registers)
    python3 scripts/copy_ceiling.py [size_mib]
"""
import sys

import numpy as np

import asynccopy
from asynccopy import build, device
from asynccopy.bench import harness

SOURCE = r"""
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tma.cuh>
namespace ac = asynccopy;
using u64 = unsigned long long;

extern "C" __global__ void plain_copy(const float4* __restrict__ in, float4* __restrict__ out, u64 n4)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n4; i += (u64)gridDim.x * blockDim.x) out[i] = in[i];
}

// torch-style: 4 float4 loads in flight per thread, then 4 stores; one pass, no grid stride
extern "C" __global__ void plain_copy4(const float4* __restrict__ in, float4* __restrict__ out, u64 n4)
{
    const u64 base = (blockIdx.x * (u64)blockDim.x) * 4 + threadIdx.x;
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) if (base + j * blockDim.x < n4) v[j] = in[base + j * blockDim.x];
#pragma unroll
    for (int j = 0; j < 4; ++j) if (base + j * blockDim.x < n4) out[base + j * blockDim.x] = v[j];
}

template <bool CONTIG>
__device__ __forceinline__ u64 first_tile(u64 n_tiles) { return CONTIG ? n_tiles * blockIdx.x / gridDim.x : blockIdx.x; }
template <bool CONTIG>
__device__ __forceinline__ u64 tile_count(u64 n_tiles)
{
    return CONTIG ? n_tiles * (blockIdx.x + 1) / gridDim.x - n_tiles * blockIdx.x / gridDim.x : ac::tiles_of_block(n_tiles);
}
template <bool CONTIG>
__device__ __forceinline__ u64 tile_at(u64 first, u64 k) { return CONTIG ? first + k : blockIdx.x + k * gridDim.x; }

// n_tiles whole tiles (the harness sizes are multiples of TILE)
template <int THREADS, int TILE, int STAGES, bool CONTIG>
__global__ void __launch_bounds__(THREADS + 32) tma_copy(const float* __restrict__ in, float* __restrict__ out, u64 n_tiles)
{
    float* smem = ac::dynamic_smem<float>();
    __shared__ ac::mbarrier_t full[STAGES], empty[STAGES];
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) { ac::mbarrier_init(&full[s], 1); ac::mbarrier_init(&empty[s], THREADS); }
        ac::fence_barrier_init();
    }
    __syncthreads();
    const u64 first = first_tile<CONTIG>(n_tiles), count = tile_count<CONTIG>(n_tiles);
    if (threadIdx.x < 32) {
        if (threadIdx.x == 0)
            for (u64 k = 0; k < count; ++k) {
                const int s = ac::stage_of<STAGES>(k);
                ac::mbarrier_wait_parity(&empty[s], ac::phase_of<STAGES>(k) ^ 1u, {"tma_copy", "empty", s});
                ac::mbarrier_arrive_expect_tx(&full[s], TILE * 4);
                ac::bulk_load(smem + s * TILE, in + tile_at<CONTIG>(first, k) * TILE, TILE * 4, &full[s]);
            }
    } else {
        const int tid = threadIdx.x - 32;
        for (u64 k = 0; k < count; ++k) {
            const int s = ac::stage_of<STAGES>(k);
            ac::mbarrier_wait_parity(&full[s], ac::phase_of<STAGES>(k), {"tma_copy", "full", s});
            const float4* src = reinterpret_cast<const float4*>(smem + s * TILE);
            float4* dst = reinterpret_cast<float4*>(out + tile_at<CONTIG>(first, k) * TILE);
#pragma unroll
            for (int v = tid; v < TILE / 4; v += THREADS) dst[v] = src[v];
            ac::mbarrier_arrive(&empty[s]);
        }
    }
}

template <int TILE, int STAGES, bool CONTIG>
__global__ void tma_g2s2g(const float* __restrict__ in, float* __restrict__ out, u64 n_tiles)
{
    float* smem = ac::dynamic_smem<float>();
    __shared__ ac::mbarrier_t full[STAGES];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < STAGES; ++s) ac::mbarrier_init(&full[s], 1);
    ac::fence_barrier_init();
    const u64 first = first_tile<CONTIG>(n_tiles), count = tile_count<CONTIG>(n_tiles);
    for (u64 j = 0; j + 1 < STAGES && j < count; ++j) {
        ac::mbarrier_arrive_expect_tx(&full[j], TILE * 4);
        ac::bulk_load(smem + j * TILE, in + tile_at<CONTIG>(first, j) * TILE, TILE * 4, &full[j]);
    }
    for (u64 k = 0; k < count; ++k) {
        const u64 next = k + STAGES - 1;
        if (next < count) {
            if (k) ac::bulk_wait_group_read<0>();  // tile k-1's store has read the stage tile `next` reuses
            const int t = ac::stage_of<STAGES>(next);
            ac::mbarrier_arrive_expect_tx(&full[t], TILE * 4);
            ac::bulk_load(smem + t * TILE, in + tile_at<CONTIG>(first, next) * TILE, TILE * 4, &full[t]);
        }
        const int s = ac::stage_of<STAGES>(k);
        ac::mbarrier_wait_parity(&full[s], ac::phase_of<STAGES>(k), {"tma_g2s2g", "full", s});
        ac::bulk_store(out + tile_at<CONTIG>(first, k) * TILE, smem + s * TILE, TILE * 4);
        ac::bulk_commit_group();
    }
    ac::bulk_wait_group<0>();
}
"""

facts = device.current()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
n = (mib << 20) // 4
s, scratch, rot = harness.rotating(facts, n, seed=11)
variants = [("plain_copy", 0, 256, 0, 16), ("plain_copy4", -1, 256, 0, 0)]
for contig in ("false",):
    variants += [(f"tma_copy<512, 16384, 3, {contig}>", 16384, 512 + 32, 3 * 16384 * 4, 1),
                 (f"tma_copy<256, 4096, 6, {contig}>", 4096, 256 + 32, 6 * 4096 * 4, 1),
                 (f"tma_g2s2g<16384, 3, {contig}>", 16384, 32, 3 * 16384 * 4, 1),
                 (f"tma_g2s2g<8192, 6, {contig}>", 8192, 32, 6 * 8192 * 4, 1),
                 (f"tma_g2s2g<4096, 4, {contig}>", 4096, 32, 4 * 4096 * 4, 2)]
# non-persistent: a block per 8 contiguous tiles (blocks/SM < 0 means "grid = tiles / -bps")
variants += [("tma_copy<256, 4096, 3, true>", 4096, 256 + 32, 3 * 4096 * 4, -8),
             ("tma_copy<256, 4096, 3, true>", 4096, 256 + 32, 3 * 4096 * 4, -4),
             ("tma_copy<512, 8192, 3, true>", 8192, 512 + 32, 3 * 8192 * 4, -4),
             ("tma_g2s2g<4096, 3, true>", 4096, 32, 3 * 4096 * 4, -8),
             ("tma_copy<256, 4096, 2, true>", 4096, 256 + 32, 2 * 4096 * 4, -2),
             ("tma_copy<256, 4096, 2, true>", 4096, 256 + 32, 2 * 4096 * 4, -16),
             ("tma_copy<128, 2048, 3, true>", 2048, 128 + 32, 3 * 2048 * 4, -8),
             ("tma_copy<256, 8192, 2, true>", 8192, 256 + 32, 2 * 8192 * 4, -2)]
mod = asynccopy.compile(SOURCE, name_expressions=sorted({v[0] for v in variants if "<" in v[0]}), name="copy_ceiling")


def launch(name, tile, block, shmem, bps, x, y, m):
    k = mod.kernel(name)
    if tile == -1:  # one pass: a block per 4 x 256 float4
        build.launch(k, int(x.handle), int(y.handle), np.uint64(m // 4), grid=-(-m // 4 // 1024), block=block,
                     stream=s)
    elif tile == 0:
        build.launch(k, int(x.handle), int(y.handle), np.uint64(m // 4), grid=facts.sm_count * bps, block=block,
                     stream=s)
    else:
        grid = facts.sm_count * bps if bps > 0 else -(-(m // tile) // -bps)
        build.launch(k, int(x.handle), int(y.handle), np.uint64(m // tile), grid=grid, block=block,
                     stream=s, shmem=shmem)


m = facts.sm_count * 16384 * 5  # a multiple of every tile
x, y = scratch.alloc(m), scratch.alloc(m)
scratch.fill_random(x, m, 5)
for v in variants:
    scratch.fill_value(y, m, float("nan"))
    launch(*v, x, y, m)
    assert np.array_equal(scratch.to_host(x, m), scratch.to_host(y, m)), f"{v[0]} copied wrong"
print("all variants bit-exact", flush=True)
copies, times = [], {v[0]: [] for v in variants}
for _round in range(3):
    copies.append(harness.copy_bandwidth(rot, s)[1])
    for v in variants:
        def one(j, v=v):
            a, b = rot.pair(j)
            launch(*v, a, b, n)
        times[v[0]].append(harness.median(harness.time_ms(one, s, warmup=3, reps=20)))
copy = float(np.median(copies))
print(f"cudaMemcpy: {' '.join(f'{c:.0f}' for c in copies)} GB/s, median {copy:.0f}")
for v in variants:
    ms = float(np.median(times[v[0]]))
    gbps = 8 * n / (ms * 1e-3) / 1e9
    print(f"{v[0]:32s} blocks/SM {v[4]:2d}: {ms:.4f} ms {gbps:6.0f} GB/s {100 * gbps / copy:5.1f}% of cudaMemcpy")
