"""`asynccopy plan | simulate | trace [attention] | model-check | calibrate`: the pipeline model from the
command line."""

from __future__ import annotations

import statistics

from .. import device
from ..bench import report
from ..errors import ArgumentError, check_float, check_int
from . import common


def add(sub) -> None:
    names = ", ".join(device.KNOWN)
    pl = sub.add_parser("plan", help="choose the stage count: shared memory, occupancy, Little's law (no GPU needed)")
    pl.add_argument("--operand", action="append", required=True, help="a tile per stage: NAME:128x32:bf16 (repeat)")
    pl.add_argument("--threads", type=int, default=256)
    pl.add_argument("--device", help=f"{names} (default: the local GPU)")
    pl.add_argument("--regs", type=int, default=None, help="registers per thread")
    pl.add_argument("--compute-ns", type=float, default=None, help="compute time per tile (enables predictions)")
    pl.add_argument("--blocks-per-sm", type=int, default=None, help="cap on resident blocks per SM")
    pl.add_argument("--max-stages", type=int, default=8)
    common.add_cost_flags(pl)
    pl.set_defaults(fn=cmd_plan)

    sim = sub.add_parser("simulate", help="the pipeline model's timeline (text, or PNG with --png)")
    sim.add_argument("--stages", type=int, required=True)
    sim.add_argument("--tiles", type=int, default=32)
    sim.add_argument("--tile-bytes", type=int, default=16384)
    sim.add_argument("--compute-ns", type=float, required=True)
    sim.add_argument("--device", default=None, help=f"{names} (default: the local GPU)")
    sim.add_argument("--latency-ns", type=float, default=None, help="default: the device's")
    sim.add_argument("--bandwidth-gbps", type=float, default=None, help="device bandwidth (default: the device's)")
    sim.add_argument("--blocks-per-sm", type=int, default=1)
    common.add_cost_flags(sim)
    sim.add_argument("--png", default=None)
    sim.set_defaults(fn=cmd_simulate)

    _add_trace(sub)

    mc = sub.add_parser("model-check", help="check the model again on a `bench stream --plan --json` file (no GPU)")
    mc.add_argument("file")
    mc.add_argument("--sync-only", action="store_true",
                    help="ignore the variants' own costs: the traced baseline compute only, no issue cost")
    mc.add_argument("--png", default=None, help="the model against the measured times, a panel per variant")
    mc.add_argument("--fixed-latency", action="store_true",
                    help="ignore the file's memory curve: one latency fitted to sync, as for an uncalibrated GPU")
    mc.set_defaults(fn=cmd_model_check)

    cal = sub.add_parser("calibrate", help="measure how this GPU's memory answers load, keep the curve (GPU)")
    cal.add_argument("--recalibrate", action="store_true", help="measure again even if a curve is cached")
    cal.add_argument("--show", action="store_true", help="print the cached curve and its check; measure nothing")
    common.add_output_flags(cal)
    cal.set_defaults(fn=cmd_calibrate)


def _add_trace(sub) -> None:
    tr = sub.add_parser("trace", help="a traced run: measured per-tile timeline beside the simulator's (GPU)")
    tr.add_argument("what", nargs="?", choices=("stream", "attention"), default="stream",
                    help="a tile-stream mechanism (default), or the wgmma attention kernel")
    tr.add_argument("--mechanism", default="ldgsts")
    tr.add_argument("--stages", type=int, default=None)
    tr.add_argument("--intensity", type=int, default=8)
    tr.add_argument("--tile", type=int, default=4096)
    tr.add_argument("--threads", type=int, default=256)
    tr.add_argument("--tiles", type=int, default=32, help="tiles per block (at most 64 are traced)")
    tr.add_argument("--block", type=int, default=0)
    tr.add_argument("--vec", type=int, default=None, help="copy width in bytes, where the mechanism takes one")
    tr.add_argument("--cache", default=None, help="ldgsts: ca or cg")
    tr.add_argument("--producers", type=int, default=None, help="warp-specialized mechanisms: producer warps")
    tr.add_argument("--png", default=None)
    att = tr.add_argument_group("attention (trace attention)")
    att.add_argument("--batch", type=int, default=1)
    att.add_argument("--heads", type=int, default=16)
    att.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    att.add_argument("--seq", type=int, default=4096, help="query length")
    att.add_argument("--k-len", type=int, default=None, help="key length (default: --seq)")
    att.add_argument("--head-dim", type=int, default=128)
    att.add_argument("--causal", action="store_true")
    att.add_argument("--variant", default=None,
                     help="a compile-time build of the kernel to trace in place of its default (bench attention "
                          "--variants names them: serial, overlap, pingpong, ...)")
    att.add_argument("--dtype", default="bfloat16")
    tr.set_defaults(fn=cmd_trace)


