"""Your own pipelined GEMM on asynccopy's headers: C = A @ W.T in bf16 on Hopper, TMA loads into a
STAGES-deep ring of shared-memory stages, wgmma straight from shared memory, one producer thread and
one consumer warpgroup on a full / empty mbarrier pair per stage.

    python examples/wgmma_gemm.py      # needs an sm_90 GPU (H100, H200) and PyTorch or CuPy (14+, with ml_dtypes)

What it shows: a warp-specialized TMA + wgmma kernel in about eighty lines, because the headers carry
the PTX (tma.cuh, mbarrier.cuh, wgmma.cuh, pipeline.cuh); cuda.core's `as_tensor_map` encoding the two
operand maps; `asynccopy.compile` building it for the live GPU (sm_90a there) and `asynccopy.build.launch`
opting into more than 48 KB of dynamic shared memory. For the fast, general kernel (any shape and layout,
two consumers, persistent) use `asynccopy.gemm`, whose kernel is asynccopy/kernels/gemm_wgmma.cu.
Constraints: m % 64 == 0, n % bn == 0, k % 64 == 0 (the kernel masks nothing), bn in {64, 128, 256}.
"""

from __future__ import annotations

SOURCE = r"""
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tma.cuh>
#include <asynccopy/wgmma.cuh>

#include <cuda_bf16.h>
namespace ac = asynccopy;

// C [m][n] = A [m][k] x W [n][k]^T, all row-major bf16, f32 accumulators. Both operands are K-major (k
// contiguous), wgmma's simplest layout. One block per 64 x BN tile of C. No edge masking: m % 64 == 0,
// n % BN == 0 and k % 64 == 0 (gemm() checks). No setmaxnreg: with one 256-thread block per SM every
// thread may already hold 255 registers, and the BN / 2 accumulators fit.
template <int BN, int STAGES>
__global__ void __launch_bounds__(256, 1)
    tiny_gemm(const __grid_constant__ ac::TensorMap map_a, const __grid_constant__ ac::TensorMap map_b,
              __nv_bfloat16* c, int m, int n, int k)
{
    static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma m64nNk16 with N = 64, 128 or 256");
    constexpr int BK = 64;                      // k per stage: one 128-byte swizzle row of bf16
    constexpr unsigned A_BYTES = 64 * BK * 2, B_BYTES = BN * BK * 2;
    constexpr unsigned STAGE_BYTES = A_BYTES + B_BYTES;
    // The 128B swizzle XORs a 16-byte chunk's index within its 128-byte row (address bits 4..6) with the
    // row's index within its group of 8 rows (bits 7..9): the pattern repeats every 1024 bytes, and TMA
    // (writing) and wgmma (reading through the descriptor) agree on it only if every tile starts on a
    // 1024-byte boundary. The dynamic window's alignment is not guaranteed, so it is rounded up here,
    // into the 1024 bytes of slack the launch adds.
    unsigned char* base = ac::dynamic_smem<unsigned char>();
    unsigned char* ring = base + (-ac::smem_addr(base) & 1023u);  // [STAGES] x (A [64][64], W [BN][64]) bf16,
                                                                   // 128B-swizzled by TMA
    __shared__ ac::mbarrier_t full[STAGES], empty[STAGES];
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            ac::mbarrier_init(&full[s], 1);   // the producer's arrive_expect_tx; the TMA bytes finish the phase
            ac::mbarrier_init(&empty[s], 4);  // one per consumer warp: each warp's wgmma_wait covers only its own share
        }
        ac::fence_barrier_init();  // the inits visible to the async proxy, whose complete_tx lands on them
    }
    __syncthreads();
    const int k_blocks = k / BK, row0 = blockIdx.y * 64, col0 = blockIdx.x * BN;

    if (threadIdx.x < 128) {  // warpgroup 0: thread 0 is the producer, the other 127 have nothing to do
        if (threadIdx.x == 0) {
            for (int kb = 0; kb < k_blocks; ++kb) {
                const int s = ac::stage_of<STAGES>(kb);
                // a fresh barrier counts the phase before its first as complete: the first lap passes at once
                ac::mbarrier_wait_parity(&empty[s], ac::phase_of<STAGES>(kb) ^ 1u, {"tiny_gemm", "empty", s});
                ac::mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
                const int at_a[2] = {kb * BK, row0}, at_b[2] = {kb * BK, col0};  // innermost coordinate first
                ac::tensor_load<2>(ring + s * STAGE_BYTES, &map_a, at_a, &full[s]);
                ac::tensor_load<2>(ring + s * STAGE_BYTES + A_BYTES, &map_b, at_b, &full[s]);
            }
        }
        return;
    }

    // warpgroup 1, the consumer: all 128 threads issue every wgmma together (.sync.aligned)
    const int t = threadIdx.x - 128;
    float acc[BN / 2] = {};
    for (int kb = 0; kb < k_blocks; ++kb) {
        const int s = ac::stage_of<STAGES>(kb);
        // the wait acquires what the TMA engine wrote; TMA writes and wgmma reads are both in the async
        // proxy, so no proxy fence is needed on either side of the ring
        ac::mbarrier_wait_parity(&full[s], ac::phase_of<STAGES>(kb), {"tiny_gemm", "full", s});
        const unsigned char* a = ring + s * STAGE_BYTES;
        const unsigned char* b = a + A_BYTES;
        ac::accumulator_fence(acc);  // keeps the zeroing above the fence: wgmma must see it complete
        ac::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)  // k16 steps: 32 bytes further along the swizzled rows
            ac::Wgmma<BN, ac::Bf16>::template mma<0, 0>(acc, ac::make_desc_k_major(a + 32 * kk),
                                                        ac::make_desc_k_major(b + 32 * kk), 1);
        ac::wgmma_commit();
        // wgmma reads shared memory asynchronously: the stage is free only once its products are done.
        // (Waiting for <1> and releasing the previous stage keeps the tensor cores busy across stages.)
        ac::wgmma_wait<0>();
        ac::accumulator_fence(acc);
        if (t % 32 == 0) ac::mbarrier_arrive(&empty[s]);
    }

    // accumulator i of thread t: row 16 (t / 32) + (t % 32) / 4 + 8 ((i >> 1) & 1), column 8 (i >> 2) +
    // 2 (t % 4) + (i & 1) of the 64 x BN tile (wgmma.cuh): (i, i + 1) are adjacent columns, one 4-byte store
    const int row = row0 + 16 * (t / 32) + (t % 32) / 4, col = col0 + 2 * (t % 4);
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
        __nv_bfloat16* p = c + static_cast<long long>(row + 8 * ((i >> 1) & 1)) * n + col + 8 * (i >> 2);
        *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(acc[i], acc[i + 1]);
    }
}
"""

