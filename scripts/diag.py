"""Diagnostics for the tile-stream kernels: one config at a time, with kernel attributes."""
import sys

from asynccopy import device, stream
from asynccopy.bench import stream_bench

facts = device.current()
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
cases = [("sync", 1, 256, 4096, 1), ("sync", 1, 256, 4096, 4), ("sync", 1, 512, 8192, 1), ("sync", 1, 1024, 4096, 2),
         ("ldgsts", 4, 256, 4096, 1), ("ldgsts", 8, 256, 4096, 1), ("ldgsts", 4, 256, 4096, 2), ("ldgsts", 4, 512, 8192, 1)]
for name, s, threads, tile, bps in cases:
    cfg = stream.StreamConfig.make(name, s, threads=threads, tile=tile)
    k = cfg.compile(facts.arch).kernel(cfg.name_expression())
    a = k.attributes
    r = stream_bench.run([cfg], (0, 8), size_bytes=mib << 20, reps=5, warmup=2, blocks_per_sm=bps, progress=lambda m: None)
    print(f"{cfg.label():16s} s={s} threads={threads} tile={tile} bps={bps} regs={a.num_regs} "
          f"static_smem={a.shared_size_bytes} "
          f"local={a.local_size_bytes}: " + " ".join(f"i{row.intensity}={row.ms:.3f}ms/{row.pct_copy:.0f}%" for row in r.rows))
