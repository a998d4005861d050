"""Your own pipelined kernel on asynccopy's headers: row sums of a matrix, rows streamed through a
STAGES-deep cp.async ring.

    python examples/custom_pipeline.py            # needs a GPU (sm_80+) and CuPy or PyTorch

What it shows: `asynccopy.compile` puts <asynccopy/...> on the include path and caches the cubin;
`asynccopy.build.launch` opts into more than 48 KB of dynamic shared memory when asked.
"""

from __future__ import annotations

import numpy as np

SOURCE = r"""
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/pipeline.cuh>
namespace ac = asynccopy;

// out[r] = sum of row r of a [rows][COLS] float32 matrix. Block b sums rows b, b + gridDim.x, ...;
// the next STAGES-1 rows are in flight (cp.async, 16 B per copy) while one is summed.
template <int THREADS, int COLS, int STAGES>
__global__ void __launch_bounds__(THREADS) row_sums(const float* __restrict__ x, float* __restrict__ out, int rows)
{
    static_assert(COLS % (4 * THREADS) == 0, "a row splits into whole float4s per thread");
    float* ring = ac::dynamic_smem<float>();  // [STAGES][COLS] f32
    __shared__ float partial[THREADS / 32];
    const unsigned long long mine = ac::tiles_of_block(rows);
    auto issue = [&](unsigned long long k) {
        if (k < mine) {
            const float* row = x + ac::tile_of_block(k) * COLS;
            float* dst = ring + ac::stage_of<STAGES>(k) * COLS;
            for (int c = threadIdx.x * 4; c < COLS; c += THREADS * 4) ac::cp_async<16, true>(dst + c, row + c);
        }
        ac::commit_group();  // converged, possibly empty
    };
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
    for (unsigned long long k = 0; k < mine; ++k) {
        issue(k + STAGES - 1);          // its buffer was released by the barrier at the end of k-1
        ac::wait_group<STAGES - 1>();   // row k has landed (this thread's part: it reads only that)
        const float* row = ring + ac::stage_of<STAGES>(k) * COLS;
        float sum = 0.0f;
        for (int c = threadIdx.x * 4; c < COLS; c += THREADS * 4) {
            const float4 v = *reinterpret_cast<const float4*>(row + c);
            sum += (v.x + v.y) + (v.z + v.w);
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            float total = 0.0f;
            for (int w = 0; w < THREADS / 32; ++w) total += partial[w];
            out[ac::tile_of_block(k)] = total;
        }
        __syncthreads();  // partial[] and the row's buffer are free again
    }
    ac::wait_all();
}
"""

THREADS, COLS, STAGES = 256, 8192, 4


def name_expression(threads: int = THREADS, cols: int = COLS, stages: int = STAGES) -> str:
    return f"row_sums<{threads}, {cols}, {stages}>"


def main() -> None:
    import asynccopy
    from asynccopy import arrays, build

    try:
        import cupy as xp

        def to_numpy(a):
            return xp.asnumpy(a)
    except ImportError:
        import torch as xp  # type: ignore[no-redef]

        def to_numpy(a):
            return a.cpu().numpy()

    facts = asynccopy.device.current()
    module = asynccopy.compile(SOURCE, name_expressions=[name_expression()], name="row_sums")
    rows = facts.sm_count * 5 + 3
    rng = np.random.default_rng()
    host = rng.standard_normal((rows, COLS), dtype=np.float32)
    if xp.__name__ == "cupy":
        x, out = xp.asarray(host), xp.full(rows, np.nan, dtype=xp.float32)
    else:
        x, out = xp.from_numpy(host).cuda(), xp.full((rows,), float("nan"), device="cuda")
    stream = arrays.resolve_stream(None, x)
    build.launch(module.kernel(name_expression()), arrays.view(x, "x").ptr, arrays.view(out, "out").ptr,
                 np.int32(rows), grid=min(rows, facts.sm_count), block=THREADS, stream=stream,
                 shmem=STAGES * COLS * 4)
    stream.sync()
    want = host.astype(np.float64).sum(axis=1)
    got = to_numpy(out)
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"row_sums<{THREADS}, {COLS}, {STAGES}> on {facts.name}: {rows} rows, max error / max |sum| = {err:.2e}")
    assert np.isfinite(got).all() and err < 1e-5, "row sums differ from the float64 reference"


if __name__ == "__main__":
    main()