BM = BK = 64  # rows of C per block; k per stage
BNS = (64, 128, 256)  # the wgmma widths the kernel is instantiated for
SMEM_LIMIT = 227 * 1024  # sm_90's shared memory per block, opted in
STATIC_SMEM = 2048  # the barriers, as the compiler places them before the 1024-byte aligned dynamic part


def name_expression(bn: int = 128, stages: int = 3) -> str:
    return f"tiny_gemm<{bn}, {stages}>"


def smem_bytes(bn: int, stages: int) -> int:
    """The ring of stages, plus 1024 bytes of slack for the kernel's round-up to a 1024-byte boundary."""
    return stages * (BM + bn) * BK * 2 + 1024


def check(a, w, *, stages: int, bn: int) -> tuple[int, int, int]:
    """(m, n, k) of C = A @ W.T, or ValueError naming the rule. Reads only the arrays' metadata (shape,
    dtype, contiguity), so it runs before any device work."""
    if bn not in BNS:
        raise ValueError(f"bn must be one of {BNS} (a wgmma m64nNk16 width), got {bn}")
    if not (isinstance(stages, int) and 1 <= stages <= 8):
        raise ValueError(f"stages must be an integer in [1, 8], got {stages!r}")
    if smem_bytes(bn, stages) + STATIC_SMEM > SMEM_LIMIT:
        most = (SMEM_LIMIT - STATIC_SMEM - 1024) // ((BM + bn) * BK * 2)
        raise ValueError(f"{stages} stages of {(BM + bn) * BK * 2} bytes (bn = {bn}) do not fit the {SMEM_LIMIT} bytes "
                         f"of shared memory a block may have: at most {most}")
    for name, x in (("a", a), ("w", w)):
        if str(x.dtype).removeprefix("torch.") != "bfloat16":
            raise ValueError(f"{name} must be bfloat16, got {x.dtype}")
        if len(x.shape) != 2:
            raise ValueError(f"{name} must be a 2D matrix, got shape {tuple(x.shape)}")
        if not (x.is_contiguous() if hasattr(x, "is_contiguous") else x.flags.c_contiguous):
            raise ValueError(f"{name} must be C-contiguous (row-major)")
    (m, k), (n, kw) = a.shape, w.shape
    if k != kw:
        raise ValueError(f"a is [m x k] and w is [n x k]: got a {tuple(a.shape)} and w {tuple(w.shape)}")
    if m <= 0 or n <= 0 or k <= 0 or m % BM or n % bn or k % BK:
        raise ValueError(f"tiny_gemm masks nothing: m must be a positive multiple of {BM}, n of bn = {bn} and k of "
                         f"{BK}, got m={m}, n={n}, k={k}")
    return m, n, k


