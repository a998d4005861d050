"""The wgmma attention kernel's timeline, measured inside it and drawn beside the pipeline model's.

A traced build (``-DASYNCCOPY_TRACE=1``, attention_wgmma.cu) records clock64 per K/V tile, for the first
MAX_TILES tiles of every block: the producer's issue of K and of V, and per consumer warpgroup when K was
there (its wait returned: S = Q K^T starts), when S was done, when the softmax was done (P in
registers), when V was there, and when O += P V was done. Two %globaltimer / clock64 pairs per block
convert ticks to nanoseconds on one time axis, as asynccopy.trace does for the tile-stream kernels.

    cfg, blocks = attention_trace.run(batch=1, heads=16, q_len=4096, k_len=4096, head_dim=128)
    attention_trace.timeline_png(blocks[0], "attention.png", stages=cfg.stages, head_dim=128)  # + the model's
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from . import arrays, device
from .errors import ArgumentError, AsyncCopyError, check_int
from .model import simulate
from .trace import clocked_blocks

# the kernel's layout (attention_wgmma.cu: TRACE_TILES, PRODUCER_EVENTS, CONSUMER_EVENTS, TILE_WORDS_OF,
# TRACE_STRIDE_OF): per block a header of 4 words, then per tile PRODUCER_EVENTS + consumers x CONSUMER_EVENTS
# words, for the block's consumer warpgroups (AttentionConfig.consumers: 3 at head dim 64, 2 at 128)
MAX_TILES = 64
HEADER = 4
PRODUCER_EVENTS = ("k_issued", "v_issued")
CONSUMER_EVENTS = ("k_ready", "s_done", "softmax_done", "v_ready", "pv_done")


def tile_words(consumers: int) -> int:
    return len(PRODUCER_EVENTS) + consumers * len(CONSUMER_EVENTS)


def stride(consumers: int) -> int:
    return HEADER + MAX_TILES * tile_words(consumers)


@dataclass
class ConsumerTile:
    """One consumer warpgroup's events for one K/V tile, in ns on the launch's time axis."""

    tile: int
    k_ready: float
    s_done: float
    softmax_done: float
    v_ready: float
    pv_done: float


@dataclass
class AttentionBlockTrace:
    block: int  # linear block index over the (query tiles, heads, batch) grid
    k_issued: dict[int, float]  # tile -> ns
    v_issued: dict[int, float]
    consumers: list[list[ConsumerTile]] = field(default_factory=list)  # per warpgroup, in tile order
    start: float = math.nan  # ns: the block's first instruction (its start mark)
    end: float = math.nan  # ns: its last warpgroup's epilogue done (its end mark)

    def tiles(self) -> int:
        return max((len(c) for c in self.consumers), default=0)


def buffer_words(blocks: int, consumers: int) -> int:
    return blocks * stride(consumers)


def decode(raw: np.ndarray, blocks: int, consumers: int) -> list[AttentionBlockTrace]:
    """Every block's trace that recorded one; a tile a consumer did not finish is left out."""
    out = []
    header = np.asarray(raw, dtype=np.uint64)[: blocks * stride(consumers)].reshape(-1, stride(consumers))[:, :HEADER]
    for b, words, ns, _ in clocked_blocks(raw, blocks, stride(consumers)):
        ev = words.reshape(MAX_TILES, tile_words(consumers))
        trace = AttentionBlockTrace(b, {}, {}, [[] for _ in range(consumers)], ns(header[b, 1]), ns(header[b, 3]))
        for j in range(MAX_TILES):
            if ev[j, 0]:
                trace.k_issued[j] = ns(ev[j, 0])
            if ev[j, 1]:
                trace.v_issued[j] = ns(ev[j, 1])
            for w in range(consumers):
                stamps = ev[j, len(PRODUCER_EVENTS) + w * len(CONSUMER_EVENTS):][: len(CONSUMER_EVENTS)]
                if all(stamps):
                    trace.consumers[w].append(ConsumerTile(j, *(ns(x) for x in stamps)))
        out.append(trace)
    return out


