"""`asynccopy bench stream | stas | chunks | gemm | attention`: the suites, each checked and timed on the local
GPU (`asynccopy bench` alone is `bench stream`, the main job)."""

from __future__ import annotations

from .. import device, mechanism, stream
from ..bench import chunks_bench, report, stas_bench, stream_bench
from ..errors import AsyncCopyError, check_int
from ..model import memory
from . import common, products
from .model import print_model

SUITES = ("stream", "stas", "chunks", "gemm", "attention")


def add(sub) -> None:
    bench = sub.add_parser("bench", help="the benchmark suites on this GPU (default: stream, the main job)")
    suites = bench.add_subparsers(dest="suite", required=True, metavar="{" + ",".join(SUITES) + "}")
    _add_stream(suites)
    _add_stas(suites)
    _add_chunks(suites)
    products.add_gemm(suites)
    products.add_attention(suites)


def _add_sweep_flags(p, *, size_mib: int = 1024) -> None:
    p.add_argument("--size-mib", type=int, default=size_mib, help="input size (the output is as large)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    common.add_output_flags(p)


def _add_stream(suites) -> None:
    p = suites.add_parser("stream", help="every tile-stream mechanism x stages x intensities")
    names = ", ".join(m.name for m in mechanism.mechanisms())
    p.add_argument("--mechanisms", type=common.names, default=None, help=f"comma-separated subset of: {names}")
    p.add_argument("--stages", type=common.ints, default=stream_bench.DEFAULT_STAGES)
    p.add_argument("--intensities", type=common.ints, default=stream_bench.DEFAULT_INTENSITIES)
    p.add_argument("--tile", type=int, default=4096, help="floats per tile")
    p.add_argument("--threads", type=int, default=256)
    p.add_argument("--blocks-per-sm", type=int, default=1, help="blocks of the persistent grid per SM")
    p.add_argument("--tiles-per-block", type=int, default=0,
                   help="instead of a persistent grid, a block per this many contiguous tiles")
    p.add_argument("--quick", action="store_true", help="stages 1,2,4,8, intensities 0,2,8, 10 reps")
    p.add_argument("--plan", action="store_true",
                   help="also check the planner's stage counts and the simulator's times against the sweep")
    p.add_argument("--png", default=None, help="with --plan: the model against the measured times, a panel per variant")
    p.add_argument("--recalibrate", action="store_true",
                   help="with --plan: measure the memory curve again even if one is cached for this GPU")
    p.add_argument("--fixed-latency", action="store_true",
                   help="with --plan: model the memory with one latency fitted to sync (the uncalibrated fallback)")
    _add_sweep_flags(p)
    p.set_defaults(fn=cmd_stream)


def _add_stas(suites) -> None:
    p = suites.add_parser("stas", help="the st.async cluster ring against the same exchange through global memory")
    p.add_argument("--cluster-sizes", type=common.ints, default=stas_bench.DEFAULT_CLUSTERS, help="blocks per cluster")
    p.add_argument("--message-bytes", type=common.ints, default=stas_bench.DEFAULT_MESSAGES,
                   help="bytes each block sends per round")
    p.add_argument("--vec", type=int, default=16, help="st.async width, 4, 8 or 16 bytes")
    p.add_argument("--slots", type=int, default=2, help="receive buffers per block, 1, 2 or 4")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--png", default=None, help="throughput against message size")
    common.add_output_flags(p)
    p.set_defaults(fn=cmd_stas)


def _add_chunks(suites) -> None:
    p = suites.add_parser("chunks", help="LDGSTS against TMA bulk copies per chunk size (CC 9.0)")
    p.add_argument("--chunks", type=common.ints, default=chunks_bench.DEFAULT_CHUNKS, help="bytes per tile")
    _add_sweep_flags(p)
    p.set_defaults(fn=cmd_chunks)


STREAM_COLUMNS = [("label", "mechanism", ""), ("copy_op", "copy", ""), ("stages", "stages", "d"),
                  ("intensity", "intensity", "d"), ("ms", "ms", ".3f"), ("gbps", "GB/s", ".0f"),
                  ("pct_copy", "% copy", ".1f"), ("speedup_vs_sync", "x sync", ".2f")]


def _check_sweep(args) -> None:
    """The flags every streaming suite shares, checked before any GPU is looked for."""
    check_int(args.size_mib, "--size-mib", 1, 1 << 20)
    check_int(args.reps, "--reps", 1, 100_000)
    check_int(args.warmup, "--warmup", 0, 100_000)
    common.check_outputs(args)


def _check_stream(args) -> None:
    _check_sweep(args)
    for name in args.mechanisms or ():
        mechanism.get(name)
    if args.mechanisms is not None and not args.mechanisms:
        raise AsyncCopyError("--mechanisms names no mechanism")
    if not args.stages or not args.intensities:
        raise AsyncCopyError("--stages and --intensities need at least one value each")
    for s in args.stages:
        check_int(s, "each of --stages", 1, mechanism.MAX_STAGES)
    for k in args.intensities:
        stream.check_intensity(k)
    stream.check_blocks_per_sm(args.blocks_per_sm)
    stream.StreamConfig.make(mechanism.baseline(), threads=args.threads, tile=args.tile,
                             tiles_per_block=args.tiles_per_block)
    if args.png:
        common.check_png(args.png)


def cmd_stream(args) -> int:
    _check_stream(args)
    if args.plan and args.tiles_per_block:
        raise AsyncCopyError("--plan models the persistent grid: leave --tiles-per-block at 0")
    if args.png and not args.plan:
        raise AsyncCopyError("--png draws the model check: add --plan")
    if (args.recalibrate or args.fixed_latency) and not args.plan:
        raise AsyncCopyError("--recalibrate and --fixed-latency choose the model of --plan: add --plan")
    if args.recalibrate and args.fixed_latency:
        raise AsyncCopyError("--fixed-latency models without the memory curve: it cannot be combined with --recalibrate")
    if args.quick:
        stages, intensities, reps = (1, 2, 4, 8), (0, 2, 8), 10
    else:
        stages, intensities, reps = args.stages, args.intensities, args.reps
    facts = device.current()  # fails here, in one line, without a GPU
    cfgs = stream_bench.configs(args.mechanisms, stages, tile=args.tile, threads=args.threads,
                                smem_limit=facts.smem_per_block_optin, where=facts.name, arch=facts.arch,
                                tiles_per_block=args.tiles_per_block)
    if not cfgs:
        raise AsyncCopyError("no configuration to run (every one was filtered out or does not fit)")
    result = stream_bench.run(cfgs, intensities, size_bytes=args.size_mib << 20, reps=reps, warmup=args.warmup,
                              blocks_per_sm=args.blocks_per_sm)
    print(report.table(sorted(result.rows, key=lambda r: (r.intensity, r.ms)), STREAM_COLUMNS))
    print()
    for line in stream_bench.summary(result):
        print(line)
    payload = result.as_dict()
    try:
        if args.plan:
            payload["model"] = _model_check(result, intensities, args, reps)
            payload["rows"] = [r.__dict__ for r in result.rows]  # with the planner's picks measured
    finally:  # the sweep is written even if the model check fails or is interrupted
        common.write(args, payload)
    return 0


def _model_check(result, intensities, args, reps) -> dict:
    from ..bench import memory_calibration, model_check, model_traces

    def say(text):
        print("  " + text, flush=True)

    fit = None
    if not args.fixed_latency:
        cached = not args.recalibrate and memory.cached(device.current()) is not None
        print(f"\nmemory curve: {'cached for this GPU' if cached else 'calibrating (traced regimes at intensity 0)'}"
              " ...", flush=True)
        fit, _ = memory_calibration.calibration(recalibrate=args.recalibrate, progress=say)
        for line in fit.report():
            print(line)
    compute = model_traces.measured_compute_ns(intensities, tile=result.tile, threads=result.threads,
                                              blocks_per_sm=result.blocks_per_sm)
    print(f"\nmodel check: tracing each variant at {model_check.OVERHEAD_STAGES} stages, intensity 0 and "
          f"{max(max(intensities), model_check.OVERHEAD_MIN_INTENSITY)} ...", flush=True)
    overheads = model_traces.measured_overheads(result, max(intensities), progress=say)
    curve = fit.curve if fit else None
    _, rows = model_check.check(result, compute, overheads, curve)
    missing = model_check.unmeasured_picks(result, rows)
    if missing:
        print(f"measuring the planner's {sum(len(v) for v in missing.values())} pick(s) the sweep did not run, "
              f"each beside its best swept stage count again (one run) ...", flush=True)
        _measure_picks(result, model_check.with_best(missing, rows), args, reps)
    dev, rows = print_model(result, compute, overheads, args.png, fit)
    return {"latency_ns": dev.latency_ns, "compute_ns": compute,
            "overheads": {label: ov.as_dict() for label, ov in overheads.items()}, "rows": rows,
            **({"memory": fit.as_dict()} if fit else {})}


def _measure_picks(result, missing, args, reps) -> None:
    """Run the (variant, stage count) pairs the planner picked and the sweep did not, at the intensities
    it picked them for, and add their rows to ``result``."""
    base = mechanism.baseline()
    sync = {r.intensity: r.ms for r in result.rows if r.mechanism == base}
    for (label, stages), ks in sorted(missing.items()):
        like = next(r for r in result.rows if r.label == label)
        opts = {k: v for k, v in (("vec", like.vec), ("cache", like.cache)) if v is not None}
        if mechanism.get(like.mechanism).producers_option:
            opts["producers"] = like.producers
        cfg = stream.StreamConfig.make(like.mechanism, stages, tile=result.tile, threads=result.threads, **opts)
        more = stream_bench.run([cfg], sorted(ks), size_bytes=args.size_mib << 20, reps=reps, warmup=args.warmup,
                                blocks_per_sm=result.blocks_per_sm)
        for r in more.rows:
            r.speedup_vs_sync = sync[r.intensity] / r.ms if r.intensity in sync else None
            result.rows.append(r)


def cmd_stas(args) -> int:
    from .. import stas

    check_int(args.reps, "--reps", 1, 100_000)
    for c in args.cluster_sizes:
        stas.RingConfig.make(c, 16, vec=args.vec, slots=args.slots)
    for m in args.message_bytes:
        stas.RingConfig.make(2, m)
    if not args.cluster_sizes or not args.message_bytes:
        raise AsyncCopyError("--cluster-sizes and --message-bytes need at least one value each")
    if args.png:
        common.check_png(args.png)
    common.check_outputs(args)
    device.require((9, 0), "asynccopy bench stas")
    result = stas_bench.run(args.cluster_sizes, args.message_bytes, vec=args.vec, slots=args.slots, reps=args.reps)
    print(report.table(result.rows, [("cluster", "cluster", "d"), ("message_bytes", "message B", "d"),
                                     ("label", "path", ""), ("clusters", "clusters", "d"), ("rounds", "rounds", "d"),
                                     ("ms", "ms", ".3f"), ("gbps", "GB/s", ".0f"),
                                     ("us_per_round", "us/round", ".2f")]))
    ratios = stas_bench.speedups(result)
    print()
    print(report.table(ratios, [("cluster", "cluster", "d"), ("message_bytes", "message B", "d"),
                                ("dsmem_gbps", "st.async GB/s", ".0f"), ("global_gbps", "global GB/s", ".0f"),
                                ("ratio", "st.async / global", ".2f")]))
    two = [r["ratio"] for r in ratios if r["cluster"] == 2]
    if two:
        print(f"\ncluster 2: st.async is {min(two):.2f}x to {max(two):.2f}x the global-memory ring's throughput")
    if args.png:
        print(f"wrote {stas_bench.plot(result, args.png)}")
    common.write(args, result.as_dict())
    return 0


def cmd_chunks(args) -> int:
    _check_sweep(args)
    if not args.chunks:
        raise AsyncCopyError("--chunks needs at least one chunk size")
    for chunk in args.chunks:
        check_int(chunk, "each of --chunks", 512, 1 << 20)
        try:
            chunks_bench.chunk_configs(chunk)
        except AsyncCopyError as exc:
            raise AsyncCopyError(f"--chunks {chunk}: a chunk is a tile of a power-of-two size in bytes ({exc})") from None
    device.require((9, 0), "asynccopy bench chunks")
    result = chunks_bench.run(args.chunks, size_bytes=args.size_mib << 20, reps=args.reps, warmup=args.warmup)
    print(report.table(result.rows, [("chunk_bytes", "chunk B", "d"), ("mechanism", "mechanism", ""),
                                     ("threads", "threads", "d"), ("stages", "stages", "d"),
                                     ("blocks_per_sm", "blocks/SM", "d"), ("ms", "ms", ".3f"),
                                     ("gbps", "GB/s", ".0f"), ("pct_copy", "% copy", ".1f")]))
    first, second = result.pair
    at = chunks_bench.crossover(result.rows, result.pair)
    print(f"\ndevice-to-device copy: {result.copy_gbps:.0f} GB/s")
    print(f"{second} >= {first} from {at} B chunks on" if at else f"{second} never overtakes {first} for good here")
    common.write(args, result.as_dict())
    return 0
