"""`asynccopy calibrate`: measure how this GPU's memory answers load, fit the curve, keep it per device.

Each calibration regime is a traced tile-stream run at intensity 0 (asynccopy.trace): a kernel, a
tile, a thread count, a stage count and the blocks per SM, chosen so that together they keep from one
small tile to hundreds of KiB in flight per SM. Each gives one point (asynccopy.model.memory.
point_from_traces): the median read bytes in flight on the SM at a copy's issue, and the median latency
its copies saw. The curve is fitted on the regimes :data:`HELD_OUT` leaves and checked on the ones it
holds out (whole tile sizes, and a second kernel, that the fit never sees); the check is reported on
its own, beside the fit's.

The main kernel is ``tma_1d_pipeline``: one elected thread of a producer warp moves a whole tile with
one bulk copy, so its own costs are tens of ns against microseconds of latency and the points measure
the memory, not the kernel. The held-out ``ldgsts`` regimes (256 threads issuing 16-byte copies) show
how far a curve from bulk copies carries to LDGSTS.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import device, mechanism, stream, trace
from ..errors import AsyncCopyError
from ..model import memory
from .harness import default_progress

FLOAT = 4


@dataclass(frozen=True)
class Regime:
    mechanism: str
    tile: int  # floats
    stages: int
    blocks_per_sm: int
    threads: int = 256
    options: tuple = ()  # (name, value) pairs: the mechanism's options (vec, cache, producers)

    @property
    def name(self) -> str:
        opts = "".join(f" {k}={v}" for k, v in self.options)
        return (f"{self.mechanism}{opts} tile={self.tile} threads={self.threads} stages={self.stages} "
                f"blocks={self.blocks_per_sm}")

    def config(self) -> stream.StreamConfig:
        return trace.check_args(self.mechanism, self.stages, tile=self.tile, threads=self.threads,
                                blocks_per_sm=self.blocks_per_sm, tiles_per_block=trace.MAX_TILES,
                                **dict(self.options))


MAIN = "tma_1d_pipeline"  # CC 9.0+; below it the LDGSTS kernel is the main one and there is no second
LDGSTS = ("ldgsts", (("vec", 16), ("cache", "cg")))
TILES = (1024, 2048, 4096, 8192, 16384)
STAGES = (1, 2, 3, 4, 6, 8)
BLOCKS = (1, 2)
HELD_OUT_TILES = (2048, 8192)  # regimes of these tiles are never fitted on
SECOND = LDGSTS  # another kernel, held out whole
SECOND_REGIMES = ((4096, 2, 1), (4096, 4, 1), (4096, 8, 1), (2048, 4, 2))
L2_PASSES = 4  # a traced run's input and output together span this many times the L2: its first tiles come from DRAM


def main_kernel(cc) -> tuple[str, tuple]:
    """The calibration's main kernel on a GPU of compute capability ``cc``: TMA bulk copies where there are
    (one elected thread a tile: its own costs are tens of ns), else 16-byte LDGSTS."""
    return (MAIN, ()) if tuple(cc) >= mechanism.get(MAIN).min_cc else LDGSTS


def held_out(point: memory.Point, main: str = MAIN) -> bool:
    """The split: a held-out tile size, or a kernel other than the main one."""
    return not point.regime.startswith(main + " ") or any(f" tile={t} " in point.regime for t in HELD_OUT_TILES)


def regimes(smem_limit: int, smem_per_sm: int, arch: str | None = None) -> list[Regime]:
    """Every calibration regime that fits ``smem_limit`` per block and ``smem_per_sm`` for its blocks."""
    out = []
    name, opts = main_kernel(device.cc_of_arch(arch) if arch else mechanism.get(MAIN).min_cc)
    cands = [Regime(name, t, s, b, options=opts) for t in TILES for s in STAGES for b in BLOCKS]
    if name != SECOND[0]:
        cands += [Regime(SECOND[0], t, s, b, options=SECOND[1]) for t, s, b in SECOND_REGIMES]
    for r in cands:
        try:
            cfg = r.config()
            cfg.check_fits(smem_limit, "this device")
        except AsyncCopyError:  # ArgumentError among them: the regime does not fit or compile here
            continue
        if arch is not None and not cfg.compiles_for(arch):
            continue
        if r.blocks_per_sm * (cfg.smem_bytes + 1024) > smem_per_sm:
            continue
        out.append(r)
    return out


def tiles_per_block(r: Regime, sm_count: int, l2_bytes: int) -> int:
    """Tiles per block of a regime's traced run: enough that input and output span L2_PASSES x the L2, so
    that the traced first tiles (filled first, evicted since) come from DRAM, not L2."""
    per = sm_count * r.blocks_per_sm * r.tile * FLOAT * 2  # bytes read and written per tile of every block
    return max(trace.MAX_TILES, -(-L2_PASSES * l2_bytes // per))


def run(*, progress=default_progress) -> memory.Fit:
    """Trace every regime on the local GPU, fit the curve on the fitted regimes, check it on the held-out
    ones (GPU). A regime that fails is left out with a note (the fit needs at least 3 fitted regimes and one held
    out)."""
    facts = device.require(mechanism.get(LDGSTS[0]).min_cc, "asynccopy calibrate")
    main, _ = main_kernel(facts.cc)
    todo = regimes(facts.smem_per_block_optin, facts.smem_per_sm, facts.arch)
    points = []
    for i, r in enumerate(todo, 1):
        progress(f"[{i}/{len(todo)}] {r.name}")
        try:
            _, blocks = trace.run(r.mechanism, r.stages, intensity=0, tile=r.tile, threads=r.threads,
                                  tiles_per_block=tiles_per_block(r, facts.sm_count, facts.l2_bytes),
                                  blocks_per_sm=r.blocks_per_sm, check_all=False, **dict(r.options))
            points.append(memory.point_from_traces(r.name, blocks, tile_bytes=r.tile * FLOAT,
                                                   blocks_per_sm=r.blocks_per_sm))
        except AsyncCopyError as exc:  # ArgumentError among them
            progress(f"  left out: {str(exc).splitlines()[0]}")
    return memory.fit(points, lambda p: held_out(p, main),
                      source=f"calibrated on {facts.name}, {len(points)} traced regimes",
                      device_key=memory.device_key(facts))


def calibration(*, recalibrate: bool = False, progress=default_progress) -> tuple[memory.Fit, bool]:
    """This device's calibration: the cached one, or (none cached, or ``recalibrate``) a fresh one, saved.
    Returns (fit, whether it was measured now)."""
    facts = device.current()
    if not recalibrate:
        saved = memory.cached(facts)
        if saved is not None:
            return saved, False
    result = run(progress=progress)
    memory.save(result)
    return result, True
