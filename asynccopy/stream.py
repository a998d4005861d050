"""The tile-stream workload (kernels/stream.cu) from Python: mechanisms, checks, compile, launch.

Data flows one way: arguments → :class:`StreamConfig` (validated, pure Python) → compile (cached)
→ launch on the caller's stream → an output array of the caller's kind.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from . import arrays, build, device
from . import mechanism as mechanism_table
from .errors import ArgumentError, check_int
from .mechanism import MAX_PRODUCERS, MAX_STAGES, Mechanism
from .model import planner

COMPILED_STAGES = tuple(range(1, 9))  # one compile builds all of these; others compile on demand
MAX_ELEMS_PER_THREAD = 64  # a thread keeps its share of a tile in registers (sync, sync_double)
MAX_TILES_PER_BLOCK = 1 << 29  # a block's tile counter stays below it (pipeline.cuh's exact division)


def _int(value, what: str) -> int:
    return check_int(value, what)


def _check_threads_and_tile(threads, tile) -> tuple[int, int]:
    threads = _int(threads, "threads")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ArgumentError(f"threads must be a multiple of 32 in [32, 1024], got {threads}")
    tile = _int(tile, "tile")
    if tile <= 0 or tile % (4 * threads):
        raise ArgumentError(f"tile must be a positive multiple of 4 x threads = {4 * threads} elements, got {tile}")
    if tile // threads > MAX_ELEMS_PER_THREAD:
        raise ArgumentError(f"tile / threads = {tile // threads} elements per thread exceeds {MAX_ELEMS_PER_THREAD}; "
                            f"use more threads or a smaller tile")
    return threads, tile


def _check_stages(mech: Mechanism, stages, tile: int) -> int:
    if stages is None:
        stages = mech.fixed_stages or default_stages(tile)
    stages = _int(stages, "stages")
    if stages < 1:
        raise ArgumentError(f"stages must be >= 1, got {stages}")
    if mech.fixed_stages is not None and stages != mech.fixed_stages:
        raise ArgumentError(f"mechanism {mech.name!r} has exactly {mech.fixed_stages} stage(s); got stages={stages}")
    if stages > MAX_STAGES:
        raise ArgumentError(f"stages must be <= {MAX_STAGES}, got {stages}")
    return stages


def _check_copy_options(mech: Mechanism, vec, cache) -> tuple[int | None, str | None]:
    if vec is None:
        vec = mech.default_vec
    elif not mech.vecs:
        raise ArgumentError(f"mechanism {mech.name!r} takes no vec option (copy width is fixed)")
    elif _int(vec, "vec") not in mech.vecs:
        raise ArgumentError(f"vec must be one of {', '.join(map(str, mech.vecs))} bytes for {mech.name!r}, got {vec}")
    if cache is None:
        cache = mech.default_cache if vec == 16 or mech.default_cache != "cg" else "ca"
    elif not mech.caches:
        raise ArgumentError(f"mechanism {mech.name!r} takes no cache option")
    elif cache not in mech.caches:
        raise ArgumentError(f"cache must be one of {', '.join(map(repr, mech.caches))}, got {cache!r}")
    if cache == "cg" and vec != 16:
        raise ArgumentError(f"cache='cg' (L1 bypass) needs vec=16 (PTX allows .cg only for 16-byte copies), got vec={vec}")
    return vec, cache


def _check_producers(mech: Mechanism, producers, threads: int) -> int:
    if producers is None:
        producers = mech.producer_warps
    elif not mech.producers_option:
        raise ArgumentError(f"mechanism {mech.name!r} takes no producers option"
                            + (f" (it has {mech.producer_warps} producer warp)" if mech.producer_warps else ""))
    else:
        producers = _int(producers, "producers")
        if not 1 <= producers <= MAX_PRODUCERS:
            raise ArgumentError(f"producers must be a number of warps in [1, {MAX_PRODUCERS}], got {producers}")
    if threads + 32 * producers > 1024:
        raise ArgumentError(f"{mech.name!r} adds {producers} producer warp(s): threads + "
                            f"{32 * producers} must be <= 1024, got threads={threads}")
    return producers


@dataclass(frozen=True)
class StreamConfig:
    """One kernel of the tile-stream family, validated. ``tile`` counts float32 elements."""

    mechanism: str
    stages: int
    threads: int = 256
    tile: int = 4096
    vec: int | None = None
    cache: str | None = None
    trace: bool = False  # built with -DASYNCCOPY_TRACE=1: takes a trace buffer (asynccopy.trace)
    producers: int = 0  # producer warps added to the block (0 for mechanisms without them)
    tiles_per_block: int = 0  # 0: a persistent grid; T > 0: a block per T contiguous tiles

    @staticmethod
    def make(mechanism: str, stages: int | None = None, *, threads: int = 256, tile: int = 4096,
             vec: int | None = None, cache: str | None = None, producers: int | None = None,
             tiles_per_block: int = 0) -> StreamConfig:
        """Check every argument that needs no device; ``stages=None`` picks a default."""
        mech = mechanism_table.get(mechanism)
        threads, tile = _check_threads_and_tile(threads, tile)
        stages = _check_stages(mech, stages, tile)
        vec, cache = _check_copy_options(mech, vec, cache)
        producers = _check_producers(mech, producers, threads)
        tiles_per_block = _int(tiles_per_block, "tiles_per_block")
        if not 0 <= tiles_per_block <= 1 << 20:
            raise ArgumentError(f"tiles_per_block must be 0 (a persistent grid) or a run length in [1, 2^20], "
                                f"got {tiles_per_block}")
        cfg = StreamConfig(mechanism, stages, threads, tile, vec, cache, producers=producers,
                           tiles_per_block=tiles_per_block)
        for rule in mech.rules:
            broken = rule(cfg)
            if broken:
                raise ArgumentError(broken)
        return cfg

    @property
    def mech(self) -> Mechanism:
        return mechanism_table.get(self.mechanism)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one block: STAGES buffers of TILE floats."""
        return self.stages * self.tile * 4

    def check_fits(self, smem_limit: int, where: str) -> None:
        """ArgumentError if the buffers cannot fit in ``smem_limit`` bytes of shared memory per block."""
        reserve = 1024  # static shared memory: pipeline state, barriers
        if self.smem_bytes + reserve > smem_limit:
            raise ArgumentError(
                f"{self.mechanism} with {self.stages} stage(s) x tile {self.tile} floats needs "
                f"{self.smem_bytes / 1024:.0f} KiB of shared memory per block; {where} allows "
                f"{smem_limit / 1024:.0f} KiB (less {reserve} B for barriers)"
            )

    def name_expression(self, stages: int | None = None) -> str:
        return self.mech.name_expression(self if stages is None else replace(self, stages=stages))

    def label(self) -> str:
        extra = ""
        if self.mech.vecs:
            extra += f" vec{self.vec}"
        if self.mech.caches:
            extra += f" .{self.cache}"
        if self.mech.producers_option:
            extra += f" p{self.producers}"
        if self.tiles_per_block:
            extra += f" {self.tiles_per_block}/block"
        return f"{self.mechanism}{extra}"

    @property
    def block(self) -> int:
        """Threads per block: the computing threads plus any producer warps."""
        return self.threads + 32 * self.producers

    def compiles_for(self, arch: str) -> bool:
        return device.cc_of_arch(arch) >= self.mech.min_cc

    def compile(self, arch: str | None = None) -> build.Module:
        """Build this kernel's module: every stage count in COMPILED_STAGES (plus its own) at once; a
        traced build, its own stage count only (a calibration compiles one per variant)."""
        if arch is not None and not self.compiles_for(arch):
            need = self.mech.min_cc
            raise ArgumentError(f"mechanism {self.mechanism!r} needs compute capability {need[0]}.{need[1]}; "
                                f"{device.parse_arch(arch)} is below it")
        if self.mech.fixed_stages is not None or self.trace:  # a traced build is one measurement's
            names = (self.name_expression(),)
        else:
            names = tuple(self.name_expression(s) for s in sorted(set(COMPILED_STAGES) | {self.stages}))
        defines = {}
        if self.trace:
            defines["ASYNCCOPY_TRACE"] = 1
        if self.tiles_per_block:
            defines["ASYNCCOPY_TILES_PER_BLOCK"] = self.tiles_per_block
        return build.compile(build.read_kernel(self.mech.source), arch=arch, name_expressions=names,
                             name=f"stream_{self.mechanism}", defines=defines or None)

    def expected_sass(self, arch: str) -> str | None:
        """The async-copy opcode this kernel must contain on ``arch``, None for the synchronous ones."""
        return self.mech.copy_op(device.cc_of_arch(arch), self.vec)