def check_variant(variant: str | None, head_dim: int) -> tuple:
    """The -D macros of the wgmma kernel's compile-time variant ``variant`` (attention_kernels.VARIANTS; None:
    the default build, no macros), checked against the head dim it builds at."""
    from .attention_kernels import PERSISTENT_KNOB, VARIANT_HEAD_DIMS, VARIANTS

    if variant is None:
        return ()
    known = VARIANTS["wgmma"]
    if variant not in known:
        raise ArgumentError(f"unknown wgmma variant {variant!r}; known: {', '.join(sorted(known))}")
    if head_dim not in VARIANT_HEAD_DIMS.get(variant, (head_dim,)):
        raise ArgumentError(f"variant {variant!r} builds at head dim {', '.join(map(str, VARIANT_HEAD_DIMS[variant]))} "
                            f"only, got {head_dim}")
    if dict(known[variant]).get(PERSISTENT_KNOB):
        raise ArgumentError(f"variant {variant!r} cannot be traced: a traced build follows one item a block (a causal "
                            "problem's trace, too, shows that build, not its persistent default)")
    return known[variant]


def run(*, batch: int = 1, heads: int = 16, kv_heads: int | None = None, q_len: int = 4096, k_len: int | None = None,
        head_dim: int = 128, causal: bool = False, stages: int | None = None, dtype: str = "bfloat16",
        seed: int = 1, variant: str | None = None) -> tuple[object, list[AttentionBlockTrace]]:
    """Run the traced wgmma kernel once on fresh random inputs (its output checked against the untraced
    default kernel's: neither the trace nor a ``variant``, a compile-time build of attention_kernels.VARIANTS
    on top of the launch's own configuration, may change the result beyond rounding); returns (its
    configuration, the block traces)."""
    import dataclasses

    from . import sdpa as att
    from .attention_kernels import KERNELS
    defines = check_variant(variant, head_dim)
    k_len = q_len if k_len is None else k_len
    kv_heads = heads if kv_heads is None else kv_heads
    for value, name in ((batch, "batch"), (heads, "heads"), (kv_heads, "kv_heads"), (q_len, "q_len"),
                        (k_len, "k_len")):
        check_int(value, name, 1, 1 << 24)
    facts = device.require(KERNELS["wgmma"].min_cc, "asynccopy trace attention")
    try:
        import torch
    except ImportError:
        raise AsyncCopyError("trace attention makes its inputs with PyTorch, which is not installed") from None
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)
    q = torch.randn(batch, heads, q_len, head_dim, device="cuda", generator=gen).to(tdt)
    k = torch.randn(batch, kv_heads, k_len, head_dim, device="cuda", generator=gen).to(tdt)
    v = torch.randn(batch, kv_heads, k_len, head_dim, device="cuda", generator=gen).to(tdt)
    want = att.attention(q, k, v, causal=causal, kernel="wgmma", stages=stages)
    s = arrays.resolve_stream(None, q)
    tq, tk, tv = (att.tensor4(x, n, stream=s) for n, x in (("q", q), ("k", k), ("v", v)))
    p = att.check_inputs(tq, tk, tv)
    cfg = dataclasses.replace(att.configure(p, facts, kernel="wgmma", stages=stages, causal=causal).with_defines(defines),
                              trace=True)
    got = torch.empty_like(q)
    to = att.Tensor4("out", tuple(got.shape), tuple(got.stride()), p.dtype, got.data_ptr(), tq.device_id)
    blocks = -(-q_len // cfg.tile[0]) * heads * batch
    buf = torch.zeros(buffer_words(blocks, cfg.consumers), dtype=torch.int64, device="cuda")
    att.launch(cfg, p, tq, tk, tv, to, 0, 1.0 / head_dim ** 0.5, stream=s, facts=facts, trace_ptr=buf.data_ptr())
    s.sync()
    # the same arithmetic (the compiler may schedule the two builds apart: within rounding, not bitwise)
    if got.isnan().any() or not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-3):
        raise AsyncCopyError("the traced wgmma attention kernel computed another result than the untraced one")
    return cfg, decode(buf.cpu().numpy().view(np.uint64), blocks, cfg.consumers)


