"""`asynccopy bench --plan`: the planner's stage count and the simulator's times against the sweep.

The model is calibrated in the same run, never from the table alone: bandwidth = the measured
device-to-device copy rate; latency = what makes the model reproduce `sync` at intensity 0 (one
stage: latency + transfer + compute per tile, the compute from a traced `sync` run). Each mechanism
variant's own costs come from two traced runs of it with 4 stages (intensity 0 and the highest):
its compute per tile and the time its threads (or its producer warp) take to issue a tile's copy,
both linear in the intensity between the two runs (issuing slows as the computing warps take the
SM's issue slots: a producer warp of LDGSTS takes 4x longer per tile at intensity 24 than at 0),
the fixed cost between two computes when the data is already there, and a producer's delay from a
buffer's release to its refill (`Overheads`). The traces are not the sweep: the sweep is what the
model is checked against.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace

from .. import devices, planner, simulate, stream
from ..errors import ArgumentError
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


def measured_compute_ns(intensities, *, tile: int = 4096, threads: int = 256,
                        blocks_per_sm: int = 1) -> dict[int, float]:
    """Median compute time per tile at each intensity, from traced `sync` runs (GPU)."""
    from .. import trace

    out = {}
    for k in intensities:
        _, blocks = trace.run("sync", intensity=k, tile=tile, threads=threads, tiles_per_block=16, check_all=False,
                              blocks_per_sm=blocks_per_sm)
        out[k] = statistics.median(t.compute_end - t.compute_start for b in blocks[:16] for t in b.tiles)
    return out


OVERHEAD_STAGES = 4  # the traced runs that measure a variant's Overheads (fewer if 4 do not fit)
OVERHEAD_MIN_INTENSITY = 8  # their high intensity: at least this, so that they run compute-bound


@dataclass(frozen=True)
class Overheads:
    """One mechanism variant's own costs, from its traces (see the module docstring). Times in ns."""

    compute_lo: float  # compute per tile at intensity 0
    compute_hi: float  # ... at intensity_hi
    intensity_hi: int
    issue_ns: float  # issuing one tile's copy at intensity_hi (the computing threads', or the producer warp's, time)
    barrier_ns: float  # between two computes, data already there: waits, arrivals, __syncthreads
    producer: bool  # a producer warp issues the copies (simulate's producer=True)
    handoff_ns: float = 0.0  # producer: from a compute's end to the producer's issue into the freed buffer
    issue_lo_ns: float | None = None  # issuing at intensity 0 (None: as at intensity_hi)
    issue_first: bool = False  # the computing threads refill a buffer before waiting (simulate's issue_first)

    def _between(self, lo: float, hi: float, intensity: int) -> float:
        return lo if self.intensity_hi <= 0 else lo + (hi - lo) * intensity / self.intensity_hi

    def issue_at(self, intensity: int) -> float:
        """The issue time at ``intensity``: linear between the two measured ones. Issuing slows as the
        computing warps take more of the SM's issue slots (a producer warp of LDGSTS most of all)."""
        if self.issue_lo_ns is None:
            return self.issue_ns
        return self._between(self.issue_lo_ns, self.issue_ns, intensity)

    def costs(self, intensity: int) -> dict:
        """The simulator's (and planner's) keyword arguments for these costs at ``intensity``."""
        return {"issue_ns": self.issue_at(intensity), "barrier_ns": self.barrier_ns, "producer": self.producer,
                "handoff_ns": self.handoff_ns, "issue_first": self.issue_first}

    def compute_ns(self, intensity: int) -> float:
        """The compute per tile at ``intensity``: linear between the two measured ones."""
        return self._between(self.compute_lo, self.compute_hi, intensity)

    def as_dict(self) -> dict:
        return asdict(self)


def _median(values, what, stages):
    if not values:
        raise ArgumentError(f"the traces hold no {what}: trace more tiles per block (at least {stages + 2})")
    return statistics.median(values)


MIN_BUSY_SAMPLES = 8  # `issued` spacings of a producer that did not wait, below which it is taken as keeping up


def _by_tile(blocks):
    """Each block's traced tiles, by tile index."""
    return ({t.tile: t for t in b.tiles} for b in blocks)


