"""Minimal kernels of the synchronization patterns compute-sanitizer misreads, to show each tool's
verdict on them apart from our kernels (docs/design.md, "compute-sanitizer"):

    compute-sanitizer --tool synccheck python3 scripts/sanitizer_patterns.py arrive_inc     # flagged
    compute-sanitizer --tool synccheck python3 scripts/sanitizer_patterns.py arrive_noinc   # clean
    compute-sanitizer --tool initcheck python3 scripts/sanitizer_patterns.py bulk_store     # flagged
    compute-sanitizer --tool initcheck python3 scripts/sanitizer_patterns.py plain_store    # clean

arrive_inc: every thread issues a cp.async and cp.async.mbarrier.arrive WITH increment (what libcu++'s
cuda::pipeline::producer_commit does), then a plain arrive; all wait on the phase. Valid PTX (the
increment and the asynchronous arrive cancel; the plain arrive counts), yet synccheck reports "Missing
wait" and the launch fails (H200, 2026-12-01). arrive_noinc: the same with .noinc and no plain arrive.
bulk_store: y = 2x written only by TMA bulk stores (tma.scale_bulk) and copied to the host: initcheck
reports the copy as reading uninitialized memory; plain_store: the same bytes written by an LDGSTS kernel.
Every pattern checks its result.
"""

import sys

import numpy as np

SOURCE = r"""
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/mbarrier.cuh>
namespace ac = asynccopy;
template <bool INC>
__global__ void arrive_pattern(const float* in, float* out, int rounds)
{
    __shared__ __align__(16) float buf[128];
    __shared__ ac::mbarrier_t full;
    if (threadIdx.x == 0) { ac::mbarrier_init(&full, 128); ac::fence_barrier_init(); }
    __syncthreads();
    for (int r = 0; r < rounds; ++r) {
        ac::cp_async<4>(buf + threadIdx.x, in + r * 128 + threadIdx.x);
        if (INC) {
            asm volatile("cp.async.mbarrier.arrive.shared.b64 [%0];" ::"r"(ac::smem_addr(&full)) : "memory");
            ac::mbarrier_arrive(&full);
        } else {
            ac::cp_async_mbarrier_arrive_noinc(&full);
        }
        ac::mbarrier_wait_parity(&full, r & 1, {"arrive_pattern", "full", 0});
        out[r * 128 + threadIdx.x] = buf[(threadIdx.x + 1) % 128];  // another thread's copy
        __syncthreads();
    }
}
"""


def _arrive(inc: bool) -> None:
    from cuda.core import Device

    import asynccopy
    from asynccopy import arrays, build

    name = f"arrive_pattern<{'true' if inc else 'false'}>"
    kernel = asynccopy.compile(SOURCE, name_expressions=[name], name="sanitizer_patterns").kernel(name)
    dev = Device()
    dev.set_current()
    s = dev.create_stream()
    rounds = 4
    host = np.arange(rounds * 128, dtype=np.float32)
    x, y = dev.allocate(host.nbytes, stream=s), dev.allocate(host.nbytes, stream=s)
    arrays.to_device(host, int(x.handle), s)
    build.launch(kernel, int(x.handle), int(y.handle), np.int32(rounds), grid=1, block=128, stream=s)
    got = arrays.to_host(int(y.handle), host.nbytes, s).view(np.float32).reshape(rounds, 128)
    assert np.array_equal(got, np.roll(host.reshape(rounds, 128), -1, axis=1)), "wrong result"


def _store(bulk: bool) -> None:
    import cupy as cp

    import asynccopy
    from asynccopy import tma

    x = cp.arange(3 * 4096 + 12, dtype=cp.float32)
    y = tma.scale_bulk(x, chunk=4096) if bulk else asynccopy.run(2 * x, "ldgsts", stages=2, tile=1024, threads=128)
    assert np.array_equal(cp.asnumpy(cp.asarray(y)), 2 * cp.asnumpy(x)), "wrong result"


PATTERNS = {"arrive_inc": lambda: _arrive(True), "arrive_noinc": lambda: _arrive(False),
            "bulk_store": lambda: _store(True), "plain_store": lambda: _store(False)}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PATTERNS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(PATTERNS)}}}")
    PATTERNS[sys.argv[1]]()
    print(f"{sys.argv[1]}: ran, result right")
