"""C = A x B from Python on asynccopy's pipelined kernels (kernels/gemm_*.cu).

    c = asynccopy.gemm(a, b)                 # a: [m, k], b: [k, n], bf16 or f16, any CUDA array kind
    c = asynccopy.gemm(x, w.T)               # a transposed view is fine: either operand row- or column-major

Data flows one way: arrays → checks (pure Python, one clear error) → a GemmConfig (kernel record, tile,
stages, the operands' majors) → tensor maps → compile (cached) → launch on the caller's stream → C
of the caller's kind. Each kernel is one record in KERNELS: what it takes (dtypes, arch, strides),
its source and template, the instructions its SASS must show, its tiles and stage counts.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from . import arrays, build, device, memo, tuning, workspace
from . import cluster as clusters
from .dtypes import dtype_name, numpy_dtype
from .errors import ArgumentError, check_int, check_name
from .gemm_kernels import (
    _STORAGE,
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
from .gemm_schedule import split_count, stream_k_pays, stream_k_plan, work_units
from .matrix import ITEMSIZE, Matrix, align, alignment, matrix

__all__ = ["CLUSTER_KNOB", "DTYPES", "EPI_BUFS_KNOB", "KERNELS", "MMA_WARPS_KNOB", "OUT_DTYPES", "PAIRED",
           "PAIR_BULK_KNOB", "PAIR_K", "SHARE_KNOB", "GemmConfig", "GemmKernel", "Matrix", "check_operands", "check_out",
           "configure", "gemm", "itemsize", "launch", "matrix", "split_count", "stream_k_default", "stream_k_pays",
           "stream_k_plan", "why_not"]


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


_MAP_TYPES = {"bfloat16": "BFLOAT16", "float16": "FLOAT16", "float32": "FLOAT32"}


@functools.lru_cache(maxsize=256)
def _tensor_map(ptr: int, dtype: str, outer: int, inner: int, lead: int, box_outer: int, box_inner: int,
                l2_promotion: str = "none"):
    """The 128B-swizzled TMA map of a row-major [outer][inner] matrix (leading dimension ``lead``). A map
    holds only numbers (address, extents, strides, box), so one encoded for the same numbers is reused:
    repeated calls on the same buffers skip the validation and the driver's encode."""
    from cuda.core import Buffer
    from cuda.core._tensor_map import TensorMapDataType, TensorMapL2Promotion, TensorMapSwizzle
    from cuda.core.utils import StridedMemoryView

    from . import tensormap

    size = ITEMSIZE[dtype]
    if outer == 1:
        lead = -(-inner * size // 16) * 16 // size  # one row: its stride is never used, but must be legal
    spec = tensormap.TensorMapSpec(dtype, (inner, outer), (lead * size,), (box_inner, box_outer), swizzle="128B",
                                   l2_promotion=l2_promotion, address=ptr)
    tensormap.validate(spec, lint=False)
    nbytes = size * ((outer - 1) * lead + inner)
    view = StridedMemoryView.from_buffer(Buffer.from_handle(ptr, nbytes), shape=(outer, inner),
                                         strides=(lead, 1), dtype=np.dtype(f"uint{8 * size}"))
    l2 = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}[l2_promotion]
    return view.as_tensor_map(box_dim=(box_outer, box_inner), data_type=getattr(TensorMapDataType, _MAP_TYPES[dtype]),
                              swizzle=TensorMapSwizzle.SWIZZLE_128B, l2_promotion=getattr(TensorMapL2Promotion, l2))


def _operand_map(mtx: Matrix, box_outer: int, box_inner: int, l2_promotion: str = "none"):
    outer, inner = (mtx.rows, mtx.cols) if mtx.row_major else (mtx.cols, mtx.rows)
    return _tensor_map(mtx.ptr, mtx.dtype, outer, inner, mtx.lead, box_outer, box_inner, l2_promotion)


