"""How many stages? A planner that answers from the shared-memory budget, occupancy, Little's law and
(when the compute time per tile is known) the pipeline simulator — without a GPU.

Stages cost shared memory and may cost occupancy; the smallest stage count whose copies in flight
cover the memory latency (and keep the device's bandwidth busy) is enough. Below compute capability
8.0 memcpy_async is synchronous (no LDGSTS), so more stages bring nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from .. import device as devices
from ..device import DeviceFacts
from ..dtypes import DTYPES, dtype_name
from ..errors import ArgumentError, check_float, check_int
from . import memory as memory_model
from . import simulate
from .memory import MemoryCurve
from .simulate import NO_COSTS, KernelCosts

KiB = 1024


@dataclass(frozen=True)
class Operand:
    """One operand's tile in one stage, e.g. A: 128 x 32 bf16."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ArgumentError(f"an operand's name is a non-empty string, got {self.name!r}")
        if not isinstance(self.shape, (tuple, list)) or not self.shape:
            raise ArgumentError(f"operand {self.name}: shape must be a non-empty tuple of extents, got {self.shape!r}")
        object.__setattr__(self, "shape", tuple(check_int(d, f"operand {self.name}: each extent", 1, 1 << 31)
                                                for d in self.shape))
        if not isinstance(self.dtype, str) or dtype_name(self.dtype) not in DTYPES:
            raise ArgumentError(f"operand {self.name}: unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.dtype][0]

    @staticmethod
    def parse(text: str) -> Operand:
        """``"A:128x32:bf16"`` (name optional: ``"128x32:bf16"``)."""
        if not isinstance(text, str):
            raise ArgumentError(f"an operand is an Operand or a string like NAME:128x32:bf16, got {text!r}")
        parts = text.split(":")
        if len(parts) == 2:
            parts = ["tile"] + parts
        if len(parts) != 3 or not re.fullmatch(r"\d+(x\d+)*", parts[1].lower()):
            raise ArgumentError(f"operand must look like NAME:128x32:bf16, got {text!r}")
        dtype = dtype_name(parts[2])
        if dtype not in DTYPES:
            raise ArgumentError(f"operand {parts[0]}: unknown dtype {parts[2]!r}; known: {', '.join(DTYPES)}")
        return Operand(parts[0], tuple(int(d) for d in parts[1].lower().split("x")), dtype)


@dataclass
class StageRow:
    stages: int
    smem_per_block: int
    fits: bool
    blocks_per_sm: int
    limiter: str
    occupancy: float  # resident warps / the SM's maximum
    bytes_in_flight_per_sm: int  # prefetched tiles while one is computed ((stages - 1) per block; all stages
    # with a memory curve for a kernel that refills on release)
    coverage: float  # bytes in flight / bytes the device needs in flight per SM
    ns_per_tile: float | None = None  # simulator's prediction, when the compute time is known


@dataclass
class Plan:
    device: DeviceFacts
    operands: list[Operand]
    threads: int
    stage_bytes: int
    needed_bytes_per_sm: float
    rows: list[StageRow]
    recommended: int
    reasons: list[str] = field(default_factory=list)
    impossible: str | None = None
    compute_ns: float | None = None
    busy_ns: float | None = None  # a tile's time on the busiest warps with its data there: compute + own costs
    refill_ns: float | None = None  # from a buffer's release to its next tile landing (two stages' critical path)
    memory: MemoryCurve | None = None  # the device's calibrated memory curve, where the plan used one

    def row(self, stages: int) -> StageRow:
        return next(r for r in self.rows if r.stages == stages)

    def report(self) -> str:
        d = self.device
        ops = ", ".join(f"{o.name} {'x'.join(map(str, o.shape))} {o.dtype}" for o in self.operands)
        lines = [f"{d.name} (CC {d.cc[0]}.{d.cc[1]}, {d.sm_count} SMs, {d.smem_per_block_optin // KiB} KiB shared "
                 f"memory per block, {d.smem_per_sm // KiB} KiB per SM, {d.bandwidth / 1e9:.0f} GB/s, assumed latency "
                 f"{d.latency_ns:.0f} ns: {d.latency_source})"
                 if self.memory is None else
                 f"{d.name} (CC {d.cc[0]}.{d.cc[1]}, {d.sm_count} SMs, {d.smem_per_block_optin // KiB} KiB shared "
                 f"memory per block, {d.smem_per_sm // KiB} KiB per SM; calibrated memory curve: unloaded latency "
                 f"{self.memory.latency_ns:.0f} ns, reads approach {self.memory.rate:.1f} B/ns per SM, knee "
                 f"{self.memory.knee:.2f})",
                 f"per stage: {ops} = {self.stage_bytes / KiB:.1f} KiB; {self.threads} threads per block",
                 f"to keep the memory busy an SM needs {self.needed_bytes_per_sm / KiB:.1f} KiB in flight"
                 + ("" if self.memory is None else f" ({100 * COVERED_RATE:.0f}% of the curve's rate)"),
                 "stages  smem/block  fits  blocks/SM  limited by      occupancy  in flight/SM  coverage"
                 + ("  ns/tile" if self.compute_ns is not None else "")]
        for r in self.rows:
            lines.append(f"{r.stages:6d}  {r.smem_per_block / KiB:8.1f}K  {'yes' if r.fits else ' no'}   "
                         f"{r.blocks_per_sm:8d}  {r.limiter:14s} {100 * r.occupancy:8.0f}%  "
                         f"{r.bytes_in_flight_per_sm / KiB:10.1f}K  {100 * r.coverage:7.0f}%"
                         + (f"  {r.ns_per_tile:7.0f}" if r.ns_per_tile is not None else ""))
        if self.impossible:
            lines.append(f"impossible: {self.impossible}")
        lines.append(f"recommended: {self.recommended} stage(s)" if self.recommended else "recommended: none")
        lines += [f"  - {why}" for why in self.reasons]
        return "\n".join(lines)


def _blocks_per_sm(device: DeviceFacts, smem: int, threads: int, regs: int | None,
                   requested: int | None) -> tuple[int, str]:
    warps = -(-threads // 32)
    limits = {
        "shared memory": device.smem_per_sm // (smem + device.reserved_smem_per_block) if smem else 10**9,
        "threads": device.max_threads_per_sm // (32 * warps),
        "blocks": device.max_blocks_per_sm,
    }
    if regs:
        per_warp = -(-regs * 32 // 256) * 256  # registers are allocated per warp, 256 at a time
        limits["registers"] = device.regs_per_sm // (per_warp * warps)
    if requested is not None:
        limits["requested"] = requested
    limiter = min(limits, key=lambda k: (limits[k], k != "requested"))
    return max(0, limits[limiter]), limiter


CACHED = "cached"  # plan's default memory: the device's calibrated curve where one is cached, else a fixed latency
COVERED_RATE = 0.9  # with a memory curve, the bytes in flight "needed" are those that give this share of its rate


def plan(operands, *, threads: int, device=None, regs_per_thread=None,
         compute_ns: float | None = None, blocks_per_sm: int | None = None, max_stages: int = 16,
         static_smem: int = 0, tiles: int = 64, costs: KernelCosts = NO_COSTS, memory=CACHED,
         bandwidth: float | None = None) -> Plan:
    """Plan the stage count for tiles of ``operands`` (Operand objects or "A:128x32:bf16" strings).

    ``device``: a table name ("H200", "A100-40GB", ...), DeviceFacts (live or tabled), or None for the
    local GPU. ``regs_per_thread``: the kernel's registers a thread (None: no limit), or a dict of them per stage
    count (a kernel's build for each; stage counts it lacks: no limit). ``compute_ns``: compute time per tile, to
    predict times with the simulator.
    ``blocks_per_sm``: cap the blocks per SM (the tile-stream benchmark runs 1). ``costs``: the
    kernel's own costs and order, for the simulator (asynccopy.model.simulate.KernelCosts).
    ``memory``: how the memory system answers load (asynccopy.model.memory): a MemoryCurve, None for the
    device's fixed latency, or ``"cached"`` (default) for the curve `asynccopy calibrate` (or `bench
    --plan`) saved for this device, falling back to the fixed latency where it never ran. ``bandwidth``
    (bytes/s): what the tiles' loads share, where it is not the device's memory bandwidth (a GEMM's
    operands come mostly from L2)."""
    ops = [o if isinstance(o, Operand) else Operand.parse(o) for o in operands]
    if not isinstance(costs, KernelCosts):
        raise ArgumentError(f"costs must be a KernelCosts, got {type(costs).__name__}")
    if not ops:
        raise ArgumentError("plan needs at least one operand tile")
    threads = check_int(threads, "threads", 32, 1024)
    if threads % 32:
        raise ArgumentError(f"threads must be a multiple of 32 in [32, 1024], got {threads}")
    max_stages = check_int(max_stages, "max_stages", 1, MAX_PLANNED_STAGES)
    static_smem = check_int(static_smem, "static_smem", 0, 1 << 30)
    tiles = check_int(tiles, "tiles", 1, 1 << 20)
    regs_per_thread = _check_regs(regs_per_thread)
    if blocks_per_sm is not None:
        blocks_per_sm = check_int(blocks_per_sm, "blocks_per_sm", 1, 64)
    if compute_ns is not None:
        compute_ns = check_float(compute_ns, "compute_ns", 0.0)
    dev = _device(device)
    if bandwidth is not None:
        dev = replace(dev, bandwidth=check_float(bandwidth, "bandwidth", 0.0, above=True))
    curve = _memory(memory, dev)
    stage = sum(o.nbytes for o in ops)
    needed = dev.bytes_in_flight_per_sm if curve is None else curve.bytes_for(COVERED_RATE)
    # in flight while a tile is computed: the prefetched S - 1, or, with a memory curve (whose bytes in flight
    # the calibration counted at each issue), all S where a producer or an issue-first loop refills each
    # buffer as soon as it is released
    refills = curve is not None and (costs.producer or costs.issue_first)
    rows = _rows(dev, stage, static_smem, threads, regs_per_thread, blocks_per_sm, max_stages, needed, refills)
    busy = refill = None
    if compute_ns is not None:
        c = costs
        busy = max(compute_ns + c.barrier_ns, c.issue_ns) if c.producer else compute_ns + c.barrier_ns + c.issue_ns
        # a producer refills after the release reaches it and has issued the whole tile; the copy's
        # last bytes land a latency after that (computing threads issue their share in parallel)
        # (with a memory curve: the latency of one tile in flight per block, as two stages keep)
        two = rows[1] if len(rows) > 1 else rows[0]
        latency = dev.latency_ns if curve is None else curve.latency_at(stage * max(1, two.blocks_per_sm))
        refill = latency + (c.handoff_ns + c.issue_ns if c.producer else 0.0)
    result = Plan(dev, ops, threads, stage, needed, rows, 0, compute_ns=compute_ns, busy_ns=busy, refill_ns=refill,
                  memory=curve)
    if compute_ns is not None:
        _simulate_rows(result, tiles, costs)
    _recommend(result)
    return result


def _check_regs(regs):
    """None, registers a thread, or {stage count: registers a thread} (a figure of None is left out)."""
    if isinstance(regs, dict):
        return {check_int(k, "a stage count of regs_per_thread", 1, MAX_PLANNED_STAGES): check_int(v, "regs_per_thread", 1, 255)
                for k, v in regs.items() if v is not None}
    return None if regs is None else check_int(regs, "regs_per_thread", 1, 255)


def _rows(dev, stage, static_smem, threads, regs, blocks_per_sm, max_stages, needed,
          refills: bool = False) -> list[StageRow]:
    """A row per stage count: its shared memory, whether it fits, blocks per SM and bytes in flight."""
    rows = []
    for s in range(1, max_stages + 1):
        smem = s * stage + static_smem
        fits = smem <= dev.smem_per_block_optin
        r = regs.get(s) if isinstance(regs, dict) else regs
        b, limiter = _blocks_per_sm(dev, smem, threads, r, blocks_per_sm) if fits else (0, "shared memory")
        flight = (s if refills else s - 1) * stage * b
        rows.append(StageRow(s, smem, fits, b, limiter, b * -(-threads // 32) * 32 / dev.max_threads_per_sm, flight,
                             flight / needed if needed else 0.0))
    return rows


def _simulate_rows(p: Plan, tiles: int, costs: KernelCosts) -> None:
    """Each row that fits, simulated: its predicted time per tile of the SM."""
    dev = p.device
    bw_sm = dev.bandwidth / dev.sm_count / 1e9
    for r in p.rows:
        if r.fits and r.blocks_per_sm:
            sim = simulate.simulate(r.stages, tiles, tile_bytes=p.stage_bytes, compute_ns=p.compute_ns,
                                    latency_ns=dev.latency_ns, bandwidth_per_sm=bw_sm, blocks=r.blocks_per_sm,
                                    costs=costs, memory=p.memory)
            r.ns_per_tile = sim.ns_per_tile / r.blocks_per_sm  # per tile of the SM


MAX_PLANNED_STAGES = 64  # a plan's table has a row per stage count
NEAR_SATURATION = 0.9  # a tile's memory time / its work at which the planner keeps Little's law's bytes in flight


def _memory(memory, dev: DeviceFacts) -> MemoryCurve | None:
    if memory is None or isinstance(memory, MemoryCurve):
        return memory
    if memory == CACHED:
        saved = memory_model.cached(dev)
        return None if saved is None else saved.curve
    raise ArgumentError(f"memory must be a MemoryCurve, None (the fixed latency) or {CACHED!r}, got {memory!r}")


def unloaded_device(facts: DeviceFacts, memory=CACHED) -> DeviceFacts:
    """``facts`` with the memory curve's unloaded latency where ``memory`` resolves to a curve (a MemoryCurve,
    or "cached" and one is saved for the device), else as they are: for loads served mostly from L2 (GEMM
    and attention operands), where the DRAM curve's queueing does not apply but its latency floor does."""
    curve = _memory(memory, facts)
    if curve is None:
        return facts
    return replace(facts, latency_ns=curve.latency_ns,
                   latency_source=f"memory curve's unloaded latency ({curve.source})")


def _device(device) -> DeviceFacts:
    if isinstance(device, DeviceFacts):
        return device
    if isinstance(device, str):
        return devices.lookup(device)
    if device is None:
        return devices.current()
    raise ArgumentError(f"device must be a table name ({', '.join(devices.KNOWN)}), DeviceFacts or None, "
                        f"got {type(device).__name__}")


def _recommend(p: Plan) -> None:
    dev, why = p.device, p.reasons
    fitting = [r for r in p.rows if r.fits and r.blocks_per_sm > 0]
    if not fitting:
        one = p.rows[0]
        if one.fits:  # shared memory fits; registers or threads leave no room for a block
            p.impossible = f"no block of {p.threads} threads fits an SM of {dev.name}: limited by {one.limiter}"
            why.append("use fewer threads or registers per thread")
        else:
            p.impossible = (f"one stage of {p.stage_bytes / KiB:.0f} KiB does not fit: {dev.name} allows "
                            f"{dev.smem_per_block_optin // KiB} KiB per block")
            why.append("use smaller tiles or a narrower dtype")
        return
    if len(p.rows) > 1 and not p.row(2).fits:
        p.impossible = (f"2 stages need {p.row(2).smem_per_block / KiB:.0f} KiB of shared memory; {dev.name} allows "
                        f"{dev.smem_per_block_optin // KiB} KiB per block ({dev.smem_per_sm // KiB} KiB per SM): "
                        f"no double buffering at this tile size")
        p.recommended = 1
        why.append("halve the tile (or use a 2-byte dtype) to double-buffer")
        return
    if dev.cc < (8, 0):
        p.recommended = 1
        why.append(f"compute capability {dev.cc[0]}.{dev.cc[1]} has no LDGSTS: memcpy_async falls back to "
                   f"synchronous copies, so more stages bring nothing")
        return
    multi = [r for r in fitting if r.stages >= 2]
    if not multi:
        p.recommended = 1
        why.append("only one stage was considered (max_stages=1)")
    elif p.compute_ns is not None and all(r.ns_per_tile is not None for r in fitting):
        _recommend_simulated(p, fitting)
    else:
        _recommend_by_littles_law(p, multi)


def _recommend_simulated(p: Plan, fitting: list[StageRow]) -> None:
    """The smallest stage count the simulator puts within 2% of the best, kept at Little's law's bytes in
    flight near the bandwidth, and past 2 stages when a buffer's refill cannot land within a tile's work."""
    dev, why = p.device, p.reasons
    best = min(fitting, key=lambda r: r.ns_per_tile)
    enough = min((r for r in fitting if r.ns_per_tile <= 1.02 * best.ns_per_tile), key=lambda r: r.stages)
    # the SM's share of bandwidth a tile (read and its result written) takes, against its work
    def memory_ns(r):
        return r.blocks_per_sm * 2 * p.stage_bytes / (dev.bandwidth / dev.sm_count / 1e9)

    one = p.row(1)
    # One buffer where a second would save under 5% -- unless memory-bound: the simulator credits an SM's blocks taking
    # turns then, and on the H200 at 2 blocks per SM one buffer was 10-14% slower than 4 (2026-12-01): see below.
    if (one.fits and one.ns_per_tile is not None and one.ns_per_tile <= 1.05 * enough.ns_per_tile
            and memory_ns(one) < NEAR_SATURATION * p.busy_ns):
        enough = one
        why.append("load << compute: a second buffer would save under 5%")
    enough = _free_buffers(p, fitting, enough)
    covered = [r for r in fitting if r.stages > enough.stages and r.coverage >= 1.0]
    memory = memory_ns(enough)
    if memory >= NEAR_SATURATION * p.busy_ns and enough.coverage < 1.0 and covered:
        # At or near the bandwidth: the model's bandwidth is a hard ceiling, but a real memory system
        # approaches it gradually with the bytes in flight, and queues lengthen its latency as it nears
        # it. Keep at least Little's law's worth in flight.
        why.append(f"memory-bound or near it (a tile's {memory:.0f} ns on the SM's share of the bandwidth >= "
                   f"{100 * NEAR_SATURATION:.0f}% of its {p.busy_ns:.0f} ns of work): {covered[0].stages} stages "
                   f"keep the {p.needed_bytes_per_sm / KiB:.0f} KiB per SM in flight that Little's law asks for; "
                   f"{enough.stages} would keep {enough.bytes_in_flight_per_sm / KiB:.0f} KiB")
        enough = covered[0]
    more = [r for r in fitting if r.stages > 2]
    margin = enough.stages == 2 and p.busy_ns < p.refill_ns and more
    if margin:
        # Two buffers hold one tile in flight: a buffer's refill must land within one tile's work, with no slack for
        # a latency above its median; the simulator lets a copy's latency overlap its issue (a throttled producer's not).
        nxt = min((r for r in more if r.ns_per_tile <= 1.02 * best.ns_per_tile), key=lambda r: r.stages,
                  default=more[0])
        why.append(f"2 stages leave no slack: a buffer's refill takes {p.refill_ns:.0f} ns from its release to its "
                   f"data (latency{' + handoff + the producer issuing a tile' if p.refill_ns > dev.latency_ns else ''})"
                   f", more than a tile's {p.busy_ns:.0f} ns of work; {nxt.stages} stages do not wait on it "
                   f"(the simulator lets the latency overlap the issue, and a latency above its median is not in it)")
        enough = nxt
    p.recommended = enough.stages
    if margin:
        why.append(f"{enough.stages} stage(s): predicted {enough.ns_per_tile:.0f} ns per tile, a margin the "
                   f"model does not see (its best: {best.stages} stages, {best.ns_per_tile:.0f} ns)")
    else:
        why.append(f"{enough.stages} stage(s): predicted {enough.ns_per_tile:.0f} ns per tile, within 2% of the "
                   f"best ({best.stages} stages, {best.ns_per_tile:.0f} ns)")
    fewer = [r for r in fitting if r.stages < enough.stages]
    if fewer:
        f = fewer[-1]
        why.append(f"{f.stages} stage(s) would take {f.ns_per_tile:.0f} ns per tile "
                   f"(+{100 * (f.ns_per_tile / enough.ns_per_tile - 1):.0f}%)")


def _free_buffers(p: Plan, fitting: list[StageRow], enough: StageRow) -> StageRow:
    """With a memory curve: more stages at the same blocks per SM, up to the curve's bytes in flight (or all that fit).
    The simulator gives a copy the latency of its load; loaded DRAM spreads it, and buffers that cost no occupancy
    absorb the spread (H200, 2026-12-03: at tile 1024 floats 8 stages were 4-15% faster than the 3-5 planned)."""
    free = [r for r in fitting if r.stages > enough.stages and r.blocks_per_sm == enough.blocks_per_sm]
    if p.memory is None or enough.stages < 2 or enough.coverage >= 1.0 or not free:
        return enough
    r = next((r for r in free if r.coverage >= 1.0), free[-1])
    p.reasons.append(f"{r.stages} stages cost no occupancy ({r.blocks_per_sm} block(s) per SM, as {enough.stages}) and keep "
                     f"{r.bytes_in_flight_per_sm / KiB:.0f} KiB in flight per SM, not {enough.bytes_in_flight_per_sm / KiB:.0f}"
                     f" (the curve's rate wants {p.needed_bytes_per_sm / KiB:.0f})")
    return r


def _recommend_by_littles_law(p: Plan, multi: list[StageRow]) -> None:
    """Without a compute time: the fewest stages whose prefetched tiles cover the latency."""
    why = p.reasons
    covered = [r for r in multi if r.coverage >= 1.0]
    if covered:
        r = covered[0]
        p.recommended = r.stages
        why.append(f"{r.stages} stages keep {r.bytes_in_flight_per_sm / KiB:.0f} KiB in flight per SM "
                   f"({r.blocks_per_sm} block(s) x {r.stages - 1} prefetched tile(s)) >= the "
                   f"{p.needed_bytes_per_sm / KiB:.0f} KiB the device needs (Little's law)")
    else:
        r = max(multi, key=lambda r: (r.coverage, -r.stages))
        p.recommended = r.stages
        why.append(f"no stage count that fits covers the latency: {r.stages} stages reach {100 * r.coverage:.0f}% of "
                   f"the {p.needed_bytes_per_sm / KiB:.0f} KiB per SM needed; expect less than full bandwidth")
    if p.recommended > 2:
        why.append("the first 2 stages hide the load behind one compute; the rest keep enough bytes in flight")
