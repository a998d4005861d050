"""`asynccopy bench gemm | attention`: the suites of the products the pipelines feed (asynccopy.cli.bench
builds the `bench` command; these two suites' flags and commands live here)."""

from __future__ import annotations

from ..bench import report
from ..errors import AsyncCopyError, check_int
from ..tuning import LAYOUTS
from . import common

GEMM_PLAN_STAGES = (1, 2, 3, 4, 5, 6, 7, 8)
ATTENTION_PLAN_STAGES = (1, 2, 3, 4, 5, 6)  # what the kernels fit: wgmma 6 at head dim 64, 3 at 128; mma 4


def _shapes(text: str) -> tuple[tuple[int, int, int], ...]:
    out = []
    for part in common.names(text):
        dims = common.shape(part)
        if len(dims) != 3:
            raise common.argparse.ArgumentTypeError(f"a GEMM shape is MxNxK, got {part!r}")
        out.append(dims)
    return tuple(out)


ROUNDS_HELP = ("time every implementation of a problem in turn, this many rounds (the reps split over them), so "
               "that a clock drifting as the GPU warms weighs on each alike (default 3; 1: each in one go)")


def add_gemm(suites) -> None:
    from ..bench import gemm_bench

    p = suites.add_parser("gemm", help="GEMM kernels against cuBLAS and a Triton matmul (PyTorch needed)")
    p.add_argument("--shapes", type=_shapes, default=gemm_bench.DEFAULT_SHAPES, help="comma-separated MxNxK")
    p.add_argument("--dtype", default="bfloat16",
                   help="bfloat16, float16, or float32 (simt against cuBLAS with TF32 off)")
    p.add_argument("--kernels", type=common.names, default=None, help="asynccopy GEMM kernels (default: all)")
    p.add_argument("--layout", choices=LAYOUTS, default="nn", help="A and B row-major (n) or transposed views (t): "
                   "nn is a @ b, nt is x @ w.T (default nn)")
    p.add_argument("--stages", type=common.ints, default=None, help="sweep these stage counts")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3, help=ROUNDS_HELP)
    p.add_argument("--png", default=None, help="TFLOP/s against stages, a panel per shape")
    p.add_argument("--tune", action="store_true",
                   help="tune each shape first (asynccopy.gemm.tune: the record is kept in the cache directory)")
    p.add_argument("--plan", action="store_true",
                   help="check the pipeline model's stage count against the stage sweep (default sweep: 1-8)")
    common.add_output_flags(p)
    p.set_defaults(fn=cmd_gemm)


