"""The standard tiled Triton matmul, the reference `bench gemm` measures our kernels against beside
cuBLAS: grouped tile order, fp32 accumulation, masked edges, `num_stages` the pipeline depth Triton
builds for the loads. Imported only when Triton is there."""

from __future__ import annotations

import functools

CONFIG = (128, 256, 64, 8)  # (BM, BN, BK, warps): the tile the best Triton matmul on the H200 took (FACTS.md)
STAGES = (2, 3, 4, 5)  # num_stages swept; the best is the reference


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a, b, c, m, n, k, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(m, BM), tl.cdiv(n, BN)
        per_group = GROUP_M * tiles_n
        first_m = pid // per_group * GROUP_M
        size_m = min(tiles_m - first_m, GROUP_M)
        pm = first_m + (pid % per_group) % size_m
        pn = (pid % per_group) // size_m
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(k, BK)):
            kk = k0 * BK + rk
            x = tl.load(a + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < m) & (kk[None, :] < k), other=0.0)
            y = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < k) & (rn[None, :] < n), other=0.0)
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(rm[:, None] < m) & (rn[None, :] < n))

    return matmul


def available() -> str | None:
    """None if Triton can run here, else why not."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed"
    return None


def launcher(a, b, c, *, stages: int, config=CONFIG):
    """A callable that queues C = A x B (torch tensors) with one (BM, BN, BK, warps) config and num_stages."""
    import triton

    bm, bn, bk, warps = config
    m, k = a.shape
    n = b.shape[1]
    kernel = _kernel()
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)

    def run() -> None:
        kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=warps, num_stages=stages)

    return run
