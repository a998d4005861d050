"""The `asynccopy` command: info, mechanisms, bench."""

from __future__ import annotations

import argparse
import sys
import time

from . import build, device, stream
from .errors import AsyncCopyError


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def cmd_info(args) -> int:
    if args.arch:
        arch = build.parse_arch(args.arch)
        print(f"device: none asked for; compiling for {arch}")
    else:
        facts = device.current()
        arch = facts.arch
        print(f"device: {facts.name} (CC {facts.cc[0]}.{facts.cc[1]}, {arch}), {facts.sm_count} SMs, "
              f"{facts.smem_per_block_optin // 1024} KiB shared memory per block (opt-in), "
              f"{facts.smem_per_sm // 1024} KiB per SM, {facts.l2_bytes / 2**20:.0f} MiB L2")
        print(f"driver: CUDA {device.driver_version()}")
    tc = build.toolchain()
    print(f"toolchain: NVRTC {tc['nvrtc']}, CCCL {tc['cccl']}, CUDA runtime headers {tc['cuda_runtime_headers']}, "
          f"cuda.core {tc['cuda_core']}")
    where = build.cache_dir()
    print(f"compile cache: {where if where else 'off (ASYNCCOPY_CACHE_DIR=off)'}")
    print(f"compiling every kernel for {arch}:")
    units = [("util.cu", lambda: build.compile(build.read_kernel("util.cu"), arch=arch, name="util"))]
    for mech in stream.mechanisms():
        cfg = stream.StreamConfig.make(mech.name)
        if not cfg.compiles_for(arch):
            print(f"  {mech.source} {mech.name}: skipped (needs CC {mech.min_cc[0]}.{mech.min_cc[1]})")
            continue
        units.append((f"{mech.source} {mech.name}", lambda cfg=cfg: cfg.compile(arch)))
    if build.cc_of_arch(arch) >= (9, 0):
        from . import stas, tma

        units.append(("tma.cu (TMA building blocks)", lambda: tma.module(arch)))
        units.append(("stas.cu (st.async ring)", lambda: stas.module(arch)))
    for label, make in units:
        t0 = time.perf_counter()
        module = make()
        print(f"  {label:30s} {len(module.cubin) / 1024:7.0f} KiB cubin  {time.perf_counter() - t0:5.1f} s  "
              f"({module.source})")
    return 0


def cmd_mechanisms(args) -> int:
    for mech in stream.mechanisms():
        print(f"{mech.name:12s} {mech.describe()}")
        print(f"{'':12s} {mech.api}")
    return 0


def cmd_bench(args) -> int:
    from .bench import report, stream_bench

    if args.plan and args.tiles_per_block:
        raise AsyncCopyError("--plan models the persistent grid: leave --tiles-per-block at 0")
    if args.png and args.suite != "stas" and not args.plan:
        raise AsyncCopyError("--png draws `bench stas` or `bench --plan`; add --plan for the model's plot")
    facts = device.current()  # fails here, in one line, without a GPU
    if args.suite == "stas":
        return _bench_stas(args)
    if args.chunks:
        return _bench_chunks(args)
    if args.quick:
        stages, intensities, reps = (1, 2, 4, 8), (0, 2, 8), 10
    else:
        stages, intensities, reps = args.stages, args.intensities, args.reps
    cfgs = stream_bench.configs(args.mechanisms, stages, tile=args.tile, threads=args.threads,
                                smem_limit=facts.smem_per_block_optin, where=facts.name, arch=facts.arch,
                                tiles_per_block=args.tiles_per_block)
    if not cfgs:
        raise AsyncCopyError("no configuration to run (every one was filtered out or does not fit)")
    result = stream_bench.run(cfgs, intensities, size_bytes=args.size_mib << 20, reps=reps, warmup=args.warmup,
                              blocks_per_sm=args.blocks_per_sm)
    columns = [("label", "mechanism", ""), ("copy_op", "copy", ""), ("stages", "stages", "d"), ("intensity", "intensity", "d"),
               ("ms", "ms", ".3f"), ("gbps", "GB/s", ".0f"), ("pct_copy", "% copy", ".1f"),
               ("speedup_vs_sync", "x sync", ".2f")]
    rows = sorted(result.rows, key=lambda r: (r.intensity, r.ms))
    print(report.table(rows, columns))
    print()
    for line in stream_bench.summary(result):
        print(line)
    payload = result.as_dict()
    try:
        if args.plan:
            payload["model"] = _model_check(result, intensities, args.png)
    finally:  # the sweep is written even if the model check fails or is interrupted
        _write(args, payload)
    return 0