def _table_device(name):
    if name is not None:
        return device.lookup(name)
    if device.has_gpu():
        return device.current()
    print("no local GPU: planning for the H200 (pass --device to choose)")
    return device.lookup("H200")


def cmd_plan(args) -> int:
    from ..model import planner

    costs = common.costs(args)
    check_int(args.threads, "--threads", 32, 1024)
    if args.regs is not None:
        check_int(args.regs, "--regs", 1, 255)
    if args.blocks_per_sm is not None:
        check_int(args.blocks_per_sm, "--blocks-per-sm", 1, 64)
    check_int(args.max_stages, "--max-stages", 1, planner.MAX_PLANNED_STAGES)
    if args.compute_ns is not None:
        check_float(args.compute_ns, "--compute-ns", 0.0)
    operands = [planner.Operand.parse(o) for o in args.operand]
    p = planner.plan(operands, threads=args.threads, device=_table_device(args.device), regs_per_thread=args.regs,
                     compute_ns=args.compute_ns, blocks_per_sm=args.blocks_per_sm, max_stages=args.max_stages,
                     costs=costs)
    print(p.report())
    return 0


MAX_SIMULATED_TILES = 100_000  # about a second of simulation


def cmd_simulate(args) -> int:
    from ..model import simulate

    costs = common.costs(args)
    check_int(args.stages, "--stages", 1, 64)
    check_int(args.tiles, "--tiles", 1, MAX_SIMULATED_TILES)
    check_int(args.tile_bytes, "--tile-bytes", 1, 1 << 30)
    check_int(args.blocks_per_sm, "--blocks-per-sm", 1, 64)
    check_float(args.compute_ns, "--compute-ns", 0.0)
    if args.latency_ns is not None:
        check_float(args.latency_ns, "--latency-ns", 0.0)
    if args.bandwidth_gbps is not None:
        check_float(args.bandwidth_gbps, "--bandwidth-gbps", 0.0, above=True)
    if args.png:
        common.check_png(args.png)
    dev = device.lookup(args.device) if args.device else device.current()
    bw = (dev.bandwidth / 1e9 if args.bandwidth_gbps is None else args.bandwidth_gbps) / dev.sm_count
    latency = dev.latency_ns if args.latency_ns is None else args.latency_ns
    sim = simulate.simulate(args.stages, args.tiles, tile_bytes=args.tile_bytes, compute_ns=args.compute_ns,
                            latency_ns=latency, bandwidth_per_sm=bw, blocks=args.blocks_per_sm, costs=costs)
    print(f"{dev.name}: {bw:.1f} GB/s per SM, latency {latency:.0f} ns, "
          f"tile {args.tile_bytes} B in + out, compute {args.compute_ns:.0f} ns per tile")
    print(simulate.timeline_text(sim, tiles=min(args.tiles, 12)))
    if args.png:
        print(f"wrote {simulate.timeline_png(sim, args.png, tiles=min(args.tiles, 12))}")
    return 0


def cmd_trace(args) -> int:
    if args.what == "attention":
        return _trace_attention(args)
    from .. import trace
    from ..model import simulate

    opts = {k: v for k, v in (("vec", args.vec), ("cache", args.cache), ("producers", args.producers)) if v is not None}
    check_int(args.block, "--block", 0)
    check_int(args.tiles, "--tiles", 1, trace.MAX_TILES)
    if args.png:
        common.check_png(args.png)
    trace.check_args(args.mechanism, args.stages, intensity=args.intensity, tile=args.tile, threads=args.threads, **opts)
    cfg, blocks = trace.run(args.mechanism, args.stages, intensity=args.intensity, tile=args.tile,
                            threads=args.threads, tiles_per_block=args.tiles, **opts)
    block = next((b for b in blocks if b.block == args.block), None)
    if block is None:
        raise ArgumentError(f"--block {args.block}: the trace holds blocks 0..{len(blocks) - 1}")
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
    dev = device.current()
    sim = simulate.simulate(cfg.stages, len(tiles), tile_bytes=cfg.tile * 4, compute_ns=compute, latency_ns=dev.latency_ns,
                            bandwidth_per_sm=dev.bandwidth / dev.sm_count / 1e9)
    print("simulated (median measured compute, the table's latency and bandwidth):")
    print(simulate.timeline_text(sim, tiles=min(len(tiles), 12)))
    if args.png:
        print(f"wrote {simulate.timeline_png(sim, args.png, tiles=min(len(tiles), 12), measured=measured.events)}")
    return 0


