"""How a GEMM's work is shared among the SMs: split k (each tile's k-blocks cut into ranges, f32 partials summed
after) and stream-K (the last wave's k-blocks shared out among all blocks), with the rules for when each pays on the
H200. gemm_kernels' records and asynccopy.matmul's configurations read them; gemm_wgmma.cu's Schedule walks the
same pieces (asynccopy/gemm.cuh)."""

from __future__ import annotations


def work_units(tiles_m: int, tiles_n: int, share: str | None = None) -> int:
    """The units a persistent grid walks: the output tiles, or cluster pairs of them where a pair shares an operand
    ("a": two tiles of a tile-row; "b": two of a tile-column; an odd last one is a pair with a block past the matrix)."""
    return {"a": tiles_m * -(-tiles_n // 2), "b": -(-tiles_m // 2) * tiles_n}.get(share, tiles_m * tiles_n)


MIN_SPLIT_BLOCKS = 8  # k-blocks a split of k keeps at least: fewer, and the partials cost more than they save
MAX_SPLITS = 16


def split_count(tiles: int, k_blocks: int, sms: int) -> int:
    """How many ranges of k to cut each output tile's work into. Only where the tiles leave at least three
    quarters of the SMs idle: on the H200 two splits of 64 tiles (128 x 8192 x 8192, 128 x 128 tiles) ran
    13% slower than one, the f32 partials' round trip and the second launch costing more than the idle
    SMs; splits then fill the SMs (tiles x splits <= SMs), each MIN_SPLIT_BLOCKS k-blocks or more."""
    if 4 * tiles > sms:
        return 1
    return max(1, min(sms // max(tiles, 1), k_blocks // MIN_SPLIT_BLOCKS, MAX_SPLITS))


MIN_STREAM_K_BLOCKS = 4  # k-blocks a block's share of a stream-K region holds at least
MAX_STREAM_K_PIECES = 8  # pieces a tile is cut into at most where every tile is shared (fewer tiles than SMs)
# k-blocks a block must save for stream-K to pay: its extra pieces' epilogues and the partials' round trip cost
# about 16 (H200, 128 x 256 tiles, % of cuBLAS without -> with: 4096^3 saving 8 k-blocks 93 -> 90,
# 16384x1024x8192 saving 16 92 -> 92, 8192^3 saving 62 95 -> 98, 16384^3 saving 240 92 -> 95)
MIN_STREAM_K_SAVING = 24


def stream_k_plan(tiles: int, k_blocks: int, sms: int) -> tuple[int, int]:
    """(tiles of the stream-K region, blocks of the grid) for a persistent kernel on ``sms`` SMs.

    With more tiles than SMs the whole waves stay whole tiles and the rest (the last wave's) are shared out,
    so no SM idles at the end; where that rest is under half the SMs one more wave joins it, so that a tile
    is cut into two pieces at most (a block then holds one to one and a half tiles' k-blocks). With fewer tiles
    than SMs every tile is shared, by up to MAX_STREAM_K_PIECES blocks each. A block's share holds at least
    MIN_STREAM_K_BLOCKS k-blocks; (0, blocks) where stream-K has nothing to share. Whether it pays:
    stream_k_pays."""
    if tiles > sms:
        rest = tiles % sms
        region = rest if 2 * rest >= sms else rest + sms
        return (0, sms) if rest == 0 or region * k_blocks < MIN_STREAM_K_BLOCKS * sms else (region, sms)
    grid = min(sms, tiles * MAX_STREAM_K_PIECES, tiles * k_blocks // MIN_STREAM_K_BLOCKS)
    return (tiles, grid) if grid > tiles else (0, max(tiles, 1))


def stream_k_pays(tiles: int, k_blocks: int, sms: int) -> bool:
    """Whether sharing out the last wave (more tiles than SMs) is the default: each block saves
    k_blocks x (1 - rest / sms) k-blocks of the last wave's idle time, which must reach MIN_STREAM_K_SAVING."""
    return (tiles > sms and stream_k_plan(tiles, k_blocks, sms)[0] > 0
            and k_blocks * (sms - tiles % sms) >= MIN_STREAM_K_SAVING * sms)


def stream_k_pieces(k_blocks: int, sk_tiles: int, grid: int) -> list[list[tuple[int, int, int]]]:
    """Each block's stream-K pieces (tile of the region, first k-block, end k-block), as gemm_wgmma.cu's
    Schedule walks them (asynccopy/gemm.cuh, stream_k_begin): for tests and the model."""
    out = []
    for b in range(grid):
        at, hi = b * sk_tiles * k_blocks // grid, (b + 1) * sk_tiles * k_blocks // grid
        pieces = []
        while at < hi:
            j = at // k_blocks
            end = min(hi - j * k_blocks, k_blocks)
            pieces.append((j, at - j * k_blocks, end))
            at = j * k_blocks + end
        out.append(pieces)
    return out