def _fill_spacing(blocks, stages: int) -> list[float]:
    """The spacing of a producer's first `issued` records, filling empty buffers."""
    out = []
    for at in _by_tile(blocks):
        out += [at[j + 1].issued - at[j].issued for j in range(stages - 1) if j in at and j + 1 in at]
    return out


def _issue_time(blocks, *, stages: int, producer: bool) -> float:
    """The time to issue one tile's copy, from one traced run.

    Computing threads that issue: they record `issued` just before issuing tile k + stages - 1 and
    `compute_start` of tile k just after, so the difference is the issue time (for an issue-first
    kernel the span also holds its wait and barrier: see overheads_from_traces).
    A producer warp: where the release of tile j's buffer (tile j - stages computed, plus the
    handoff) reached it before it started on tile j - 1, it went from one copy to the next without
    waiting, so the spacing of its `issued` records is its time per tile. With fewer than
    MIN_BUSY_SAMPLES such spacings (a producer that keeps up), the spacing of its first records,
    filling empty buffers, is (or the spacings there are, if the trace has no fill).
    Limit: the handoff is estimated where the producer was idle when a buffer came free; a handoff
    longer than a compute leaves no such tile, and the producer then reads as busy at the compute's
    pace. On the H200 handoffs are 50-120 ns and computes >= 150 ns (NOTES 30)."""
    if not producer:
        issues = []
        for at in _by_tile(blocks):
            issues += [at[k].compute_start - at[k + stages - 1].issued for k in at if k >= 1 and k + stages - 1 in at]
        return max(0.0, _median(issues, "issue records", stages))
    fill = _fill_spacing(blocks, stages)
    handoff = _handoff(blocks, stages=stages, issue=statistics.median(fill) if fill else 0.0) or 0.0
    busy = []
    for at in _by_tile(blocks):
        busy += [at[j].issued - at[j - 1].issued for j in at
                 if j > stages and j - 1 in at and j - stages in at
                 and at[j - stages].compute_end + handoff <= at[j - 1].issued]
    if len(busy) < MIN_BUSY_SAMPLES and fill:
        busy = fill
    return max(0.0, _median(busy, "issue records", stages))


def _handoff(blocks, *, stages: int, issue: float) -> float | None:
    """Median time from the end of tile k's compute to the producer's `issued` of tile k + stages,
    over the tiles where the producer had issued the previous tile and was idle when the buffer came
    free; None if it never was."""
    handoffs = []
    for at in _by_tile(blocks):
        handoffs += [at[k + stages].issued - at[k].compute_end for k in at
                     if k >= 1 and k + stages in at and k + stages - 1 in at
                     and at[k].compute_end >= at[k + stages - 1].issued + issue]
    return max(0.0, statistics.median(handoffs)) if handoffs else None


def overheads_from_traces(lo_blocks, hi_blocks, *, stages: int, intensity_hi: int, producer: bool,
                          issue_first: bool = False) -> Overheads:
    """Overheads from the decoded traces (trace.BlockTrace lists) of one variant run with ``stages``
    stages at intensity 0 (lo) and ``intensity_hi`` (hi, compute-bound: the data is there when wanted).

    issue: measured in both runs (_issue_time), linear in between. barrier: the median gap between
    one compute's end and the next one's start at hi, less the issue time when the computing threads
    issue. handoff (producer): _handoff at intensity 0, where the producer waits briefly for a buffer
    as it does with few stages (at the top it waits whole computes, and the block's warps drift
    apart), else at the top, else 0."""
    compute_lo = _median([t.compute_end - t.compute_start for b in lo_blocks for t in b.tiles], "computed tile", stages)
    compute_hi = _median([t.compute_end - t.compute_start for b in hi_blocks for t in b.tiles], "computed tile", stages)
    gaps = []
    for at in _by_tile(hi_blocks):
        gaps += [at[k + 1].compute_start - at[k].compute_end for k in at if k >= stages and k + 1 in at]
    issue_hi = _issue_time(hi_blocks, stages=stages, producer=producer)
    # refilling before the wait puts the wait between `issued` and `compute_start`: only the top's
    # run, whose data is there when wanted, times the issue (with the wait's fixed cost and the
    # barrier, which then come out of the between-compute cost: the time per tile is the same)
    issue_lo = issue_hi if issue_first else _issue_time(lo_blocks, stages=stages, producer=producer)
    gap = max(0.0, _median(gaps, "steady-state tiles", stages))
    handoff = 0.0
    if producer:  # from the run at intensity 0, where the producer waits briefly, as it does with few stages
        handoff = _handoff(lo_blocks, stages=stages, issue=issue_lo)
        handoff = _handoff(hi_blocks, stages=stages, issue=issue_hi) if handoff is None else handoff
        handoff = handoff or 0.0
    return Overheads(compute_lo, compute_hi, intensity_hi, issue_hi, gap if producer else max(0.0, gap - issue_hi),
                     producer, handoff, issue_lo, issue_first)


