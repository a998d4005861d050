"""C = A x B from Python on asynccopy's pipelined kernels (kernels/gemm_*.cu).

    c = asynccopy.gemm(a, b)                 # a: [m, k], b: [k, n], bf16 or f16, any CUDA array kind
    c = asynccopy.gemm(x, w.T)               # a transposed view is fine: either operand row- or column-major

Data flows one way: arrays → checks (pure Python, one clear error) → a GemmConfig (kernel record, tile,
stages, the operands' majors; kept per kind of call) → tensor maps → compile (cached) → launch on the caller's
stream (asynccopy.gemm_launch: worked out once per configuration and extents) → C of the caller's kind. Each
kernel is one record in KERNELS: what it takes (dtypes, arch, strides), its source and template, the instructions
its SASS must show, its tiles and stage counts.
"""

from __future__ import annotations

from dataclasses import replace

from . import arrays, device, memo, tuning
from .dtypes import dtype_name, numpy_dtype
from .errors import ArgumentError, check_int, check_name
from .gemm_kernels import (
    CLUSTER_KNOB,
    DTYPES,
    EPI_BUFS_KNOB,
    KERNELS,
    MMA_WARPS_KNOB,
    OUT_DTYPES,
    PAIR_BULK_KNOB,
    PAIR_K,
    PAIRED,
    SHARE_KNOB,
    GemmConfig,
    GemmKernel,
    cluster_of,
    itemsize,
    pair_k_config,
    paired_config,
    paired_defines,
)
from .gemm_launch import launch, zero
from .gemm_schedule import split_count, stream_k_pays, stream_k_plan, work_units
from .matrix import ITEMSIZE, Matrix, alignment, matrix

__all__ = ["CLUSTER_KNOB", "DTYPES", "EPI_BUFS_KNOB", "KERNELS", "MMA_WARPS_KNOB", "OUT_DTYPES", "PAIRED",
           "PAIR_BULK_KNOB", "PAIR_K", "SHARE_KNOB", "GemmConfig", "GemmKernel", "Matrix", "check_operands", "check_out",
           "cluster_of", "configure", "gemm", "itemsize", "launch", "matrix", "split_count", "stream_k_default",
           "stream_k_pays", "stream_k_plan", "why_not"]


