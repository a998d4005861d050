"""Timelines measured inside the kernels (kernels/include/asynccopy/trace.cuh), decoded and drawn.

A traced tile-stream kernel (``StreamConfig(..., trace=True)``, built with ``-DASYNCCOPY_TRACE=1``)
records, per block and for its first MAX_TILES tiles, clock64 at each stage event; two
%globaltimer/clock64 pairs per block convert ticks to nanoseconds on one time axis.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import arrays, device, stream
from .buffers import Scratch
from .errors import ArgumentError, AsyncCopyError, check_int
from .model import simulate
from .model.simulate import TileEvents

MAX_TILES = 64
EVENTS = ("issued", "ready", "compute_start", "compute_end", "released")
HEADER = 4
STRIDE = HEADER + MAX_TILES * len(EVENTS)


def buffer_words(blocks: int) -> int:
    """u64 words of a trace buffer for a grid of ``blocks`` blocks."""
    return blocks * STRIDE


@dataclass
class BlockTrace:
    block: int
    tiles: list[TileEvents]  # ns since the earliest block start of the launch
    released: dict[int, float]  # tile -> ns, where the kernel records a release
    ns_per_tick: float


def clocked_blocks(raw: np.ndarray, blocks: int, stride: int):
    """(block, its words after the header, ticks -> ns on the launch's time axis, ns per tick) for every
    block of a trace buffer (``stride`` words a block: the header, then the kernel's own words) that
    recorded its start and end; the time axis starts at the earliest block start."""
    raw = np.asarray(raw, dtype=np.uint64)
    if raw.size < blocks * stride:
        raise ArgumentError(f"a trace of {blocks} blocks has {blocks * stride} words, got {raw.size}")
    rec = raw[: blocks * stride].reshape(blocks, stride).astype(np.int64)
    started = rec[:, 0][rec[:, 0] > 0]
    if started.size == 0:
        raise ArgumentError("the trace is empty: was the kernel built with trace=True and launched with its buffer?")
    t0 = int(started.min())
    for b in range(blocks):
        gt0, c0, gt1, c1 = (int(v) for v in rec[b, :HEADER])
        if gt0 == 0 or c1 <= c0 or gt1 < gt0:
            continue
        scale = (gt1 - gt0) / (c1 - c0)

        def ns(tick, gt0=gt0, c0=c0, scale=scale) -> float:
            return (gt0 - t0) + (int(tick) - c0) * scale

        yield b, rec[b, HEADER:], ns, scale


def decode(raw: np.ndarray, blocks: int) -> list[BlockTrace]:
    """The trace of every block that recorded one; tiles without ready and compute times are left out."""
    out = []
    for b, words, ns, scale in clocked_blocks(raw, blocks, STRIDE):
        ev = words.reshape(MAX_TILES, len(EVENTS))
        tiles, released = [], {}
        for k in range(MAX_TILES):
            issued, ready, start, end, rel = (int(v) for v in ev[k])
            if ready and start and end:
                tiles.append(TileEvents(b, k, ns(issued) if issued else ns(ready), ns(ready), ns(start), ns(end)))
            if rel:
                released[k] = ns(rel)
        out.append(BlockTrace(b, tiles, released, scale))
    return out


def overlapping(tiles: list[TileEvents]) -> list[int]:
    """Tiles k whose compute overlaps the copy of tile k + 1 (issued before the compute ended, ready
    after it started)."""
    by = {t.tile: t for t in tiles}
    hits = []
    for k, t in by.items():
        nxt = by.get(k + 1)
        if nxt and min(nxt.ready, t.compute_end) - max(nxt.issued, t.compute_start) > 0:
            hits.append(k)
    return hits


def as_simulation(block: BlockTrace, stages: int) -> simulate.Simulation:
    """A measured block trace in the simulator's shape, to draw it the same way."""
    t0 = min(t.issued for t in block.tiles)
    tiles = [replace(t, issued=t.issued - t0, ready=t.ready - t0, compute_start=t.compute_start - t0,
                     compute_end=t.compute_end - t0) for t in block.tiles]
    return simulate.Simulation(stages, 1, len(tiles), tiles, max(t.compute_end for t in tiles))


def check_args(mechanism: str, stages: int | None = None, *, intensity: int = 0, tile: int = 4096, threads: int = 256,
               tiles_per_block: int = 32, blocks_per_sm: int = 1, **options) -> stream.StreamConfig:
    """The traced configuration, every argument checked (no GPU needed)."""
    cfg = replace(stream.StreamConfig.make(mechanism, stages, tile=tile, threads=threads, **options), trace=True)
    stream.check_intensity(intensity)
    stream.check_blocks_per_sm(blocks_per_sm)
    check_int(tiles_per_block, "tiles_per_block", 1, 1 << 20)
    return cfg


def run(mechanism: str, stages: int | None = None, *, intensity: int = 0, tile: int = 4096, threads: int = 256,
        tiles_per_block: int = 32, blocks_per_sm: int = 1, seed: int = 1, check_all: bool = True, **options):
    """Run a traced tile-stream kernel on fresh random input (checked), return (config, block traces).

    ``check_all=False`` checks the first two tiles of every block only: the float64 reference costs
    seconds per run at high intensity, and a calibration (bench --plan) makes dozens of runs."""
    from cuda.core import Device

    cfg = check_args(mechanism, stages, intensity=intensity, tile=tile, threads=threads, tiles_per_block=tiles_per_block,
                     blocks_per_sm=blocks_per_sm, **options)
    facts = device.require(cfg.mech.min_cc, f"mechanism {mechanism!r}")
    cfg.check_fits(facts.smem_per_block_optin, facts.name)
    s = Device(facts.device_id).create_stream()
    scratch = Scratch(s, facts)
    grid = facts.sm_count * blocks_per_sm
    n = grid * tile * tiles_per_block
    bufs = []
    try:
        x, y = scratch.alloc(n), scratch.alloc(n)
        buf = Device(facts.device_id).allocate(buffer_words(grid) * 8, stream=s)
        bufs = [x, y, buf]
        buf.fill(0, stream=s)
        scratch.fill_random(x, n, seed)
        scratch.fill_value(y, n, float("nan"))
        stream.launch(cfg, int(x.handle), int(y.handle), n, intensity, stream=s, facts=facts,
                      blocks_per_sm=blocks_per_sm, trace_ptr=int(buf.handle))
        raw = arrays.to_host(int(buf.handle), buffer_words(grid) * 8, s).view(np.uint64)
        checked = n if check_all else min(n, 2 * grid * tile)  # tiles 0 .. 2 * grid - 1: two per block
        if not stream.matches_reference(scratch.to_host(y, checked), scratch.to_host(x, checked), intensity, tile):
            raise AsyncCopyError(f"the traced {cfg.label()} kernel computed wrong results")
    finally:
        for b in bufs:
            b.close()
        s.close()
    return cfg, decode(raw, grid)