def measured_overheads(result: StreamBench, intensity_hi: int, progress=None) -> dict[str, Overheads]:
    """Overheads of every multi-stage variant in ``result``, from traced runs (GPU) at intensity 0 and
    max(intensity_hi, OVERHEAD_MIN_INTENSITY), with OVERHEAD_STAGES stages or the most the sweep ran
    below that; ``progress(text)`` hears of each variant as it starts."""
    from .. import trace

    variants = {r.label: r for r in result.rows if stream.MECHANISMS[r.mechanism].fixed_stages is None}
    out = {}
    for i, r in enumerate(variants.values(), 1):
        mech = stream.MECHANISMS[r.mechanism]
        if progress:
            progress(f"[{i}/{len(variants)}] tracing {r.label}")
        opts = {k: v for k, v in (("vec", r.vec), ("cache", r.cache)) if v is not None}
        if mech.producers_option:
            opts["producers"] = r.producers
        swept = {x.stages for x in result.rows if x.label == r.label and x.stages >= 2}
        stages = max((s for s in swept if s <= OVERHEAD_STAGES), default=min(swept, default=OVERHEAD_STAGES))
        hi = max(intensity_hi, OVERHEAD_MIN_INTENSITY)
        runs = [trace.run(r.mechanism, stages, intensity=k, tile=result.tile, threads=result.threads,
                          tiles_per_block=trace.MAX_TILES, blocks_per_sm=result.blocks_per_sm, check_all=False,
                          **opts)[1]
                for k in (0, hi)]
        out[r.label] = overheads_from_traces(*runs, stages=stages, intensity_hi=hi, producer=mech.producer_warps > 0,
                                             issue_first=mech.issue_first)
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


def predicted_ms(dev: devices.KnownDevice, stages: int, compute: float, result: StreamBench,
                 ov: Overheads | None = None, intensity: int = 0) -> float:
    tiles = _tiles_per_block(result, dev.sm_count)
    # one stage: the producer issues while the computing threads wait, uncontended, as at intensity 0
    extra = {} if ov is None else ov.costs(0 if stages == 1 else intensity)
    sim = simulate.simulate(stages, max(1, round(tiles)), tile_bytes=result.tile * 4, compute_ns=compute,
                            latency_ns=dev.latency_ns, bandwidth_per_sm=dev.bandwidth / dev.sm_count / 1e9,
                            blocks=result.blocks_per_sm, **extra)
    return sim.total_ns / 1e6


