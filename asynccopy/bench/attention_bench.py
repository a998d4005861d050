"""`asynccopy bench attention`: asynccopy's attention kernels against PyTorch's SDPA backends (flash, cuDNN,
memory-efficient), same inputs, same run.

Per problem (a shape, causal or not): fresh standard-normal q, k, v in the dtype and memory layout asked for
(``bhsd``: contiguous (batch, heads, seq, head_dim); ``bshd``: (batch, seq, heads, head_dim) memory viewed through
``transpose(1, 2)``, for asynccopy and SDPA alike), in as many sets as make the bytes between two uses of one set
exceed 3 x L2. Each implementation's output is checked once against float64 on a slice (the last batch, the
first and last query heads, the first and last attention_cases.REF_ROWS queries, every key), its max abs error
recorded; then it is timed (CUDA events, median after warm-up: harness.sweep). The asynccopy kernels: every record of
attention.KERNELS that can take the problem here (attention.why_not), at each stage count attention.configure
accepts. Each SDPA backend runs under ``torch.nn.attention.sdpa_kernel(backend)``, grouped-query problems with
``enable_gqa=True`` (a backend that refuses it: on k and v repeated to the query heads beforehand, as its
config says); one this PyTorch lacks, or that refuses the problem, is skipped with a note.

FLOPs: 2 x 2 x head_dim per (query, key) pair a query sees (the two products), per batch and query head:
4 B H D x pairs. Without a mask pairs = q_len x k_len. With ``causal`` (top-left, PyTorch's is_causal: query i
sees keys j <= i) pairs is counted exactly, sum over i < q_len of min(i + 1, k_len), not halved: for q_len =
k_len = S that is S (S + 1) / 2, (S + 1) / S times the usual 4 B H S^2 D / 2 (1.001 at S = 1024, 1.00006 at
16384: figures quoted with the half rule compare within 0.1%); for q_len != k_len it is the work there is, where
half of q_len x k_len is not (one query: one pair). Masked entries a kernel computes on a diagonal tile are not
counted. TFLOP/s = FLOPs / median time; % best = the fastest SDPA backend's time on the same problem in the same
run / the row's time (the FLOP count cancels out).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from .. import device
from ..attention_kernels import VARIANT_HEAD_DIMS, VARIANTS
from ..errors import ArgumentError, check_int
from ..sdpa import DTYPES, KERNELS, Problem, configure, why_not
from .attention_cases import BACKENDS, TOLERANCE, Inputs, backend_case, backends, is_backend, kernel_case, load_torch
from .harness import default_progress, sweep

__all__ = ["BACKENDS", "TOLERANCE", "AttentionBench", "AttentionRow", "configs_for", "flops", "kernels_for", "pairs",
           "parse_shapes", "plot", "run", "summary"]

Shape = tuple[int, int, int, int, int, int]  # (batch, heads, kv_heads, q_len, k_len, head_dim)


def _square(b, h, s, d, hkv=None) -> Shape:
    return (b, h, hkv or h, s, s, d)


DEFAULT_SHAPES: tuple[Shape, ...] = (
    *(_square(4, 16, s, d) for s in (1024, 2048, 4096, 8192, 16384) for d in (64, 128)),
    _square(4, 32, 8192, 128, hkv=8),  # grouped-query: 32 query heads over 8 key/value heads
    _square(4, 16, 8191, 128), _square(4, 16, 3000, 64),  # sequences no tile divides
)
QUICK_SHAPES: tuple[Shape, ...] = (_square(4, 16, 4096, 64), _square(4, 16, 4096, 128),
                                   _square(4, 32, 4096, 128, hkv=8), _square(4, 16, 3000, 64))
SHAPES_HELP = ("comma-separated shapes, each B:H:S:D (batch, heads, sequence, head dim) or B:H:HKV:LQ:LK:D (key/value "
               "heads dividing H, query and key lengths apart), e.g. 4:16:8192:128,4:32:8:8192:8192:128; each runs "
               "causal and not (see --causal)")
LAYOUTS = ("bhsd", "bshd")
_LIMITS = (("batch", 65535), ("heads", 65535), ("kv_heads", 65535), ("q_len", 1 << 24), ("k_len", 1 << 24),
           ("head_dim", 1024))


@dataclass
class AttentionRow:
    batch: int
    heads: int
    kv_heads: int
    q_len: int
    k_len: int
    head_dim: int
    causal: bool
    impl: str  # an asynccopy kernel's name (attention.KERNELS), or an SDPA backend: sdpa-flash, sdpa-cudnn, ...
    stages: int | None  # the K/V pipeline depth of an asynccopy kernel (None: a backend)
    ms: float
    tflops: float
    pct_best: float | None = None  # of the fastest SDPA backend on the same problem
    max_abs_error: float = 0.0  # against float64 on the checked slice
    config: str = ""
    samples_ms: list[float] = field(default_factory=list, repr=False)


@dataclass
class AttentionBench:
    device: dict
    dtype: str
    layout: str
    rows: list[AttentionRow]
    notes: list[dict] = field(default_factory=list)  # what was skipped, and why: {problem ("": all), what, why}

    def as_dict(self) -> dict:
        return asdict(self)


COLUMNS = [("batch", "B", "d"), ("heads", "H", "d"), ("kv_heads", "HKV", "d"), ("q_len", "LQ", "d"), ("k_len", "LK", "d"),
           ("head_dim", "D", "d"), ("causal", "causal", ""), ("impl", "impl", ""), ("stages", "stages", "d"),
           ("ms", "ms", ".3f"), ("tflops", "TFLOP/s", ".0f"), ("pct_best", "% best", ".0f"),
           ("max_abs_error", "max err", ".1e"), ("config", "config", "")]


# ---------------------------------------------------------------------------------------------
# Arithmetic and arguments (no GPU)


def pairs(q_len: int, k_len: int, causal: bool) -> int:
    """(query, key) pairs the problem computes: all, or with the top-left causal mask those with j <= i."""
    if not causal:
        return q_len * k_len
    n = min(q_len, k_len)
    return n * (n + 1) // 2 + (q_len - n) * k_len  # rows i < k_len see i + 1 keys, the rest see all k_len


def flops(shape: Shape, causal: bool) -> int:
    b, h, _, lq, lk, d = shape
    return 4 * b * h * d * pairs(lq, lk, causal)


def shape_label(shape: Shape) -> str:
    """The shortest --shapes form of a shape."""
    b, h, hkv, lq, lk, d = shape
    return f"{b}:{h}:{lq}:{d}" if h == hkv and lq == lk else ":".join(map(str, shape))


def problem_key(r: AttentionRow) -> tuple:
    return (r.batch, r.heads, r.kv_heads, r.q_len, r.k_len, r.head_dim, r.causal)


def problem_label(key: tuple) -> str:
    return shape_label(key[:6]) + (" causal" if key[6] else "")


def check_shape(shape) -> Shape:
    shape = tuple(shape)
    if len(shape) != 6:
        raise ArgumentError(f"a shape is (batch, heads, kv_heads, q_len, k_len, head_dim), got {shape!r}")
    for (name, hi), x in zip(_LIMITS, shape):
        check_int(x, f"a shape's {name}", 1, hi)
    if shape[1] % shape[2]:
        raise ArgumentError(f"a shape's kv_heads must divide its heads (grouped-query attention), got {shape[2]} "
                            f"and {shape[1]} in {':'.join(map(str, shape))}")
    return shape


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """--shapes: comma-separated B:H:S:D or B:H:HKV:LQ:LK:D (SHAPES_HELP)."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts:
        raise ArgumentError("--shapes names no shape (each B:H:S:D or B:H:HKV:LQ:LK:D)")
    out = []
    for part in parts:
        try:
            dims = [int(t) for t in part.split(":")]
        except ValueError:
            dims = []
        if len(dims) not in (4, 6):
            raise ArgumentError(f"an attention shape is B:H:S:D or B:H:HKV:LQ:LK:D, got {part!r}")
        out.append(check_shape(_square(dims[0], dims[1], dims[2], dims[3]) if len(dims) == 4 else dims))
    return tuple(out)


