// gemm_peak.cu — the ceilings a GEMM kernel is held against on this GPU: how fast the instruction it is
// built on runs when nothing else does (no loads, no shared memory, no barriers).
//
// What: mma_sync_peak<Tag> issues mma.sync.m16n8k16 (bf16 or f16 in, f32 accumulate) from registers;
// ffma_peak issues FFMA. Each thread runs `iters` rounds of CHAINS independent accumulations (enough
// independent work to cover the instruction's latency), then writes its sum so nothing is dead code.
// FLOP per launch: mma: blocks x warps x iters x CHAINS x 4096; FFMA: blocks x threads x iters x 4 x CHAINS x 2.
// How: the bench launches 4 blocks of 256 threads per SM (ample warps per scheduler) and times them with
// CUDA events; asynccopy.bench.peaks turns that into TFLOP/s.
// Constraints: sm_80+ (mma.sync m16n8k16 bf16).
// Run: `asynccopy bench gemm` prints the ceilings beside the kernels.
#include <asynccopy/mma.cuh>

namespace ac = asynccopy;

constexpr int CHAINS = 8;

template <class Tag>
__global__ void __launch_bounds__(256) mma_sync_peak(float* __restrict__ out, int iters, unsigned seed)
{
    const unsigned x = seed ^ threadIdx.x;
    unsigned a[4] = {x, x * 3u, x * 5u, x * 7u};
    unsigned b[2] = {x * 11u, x * 13u};
    float d[CHAINS][4] = {};
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) ac::mma_m16n8k16<Tag>(d[c], a, b);
    }
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) sum += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

extern "C" __global__ void __launch_bounds__(256) ffma_peak(float* __restrict__ out, int iters, float seed)
{
    float v[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) v[c] = seed + c + threadIdx.x;
    const float mul = 1.0f - 1e-7f * seed, add = 1e-7f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < CHAINS; ++c) v[c] = fmaf(v[c], mul, add);
    }
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) sum += v[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
