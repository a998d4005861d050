"""`asynccopy bench`: every tile-stream mechanism x stages x intensities on the local GPU.

validate → compile → check correctness (fresh random input, poisoned output, every element) →
time (warm-up, CUDA events, median, inputs rotated past L2) → rows, each against the same run's
device-to-device copy bandwidth and the same intensity's `sync` time.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import device, stream
from ..errors import ArgumentError, AsyncCopyError
from .harness import Scratch, copy_bandwidth, median, rotating, time_ms

DEFAULT_STAGES = (1, 2, 3, 4, 6, 8)
DEFAULT_INTENSITIES = (0, 1, 2, 4, 8, 12, 16, 24)
# (mechanism, options) variants swept by default; each multi-stage one over every stage count.
DEFAULT_VARIANTS = (
    ("sync", {}),
    ("sync_double", {}),
    ("ldgsts", {"vec": 16, "cache": "cg"}),
    ("ldgsts", {"vec": 16, "cache": "ca"}),
    ("ldgsts", {"vec": 8, "cache": "ca"}),
    ("ldgsts", {"vec": 4, "cache": "ca"}),
    ("pipeline", {}),
    ("barrier", {"vec": 16}),
    ("barrier", {"vec": 8}),
    ("cg", {}),
    ("primitives", {}),
    ("tma_1d", {}),
    ("tma_1d_pipeline", {}),
    ("tma_2d", {}),
    ("ws_pipeline", {"producers": 2}),
    ("ws_ldgsts", {"producers": 1}),
    ("ws_ldgsts", {"producers": 2}),
    ("ws_tma", {"producers": 1}),
    ("ws_tma", {"producers": 2}),
)


@dataclass
class Row:
    mechanism: str
    label: str
    stages: int
    vec: int | None
    cache: str | None
    copy_op: str  # what moves the data on this arch: LDGSTS, UBLKCP (TMA bulk), UTMALDG (TMA tensor), LDG
    intensity: int
    ms: float
    gbps: float  # bytes read + written per second / 1e9
    pct_copy: float  # of the same run's device-to-device copy bandwidth
    speedup_vs_sync: float | None = None
    samples_ms: list[float] = field(default_factory=list, repr=False)
    producers: int = 0  # producer warps beside the computing threads (warp-specialized kernels)


@dataclass
class StreamBench:
    device: dict
    n: int
    tile: int
    threads: int
    blocks_per_sm: int
    copy_ms: float
    copy_gbps: float
    rows: list[Row]

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items()}


def configs(mechanisms=None, stages=DEFAULT_STAGES, *, tile=4096, threads=256, smem_limit=None,
            where="this device", arch=None, tiles_per_block=0) -> list[stream.StreamConfig]:
    """The swept configurations: DEFAULT_VARIANTS filtered by mechanism, each over ``stages``;
    configurations that cannot fit ``smem_limit`` or need more than ``arch`` has are left out."""
    out = []
    for name, opts in DEFAULT_VARIANTS:
        if mechanisms and name not in mechanisms:
            continue
        mech = stream.MECHANISMS[name]
        for s in ([mech.fixed_stages] if mech.fixed_stages else stages):
            try:
                cfg = stream.StreamConfig.make(name, s, tile=tile, threads=threads, tiles_per_block=tiles_per_block,
                                               **opts)
            except ArgumentError:
                if mechanisms and name in mechanisms:
                    raise  # asked for by name: say why it cannot run
                continue  # e.g. producer warps do not fit beside 1024 threads, or the tile does not split

            if arch is not None and not cfg.compiles_for(arch):
                continue
            if smem_limit is not None:
                try:
                    cfg.check_fits(smem_limit, where)
                except AsyncCopyError:
                    continue
            out.append(cfg)
    unknown = set(mechanisms or ()) - set(stream.MECHANISMS)
    if unknown:
        stream.StreamConfig.make(sorted(unknown)[0])  # raises the unknown-mechanism error
    return out


def check(cfg: stream.StreamConfig, scratch: Scratch, intensities, *, seed: int) -> None:
    """Run cfg on a fresh random input (not a multiple of the tile) and compare every element."""
    facts = scratch.facts
    n = facts.sm_count * cfg.tile * 2 + cfg.tile // 2 + 3
    x, y = scratch.alloc(n), scratch.alloc(n)
    scratch.fill_random(x, n, seed)
    host_x = scratch.to_host(x, n)
    for k in sorted({0, max(intensities)} if intensities else {0}):
        scratch.fill_value(y, n, float("nan"))
        stream.launch(cfg, int(x.handle), int(y.handle), n, k, stream=scratch.stream, facts=facts)
        got = scratch.to_host(y, n)
        if not stream.matches_reference(got, host_x, k, cfg.tile):
            want = stream.reference(host_x, k, cfg.tile)
            bad = np.flatnonzero(~np.isclose(got, want, rtol=1e-5, atol=1e-6) | np.isnan(got))
            raise AsyncCopyError(
                f"{cfg.label()} stages={cfg.stages} intensity={k}: {bad.size} of {n} elements wrong "
                f"(first at {bad[0] if bad.size else '?'}: got {got[bad[0]] if bad.size else '?'}, "
                f"want {want[bad[0]] if bad.size else '?'})"
            )
    x.close()
    y.close()


def _setup(facts, size_bytes: int, seed, progress, warmup: int, reps: int):
    """A stream, random rotating inputs past L2, and the same run's device-to-device copy bandwidth."""
    progress = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    seed = int(time.time_ns() % (1 << 31)) if seed is None else seed
    n = size_bytes // 4
    s, scratch, rot = rotating(facts, n, seed=seed)
    progress(f"device {facts.name}: {n * 4 / 2**30:.2f} GiB in + out per run, {rot.sets} rotating set(s)")
    copy_ms, copy_gbps = copy_bandwidth(rot, s, warmup=warmup, reps=reps)
    progress(f"device-to-device copy: {copy_ms:.3f} ms, {copy_gbps:.0f} GB/s (read + write)")
    return progress, seed, s, scratch, n, rot, copy_ms, copy_gbps


