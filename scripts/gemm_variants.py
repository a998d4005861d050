"""Compile-time variants of one GEMM kernel, timed against cuBLAS in one run (a maintainer's tool for
measuring a kernel change before it becomes the default; `asynccopy bench gemm` measures the defaults).

    python scripts/gemm_variants.py --kernel mma --shapes 4096x4096x4096,8192x8192x8192 --stages 3,4 \\
        --variant base --variant bk32:ASYNCCOPY_MMA_BK=32 --variant flat:ASYNCCOPY_MMA_FRAG_AHEAD=0

A variant is NAME[:MACRO=VALUE,...]: the kernel's source compiled with those -D macros alone (each kernel file
lists its knobs in its header), in place of the knobs `asynccopy.gemm`'s configuration of the shape has (its pairs,
say); NAME:+MACRO=VALUE,... keeps the shape's own knobs and sets these on top of them. Two names are the launch's,
not macros: `stages=N` (this variant's stage count, in place of --stages) and `stream_k=0|1|auto` (auto: as
`asynccopy.gemm` decides for the variant's cluster shape). Every variant's C is checked against a float64 product
before it is timed (CUDA events, median, inputs rotated past L2, the same run's torch.matmul as the reference).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from asynccopy import device, matmul
from asynccopy.bench import gemm_bench
from asynccopy.bench.harness import median, parse_variant, settle, time_ms

LAUNCH_KEYS = ("stages", "stream_k")  # a variant's settings that are the launch's, not -D macros


def variant_defines(own: tuple, macros: tuple, extend: bool) -> tuple:
    """The -D macros a variant builds with: its own alone, or (extend) the configuration's with its own set on top."""
    if not extend:
        return macros
    merged = dict(own)
    merged.update(macros)
    return tuple(merged.items())


def _variant(text: str) -> tuple[str, tuple[tuple[str, str], ...], dict[str, str]]:
    """(name, -D macros, launch settings): harness.parse_variant with this script's launch keys."""
    return parse_variant(text, LAUNCH_KEYS)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", required=True, choices=list(matmul.KERNELS))
    p.add_argument("--shapes", default="8192x8192x8192", help="comma-separated MxNxK")
    p.add_argument("--dtype", default=None, help="default: the kernel's first dtype")
    p.add_argument("--stages", default=None, help="comma-separated stage counts (default: the kernel's)")
    p.add_argument("--tile", default=None, help="BMxBN (default: the kernel's for the shape)")
    p.add_argument("--layout", default="nn", choices=("nn", "nt", "tn", "tt"),
                   help="A and B row-major (n) or transposed views (t); nt is x @ w.T (default nn)")
    p.add_argument("--splits", default=None, help="comma-separated splits of k (split_k kernels; default: chosen)")
    p.add_argument("--stream-k", default=None,
                   help="comma-separated 0/1: the last wave shared out or not (persistent kernels; default: chosen)")
    p.add_argument("--l2", default=None, help="comma-separated L2 promotions of the operand maps (TMA kernels)")
    p.add_argument("--variant", action="append", default=None, help="NAME[:MACRO=VALUE,...]; repeatable")
    p.add_argument("--triton", default=None,
                   help="comma-separated num_stages of the bench's Triton matmul to time beside cuBLAS (default: none)")
    p.add_argument("--reps", type=int, default=30, help="timed runs of each case, split over the rounds")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every case in turn (default 3)")
    p.add_argument("--settle", type=float, default=0.5,
                   help="seconds of cuBLAS's load before the rounds, for the clock it sustains (default 0.5; 0: none)")
    args = p.parse_args(argv)

    import torch
    from cuda.core import Device

    rec = matmul.KERNELS[args.kernel]
    dtype = args.dtype or rec.dtypes[0]
    variants = [_variant(v) for v in (args.variant or ["base"])]
    stages = [int(s) for s in args.stages.split(",")] if args.stages else [None]
    tile = tuple(int(x) for x in args.tile.split("x")) if args.tile else None
    facts = device.current()
    s = Device(facts.device_id).create_stream()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{facts.name}: {args.kernel} {dtype} {args.layout}", flush=True)
    print(f"{'shape':>18} {'variant':>14} {'stages':>6} {'ms':>8} {'TFLOP/s':>8} {'% cuBLAS':>8} {'rel err':>8}")
    with torch.cuda.stream(torch.cuda.ExternalStream(int(s.handle))):
        for shape in args.shapes.split(","):
            _shape(torch, shape, args, dtype, tile, stages, variants, facts, s)
    return 0


