"""Experiment: are some stage counts slow at high intensity (NOTES 15, 22)?

Times each kernel at the given intensities (default 8 and 24) on 1 GiB for stages 1..8. NOTES 15 ran
it with the dynamic shared memory padded to 8 tiles as well (no change); NOTES 22 found the cause in
the compute loop's schedule and ran it again after the fix.
    python3 scripts/stages_diag.py [intensity ...]
"""
import sys

import numpy as np

from asynccopy import build, device, stream
from asynccopy.bench import harness

facts = device.current()
intensities = [int(a) for a in sys.argv[1:]] or [8, 24]
n = (1 << 30) // 4
s, scratch, rot = harness.rotating(facts, n, seed=3)
print(f"copy {harness.copy_bandwidth(rot, s)[1]:.0f} GB/s", flush=True)


def timed(cfg, k, shmem, intensity, grid=None):
    g = grid or max(1, min(facts.sm_count, -(-n // cfg.tile)))

    def one(j):
        x, y = rot.pair(j)
        build.launch(k, int(x.handle), int(y.handle), np.uint64(n), np.int32(intensity), grid=g, block=cfg.block,
                     stream=s, shmem=shmem)
    return harness.median(harness.time_ms(one, s, warmup=2, reps=10))


for mech, opts in (("tma_1d_pipeline", {}), ("ldgsts", {"vec": 16, "cache": "cg"}), ("ws_tma", {"producers": 1}),
                   ("ws_pipeline", {"producers": 2}), ("pipeline", {})):
    for intensity in intensities:
        line = []
        for st in range(1, 9):
            cfg = stream.StreamConfig.make(mech, st, **opts)
            k = stream._kernel(cfg, facts.arch)
            line.append(f"S{st} {timed(cfg, k, cfg.smem_bytes, intensity):.3f}")
        print(f"{mech:16s} i{intensity:2d} ms: " + "  ".join(line), flush=True)