def kernels_for(names=None) -> tuple[str, ...]:
    """The asynccopy kernels asked for (None: every record of attention.KERNELS), each known."""
    if names is None:
        return tuple(KERNELS)
    if not names:
        raise ArgumentError("--kernels names no kernel")
    for name in names:
        if name not in KERNELS:
            raise ArgumentError(f"unknown attention kernel {name!r}; choose one of: {', '.join(KERNELS)}")
    return tuple(dict.fromkeys(names))


def check_stages(stages) -> None:
    """Each stage count of a sweep is one at least one kernel takes (those a kernel does not are skipped)."""
    if stages is not None and not stages:
        raise ArgumentError("--stages needs at least one stage count")
    top = max(rec.max_stages for rec in KERNELS.values())
    for st in stages or ():
        check_int(st, "each of --stages", 1, top)


def variants_for(names) -> tuple[str, ...]:
    """The compile-time variants asked for (attention_kernels.VARIANTS), each known to some kernel."""
    known = sorted({v for by in VARIANTS.values() for v in by})
    for name in names or ():
        if name not in known:
            raise ArgumentError(f"unknown variant {name!r}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(names or ()))


def configs_for(p: Problem, causal: bool, kernels, stages, facts, variants=()) -> tuple[list, list[str]]:
    """The (label, AttentionConfig) pairs to run on this problem here (each stage count of the sweep, or the
    kernel's default; with ``variants``, each kernel's compile-time variants of those names too, labelled
    KERNEL+VARIANT), and a (what, why) note for each kernel or stage count that cannot run."""
    out, notes = [], []
    for name, cfg in _default_configs(p, causal, kernels, stages, facts, notes):
        out.append((name, cfg))
        for v in variants:
            defines = VARIANTS.get(name, {}).get(v)
            if defines is not None and p.head_dim not in VARIANT_HEAD_DIMS.get(v, (p.head_dim,)):
                notes.append((f"{name}+{v}", f"built at head dim {', '.join(map(str, VARIANT_HEAD_DIMS[v]))} only"))
            elif defines is not None:
                # on top of the configuration's own knobs (a deep pipeline's narrow key tile, O's buffer where the
                # variant's build has room for it)
                out.append((f"{name}+{v}", cfg.with_variant(defines, facts.smem_per_block_optin)))
    return out, notes


def _default_configs(p: Problem, causal: bool, kernels, stages, facts, notes) -> list:
    out = []
    for name in kernels_for(kernels):
        why = why_not(KERNELS[name], p, facts)
        if why is not None:
            notes.append((name, why))
            continue
        seen = set()
        for st in stages or (None,):
            try:
                cfg = configure(p, facts, kernel=name, stages=st, causal=causal)
            except ArgumentError as exc:
                notes.append((f"{name} s{st}", str(exc)))
                continue
            if cfg.stages not in seen:
                seen.add(cfg.stages)
                out.append((name, cfg))
    return out


# ---------------------------------------------------------------------------------------------
# The run


SETTLE_S = 0.5  # each problem's first backend run this long before the rounds (harness.settle: the clock's fall)


def run(shapes=DEFAULT_SHAPES, *, causal=(False, True), dtype: str = "bfloat16", layout: str = "bhsd", kernels=None,
        stages=None, reps: int = 20, warmup: int = 5, variants=(), rounds: int = 3,
        progress=default_progress) -> AttentionBench:
    """Check and time every implementation on every (shape, causal) problem; ``stages``: the K/V pipeline
    depths to sweep for each asynccopy kernel (None: each kernel's default for the head dim)."""
    if dtype not in DTYPES:
        raise ArgumentError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if layout not in LAYOUTS:
        raise ArgumentError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    kernels = kernels_for(kernels)
    variants = variants_for(variants)
    check_stages(stages)
    shapes = [check_shape(s) for s in shapes]
    facts = device.require((8, 0), "bench attention")
    torch = load_torch()
    from cuda.core import Device

    s = Device(facts.device_id).create_stream()
    impls, missing = backends(torch)
    notes = [{"problem": "", "what": what, "why": why} for what, why in missing]
    problems = [(shape, bool(c)) for shape in shapes for c in causal]
    rows: list[AttentionRow] = []
    with torch.cuda.device(facts.device_id), torch.cuda.stream(torch.cuda.ExternalStream(int(s.handle))):
        for n, (shape, c) in enumerate(problems, 1):
            rows += _problem(torch, shape, c, dtype, layout, kernels, stages, impls, s, facts, notes,
                             reps=reps, warmup=warmup, rounds=rounds, progress=progress,
                             head=f"problem {n}/{len(problems)}",
                             variants=variants)
    _relative_to_best(rows)
    return AttentionBench(facts.as_dict(), dtype, layout, rows, notes)


def _problem(torch, shape, causal, dtype, layout, kernels, stages, sdpa, stream, facts, notes, *, reps, warmup,
             progress, head, variants=(), rounds=1) -> list[AttentionRow]:
    label = shape_label(shape) + (" causal" if causal else "")
    ins = Inputs(torch, shape, causal, dtype, layout, facts.l2_bytes)
    progress(f"{head}: {label}, {dtype} {layout}, {ins.sets} rotating input set(s)")
    configs, why = configs_for(Problem(*shape, dtype), causal, kernels, stages, facts, variants)

    def note(what, why):
        notes.append({"problem": label, "what": what, "why": why})

    for what, text in why:
        progress(f"{label} {what}: skipped ({text})")
        note(what, text)
    cases = [backend_case(torch, ins, impl, b, causal, stream, label, note) for impl, b in sdpa]
    cases += [kernel_case(ins, name, cfg, causal, stream, label, note) for name, cfg in configs]
    work = flops(shape, causal)
    rows = []
    for t in sweep(cases, stream, warmup=warmup, reps=reps, rounds=rounds, progress=progress, settle_s=SETTLE_S):
        impl, st, state = t.case.tag
        rows.append(AttentionRow(*shape, causal, impl, st, t.ms, work / (t.ms * 1e-3) / 1e12,
                                 max_abs_error=state["err"], config=state["config"], samples_ms=t.samples))
    return rows


def _relative_to_best(rows: list[AttentionRow]) -> None:
    best: dict[tuple, float] = {}
    for r in rows:
        if is_backend(r.impl):
            best[problem_key(r)] = min(best.get(problem_key(r), math.inf), r.ms)
    for r in rows:
        r.pct_best = 100 * best[problem_key(r)] / r.ms if problem_key(r) in best else None


# ---------------------------------------------------------------------------------------------
# Reports


def _best_of_each(rows: list[AttentionRow]) -> dict[tuple, dict[str, AttentionRow]]:
    out: dict[tuple, dict[str, AttentionRow]] = {}
    for r in rows:
        at = out.setdefault(problem_key(r), {})
        if r.impl not in at or r.ms < at[r.impl].ms:
            at[r.impl] = r
    return out


def summary(result: AttentionBench) -> list[str]:
    """Per problem: each implementation's best TFLOP/s (backends first, fastest first) and its % of the best
    backend; then the range of asynccopy's best over the problems, and the notes."""
    lines, ours = [], []
    for key, best in _best_of_each(result.rows).items():
        order = sorted(best.values(), key=lambda r: (not is_backend(r.impl), r.ms))
        parts = [f"{r.impl} {r.tflops:.0f}" + (f" ({r.pct_best:.0f}%)" if r.pct_best is not None else "")
                 + (f" s{r.stages}" if r.stages else "") for r in order]
        lines.append(f"{problem_label(key)}: " + ", ".join(parts) + " TFLOP/s")
        mine = [r.pct_best for r in order if not is_backend(r.impl) and r.pct_best is not None]
        if mine:
            ours.append(max(mine))
    if ours:
        lines.append(f"asynccopy's best kernel against the best SDPA backend: {min(ours):.0f}% to {max(ours):.0f}% "
                     f"(median {statistics.median(ours):.0f}%) over {len(ours)} problem(s)")
    return lines + _skipped(result.notes)


def _skipped(notes: list[dict]) -> list[str]:
    """A line per (what, why) skipped, with the problems it was skipped on."""
    where: dict[tuple[str, str], list[str]] = {}
    for n in notes:
        where.setdefault((n["what"], n["why"]), []).append(n["problem"])
    lines = []
    for (what, why), problems in where.items():
        named = [p for p in problems if p]
        on = "" if not named else f" on {', '.join(named)}" if len(named) <= 3 else \
            f" on {len(named)} problems ({', '.join(named[:2])}, ...)"
        lines.append(f"skipped {what}{on}: {why}")
    return lines


_LEVEL_STYLES = {"sdpa-cudnn": "-", "sdpa-flash": "--", "sdpa-efficient": ":"}


def plot(result: AttentionBench, path: str) -> str:
    """TFLOP/s against the stage count, a panel per problem, a line per asynccopy kernel (each backend: a level)."""
    from ..plotting import finish_panels, panel_grid, pyplot

    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    problems = _best_of_each(result.rows)
    fig, axes = panel_grid(plt, len(problems), 4)
    for ax, key in zip(axes.flat, problems):
        at = [r for r in result.rows if problem_key(r) == key]
        for impl in dict.fromkeys(r.impl for r in at):
            mine = [r for r in at if r.impl == impl]
            if is_backend(impl):
                ax.axhline(mine[0].tflops, ls=_LEVEL_STYLES.get(impl, "--"), color="gray", label=f"{impl} {mine[0].tflops:.0f}")
            else:
                ax.plot(*zip(*sorted((r.stages, r.tflops) for r in mine)), "-o", ms=3, label=impl)
        ax.set_title(problem_label(key), fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return finish_panels(plt, fig, axes, len(problems),
                         f"attention {result.dtype} {result.layout}, {result.device.get('name', '')}", path,
                         xlabel="K/V stages")
