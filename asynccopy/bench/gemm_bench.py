"""`asynccopy bench gemm`: our GEMM kernels against cuBLAS (PyTorch's matmul) and a Triton matmul at its
best `num_stages`, same inputs, same run.

For each shape (m, n, k): fresh random inputs in the chosen dtype, enough sets of A, B, C that the
bytes between two uses of one set exceed 3 x L2 (small shapes would otherwise be timed out of L2);
every implementation's C is checked against a float64 product first; then each is timed (CUDA events,
median after warm-up). Rows give TFLOP/s (2 m n k / time), % of the same shape's cuBLAS, % of the
device's datasheet peak where the table knows it, and the relative error.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from .. import device, matmul
from ..errors import ArgumentError, AsyncCopyError
from ..tuning import LAYOUTS
from .gemm_tune import kernels_for, tune
from .harness import Case, Skip, default_progress, rotation_sets, sweep

__all__ = ["kernels_for", "run", "summary", "plot"]

DEFAULT_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                  (16384, 16384, 16384), (128, 8192, 8192), (8192, 8192, 1024), (16384, 1024, 8192),
                  (3000, 5000, 7000))  # (m, n, k)
TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-4}  # ||C - C64|| / ||C64||, C rounded to the input dtype


@dataclass
class GemmRow:
    m: int
    n: int
    k: int
    impl: str  # "cuBLAS", "Triton", or an asynccopy kernel's name
    config: str
    stages: int | None
    ms: float
    tflops: float
    pct_cublas: float | None = None
    pct_peak: float | None = None
    pct_ceiling: float | None = None  # of the measured peak of the kernel's instruction (mma.sync, FFMA)
    rel_error: float = 0.0
    samples_ms: list[float] = field(default_factory=list, repr=False)


@dataclass
class GemmBench:
    device: dict
    dtype: str
    rows: list[GemmRow]
    ceilings: dict = field(default_factory=dict)  # instruction -> TFLOP/s measured in this run (bench.peaks)
    layout: str = "nn"  # A and B: row-major (n) or transposed views (t)

    def as_dict(self) -> dict:
        return asdict(self)


def _torch():
    try:
        import torch
    except ImportError:
        raise AsyncCopyError("bench gemm needs PyTorch: cuBLAS and the Triton reference are reached through it") from None
    return torch


def _operand(torch, rows: int, cols: int, transposed: bool, tdt):
    """A random [rows, cols] operand: row-major, or a transposed view of a row-major [cols, rows] array."""
    return torch.randn(cols, rows, device="cuda").to(tdt).T if transposed else torch.randn(rows, cols, device="cuda").to(tdt)


class _Operands:
    """Rotating sets of A [m, k], B [k, n], C [m, n] on one device, and the float64 product of set 0. ``layout``
    (asynccopy.tuning.LAYOUTS): each of A and B row-major ("n") or a transposed view ("t": x @ w.T is "nt")."""

    def __init__(self, torch, m, n, k, dtype, l2_bytes, layout: str = "nn"):
        tdt = getattr(torch, dtype)
        self.m, self.n = m, n
        per_set = tdt.itemsize * (m * k + k * n + m * n)
        sets = rotation_sets(per_set, l2_bytes, 256)
        self.a = [_operand(torch, m, k, layout[0] == "t", tdt) for _ in range(sets)]
        self.b = [_operand(torch, k, n, layout[1] == "t", tdt) for _ in range(sets)]
        self.c = [torch.empty(m, n, device="cuda", dtype=tdt) for _ in range(sets)]
        self.ref = self.a[0].double() @ self.b[0].double()
        self.sets = sets

    def error(self) -> float:
        return ((self.c[0].double() - self.ref).norm() / self.ref.norm().clamp_min(1e-30)).item()


def config_label(cfg) -> str:
    """What a kernel row ran: its tile, its split of k, whether it ran as cluster pairs sharing B or splitting each
    tile's k, and whether its last wave was shared out (stream-K)."""
    return (f"tile {cfg.tile[0]}x{cfg.tile[1]}" + (f" x{cfg.splits}" if cfg.splits > 1 else "")
            + (" pairs" if matmul.cluster_of(cfg)[1] == "b" else "") + (" pairs split k" if cfg.pair_k else "")
            + (" stream-K" if cfg.stream_k else ""))


