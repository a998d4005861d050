"""Experiment: why are some stage counts slow at high intensity (tma_1d_pipeline 2/4/8, ldgsts 6/8)?

Times each kernel at intensity 8 and 24 on 1 GiB for stages 1..8, and again with its dynamic shared
memory padded (the kernel uses the same buffers; only the block's shared-memory footprint, hence the
L1/shared carve-out and the blocks that could share an SM, changes).
    python3 scripts/stages_diag.py [size_mib]
"""
import sys

import numpy as np

from asynccopy import build, device, stream
from asynccopy.bench import harness

facts = device.current()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
n = (mib << 20) // 4
s, scratch, rot = harness.rotating(facts, n, seed=3)
print(f"copy {harness.copy_bandwidth(rot, s)[1]:.0f} GB/s", flush=True)


def timed(cfg, k, shmem, intensity, grid=None):
    g = grid or max(1, min(facts.sm_count, -(-n // cfg.tile)))

    def one(j):
        x, y = rot.pair(j)
        build.launch(k, int(x.handle), int(y.handle), np.uint64(n), np.int32(intensity), grid=g, block=cfg.block,
                     stream=s, shmem=shmem)
    return harness.median(harness.time_ms(one, s, warmup=2, reps=10))


for mech, opts in (("tma_1d_pipeline", {}), ("ldgsts", {"vec": 16, "cache": "cg"}), ("ws_tma", {"producers": 1})):
    for intensity in (8, 24):
        line = []
        for st in range(1, 9):
            cfg = stream.StreamConfig.make(mech, st, **opts)
            k = stream._kernel(cfg, facts.arch)
            t = timed(cfg, k, cfg.smem_bytes, intensity)
            pad = timed(cfg, k, cfg.smem_bytes + (8 - st) * cfg.tile * 4 + 4096, intensity) if st < 8 else float("nan")
            line.append(f"S{st} {t:.3f}/{pad:.3f}")
        print(f"{mech:16s} i{intensity:2d} ms (plain/padded to 8 tiles): " + "  ".join(line), flush=True)
    a = k.attributes
    print(f"  {mech}: {a.num_regs} registers, {a.shared_size_bytes} B static shared, local {a.local_size_bytes} B")
