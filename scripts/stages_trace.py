"""Experiment: is the high-intensity stage-count anomaly (NOTES 15) in the compute or in the waits?

For each mechanism and stage count, a traced run (64 tiles per block, every SM) gives per tile the
compute time (compute_end - compute_start), the wait before it (compute_start - previous
compute_end) and the effective SM clock (clock64 ticks per %globaltimer ns); an untraced 1 GiB run
gives the time that showed the anomaly.
    python3 scripts/stages_trace.py [intensity ...]
"""
import sys

import numpy as np

from asynccopy import build, device, stream, trace
from asynccopy.bench import harness

facts = device.current()
intensities = [int(a) for a in sys.argv[1:]] or [24]
n = (1 << 30) // 4
s, scratch, rot = harness.rotating(facts, n, seed=3)


def untraced_ms(cfg, intensity):
    k = stream._kernel(cfg, facts.arch)
    g = max(1, min(facts.sm_count, -(-n // cfg.tile)))

    def one(j):
        x, y = rot.pair(j)
        build.launch(k, int(x.handle), int(y.handle), np.uint64(n), np.int32(intensity), grid=g, block=cfg.block,
                     stream=s, shmem=cfg.smem_bytes)
    return harness.median(harness.time_ms(one, s, warmup=2, reps=7))


for intensity in intensities:
    for mech, opts in (("tma_1d_pipeline", {}), ("ws_tma", {"producers": 1}), ("ldgsts", {"vec": 16, "cache": "cg"})):
        for st in (2, 3, 4, 5, 6, 8):
            cfg = stream.StreamConfig.make(mech, st, **opts)
            ms = untraced_ms(cfg, intensity)
            _, blocks = trace.run(mech, st, intensity=intensity, tiles_per_block=64, **opts)
            comp, wait, period = [], [], []
            for b in blocks:
                ts = sorted(b.tiles, key=lambda t: t.tile)[4:]  # past the pipeline fill
                comp += [t.compute_end - t.compute_start for t in ts]
                wait += [b2.compute_start - b1.compute_end for b1, b2 in zip(ts, ts[1:])]
                period.append((ts[-1].compute_end - ts[0].compute_start) / len(ts))
            ghz = np.median([1.0 / b.ns_per_tick for b in blocks])
            print(f"i{intensity:2d} {mech:16s} S{st}: untraced {ms:.3f} ms | traced per tile: compute "
                  f"{np.median(comp):6.0f} ns, wait {np.median(wait):5.0f} ns (p90 {np.percentile(wait, 90):5.0f}),"
                  f" period {np.median(period):6.0f} ns | SM clock {ghz:.3f} GHz", flush=True)