@functools.cache  # a plan costs ~50 us: run(stages=None) must not pay it per call
def planned_stages(cfg: StreamConfig, facts, blocks_per_sm: int = 1) -> int:
    """The planner's stage count for cfg's tile on a live device (asynccopy.planner)."""
    p = planner.plan([planner.Operand("tile", (cfg.tile,), "float32")], threads=cfg.block,
                     device=facts, blocks_per_sm=blocks_per_sm, max_stages=MAX_STAGES,
                     static_smem=1024)
    return max(1, min(p.recommended, MAX_STAGES))


@functools.cache
def default_stages(tile: int) -> int:
    """The planner's stage count for a tile with no device at hand: an H200, one block per SM
    (run() plans for the live device instead, with its calibrated memory curve where one is cached)."""
    p = planner.plan([planner.Operand("tile", (tile,), "float32")], threads=32, device="H200", blocks_per_sm=1,
                     max_stages=MAX_STAGES, static_smem=1024, memory=None)
    return max(1, p.recommended)


def _kernel(cfg: StreamConfig, arch: str):
    """The loaded kernel of cfg: resolved once (per hang-check setting), so a launch costs only the launch."""
    return _kernel_for(cfg, arch, build.hang_timeout_ns())


@functools.cache
def _kernel_for(cfg: StreamConfig, arch: str, hang_ns: int):
    return cfg.compile(arch).kernel(cfg.name_expression())