def _write(args, payload: dict) -> None:
    from .bench import report

    for path in (args.json, args.csv):
        if path:
            report.write(path, payload)
            print(f"wrote {path}")


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.lower().replace(",", "x").split("x") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape like 64x64, got {text!r}") from None


def cmd_tensormap_check(args) -> int:
    from . import tensormap

    spec = tensormap.TensorMapSpec.from_numpy_order(
        args.dtype, args.shape, box=args.box, strides_bytes=args.strides, element_strides=args.element_strides,
        address=int(args.address, 0), swizzle=args.swizzle, interleave=args.interleave, oob_fill=args.oob_fill,
        l2_promotion=args.l2_promotion)
    tensormap.validate(spec, lint=not args.no_lint)
    if args.smem_offset is not None:
        tensormap.check_smem_destination(args.smem_offset, spec.swizzle)
    print(f"ok: rank {spec.rank} {spec.dtype}, global dims (innermost first) {spec.dims}, strides {spec.strides} B, "
          f"box {spec.box} = {spec.box_bytes} B per load, swizzle {spec.swizzle}: shared destination "
          f"{tensormap.SWIZZLE_REPEAT[spec.swizzle]}-byte aligned")
    return 0


def cmd_plan(args) -> int:
    from . import planner

    device = args.device
    if device is None:
        device = None if _has_gpu() else "H200"
        if device:
            print("no local GPU: planning for the H200 (pass --device to choose)")
    p = planner.plan(args.operand, threads=args.threads, device=device, regs_per_thread=args.regs,
                     compute_ns=args.compute_ns, blocks_per_sm=args.blocks_per_sm, max_stages=args.max_stages,
                     **_costs(args))
    print(p.report())
    return 0


def _has_gpu() -> bool:
    return device.has_gpu()


def _add_cost_flags(parser) -> None:
    """The kernel's own costs, for the simulator (asynccopy.simulate; `bench --plan` measures them)."""
    parser.add_argument("--issue-ns", type=float, default=0.0,
                        help="time to issue one tile's copy (the computing threads', or the producer warp's)")
    parser.add_argument("--barrier-ns", type=float, default=0.0, help="fixed cost between two computes")
    parser.add_argument("--producer-warp", action="store_true",
                        help="a producer warp issues the copies, beside the compute (ws_*, tma_1d_pipeline, tma_2d)")
    parser.add_argument("--handoff-ns", type=float, default=0.0,
                        help="with --producer-warp: from a buffer's release to the producer's refill")
    parser.add_argument("--issue-first", action="store_true",
                        help="the computing threads refill the buffer just computed before waiting for the next tile "
                             "(cuda::pipeline's order)")


def _costs(args) -> dict:
    if args.handoff_ns and not args.producer_warp:
        raise AsyncCopyError("--handoff-ns is the producer warp's: add --producer-warp")
    if args.issue_first and args.producer_warp:
        raise AsyncCopyError("--issue-first is the computing threads' order: a producer warp refills on release")
    if getattr(args, "compute_ns", None) is None and (args.issue_ns or args.barrier_ns or args.producer_warp
                                                      or args.issue_first):
        raise AsyncCopyError("the kernel's costs feed the simulator: give --compute-ns too")
    return {"issue_ns": args.issue_ns, "barrier_ns": args.barrier_ns, "producer": args.producer_warp,
            "handoff_ns": args.handoff_ns, "issue_first": args.issue_first}


