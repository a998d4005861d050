"""A discrete-event model of an N-stage copy/compute pipeline on one SM, and its timeline.

Model (the tile-stream kernels' schedule):
  * each of ``blocks`` blocks on the SM walks ``tiles`` tiles through ``stages`` buffers;
  * the copy of tile k + stages - 1 is issued when tile k's compute starts (its buffer was freed by
    the compute of tile k - 1; with a producer warp or ``issue_first``, tile k + stages is issued
    into tile k's buffer once that compute ends, and the prologue fills all ``stages`` buffers);
    with one stage, the copy of tile k is issued when tile k - 1's compute ends, so nothing
    overlaps inside the block;
  * copies and the stores of results share the SM's share of memory bandwidth, first come first
    served: a copy issued at t finishes at max(t + latency, the end of its turn on the bandwidth);
  * a tile's compute starts when its data is there and the previous compute is done (plus a fixed
    barrier cost) and takes ``compute_ns``;
  * issuing a tile's copy takes ``issue_ns`` of the issuing threads' time (LDGSTS: one instruction per
    16, 8 or 4 bytes per thread; TMA: one per tile). Without a producer warp the computing threads
    issue, between their wait and their compute, and the compute starts when they are done. With a
    producer warp (``producer=True``: ws_*, tma_1d_pipeline, tma_2d) the producer issues the copy of
    tile k + stages once the compute of tile k has released its buffer and the release has reached
    it (``handoff_ns``), one copy after another, beside the compute: a producer slower than the
    compute sets the pace. Either way a copy leaves as its issue starts (the first instructions are
    on their way while the last are issued) and is ready no earlier than its latency after that,
    nor before its issue ends. With ``issue_first`` (cuda::pipeline's order) the computing threads
    refill the buffer of tile k as soon as they have computed it, before they wait for tile k + 1,
    instead of after that wait: every buffer is filled before the first compute.
  * ``issue_ns`` and ``barrier_ns`` are the costs of a multi-stage loop. One stage is the plain
    load-wait-compute loop of `sync`, whose fixed costs the latency holds when it is fitted to `sync`
    (asynccopy.bench.model_check): they are not added again there, but a producer warp's issue and
    handoff are (its one buffer puts them on the path of every tile).
Times are in nanoseconds.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .errors import ArgumentError


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
            for e in evs:
                total += e.compute_end - e.compute_start
                spans = [(max(o.issued, e.compute_start), min(o.ready, e.compute_end)) for o in evs if o.tile > e.tile]
                covered += _union_length([(a, b) for a, b in spans if b > a])
        return covered / total if total else 0.0


def _union_length(spans: list[tuple[float, float]]) -> float:
    length, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            length += b - max(a, end)
            end = b
    return length


def check_order(producer: bool, issue_first: bool) -> None:
    """A producer warp refills on release already: issue_first is the computing threads' order."""
    if producer and issue_first:
        raise ArgumentError("issue_first is the computing threads' order: a producer warp already refills on release")


