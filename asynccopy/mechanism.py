"""The tile-stream mechanisms: one record per mechanism, and nothing about a mechanism anywhere else.

A :class:`Mechanism` says what a mechanism is: its kernel file and template, how a configuration
spells the template's arguments, the copy instruction its SASS must show on each arch, its options
and their defaults, the rules a configuration must keep, the arguments its launch adds, its order
(producer warps, issue-first) and the variants the bench sweeps. The configuration checks
(asynccopy.stream), the CLI's help, the bench's variants and summary and the model check all read
these records. Adding a mechanism is one record (:func:`register`) and one kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import ArgumentError

MAX_STAGES = 16
MAX_PRODUCERS = 8  # producer warps of a warp-specialized mechanism

# The template parameters a record can name, and how a configuration (asynccopy.stream.StreamConfig)
# spells each one.
TEMPLATE_PARAMS: dict[str, Callable] = {
    "threads": lambda c: c.threads,
    "tile": lambda c: c.tile,
    "stages": lambda c: c.stages,
    "vec": lambda c: c.vec,
    "bypass_l1": lambda c: "true" if c.cache == "cg" else "false",
    "producers": lambda c: c.producers,
}

FAMILIES = ("sync", "cp.async", "tma", "warp-specialized")


@dataclass(frozen=True)
class CopyOp:
    """The copy instruction a kernel's SASS must hold: ``opcode`` from compute capability ``min_cc``
    on, for copies of ``vec`` bytes only where given. A record's last matching CopyOp applies."""

    opcode: str
    min_cc: tuple[int, int] = (0, 0)
    vec: int | None = None


@dataclass(frozen=True)
class Mechanism:
    name: str
    api: str  # what moves the data, in a line
    family: str  # one of FAMILIES: how the copies are issued and waited for
    min_cc: tuple[int, int]
    source: str | Path  # the kernel file: a name in asynccopy/kernels, or a path of your own
    kernel: str  # the kernel template's name
    template: tuple[str, ...]  # its parameters, in order: names in TEMPLATE_PARAMS
    copy_ops: tuple[CopyOp, ...] = ()  # () for a synchronous mechanism (ordinary loads, LDG)
    fixed_stages: int | None = None  # None: any stage count in [1, MAX_STAGES]
    vecs: tuple[int, ...] = ()  # copy widths (bytes) it accepts; () = not an option
    caches: tuple[str, ...] = ()  # cp.async cache modes it accepts
    default_vec: int | None = None
    default_cache: str | None = None
    producer_warps: int = 0  # warps added to the block to issue copies (the default, where it is an option)
    producers_option: bool = False  # the producer warp count is the caller's choice (1..MAX_PRODUCERS)
    issue_first: bool = False  # the computing threads refill a buffer before waiting for the next tile
    boundary_loads: bool = False  # a boundary tile's last < 4 floats go through registers (LDG)
    rules: tuple[Callable, ...] = ()  # rule(cfg) -> None, or the message of the rule cfg breaks
    launch_args: Callable | None = None  # launch_args(cfg, in_ptr, n, device_id) -> arguments before (in, out, ...)
    variants: tuple[dict, ...] = ({},)  # the options the bench sweeps
    uniform_loop_from: int | None = None  # from this stage count on, every count compiles the same compute loop
    baseline: bool = False  # the plain synchronous loop every figure is compared with (one record has it)

    def copy_op(self, cc: tuple[int, int], vec: int | None) -> str | None:
        """The async copy opcode this mechanism's kernel must hold on ``cc``; None for synchronous loads."""
        found = None
        for op in self.copy_ops:
            if cc >= op.min_cc and (op.vec is None or op.vec == vec):
                found = op.opcode
        return found

    def name_expression(self, cfg) -> str:
        return f"{self.kernel}<{', '.join(str(TEMPLATE_PARAMS[p](cfg)) for p in self.template)}>"

    def describe(self) -> str:
        stages = f"{self.fixed_stages} stage(s)" if self.fixed_stages else f"1..{MAX_STAGES} stages"
        opts = []
        if self.vecs:
            opts.append(f"vec {'/'.join(map(str, self.vecs))} (default {self.default_vec})")
        if self.caches:
            opts.append(f"cache {'/'.join(self.caches)} (default {self.default_cache})")
        if self.producers_option:
            opts.append(f"producers 1..{MAX_PRODUCERS} warps (default {self.producer_warps})")
        return f"CC >= {self.min_cc[0]}.{self.min_cc[1]}, {stages}" + (", " + ", ".join(opts) if opts else "")


