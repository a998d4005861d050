"""Compile-time variants of one attention kernel, timed against cuDNN in one run (a maintainer's tool for measuring
a kernel change before it becomes the default; `asynccopy bench attention` measures the defaults and the named
variants of `asynccopy.attention_kernels.VARIANTS`).

    python scripts/attention_variants.py --shapes 4:16:8192:64,4:16:2048:128 --causal both \\
        --variant base:+ --variant ring0:+ASYNCCOPY_ATTN_RING=0 --variant obuf:+ASYNCCOPY_ATTN_O_BUFFER=1 \\
        --source before=/tmp/attention_wgmma_before.cu

A variant is NAME[:MACRO=VALUE,...]: the kernel built with those -D macros alone, in place of the knobs
`asynccopy.attention` configures for the problem (its persistent grid, consumer count, key tile, ...); NAME:+MACRO=VALUE,...
keeps the problem's own knobs and sets these on top of them (an O buffer the launch chose goes where the variant's
build would not fit beside it: AttentionConfig.with_variant). `stages=N` among them is the variant's stage count.
--source NAME=PATH adds a build of another copy of the kernel's file (say, the last commit's:
`git show HEAD:asynccopy/kernels/attention_wgmma.cu > /tmp/before.cu`) with the problem's own knobs. Every build is
checked against float64 on a slice before it is timed (bench attention's inputs: rotated past L2, the same sets for
every case; CUDA events, rounds of every case in turn, the median), beside the same run's SDPA backends
(--backends).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from asynccopy import build, device
from asynccopy.bench import attention_bench, attention_cases, harness
from asynccopy.bench.harness import median, sweep
from asynccopy.errors import ArgumentError
from asynccopy.sdpa import KERNELS, Problem, configure

LAUNCH_KEYS = ("stages",)  # a variant's settings that are the launch's, not -D macros


def parse_variant(text: str) -> tuple[str, tuple[tuple[str, str], ...], dict[str, str]]:
    """(name, -D macros, launch settings): harness.parse_variant with this script's launch keys."""
    return harness.parse_variant(text, LAUNCH_KEYS)