def simulate(stages: int, tiles: int, *, tile_bytes: float, compute_ns: float, latency_ns: float,
             bandwidth_per_sm: float, blocks: int = 1, out_bytes: float | None = None,
             barrier_ns: float = 0.0, issue_ns: float = 0.0, producer: bool = False,
             handoff_ns: float = 0.0, issue_first: bool = False) -> Simulation:
    """Run the model. ``bandwidth_per_sm`` in bytes per ns (GB/s); ``out_bytes`` per tile default =
    ``tile_bytes`` (results written back); ``issue_ns``, ``producer``, ``handoff_ns``,
    ``issue_first``: see the module docstring."""
    for name, value in (("stages", stages), ("tiles", tiles), ("blocks", blocks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"{name} must be an integer >= 1, got {value!r}")
    for name, value in (("bandwidth_per_sm", bandwidth_per_sm), ("tile_bytes", tile_bytes)):
        if not value > 0:
            raise ArgumentError(f"{name} must be > 0, got {value!r}")
    for name, value in (("latency_ns", latency_ns), ("compute_ns", compute_ns), ("issue_ns", issue_ns),
                        ("handoff_ns", handoff_ns), ("barrier_ns", barrier_ns)):
        if not value >= 0:
            raise ArgumentError(f"{name} must be >= 0, got {value!r}")
    check_order(producer, issue_first)
    out_bytes = tile_bytes if out_bytes is None else out_bytes
    if stages == 1:  # the plain loop: its fixed costs are in the latency (module docstring)
        barrier_ns = 0.0
        issue_ns = issue_ns if producer else 0.0
    events = [[TileEvents(b, k) for k in range(tiles)] for b in range(blocks)]
    last_end = [0.0] * blocks  # end of each block's latest compute
    server_free = stores_done = 0.0
    # (time, order, block, tile or -1 for a store, bytes, issue end: the copy is not ready before it)
    queue: list[tuple[float, int, int, int, float, float]] = []
    order = 0

    def push(t: float, block: int, tile: int, nbytes: float, issued_by: float = 0.0) -> None:
        nonlocal order
        heapq.heappush(queue, (t, order, block, tile, nbytes, issued_by))
        order += 1

    # Tiles issued before the first compute: stages - 1 of them (one with a single stage); a producer
    # warp, or computing threads that refill before they wait (issue_first), fill every buffer, one
    # copy after another.
    refill = producer or (issue_first and stages > 1)  # a buffer is refilled as soon as its compute ends
    first = min(stages if refill else max(stages - 1, 1), tiles)
    producer_free = [first * issue_ns] * blocks
    if not producer:  # the computing threads issue those copies before their first compute
        last_end = [first * issue_ns] * blocks
    for b in range(blocks):
        for k in range(first):
            push(k * issue_ns, b, k, tile_bytes, (k + 1) * issue_ns)
    while queue:
        t, _, b, k, nbytes, issued_by = heapq.heappop(queue)
        start = max(t, server_free)
        server_free = start + nbytes / bandwidth_per_sm
        if k < 0:
            stores_done = max(stores_done, server_free)  # a store only takes bandwidth
            continue
        e = events[b][k]
        e.issued, e.ready = t, max(t + latency_ns, server_free, issued_by)
        begin = max(e.ready, last_end[b]) + barrier_ns
        if producer:
            nxt = k + stages  # the tile that uses this buffer next, issued by the producer once it is free
            e.compute_start = begin
            e.compute_end = last_end[b] = begin + compute_ns
            push(e.compute_end, b, -1, out_bytes)
            if nxt < tiles:
                start = max(e.compute_end + handoff_ns, producer_free[b])
                producer_free[b] = start + issue_ns
                push(start, b, nxt, tile_bytes, producer_free[b])
        elif refill:  # the computing threads refill the buffer they just read, then wait for the next tile
            nxt = k + stages
            e.compute_start = begin
            e.compute_end = begin + compute_ns
            last_end[b] = e.compute_end + (issue_ns if nxt < tiles else 0.0)
            push(e.compute_end, b, -1, out_bytes)
            if nxt < tiles:
                push(e.compute_end, b, nxt, tile_bytes, last_end[b])
        else:
            nxt = k + max(stages - 1, 1)
            issues = stages > 1 and nxt < tiles  # the next copy is issued before this compute
            e.compute_start = begin + (issue_ns if issues else 0.0)
            e.compute_end = last_end[b] = e.compute_start + compute_ns
            push(e.compute_end, b, -1, out_bytes)
            if nxt < tiles:
                push(begin if stages > 1 else e.compute_end, b, nxt, tile_bytes, begin + issue_ns)
    flat = [e for evs in events for e in evs]
    return Simulation(stages, blocks, tiles, flat, max(max(e.compute_end for e in flat), stores_done))


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
    from .plotting import pyplot

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