def check(result: StreamBench, compute_ns: dict[int, float],
          overheads: dict[str, Overheads] | None = None) -> tuple[devices.KnownDevice, list[ModelRow]]:
    """For every multi-stage mechanism variant and intensity: planner vs best measured, simulator vs
    measured. A variant with ``overheads`` is modelled with its own compute, issue and barrier costs;
    one without, with the traced `sync` compute and no issue cost."""
    dev = calibrated_device(result, compute_ns)
    overheads = overheads or {}
    groups: dict[tuple[str, int], dict[int, float]] = {}
    producers: dict[str, int] = {}
    for r in result.rows:
        if stream.MECHANISMS[r.mechanism].fixed_stages is None and r.intensity in compute_ns:
            groups.setdefault((r.label, r.intensity), {})[r.stages] = r.ms
            producers[r.label] = r.producers
    rows = []
    for (label, k), by_stages in sorted(groups.items()):
        extra_threads = 32 * producers[label]
        ov = overheads.get(label)
        compute = ov.compute_ns(k) if ov else compute_ns[k]
        tiles = max(8, round(_tiles_per_block(result, dev.sm_count)))
        costs = {} if ov is None else {**ov.costs(k), "solo_issue_ns": ov.issue_at(0)}  # as predicted_ms
        p = planner.plan([planner.Operand("tile", (result.tile,), "float32")], threads=result.threads + extra_threads,
                         device=dev, compute_ns=compute, blocks_per_sm=result.blocks_per_sm,
                         max_stages=max(by_stages), static_smem=1024, tiles=tiles, **costs)
        best = min(by_stages, key=by_stages.get)
        at = by_stages.get(p.recommended)
        errors = [abs(predicted_ms(dev, s, compute, result, ov, k) - ms) / ms for s, ms in by_stages.items()]
        rows.append(ModelRow(label, k, p.recommended, at, best, by_stages[best],
                             at / by_stages[best] if at is not None else None, max(errors)))
    return dev, rows


def plot(result: StreamBench, compute_ns: dict[int, float], path: str,
         overheads: dict[str, Overheads] | None = None) -> str:
    """Measured (solid, dots) and predicted (dashed) time against the stage count, a panel per variant
    and a colour per intensity; the planner's stage count circled."""
    from ..plotting import pyplot

    plt = pyplot()
    dev, rows = check(result, compute_ns, overheads)
    overheads = overheads or {}
    planned = {(r.label, r.intensity): r.recommended for r in rows}
    labels = list(dict.fromkeys(r.label for r in rows))
    intensities = sorted({r.intensity for r in rows})
    cols = min(4, len(labels))
    nrows = -(-len(labels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), dpi=110, squeeze=False)
    colors = plt.get_cmap("viridis")([i / max(1, len(intensities) - 1) * 0.9 for i in range(len(intensities))])
    for ax, label in zip(axes.flat, labels):
        ov = overheads.get(label)
        for color, k in zip(colors, intensities):
            pts = sorted((r.stages, r.ms) for r in result.rows if r.label == label and r.intensity == k)
            if not pts:
                continue
            stages = [s for s, _ in pts]
            compute = ov.compute_ns(k) if ov else compute_ns[k]
            ax.plot(stages, [ms for _, ms in pts], "-o", color=color, ms=3, label=f"intensity {k}")
            ax.plot(stages, [predicted_ms(dev, s, compute, result, ov, k) for s in stages], "--", color=color, lw=1)
            at = dict(pts).get(planned.get((label, k)))
            if at is not None:
                ax.plot([planned[(label, k)]], [at], "o", mfc="none", mec="red", ms=8)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("stages", fontsize=8)
        ax.set_ylabel("ms", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("measured (solid) vs simulated (dashed); red circle: the planner's stage count", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def load(path) -> tuple[StreamBench, dict[int, float], dict[str, Overheads]]:
    """A `bench --plan --json` file's sweep and calibration, to check the model again without a GPU."""
    import json
    from pathlib import Path

    from .stream_bench import Row

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"cannot read {path}: {exc}") from None
    model = data.pop("model", None)
    if not isinstance(model, dict) or "compute_ns" not in model:
        raise ArgumentError(f"{path} holds no model calibration: write it with `asynccopy bench --plan --json`")
    try:
        result = StreamBench(rows=[Row(**r) for r in data.pop("rows")], **data)
        compute = {int(k): float(v) for k, v in model["compute_ns"].items()}
        mechanism = {r.label: r.mechanism for r in result.rows}
        # files from before issue_first: the variant's mechanism says its order
        overheads = {label: Overheads(**{"issue_first": stream.MECHANISMS[mechanism[label]].issue_first
                                         if label in mechanism else False, **o})
                     for label, o in model.get("overheads", {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ArgumentError(f"{path} is not a `bench --plan --json` file of this version: {exc}") from None
    return result, compute, overheads

