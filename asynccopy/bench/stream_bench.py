"""`asynccopy bench`: every tile-stream mechanism x stages x intensities on the local GPU.

validate → compile → check correctness (fresh random input, poisoned output, every element) →
time (warm-up, CUDA events, median, inputs rotated past L2) → rows, each against the same run's
device-to-device copy bandwidth and the same intensity's `sync` time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import device, mechanism, stream
from ..buffers import Scratch
from ..errors import ArgumentError, AsyncCopyError, CompileError
from .harness import Case, Workspace, default_progress, sweep, workspace

DEFAULT_STAGES = (1, 2, 3, 4, 6, 8)
DEFAULT_INTENSITIES = (0, 1, 2, 4, 8, 12, 16, 24)
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
    regs: int | None = None  # registers a thread of the kernel takes (what bounds the blocks an SM holds)


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
    """The swept configurations: every mechanism record's bench variants (asynccopy.mechanism), filtered
    by mechanism, each over ``stages``; configurations that cannot fit ``smem_limit`` or need more than
    ``arch`` has are left out (a mechanism asked for by name says why it cannot run instead)."""
    for name in mechanisms or ():
        mechanism.get(name)  # an unknown name is an error naming the known ones
    out = []
    for name, opts in mechanism.variants():
        if mechanisms and name not in mechanisms:
            continue
        mech = mechanism.get(name)
        for s in ([mech.fixed_stages] if mech.fixed_stages else stages):
            try:
                cfg = stream.StreamConfig.make(name, s, tile=tile, threads=threads, tiles_per_block=tiles_per_block,
                                               **opts)
            except ArgumentError:
                if mechanisms:
                    raise  # asked for by name: say why it cannot run
                continue  # e.g. producer warps do not fit beside 1024 threads, or the tile does not split
            if arch is not None and not cfg.compiles_for(arch):
                if mechanisms:  # asked for by name: say why it cannot run
                    raise AsyncCopyError(f"mechanism {name!r} needs compute capability {mech.min_cc[0]}."
                                         f"{mech.min_cc[1]}; {where} ({arch}) is below it")
                continue
            if smem_limit is not None:
                try:
                    cfg.check_fits(smem_limit, where)
                except AsyncCopyError:
                    if mechanisms and not any(c.mechanism == name for c in out) and s == max(
                            [mech.fixed_stages] if mech.fixed_stages else stages):
                        raise  # asked for by name and no stage count of it fits
                    continue
            out.append(cfg)
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


def _case(cfg: stream.StreamConfig, ws: Workspace, intensities, index: int, blocks_per_sm: int) -> Case:
    facts, n = ws.facts, ws.n

    def prepare() -> None:
        cfg.compile(facts.arch)
        check(cfg, ws.scratch, intensities, seed=ws.seed + 1000 + index)

    def run(k: int, r: int) -> None:
        x, y = ws.rotation.pair(r)
        stream.launch(cfg, int(x.handle), int(y.handle), n, k, stream=ws.stream, facts=facts,
                      blocks_per_sm=blocks_per_sm)

    return Case(f"{cfg.label():18s} stages={cfg.stages}", tuple(intensities), prepare, run, tag=cfg)


def run(cfgs: list[stream.StreamConfig], intensities=DEFAULT_INTENSITIES, *, size_bytes: int = 1 << 30,
        reps: int = 20, warmup: int = 3, blocks_per_sm: int = 1, seed: int | None = None,
        progress=default_progress) -> StreamBench:
    """Each configuration checked, then timed at each intensity on the same rotating inputs."""
    facts = device.current()
    ws = workspace(facts, size_bytes, seed=seed, warmup=warmup, reps=reps, progress=progress)
    try:
        cases = [_case(cfg, ws, intensities, i, blocks_per_sm) for i, cfg in enumerate(cfgs, 1)]
        timed = sweep(cases, ws.stream, warmup=warmup, reps=reps, progress=progress)
    finally:
        ws.close()
    rows = []
    for t in timed:
        cfg, ms = t.case.tag, t.ms
        gbps = 2 * 4 * ws.n / (ms * 1e-3) / 1e9
        rows.append(Row(cfg.mechanism, cfg.label(), cfg.stages, cfg.vec, cfg.cache,
                        cfg.expected_sass(facts.arch) or SYNC_OP, t.point, ms, gbps, 100 * gbps / ws.copy_gbps,
                        samples_ms=t.samples, producers=cfg.producers, regs=registers(cfg, facts.arch)))
    base = mechanism.baseline()
    sync_ms = {r.intensity: r.ms for r in rows if r.mechanism == base}
    for r in rows:
        if r.intensity in sync_ms:
            r.speedup_vs_sync = sync_ms[r.intensity] / r.ms
    return StreamBench(facts.as_dict(), ws.n, cfgs[0].tile if cfgs else 0, cfgs[0].threads if cfgs else 0,
                       blocks_per_sm, ws.copy_ms, ws.copy_gbps, rows)


def registers(cfg: stream.StreamConfig, arch: str) -> int | None:
    """Registers a thread of cfg's kernel takes on ``arch`` (None where cuobjdump is missing): the planner and the
    model check count the blocks an SM can hold with them (the LDGSTS kernels' 192-230 on the H200 at tile 8192 x 256 threads
    leave room for one block where the shared memory has room for two)."""
    try:
        return cfg.compile(arch).registers(cfg.name_expression())
    except CompileError:
        return None


def balanced_intensity(rows: list[Row]) -> int | None:
    """The intensity at which the baseline (`sync`) spends about as long computing as loading: t(k) ≈ 2 t(0)."""
    base = mechanism.baseline()
    sync = {r.intensity: r.ms for r in rows if r.mechanism == base}
    if 0 not in sync or len(sync) < 2:
        return None
    return min((k for k in sync if k > 0), key=lambda k: abs(sync[k] / sync[0] - 2.0))


SYNC_OP = "LDG"  # the copy_op of a row whose kernel loads through registers


def summary(result: StreamBench) -> list[str]:
    """The headline figures: the best of each copy instruction against the copy bandwidth at intensity 0;
    speedups over the baseline at the balanced intensity."""
    rows = result.rows
    lines = [f"device-to-device copy: {result.copy_gbps:.0f} GB/s ({result.copy_ms:.3f} ms for "
             f"{result.n * 4 / 2**30:.2f} GiB read + the same written)"]
    order = [op.opcode for m in mechanism.mechanisms() for op in m.copy_ops] + [SYNC_OP]
    ops = sorted({r.copy_op for r in rows}, key=lambda op: order.index(op) if op in order else len(order))
    for op in ops:
        zero = [r for r in rows if r.intensity == 0 and r.copy_op == op]
        if zero:
            best = max(zero, key=lambda r: r.gbps)
            lines.append(f"intensity 0, best {op:6s}: {best.label} stages={best.stages}: {best.gbps:.0f} GB/s "
                         f"= {best.pct_copy:.1f}% of the copy bandwidth")
    k = balanced_intensity(rows)
    if k is not None:
        lines += _balanced(rows, k, ops)
    return lines


def _balanced(rows: list[Row], k: int, ops: list[str]) -> list[str]:
    base = mechanism.baseline()
    family = {m.name: m.family for m in mechanism.mechanisms()}
    at = [r for r in rows if r.intensity == k]
    sync0 = next(r.ms for r in rows if r.mechanism == base and r.intensity == 0)
    sync_k = next(r for r in at if r.mechanism == base)
    lines = [f"balanced intensity {k}: {base} {sync_k.ms:.3f} ms = {sync_k.ms / sync0:.2f} x its intensity-0 time"]
    for op in (op for op in ops if op != SYNC_OP):
        multi = [r for r in at if r.stages > 1 and r.copy_op == op]
        if multi:
            best = min(multi, key=lambda r: r.ms)
            lines.append(f"  best multi-stage {op}: {best.label} stages={best.stages}: {best.ms:.3f} ms, "
                         f"{best.speedup_vs_sync:.2f}x {base}")
    ws = [r for r in at if family.get(r.mechanism) == "warp-specialized"]
    plain = [r for r in at if r.stages > 1 and family.get(r.mechanism) != "warp-specialized" and r.copy_op != SYNC_OP]
    if ws and plain:
        w, p = min(ws, key=lambda r: r.ms), min(plain, key=lambda r: r.ms)
        lines.append(f"  best warp-specialized: {w.label} stages={w.stages}: {w.ms:.3f} ms vs best other "
                     f"{p.label} stages={p.stages}: {p.ms:.3f} ms ({p.ms / w.ms:.3f}x)")
    for r in at:
        if family.get(r.mechanism) == "sync" and r.mechanism != base:
            lines.append(f"  {r.mechanism} ({mechanism.get(r.mechanism).api}): {r.ms:.3f} ms, "
                         f"{r.speedup_vs_sync:.2f}x {base}")
    return lines
