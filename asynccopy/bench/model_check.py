"""`asynccopy bench --plan`: the planner's stage count and the simulator's times against the sweep.

The model is calibrated in the same run, never from the table alone: bandwidth = the measured
device-to-device copy rate; compute time per tile at each intensity = the median measured in a traced
`sync` run; latency = what makes the model reproduce `sync` at intensity 0 (one stage: latency +
transfer + compute per tile).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from .. import devices, planner, simulate, stream
from .stream_bench import StreamBench


@dataclass
class ModelRow:
    label: str
    intensity: int
    recommended: int
    measured_at_recommended_ms: float | None
    best_stages: int
    best_ms: float
    ratio: float | None  # measured at the recommended stage count / best measured
    worst_error: float  # largest |predicted - measured| / measured over the stage counts measured


def measured_compute_ns(intensities, *, tile: int = 4096, threads: int = 256) -> dict[int, float]:
    """Median compute time per tile at each intensity, from traced `sync` runs (GPU)."""
    from .. import trace

    out = {}
    for k in intensities:
        _, blocks = trace.run("sync", intensity=k, tile=tile, threads=threads, tiles_per_block=16)
        out[k] = statistics.median(t.compute_end - t.compute_start for b in blocks[:16] for t in b.tiles)
    return out


def calibrated_device(result: StreamBench, compute_ns: dict[int, float]) -> devices.KnownDevice:
    """The table's entry for the device, with the run's bandwidth and a latency fitted to `sync` at 0."""
    from ..device import DeviceFacts

    base = devices.from_facts(DeviceFacts(**{**result.device, "cc": tuple(result.device["cc"])}))
    dev = replace(base, bandwidth=result.copy_gbps * 1e9, latency_source="fitted to sync at intensity 0")
    sync0 = next(r.ms for r in result.rows if r.mechanism == "sync" and r.intensity == 0)
    lo, hi = 0.0, sync0 * 1e6  # the one-stage time grows with the latency: bisect for sync's time
    for _ in range(40):
        mid = (lo + hi) / 2
        if predicted_ms(replace(dev, latency_ns=mid), 1, compute_ns.get(0, 0.0), result) < sync0:
            lo = mid
        else:
            hi = mid
    return replace(dev, latency_ns=(lo + hi) / 2)


def _tiles_per_block(result: StreamBench, sm_count: int) -> float:
    n_tiles = -(-result.n // result.tile)
    return n_tiles / min(n_tiles, sm_count * result.blocks_per_sm)


def predicted_ms(dev: devices.KnownDevice, stages: int, compute: float, result: StreamBench) -> float:
    tiles = _tiles_per_block(result, dev.sm_count)
    sim = simulate.simulate(stages, max(1, round(tiles)), tile_bytes=result.tile * 4, compute_ns=compute,
                            latency_ns=dev.latency_ns, bandwidth_per_sm=dev.bandwidth / dev.sm_count / 1e9,
                            blocks=result.blocks_per_sm)
    return sim.total_ns / 1e6


def check(result: StreamBench, compute_ns: dict[int, float]) -> tuple[devices.KnownDevice, list[ModelRow]]:
    """For every multi-stage mechanism variant and intensity: planner vs best measured, simulator vs measured."""
    dev = calibrated_device(result, compute_ns)
    groups: dict[tuple[str, int], dict[int, float]] = {}
    producers: dict[str, int] = {}
    for r in result.rows:
        if stream.MECHANISMS[r.mechanism].fixed_stages is None and r.intensity in compute_ns:
            groups.setdefault((r.label, r.intensity), {})[r.stages] = r.ms
            producers[r.label] = r.producers
    rows = []
    for (label, k), by_stages in sorted(groups.items()):
        extra_threads = 32 * producers[label]
        tiles = max(8, round(_tiles_per_block(result, dev.sm_count)))
        p = planner.plan([planner.Operand("tile", (result.tile,), "float32")], threads=result.threads + extra_threads,
                         device=dev, compute_ns=compute_ns[k], blocks_per_sm=result.blocks_per_sm,
                         max_stages=max(by_stages), static_smem=1024, tiles=tiles)
        best = min(by_stages, key=by_stages.get)
        at = by_stages.get(p.recommended)
        errors = [abs(predicted_ms(dev, s, compute_ns[k], result) - ms) / ms for s, ms in by_stages.items()]
        rows.append(ModelRow(label, k, p.recommended, at, best, by_stages[best],
                             at / by_stages[best] if at is not None else None, max(errors)))
    return dev, rows
