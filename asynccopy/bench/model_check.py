"""`asynccopy bench --plan`: the planner's stage count and the simulator's times against the sweep.

The model is calibrated in the same run, never from the table alone: bandwidth = the measured
device-to-device copy rate; latency = what makes the model reproduce the baseline (`sync`) at intensity 0 (one
stage: latency + transfer + compute per tile, the compute from a traced `sync` run). Each mechanism
variant's own costs come from two traced runs of it with 4 stages (intensity 0 and the highest):
its compute per tile and the time its threads (or its producer warp) take to issue a tile's copy,
both linear in the intensity between the two runs (issuing slows as the computing warps take the
SM's issue slots: a producer warp of LDGSTS takes 4x longer per tile at intensity 24 than at 0),
the fixed cost between two computes when the data is already there, and a producer's delay from a
buffer's release to its refill (asynccopy.model.costs.Overheads). The traces are not the sweep: the sweep is what the
model is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import mechanism
from ..device import DeviceFacts
from ..model import planner, simulate
from ..model.costs import Overheads
from ..model.memory import MemoryCurve
from ..model.simulate import NO_COSTS
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


OVERHEAD_STAGES = 4  # the traced runs that measure a variant's Overheads (fewer if 4 do not fit)
OVERHEAD_MIN_INTENSITY = 8  # their high intensity: at least this, so that they run compute-bound


def overhead_stages(result: StreamBench, label: str) -> int:
    """The stage count a variant's Overheads are traced at: OVERHEAD_STAGES, or the most the sweep ran below it."""
    swept = {x.stages for x in result.rows if x.label == label and x.stages >= 2}
    return max((s for s in swept if s <= OVERHEAD_STAGES), default=min(swept, default=OVERHEAD_STAGES))


# What a tile-stream kernel's reads and writes reach of a plain device copy's rate when nothing else limits
# them: 91-92% for the deep-pipelined kernels at intensity 0 in the default regime (tile 4096, 256 threads,
# H200, 2026-11-30: the simulator was 9-15% under there, streaming at the copy's rate). The simulator's times
# stream at this share of the copy rate where a memory curve is calibrated; the planner keeps the copy rate
# (its rules were chosen with it: at this share its memory-bound rule gave LDGSTS at tile 2048 four stages
# where eight are 7-12% faster, 37 of 48 picks within 5% against 44).
STREAM_EFFICIENCY = 0.915
SM_SUBPARTITIONS = 4  # warp schedulers an SM has (sm_70 to sm_90)


def calibrated_device(result: StreamBench, compute_ns: dict[int, float], memory: MemoryCurve | None = None) -> DeviceFacts:
    """The run's device, with the run's bandwidth and a latency fitted to the baseline at intensity 0
    (with a memory curve: the curve's unloaded latency; the curve gives each copy its own)."""
    base = DeviceFacts.from_dict(result.device)
    if memory is not None:
        return replace(base, bandwidth=result.copy_gbps * 1e9, latency_ns=memory.latency_ns,
                       latency_source=f"memory curve, {memory.source}" if memory.source else "memory curve")
    dev = replace(base, bandwidth=result.copy_gbps * 1e9,
                  latency_source=f"fitted to {mechanism.baseline()} at intensity 0")
    return replace(dev, latency_ns=_baseline_latency(result, dev, 0, compute_ns.get(0, 0.0)))


def _baseline_ms(result: StreamBench, intensity: int) -> float | None:
    name = mechanism.baseline()
    return next((r.ms for r in result.rows if r.mechanism == name and r.intensity == intensity and r.stages == 1), None)