def add_source(name: str, path: str, kernel: str) -> None:
    """Register another copy of ``kernel``'s file under ``name`` (in this process): the same record, that source."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ArgumentError(f"--source {name}={path}: no such file")
    if name in KERNELS:
        raise ArgumentError(f"--source {name}=...: {name!r} is already a kernel's name; choose another")
    KERNELS[name] = dataclasses.replace(KERNELS[kernel], name=name, source=str(file))


VARIANT_TAG = "ASYNCCOPY_ATTN_VARIANT_TAG"  # a build without knobs still goes through kernel_case's own build


def configs(p: Problem, causal: bool, facts, kernel: str, variants, sources=()) -> list[tuple[str, object]]:
    """(label, AttentionConfig) for each variant and source copy on this problem, as the script builds and times
    them (a build without knobs carries VARIANT_TAG, so that kernel_case launches it as built here). A source copy
    takes the problem's own knobs that its file reads: one from before a knob existed builds without it, and its
    launch (grid, threads, shared memory) follows what it builds."""
    out = []
    for name, macros, launch in variants:
        stages = int(launch["stages"]) if "stages" in launch else None
        base = configure(p, facts, kernel=kernel, stages=stages, causal=causal)
        if "extend" in launch:
            cfg = base.with_variant(macros, facts.smem_per_block_optin)
        else:
            cfg = dataclasses.replace(base, defines=macros)
        out.append((name, cfg))
    for name in sources:
        own = configure(p, facts, kernel=kernel, causal=causal)
        text = Path(KERNELS[name].source).read_text()
        read = tuple((macro, value) for macro, value in own.defines if macro in text)
        out.append((name, dataclasses.replace(own, kernel=name, defines=read)))
    return [(name, cfg if cfg.defines else cfg.with_defines(((VARIANT_TAG, 0),))) for name, cfg in out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="wgmma", choices=list(KERNELS))
    ap.add_argument("--shapes", default="4:16:8192:64", help="comma-separated B:H:S:D or B:H:HKV:LQ:LK:D")
    ap.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    ap.add_argument("--dtype", default="bfloat16", choices=attention_bench.DTYPES)
    ap.add_argument("--layout", default="bhsd", choices=attention_bench.LAYOUTS)
    ap.add_argument("--variant", action="append", default=None, help="NAME[:[+]MACRO=VALUE,...]; repeatable")
    ap.add_argument("--source", action="append", default=[], help="NAME=PATH: another copy of the kernel's file")
    ap.add_argument("--backends", default="cudnn", help="comma-separated SDPA backends to time beside (default cudnn)")
    ap.add_argument("--reps", type=int, default=20, help="timed runs of each case, split over the rounds")
    ap.add_argument("--rounds", type=int, default=4, help="rounds of every case in turn (default 4)")
    ap.add_argument("--warm", type=int, default=0, metavar="N",
                    help="compile every build first in N processes side by side (NVRTC is most of a fresh run's time)")
    args = ap.parse_args(argv)
    if args.warm < 0:
        raise ArgumentError(f"--warm {args.warm}: a number of processes, 0 for none")

    variants = [parse_variant(v) for v in (args.variant or ["base:+"])]
    sources = []
    for text in args.source:
        name, eq, path = text.partition("=")
        if not name or not eq or not path:
            raise ArgumentError(f"--source {text!r}: NAME=PATH")
        add_source(name, path, args.kernel)
        sources.append(name)
    labels = [v[0] for v in variants] + sources
    if len(set(labels)) != len(labels):
        raise ArgumentError(f"variant and source names must differ: {', '.join(labels)}")
    shapes = attention_bench.parse_shapes(args.shapes)
    masks = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    facts = device.require((8, 0), "attention_variants")
    if args.warm:
        todo = [cfg for shape in shapes for causal in masks
                for _, cfg in configs(Problem(*shape, args.dtype), causal, facts, args.kernel, variants, sources)]
        built = build.compile_many([cfg.compile_job(facts.arch) for cfg in todo], args.warm)
        print(f"compiled {built} builds in {args.warm} processes", flush=True)
    torch = attention_cases.load_torch()
    from cuda.core import Device

    stream = Device(facts.device_id).create_stream()
    wanted = set(args.backends.split(",")) if args.backends else set()
    sdpa = [(impl, b) for impl, b in attention_cases.backends(torch)[0] if impl.removeprefix("sdpa-") in wanted]
    print(f"{facts.name}: attention {args.kernel} {args.dtype} {args.layout}", flush=True)
    with torch.cuda.device(facts.device_id), torch.cuda.stream(torch.cuda.ExternalStream(int(stream.handle))):
        for shape in shapes:
            for causal in masks:
                _problem(torch, shape, causal, args, variants, sources, sdpa, stream, facts)
    return 0


def _problem(torch, shape, causal, args, variants, sources, sdpa, stream, facts) -> None:
    label = attention_bench.shape_label(shape) + (" causal" if causal else "")
    ins = attention_cases.Inputs(torch, shape, causal, args.dtype, args.layout, facts.l2_bytes)
    notes = []

    def note(what, why):
        notes.append(f"{what}: {why}")

    cases = [attention_cases.backend_case(torch, ins, impl, b, causal, stream, label, note) for impl, b in sdpa]
    for name, cfg in configs(Problem(*shape, args.dtype), causal, facts, args.kernel, variants, sources):
        cases.append(attention_cases.kernel_case(ins, name, cfg, causal, stream, label, note))
    timed = sweep(cases, stream, warmup=2, reps=args.reps, rounds=args.rounds, progress=lambda s: None,
                  settle_s=attention_bench.SETTLE_S)
    work = attention_bench.flops(shape, causal)
    best = min((median(t.samples) for t in timed if attention_cases.is_backend(t.case.tag[0])), default=None)
    figures = []
    for t in timed:
        ms = median(t.samples)
        pct = f" ({100 * best / ms:.0f}%)" if best else ""
        figures.append(f"{t.case.tag[0]} {work / (ms * 1e-3) / 1e12:.0f}{pct} err {t.case.tag[2]['err']:.1e}")
    print(f"{label}: " + ", ".join(figures) + " TFLOP/s", flush=True)
    for text in notes:
        print(f"  {label} {text}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