def _tensor_map(x, stream, box_rows: int):
    """The 128B-swizzled TMA map of a row-major [rows][k] bf16 matrix, boxes of box_rows x 64."""
    from cuda.core._tensor_map import TensorMapDataType, TensorMapSwizzle
    from cuda.core.utils import StridedMemoryView

    view = StridedMemoryView.from_any_interface(x, stream_ptr=int(stream.handle) or 1)  # ordered after x's producer
    return view.as_tensor_map(box_dim=(box_rows, BK), data_type=TensorMapDataType.BFLOAT16,
                              swizzle=TensorMapSwizzle.SWIZZLE_128B)


def prepare(a, w, *, stages: int = 3, bn: int = 128):
    """Everything gemm does before its launch: (a function that launches the kernel, C)."""
    m, n, k = check(a, w, stages=stages, bn=bn)
    import numpy as np

    import asynccopy
    from asynccopy import arrays, build

    stream = arrays.resolve_stream(None, a)  # a's framework's current stream
    maps = _tensor_map(a, stream, BM), _tensor_map(w, stream, bn)
    if hasattr(a, "is_contiguous"):  # PyTorch
        c = a.new_empty((m, n))
        c_ptr = c.data_ptr()
    else:  # CuPy
        import cupy

        c = cupy.empty((m, n), dtype=a.dtype)
        c_ptr = c.data.ptr
    name = name_expression(bn, stages)
    kernel = asynccopy.compile(SOURCE, name_expressions=[name], name="wgmma_gemm").kernel(name)
    args = (*maps, c_ptr, np.int32(m), np.int32(n), np.int32(k))

    def run():
        build.launch(kernel, *args, grid=(n // bn, m // BM), block=256, stream=stream, shmem=smem_bytes(bn, stages))

    return run, c


def gemm(a, w, *, stages: int = 3, bn: int = 128):
    """C = a @ w.T for row-major bf16 CUDA matrices a [m x k], w [n x k] (PyTorch or CuPy): a new bf16
    [m x n] array, queued on a's framework's current stream."""
    run, c = prepare(a, w, stages=stages, bn=bn)
    run()
    return c


def framework():
    """(random bf16 [rows x cols] CUDA matrix, x -> its float64 copy on the GPU): PyTorch if installed (bf16
    is native there), else CuPy 14+ with ml_dtypes (CuPy's bfloat16)."""
    try:
        import torch

        return (lambda shape: torch.randn(shape, device="cuda").to(torch.bfloat16)), (lambda x: x.double())
    except ImportError:
        import cupy
        import ml_dtypes

        def rand(shape):
            return cupy.random.standard_normal(shape, dtype=cupy.float32).astype(ml_dtypes.bfloat16)

        return rand, (lambda x: x.astype(cupy.float64))


def main() -> None:
    import asynccopy
    from asynccopy import arrays
    from asynccopy.bench.harness import median, time_ms

    rand, f64 = framework()
    facts = asynccopy.device.current()
    for m, n, k in ((1024, 1024, 1024), (4096, 4096, 4096)):
        a, w = rand((m, k)), rand((n, k))
        run, c = prepare(a, w)
        run()
        want = f64(a) @ f64(w).T
        err = float((((f64(c) - want) ** 2).sum() / (want**2).sum()) ** 0.5)
        ms = median(time_ms(lambda i, run=run: run(), arrays.resolve_stream(None, a)))  # CUDA events
        print(f"{name_expression()} on {facts.name}: {m} x {n} x {k}, relative error {err:.1e}, "
              f"{2 * m * n * k / ms / 1e9:.0f} TFLOP/s")
        assert err < 1e-2, "C differs from the float64 reference"


if __name__ == "__main__":
    main()