def _baseline_latency(result: StreamBench, dev: DeviceFacts, intensity: int, compute: float) -> float:
    """The one latency that makes the one-stage simulation (no kernel costs) reproduce the baseline's time."""
    target = _baseline_ms(result, intensity)
    lo, hi = 0.0, target * 1e6  # the one-stage time grows with the latency: bisect for the baseline's time
    for _ in range(40):
        mid = (lo + hi) / 2
        if predicted_ms(replace(dev, latency_ns=mid), 1, compute, result) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class OneStage:
    """A one-stage loop's latency, fitted to the baseline's own one-stage loop at each intensity the run measured it.

    With one buffer an SM loads, then computes; the SMs drift out of phase, and the computing ones leave the
    memory system to the loading ones, so a copy's latency falls as the compute grows, by an amount that depends on
    the regime (on the H200, from intensity 0 to 8: 1289 -> 1279 ns at tile 4096 x 256 threads, 3192 -> 2070 at
    tile 16384 x 512). A memory curve fitted on bulk copies at intensity 0, where every SM loads all the time,
    cannot see it, and its latency of a whole tile plus the kernel's barrier over-counts the loop. The fitted
    latency holds the loop's fixed costs (the baseline issues, waits and synchronizes as the variants do) and goes
    with the baseline's traced compute (``compute_ns``), from which it was split: a variant's one-stage compute is
    no less (its own, traced at several stages with other tiles' reads beside its stores, can be shorter, yet its
    one-stage loop runs at the baseline's pace). It applies at the baseline's residency (``blocks`` an SM); a
    variant that holds fewer blocks keeps the curve.

    ``handoff_ns``: a producer warp's release-to-issue there, the least handoff any producer variant of the run
    traced (None: none traced one). With one buffer no copy queues behind the producer's issue, so a release
    finds it idle: the bare mbarrier round trip, one handshake in every producer kernel. A handoff traced at
    several stages and intensity 0 can hold the excess of an issue slowed by the copies queued before it (on the
    H200 at tile 8192 x 256 threads ws_ldgsts traced 520-635 ns against the TMA producers' 79-92 in the same run,
    and its one-stage loop ran at sync's pace, 0.97-1.07x, as the TMA ones did)."""

    latency_ns: dict[int, float]
    blocks: int
    compute_ns: dict[int, float] = field(default_factory=dict)
    handoff_ns: float | None = None

    def at(self, intensity: int) -> float:
        """The latency: linear in the intensity between the measured ones, the nearest one outside them."""
        return _between(self.latency_ns, intensity)

    def compute_at(self, intensity: int) -> float:
        """The baseline's traced compute at ``intensity`` (0 where none was traced)."""
        return _between(self.compute_ns, intensity) if self.compute_ns else 0.0

    def chain_latency(self, memory: MemoryCurve | None, in_flight: float) -> float:
        """A copy's latency in a two-stage loop whose computing threads issue the next tile after their wait: one copy
        a block in flight, the chain of the baseline's one-stage loop with the compute moved under the copy. No
        shorter than the baseline's latency at intensity 0 (fitted to that chain in the same run, with its issue,
        wait and barrier; at intensity 0, where every SM keeps loading as such a loop does) nor than the curve's at
        the blocks' one tile each (``in_flight`` bytes). H200, ldgsts vec16 at intensity 0: the curve alone 1216 ns
        a tile against 1345 measured at tile 4096 x 256 threads, 869 against 962 at 2048 x 512; the baseline's alone
        670 against 722 at tile 1024."""
        fitted = self.at(0)
        return fitted if memory is None else max(fitted, memory.latency_at(in_flight))


def _between(values: dict[int, float], intensity: int) -> float:
    ks = sorted(values)
    lo = max((k for k in ks if k <= intensity), default=ks[0])
    hi = min((k for k in ks if k >= intensity), default=ks[-1])
    if lo == hi:
        return values[lo]
    w = (intensity - lo) / (hi - lo)
    return (1 - w) * values[lo] + w * values[hi]