def launch(cfg: StreamConfig, in_ptr: int, out_ptr: int, n: int, intensity: int, *, stream,
           facts: device.DeviceFacts, blocks_per_sm: int = 1, trace_ptr: int = 0) -> None:
    """Launch one tile-stream kernel on raw device pointers (checked arguments only). A traced
    config (cfg.trace) also takes the trace buffer's pointer (asynccopy.trace.buffer_words)."""
    if n == 0:
        return
    if cfg.trace and not trace_ptr:
        raise ArgumentError("a traced kernel needs a trace buffer (trace_ptr)")
    if cfg.trace and cfg.tiles_per_block:
        raise ArgumentError("traces record a persistent grid's blocks: use tiles_per_block=0 with trace")
    n_tiles = -(-n // cfg.tile)
    if cfg.tiles_per_block:
        grid = -(-n_tiles // cfg.tiles_per_block)
        if grid >= 1 << 31:
            raise ArgumentError(f"{n_tiles} tiles in runs of {cfg.tiles_per_block} need {grid} blocks (at most 2^31 - 1)")
    else:
        grid = max(1, min(facts.sm_count * blocks_per_sm, n_tiles))
    per_block = cfg.tiles_per_block or -(-n_tiles // grid)
    if per_block >= MAX_TILES_PER_BLOCK:  # stage_of / phase_of divide exactly below it (pipeline.cuh)
        raise ArgumentError(f"{per_block} tiles per block: at most {MAX_TILES_PER_BLOCK - 1} (use larger tiles)")
    args = (in_ptr, out_ptr, np.uint64(n), np.int32(intensity))
    if cfg.mech.launch_args is not None:
        args = cfg.mech.launch_args(cfg, in_ptr, n, facts.device_id) + args
    if cfg.trace:
        args = args + (trace_ptr,)
    kernel = _kernel(cfg, facts.arch)
    build.launch(kernel, *args, grid=grid, block=cfg.block, stream=stream, shmem=cfg.smem_bytes)


def check_intensity(intensity) -> int:
    intensity = _int(intensity, "intensity")
    if not 0 <= intensity < 1 << 31:
        raise ArgumentError(f"intensity must be in [0, 2^31), got {intensity}")
    return intensity


def check_blocks_per_sm(blocks_per_sm) -> int:
    blocks_per_sm = _int(blocks_per_sm, "blocks_per_sm")
    if blocks_per_sm < 1:
        raise ArgumentError(f"blocks_per_sm must be >= 1, got {blocks_per_sm}")
    return blocks_per_sm


def run(x, mechanism: str = "ldgsts", *, stages: int | None = None, intensity: int = 0, tile: int = 4096,
        threads: int = 256, vec: int | None = None, cache: str | None = None, producers: int | None = None,
        blocks_per_sm: int = 1, tiles_per_block: int = 0, out=None, stream=None):
    """Run the tile-stream workload on ``x`` (a contiguous float32 CUDA array) with one mechanism.

    Returns ``out`` (or a new array of x's kind and shape). The kernel is queued on ``stream``
    (default: the current stream of x's framework); no synchronization unless x is a JAX array.
    ``blocks_per_sm`` sizes the persistent grid; ``tiles_per_block=T`` launches a block per T
    contiguous tiles instead.
    """
    cfg = StreamConfig.make(mechanism, stages, threads=threads, tile=tile, vec=vec, cache=cache, producers=producers,
                            tiles_per_block=tiles_per_block)
    intensity = check_intensity(intensity)
    blocks_per_sm = check_blocks_per_sm(blocks_per_sm)
    arrays.check_device_array(x, "x")
    if out is not None:
        arrays.check_device_array(out, "out")
    facts = device.require(cfg.mech.min_cc, f"mechanism {mechanism!r}")
    if stages is None and cfg.mech.fixed_stages is None:
        cfg = replace(cfg, stages=planned_stages(cfg, facts, blocks_per_sm))
    cfg.check_fits(facts.smem_per_block_optin, facts.name)
    s = arrays.resolve_stream(stream, x)
    src = arrays.view(x, "x", stream=s)
    dst = arrays.output(out, src, stream=s)
    launch(cfg, src.ptr, dst.ptr, src.size, intensity, stream=s, facts=facts, blocks_per_sm=blocks_per_sm)
    return dst.finish(s)


def matches_reference(got: np.ndarray, host: np.ndarray, intensity: int, tile: int) -> bool:
    """Bit-exact at intensity 0, float64-referenced (rtol 1e-5) above; unwritten (NaN) outputs fail."""
    want = reference(host, intensity, tile)
    if intensity == 0:
        return bool(np.array_equal(got, want.astype(np.float32)))
    return bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))


def reference(x: np.ndarray, intensity: int, tile: int = 4096) -> np.ndarray:
    """The workload computed in float64 with NumPy (see kernels/include/asynccopy/tile_stream.cuh)."""
    intensity = check_intensity(intensity)
    tile = _int(tile, "tile")
    if tile <= 0 or tile % 4:
        raise ArgumentError(f"tile must be a positive multiple of 4 floats, got {tile}")
    flat = np.asarray(x, dtype=np.float64).ravel()
    n = flat.size
    n_tiles = -(-n // tile)
    padded = np.zeros(n_tiles * tile)
    padded[:n] = flat
    v = padded.reshape(n_tiles, tile // 4, 4)  # [tile][float4][component]
    nv = tile // 4
    neighbor = nv // 2 + 1
    acc = v.copy()
    for k in range(1, intensity + 1):
        acc = acc * 0.5 + np.roll(v, -(k * neighbor) % nv, axis=1)
        for _ in range(4):
            acc = acc * 0.9375 + 0.0625
    return acc.reshape(-1)[:n].reshape(np.shape(x))