def add_attention(suites) -> None:
    from ..bench import attention_bench as ab
    from ..sdpa import KERNELS

    p = suites.add_parser("attention", help="attention kernels against PyTorch's SDPA backends (PyTorch needed)")
    p.add_argument("--shapes", default=None, help=ab.SHAPES_HELP + " (default: "
                   + ", ".join(ab.shape_label(x) for x in ab.DEFAULT_SHAPES) + ")")
    p.add_argument("--quick", action="store_true", help=f"{len(ab.QUICK_SHAPES)} shapes at sequence 4096 and 3000, and "
                   "10 reps")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both", help="run each shape causal, not, or both")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 or float16")
    p.add_argument("--layout", choices=ab.LAYOUTS, default="bhsd", help="memory of q, k, v, out: (batch, heads, seq, "
                   "head_dim), or (batch, seq, heads, head_dim) passed as transpose(1, 2) views to asynccopy and SDPA")
    p.add_argument("--kernels", type=common.names, default=None,
                   help=f"comma-separated subset of: {', '.join(KERNELS)} (default: each that can take the shape here)")
    p.add_argument("--stages", type=common.ints, default=None,
                   help="sweep the K/V pipeline depth of each asynccopy kernel (counts that do not fit are skipped)")
    p.add_argument("--reps", type=int, default=None, help="timed runs of each (default 20; 10 with --quick)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3, help=ROUNDS_HELP)
    p.add_argument("--png", default=None, help="TFLOP/s against stages, a panel per shape, causal or not")
    common.add_output_flags(p)
    p.add_argument("--plan", action="store_true",
                   help="check the pipeline model's K/V stage count against the stage sweep (default sweep: "
                        f"{','.join(map(str, ATTENTION_PLAN_STAGES))})")
    p.add_argument("--variants", type=common.names, default=None,
                   help="also time these compile-time variants of each kernel that has them, beside its default build "
                        "(wgmma: serial, overlap, pingpong)")
    p.set_defaults(fn=cmd_attention)


def cmd_gemm(args) -> int:
    from .. import matmul
    from ..bench import gemm_bench

    check_int(args.reps, "--reps", 1, 100_000)
    check_int(args.warmup, "--warmup", 0, 100_000)
    check_int(args.rounds, "--rounds", 1, 1000)
    if not args.shapes:
        raise AsyncCopyError("--shapes needs at least one MxNxK")
    for dims in args.shapes:
        for d in dims:
            check_int(d, "each GEMM dimension", 1, 1 << 20)
    if args.dtype not in matmul.DTYPES:
        raise AsyncCopyError(f"--dtype must be one of {', '.join(matmul.DTYPES)}, got {args.dtype!r}")
    gemm_bench.kernels_for(args.dtype, args.kernels)  # names a kernel that is unknown or takes another dtype
    for st in args.stages or ():
        check_int(st, "each of --stages", 1, 32)
    stages = _swept(args, GEMM_PLAN_STAGES)
    result = gemm_bench.run(args.shapes, dtype=args.dtype, kernels=args.kernels, stages=stages, reps=args.reps,
                            warmup=args.warmup, tuning=args.tune, rounds=args.rounds, layout=args.layout)
    print(report.table(result.rows, [("m", "m", "d"), ("n", "n", "d"), ("k", "k", "d"), ("impl", "impl", ""),
                                     ("config", "config", ""), ("stages", "stages", "d"), ("ms", "ms", ".3f"),
                                     ("tflops", "TFLOP/s", ".0f"), ("pct_cublas", "% cuBLAS", ".0f"),
                                     ("pct_peak", "% peak", ".0f"), ("pct_ceiling", "% instr", ".0f"),
                                     ("rel_error", "rel err", ".1e")]))
    plans = gemm_bench.plan_check(result) if args.plan else None
    _finish(args, result, gemm_bench.summary(result), gemm_bench.plot, plans,
            "the pipeline model's stage count (compute per k-block at the fastest measured pace; loads at the "
            "unloaded latency, from L2) against the sweep:",
            [("m", "m", "d"), ("n", "n", "d"), ("k", "k", "d"), ("kernel", "kernel", ""), ("tile", "tile", ""),
             ("k_block_ns", "ns/k-block", ".0f")])
    return 0


def cmd_attention(args) -> int:
    from ..bench import attention_bench as ab
    from ..sdpa import DTYPES

    if args.quick and args.shapes is not None:
        raise AsyncCopyError("--quick runs its own shapes: give --quick or --shapes, not both")
    shapes = ab.parse_shapes(args.shapes) if args.shapes is not None else ab.QUICK_SHAPES if args.quick else \
        ab.DEFAULT_SHAPES
    reps = check_int(args.reps, "--reps", 1, 100_000) if args.reps is not None else 10 if args.quick else 20
    check_int(args.warmup, "--warmup", 0, 100_000)
    check_int(args.rounds, "--rounds", 1, 1000)
    if args.dtype not in DTYPES:
        raise AsyncCopyError(f"--dtype must be one of {', '.join(DTYPES)}, got {args.dtype!r}")
    ab.kernels_for(args.kernels)
    ab.variants_for(args.variants)
    ab.check_stages(args.stages)
    stages = _swept(args, ATTENTION_PLAN_STAGES)
    result = ab.run(shapes, causal={"both": (False, True), "yes": (True,), "no": (False,)}[args.causal],
                    dtype=args.dtype, layout=args.layout, kernels=args.kernels, stages=stages, reps=reps,
                    warmup=args.warmup, variants=args.variants or (), rounds=args.rounds)
    print(report.table(result.rows, ab.COLUMNS))
    from ..bench import attention_plan

    plans = attention_plan.plan_check(result) if args.plan else None
    _finish(args, result, ab.summary(result), ab.plot, plans,
            "the pipeline model's K/V stage count (compute per key tile at the fastest measured pace) against the sweep:",
            [("problem", "problem", ""), ("kernel", "kernel", ""), ("tile_ns", "ns/tile", ".0f")])
    return 0


def _swept(args, plan_default) -> tuple[int, ...] | None:
    """The stage counts to sweep: --stages, or with --plan (which checks the model against a sweep) the
    suite's default sweep; and the output flags checked, all before any GPU is looked for."""
    stages = args.stages
    if args.plan:
        stages = stages or plan_default
        if len(set(stages)) < 2:
            raise AsyncCopyError("--plan checks the model's stage count against a sweep: give --stages two or more")
    if args.png:
        common.check_png(args.png)
    common.check_outputs(args)
    return stages


def _finish(args, result, summary_lines, plot, plans, plan_title: str, plan_columns) -> None:
    """A suite's summary, its plot, the model's stage counts against the sweep (with --plan), its files."""
    print()
    for line in summary_lines:
        print(line)
    if args.png:
        print(f"wrote {plot(result, args.png)}")
    payload = result.as_dict()
    if plans is not None:
        print("\n" + plan_title)
        print(report.table(plans, plan_columns + [("planned", "planned", "d"), ("best_stages", "best", "d"),
                                                  ("ratio", "planned/best", ".3f")]))
        ok = sum(p.ratio is not None and p.ratio <= 1.05 for p in plans)
        print(f"planned stage count within 5% of the best: {ok} of {len(plans)}")
        payload["plan"] = plans
    common.write(args, payload)