def run(cfgs: list[stream.StreamConfig], intensities=DEFAULT_INTENSITIES, *, size_bytes: int = 1 << 30,
        reps: int = 20, warmup: int = 3, blocks_per_sm: int = 1, seed: int | None = None,
        progress=None) -> StreamBench:
    facts = device.current()
    progress, seed, s, scratch, n, rot, copy_ms, copy_gbps = _setup(facts, size_bytes, seed, progress, warmup, reps)
    rows: list[Row] = []
    for i, cfg in enumerate(cfgs, 1):
        t0 = time.perf_counter()
        cfg.compile(facts.arch)
        check(cfg, scratch, intensities, seed=seed + 1000 + i)
        times = []
        for k in intensities:
            def one(r: int, k=k, cfg=cfg) -> None:
                x, y = rot.pair(r)
                stream.launch(cfg, int(x.handle), int(y.handle), n, k, stream=s, facts=facts,
                              blocks_per_sm=blocks_per_sm)

            samples = time_ms(one, s, warmup=warmup, reps=reps)
            ms = median(samples)
            gbps = 2 * 4 * n / (ms * 1e-3) / 1e9
            rows.append(Row(cfg.mechanism, cfg.label(), cfg.stages, cfg.vec, cfg.cache,
                            cfg.expected_sass(facts.arch) or "LDG", k, ms, gbps,
                            100 * gbps / copy_gbps, samples_ms=samples, producers=cfg.producers))
            times.append(ms)
        progress(f"[{i:3d}/{len(cfgs)}] {cfg.label():18s} stages={cfg.stages}: "
                 + " ".join(f"{t:.3f}" for t in times) + f" ms  ({time.perf_counter() - t0:.1f} s)")
    for buf in rot.inputs + rot.outputs:
        buf.close()
    sync_ms = {r.intensity: r.ms for r in rows if r.mechanism == "sync"}
    for r in rows:
        if r.intensity in sync_ms:
            r.speedup_vs_sync = sync_ms[r.intensity] / r.ms
    return StreamBench(facts.as_dict(), n, cfgs[0].tile if cfgs else 0, cfgs[0].threads if cfgs else 0,
                       blocks_per_sm, copy_ms, copy_gbps, rows)


def balanced_intensity(rows: list[Row]) -> int | None:
    """The intensity at which `sync` spends about as long computing as loading: t(k) ≈ 2 t(0)."""
    sync = {r.intensity: r.ms for r in rows if r.mechanism == "sync"}
    if 0 not in sync or len(sync) < 2:
        return None
    return min((k for k in sync if k > 0), key=lambda k: abs(sync[k] / sync[0] - 2.0))


