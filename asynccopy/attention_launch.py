"""Running an attention configuration (asynccopy.sdpa chooses it): the 4-D tensors' TMA maps, the kernel (compiled,
cached), and its launch worked out once per configuration and problem (a _Plan: grid, block, shared memory, the key
split, the arguments that stay), so that a call in a loop spends its time on the launch itself.

The arrays come as asynccopy.sdpa.Tensor4 (address, shape, element strides, dtype) and the problem as
asynccopy.sdpa.Problem, checked there; a plan is kept per (configuration, problem, device, hang bound, split): all it
holds follows from those, and what follows from the addresses (the maps, the workspace) is found each call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import build, memo, workspace
from .attention_kernels import AttentionConfig
from .attention_schedule import key_split
from .errors import ArgumentError
from .matrix import ITEMSIZE

__all__ = ["LOG2E", "launch"]

LOG2E = 1.4426950408889634
TMA_STRIDE = 16  # bytes: a tensor map's global strides are multiples of it


@functools.cache
def _kernel(cfg: AttentionConfig, arch: str, hang_ns: int):
    return cfg.compile(arch).kernel(cfg.name_expression())


@dataclass(frozen=True)
class _Plan:
    """One attention launch worked out once: the kernel at its launch shape and the scalar arguments around the
    scale (np.int32), and (TMA kernels) the key split's pieces and the partials they keep in the stream's workspace."""

    run: build.Launch
    before: tuple  # the scalars before the scale
    after: tuple = ()  # (TMA kernels) the whole items and the pieces of a cut one, after the counter and partials
    partial_bytes: int = 0  # the key split's partials (0: no split)
    rows: tuple[int, ...] = ()  # (TMA kernels) the rows of q's, k's, v's and out's map boxes
    persistent: bool = False  # (TMA kernels) its blocks take items from the workspace's unit counter


def launch(cfg: AttentionConfig, p, q, k, v, out, lse_ptr: int, scale: float, *, stream, facts, trace_ptr: int = 0,
           split: tuple[int, int] | None = None, blocks: int | None = None) -> None:
    """out (and lse at lse_ptr, 0: none) from checked arrays (q, k, v, out: asynccopy.sdpa.Tensor4; p: its
    Problem); nothing to do for an empty output. A traced configuration (TMA kernels) takes its trace buffer at
    ``trace_ptr``. ``split`` (TMA kernels, no causal mask): (the grid's last items cut along their keys, pieces
    each) in place of attention_schedule.key_split's. ``blocks`` (a persistent configuration): at most this many
    blocks take the units, in place of one an SM (so that a small problem gives each block several)."""
    if 0 in (p.batch, p.heads, p.q_len):
        return
    if cfg.trace != bool(trace_ptr):
        raise ArgumentError("a traced configuration takes a trace buffer, and only it does")
    hang_ns, split = build.hang_timeout_ns(), None if split is None else tuple(split)
    if blocks is not None and (blocks < 1 or not cfg.persistent):
        raise ArgumentError(f"blocks={blocks}: a persistent configuration's cap of its grid, at least 1")
    plan = _plans.get((cfg, p, facts, hang_ns, split, blocks), lambda: _plan(cfg, p, facts, hang_ns, split, blocks))
    if cfg.record.operands != "tma":
        strides = [np.int64(s) for t in (q, k, v, out) for s in t.strides[:3]]
        plan.run(stream, q.ptr, k.ptr, v.ptr, out.ptr, lse_ptr, *strides, *plan.before, np.float32(scale))
        return
    maps = tuple(_map(t, rows) for t, rows in zip((q, k, v, out), plan.rows))
    counter = partial = units = 0
    if plan.partial_bytes or plan.persistent:
        counter, partial = workspace.stream_k(facts.device_id, stream, plan.partial_bytes)
        units = counter + workspace.UNIT_COUNTER_OFFSET if plan.persistent else 0
    plan.run(stream, *maps, lse_ptr, *plan.before, np.float32(scale * LOG2E), counter, partial, *plan.after, units,
             *((trace_ptr,) if cfg.trace else ()))


def _plan(cfg: AttentionConfig, p, facts, hang_ns: int, split: tuple[int, int] | None,
          blocks: int | None = None) -> _Plan:
    """The launch of ``cfg`` for problem ``p``: its grid, and for the TMA kernel the last wave's items cut along their
    keys (attention_schedule.key_split, or ``split``), their pieces' partials and counters in the stream's workspace."""
    if not cfg.fits(facts.smem_per_block_optin):  # as fit() counts (static barriers)
        raise ArgumentError(f"{cfg.stages} stages of {cfg.kernel} at head dim {cfg.head_dim} in {cfg.tile[0]} x {cfg.tile[1]} "
                            f"tiles need {cfg.smem_bytes} bytes of shared memory a block and {cfg.record.smem_reserve} "
                            f"beside; {facts.name} allows {facts.smem_per_block_optin}")
    kernel, (bm, bn) = _kernel(cfg, facts.arch, hang_ns), cfg.tile
    if cfg.record.operands != "tma":
        run = build.Launch(kernel, grid=(-(-p.q_len // bm), p.heads, p.batch), block=cfg.threads, shmem=cfg.smem_bytes)
        return _Plan(run, (np.int32(p.group), np.int32(p.q_len), np.int32(p.k_len)))
    items = -(-p.q_len // bm) * p.heads * p.batch
    tail, pieces = key_split(cfg, p.q_len, p.k_len, p.heads, p.batch, facts.sm_count) if split is None else split
    if pieces > 1 and tail > 0 and cfg.causal:
        raise ArgumentError("a causal grid is not cut along its keys: its blocks follow causal_tile's order")
    tail, pieces = min(tail, items, workspace.SPLIT_FLAGS // cfg.consumers), min(pieces, -(-p.k_len // bn))
    partial_bytes = 0
    if pieces > 1 and tail > 0:
        units = items - tail + tail * pieces
        grid = (units, 1, 1)
        slot = 16 * 128 * (p.head_dim // 8 + 1)  # a warpgroup's O, max and sum (merge_pieces)
        partial_bytes = tail * pieces * cfg.consumers * slot
    else:
        units, tail, pieces = items, 0, 1
        grid = (-(-p.q_len // bm), p.heads, p.batch)
    if cfg.persistent:  # at most one block an SM (the kernel's shared memory allows no more), each taking units in turn
        grid = (min(units, blocks or facts.sm_count), 1, 1)
    run = build.Launch(kernel, grid=grid, block=cfg.threads, shmem=cfg.smem_bytes)
    # Q in boxes of the block's queries, K and V of a tile's keys, out of 64 rows (each consumer warpgroup stores its
    # own) x 64 columns of head_dim
    return _Plan(run, (np.int32(p.heads), np.int32(p.group), np.int32(p.q_len), np.int32(p.k_len)),
                 (np.int32(items - tail), np.int32(pieces), np.int32(p.batch)), partial_bytes, (bm, bn, bn, 64),
                 cfg.persistent)


_plans = memo.Memo()  # a configuration's launch per problem, device, hang bound, split and grid cap (_Plan)


_MAP_TYPES = {"bfloat16": "BFLOAT16", "float16": "FLOAT16"}


def _legal_strides(t) -> tuple[int, ...]:
    """t's element strides, those of extent-1 axes (never stepped, any value) replaced by a legal one for a
    tensor map (a 16-byte multiple)."""
    size = ITEMSIZE[t.dtype]
    out = list(t.strides)
    for axis in range(3):
        if t.shape[axis] == 1:
            out[axis] = TMA_STRIDE // size
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _tensor_map(ptr: int, dtype: str, shape: tuple[int, ...], strides: tuple[int, ...], rows: int):
    """The 128B-swizzled TMA map of a (batch, heads, seq, head_dim) tensor (element strides, head_dim
    contiguous) in boxes of ``rows`` x 64 elements of head_dim; checked by asynccopy's validator first,
    so that a rule it breaks is named. A map holds only numbers: one for the same numbers is reused."""
    from cuda.core import Buffer
    from cuda.core._tensor_map import TensorMapDataType, TensorMapSwizzle
    from cuda.core.utils import StridedMemoryView

    from . import tensormap

    size = ITEMSIZE[dtype]
    b, h, s, d = shape
    spec = tensormap.TensorMapSpec(dtype, (d, s, h, b), tuple(x * size for x in strides[2::-1]), (64, rows, 1, 1),
                                   swizzle="128B", address=ptr)
    tensormap.validate(spec, lint=False)
    nbytes = size * (1 + sum((e - 1) * x for e, x in zip(shape, strides)))
    view = StridedMemoryView.from_buffer(Buffer.from_handle(ptr, nbytes), shape=shape, strides=strides,
                                         dtype=np.dtype(f"uint{8 * size}"))
    try:
        return view.as_tensor_map(box_dim=(1, 1, rows, 64), data_type=getattr(TensorMapDataType, _MAP_TYPES[dtype]),
                                  swizzle=TensorMapSwizzle.SWIZZLE_128B)
    except (ValueError, TypeError, RuntimeError) as exc:  # the encoder's own rules, beyond our validator's
        raise ArgumentError(f"the TMA map of a {shape} tensor with element strides {strides} was refused: "
                            f"{str(exc).splitlines()[0]} (kernel='mma' takes any 16-byte rows)") from None


def _map(t, rows: int):
    return _tensor_map(t.ptr, t.dtype, tuple(t.shape), _legal_strides(t), rows)

