"""`asynccopy bench stas`: the STAS ring's throughput against cluster size and message size, beside
the same exchange through global memory with flags, in the same run.

Throughput counts the bytes every block receives: clusters x cluster size x rounds x message bytes per
launch, over the launch's median time (CUDA events). As many clusters as can be resident run at once
(the same number for both paths). Every launch's receivers check every word; a row with errors
raises instead of reporting a speed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import device, stas
from ..errors import ArgumentError, AsyncCopyError
from ..stas import VIAS
from .harness import Case, Skip, default_progress, median, sweep

DEFAULT_CLUSTERS = (2, 4, 8, 16)
DEFAULT_MESSAGES = (256, 1024, 4096, 16384, 65536)
TARGET_BYTES = 1 << 30  # received per launch, to size the rounds


@dataclass
class StasRow:
    cluster: int
    message_bytes: int
    via: str
    label: str
    vec: int
    slots: int
    clusters: int
    rounds: int
    ms: float
    gbps: float  # bytes received per second / 1e9, all blocks together
    us_per_round: float
    samples_ms: list[float]


@dataclass
class StasBench:
    device: dict
    rows: list[StasRow]

    def as_dict(self) -> dict:
        return asdict(self)


def rounds_for(blocks: int, message_bytes: int, *, target: int = TARGET_BYTES, lo: int = 20, hi: int = 4000) -> int:
    return max(lo, min(hi, target // max(1, blocks * message_bytes)))


def _case(c: int, m: int, s, *, vec: int, slots: int, threads: int, seed: int) -> Case:
    """Both paths of one (cluster, message) point: the rings are prepared before timing, with the same
    number of clusters (as many as both can hold resident at once), their error counters checked after."""
    rings = {}

    def prepare() -> None:
        clusters = []  # as many as can be resident, on both paths (the global ring spins on flags between blocks)
        for via in VIAS:
            try:
                probe = stas.prepare(c, m, 1, via=via, vec=vec, slots=slots, threads=threads, keep_last=False, stream=s)
            except ArgumentError as exc:  # e.g. 16 blocks of large buffers do not fit one GPC
                raise Skip(str(exc)) from None
            clusters.append(probe.clusters)
            probe.close()
        clusters = min(clusters)
        rounds = rounds_for(clusters * c, m)
        for via in VIAS:
            rings[via] = stas.prepare(c, m, rounds, via=via, vec=vec, slots=slots, threads=threads, clusters=clusters,
                                      keep_last=False, stream=s)

    def finish() -> None:
        for ring in rings.values():
            ring.close()

    def describe(got: dict) -> str:
        gbps = {via: rings[via].bytes_per_launch / (median(got[via]) * 1e-3) / 1e9 for via in VIAS}
        return (f"{rings['dsmem'].rounds} rounds x {rings['dsmem'].clusters} clusters: st.async {gbps['dsmem']:7.0f} "
                f"GB/s, global {gbps['global']:7.0f} GB/s ({gbps['dsmem'] / gbps['global']:.1f}x)")

    def run(via: str, r: int) -> None:
        rings[via].launch(seed=seed + r)

    def verify() -> None:  # a ring with errors raises instead of reporting a speed
        for ring in rings.values():
            ring.stream.sync()
            errors = ring.errors()  # over every launch, warm-up included
            if errors:
                raise AsyncCopyError(f"{ring.cfg.label()} ring, cluster {c}, {m} B messages: {errors} words "
                                     f"received wrong")

    return Case(f"cluster {c:2d}, {m:6d} B", VIAS, prepare, run, verify, finish, describe, tag=rings)


def run(cluster_sizes=DEFAULT_CLUSTERS, message_sizes=DEFAULT_MESSAGES, *, vec: int = 16, slots: int = 2,
        threads: int = 256, reps: int = 10, warmup: int = 2, seed: int = 1, progress=default_progress) -> StasBench:
    facts = device.require((9, 0), "asynccopy bench stas")
    from cuda.core import Device

    s = Device(facts.device_id).create_stream()
    cases = [_case(c, m, s, vec=vec, slots=slots, threads=threads, seed=seed)
             for c in cluster_sizes for m in message_sizes]
    try:
        timed = sweep(cases, s, warmup=warmup, reps=reps, progress=progress)
    finally:
        s.close()
    rows = []
    for t in timed:
        ring = t.case.tag[t.point]
        cfg = ring.cfg
        rows.append(StasRow(cfg.cluster, cfg.message_bytes, cfg.via, cfg.label(), vec, slots, ring.clusters,
                            ring.rounds, t.ms, ring.bytes_per_launch / (t.ms * 1e-3) / 1e9, t.ms * 1e3 / ring.rounds,
                            t.samples))
    return StasBench(facts.as_dict(), rows)


def speedups(result: StasBench) -> list[dict]:
    """Per (cluster, message): st.async throughput over the global-memory ring's."""
    by = {(r.cluster, r.message_bytes, r.via): r for r in result.rows}
    out = []
    for (c, m, via), r in sorted(by.items()):
        if via == "dsmem" and (c, m, "global") in by:
            g = by[(c, m, "global")]
            out.append({"cluster": c, "message_bytes": m, "dsmem_gbps": r.gbps, "global_gbps": g.gbps,
                        "ratio": r.gbps / g.gbps, "dsmem_us_per_round": r.us_per_round,
                        "global_us_per_round": g.us_per_round})
    return out


def plot(result: StasBench, path: str) -> str:
    """Throughput against message size, a line per cluster size: solid st.async, dashed global memory."""
    from ..plotting import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    sizes = sorted({r.cluster for r in result.rows})
    colors = plt.get_cmap("viridis")([i / max(1, len(sizes) - 1) * 0.85 for i in range(len(sizes))])
    for color, c in zip(colors, sizes):
        for via, style in (("dsmem", "-"), ("global", "--")):
            pts = sorted((r.message_bytes, r.gbps) for r in result.rows if r.cluster == c and r.via == via)
            if pts:
                ax.plot(*zip(*pts), style, marker="o", color=color,
                        label=f"cluster {c}, {'st.async (DSMEM)' if via == 'dsmem' else 'global + flags'}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message bytes per block per round")
    ax.set_ylabel("GB/s received (all blocks)")
    ax.set_title(f"STAS ring vs global memory, {result.device.get('name', '')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