def summary(result: StreamBench) -> list[str]:
    """The headline figures: best LDGSTS copy vs the copy bandwidth; speedups at the balanced intensity."""
    rows = result.rows
    lines = [f"device-to-device copy: {result.copy_gbps:.0f} GB/s ({result.copy_ms:.3f} ms for "
             f"{result.n * 4 / 2**30:.2f} GiB read + the same written)"]
    order = ("LDGSTS", "UBLKCP", "UTMALDG", "LDG")  # every copy instruction the sweep has, async ones first
    ops = sorted({r.copy_op for r in rows}, key=lambda op: order.index(op) if op in order else len(order))
    for op in ops:
        zero = [r for r in rows if r.intensity == 0 and r.copy_op == op]
        if zero:
            best = max(zero, key=lambda r: r.gbps)
            lines.append(f"intensity 0, best {op:6s}: {best.label} stages={best.stages}: {best.gbps:.0f} GB/s "
                         f"= {best.pct_copy:.1f}% of the copy bandwidth")
    k = balanced_intensity(rows)
    if k is not None:
        at = [r for r in rows if r.intensity == k]
        sync0 = next(r.ms for r in rows if r.mechanism == "sync" and r.intensity == 0)
        sync_k = next(r for r in at if r.mechanism == "sync")
        lines.append(f"balanced intensity {k}: sync {sync_k.ms:.3f} ms = {sync_k.ms / sync0:.2f} x its intensity-0 time")
        for op in (op for op in ops if op != "LDG"):
            multi = [r for r in at if r.stages > 1 and r.copy_op == op]
            if multi:
                best = min(multi, key=lambda r: r.ms)
                lines.append(f"  best multi-stage {op}: {best.label} stages={best.stages}: {best.ms:.3f} ms, "
                             f"{best.speedup_vs_sync:.2f}x sync")
        ws = [r for r in at if r.producers and r.mechanism.startswith("ws_")]
        plain = [r for r in at if r.stages > 1 and not r.mechanism.startswith("ws_") and r.copy_op != "LDG"]
        if ws and plain:
            w, p = min(ws, key=lambda r: r.ms), min(plain, key=lambda r: r.ms)
            lines.append(f"  best warp-specialized: {w.label} stages={w.stages}: {w.ms:.3f} ms vs best other "
                         f"{p.label} stages={p.stages}: {p.ms:.3f} ms ({p.ms / w.ms:.3f}x)")
        dbl = [r for r in at if r.mechanism == "sync_double"]
        if dbl:
            lines.append(f"  sync_double (register-staged, ordinary loads): {dbl[0].ms:.3f} ms, "
                         f"{dbl[0].speedup_vs_sync:.2f}x sync")
    return lines


# ---------------------------------------------------------------------------------------------
# Chunk-size sweep: where does TMA overtake LDGSTS?

DEFAULT_CHUNKS = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # bytes per tile (one copy stage of a block)
CHUNK_STAGES = 4
CHUNK_BYTES_PER_SM = 64 * 1024  # blocks per SM chosen to keep this much buffer per SM


@dataclass
class ChunkRow:
    chunk_bytes: int
    mechanism: str
    threads: int
    stages: int
    blocks_per_sm: int
    ms: float
    gbps: float
    pct_copy: float


def chunk_configs(chunk: int, mechanisms=("ldgsts", "tma_1d_pipeline")) -> list[tuple[stream.StreamConfig, int]]:
    """The same tile, threads, stages and blocks per SM for each mechanism at one chunk size."""
    tile = chunk // 4
    threads = max(32, min(256, chunk // 16))
    bps = max(1, min(16, CHUNK_BYTES_PER_SM // (CHUNK_STAGES * chunk)))
    return [(stream.StreamConfig.make(m, CHUNK_STAGES, tile=tile, threads=threads), bps) for m in mechanisms]


def chunk_sweep(chunks=DEFAULT_CHUNKS, *, size_bytes: int = 1 << 30, reps: int = 20, warmup: int = 3,
                seed: int | None = None, progress=None) -> tuple[float, list[ChunkRow]]:
    """Intensity-0 throughput of LDGSTS (16 B, .cg) and TMA bulk copies per chunk size, each checked first."""
    facts = device.require((9, 0), "the LDGSTS / TMA chunk sweep")
    progress, seed, s, scratch, n, rot, _, copy_gbps = _setup(facts, size_bytes, seed, progress, warmup, reps)
    rows = []
    for chunk in chunks:
        for cfg, bps in chunk_configs(chunk):
            cfg.compile(facts.arch)
            check(cfg, scratch, (0,), seed=seed + chunk)

            def one(r: int, cfg=cfg, bps=bps) -> None:
                x, y = rot.pair(r)
                stream.launch(cfg, int(x.handle), int(y.handle), n, 0, stream=s, facts=facts, blocks_per_sm=bps)

            ms = median(time_ms(one, s, warmup=warmup, reps=reps))
            gbps = 2 * 4 * n / (ms * 1e-3) / 1e9
            rows.append(ChunkRow(chunk, cfg.mechanism, cfg.threads, cfg.stages, bps, ms, gbps, 100 * gbps / copy_gbps))
        progress(f"chunk {chunk:6d} B: " + "  ".join(f"{r.mechanism} {r.gbps:.0f} GB/s" for r in rows[-2:]))
    for buf in rot.inputs + rot.outputs:
        buf.close()
    return copy_gbps, rows


def crossover(rows: list[ChunkRow]) -> int | None:
    """The smallest chunk from which TMA is at least as fast as LDGSTS at every larger chunk."""
    by_chunk: dict[int, dict[str, float]] = {}
    for r in rows:
        by_chunk.setdefault(r.chunk_bytes, {})[r.mechanism] = r.gbps
    chunks = sorted(by_chunk)
    for i, c in enumerate(chunks):
        if all(by_chunk[d].get("tma_1d_pipeline", 0) >= by_chunk[d].get("ldgsts", 0) for d in chunks[i:]):
            return c
    return None
