"""Experiment: what gets tma_1d_pipeline at intensity 0 closest to the device-to-device copy?

Variants of the tile-stream kernels over tile / threads / stages / blocks per SM (and optional -D
switches per variant).
Each is checked bit-exact first, then timed in interleaved rounds against the same run's copy.
    python3 scripts/tma95.py [size_mib] [rounds]      (TMA95_JSON=path also writes JSON)
"""
import json
import os
import sys

import numpy as np

from asynccopy import build, device, stream
from asynccopy.bench import harness

facts = device.current()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3

# (mechanism, tile floats, consumer threads, stages, blocks per SM, defines). The -D switches measured on
# 2026-11-29 (streaming stores, L2 evict-first bulk loads, per-warp arrivals, split bulk copies, L2
# bulk prefetch) gained nothing or lost up to 26 points (NOTES.md) and were removed from the kernels;
# pass your own through `defines` to try others.
variants = [
    ("tma_1d_pipeline", 16384, 512, 3, 1, {}),
    ("tma_1d_pipeline", 16384, 256, 3, 1, {}),
    ("tma_1d_pipeline", 8192, 512, 6, 1, {}),
    ("tma_1d_pipeline", 8192, 256, 3, 2, {}),
    ("tma_1d_pipeline", 4096, 256, 4, 1, {}),
    ("ws_tma", 16384, 512, 3, 1, {}),
    ("ldgsts", 4096, 256, 4, 1, {}),
    ("ldgsts", 8192, 512, 4, 1, {}),
]

n = (mib << 20) // 4
s, scratch, rot = harness.rotating(facts, n, seed=7)
kernels = []
for mech, tile, threads, stages, bps, defs in variants:
    cfg = stream.StreamConfig.make(mech, stages, threads=threads, tile=tile)
    mod = build.compile(build.read_kernel(cfg.mech.source), arch=facts.arch, name_expressions=(cfg.name_expression(),),
                        name=f"tma95_{mech}", defines=defs or None)
    kernels.append((cfg, bps, defs, mod.kernel(cfg.name_expression())))
print(f"{len(kernels)} kernels built; {mib} MiB, {rot.sets} rotating sets", flush=True)


def launch(k, cfg, bps, x, y, n_):
    grid = max(1, min(facts.sm_count * bps, -(-n_ // cfg.tile)))
    build.launch(k, int(x.handle), int(y.handle), np.uint64(n_), np.int32(0), grid=grid, block=cfg.block, stream=s,
                 shmem=cfg.smem_bytes)


# correctness first: bit-exact on fresh random data with a ragged tail, output poisoned
for cfg, bps, defs, k in kernels:
    m = facts.sm_count * bps * cfg.tile * 3 + cfg.tile // 2 + 3
    x, y = scratch.alloc(m), scratch.alloc(m)
    scratch.fill_random(x, m, 99)
    scratch.fill_value(y, m, float("nan"))
    launch(k, cfg, bps, x, y, m)
    if not np.array_equal(scratch.to_host(x, m), scratch.to_host(y, m)):
        sys.exit(f"WRONG: {cfg.label()} {cfg.tile} {cfg.threads} S{cfg.stages} bps{bps} {defs}")
    x.close()
    y.close()
print("all variants bit-exact", flush=True)

copies, times = [], [[] for _ in kernels]
for _round in range(rounds):
    copies.append(harness.copy_bandwidth(rot, s)[1])
    for i, (cfg, bps, _defs, k) in enumerate(kernels):
        def one(j, k=k, cfg=cfg, bps=bps):
            x, y = rot.pair(j)
            launch(k, cfg, bps, x, y, n)
        times[i].append(harness.median(harness.time_ms(one, s, warmup=3, reps=20)))
copies.append(harness.copy_bandwidth(rot, s)[1])
copy = float(np.median(copies))
print(f"copy GB/s per round: {' '.join(f'{c:.0f}' for c in copies)}; median {copy:.0f}")
rows = []
for (cfg, bps, defs, _), ts in zip(kernels, times):
    ms = float(np.median(ts))
    gbps = 8 * n / (ms * 1e-3) / 1e9
    flags = ",".join(f"{k.split('_', 1)[1]}={v}" for k, v in defs.items()) or "-"
    rows.append(dict(mechanism=cfg.mechanism, tile=cfg.tile, threads=cfg.threads, stages=cfg.stages, bps=bps,
                     defines=defs, ms=ms, rounds_ms=ts, gbps=gbps, pct_copy=100 * gbps / copy))
    print(f"{cfg.mechanism:16s} tile {cfg.tile:5d} thr {cfg.threads:4d} S{cfg.stages} bps{bps} {flags:45s} "
          f"{ms:.4f} ms {gbps:6.0f} GB/s {100 * gbps / copy:5.1f}%  rounds {' '.join(f'{t:.4f}' for t in ts)}")
out = os.environ.get("TMA95_JSON")
if out:
    with open(out, "w") as f:
        json.dump(dict(copy_gbps=copies, size_mib=mib, rows=rows), f, indent=1)