def _implementations(torch, ops: _Operands, dtype: str, kernels, stages, stream, facts, tuned=None):
    """(impl, config, stage count, run(i)) of every implementation and stage count on one shape; with
    ``tuned`` (a gemm_tune.TuneResult), asynccopy.gemm on the record it just kept as well."""
    out = [("cuBLAS", "torch.matmul" + (", TF32 off" if dtype == "float32" else ""), None,
            lambda i: torch.matmul(ops.a[i], ops.b[i], out=ops.c[i]))]
    if tuned is not None:
        t = tuned.best
        out.append(("tuned", f"{t.kernel} {t.tile[0]}x{t.tile[1]}" + (f" x{t.splits}" if t.splits > 1 else "")
                    + (" pairs" if t.paired else "") + (" stream-K" if t.stream_k else ""),
                    t.stages, lambda i: matmul.gemm(ops.a[i], ops.b[i], out=ops.c[i], stream=stream)))
    from . import triton_gemm

    if dtype != "float32" and triton_gemm.available() is None:
        bm, bn, bk, w = triton_gemm.CONFIG
        for st in stages or triton_gemm.STAGES:
            launchers = {}

            def run(i, st=st, launchers=launchers):
                if i not in launchers:
                    launchers[i] = triton_gemm.launcher(ops.a[i], ops.b[i], ops.c[i], stages=st)
                launchers[i]()

            out.append(("Triton", f"{bm}x{bn}x{bk} w{w}", st, run))
    size = matmul.itemsize(dtype)
    a0, b0 = matmul.matrix(ops.a[0], "a", stream=stream), matmul.matrix(ops.b[0], "b", stream=stream)
    for name in kernels:
        rec = matmul.KERNELS[name]
        tile = matmul.configure(a0, b0, dtype, facts, kernel=name).tile
        fit = min(rec.max_stages(tile, facts.smem_per_block_optin, size), rec.max_stages_default)
        for st in stages or (None,):
            if st is not None and st > fit:
                continue
            out.append((name, config_label(matmul.configure(a0, b0, dtype, facts, kernel=name, stages=st)), st,
                        lambda i, name=name, st=st: matmul.gemm(ops.a[i], ops.b[i], out=ops.c[i], kernel=name,
                                                                stages=st, stream=stream)))
    return out


SETTLE_S = 0.5  # each shape's reference run this long before the rounds (harness.settle: the clock's fall)