def baseline_one_stage(result: StreamBench, compute_ns: dict[int, float],
                       overheads: dict[str, Overheads] | None = None) -> OneStage:
    """The run's :class:`OneStage`: the baseline's one-stage time at every intensity with a traced compute, and
    the least handoff of the producer variants in ``overheads``."""
    dev = calibrated_device(result, compute_ns)
    fitted = {k: _baseline_latency(result, dev, k, c) for k, c in compute_ns.items() if _baseline_ms(result, k)}
    if not fitted:  # no traced compute at an intensity the baseline ran: the latency at intensity 0
        fitted = {0: dev.latency_ns}
    base = mechanism.baseline()
    regs = registers(result).get(base, {}).get(1)
    handoffs = [o.handoff_ns for o in (overheads or {}).values() if o.producer and o.handoff_ns > 0]
    return OneStage(fitted, resident_blocks(result, dev, 1, result.threads, regs),
                    {k: c for k, c in compute_ns.items() if k in fitted}, min(handoffs, default=None))


def _tiles_per_block(result: StreamBench, sm_count: int, resident: int | None = None) -> float:
    """Tiles each resident block walks: the grid's blocks (SMs x blocks_per_sm, at most one per tile) run in
    waves of ``resident`` an SM (default: all of blocks_per_sm), a later wave's tiles after an earlier's."""
    n_tiles = -(-result.n // result.tile)
    grid = min(n_tiles, sm_count * result.blocks_per_sm)
    per_block = n_tiles / grid
    return per_block * max(1.0, grid / (sm_count * (resident or result.blocks_per_sm)))


def resident_blocks(result: StreamBench, dev: DeviceFacts, stages: int, threads: int, regs: int | None = None) -> int:
    """The blocks an SM holds at once at this stage count: the run's blocks_per_sm, or fewer where the
    stages' shared memory, the threads or the kernel's ``regs`` a thread allow fewer (the planner's occupancy)."""
    rows = planner.plan([planner.Operand("tile", (result.tile,), "float32")], threads=threads, device=dev,
                        blocks_per_sm=result.blocks_per_sm, max_stages=stages, static_smem=1024,
                        regs_per_thread=regs).rows
    return max(1, rows[stages - 1].blocks_per_sm)


def registers(result: StreamBench) -> dict[str, dict[int, int | None]]:
    """Each variant's registers a thread by stage count, as the run recorded them (None: not recorded)."""
    out: dict[str, dict[int, int | None]] = {}
    for r in result.rows:
        out.setdefault(r.label, {})[r.stages] = r.regs
    return out


def _warps_per_subpartition(result: StreamBench, blocks: int) -> int:
    """The computing warps of ``blocks`` blocks on each of the SM's sub-partitions (a producer warp does not count)."""
    return -(-(blocks * -(-result.threads // 32)) // SM_SUBPARTITIONS)


def predicted_ms(dev: DeviceFacts, stages: int, compute: float, result: StreamBench,
                 ov: Overheads | None = None, intensity: int = 0, memory: MemoryCurve | None = None,
                 threads: int | None = None, regs: int | None = None, one_stage: OneStage | None = None,
                 compute_blocks: int | None = None) -> float:
    """The simulator's time for the run's grid. With ``one_stage`` a one-stage loop at the baseline's residency
    takes the baseline's latency at this intensity (:class:`OneStage`) in place of the memory curve, a
    compute no shorter than the baseline's, and a producer's handoff no longer than the run's least; a two-stage
    loop there with one copy a block in flight (:func:`one_copy_in_flight`) :meth:`OneStage.chain_latency`.

    ``compute_blocks``: the blocks an SM held when ``compute`` was traced. A traced compute is one block's with
    the others' warps beside it on the SM's sub-partitions; a multi-stage loop that holds another number of
    blocks, each always with a tile to compute, shares them differently: its compute is ``compute`` x the
    computing warps a sub-partition holds now / then (on the H200 at tile 4096 x 128 threads x 2 blocks one block
    alone at 8 stages ran at 1.18x the per-SM time of two at 4, not 2x; at 64 threads x 2 blocks, one warp a
    sub-partition either way, one block alone computed no faster). A one-stage loop keeps ``compute``: its blocks
    take turns, one computing while the other waits for its copy. Where fewer blocks are resident than were traced,
    the variant's traced issue time shrinks in proportion (:func:`shared_issue`).
    """
    resident = resident_blocks(result, dev, stages, threads or result.threads, regs)
    tiles = _tiles_per_block(result, dev.sm_count, resident)
    if stages > 1 and compute_blocks:
        compute = compute * _warps_per_subpartition(result, resident) / _warps_per_subpartition(result, compute_blocks)
        ov = shared_issue(ov, resident, compute_blocks)
    latency = dev.latency_ns
    bandwidth = dev.bandwidth * (STREAM_EFFICIENCY if memory is not None else 1.0)
    if stages == 1 and one_stage is not None and resident == one_stage.blocks:
        latency, memory, bandwidth = one_stage.at(intensity), None, dev.bandwidth
        compute = max(compute, one_stage.compute_at(intensity))
        if ov is not None and ov.producer and one_stage.handoff_ns is not None:
            ov = replace(ov, handoff_ns=min(ov.handoff_ns, one_stage.handoff_ns))
    elif stages == 2 and one_stage is not None and resident == one_stage.blocks and one_copy_in_flight(ov):
        latency, memory = one_stage.chain_latency(memory, resident * result.tile * 4), None
    sim = simulate.simulate(stages, max(1, round(tiles)), tile_bytes=result.tile * 4, compute_ns=compute,
                            latency_ns=latency, bandwidth_per_sm=bandwidth / dev.sm_count / 1e9,
                            blocks=resident, costs=NO_COSTS if ov is None else ov.costs(intensity),
                            memory=memory)
    return sim.total_ns / 1e6


def shared_issue(ov: Overheads | None, resident: int, traced: int) -> Overheads | None:
    """``ov`` with its issue times for ``resident`` blocks an SM where ``traced`` blocks issued in its trace: a traced
    issue waits on the memory system's admission, which the SM's issuing blocks share, so fewer blocks each wait
    proportionally less (H200, tile 4096 floats x 64 threads x 2 blocks: a TMA producer's traced 1.9 us a tile put one
    block at 8 stages 70% over, where it measured no slower than two at 4). More blocks than traced keep it (the
    bandwidth already bounds them)."""
    if ov is None or resident >= traced:
        return ov
    share = resident / traced
    return replace(ov, issue_ns=ov.issue_ns * share, issue_lo_ns=ov.issue_lo_ns * share)


def one_copy_in_flight(ov: Overheads | None) -> bool:
    """Whether a two-stage loop of this variant keeps one copy a block in flight: computing threads that issue after
    their wait (a producer warp refills on release, cuda::pipeline before its wait: both keep two)."""
    return ov is None or not (ov.producer or ov.issue_first)


def traced_blocks(result: StreamBench, dev: DeviceFacts, label: str, threads: int, regs: dict[int, int | None],
                  ov: Overheads | None, one: OneStage) -> int:
    """The blocks an SM held in the traced run a variant's compute comes from: its own at :func:`overhead_stages`,
    or (without Overheads: the baseline's compute) the baseline's one-stage run's."""
    if ov is None:
        return one.blocks
    stages = overhead_stages(result, label)
    return resident_blocks(result, dev, stages, threads, regs.get(stages))


def unstalled(overheads: dict[str, Overheads] | None, compute_ns: dict[int, float]) -> dict[str, Overheads]:
    """The variants' costs with their compute at intensity 0 no longer than the baseline's there.

    At intensity 0 the compute is the tile's copy from shared to global memory, the same instructions in every
    kernel. A variant's traced run (OVERHEAD_STAGES stages) is memory-bound there: its stores wait for the memory
    system and its traced compute holds that wait (1.13-1.17 us a tile for ws_tma in a tile-8192 run on the H200,
    against 0.26 for ldgsts vec16), which the simulator already charges as the stores' bandwidth. The baseline's
    one-stage trace stores with none of its block's reads in flight: a traced compute is the compute plus a
    stall, so the smaller of the two is the nearer to the compute itself (and the intensities between follow it)."""
    floor = compute_ns.get(0)
    if floor is None:
        return dict(overheads or {})
    return {label: replace(o, compute_lo=min(o.compute_lo, floor)) for label, o in (overheads or {}).items()}


BULK_COPY_OPS = (mechanism.UBLKCP.opcode, mechanism.UTMALDG.opcode)  # one instruction moves a whole tile


def bulk_issue(overheads: dict[str, Overheads], copy_ops: dict[str, str]) -> dict[str, Overheads]:
    """The variants' costs with a bulk-copy producer's issue at the high intensity taken from intensity 0 where the
    traced one reached its consumers' period there (``copy_ops``: each variant's copy instruction, from its rows).

    A TMA producer issues a tile with one instruction from one elected thread (140-290 ns a tile on the H200 at
    intensity 0, tiles 1024-16384 floats, 128-512 threads). At the high intensity its consumers compute while the
    data is there, so it waits for every buffer, and the spacing of its `issued` records is their period; the tiles
    taken as a producer that did not wait are then the noise of that wait (costs._issue_time), and the spacing read
    as its issue reaches the consumers' compute + gap or exceeds it (tile 4096 x 512 threads x 2 blocks: 3.9-4.7 us a
    tile against a period of 1.6-1.7). A producer that slow would have held its consumers back, and their gap would
    say so: the issue there holds waits, and the one at intensity 0 is the instruction's. LDGSTS producers keep
    theirs (their issue is a tile's worth of instructions beside the computing warps, and slows as they take the
    issue slots)."""
    out = {}
    for label, o in overheads.items():
        waits = o.producer and o.issue_lo_ns is not None and o.issue_ns >= o.compute_hi + o.barrier_ns
        out[label] = replace(o, issue_ns=o.issue_lo_ns) if waits and copy_ops.get(label) in BULK_COPY_OPS else o
    return out


class Predictor:
    """The simulator's time for each (variant, intensity, stage count) of a run, as :func:`check` models it (the
    plot draws the same): the run's device and :class:`OneStage`, the variants' costs with their compute at
    intensity 0 no more than `sync`'s (:func:`unstalled`) and a bulk-copy producer's issue without its waits
    (:func:`bulk_issue`), their threads, registers and traced residency."""

    def __init__(self, result: StreamBench, compute_ns: dict[int, float],
                 overheads: dict[str, Overheads] | None = None, memory: MemoryCurve | None = None):
        self.result, self.compute_ns, self.memory = result, compute_ns, memory
        self.dev = calibrated_device(result, compute_ns, memory)
        self.one = baseline_one_stage(result, compute_ns, overheads)
        self.overheads = bulk_issue(unstalled(overheads, compute_ns), {r.label: r.copy_op for r in result.rows})
        self.simulated = {label: o.untraced() for label, o in self.overheads.items()}
        self.regs = registers(result)
        self.threads = {r.label: result.threads + 32 * r.producers for r in result.rows}

    def compute(self, label: str, intensity: int, *, untraced: bool = False) -> float:
        ov = (self.simulated if untraced else self.overheads).get(label)
        return ov.compute_ns(intensity) if ov else self.compute_ns[intensity]

    def ms(self, label: str, intensity: int, stages: int) -> float:
        """The simulated time, on the variant's costs less the trace's own (Overheads.untraced)."""
        ov, threads, regs = self.simulated.get(label), self.threads[label], self.regs[label]
        traced = traced_blocks(self.result, self.dev, label, threads, regs, ov, self.one)
        return predicted_ms(self.dev, stages, self.compute(label, intensity, untraced=True), self.result, ov,
                            intensity, self.memory, threads, regs.get(stages), self.one, traced)


def check(result: StreamBench, compute_ns: dict[int, float], overheads: dict[str, Overheads] | None = None,
          memory: MemoryCurve | None = None) -> tuple[DeviceFacts, list[ModelRow]]:
    """For every multi-stage mechanism variant and intensity: planner vs best measured, simulator vs
    measured. A variant with ``overheads`` is modelled with its own compute, issue and barrier costs;
    one without, with the traced `sync` compute and no issue cost; a variant's compute at intensity 0 is
    taken as no more than `sync`'s (:func:`unstalled`). With ``memory`` (the device's
    calibrated curve) each copy's latency is the curve's at the bytes in flight; without it, one latency
    fitted to `sync` at intensity 0."""
    model = Predictor(result, compute_ns, overheads, memory)
    dev = model.dev
    groups: dict[tuple[str, int], dict[int, float]] = {}
    for r in result.rows:
        if mechanism.get(r.mechanism).fixed_stages is None and r.intensity in compute_ns:
            groups.setdefault((r.label, r.intensity), {})[r.stages] = r.ms
    rows = []
    for (label, k), by_stages in sorted(groups.items()):
        ov = model.overheads.get(label)
        tiles = max(8, round(_tiles_per_block(result, dev.sm_count)))
        costs = NO_COSTS if ov is None else ov.costs(k)
        p = planner.plan([planner.Operand("tile", (result.tile,), "float32")], threads=model.threads[label],
                         device=dev, compute_ns=model.compute(label, k), blocks_per_sm=result.blocks_per_sm,
                         max_stages=max(by_stages), static_smem=1024, tiles=tiles, costs=costs, memory=memory,
                         regs_per_thread=model.regs[label])
        best = min(by_stages, key=by_stages.get)
        at = by_stages.get(p.recommended)
        errors = [abs(model.ms(label, k, s) - ms) / ms for s, ms in by_stages.items()]
        rows.append(ModelRow(label, k, p.recommended, at, best, by_stages[best],
                             at / by_stages[best] if at is not None else None, max(errors)))
    return dev, rows


SIM_TARGET = 0.10  # the simulator's goal: within this of every measured stage count
SIM_LIMIT = 0.25  # the simulator's older bound, still reported
PLAN_TARGET = 1.05  # the planner's goal: its pick within 5% of the best measured stage count


def unmeasured_picks(result: StreamBench, rows: list[ModelRow]) -> dict[tuple[str, int], list[int]]:
    """(variant label, planned stage count) -> the intensities at which the planner picked a stage count
    the sweep did not run: `bench --plan` measures them too, so that every pick is checked."""
    out: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        if r.measured_at_recommended_ms is None:
            out.setdefault((r.label, r.recommended), []).append(r.intensity)
    return out


def with_best(picks: dict[tuple[str, int], list[int]], rows: list[ModelRow]) -> dict[tuple[str, int], list[int]]:
    """The unswept picks and, at the same intensities, each one's best swept stage count: timed again in
    the same run as the pick, so that the 5% verdict does not straddle two runs (later rows of a (variant,
    stage count, intensity) replace earlier ones in the check)."""
    best = {(r.label, r.intensity): r.best_stages for r in rows}
    out = {key: sorted(ks) for key, ks in picks.items()}
    for (label, _), ks in picks.items():
        for k in ks:
            out.setdefault((label, best[(label, k)]), [])
            if k not in out[(label, best[(label, k)])]:
                out[(label, best[(label, k)])] = sorted(out[(label, best[(label, k)])] + [k])
    return out


def in_calibration(result: StreamBench, fitted_regimes) -> bool:
    """Whether this run's regime (its tile, threads and blocks per SM) is one the memory curve was fitted
    on, by any kernel at any stage count: then none of its pairs is held out from the fit; otherwise all
    of them are."""
    want = f" tile={result.tile} threads={result.threads} "
    return any(want in name and name.endswith(f" blocks={result.blocks_per_sm}") for name in fitted_regimes)


def summary_counts(rows: list[ModelRow]) -> tuple[int, int, int, int]:
    """(planner picks within 5% of the best, simulator within 10%, simulator within 25%, pairs)."""
    return (sum(r.ratio is not None and r.ratio <= PLAN_TARGET for r in rows),
            sum(r.worst_error <= SIM_TARGET for r in rows), sum(r.worst_error <= SIM_LIMIT for r in rows), len(rows))