def summary(block: AttentionBlockTrace) -> dict[str, float]:
    """Medians over the block's tiles and consumers (ns): waiting for K, Q K^T, softmax, P V (from V there
    or the softmax done, whichever is later), and a tile's whole span (K there to P V done)."""
    tiles = [t for c in block.consumers for t in c]
    if not tiles:
        raise ArgumentError(f"block {block.block} recorded no finished tile")
    by = {t.tile: block.k_issued.get(t.tile) for t in tiles}
    return {
        "load_ns": statistics.median(t.k_ready - by[t.tile] for t in tiles if by[t.tile] is not None),
        "qk_ns": statistics.median(t.s_done - t.k_ready for t in tiles),
        "softmax_ns": statistics.median(t.softmax_done - t.s_done for t in tiles),
        "pv_ns": statistics.median(t.pv_done - max(t.v_ready, t.softmax_done) for t in tiles),
        "tile_ns": statistics.median(t.pv_done - t.k_ready for t in tiles),
    }


ITEM_COSTS = ("start_to_k_issue", "start_to_k_ready", "steady_tile", "last_tile", "epilogue", "span", "fixed",
              "tiles")


def item_costs(blocks: list[AttentionBlockTrace]) -> dict[str, float]:
    """Where an item's (a block's) time goes, as medians over ``blocks`` (ns; ``tiles`` a count): its start to the
    producer's first K issue and to the first consumer's K there; a steady tile (K there to the next K there, per
    warpgroup, the first and last two tiles left out); the last tile (its K there to its P V done); its last P V to
    its end (the epilogue); its whole span; the span less its tiles x its steady tile (the item's fixed cost); and,
    as ``gap``, how long after the nearest earlier block end a block starts (the launch's cost of a new block on a
    freed SM). Blocks with fewer than 4 finished tiles are left out."""
    rows: dict[str, list[float]] = {k: [] for k in ITEM_COSTS}
    for blk in blocks:
        cons = [c for c in blk.consumers if c]
        n = min((len(c) for c in cons), default=0)
        if n < 4 or math.isnan(blk.start) or math.isnan(blk.end) or 0 not in blk.k_issued:
            continue
        steady = statistics.median(c[j + 1].k_ready - c[j].k_ready for c in cons for j in range(1, n - 2))
        rows["start_to_k_issue"].append(blk.k_issued[0] - blk.start)
        rows["start_to_k_ready"].append(min(c[0].k_ready for c in cons) - blk.start)
        rows["steady_tile"].append(steady)
        rows["last_tile"].append(statistics.median(c[n - 1].pv_done - c[n - 1].k_ready for c in cons))
        rows["epilogue"].append(blk.end - max(c[n - 1].pv_done for c in cons))
        rows["span"].append(blk.end - blk.start)
        rows["fixed"].append(blk.end - blk.start - n * steady)
        rows["tiles"].append(n)
    if not rows["span"]:
        raise ArgumentError("no traced block finished 4 tiles with its start and end marks: trace longer sequences")
    out = {k: statistics.median(v) for k, v in rows.items()}
    ends = sorted(b.end for b in blocks if not math.isnan(b.end))
    gaps = []
    for b in blocks:
        i = bisect.bisect_left(ends, b.start)
        if i > 0:
            gaps.append(b.start - ends[i - 1])
    out["gap"] = statistics.median(gaps) if gaps else math.nan
    return out


