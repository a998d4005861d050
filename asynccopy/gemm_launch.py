"""Running a GEMM configuration (asynccopy.matmul chooses it): the operands' and C's TMA maps, the kernel (compiled,
cached), and its launch worked out once per configuration and extents (a _Plan: grid, block, shared memory, cluster,
the arguments that stay), so that a call in a loop spends its time on the launch itself.

Launch order: A, B (and C) maps → the kernel on the caller's stream → with split k, gemm_splitk_sum adding the f32
partials into C. A plan is kept per (configuration, m x n x k, C's alignment, device, hang bound): everything it
holds follows from those; what follows from the arrays' addresses (the maps, the workspace) is found each call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from . import build, device, memo, workspace
from . import cluster as clusters
from .gemm_kernels import _STORAGE, GemmConfig, cluster_of
from .gemm_schedule import stream_k_plan, work_units
from .matrix import ITEMSIZE, Matrix, align

__all__ = ["launch", "zero"]


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


@dataclass(frozen=True)
class _Plan:
    """One GEMM launch worked out once per (configuration, m x n x k, C's alignment, device, hang bound): the kernel at
    its launch shape and the arguments that stay from call to call; a call adds its addresses and maps."""

    run: build.Launch
    mnk: tuple  # m, n, k as np.int32
    box_a: tuple[int, int] = (0, 0)  # TMA kernels: the operands' map boxes (rows, columns)
    box_b: tuple[int, int] = (0, 0)
    counts: tuple = ()  # TMA kernels: splits and stream-K tiles as np.int32
    partial_bytes: int = 0  # stream-K: the partial sums it keeps in the stream's workspace (0: none)
    ldw: int = 0  # split k: the f32 workspace's row length
    sum: build.Launch | None = None  # split k: gemm_splitk_sum at its grid


def launch(cfg: GemmConfig, a: Matrix, b: Matrix, c_ptr: int, ldc: int, *, stream, facts) -> None:
    """C[m, n] (row-major, leading dimension ldc) = A x B on raw, checked operands."""
    m, k, n = a.rows, a.cols, b.cols
    c_align = 0
    if cfg.record.operands == "tma" and cfg.splits == 1:
        size = ITEMSIZE[cfg.out_dtype]
        c_align = align(c_ptr, ldc * size if m > 1 else 16)
        if c_align == 16 and (n * size) % 16:
            # a TMA store of a box that reaches a row's end writes on to the next 16-byte boundary (seen on
            # the H200: a 301-column bf16 C got zeros in its padding columns 301..303): C from the
            # registers then, in pairs
            c_align = 8
    hang_ns = build.hang_timeout_ns()
    plan = _plans.get((cfg, m, n, k, c_align, facts, hang_ns),
                      lambda: _plan(cfg, m, n, k, c_align, facts, hang_ns, stream))
    if cfg.record.operands == "tma":
        _launch_tma(plan, cfg, a, b, c_ptr, ldc, c_align, stream=stream, facts=facts)
        return
    plan.run(stream, a.ptr, np.int64(a.lead), b.ptr, np.int64(b.lead), c_ptr, np.int64(ldc), *plan.mnk)


def _plan(cfg: GemmConfig, m: int, n: int, k: int, c_align: int, facts, hang_ns: int, stream) -> _Plan:
    """The launch of ``cfg`` for an m x n x k product (TMA kernels: C ``c_align``-byte aligned; 0 with split k)."""
    rec = cfg.record
    mnk = (np.int32(m), np.int32(n), np.int32(k))
    bm, bn = cfg.tile
    if rec.operands != "tma":
        kernel = _kernel(cfg, facts.arch, hang_ns)
        return _Plan(build.Launch(kernel, grid=-(-m // bm) * -(-n // bn), block=cfg.threads, shmem=cfg.smem_bytes), mnk)
    cluster, share = cluster_of(cfg)
    # clusters of two sharing an operand: each block loads and multicasts half of its tile
    a_rows, b_rows = (bm // 2 if share == "a" else bm), (bn // 2 if share == "b" else bn)
    box_a, box_b = (64, 64) if cfg.a_mn else (a_rows, rec.bk), (64, 64) if cfg.b_mn else (b_rows, rec.bk)
    splits, ldw, total = cfg.splits, 0, None
    if splits > 1:
        ldw = -(-n // 4) * 4  # 16-byte aligned rows: the sum reads 4 columns at a time
        # ordinary stores of pairs of floats (ALIGN 8), not TMA stores: the partials are read back, and
        # compute-sanitizer's initcheck does not count TMA stores as initializing what they write
        kcfg = replace(cfg, out_dtype="float32", align=8, splits=1)
        total = build.Launch(_sum_kernel(cfg.out_dtype, facts.arch), block=256,
                             grid=max(1, min(-(-(m * -(-n // 4)) // 256), 8 * facts.sm_count)))
    else:  # C stored by TMA where it is 16-byte aligned
        kcfg = replace(cfg, align=c_align, splits=1)
    units = work_units(-(-m // bm), -(-n // bn), share) * splits  # tiles (pairs of them where a pair multicasts) x splits
    kernel = _kernel(kcfg, facts.arch, hang_ns)
    # the workers: blocks, or clusters (the grid counts clusters then: as many as can be resident at once, asked
    # once a kernel and device: one build runs on every GPU of its arch, whose SMs may differ), at most one per unit
    workers = facts.sm_count if cluster == 1 else _resident.get(
        (kernel, cluster, facts.device_id),
        lambda: clusters.max_active_clusters(kernel, cluster, block=rec.threads, shmem=kcfg.smem_bytes, stream=stream))
    grid, sk_tiles, partial_bytes = max(1, min(units, workers)), 0, 0
    if cfg.stream_k and share != "k" and splits == 1:
        sk_tiles, grid = stream_k_plan(units, -(-k // rec.bk), workers)
        if sk_tiles:  # each block's two consumers' f32 accumulators, for a contributor's piece
            partial_bytes = 4 * grid * cluster * bm * bn
    run = build.Launch(kernel, grid=grid, block=rec.threads, shmem=kcfg.smem_bytes, cluster=cluster if cluster > 1 else None)
    return _Plan(run, mnk, box_a, box_b, (np.int32(splits), np.int32(sk_tiles)), partial_bytes, ldw, total)


def _launch_tma(plan: _Plan, cfg: GemmConfig, a: Matrix, b: Matrix, c_ptr: int, ldc: int, c_align: int, *, stream,
                facts) -> None:
    """The TMA kernel: operands and C through tensor maps (C's where it is 16-byte aligned); with splits > 1, f32
    partials into a workspace (stream-ordered, freed after use) that gemm_splitk_sum adds up into C."""
    m, n = a.rows, b.cols
    l2 = cfg.l2_promotion
    map_a, map_b = _operand_map(a, *plan.box_a, l2), _operand_map(b, *plan.box_b, l2)
    ws, c_arg, ld_arg, map_c = None, c_ptr, ldc, map_a  # C's map: unused when C is not 16-byte aligned
    if plan.sum is not None:
        ws = device.cuda_core().Device(facts.device_id).allocate(4 * cfg.splits * m * plan.ldw, stream=stream)
        c_arg, ld_arg = int(ws.handle), plan.ldw
    elif c_align == 16:  # in boxes of 64 rows x 128 bytes (the kernel's staging chunks)
        map_c = _tensor_map(c_ptr, cfg.out_dtype, m, n, ldc, 64, 128 // ITEMSIZE[cfg.out_dtype])
    flags = partials = 0
    if plan.partial_bytes:
        flags, partials = workspace.stream_k(facts.device_id, stream, plan.partial_bytes)
    plan.run(stream, map_a, map_b, map_c, c_arg, *plan.mnk, np.int64(ld_arg), *plan.counts, partials, flags)
    if ws is not None:
        plan.sum(stream, int(ws.handle), np.int64(m * plan.ldw), np.int64(plan.ldw), np.int32(cfg.splits), c_ptr,
                 np.int64(ldc), *plan.mnk[:2])
        ws.close(stream)


_resident = memo.Memo()  # per (kernel, cluster size, device): the clusters it keeps resident at once
# (cuOccupancyMaxActiveClusters)
_plans = memo.Memo()  # a configuration's launch per extents, C's alignment, device and hang bound (_Plan)


def zero(ptr: int, rows: int, cols: int, ld: int, itemsize: int, stream) -> None:
    """C = 0 (an empty inner dimension): rows x cols elements of itemsize bytes, leading dimension ld, on stream."""
    from cuda.bindings import driver

    device.check_driver(driver.cuMemsetD2D8Async(ptr, ld * itemsize, 0, cols * itemsize, rows, int(stream.handle)),
                        "cuMemsetD2D8Async")