def _trace_attention(args) -> int:
    from .. import attention_trace
    from ..attention_kernels import DTYPES, KERNELS
    from ..errors import AsyncCopyError

    for name in ("batch", "heads", "seq"):
        check_int(getattr(args, name), f"--{name}", 1, 1 << 24)
    for name in ("kv_heads", "k_len"):
        if getattr(args, name) is not None:
            check_int(getattr(args, name), f"--{name.replace('_', '-')}", 1, 1 << 24)
    if args.head_dim not in KERNELS["wgmma"].head_dims:
        raise AsyncCopyError(f"--head-dim must be one of {', '.join(map(str, KERNELS['wgmma'].head_dims))}, "
                             f"got {args.head_dim}")
    if args.dtype not in DTYPES:
        raise AsyncCopyError(f"--dtype must be one of {', '.join(DTYPES)}, got {args.dtype!r}")
    if args.stages is not None:
        check_int(args.stages, "--stages", 1, KERNELS["wgmma"].max_stages)
    check_int(args.block, "--block", 0)
    check_int(args.tiles, "--tiles", 1, attention_trace.MAX_TILES)
    attention_trace.check_variant(args.variant, args.head_dim)
    if args.png:
        common.check_png(args.png)
    cfg, blocks = attention_trace.run(batch=args.batch, heads=args.heads, kv_heads=args.kv_heads, q_len=args.seq,
                                      k_len=args.k_len, head_dim=args.head_dim, causal=args.causal, stages=args.stages,
                                      dtype=args.dtype, variant=args.variant)
    block = next((b for b in blocks if b.block == args.block), None)
    if block is None:
        raise AsyncCopyError(f"--block {args.block}: the trace holds blocks 0..{len(blocks) - 1}")
    med = attention_trace.summary(block)
    print(f"wgmma attention, {cfg.stages} stage(s), head dim {cfg.head_dim}{', causal' if cfg.causal else ''}, block "
          f"{block.block}: {block.tiles()} K/V tiles traced; medians: K issued -> there {med['load_ns']:.0f} ns, "
          f"Q K^T {med['qk_ns']:.0f} ns, softmax {med['softmax_ns']:.0f} ns, P V {med['pv_ns']:.0f} ns, "
          f"a tile {med['tile_ns']:.0f} ns")
    try:  # an item's fixed cost, over every block of the launch (none with fewer than 4 tiles an item)
        it = attention_trace.item_costs(blocks)
    except ArgumentError:
        it = None
    if it is not None:
        print(f"an item (a block), medians over the launch's blocks: its start -> the first K issued "
              f"{it['start_to_k_issue']:.0f} ns, -> the first K there {it['start_to_k_ready']:.0f} ns; a steady tile "
              f"{it['steady_tile']:.0f} ns, the last {it['last_tile']:.0f} ns, the epilogue {it['epilogue']:.0f} ns; "
              f"span {it['span']:.0f} ns over {it['tiles']:.0f} tiles, of which fixed (span - tiles x a steady tile) "
              f"{it['fixed']:.0f} ns; a block starts {it['gap']:.0f} ns after the one before it on its SM ends")
    if args.png:
        path = attention_trace.timeline_png(block, args.png, stages=cfg.stages, head_dim=cfg.head_dim, tiles=args.tiles,
                                            keys=cfg.keys)
        print(f"wrote {path}")
    return 0