def run(shapes=DEFAULT_SHAPES, *, dtype: str = "bfloat16", kernels=None, stages=None, reps: int = 20,
        warmup: int = 5, tuning: bool = False, rounds: int = 3, layout: str = "nn",
        progress=default_progress) -> GemmBench:
    """Check and time every implementation on every shape; ``stages``: a sweep of stage counts for the
    implementations that take one (None: each kernel's default; Triton at each of triton_gemm.STAGES);
    ``tuning``: asynccopy.gemm.tune each shape first (its record kept) and time gemm on the record too;
    ``layout``: A and B row-major ("nn", the default) or transposed views ("nt" is x @ w.T)."""
    if dtype not in matmul.DTYPES:
        raise ArgumentError(f"dtype must be one of {', '.join(matmul.DTYPES)}, got {dtype!r}")
    if layout not in LAYOUTS:
        raise ArgumentError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    kernels = kernels_for(dtype, kernels)
    torch = _torch()
    facts = device.require((8, 0), "bench gemm")
    from cuda.core import Device

    s = Device(facts.device_id).create_stream()
    torch_stream = torch.cuda.ExternalStream(int(s.handle))
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS fp32 on the CUDA cores, as simt
    rows: list[GemmRow] = []
    from . import peaks

    ceilings = peaks.measure(facts, s)
    progress("instruction ceilings here: " + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in ceilings.items()))
    try:
        with torch.cuda.stream(torch_stream):
            for m, n, k in shapes:
                tuned = None
                if tuning:
                    tuned = tune(m, n, k, dtype, layout=layout, kernels=kernels, reps=max(3, reps // 2),
                                 progress=progress)
                ops = _Operands(torch, m, n, k, dtype, facts.l2_bytes, layout)
                impls = _implementations(torch, ops, dtype, kernels, stages, s, facts, tuned)
                cases = [_case(f"{m}x{n}x{k} {impl}" + (f" s{st}" if st else ""), impl, config, st, fn, ops, dtype, s)
                         for impl, config, st, fn in impls]
                for t in sweep(cases, s, warmup=warmup, reps=reps, rounds=rounds, progress=progress, settle_s=SETTLE_S):
                    impl, config, st, err = t.case.tag
                    tflops = 2 * m * n * k / (t.ms * 1e-3) / 1e12
                    peak = facts.tensor_tflops if dtype != "float32" else facts.fp32_tflops
                    instr = matmul.KERNELS[impl].ceiling if impl in matmul.KERNELS else None
                    rows.append(GemmRow(m, n, k, impl, config, st, t.ms, tflops, rel_error=err[0],
                                        samples_ms=t.samples, pct_peak=100 * tflops / peak if peak else None,
                                        pct_ceiling=100 * tflops / ceilings[instr] if instr in ceilings else None))
                del ops
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    _relative_to_cublas(rows)
    return GemmBench(facts.as_dict(), dtype, rows, ceilings, layout)


def _case(label, impl, config, stages, fn, ops, dtype, stream) -> Case:
    err = [0.0]

    def prepare() -> None:
        try:
            ops.c[0].fill_(float("nan"))
            fn(0)
            stream.sync()
        except ArgumentError as exc:
            raise Skip(str(exc)) from None
        except Exception as exc:  # Triton's OutOfResources for a stage count that does not fit, and the like
            if impl != "Triton":
                raise
            raise Skip(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        err[0] = ops.error()
        if not err[0] < TOLERANCE[dtype]:  # NaN (an output never written) fails too
            raise AsyncCopyError(f"{label}: relative error {err[0]:.2e} against float64 (at most {TOLERANCE[dtype]})")

    return Case(label, (stages,), prepare, lambda p, i: fn(i % ops.sets), tag=(impl, config, stages, err))


def _relative_to_cublas(rows: list[GemmRow]) -> None:
    best = {(r.m, r.n, r.k): r.ms for r in rows if r.impl == "cuBLAS"}
    for r in rows:
        if (r.m, r.n, r.k) in best:
            r.pct_cublas = 100 * best[(r.m, r.n, r.k)] / r.ms


def summary(result: GemmBench) -> list[str]:
    """Per shape: each implementation's best TFLOP/s and its share of cuBLAS."""
    lines = []
    shapes = sorted({(r.m, r.n, r.k) for r in result.rows}, key=lambda s: s[0] * s[1] * s[2])
    for shape in shapes:
        at = [r for r in result.rows if (r.m, r.n, r.k) == shape]
        best = {}
        for r in at:
            if r.impl not in best or r.ms < best[r.impl].ms:
                best[r.impl] = r
        parts = [f"{impl} {r.tflops:.0f}" + (f" ({r.pct_cublas:.0f}%)" if r.pct_cublas and impl != "cuBLAS" else "")
                 + (f" s{r.stages}" if r.stages else "") for impl, r in best.items()]
        lines.append(f"{shape[0]}x{shape[1]}x{shape[2]}: " + ", ".join(parts) + " TFLOP/s")
    if result.ceilings:
        lines.append("instruction ceilings measured in this run: "
                     + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in result.ceilings.items()))
    return lines


def plot(result: GemmBench, path: str) -> str:
    """TFLOP/s against the stage count, a panel per shape, a line per implementation (cuBLAS: a level)."""
    from ..plotting import finish_panels, panel_grid, pyplot

    plt = pyplot()
    shapes = sorted({(r.m, r.n, r.k) for r in result.rows}, key=lambda s: s[0] * s[1] * s[2])
    fig, axes = panel_grid(plt, len(shapes), 3)
    for ax, shape in zip(axes.flat, shapes):
        at = [r for r in result.rows if (r.m, r.n, r.k) == shape]
        for impl in dict.fromkeys(r.impl for r in at):
            pts = sorted((r.stages, r.tflops) for r in at if r.impl == impl and r.stages is not None)
            if pts:
                ax.plot(*zip(*pts), "-o", ms=3, label=impl)
            else:
                for r in at:
                    if r.impl == impl:
                        ax.axhline(r.tflops, ls="--", color="gray", label=f"{impl} {r.tflops:.0f}")
        ax.set_title(f"{shape[0]}x{shape[1]}x{shape[2]}", fontsize=9)
    return finish_panels(plt, fig, axes, len(shapes), f"GEMM {result.dtype}, {result.device.get('name', '')}", path,
                         xlabel="stages")


# ---------------------------------------------------------------------------------------------
# The planner's stage counts against the sweep


@dataclass
class PlanRow:
    m: int
    n: int
    k: int
    kernel: str
    tile: str
    k_block_ns: float  # the compute per k-block the model is given: the fastest measured stage count's pace
    planned: int
    best_stages: int
    best_ms: float
    measured_at_planned_ms: float | None
    ratio: float | None  # measured at the planned stage count / best


def plan_check(result: GemmBench, memory="cached") -> list[PlanRow]:
    """For every (shape, kernel) swept over two or more stage counts: the pipeline model's stage count
    (asynccopy.gemm_kernels.plan_stages, given the compute per k-block at the fastest measured stage
    count's pace) against the best measured one."""
    from .. import gemm_kernels
    from ..device import DeviceFacts

    facts = DeviceFacts.from_dict(result.device)
    groups: dict[tuple, dict[int, GemmRow]] = {}
    for r in result.rows:
        if r.impl in matmul.KERNELS and r.stages is not None:
            groups.setdefault((r.m, r.n, r.k, r.impl, r.config), {})[r.stages] = r
    out = []
    for (m, n, k, name, config), by_stages in groups.items():
        if len(by_stages) < 2:
            continue
        rec = matmul.KERNELS[name]
        ran = re.match(r"tile (\d+)x(\d+)", config or "")  # the tile the rows ran (config_label), else the default
        tile = (int(ran[1]), int(ran[2])) if ran else rec.default_tile(m, n, facts.sm_count)
        best = min(by_stages, key=lambda s: by_stages[s].ms)
        per_sm = gemm_kernels.k_blocks_per_sm(rec, tile, m, n, k, facts.sm_count,
                                              stream_k="stream-K" in config if ran else None)
        k_block_ns = by_stages[best].ms * 1e6 / per_sm
        p = gemm_kernels.plan_stages(rec, tile, result.dtype, facts, k_block_ns=k_block_ns, memory=memory)
        at = by_stages.get(p.recommended)
        out.append(PlanRow(m, n, k, name, config, k_block_ns, p.recommended, best, by_stages[best].ms,
                           at.ms if at else None, at.ms / by_stages[best].ms if at else None))
    return out
