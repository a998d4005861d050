"""The traced runs `bench --plan` reads the model's costs from (GPU): the baseline's compute per tile at each
intensity, and each multi-stage variant's Overheads (asynccopy.model.costs) with the trace's own cost per tile. The
check itself (asynccopy.bench.model_check) runs on recorded data without a GPU."""

from __future__ import annotations

import statistics
from dataclasses import replace

from .. import mechanism
from ..model.costs import Overheads, overheads_from_traces
from .model_check import OVERHEAD_MIN_INTENSITY, overhead_stages, registers, resident_blocks
from .stream_bench import StreamBench


def measured_compute_ns(intensities, *, tile: int = 4096, threads: int = 256,
                        blocks_per_sm: int = 1) -> dict[int, float]:
    """Median compute time per tile at each intensity, from traced runs of the baseline (`sync`, GPU)."""
    from .. import trace

    out = {}
    for k in intensities:
        _, blocks = trace.run(mechanism.baseline(), intensity=k, tile=tile, threads=threads, tiles_per_block=16,
                              check_all=False, blocks_per_sm=blocks_per_sm)
        out[k] = statistics.median(t.compute_end - t.compute_start for b in blocks[:16] for t in b.tiles)
    return out


def measured_overheads(result: StreamBench, intensity_hi: int, progress=None) -> dict[str, Overheads]:
    """Overheads of every multi-stage variant in ``result``, from traced runs (GPU) at intensity 0 and
    max(intensity_hi, OVERHEAD_MIN_INTENSITY), with OVERHEAD_STAGES stages or the most the sweep ran
    below that, and the trace's own cost per tile at the high intensity (trace_cost.cost_per_tile: the traced build
    against the untraced one, same grid and input); ``progress(text)`` hears of each variant as it starts."""
    from .. import device, trace
    from . import trace_cost

    facts = device.current()  # the GPU that runs the traces
    variants = {r.label: r for r in result.rows if mechanism.get(r.mechanism).fixed_stages is None}
    out = {}
    for i, r in enumerate(variants.values(), 1):
        mech = mechanism.get(r.mechanism)
        if progress:
            progress(f"[{i}/{len(variants)}] tracing {r.label}")
        opts = {k: v for k, v in (("vec", r.vec), ("cache", r.cache)) if v is not None}
        if mech.producers_option:
            opts["producers"] = r.producers
        stages = overhead_stages(result, r.label)
        hi = max(intensity_hi, OVERHEAD_MIN_INTENSITY)
        runs = [trace.run(r.mechanism, stages, intensity=k, tile=result.tile, threads=result.threads,
                          tiles_per_block=trace.MAX_TILES, blocks_per_sm=result.blocks_per_sm, check_all=False,
                          **opts)[1]
                for k in (0, hi)]
        ov = overheads_from_traces(*runs, stages=stages, intensity_hi=hi, producer=mech.producer_warps > 0,
                                   issue_first=mech.issue_first)
        # timed in one wave (the blocks the stages let an SM hold), so that the difference is a block's per tile
        resident = resident_blocks(result, facts, stages,
                                   result.threads + 32 * r.producers, registers(result)[r.label].get(stages))
        cost = trace_cost.cost_per_tile(r.mechanism, stages, intensity=hi, tile=result.tile, threads=result.threads,
                                        blocks_per_sm=min(resident, result.blocks_per_sm), **opts)
        out[r.label] = replace(ov, trace_ns=cost)
    return out
