"""A kernel's own costs, fitted from its traces: what the simulator needs beside the memory system.

Two traced runs of a mechanism variant (asynccopy.trace), at intensity 0 and at a high, compute-bound
intensity, give its compute per tile and the time its threads (or its producer warp) take to issue a
tile's copy, both linear in the intensity between the two runs (issuing slows as the computing warps
take the SM's issue slots: on an H200 one producer warp of LDGSTS took 4x longer per tile at intensity
24 than at 0), the fixed cost between two computes when the data is already there, and a producer's
delay from a buffer's release to its refill (:class:`Overheads`). The inputs are decoded traces: lists
of blocks, each with ``.tiles`` (asynccopy.model.simulate.TileEvents). No GPU is needed here.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace

from ..errors import ArgumentError
from .simulate import KernelCosts


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
    trace_ns: float = 0.0  # the trace's own cost per tile at intensity_hi (bench.trace_cost; 0: unmeasured)

    def untraced(self) -> Overheads:
        """The costs without the trace's own: ``trace_ns`` taken from the compute at both ends. The traced build
        differs from the untraced one inside the loop (one computing thread stores a clock reading at every event,
        and the compiler schedules the loop around them), and the records are as many whatever the intensity."""
        cost = max(0.0, self.trace_ns)  # a measured difference: noise can make it negative
        return replace(self, compute_lo=max(0.0, self.compute_lo - cost), compute_hi=max(0.0, self.compute_hi - cost),
                       trace_ns=0.0)

    def _between(self, lo: float, hi: float, intensity: int) -> float:
        return lo if self.intensity_hi <= 0 else lo + (hi - lo) * intensity / self.intensity_hi

    def issue_at(self, intensity: int) -> float:
        """The issue time at ``intensity``: linear between the two measured ones. Issuing slows as the
        computing warps take more of the SM's issue slots (a producer warp of LDGSTS most of all)."""
        if self.issue_lo_ns is None:
            return self.issue_ns
        return self._between(self.issue_lo_ns, self.issue_ns, intensity)

    def costs(self, intensity: int) -> KernelCosts:
        """The simulator's (and planner's) costs at ``intensity``; one stage issues as at intensity 0,
        with nothing computing beside it."""
        return KernelCosts(self.issue_at(intensity), self.barrier_ns, self.producer, self.handoff_ns,
                           self.issue_first, solo_issue_ns=self.issue_at(0))

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
    pace. On the H200 handoffs measured 50-120 ns and computes >= 150 ns."""
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