# ---------------------------------------------------------------------------------------------
# Rules of single mechanisms (each returns None or the message of the rule a configuration breaks)


def _chunks_split_over_producers(cfg) -> str | None:
    if (cfg.tile // 4) % (32 * cfg.producers):
        return (f"{cfg.mechanism!r}: the tile's {cfg.tile // 4} 16-byte chunks must split evenly over "
                f"{32 * cfg.producers} producer threads ({cfg.producers} warp(s))")
    return None


def _pieces_per_producer_warp(cfg) -> str | None:
    if cfg.tile % (4 * cfg.producers):
        return (f"{cfg.mechanism}: each of {cfg.producers} producer warps copies whole 16-byte chunks: tile must "
                f"be a multiple of {4 * cfg.producers} floats, got {cfg.tile}")
    return None


ROW = 64  # floats per row of tma_2d's 2D view of the array


def _tile_is_a_box_of_rows(cfg) -> str | None:
    if cfg.tile % ROW or cfg.tile // ROW > 256:
        return (f"tma_2d loads a tile as a box of rows of {ROW} floats: tile must be a multiple of {ROW} and at "
                f"most 256 rows ({256 * ROW} floats), got {cfg.tile}")
    return None


def _rows_map_args(cfg, in_ptr: int, n: int, device_id: int) -> tuple:
    """tma_2d's tensor map: the first n // 64 rows of 64 floats at in_ptr, boxes of tile // 64 rows."""
    if n < ROW:
        raise ArgumentError(f"tma_2d views the array as rows of {ROW} floats and needs n >= {ROW}, got n={n}")
    return (_rows_map(in_ptr, n, cfg.tile, device_id),)


@functools.lru_cache(maxsize=64)
def _rows_map(ptr: int, n: int, tile: int, device_id: int):
    import numpy as np
    from cuda.core import Buffer
    from cuda.core.utils import StridedMemoryView

    rows = n // ROW
    view = StridedMemoryView.from_buffer(Buffer.from_handle(ptr, rows * ROW * 4), shape=(rows, ROW),
                                        dtype=np.dtype(np.float32))
    return view.as_tensor_map(box_dim=(tile // ROW, ROW))


# ---------------------------------------------------------------------------------------------
# The table

_GROUPED = ("threads", "tile", "stages")
_WS = ("producers", "threads", "tile", "stages")
LDGSTS, UBLKCP, UTMALDG = CopyOp("LDGSTS"), CopyOp("UBLKCP"), CopyOp("UTMALDG")

MECHANISMS: dict[str, Mechanism] = {
    m.name: m
    for m in (
        Mechanism("sync", "ordinary loads + __syncthreads, one buffer", "sync", (7, 0), "stream.cu", "stream_sync",
                  ("threads", "tile"), fixed_stages=1, baseline=True),
        Mechanism("sync_double", "ordinary loads staged through registers, two buffers", "sync", (7, 0), "stream.cu",
                  "stream_sync_double", ("threads", "tile"), fixed_stages=2),
        Mechanism("ldgsts", "inline PTX cp.async + commit_group / wait_group<N>", "cp.async", (8, 0), "stream.cu",
                  "stream_ldgsts", _GROUPED + ("vec", "bypass_l1"), (LDGSTS,), vecs=(4, 8, 16), caches=("ca", "cg"),
                  default_vec=16, default_cache="cg", uniform_loop_from=4,
                  variants=({"vec": 16, "cache": "cg"}, {"vec": 16, "cache": "ca"}, {"vec": 8, "cache": "ca"},
                            {"vec": 4, "cache": "ca"})),
        Mechanism("pipeline", "cuda::pipeline (block scope) + cuda::memcpy_async", "cp.async", (8, 0), "stream.cu",
                  "stream_pipeline", _GROUPED, (LDGSTS,), issue_first=True, uniform_loop_from=2),
        Mechanism("barrier", "cuda::memcpy_async on a cuda::barrier per stage (vec = declared alignment)", "cp.async",
                  (8, 0), "stream.cu", "stream_barrier", _GROUPED + ("vec",),
                  # libcu++ turns a 16-byte-aligned copy on a barrier into a TMA bulk copy on Hopper
                  (LDGSTS, CopyOp("UBLKCP", (9, 0), vec=16)), vecs=(4, 8, 16), default_vec=16,
                  uniform_loop_from=3, variants=({"vec": 16}, {"vec": 8})),
        Mechanism("cg", "cooperative_groups::memcpy_async + cg::wait_prior", "cp.async", (8, 0), "stream.cu",
                  "stream_cg", _GROUPED, (LDGSTS,), uniform_loop_from=4),
        Mechanism("primitives", "__pipeline_memcpy_async / __pipeline_commit / __pipeline_wait_prior", "cp.async",
                  (8, 0), "stream.cu", "stream_primitives", _GROUPED, (LDGSTS,), uniform_loop_from=4),
        Mechanism("tma_1d", "TMA bulk copy: cuda::device::memcpy_async_tx + barrier_arrive_tx, one elected thread",
                  "tma", (9, 0), "stream_tma.cu", "stream_tma_1d", ("threads", "tile"), (UBLKCP,), fixed_stages=1,
                  boundary_loads=True),
        Mechanism("tma_1d_pipeline", "TMA bulk copies from a producer warp, full/empty mbarriers", "tma", (9, 0),
                  "stream_tma.cu", "stream_tma_1d_pipeline", _GROUPED, (UBLKCP,), producer_warps=1,
                  boundary_loads=True, uniform_loop_from=2),
        Mechanism("tma_2d", "TMA 2D tensor copies (rows of 64 floats) from a producer warp", "tma", (9, 0),
                  "stream_tma.cu", "stream_tma_2d", _GROUPED, (UTMALDG,), producer_warps=1, boundary_loads=True,
                  rules=(_tile_is_a_box_of_rows,), launch_args=_rows_map_args, uniform_loop_from=2),
        Mechanism("ws_pipeline", "warp-specialized: partitioned cuda::pipeline, producer warps memcpy_async",
                  "warp-specialized", (8, 0), "stream_ws.cu", "stream_ws_pipeline", _WS, (LDGSTS,), producer_warps=2,
                  producers_option=True, boundary_loads=True, rules=(_chunks_split_over_producers,),
                  variants=({"producers": 2},)),
        Mechanism("ws_ldgsts", "warp-specialized: producer warps cp.async + cp.async.mbarrier.arrive.noinc "
                  "on full/empty mbarriers", "warp-specialized", (8, 0), "stream_ws.cu", "stream_ws_ldgsts", _WS,
                  (LDGSTS,), producer_warps=2, producers_option=True, rules=(_chunks_split_over_producers,),
                  variants=({"producers": 1}, {"producers": 2}), uniform_loop_from=2),
        Mechanism("ws_tma", "warp-specialized: each producer warp issues a TMA bulk copy of its share",
                  "warp-specialized", (9, 0), "stream_ws.cu", "stream_ws_tma", _WS, (UBLKCP,), producer_warps=1,
                  producers_option=True, boundary_loads=True, rules=(_pieces_per_producer_warp,),
                  variants=({"producers": 1}, {"producers": 2}), uniform_loop_from=2),
    )
}


def mechanisms() -> list[Mechanism]:
    """Every tile-stream mechanism, with what it needs."""
    return list(MECHANISMS.values())


def get(name: str) -> Mechanism:
    if name not in MECHANISMS:
        raise ArgumentError(f"unknown mechanism {name!r}; choose one of: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


def baseline() -> str:
    """The name of the baseline mechanism: the plain synchronous loop (load, barrier, compute)."""
    return next(m.name for m in MECHANISMS.values() if m.baseline)


def register(mech: Mechanism) -> Mechanism:
    """Add a mechanism (its kernel file is ``mech.source``); the bench, the CLI and the checks see it."""
    if not isinstance(mech, Mechanism):
        raise ArgumentError(f"register takes a Mechanism, got {type(mech).__name__}")
    if mech.name in MECHANISMS:
        raise ArgumentError(f"a mechanism named {mech.name!r} exists already")
    if mech.baseline:
        raise ArgumentError(f"{baseline()!r} is the baseline; a registered mechanism cannot be another")
    if mech.family not in FAMILIES:
        raise ArgumentError(f"family must be one of {', '.join(FAMILIES)}, got {mech.family!r}")
    unknown = [p for p in mech.template if p not in TEMPLATE_PARAMS]
    if unknown:
        raise ArgumentError(f"template parameter(s) {', '.join(unknown)} unknown; known: {', '.join(TEMPLATE_PARAMS)}")
    MECHANISMS[mech.name] = mech
    return mech


def unregister(name: str) -> None:
    MECHANISMS.pop(name, None)


def variants() -> list[tuple[str, dict]]:
    """(mechanism, options) of every variant the bench sweeps, in the table's order."""
    return [(m.name, dict(v)) for m in MECHANISMS.values() for v in m.variants]
