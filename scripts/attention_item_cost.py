"""Where a short attention item's time goes: the traced wgmma kernel's per-block timeline (its start and end marks
and every K/V tile's events), summarised over all blocks of one launch (H200 figures in docs/design.md, 11b).

    python3 scripts/attention_item_cost.py [--seq 2048] [--head-dim 128] [--batch 4] [--heads 16] [--causal]

Prints, as medians over the blocks: the block's start to the producer's first K issue, to the first consumer's K
there; the first tile's Q K^T and softmax; a steady tile (K there to K there, per warpgroup); the last P V to the
block's end (the epilogue); the block's whole span against its tiles x the steady tile (the fixed cost of an item);
and the gap from one block's end to the next block's start on a freed SM (the nearest earlier end)."""

from __future__ import annotations

import argparse
import bisect
import statistics

import numpy as np

from asynccopy import attention_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    raw_of = {}
    decode = attention_trace.decode

    def keep(raw, blocks, consumers):
        raw_of["raw"], raw_of["consumers"] = np.asarray(raw, dtype=np.uint64), consumers
        return decode(raw, blocks, consumers)

    attention_trace.decode = keep
    cfg, blocks = attention_trace.run(batch=args.batch, heads=args.heads, q_len=args.seq, head_dim=args.head_dim,
                                      causal=args.causal)
    raw = raw_of["raw"].astype(np.int64).reshape(-1, attention_trace.stride(raw_of["consumers"]))
    t0 = raw[:, 0][raw[:, 0] > 0].min()
    start = {b: float(raw[b, 0] - t0) for b in range(raw.shape[0]) if raw[b, 0] > 0}
    end = {b: float(raw[b, 2] - t0) for b in range(raw.shape[0]) if raw[b, 2] > 0}
    rows = {k: [] for k in ("to_k_issue", "to_k_ready", "first_qk", "first_softmax", "steady_tile", "last_pv",
                            "epilogue", "span", "fixed", "tiles")}
    for blk in blocks:
        b = blk.block
        if b not in start or b not in end or not blk.consumers or not blk.consumers[0]:
            continue
        cons = [c for c in blk.consumers if c]
        n = min(len(c) for c in cons)
        if n < 3:
            continue
        s0 = start[b]
        rows["to_k_issue"].append(blk.k_issued.get(0, float("nan")) - s0)
        rows["to_k_ready"].append(min(c[0].k_ready for c in cons) - s0)
        rows["first_qk"].append(statistics.median(c[0].s_done - c[0].k_ready for c in cons))
        rows["first_softmax"].append(statistics.median(c[0].softmax_done - c[0].s_done for c in cons))
        steady = statistics.median(c[j + 1].k_ready - c[j].k_ready for c in cons for j in range(1, n - 2))
        rows["steady_tile"].append(steady)
        rows["last_pv"].append(statistics.median(c[n - 1].pv_done - c[n - 1].k_ready for c in cons))
        rows["epilogue"].append(end[b] - max(c[n - 1].pv_done for c in cons))
        rows["span"].append(end[b] - s0)
        rows["fixed"].append(end[b] - s0 - n * steady)
        rows["tiles"].append(n)
    ends = sorted(end.values())
    gaps = []
    for s in start.values():
        i = bisect.bisect_left(ends, s)
        if i > 0 and s - ends[i - 1] < 20_000:
            gaps.append(s - ends[i - 1])
    print(f"wgmma attention B{args.batch} x H{args.heads} x S{args.seq} x D{args.head_dim}"
          f"{' causal' if args.causal else ''}: {cfg.consumers} consumers, {cfg.keys} keys a tile, {cfg.stages} stages, "
          f"{len(rows['span'])} blocks traced; launch {max(ends) / 1e3:.1f} us")
    for k, v in rows.items():
        v = [x for x in v if x == x]
        if v:
            q = np.percentile(v, [10, 50, 90])
            print(f"  {k:14s} median {q[1]:8.0f}   p10 {q[0]:8.0f}   p90 {q[2]:8.0f}" + ("" if k == "tiles" else "  ns"))
    if gaps:
        q = np.percentile(gaps, [10, 50, 90])
        print(f"  {'end->start':14s} median {q[1]:8.0f}   p10 {q[0]:8.0f}   p90 {q[2]:8.0f}  ns (a block's start after the "
              f"nearest earlier end)")


if __name__ == "__main__":
    main()
