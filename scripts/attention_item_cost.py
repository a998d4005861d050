"""Where a short attention item's time goes: the traced wgmma kernel's per-block marks and K/V tile events over one
launch (asynccopy.attention_trace.item_costs; H200 figures in docs/design.md, 11b).

    python3 scripts/attention_item_cost.py [--seq 2048] [--head-dim 128] [--batch 4] [--heads 16] [--causal]

Prints the medians over the launch's blocks: a block's start to the producer's first K issue and to the first
consumer's K there; a steady tile; the last tile; the epilogue; the span and its fixed part (span less tiles x a
steady tile); and the gap from one block's end to the next block's start on the SM it freed."""

from __future__ import annotations

import argparse

from asynccopy import attention_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    cfg, blocks = attention_trace.run(batch=args.batch, heads=args.heads, q_len=args.seq, head_dim=args.head_dim,
                                      causal=args.causal)
    print(f"wgmma attention B{args.batch} x H{args.heads} x S{args.seq} x D{args.head_dim}"
          f"{' causal' if args.causal else ''}: {cfg.consumers} consumers, {cfg.keys} keys a tile, {cfg.stages} stages, "
          f"{len(blocks)} blocks traced; launch {max(b.end for b in blocks) / 1e3:.1f} us")
    for name, value in attention_trace.item_costs(blocks).items():
        print(f"  {name:18s} {value:10.0f}" + ("" if name == "tiles" else " ns"))


if __name__ == "__main__":
    main()