def _shape(torch, shape, args, dtype, tile, stages, variants, facts, s) -> None:
    """Every variant and stage count on one shape beside the same inputs' torch.matmul: each checked first, then
    (after the clock has settled under cuBLAS's load) all timed in turn, round after round, so that a drifting
    clock weighs on each alike; the median over every round's reps."""
    m, n, k = (int(x) for x in shape.split("x"))
    ops = gemm_bench._Operands(torch, m, n, k, dtype, facts.l2_bytes, args.layout)
    flops = 2 * m * n * k

    def cublas(i):
        j = i % ops.sets
        torch.matmul(ops.a[j], ops.b[j], out=ops.c[j])

    cases = [("cuBLAS", "-", cublas, 0.0)]
    if args.triton:
        from asynccopy.bench import triton_gemm

        why = triton_gemm.available()
        if why is not None:
            print(f"Triton not timed: {why}", flush=True)
        for st in ([] if why is not None else [int(x) for x in args.triton.split(",")]):
            launchers = [triton_gemm.launcher(ops.a[j], ops.b[j], ops.c[j], stages=st) for j in range(ops.sets)]
            ops.c[0].fill_(float("nan"))
            launchers[0]()
            torch.cuda.synchronize()
            cases.append((f"Triton s{st}", st, lambda i, ls=launchers: ls[i % ops.sets](), ops.error()))
    splits = [int(x) for x in args.splits.split(",")] if args.splits else [None]
    l2s = args.l2.split(",") if args.l2 else [None]
    sks = [bool(int(x)) for x in args.stream_k.split(",")] if args.stream_k else [None]
    for name, defines, launch, st, sp, l2, sk in ((v, d, la, st, sp, l2, sk) for v, d, la in variants
                                                  for st in stages for sp in splits for l2 in l2s for sk in sks):
        a = matmul.matrix(ops.a[0], "a", stream=s)
        b = matmul.matrix(ops.b[0], "b", stream=s)
        st = int(launch["stages"]) if "stages" in launch else st
        cfg = matmul.configure(a, b, dtype, facts, kernel=args.kernel, stages=st, tile=tile)
        cfg = replace(cfg, defines=variant_defines(cfg.defines, defines, "extend" in launch))
        cfg = replace(cfg, splits=sp) if sp else cfg
        cfg = replace(cfg, l2_promotion=l2) if l2 else cfg
        want = launch.get("stream_k", sk)
        if want == "auto":
            share = matmul.cluster_of(cfg)[1]
            want = matmul.stream_k_default(cfg.record, a, b, cfg.tile, cfg.splits, facts.sm_count, share)
        cfg = replace(cfg, stream_k=bool(int(want))) if want is not None else cfg
        sk = None if want is None else cfg.stream_k

        def run(i, cfg=cfg):
            j = i % ops.sets
            mats = (matmul.matrix(ops.a[j], "a", stream=s), matmul.matrix(ops.b[j], "b", stream=s))
            matmul.launch(cfg, *mats, ops.c[j].data_ptr(), n, stream=s, facts=facts)

        ops.c[0].fill_(float("nan"))
        run(0)
        s.sync()
        err = ops.error()
        label = ((f"{name} x{cfg.splits}" if cfg.splits > 1 else name) + (f" L2:{l2}" if l2 else "")
                 + ("" if sk is None else " sk" if sk else " nosk"))
        if not err < gemm_bench.TOLERANCE[dtype]:
            print(f"{shape:>18} {label:>14} {cfg.stages:>6} WRONG: relative error {err:.2e}", flush=True)
            continue
        cases.append((label, cfg.stages, run, err))
    if args.settle > 0:
        settle(cublas, s, args.settle)
    samples = [[] for _ in cases]
    per_round = max(1, args.reps // args.rounds)
    for _ in range(args.rounds):
        for i, (_, _, fn, _) in enumerate(cases):
            samples[i] += time_ms(fn, s, warmup=1, reps=per_round)
    ref_ms = median(samples[0])
    for (label, st, _, err), got in zip(cases, samples):
        ms = median(got)
        print(f"{shape:>18} {label:>14} {st:>6} {ms:8.3f} {flops / ms / 1e9:8.0f} {100 * ref_ms / ms:8.0f} "
              f"{err:8.1e}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