def cmd_simulate(args) -> int:
    from . import devices, simulate

    dev = devices.lookup(args.device) if args.device else devices.from_facts(device.current())
    bw = (args.bandwidth_gbps or dev.bandwidth / 1e9) / dev.sm_count
    sim = simulate.simulate(args.stages, args.tiles, tile_bytes=args.tile_bytes, compute_ns=args.compute_ns,
                            latency_ns=args.latency_ns or dev.latency_ns, bandwidth_per_sm=bw, blocks=args.blocks_per_sm,
                            **_costs(args))
    print(f"{dev.name}: {bw:.1f} GB/s per SM, latency {args.latency_ns or dev.latency_ns:.0f} ns, "
          f"tile {args.tile_bytes} B in + out, compute {args.compute_ns:.0f} ns per tile")
    print(simulate.timeline_text(sim, tiles=min(args.tiles, 12)))
    if args.png:
        print(f"wrote {simulate.timeline_png(sim, args.png, tiles=min(args.tiles, 12))}")
    return 0


def cmd_trace(args) -> int:
    import statistics

    from . import devices, simulate, trace

    opts = {k: v for k, v in (("vec", args.vec), ("cache", args.cache), ("producers", args.producers)) if v is not None}
    cfg, blocks = trace.run(args.mechanism, args.stages, intensity=args.intensity, tile=args.tile,
                            threads=args.threads, tiles_per_block=args.tiles, **opts)
    block = next(b for b in blocks if b.block == args.block)
    tiles = block.tiles
    compute = statistics.median(t.compute_end - t.compute_start for t in tiles)
    wait = statistics.median(t.ready - t.issued for t in tiles)
    hits = trace.overlapping(tiles)
    print(f"{cfg.label()} stages={cfg.stages} intensity={args.intensity}, block {block.block}: {len(tiles)} tiles traced, "
          f"median compute {compute:.0f} ns, median issue->ready {wait:.0f} ns, "
          f"{len(hits)} of {len(tiles) - 1} computes overlap the next tile's copy")
    measured = trace.as_simulation(block, cfg.stages)
    print("measured:")
    print(simulate.timeline_text(measured, tiles=min(len(tiles), 12)))
    facts = device.current()
    dev = devices.from_facts(facts)
    sim = simulate.simulate(cfg.stages, len(tiles), tile_bytes=cfg.tile * 4, compute_ns=compute, latency_ns=dev.latency_ns,
                            bandwidth_per_sm=dev.bandwidth / dev.sm_count / 1e9)
    print("simulated (median measured compute, the table's latency and bandwidth):")
    print(simulate.timeline_text(sim, tiles=min(len(tiles), 12)))
    if args.png:
        print(f"wrote {simulate.timeline_png(sim, args.png, tiles=min(len(tiles), 12), measured=measured.events)}")
    return 0


def cmd_swizzle(args) -> int:
    from . import swizzle

    if len(args.box) != 2:
        raise AsyncCopyError(f"--box takes rows x cols (2D), got {'x'.join(map(str, args.box))}")
    print(swizzle.describe(args.box[0], args.box[1], args.dtype, args.mode, args.base, args.rows))
    return 0


