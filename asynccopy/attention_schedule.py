"""How an attention grid's work meets the SMs: the launch model (a grid's makespan, and the consumer count it
gives a problem), the key split of the last wave (the TMA kernel without the mask), and the builds the launch picks
per problem (the warpgroups taking turns on short items, the persistent grid for causal ones). asynccopy.sdpa's
configure and asynccopy.attention_launch read them; attention_wgmma.cu walks the same orders
(asynccopy/attention.cuh)."""

from __future__ import annotations

import functools
import heapq

from .attention_kernels import O_BUFFER_KNOB, PERSISTENT_KNOB, AttentionConfig, AttentionKernel

# ---------------------------------------------------------------------------------------------
# The launch model: how long a grid of query tiles takes on the SMs, and the consumer count it gives

L2_BUDGET = 24 << 20  # asynccopy/attention.cuh's ASYNCCOPY_ATTN_L2_BUDGET: bytes of K and V a chunk of heads holds
WAVES_MODELLED = 8  # grids of more blocks than this many waves keep the default consumer count unsimulated


def causal_order(q_tiles: int, heads: int, batch: int, kv_bytes: int) -> list[tuple[int, int, int]]:
    """(query tile, head, batch) of each block of a causal (q_tiles, heads, batch) grid in linear block order:
    asynccopy/attention.cuh's causal_tile (the longest tiles first over chunks of heads whose K and V fit
    L2_BUDGET)."""
    pairs = heads * batch
    chunk = max(1, min(pairs, L2_BUDGET // max(1, kv_bytes)))
    order = []
    for first in range(0, pairs, chunk):
        size = min(chunk, pairs - first)
        order += [(qt, p % heads, p // heads) for qt in reversed(range(q_tiles)) for p in range(first, first + size)]
    return order


def key_tiles(qt: int, bm: int, bn: int, q_len: int, k_len: int, causal: bool) -> int:
    """K/V tiles query tile ``qt`` of ``bm`` queries reads: all, or (causal) those up to its last query."""
    tiles = -(-k_len // bn)
    return min(tiles, (min((qt + 1) * bm, q_len) - 1) // bn + 1) if causal else tiles


@functools.lru_cache(maxsize=256)
def grid_time(bm: int, bn: int, q_len: int, k_len: int, heads: int, batch: int, causal: bool, sms: int,
              kv_bytes: int, overhead: float = 0.0) -> float:
    """Makespan of the grid in key tiles x queries (one block an SM at a time, each SM taking the next block in
    linear order when it frees; a block costs its key tiles + ``overhead``): equal blocks run in whole waves;
    causal ones as the GPU starts them."""
    q_tiles = -(-q_len // bm)
    if not causal:
        return -(-q_tiles * heads * batch // sms) * (key_tiles(0, bm, bn, q_len, k_len, False) + overhead) * bm
    free = [0.0] * sms
    for qt, _, _ in causal_order(q_tiles, heads, batch, kv_bytes):
        heapq.heapreplace(free, free[0] + (key_tiles(qt, bm, bn, q_len, k_len, True) + overhead) * bm)
    return max(free)


def consumers_for_problem(rec: AttentionKernel, head_dim: int, q_len: int, k_len: int, heads: int, batch: int,
                          causal: bool, sms: int, kv_heads: int | None = None) -> int | None:
    """The consumer warpgroups the launch model gives this problem: the record's default, or one of its
    fewer_consumers where that grid finishes sooner at its measured speed (short or causal problems, whose
    last blocks of 192 queries would leave SMs idle)."""
    default = rec.consumers_for(head_dim)
    options = [(c, speed) for d, c, speed in rec.fewer_consumers if d == head_dim]
    if default is None or not options:
        return default
    if -(-q_len // (64 * default)) * heads * batch > WAVES_MODELLED * sms:
        return default  # many waves: the last one's idle SMs weigh little against the default's speed
    group = heads // (kv_heads or heads)
    kv_bytes = 4 * k_len * head_dim // group
    bn = rec.keys_for(head_dim, causal)

    def time(c, speed):
        return grid_time(64 * c, bn, q_len, k_len, heads, batch, bool(causal), sms, kv_bytes,
                         rec.block_overhead) / speed

    return min([(default, 1.0), *options], key=lambda o: time(*o))[0]


# ---------------------------------------------------------------------------------------------
# The key split of the last wave (the TMA kernel without the mask)

# a piece's cost of writing its partial (O, max and sum: 4 x (head_dim + 8) bytes a query) and the last piece's of
# reading one back, in key tiles: the partial is a third of a K/V tile's bytes at head dim 128, two thirds at 64,
# read from L2 at about an SM's 64 bytes a clock, where a key tile's products take 1.7-2.2 us (H200)
PARTIAL_TILES = 0.3
MAX_PIECES = 32


@functools.lru_cache(maxsize=1024)
def tail_split(items: int, kv_tiles: int, sms: int, overhead: float) -> int:
    """Pieces to cut each item of the grid's last wave into along its key tiles (1: none). Items are equal
    (no causal mask) and run in waves of ``sms``: the ``rest = items % sms`` of the last wave leave the other SMs
    idle for a whole item of ``kv_tiles + overhead`` key tiles. Cut into p pieces they take
    ceil(rest p / sms) rounds of kv_tiles / p + overhead + a partial's write, and the last piece reads the p - 1
    others back; the p of the least time, where it beats the whole item."""
    rest = items % sms
    if rest == 0 or kv_tiles < 2 or sms < 2:
        return 1
    best, best_time = 1, kv_tiles + overhead
    for p in range(2, min(kv_tiles, MAX_PIECES) + 1):
        t = -(-rest * p // sms) * (kv_tiles / p + overhead + PARTIAL_TILES) + PARTIAL_TILES * (p - 1)
        if t < best_time:
            best, best_time = p, t
    return best


@functools.lru_cache(maxsize=1024)
def key_split(cfg: AttentionConfig, q_len: int, k_len: int, heads: int, batch: int, sms: int) -> tuple[int, int]:
    """(items, pieces): the last ``items`` of the TMA kernel's grid (the last wave's) cut into ``pieces`` ranges
    of their key tiles each, as tail_split gives them (a persistent build's blocks take those pieces after the whole
    items, as they free); (0, 1) with the causal mask (its grid runs the short tiles last), for a trace (which follows
    whole items) or a pointer kernel."""
    if cfg.causal or cfg.trace or cfg.record.operands != "tma":
        return 0, 1
    items = -(-q_len // cfg.tile[0]) * heads * batch
    pieces = tail_split(items, -(-k_len // cfg.tile[1]), sms, cfg.record.block_overhead)
    return (items % sms, pieces) if pieces > 1 else (0, 1)


def with_persistence(cfg: AttentionConfig, smem_limit: int | None = None, q_len: int = 0,
                     k_len: int = 0) -> AttentionConfig:
    """``cfg`` built persistent where its record says so for its mask (AttentionKernel.persistent_masks) and the
    build does not already say: each item's start (Q's and the first K's loads, about a key tile's time) is a large
    share of a short item (a causal grid's many, or short sequences), and a persistent block loads the next item's
    under the last one's end; the dynamic order keeps a causal grid's longest-first balance, and a key split's pieces
    come after the whole items. With O staged in a buffer of its own where the record says it pays for items of that
    many key tiles (AttentionKernel.o_buffer_tiles: a warpgroup's epilogue then waits for no other, a fixed cost an
    item) and it fits ``smem_limit`` bytes a block beside the stages."""
    if bool(cfg.causal) not in cfg.record.persistent_masks or PERSISTENT_KNOB in dict(cfg.defines):
        return cfg
    cfg = cfg.with_defines(((PERSISTENT_KNOB, 1),))
    most = dict(cfg.record.o_buffer_tiles).get(cfg.head_dim)
    if most is None or smem_limit is None or q_len == 0 or O_BUFFER_KNOB in dict(cfg.defines):
        return cfg
    if mean_key_tiles(cfg.tile[0], cfg.keys, q_len, k_len, cfg.causal) > most:
        return cfg
    buffered = cfg.with_defines(((O_BUFFER_KNOB, 1),))
    return buffered if buffered.fits(smem_limit) else cfg


PINGPONG_KNOB = "ASYNCCOPY_ATTN_PINGPONG"  # the wgmma kernel's consumer warpgroups taking turns to issue (1) or not (0)


@functools.lru_cache(maxsize=1024)
def mean_key_tiles(bm: int, bn: int, q_len: int, k_len: int, causal: bool) -> float:
    """Key tiles an item (a query tile of ``bm`` queries) reads on average: all of them, or (causal) those up to
    each tile's last query."""
    q_tiles = -(-q_len // bm)
    return sum(key_tiles(qt, bm, bn, q_len, k_len, causal) for qt in range(q_tiles)) / q_tiles if causal else \
        key_tiles(0, bm, bn, q_len, k_len, False)


def with_turns(cfg: AttentionConfig, q_len: int, k_len: int) -> AttentionConfig:
    """``cfg`` with its consumer warpgroups taking turns to issue their products where the record says it pays and
    the build does not already say: an item's first softmax and last P V run with nothing of the same warpgroup
    under them (about a key tile's work an item), which the turns hide behind the other warpgroup's products; the
    turns' own barriers cost a little every tile, so they pay on items of few key tiles (measured at head dim 128,
    AttentionKernel.pingpong_tiles)."""
    most = dict(cfg.record.pingpong_tiles).get(cfg.head_dim)
    if most is None or PINGPONG_KNOB in dict(cfg.defines) or q_len == 0:
        return cfg
    if mean_key_tiles(cfg.tile[0], cfg.keys, q_len, k_len, cfg.causal) > most:
        return cfg
    return cfg.with_defines(((PINGPONG_KNOB, 1),))
