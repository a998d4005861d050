"""A discrete-event model of an N-stage copy/compute pipeline on one SM, and its timeline.

Model (the tile-stream kernels' schedule):
  * each of ``blocks`` blocks on the SM walks ``tiles`` tiles through ``stages`` buffers;
  * the copy of tile k + stages - 1 is issued when tile k's compute starts (its buffer was freed by
    the compute of tile k - 1; with a producer warp or ``issue_first``, tile k + stages is issued
    into tile k's buffer once that compute ends, and the prologue fills all ``stages`` buffers);
    with one stage, the copy of tile k is issued when tile k - 1's compute ends, so nothing
    overlaps inside the block;
  * copies and the stores of results share the SM's share of memory bandwidth. Copies are served
    first come first served: a copy issued at t finishes at max(t + latency, the end of its turn on
    the bandwidth); the latency is fixed, or with a ``memory`` curve (asynccopy.model.memory) the one
    the SM's read bytes in flight at t give (this copy's included), so that queues lengthen it as they
    fill. Stores do not hold a later copy back: they are posted writes that the L2 (write-back) takes
    and the memory writes out in the time the reads leave it, so they fill the bandwidth's idle time
    and the run ends no sooner than every store is served (the bandwidth still bounds the whole run);
  * a tile's compute starts when its data is there and the previous compute is done plus a fixed
    barrier cost, and takes ``compute_ns``; with several stages a copy that lands after that holds the
    barrier (the warps waited for it together: _Run._begin), one stage pays it after the data;
  * issuing a tile's copy takes ``issue_ns`` of the issuing threads' time (LDGSTS: one instruction per
    16, 8 or 4 bytes per thread; TMA: one per tile). Without a producer warp the computing threads
    issue, between their wait and their compute, and the compute starts when they are done. With a
    producer warp (``KernelCosts(producer=True)``: ws_*, tma_1d_pipeline, tma_2d) the producer issues the copy of
    tile k + stages once the compute of tile k has released its buffer and the release has reached
    it (``handoff_ns``), one copy after another, beside the compute: a producer slower than the
    compute sets the pace. Either way a copy leaves as its issue starts (the first instructions are
    on their way while the last are issued) and is ready no earlier than its latency after that,
    nor before its issue ends. With ``issue_first`` (cuda::pipeline's order) the computing threads
    refill the buffer of tile k as soon as they have computed it, before they wait for tile k + 1,
    instead of after that wait: every buffer is filled before the first compute.
  * ``issue_ns`` and ``barrier_ns`` are the costs of a multi-stage loop (:meth:`KernelCosts.at_stages`
    says what one stage pays).
Times are in nanoseconds.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

from ..errors import ArgumentError


@dataclass
class TileEvents:
    block: int
    tile: int
    issued: float = 0.0
    ready: float = 0.0
    compute_start: float = 0.0
    compute_end: float = 0.0


@dataclass
class Simulation:
    stages: int
    blocks: int
    tiles: int
    events: list[TileEvents] = field(repr=False)
    total_ns: float = 0.0

    @property
    def ns_per_tile(self) -> float:
        """Time per tile of one block: the whole run (last compute or last store) over its tiles."""
        return self.total_ns / self.tiles

    @property
    def overlap(self) -> float:
        """Fraction of compute time during which the copy of a later tile of the same block is in flight."""
        by_block: dict[int, list[TileEvents]] = {}
        for e in self.events:
            by_block.setdefault(e.block, []).append(e)
        covered = total = 0.0
        for evs in by_block.values():
            evs = sorted(evs, key=lambda o: o.tile)
            for i, e in enumerate(evs):
                total += e.compute_end - e.compute_start
                spans = []
                for j in range(i + 1, len(evs)):  # a block issues its tiles in order: stop at the first
                    o = evs[j]  # issued after this compute ended (a window of about `stages` tiles)
                    if o.issued >= e.compute_end:
                        break
                    spans.append((max(o.issued, e.compute_start), min(o.ready, e.compute_end)))
                covered += _union_length([(a, b) for a, b in spans if b > a])
        return covered / total if total else 0.0


def _union_length(spans: list[tuple[float, float]]) -> float:
    length, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            length += b - max(a, end)
            end = b
    return length


@dataclass(frozen=True)
class KernelCosts:
    """A kernel's own costs and order, for the simulator and the planner (times in ns; see the module
    docstring). ``bench --plan`` measures them per mechanism variant (asynccopy.model.costs)."""

    issue_ns: float = 0.0  # issuing one tile's copy (the computing threads', or the producer warp's, time)
    barrier_ns: float = 0.0  # fixed cost between two computes
    producer: bool = False  # a producer warp issues the copies, beside the compute
    handoff_ns: float = 0.0  # producer: from a buffer's release to its refill
    issue_first: bool = False  # the computing threads refill a buffer before waiting for the next tile
    solo_issue_ns: float | None = None  # issuing with nothing computing beside it (one stage); None: issue_ns

    def __post_init__(self):
        for name in ("issue_ns", "barrier_ns", "handoff_ns", "solo_issue_ns"):
            value = getattr(self, name)
            if value is None and name == "solo_issue_ns":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ArgumentError(f"{name} must be a finite number of ns >= 0, got {value!r}")
        if self.producer and self.issue_first:
            raise ArgumentError("issue_first is the computing threads' order: a producer warp already refills on "
                                "release")
        if self.handoff_ns and not self.producer:
            raise ArgumentError("handoff_ns is a producer warp's delay from a buffer's release to its refill: "
                                "set producer too")

    def at_stages(self, stages: int, *, latency_holds_costs: bool = True) -> KernelCosts:
        """The costs a loop of ``stages`` stages pays. One stage is the plain load-wait-compute loop whose
        fixed costs the latency holds when it is fitted to `sync` (asynccopy.bench.model_check): the
        computing threads' issue and the barrier are not added again; a producer warp's issue (with
        nothing computing beside it) and handoff are, since its one buffer puts them on every tile's path.
        A latency that does not hold them (``latency_holds_costs=False``: a memory curve, fitted to bulk
        copies) leaves the barrier and the issue, at its rate with nothing computing beside it."""
        if stages > 1:
            return self
        solo = self.issue_ns if self.solo_issue_ns is None else self.solo_issue_ns
        if not latency_holds_costs:
            return replace(self, issue_ns=solo)
        return replace(self, barrier_ns=0.0, issue_ns=solo if self.producer else 0.0)


NO_COSTS = KernelCosts()


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _check_inputs(stages, tiles, blocks, tile_bytes, bandwidth_per_sm, latency_ns, compute_ns, costs) -> None:
    for name, value in (("stages", stages), ("tiles", tiles), ("blocks", blocks)):
        _positive_int(name, value)
    for name, value in (("bandwidth_per_sm", bandwidth_per_sm), ("tile_bytes", tile_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ArgumentError(f"{name} must be a finite number > 0, got {value!r}")
    for name, value in (("latency_ns", latency_ns), ("compute_ns", compute_ns)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ArgumentError(f"{name} must be a finite number >= 0, got {value!r}")
    if not isinstance(costs, KernelCosts):
        raise ArgumentError(f"costs must be a KernelCosts, got {type(costs).__name__}")


def simulate(stages: int, tiles: int, *, tile_bytes: float, compute_ns: float, latency_ns: float,
             bandwidth_per_sm: float, blocks: int = 1, out_bytes: float | None = None,
             costs: KernelCosts = NO_COSTS, memory=None) -> Simulation:
    """Run the model. ``bandwidth_per_sm`` in bytes per ns (GB/s); ``out_bytes`` per tile default =
    ``tile_bytes`` (results written back); ``costs``: the kernel's own (see the module docstring);
    ``memory``: a MemoryCurve whose latency at the bytes in flight replaces ``latency_ns``."""
    _check_inputs(stages, tiles, blocks, tile_bytes, bandwidth_per_sm, latency_ns, compute_ns, costs)
    if memory is not None and not hasattr(memory, "latency_at"):
        raise ArgumentError(f"memory must be a MemoryCurve or None, got {type(memory).__name__}")
    run = _Run(stages, tiles, blocks, tile_bytes, tile_bytes if out_bytes is None else out_bytes, compute_ns,
               latency_ns, bandwidth_per_sm, costs.at_stages(stages, latency_holds_costs=memory is None), memory)
    return run.simulate()


class _Run:
    """The event loop of one simulation: copies and stores queue for the SM's share of the bandwidth,
    first come first served; a tile's compute follows its data and the block's previous compute."""

    def __init__(self, stages, tiles, blocks, tile_bytes, out_bytes, compute_ns, latency_ns, bandwidth, costs,
                 memory=None):
        self.stages, self.tiles, self.blocks = stages, tiles, blocks
        self.tile_bytes, self.out_bytes, self.compute_ns = tile_bytes, out_bytes, compute_ns
        self.latency_ns, self.bandwidth, self.c = latency_ns, bandwidth, costs
        self.memory = memory
        self.in_flight: list[tuple[float, float]] = []  # (ready, bytes) of the copies issued and not yet there
        self.in_flight_bytes = 0.0
        self.events = [[TileEvents(b, k) for k in range(tiles)] for b in range(blocks)]
        self.last_end = [0.0] * blocks  # end of each block's latest compute
        self.server_free = self.stores_done = 0.0
        self.stores_waiting = 0.0  # bytes of stores not yet served: they take the bandwidth the copies leave
        # (time, order, block, tile or -1 for a store, bytes, issue end: the copy is not ready before it)
        self.queue: list[tuple[float, int, int, int, float, float]] = []
        self.order = 0
        # a buffer is refilled as soon as its compute ends: by a producer warp, or by computing threads
        # that refill before they wait (issue_first)
        self.refill = costs.producer or (costs.issue_first and stages > 1)

    def push(self, t: float, block: int, tile: int, nbytes: float, issued_by: float = 0.0) -> None:
        heapq.heappush(self.queue, (t, self.order, block, tile, nbytes, issued_by))
        self.order += 1

    def simulate(self) -> Simulation:
        issue = self.c.issue_ns
        # Tiles issued before the first compute: stages - 1 of them (one with a single stage); a refilling
        # kernel fills every buffer, one copy after another.
        first = min(self.stages if self.refill else max(self.stages - 1, 1), self.tiles)
        self.producer_free = [first * issue] * self.blocks
        if not self.c.producer:  # the computing threads issue those copies before their first compute
            self.last_end = [first * issue] * self.blocks
        for b in range(self.blocks):
            for k in range(first):
                self.push(k * issue, b, k, self.tile_bytes, (k + 1) * issue)
        while self.queue:
            t, _, b, k, nbytes, issued_by = heapq.heappop(self.queue)
            self._serve_stores(t)
            if k < 0:
                if not self.stores_waiting:  # an idle bandwidth starts on it now
                    self.server_free = max(self.server_free, t)
                self.stores_waiting += nbytes  # a store only takes bandwidth, after the copies
                continue
            self.server_free = max(t, self.server_free) + nbytes / self.bandwidth
            e = self.events[b][k]
            e.issued, e.ready = t, max(t + self.latency(t, nbytes), self.server_free, issued_by)
            if self.memory is not None:
                heapq.heappush(self.in_flight, (e.ready, nbytes))
                self.in_flight_bytes += nbytes
            begin = self._begin(e.ready, b)
            (self._producer if self.c.producer else self._refill if self.refill else self._in_loop)(e, b, k, begin)
        self.stores_done = self.server_free + self.stores_waiting / self.bandwidth
        flat = [e for evs in self.events for e in evs]
        return Simulation(self.stages, self.blocks, self.tiles, flat,
                          max(max(e.compute_end for e in flat), self.stores_done))

    def _begin(self, ready: float, b: int) -> float:
        """When block b's compute of a tile that is there at ``ready`` can start. With several stages the block's
        warps leave the previous compute for the wait, where the barrier holds them for the slowest; a copy that
        lands after they have all arrived finds them waiting together, and what its latency runs to is the block
        past its wait (the memory curve's `ready`, traced after the wait and its barrier; the baseline's one-stage
        latency, which holds its loop's fixed costs): the barrier is paid only where the data was there first. One
        stage synchronizes before it issues the copy: its barrier stays on the tile's path."""
        if self.stages > 1:
            return max(ready, self.last_end[b] + self.c.barrier_ns)
        return max(ready, self.last_end[b]) + self.c.barrier_ns

    def _serve_stores(self, t: float) -> None:
        """The stores waiting take the bandwidth the copies left idle before t (reads first: a DRAM controller
        serves reads ahead of the writes it buffers; the L2 holds a store's lines until then)."""
        if self.stores_waiting and self.server_free < t:
            served = min(self.stores_waiting, (t - self.server_free) * self.bandwidth)
            self.stores_waiting -= served
            self.server_free += served / self.bandwidth

    def latency(self, t: float, nbytes: float) -> float:
        """A copy's latency when issued at t: fixed, or the memory curve's at the bytes then in flight."""
        if self.memory is None:
            return self.latency_ns
        while self.in_flight and self.in_flight[0][0] <= t:
            self.in_flight_bytes -= heapq.heappop(self.in_flight)[1]
        return self.memory.latency_at(self.in_flight_bytes + nbytes)

    def _producer(self, e: TileEvents, b: int, k: int, begin: float) -> None:
        """A producer warp issues the tile that uses this buffer next once the buffer is free."""
        nxt = k + self.stages
        e.compute_start = begin
        e.compute_end = self.last_end[b] = begin + self.compute_ns
        self.push(e.compute_end, b, -1, self.out_bytes)
        if nxt < self.tiles:
            start = max(e.compute_end + self.c.handoff_ns, self.producer_free[b])
            self.producer_free[b] = start + self.c.issue_ns
            self.push(start, b, nxt, self.tile_bytes, self.producer_free[b])

    def _refill(self, e: TileEvents, b: int, k: int, begin: float) -> None:
        """The computing threads refill the buffer they just read, then wait for the next tile."""
        nxt = k + self.stages
        e.compute_start = begin
        e.compute_end = begin + self.compute_ns
        self.last_end[b] = e.compute_end + (self.c.issue_ns if nxt < self.tiles else 0.0)
        self.push(e.compute_end, b, -1, self.out_bytes)
        if nxt < self.tiles:
            self.push(e.compute_end, b, nxt, self.tile_bytes, self.last_end[b])

    def _in_loop(self, e: TileEvents, b: int, k: int, begin: float) -> None:
        """The computing threads issue tile k + stages - 1 after their wait, before computing tile k."""
        nxt = k + max(self.stages - 1, 1)
        issues = self.stages > 1 and nxt < self.tiles  # the next copy is issued before this compute
        e.compute_start = begin + (self.c.issue_ns if issues else 0.0)
        e.compute_end = self.last_end[b] = e.compute_start + self.compute_ns
        self.push(e.compute_end, b, -1, self.out_bytes)
        if nxt < self.tiles:
            self.push(begin if self.stages > 1 else e.compute_end, b, nxt, self.tile_bytes, begin + self.c.issue_ns)


def timeline_text(sim: Simulation, *, block: int = 0, width: int = 72, tiles: int | None = None) -> str:
    """The seed's timeline, drawn: one row per buffer for the copies, one for the compute."""
    evs = [e for e in sim.events if e.block == block][: tiles or sim.tiles]
    end = max(e.compute_end for e in evs)
    scale = width / end if end else 1.0

    def bar(spans, char):
        row = [" "] * width
        for a, b in spans:
            lo, hi = int(a * scale), max(int(a * scale) + 1, int(b * scale))
            for i in range(lo, min(hi, width)):
                row[i] = char
        return "".join(row)

    rows = []
    for s in range(max(sim.stages, 1)):
        spans = [(e.issued, e.ready) for e in evs if e.tile % max(sim.stages, 1) == s]
        rows.append(f"load[{s}] |{bar(spans, '█')}|")
    rows.append(f"compute |{bar([(e.compute_start, e.compute_end) for e in evs], '▓')}|")
    rows.append(f"         0{'':>{width - 12}}{end / 1000:.2f} us")
    head = (f"{sim.stages} stage(s), {sim.blocks} block(s) per SM: {sim.ns_per_tile:.0f} ns per tile, "
            f"{100 * sim.overlap:.0f}% of compute overlapped with later copies")
    return "\n".join([head] + rows)


def timeline_png(sim: Simulation, path: str, *, block: int = 0, tiles: int | None = None,
                 measured: list[TileEvents] | None = None) -> str:
    """The timeline as a PNG (matplotlib); with ``measured``, a measured trace drawn beside it."""
    from ..plotting import pyplot

    plt = pyplot()
    panels = [("simulated", [e for e in sim.events if e.block == block][: tiles or sim.tiles])]
    if measured:
        panels.append(("measured", measured[: tiles or len(measured)]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + 1.1 * len(panels) * (sim.stages + 1) / 2), squeeze=False)
    for ax, (title, evs) in zip(axes[:, 0], panels):
        t0 = min(e.issued for e in evs)
        for e in evs:
            row = e.tile % sim.stages
            ax.broken_barh([((e.issued - t0) / 1e3, (e.ready - e.issued) / 1e3)], (row + 1, 0.8), color="tab:blue",
                           edgecolor="white")
            ax.broken_barh([((e.compute_start - t0) / 1e3, (e.compute_end - e.compute_start) / 1e3)], (0, 0.8),
                           color="tab:orange", edgecolor="white")
        ax.set_yticks([0.4] + [s + 1.4 for s in range(sim.stages)], ["compute"] + [f"load[{s}]" for s in range(sim.stages)])
        ax.set_xlabel("us")
        ax.set_title(f"{title}: {sim.stages} stage(s)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
