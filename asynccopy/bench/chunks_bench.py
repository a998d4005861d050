"""`asynccopy bench chunks`: where does a TMA bulk copy overtake LDGSTS? Intensity-0 throughput of two
mechanisms per chunk size (the bytes of one tile, one copy stage of a block), with the same tile,
threads, stages and blocks per SM for both, each checked before it is timed, against the same run's
device-to-device copy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import device, stream
from .harness import Case, default_progress, sweep, workspace
from .stream_bench import check

DEFAULT_CHUNKS = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # bytes per tile
DEFAULT_PAIR = ("ldgsts", "tma_1d_pipeline")  # (the LDGSTS side, the TMA side)
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


@dataclass
class ChunkBench:
    device: dict
    copy_gbps: float
    pair: tuple[str, str]
    rows: list[ChunkRow]

    def as_dict(self) -> dict:
        return asdict(self)


def chunk_configs(chunk: int, mechanisms=DEFAULT_PAIR) -> list[tuple[stream.StreamConfig, int]]:
    """The same tile, threads, stages and blocks per SM for each mechanism at one chunk size."""
    tile = chunk // 4
    threads = max(32, min(256, chunk // 16))
    bps = max(1, min(16, CHUNK_BYTES_PER_SM // (CHUNK_STAGES * chunk)))
    return [(stream.StreamConfig.make(m, CHUNK_STAGES, tile=tile, threads=threads), bps) for m in mechanisms]


def run(chunks=DEFAULT_CHUNKS, *, pair=DEFAULT_PAIR, size_bytes: int = 1 << 30, reps: int = 20, warmup: int = 3,
        seed: int | None = None, progress=default_progress) -> ChunkBench:
    facts = device.require((9, 0), "the LDGSTS / TMA chunk sweep")
    configs = [(chunk, cfg, bps) for chunk in chunks for cfg, bps in chunk_configs(chunk, pair)]
    ws = workspace(facts, size_bytes, seed=seed, warmup=warmup, reps=reps, progress=progress)

    def case(chunk: int, cfg: stream.StreamConfig, bps: int) -> Case:
        def prepare() -> None:
            cfg.compile(facts.arch)
            check(cfg, ws.scratch, (0,), seed=ws.seed + chunk)

        def run_one(_, r: int) -> None:
            x, y = ws.rotation.pair(r)
            stream.launch(cfg, int(x.handle), int(y.handle), ws.n, 0, stream=ws.stream, facts=facts, blocks_per_sm=bps)

        def describe(got: dict) -> str:
            return f"{2 * 4 * ws.n / (min(got[0]) * 1e-3) / 1e9:.0f} GB/s at best"

        return Case(f"chunk {chunk:6d} B {cfg.mechanism}", (0,), prepare, run_one, describe=describe,
                    tag=(chunk, cfg, bps))

    try:
        timed = sweep([case(*c) for c in configs], ws.stream, warmup=warmup, reps=reps, progress=progress)
    finally:
        ws.close()
    rows = []
    for t in timed:
        chunk, cfg, bps = t.case.tag
        gbps = 2 * 4 * ws.n / (t.ms * 1e-3) / 1e9
        rows.append(ChunkRow(chunk, cfg.mechanism, cfg.threads, cfg.stages, bps, t.ms, gbps, 100 * gbps / ws.copy_gbps))
    return ChunkBench(facts.as_dict(), ws.copy_gbps, tuple(pair), rows)


def crossover(rows: list[ChunkRow], pair=DEFAULT_PAIR) -> int | None:
    """The smallest chunk from which the second mechanism (TMA) is at least as fast as the first (LDGSTS)
    at every larger chunk."""
    first, second = pair
    by_chunk: dict[int, dict[str, float]] = {}
    for r in rows:
        by_chunk.setdefault(r.chunk_bytes, {})[r.mechanism] = r.gbps
    chunks = sorted(c for c, got in by_chunk.items() if first in got and second in got)  # measured both ways
    for i, c in enumerate(chunks):
        if all(by_chunk[d][second] >= by_chunk[d][first] for d in chunks[i:]):
            return c
    return None