def _print_model(result, compute, overheads, png=None):
    from .bench import model_check, report

    dev, rows = model_check.check(result, compute, overheads)
    print(f"model: bandwidth {dev.bandwidth / 1e9:.0f} GB/s (measured copy), latency {dev.latency_ns:.0f} ns "
          f"({dev.latency_source}), compute per tile (traced sync): "
          + ", ".join(f"{k}: {v:.0f} ns" for k, v in sorted(compute.items())))
    if overheads:
        print("each variant's own costs (traced, ns): compute at intensity 0 / top, issue per tile at intensity 0 / "
              "top, between computes")
    for label, ov in overheads.items():
        print(f"  {label:18s} {ov.compute_lo:6.0f} / {ov.compute_hi:6.0f}  issue {ov.issue_at(0):5.0f} / "
              f"{ov.issue_ns:5.0f}  between {ov.barrier_ns:5.0f}"
              + (f"  producer warp, handoff {ov.handoff_ns:5.0f}" if ov.producer else "")
              + ("  refills before it waits" if ov.issue_first else ""))
    print(report.table(rows, [("label", "mechanism", ""), ("intensity", "intensity", "d"),
                              ("recommended", "planned", "d"), ("best_stages", "best", "d"),
                              ("ratio", "planned/best", ".3f"), ("worst_error", "sim error", ".0%")]))
    ok = [r for r in rows if r.ratio is not None and r.ratio <= 1.05]
    print(f"planned stage count within 5% of the best: {len(ok)} of {len(rows)}; simulator within 25% of every "
          f"measured stage count: {sum(r.worst_error <= 0.25 for r in rows)} of {len(rows)}")
    if png:
        print(f"wrote {model_check.plot(result, compute, png, overheads)}")
    return dev, rows


def cmd_model_check(args) -> int:
    from .bench import model_check

    result, compute, overheads = model_check.load(args.file)
    _print_model(result, compute, {} if args.sync_only else overheads, args.png)
    return 0


def _model_check(result, intensities, png=None) -> dict:
    from .bench import model_check

    compute = model_check.measured_compute_ns(intensities, tile=result.tile, threads=result.threads,
                                              blocks_per_sm=result.blocks_per_sm)
    print(f"\nmodel check: tracing each variant at {model_check.OVERHEAD_STAGES} stages, intensity 0 and "
          f"{max(max(intensities), model_check.OVERHEAD_MIN_INTENSITY)} ...", flush=True)
    overheads = model_check.measured_overheads(result, max(intensities), progress=lambda t: print("  " + t, flush=True))
    dev, rows = _print_model(result, compute, overheads, png)
    return {"latency_ns": dev.latency_ns, "compute_ns": compute,
            "overheads": {label: ov.as_dict() for label, ov in overheads.items()}, "rows": rows}


def _bench_stas(args) -> int:
    from .bench import report, stas_bench

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
    _write(args, result.as_dict())
    return 0


def _bench_chunks(args) -> int:
    from .bench import report, stream_bench

    copy_gbps, rows = stream_bench.chunk_sweep(size_bytes=args.size_mib << 20, reps=args.reps, warmup=args.warmup)
    print(report.table(rows, [("chunk_bytes", "chunk B", "d"), ("mechanism", "mechanism", ""),
                              ("threads", "threads", "d"), ("stages", "stages", "d"),
                              ("blocks_per_sm", "blocks/SM", "d"), ("ms", "ms", ".3f"), ("gbps", "GB/s", ".0f"),
                              ("pct_copy", "% copy", ".1f")]))
    at = stream_bench.crossover(rows)
    print(f"\ndevice-to-device copy: {copy_gbps:.0f} GB/s")
    print(f"TMA (tma_1d_pipeline) >= LDGSTS (ldgsts vec16 .cg) from {at} B chunks on" if at else
          "TMA never overtakes LDGSTS for good in this sweep")
    _write(args, {"copy_gbps": copy_gbps, "rows": rows})
    return 0


