"""The instruction ceilings `bench gemm` holds the kernels against: mma.sync (the LDGSTS kernel's
instruction) and FFMA (the CUDA-core kernel's), each measured on the live GPU with nothing but the
instruction in flight (kernels/gemm_peak.cu). wgmma's ceiling is the datasheet's dense rate (% peak)."""

from __future__ import annotations

import numpy as np

from .. import build
from .harness import median, time_ms

CHAINS = 8  # kernels/gemm_peak.cu
BLOCKS_PER_SM, THREADS = 4, 256


def _module(arch: str):
    return build.compile(build.read_kernel("gemm_peak.cu"), arch=arch, name="gemm_peak",
                         name_expressions=("mma_sync_peak<asynccopy::Bf16>",))


def measure(facts, stream, *, iters: int = 4096) -> dict[str, float]:
    """TFLOP/s of mma.sync m16n8k16 (bf16, f32 accumulate) and of FFMA, median of 10 launches."""
    from cuda.core import Device

    module = _module(facts.arch)
    blocks = BLOCKS_PER_SM * facts.sm_count
    out = Device(facts.device_id).allocate(4 * blocks * THREADS, stream=stream)
    try:
        got = {}
        for name, kernel, flop, seed in (
            ("mma.sync", module.kernel("mma_sync_peak<asynccopy::Bf16>"), blocks * THREADS // 32 * CHAINS * 4096,
             np.uint32(7)),
            ("FFMA", module.kernel("ffma_peak"), blocks * THREADS * 4 * CHAINS * 2, np.float32(0.5)),
        ):
            def run(i, kernel=kernel, seed=seed):
                build.launch(kernel, int(out.handle), np.int32(iters), seed, grid=blocks, block=THREADS,
                             stream=stream)

            ms = median(time_ms(run, stream, warmup=2, reps=10))
            got[name] = flop * iters / (ms * 1e-3) / 1e12
        return got
    finally:
        out.close(stream)