def simulated(block: AttentionBlockTrace, stages: int, head_dim: int, facts=None, memory="cached",
              keys: int | None = None) -> simulate.Simulation:
    """The pipeline model's prediction for the block, with what the planner is given
    (attention_kernels.model_inputs): a producer refilling a stage of K and V (of ``keys`` keys each, the
    configuration's AttentionConfig.keys) as each tile is released, the compute per tile the measured
    median span of a tile (the consumers work on the same tiles side by side)."""
    from .attention_kernels import KERNELS, model_inputs

    facts = facts or device.current()
    rec = KERNELS["wgmma"]
    dev, costs, bandwidth = model_inputs(rec, head_dim, facts, memory)
    return simulate.simulate(stages, max(1, block.tiles()), tile_bytes=rec.stage_bytes(head_dim, keys=keys),
                             compute_ns=summary(block)["tile_ns"], latency_ns=dev.latency_ns,
                             bandwidth_per_sm=bandwidth / facts.sm_count / 1e9, out_bytes=0.0, costs=costs)


def timeline_png(block: AttentionBlockTrace, path: str, *, stages: int, head_dim: int, facts=None,
                 tiles: int = 12, keys: int | None = None) -> str:
    """The measured timeline, a row per consumer warpgroup (Q K^T, softmax, P V per tile) under the K/V
    loads (issue to the first consumer's wait returning), above the model's prediction (loads per
    stage, compute)."""
    from .plotting import pyplot

    plt = pyplot()
    n_wg = len(block.consumers)
    sim = simulated(block, stages, head_dim, facts, keys=keys)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 5.2), gridspec_kw={"height_ratios": [3, 2]})
    first = [t for t in block.consumers[0][:tiles]]
    t0 = min([block.k_issued.get(t.tile, t.k_ready) for t in first] or [0.0])
    end = max((t.pv_done for c in block.consumers for t in c[:tiles]), default=t0)
    for t in first:
        issued = block.k_issued.get(t.tile)
        if issued is not None:
            ax.broken_barh([((issued - t0) / 1e3, (t.k_ready - issued) / 1e3)], (2 * n_wg, 0.8),
                           color="tab:blue", edgecolor="white")
    colors = {"Q K^T": "tab:orange", "softmax": "tab:green", "P V": "tab:red"}
    for w, tiles_w in enumerate(block.consumers):
        y = 2 * (n_wg - 1 - w)
        for t in tiles_w[:tiles]:
            pv0 = max(t.v_ready, t.softmax_done)
            for (a, b), name in (((t.k_ready, t.s_done), "Q K^T"), ((t.s_done, t.softmax_done), "softmax"),
                                 ((pv0, t.pv_done), "P V")):
                ax.broken_barh([((a - t0) / 1e3, max(b - a, 0) / 1e3)], (y, 0.8), color=colors[name], edgecolor="white")
    ax.set_yticks([2 * (n_wg - 1 - w) + 0.4 for w in range(n_wg)] + [2 * n_wg + 0.4],
                  [f"consumer {w}" for w in range(n_wg)] + ["K load"])
    ax.set_xlim(0, (end - t0) / 1e3 * 1.02 if end > t0 else 1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()] + [plt.Rectangle((0, 0), 1, 1,
                                                                                               color="tab:blue")]
    ax.legend(handles, list(colors) + ["K issued -> there"], fontsize=7, loc="upper right", ncol=4)
    ax.set_title(f"measured: block {block.block}, first {min(tiles, block.tiles())} K/V tiles, {stages} stage(s)")
    for e in sim.events[:tiles]:
        row = e.tile % stages
        bx.broken_barh([(e.issued / 1e3, (e.ready - e.issued) / 1e3)], (row + 1, 0.8), color="tab:blue",
                       edgecolor="white")
        bx.broken_barh([(e.compute_start / 1e3, (e.compute_end - e.compute_start) / 1e3)], (0, 0.8),
                       color="tab:gray", edgecolor="white")
    bx.set_yticks([0.4] + [s + 1.4 for s in range(stages)], ["compute"] + [f"load[{s}]" for s in range(stages)])
    bx.set_xlabel("us")
    bx.set_title("the pipeline model: a producer refilling each stage on release, the measured span per tile")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