def print_model(result, compute, overheads, png=None, fit=None):
    """The model check's table and verdict (and its plot). ``fit``: the memory calibration
    (asynccopy.model.memory.Fit) the model uses; None: one latency fitted to `sync`."""
    from ..bench import model_check

    curve = fit.curve if fit else None
    dev, rows = model_check.check(result, compute, overheads, curve)
    if png:
        from .common import check_png

        check_png(png)
    memory_text = (f"memory curve (unloaded latency {curve.latency_ns:.0f} ns, {curve.rate:.1f} B/ns per SM, knee "
                   f"{curve.knee:.2f})" if curve else f"latency {dev.latency_ns:.0f} ns ({dev.latency_source})")
    print(f"model: bandwidth {dev.bandwidth / 1e9:.0f} GB/s (measured copy), {memory_text}, compute per tile "
          f"(traced baseline): " + ", ".join(f"{k}: {v:.0f} ns" for k, v in sorted(compute.items())))
    if overheads:
        print("each variant's own costs (traced, ns): compute at intensity 0 / top, issue per tile at intensity 0 / "
              "top, between computes, the trace's own cost a tile (traced build against untraced, taken off the "
              "simulated compute)")
    for label, ov in overheads.items():
        print(f"  {label:18s} {ov.compute_lo:6.0f} / {ov.compute_hi:6.0f}  issue {ov.issue_at(0):5.0f} / "
              f"{ov.issue_ns:5.0f}  between {ov.barrier_ns:5.0f}  trace {ov.trace_ns:5.0f}"
              + (f"  producer warp, handoff {ov.handoff_ns:5.0f}" if ov.producer else "")
              + ("  refills before it waits" if ov.issue_first else ""))
    print(report.table(rows, [("label", "mechanism", ""), ("intensity", "intensity", "d"),
                              ("recommended", "planned", "d"), ("best_stages", "best", "d"),
                              ("ratio", "planned/best", ".3f"), ("worst_error", "sim error", ".0%")]))
    groups = [("all pairs", rows)]
    if fit is not None:
        fitted = model_check.in_calibration(result, {c.regime for c in fit.fitted})
        print(f"this run's regime (tile {result.tile}, {result.threads} threads, {result.blocks_per_sm} block(s) per "
              f"SM) was {'among' if fitted else 'not among'} the memory curve's fitted regimes: its pairs are "
              f"{'not ' if fitted else ''}held out")
        groups.append(("held out from the memory curve's fit", [] if fitted else rows))
    for title, group in groups:
        plan_ok, sim10, sim25, n = model_check.summary_counts(group)
        print(f"{title}: planned stage count within 5% of the best {plan_ok} of {n}; simulator within 10% of every "
              f"measured stage count {sim10} of {n} (within 25%: {sim25})")
    unmeasured = sum(r.ratio is None for r in rows)
    if unmeasured:
        print(f"{unmeasured} planned stage count(s) not measured (not counted as within 5%)")
    if png:
        from ..bench import model_plot

        print(f"wrote {model_plot.plot(result, compute, png, overheads, curve)}")
    return dev, rows


def cmd_model_check(args) -> int:
    from ..bench import plan_file

    if args.png:
        common.check_png(args.png)
    result, compute, overheads = plan_file.load(args.file)
    fit = None if args.fixed_latency else plan_file.load_memory(args.file)
    print_model(result, compute, {} if args.sync_only else overheads, args.png, fit)
    return 0


def cmd_calibrate(args) -> int:
    from ..bench import memory_calibration
    from ..errors import AsyncCopyError
    from ..model import memory

    common.check_outputs(args)
    if args.show and args.recalibrate:
        raise AsyncCopyError("--show measures nothing: it cannot be combined with --recalibrate")
    if args.show:
        fit = memory.cached(device.current())
        if fit is None:
            raise AsyncCopyError("no memory curve is cached for this GPU: run `asynccopy calibrate`")
    else:
        fit, fresh = memory_calibration.calibration(recalibrate=args.recalibrate, progress=print)
        if not fresh:
            print("cached for this GPU (--recalibrate measures again):")
    for line in fit.report():
        print(line)
    rows = [{"regime": c.regime, "held_out": held, "in_flight": c.in_flight, "measured_ns": c.measured_ns,
             "predicted_ns": c.predicted_ns, "error": c.error}
            for held, checks in ((False, fit.fitted), (True, fit.held_out)) for c in checks]
    common.write(args, {**fit.as_dict(), "rows": rows})
    return 0