def parser() -> argparse.ArgumentParser:
    from .bench import stas_bench, stream_bench  # their defaults are the CLI's

    p = argparse.ArgumentParser(prog="asynccopy", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="device, toolchain, and a compile of every kernel")
    info.add_argument("--arch", help="compile for this arch (e.g. sm_90a) without a GPU")
    info.set_defaults(fn=cmd_info)

    mech = sub.add_parser("mechanisms", help="list the tile-stream mechanisms and what each needs")
    mech.set_defaults(fn=cmd_mechanisms)

    tmap = sub.add_parser("tensormap", help="tensor maps (TMA descriptors)")
    tsub = tmap.add_subparsers(dest="tensormap_command", required=True)
    check = tsub.add_parser("check", help="validate a tensor map before any driver sees it (no GPU needed)")
    check.add_argument("--dtype", required=True, help="float32, bf16, float16, uint8, ...")
    check.add_argument("--shape", type=_shape, required=True, help="array shape, outermost first: 1024x1024")
    check.add_argument("--box", type=_shape, required=True, help="box, outermost first: 64x64")
    check.add_argument("--strides", type=_shape, default=None, help="byte strides, outermost first (default: dense)")
    check.add_argument("--element-strides", type=_shape, default=None)
    check.add_argument("--address", default="0", help="global address (default 0, i.e. aligned)")
    check.add_argument("--swizzle", default="none", help="none, 32B, 64B, 128B")
    check.add_argument("--interleave", default="none", help="none, 16B, 32B")
    check.add_argument("--oob-fill", default="zero", help="zero or nan")
    check.add_argument("--l2-promotion", default="none", help="none, 64B, 128B, 256B")
    check.add_argument("--smem-offset", type=int, default=None, help="also check a shared destination offset")
    check.add_argument("--no-lint", action="store_true", help="only the driver's own rules")
    check.set_defaults(fn=cmd_tensormap_check)

    swz = sub.add_parser("swizzle", help="a TMA swizzle's shared-memory layout and its bank conflicts")
    swz.add_argument("--mode", default="128B", help="none, 32B, 64B, 128B")
    swz.add_argument("--box", type=_shape, default=(64, 64), help="rows x cols")
    swz.add_argument("--dtype", default="bf16")
    swz.add_argument("--base", type=int, default=0, help="destination offset inside the swizzle repeat (bytes)")
    swz.add_argument("--rows", type=int, default=16, help="rows of the layout to print")
    swz.set_defaults(fn=cmd_swizzle)

    pl = sub.add_parser("plan", help="choose the stage count: shared memory, occupancy, Little's law (no GPU needed)")
    pl.add_argument("--operand", action="append", required=True, help="a tile per stage: NAME:128x32:bf16 (repeat)")
    pl.add_argument("--threads", type=int, default=256)
    pl.add_argument("--device", help="H200, H100-SXM, H100-PCIe, A100-40GB, A100-80GB, V100, L40S, RTX4090 "
                                     "(default: the local GPU)")
    pl.add_argument("--regs", type=int, default=None, help="registers per thread")
    pl.add_argument("--compute-ns", type=float, default=None, help="compute time per tile (enables predictions)")
    pl.add_argument("--blocks-per-sm", type=int, default=None, help="cap on resident blocks per SM")
    pl.add_argument("--max-stages", type=int, default=8)
    _add_cost_flags(pl)
    pl.set_defaults(fn=cmd_plan)

    sim = sub.add_parser("simulate", help="the pipeline model's timeline (text, or PNG with --png)")
    sim.add_argument("--stages", type=int, required=True)
    sim.add_argument("--tiles", type=int, default=32)
    sim.add_argument("--tile-bytes", type=int, default=16384)
    sim.add_argument("--compute-ns", type=float, required=True)
    sim.add_argument("--device", default=None, help="a table device (default: the local GPU)")
    sim.add_argument("--latency-ns", type=float, default=None)
    sim.add_argument("--bandwidth-gbps", type=float, default=None, help="device bandwidth (default: the table's)")
    sim.add_argument("--blocks-per-sm", type=int, default=1)
    _add_cost_flags(sim)
    sim.add_argument("--png", default=None)
    sim.set_defaults(fn=cmd_simulate)

    tr = sub.add_parser("trace", help="a traced run: measured per-tile timeline beside the simulator's (GPU)")
    tr.add_argument("--mechanism", default="ldgsts")
    tr.add_argument("--stages", type=int, default=None)
    tr.add_argument("--intensity", type=int, default=8)
    tr.add_argument("--tile", type=int, default=4096)
    tr.add_argument("--threads", type=int, default=256)
    tr.add_argument("--tiles", type=int, default=32, help="tiles per block (at most 64 are traced)")
    tr.add_argument("--block", type=int, default=0)
    tr.add_argument("--vec", type=int, default=None, help="copy width in bytes, where the mechanism takes one")
    tr.add_argument("--cache", default=None, help="ldgsts: ca or cg")
    tr.add_argument("--producers", type=int, default=None, help="ws_*: producer warps")
    tr.add_argument("--png", default=None)
    tr.set_defaults(fn=cmd_trace)

    bench = sub.add_parser("bench", help="every mechanism x stages x intensities on this GPU (the main job)")
    bench.add_argument("suite", nargs="?", default="stream", choices=("stream", "stas"),
                       help="stream: the tile-stream family (default); stas: the st.async cluster ring (CC 9.0)")
    bench.add_argument("--mechanisms", type=_names, default=None, help="comma-separated subset")
    bench.add_argument("--stages", type=_ints, default=stream_bench.DEFAULT_STAGES)
    bench.add_argument("--intensities", type=_ints, default=stream_bench.DEFAULT_INTENSITIES)
    bench.add_argument("--size-mib", type=int, default=1024, help="input size (the output is as large)")
    bench.add_argument("--reps", type=int, default=20)
    bench.add_argument("--warmup", type=int, default=3)
    bench.add_argument("--tile", type=int, default=4096, help="floats per tile")
    bench.add_argument("--threads", type=int, default=256)
    bench.add_argument("--blocks-per-sm", type=int, default=1, help="blocks of the persistent grid per SM")
    bench.add_argument("--tiles-per-block", type=int, default=0,
                       help="instead of a persistent grid, a block per this many contiguous tiles")
    bench.add_argument("--quick", action="store_true", help="stages 1,2,4,8, intensities 0,2,8, 10 reps")
    bench.add_argument("--plan", action="store_true",
                       help="also check the planner's stage counts and the simulator's times against the sweep")
    bench.add_argument("--chunks", action="store_true",
                       help="instead: the chunk-size sweep of LDGSTS against TMA bulk copies (CC 9.0)")
    bench.add_argument("--cluster-sizes", type=_ints, default=stas_bench.DEFAULT_CLUSTERS, help="stas: blocks per cluster")
    bench.add_argument("--message-bytes", type=_ints, default=stas_bench.DEFAULT_MESSAGES,
                       help="stas: bytes each block sends per round")
    bench.add_argument("--vec", type=int, default=16, help="stas: st.async width, 4, 8 or 16 bytes")
    bench.add_argument("--slots", type=int, default=2, help="stas: receive buffers per block, 1, 2 or 4")
    bench.add_argument("--png", default=None, help="stas: throughput against message size; --plan: the model "
                                                   "against the measured times, a panel per variant")
    bench.add_argument("--json", help="write every row (with samples) as JSON")
    bench.add_argument("--csv", help="write every row as CSV")
    bench.set_defaults(fn=cmd_bench)

    mc = sub.add_parser("model-check", help="check the model again on a `bench --plan --json` file (no GPU needed)")
    mc.add_argument("file")
    mc.add_argument("--sync-only", action="store_true",
                    help="ignore the variants' own costs: the traced sync compute only, no issue cost")
    mc.add_argument("--png", default=None, help="the model against the measured times, a panel per variant")
    mc.set_defaults(fn=cmd_model_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except AsyncCopyError as exc:
        print(f"asynccopy {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
