"""The trace's own cost per tile (`bench --plan`): a traced tile-stream build timed against the untraced one, so
that the model can take the records' cost off the costs read from the traces (asynccopy.model.costs.Overheads)."""

from __future__ import annotations

from dataclasses import replace

from .. import device, stream, trace
from ..buffers import Scratch
from ..errors import check_int
from . import harness


def cost_per_tile(mechanism: str, stages: int | None = None, *, intensity: int = 0, tile: int = 4096, threads: int = 256,
                  blocks_per_sm: int = 1, rounds: int = 3, reps: int = 10, seed: int = 1, **options) -> float:
    """The trace's own cost per tile, in ns (GPU): the traced build's launch of `trace.run`'s grid (MAX_TILES tiles
    a block) less the untraced build's on the same input, each the median of ``rounds`` x ``reps`` launches timed by
    CUDA events, the two builds in turn (one wave: ``blocks_per_sm`` no more than an SM holds at once, or the
    difference is a wave's, not a block's). Its records (a clock read and a store per event, by one thread) sit in
    the loop a traced compute, issue and barrier are read from; at short tiles they are a share of the period."""
    from cuda.core import Device

    cfg = trace.check_args(mechanism, stages, intensity=intensity, tile=tile, threads=threads,
                           tiles_per_block=trace.MAX_TILES, blocks_per_sm=blocks_per_sm, **options)
    check_int(rounds, "rounds", 1, 100)
    check_int(reps, "reps", 1, 1000)
    facts = device.require(cfg.mech.min_cc, f"mechanism {mechanism!r}")
    cfg.check_fits(facts.smem_per_block_optin, facts.name)
    plain = replace(cfg, trace=False)
    s = Device(facts.device_id).create_stream()
    scratch = Scratch(s, facts)
    grid = facts.sm_count * blocks_per_sm
    n = grid * tile * trace.MAX_TILES
    bufs = []
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        x, y = scratch.alloc(n), scratch.alloc(n)
        buf = Device(facts.device_id).allocate(trace.buffer_words(grid) * 8, stream=s)
        bufs = [x, y, buf]
        scratch.fill_random(x, n, seed)
        for _ in range(rounds):
            for traced, c in ((True, cfg), (False, plain)):
                ptr = int(buf.handle) if traced else 0
                times[traced] += harness.time_ms(
                    lambda _i, c=c, ptr=ptr: stream.launch(c, int(x.handle), int(y.handle), n, intensity, stream=s,
                                                           facts=facts, blocks_per_sm=blocks_per_sm, trace_ptr=ptr),
                    s, warmup=2, reps=reps)
    finally:
        for b in bufs:
            b.close()
        s.close()
    return (harness.median(times[True]) - harness.median(times[False])) * 1e6 / trace.MAX_TILES