@functools.cache
def _kernel(cfg: GemmConfig, arch: str, hang_ns: int):
    """The configuration's kernel, loaded; built for two blocks per SM where its record has the knob and
    that build needs no local memory (+4% for simt at 4096^3 on the H200), else as it is."""
    knob = cfg.record.two_blocks_knob
    if knob and not cfg.defines and cfg.tile in cfg.record.two_blocks_tiles:
        name, _, value = knob.partition("=")
        kernel = replace(cfg, defines=((name, value),)).compile(arch).kernel(cfg.name_expression())
        if kernel.attributes.local_size_bytes == 0:
            return kernel
    return cfg.compile(arch).kernel(cfg.name_expression())


@functools.cache
def _sum_kernel(out_dtype: str, arch: str):
    module = build.compile(build.read_kernel("gemm_splitk.cu"), arch=arch, name="gemm_splitk",
                           name_expressions=(f"gemm_splitk_sum<{_STORAGE[out_dtype]}>",))
    return module.kernel(f"gemm_splitk_sum<{_STORAGE[out_dtype]}>")


def launch(cfg: GemmConfig, a: Matrix, b: Matrix, c_ptr: int, ldc: int, *, stream, facts) -> None:
    """C[m, n] (row-major, leading dimension ldc) = A x B on raw, checked operands."""
    m, k, n = a.rows, a.cols, b.cols
    rec = cfg.record
    if rec.operands == "tma":
        _launch_tma(cfg, a, b, c_ptr, ldc, stream=stream, facts=facts)
        return
    bm, bn = cfg.tile
    args = (a.ptr, np.int64(a.lead), b.ptr, np.int64(b.lead), c_ptr, np.int64(ldc), np.int32(m), np.int32(n),
            np.int32(k))
    kernel = _kernel(cfg, facts.arch, build.hang_timeout_ns())
    build.launch(kernel, *args, grid=-(-m // bm) * -(-n // bn), block=cfg.threads, stream=stream, shmem=cfg.smem_bytes)


def _launch_tma(cfg: GemmConfig, a: Matrix, b: Matrix, c_ptr: int, ldc: int, *, stream, facts) -> None:
    """The TMA kernel: operands and C through tensor maps; with splits > 1, f32 partials into a workspace
    (stream-ordered, freed after use) that gemm_splitk_sum adds up into C."""
    m, k, n = a.rows, a.cols, b.cols
    rec = cfg.record
    bm, bn = cfg.tile
    l2 = cfg.l2_promotion
    cluster, share = cluster_of(cfg)
    # clusters of two sharing an operand: each block loads and multicasts half of its tile
    a_rows, b_rows = (bm // 2 if share == "a" else bm), (bn // 2 if share == "b" else bn)
    map_a = _operand_map(a, 64, 64, l2) if cfg.a_mn else _operand_map(a, a_rows, rec.bk, l2)
    map_b = _operand_map(b, 64, 64, l2) if cfg.b_mn else _operand_map(b, b_rows, rec.bk, l2)
    splits, ws = cfg.splits, None
    if splits > 1:
        from cuda.core import Device

        ldw = -(-n // 4) * 4  # 16-byte aligned rows: the sum reads 4 columns at a time
        ws = Device(facts.device_id).allocate(4 * splits * m * ldw, stream=stream)
        # ordinary stores of pairs of floats (ALIGN 8), not TMA stores: the partials are read back, and
        # compute-sanitizer's initcheck does not count TMA stores as initializing what they write
        kcfg = replace(cfg, out_dtype="float32", align=8, splits=1)
        map_c, c_arg, ld_arg = map_a, int(ws.handle), ldw
    else:
        size = ITEMSIZE[cfg.out_dtype]
        c_align = align(c_ptr, ldc * size if m > 1 else 16)
        if c_align == 16 and (n * size) % 16:
            # a TMA store of a box that reaches a row's end writes on to the next 16-byte boundary (seen on
            # the H200: a 301-column bf16 C got zeros in its padding columns 301..303): C from the
            # registers then, in pairs
            c_align = 8
        kcfg = replace(cfg, align=c_align, splits=1)
        # C in boxes of 64 rows x 128 bytes (the kernel's staging chunks); unused when C is not 16-byte aligned
        map_c = _tensor_map(c_ptr, cfg.out_dtype, m, n, ldc, 64, 128 // size) if kcfg.align == 16 else map_a
        c_arg, ld_arg = c_ptr, ldc
    tiles_n = -(-n // bn)
    tiles_m = -(-m // bm)
    units = work_units(tiles_m, tiles_n, share) * splits  # tiles (pairs of them where a pair multicasts) x splits
    kernel = _kernel(kcfg, facts.arch, build.hang_timeout_ns())
    # the workers: blocks, or clusters (the grid counts clusters then: as many as can be resident at once, asked
    # once a kernel), at most one per unit
    workers = facts.sm_count if cluster == 1 else _resident.get(
        (kernel, cluster, facts.device_id),
        lambda: clusters.max_active_clusters(kernel, cluster, block=rec.threads, shmem=kcfg.smem_bytes, stream=stream))
    grid, sk_tiles, flags, partials = max(1, min(units, workers)), 0, 0, 0
    if cfg.stream_k and share != "k" and splits == 1:
        sk_tiles, grid = stream_k_plan(units, -(-k // rec.bk), workers)
        if sk_tiles:  # each block's two consumers' f32 accumulators, for a contributor's piece
            flags, partials = workspace.stream_k(facts.device_id, stream, 4 * grid * cluster * bm * bn)
    args = (map_a, map_b, map_c, c_arg, np.int32(m), np.int32(n), np.int32(k), np.int64(ld_arg), np.int32(splits),
            np.int32(sk_tiles), partials, flags)
    build.launch(kernel, *args, grid=grid, block=rec.threads, stream=stream, shmem=kcfg.smem_bytes,
                 cluster=cluster if cluster > 1 else None)
    if ws is not None:
        groups = m * -(-n // 4)
        build.launch(_sum_kernel(cfg.out_dtype, facts.arch), int(ws.handle), np.int64(m * ldw), np.int64(ldw),
                     np.int32(splits), c_ptr, np.int64(ldc), np.int32(m), np.int32(n),
                     grid=max(1, min(-(-groups // 256), 8 * facts.sm_count)), block=256, stream=stream)
        ws.close(stream)


_configs = memo.Memo()  # gemm's configuration per kind of operands (memo.matrix_key), out dtype, device and arguments
_resident = memo.Memo()  # per (kernel, cluster size, device): the clusters it keeps resident at once
# (cuOccupancyMaxActiveClusters; one build runs on every GPU of its arch, whose SM counts may differ)


def _zero(ptr: int, rows: int, cols: int, ld: int, itemsize: int, stream) -> None:
    from cuda.bindings import driver

    device.check_driver(driver.cuMemsetD2D8Async(ptr, ld * itemsize, 0, cols * itemsize, rows, int(stream.handle)),
                        "cuMemsetD2D8Async")


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
    s = arrays.resolve_stream(stream, a)
    ma, mb = matrix(a, "a", stream=s), matrix(b, "b", stream=s)
    out_dtype = check_operands(ma, mb, out_dtype)
    key = (memo.matrix_key(ma), memo.matrix_key(mb), out_dtype, facts, kernel, stages, repr(tile), tuning.generation())
    cfg = _configs.get(key, lambda: configure(ma, mb, out_dtype, facts, kernel=kernel, stages=stages, tile=tile))
    dst, ldc = _output(out, ma, mb, out_dtype, s)
    m, k, n = ma.rows, ma.cols, mb.cols
    if m and n:
        if k == 0:
            _zero(dst.ptr, m, n, ldc, ITEMSIZE[out_dtype], s)
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


def _output(out, a: Matrix, b: Matrix, out_dtype: str, stream) -> tuple[arrays.Output, int]:
    """Where C goes, and its leading dimension."""
    m, n = a.rows, b.cols
    if out is None:
        like = arrays.DeviceArray(a.obj, a.ptr, m * n, (m, n), numpy_dtype(out_dtype), a.device_id)
        return arrays.empty_like(like, stream=stream), n
    arrays.check_writable(out, "out")
    c = matrix(out, "out", stream=stream)
    return arrays.Output(c.ptr, out), check_out(c, a, b, out_dtype)