def check_operands(a: Matrix, b: Matrix, out_dtype: str | None) -> str:
    """The output dtype, once A and B are checked against each other."""
    if a.dtype not in DTYPES:
        raise ArgumentError(f"a must be one of {', '.join(DTYPES)}, got {a.dtype}")
    if b.dtype != a.dtype:
        raise ArgumentError(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.cols != b.rows:
        raise ArgumentError(f"a is [{a.rows} x {a.cols}] and b is [{b.rows} x {b.cols}]: inner dimensions differ")
    if a.device_id != b.device_id:
        raise ArgumentError(f"a is on device {a.device_id} and b on device {b.device_id}")
    out_dtype = a.dtype if out_dtype is None else dtype_name(out_dtype)
    if out_dtype not in OUT_DTYPES:
        raise ArgumentError(f"out_dtype must be one of {', '.join(OUT_DTYPES)}, got {out_dtype}")
    return out_dtype


# ---------------------------------------------------------------------------------------------
# Choosing a configuration


def why_not(kernel: GemmKernel, a: Matrix, b: Matrix, facts) -> str | None:
    """Why ``kernel`` cannot take these operands on this device (None: it can)."""
    if facts.cc < kernel.min_cc:
        return f"needs compute capability {kernel.min_cc[0]}.{kernel.min_cc[1]}; {facts.name} is {facts.cc[0]}.{facts.cc[1]}"
    if a.dtype not in kernel.dtypes:
        return f"takes {', '.join(kernel.dtypes)}, not {a.dtype}"
    if kernel.operands != "tma" or 0 in (a.rows, a.cols, b.cols):
        return None  # pointers take any strides; an empty product launches nothing
    for name, mtx in (("a", a), ("b", b)):
        if mtx.ptr % 16:
            return f"{name}'s data pointer {mtx.ptr:#x} is not 16-byte aligned (TMA)"
        size = ITEMSIZE[mtx.dtype]
        if (mtx.lead * size) % 16 and (mtx.rows if mtx.row_major else mtx.cols) > 1:
            return (f"{name}'s leading dimension {mtx.lead} x {size} bytes is not a multiple of 16 "
                    f"(TMA global strides)")
    return None


def _tile(rec: GemmKernel, tile, m: int, n: int, align: int, sms: int, layout: tuple[bool, bool]) -> tuple[int, int]:
    """The caller's tile ((BM, BN), or BN where one tile has it) checked against the record, or the
    record's default for an m x n output on this many SMs and this layout (A MN-major, B MN-major)."""
    if tile is None:
        return rec.default_tile(m, n, sms, align, layout)
    tiles = rec.tiles_for(align)
    names = ", ".join(f"{bm}x{bn}" for bm, bn in tiles)
    under = f" with operands {align}-byte aligned" if tiles != rec.tiles else ""
    if isinstance(tile, (tuple, list)):
        if len(tile) != 2:
            raise ArgumentError(f"tile is (rows, columns), got {tile}")
        want = (check_int(tile[0], "tile rows", 1), check_int(tile[1], "tile columns", 1))
        if want not in tiles:
            raise ArgumentError(f"kernel {rec.name!r} takes tiles {names}{under}, got {want[0]}x{want[1]}")
        return want
    bn = check_int(tile, "tile", 1)
    match = [t for t in tiles if t[1] == bn]
    if len(match) != 1:
        raise ArgumentError(f"kernel {rec.name!r} takes tiles {names}{under}; tile={bn} "
                            f"{'names none' if not match else 'is ambiguous: pass (rows, columns)'}")
    return match[0]


def configure(a: Matrix, b: Matrix, out_dtype: str, facts, *, kernel: str | None = None, stages=None,
              tile=None) -> GemmConfig:
    """The configuration for these operands: the kernel asked for (or the first that can take them),
    its tile and stage count (the caller's, else defaults that fit the shared memory)."""
    if kernel is not None and kernel not in KERNELS:
        raise ArgumentError(f"unknown GEMM kernel {kernel!r}; choose one of: {', '.join(KERNELS)}")
    names = [kernel] if kernel is not None else list(KERNELS)
    reasons = {name: why_not(KERNELS[name], a, b, facts) for name in names}
    usable = [name for name in names if reasons[name] is None]
    if not usable:
        raise ArgumentError("no GEMM kernel can take these operands here: "
                            + "; ".join(f"{name} {why}" for name, why in reasons.items()))
    if kernel is None and tile is None and stages is None:
        tuned = _tuned(a, b, out_dtype, facts, usable)
        if tuned is not None:
            return tuned
    rec = KERNELS[usable[0]]
    size = ITEMSIZE[a.dtype]
    align = alignment(a, b) if rec.operands == "pointers" else 16
    bm, bn = _tile(rec, tile, a.rows, b.cols, align, facts.sm_count, (not a.row_major, b.row_major))
    fit = min(rec.max_stages((bm, bn), facts.smem_per_block_optin, size), rec.max_stages_default)
    stages_given = stages
    if stages is None:
        stages = rec.default_stages((bm, bn), fit)
    stages = check_int(stages, "stages", 1, 32)
    if stages > fit:
        raise ArgumentError(f"{stages} stages of {rec.stage_bytes((bm, bn), size) // 1024} KiB (tile {bm} x {bn}) "
                            f"do not fit the {facts.smem_per_block_optin // 1024} KiB of shared memory a block may use; "
                            f"at most {fit}")
    splits = 1
    if rec.split_k:
        splits = split_count(-(-a.rows // bm) * -(-b.cols // bn), -(-a.cols // rec.bk), facts.sm_count)
    cfg = GemmConfig(rec.name, a.dtype, out_dtype, (bm, bn), stages, not a.row_major, b.row_major, align,
                     splits=splits)
    if rec.pairs_share_b((bm, bn), a, b, splits) and rec.pairs_pay((bm, bn), a, b, facts.sm_count):
        cfg = paired_config(cfg, a, b, facts, stages_given)
    elif tile is None and rec.pair_k_pays(a.rows, b.cols, a.cols, facts.sm_count, align, (cfg.a_mn, cfg.b_mn)):
        cfg = pair_k_config(replace(cfg, tile=rec.pair_k_tile, splits=1), facts, stages_given)
    else:
        cfg = replace(cfg, stream_k=stream_k_default(rec, a, b, (bm, bn), splits, facts.sm_count))
    return cfg


def stream_k_default(rec: GemmKernel, a: Matrix, b: Matrix, tile: tuple[int, int], splits: int, sms: int,
                     share: str | None = None) -> bool:
    """Whether this tile of A x B shares its last wave out by default (one split, a kernel that can): where the
    SMs that wave leaves idle cost more than the sharing (gemm_schedule.stream_k_pays). With ``share`` "a" or "b"
    the units are cluster pairs of tiles sharing that operand, over half the SMs."""
    tiles_m, tiles_n = -(-a.rows // tile[0]), -(-b.cols // tile[1])
    units = work_units(tiles_m, tiles_n, share)
    return (rec.stream_k and splits == 1
            and stream_k_pays(units, -(-a.cols // rec.bk), sms // 2 if share else sms))


def _tuned(a: Matrix, b: Matrix, out_dtype: str, facts, usable) -> GemmConfig | None:
    """The configuration of this shape class's tuning record (asynccopy.tuning), if there is one whose
    kernel, tile and stages can take these operands here."""
    record = tuning.lookup(facts, a.dtype, not a.row_major, b.row_major, a.rows, b.cols, a.cols, alignment(a, b))
    if not record or record.get("kernel") not in usable:
        return None
    try:
        tile, stages, splits = tuple(record["tile"]), int(record["stages"]), int(record.get("splits", 1))
        cfg = configure(a, b, out_dtype, facts, kernel=record["kernel"], tile=tile, stages=stages)
    except (ArgumentError, KeyError, TypeError, ValueError):
        return None  # a record of another alignment or an older format: the defaults then
    k_blocks = -(-a.cols // cfg.record.bk)
    cfg = replace(cfg, splits=splits) if cfg.record.split_k and 1 <= splits <= k_blocks else cfg
    if record.get("pair_k") and cfg.tile == cfg.record.pair_k_tile and cfg.splits == 1:
        return pair_k_config(cfg, facts, stages)  # the record ran as pairs splitting each tile's k (stages fit: above)
    pair = cfg.record.pairs_share_b(cfg.tile, a, b, cfg.splits)
    pair = pair and bool(record.get("paired", False))  # a record from before the pairs ran alone
    if pair:  # with the record's staging buffers and whether its pairs shared their last wave out (a record from
        # before those: two buffers, no stream-K)
        return replace(cfg, defines=paired_defines(int(record.get("epi_bufs", 2))),
                       stream_k=bool(record.get("stream_k", False)) and cfg.splits == 1)
    # and whether it shared its last wave out (a record from before stream-K: the default's rule)
    sk = stream_k_default(cfg.record, a, b, cfg.tile, cfg.splits, facts.sm_count)
    sk = bool(record.get("stream_k", sk)) and cfg.record.stream_k and cfg.splits == 1
    return replace(cfg, defines=(), stream_k=sk)


# ---------------------------------------------------------------------------------------------
# Launch

_configs = memo.Memo()  # gemm's configuration per kind of operands (memo.matrix_key), out dtype, device and arguments

def gemm(a, b, *, out=None, kernel: str | None = None, stages: int | None = None, tile=None,
         out_dtype: str | None = None, stream=None):
    """C = A x B for 2D CUDA arrays (PyTorch, CuPy, JAX, ...): A [m, k], B [k, n], both bf16 or both
    f16, each row-major or column-major (a transposed view: ``x @ w.T`` is ``gemm(x, w.T)``). Accumulates
    in f32; C has A's dtype unless ``out_dtype`` ("float32", ...) says otherwise, and is a new row-major
    array of A's kind unless ``out`` (row-major [m, n], any leading dimension) is given. Queued on
    ``stream`` (default: the current stream of a's framework). ``kernel``: one of KERNELS (default: the
    first that can take the operands here); ``tile``: the output tile's columns; ``stages``: the depth
    of the shared-memory pipeline (default: as many as fit)."""
    if stages is not None:
        check_int(stages, "stages", 1, 32)
    check_name(kernel, "kernel", KERNELS)
    arrays.check_device_array(a, "a")
    arrays.check_device_array(b, "b")
    if out is not None:
        arrays.check_device_array(out, "out")
    facts = device.current()
    seen: dict[int, int] = {}  # each device's current PyTorch stream, asked once this call (arrays.torch_stream)
    s = arrays.resolve_stream(stream, a, torch_streams=seen)
    ma, mb = matrix(a, "a", stream=s, torch_streams=seen), matrix(b, "b", stream=s, torch_streams=seen)
    out_dtype = check_operands(ma, mb, out_dtype)
    key = (memo.matrix_key(ma), memo.matrix_key(mb), out_dtype, facts, kernel, stages, repr(tile), tuning.generation())
    cfg = _configs.get(key, lambda: configure(ma, mb, out_dtype, facts, kernel=kernel, stages=stages, tile=tile))
    dst, ldc = _output(out, ma, mb, out_dtype, s, seen)
    m, k, n = ma.rows, ma.cols, mb.cols
    if m and n:
        if k == 0:
            zero(dst.ptr, m, n, ldc, ITEMSIZE[out_dtype], s)
        else:
            launch(cfg, ma, mb, dst.ptr, ldc, stream=s, facts=facts)
    return dst.finish(s)


def check_out(c: Matrix, a: Matrix, b: Matrix, out_dtype: str) -> int:
    """C's leading dimension, once ``out`` (as c) is checked: [m x n] of out_dtype, rows contiguous, on A's device, apart
    from A and B."""
    m, n = a.rows, b.cols
    if (c.rows, c.cols) != (m, n):
        raise ArgumentError(f"out must be [{m} x {n}], got [{c.rows} x {c.cols}]")
    if c.dtype != out_dtype:
        raise ArgumentError(f"out must be {out_dtype}, got {c.dtype}")
    if m and n > 1 and c.col_stride != 1:  # (a column [m x 1] is rows of one element, any row stride)
        raise ArgumentError("out must be row-major (unit column stride)")
    if c.device_id != a.device_id:
        raise ArgumentError(f"a is on device {a.device_id} and out on device {c.device_id}")
    arrays.check_apart("out", _span(c), (("a", _span(a)), ("b", _span(b))))
    return c.row_stride if m > 1 else n


def _span(x: Matrix) -> tuple[int, int, bool]:
    return arrays.span(x.ptr, (x.rows, x.cols), (x.row_stride, x.col_stride), ITEMSIZE[x.dtype])


def _output(out, a: Matrix, b: Matrix, out_dtype: str, stream, torch_streams: dict[int, int] | None = None
            ) -> tuple[arrays.Output, int]:
    """Where C goes, and its leading dimension. ``torch_streams``: see arrays.torch_stream."""
    m, n = a.rows, b.cols
    if out is None:
        like = arrays.DeviceArray(a.obj, a.ptr, m * n, (m, n), numpy_dtype(out_dtype), a.device_id)
        return arrays.empty_like(like, stream=stream, torch_streams=torch_streams), n
    arrays.check_writable(out, "out")
    c = matrix(out, "out", stream=stream, torch_streams=torch_streams)
    return arrays.Output(c.ptr, out), check_out(c, a, b, out_dtype)
