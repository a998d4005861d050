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
from dataclasses import dataclass, replace

import numpy as np

from . import arrays, build, device
from .dtypes import dtype_name
from .errors import ArgumentError, check_int
from .matrix import ITEMSIZE, Matrix, align, alignment, matrix

DTYPES = ("bfloat16", "float16", "float32")
OUT_DTYPES = ("bfloat16", "float16", "float32")
_STORAGE = {"bfloat16": "__nv_bfloat16", "float16": "__half", "float32": "float"}


@dataclass(frozen=True)
class GemmKernel:
    """What one GEMM kernel is: its source and template, what it takes, what its SASS must show.

    Every kernel is ``template <class T, class OutT, int BM, int BN, int STAGES, int A_MN, int B_MN, int ALIGN>``
    (T, OutT: __nv_bfloat16 / __half / float; A_MN: A is column-major; B_MN: B is row-major). Its
    arguments are either two TMA maps (``operands="tma"``: map_a, map_b, c, m, n, k, ldc) or pointers
    (``"pointers"``: a, lda, b, ldb, c, ldc, m, n, k). ALIGN is the power of two (16 at most) that divides
    the addresses and leading dimensions in bytes of both operands (pointer kernels: the copy width) or of
    C (TMA kernels: 16 stores C with TMA through shared memory, less writes it from the registers). A
    tile-per-block kernel is launched on one block per output tile; a persistent one on min(tiles, SMs).
    """

    name: str
    api: str
    source: str
    template: str
    min_cc: tuple[int, int]
    dtypes: tuple[str, ...]
    tiles: tuple[tuple[int, int], ...]  # (BM, BN) choices; the last is the default for wide outputs
    bk: int
    sass: tuple[str, ...]  # opcodes its cubin must hold
    threads: int
    operands: str  # "tma" or "pointers"
    persistent: bool = False
    arch_specific: bool = False  # needs the sm_90a-style target (wgmma, setmaxnreg)
    smem_reserve: int = 2048  # static shared memory beside the dynamic stages (barriers, alignment slack)
    epilogue_bytes: int = 0  # dynamic shared memory after the stages (staging of C)
    max_stages_default: int = 8
    narrow_tiles: tuple[tuple[int, int], ...] | None = None  # the tiles it takes under 16-byte alignment

    def stage_bytes(self, tile: tuple[int, int], itemsize: int = 2) -> int:
        return itemsize * self.bk * (tile[0] + tile[1])

    def max_stages(self, tile: tuple[int, int], smem_limit: int, itemsize: int = 2) -> int:
        return max(0, (smem_limit - self.smem_reserve - self.epilogue_bytes) // self.stage_bytes(tile, itemsize))

    def tiles_for(self, align: int = 16) -> tuple[tuple[int, int], ...]:
        """The tiles it takes at this operand alignment: under 16 bytes the narrower copies need more
        registers, and a pointer kernel's widest tile would spill."""
        return self.tiles if align >= 16 or self.narrow_tiles is None else self.narrow_tiles

    def default_tile(self, n: int, align: int = 16) -> tuple[int, int]:
        """The narrowest tile that covers n columns, else the widest."""
        tiles = self.tiles_for(align)
        return next((t for t in tiles if t[1] >= n), tiles[-1])


def itemsize(dtype: str) -> int:
    return ITEMSIZE[dtype]


KERNELS: dict[str, GemmKernel] = {
    k.name: k
    for k in (
        GemmKernel("wgmma", "TMA (128B swizzle) + wgmma from shared memory, a producer warp and two consumer "
                   "warpgroups on full/empty mbarriers, persistent grid in L2-friendly tile order",
                   "gemm_wgmma.cu", "gemm_wgmma", (9, 0), ("bfloat16", "float16"), ((128, 128), (128, 256)), 64,
                   ("UTMALDG", "HGMMA", "SYNCS"), 384, "tma", persistent=True, arch_specific=True,
                   epilogue_bytes=2 * 2 * 64 * 128),
        GemmKernel("mma", "multistage LDGSTS (zero-fill at the edges) into an XOR-swizzled shared layout, ldmatrix, "
                   "mma.sync m16n8k16; the Ampere design, and the fallback where TMA cannot take the operands",
                   "gemm_mma.cu", "gemm_mma", (8, 0), ("bfloat16", "float16"), ((128, 128), (128, 256)), 64,
                   ("LDGSTS", "LDSM", "HMMA"), 256, "pointers", narrow_tiles=((128, 128),)),
        GemmKernel("simt", "fp32 on the CUDA cores: multistage LDGSTS (zero-fill at the edges), register blocking, "
                   "128-bit shared loads from a conflict-free layout", "gemm_simt.cu", "gemm_simt", (8, 0),
                   ("float32",), ((64, 64), (128, 128)), 16, ("LDGSTS", "FFMA", "LDS.128"), 256, "pointers"),
    )
}


@dataclass(frozen=True)
class GemmConfig:
    kernel: str
    dtype: str
    out_dtype: str
    tile: tuple[int, int]  # (BM, BN)
    stages: int
    a_mn: bool  # A is MN-major in memory (a column-major view)
    b_mn: bool  # B is MN-major in memory (row-major [k, n])
    align: int = 16  # bytes dividing the addresses and leading dimensions of the operands (pointer kernels)
    # or of C (TMA kernels: 16 stores C with TMA)

    @property
    def record(self) -> GemmKernel:
        return KERNELS[self.kernel]

    @property
    def tile_n(self) -> int:
        return self.tile[1]

    def name_expression(self) -> str:
        args = [_STORAGE[self.dtype], _STORAGE[self.out_dtype], *map(str, self.tile), str(self.stages),
                str(int(self.a_mn)), str(int(self.b_mn)), str(self.align)]
        return f"{self.record.template}<{', '.join(args)}>"

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of a launch: the stages, C's staging and, for TMA's 1024-byte-aligned
        stages, 1024 bytes of slack to align them in."""
        slack = 1024 if self.record.operands == "tma" else 0
        return self.stages * self.record.stage_bytes(self.tile, ITEMSIZE[self.dtype]) + self.record.epilogue_bytes + slack

    def compile(self, arch: str | None = None) -> build.Module:
        target = device.parse_arch(arch) if arch is not None else device.current().arch
        need = self.record.min_cc
        if device.cc_of_arch(target) < need or self.record.arch_specific and not target.endswith("a"):
            raise ArgumentError(f"GEMM kernel {self.kernel!r} needs {device.arch_of_cc(need)}"
                                f"{' (its arch-specific instructions)' if self.record.arch_specific else ''}; "
                                f"got {target}")
        return build.compile(build.read_kernel(self.record.source), arch=target,
                             name_expressions=(self.name_expression(),), name=self.record.template)


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


def _tile(rec: GemmKernel, tile, n: int, align: int) -> tuple[int, int]:
    """The caller's tile ((BM, BN), or BN where one tile has it) checked against the record, or the
    default: the narrowest tile that covers n columns, else the widest."""
    if tile is None:
        return rec.default_tile(n, align)
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
    rec = KERNELS[usable[0]]
    size = ITEMSIZE[a.dtype]
    align = alignment(a, b) if rec.operands == "pointers" else 16
    bm, bn = _tile(rec, tile, b.cols, align)
    fit = min(rec.max_stages((bm, bn), facts.smem_per_block_optin, size), rec.max_stages_default)
    if stages is None:
        stages = fit
    stages = check_int(stages, "stages", 1, 32)
    if stages > fit:
        raise ArgumentError(f"{stages} stages of {rec.stage_bytes((bm, bn), size) // 1024} KiB (tile {bm} x {bn}) "
                            f"do not fit the {facts.smem_per_block_optin // 1024} KiB of shared memory a block may use; "
                            f"at most {fit}")
    return GemmConfig(rec.name, a.dtype, out_dtype, (bm, bn), stages, not a.row_major, b.row_major, align)


# ---------------------------------------------------------------------------------------------
# Launch


_MAP_TYPES = {"bfloat16": "BFLOAT16", "float16": "FLOAT16", "float32": "FLOAT32"}


@functools.lru_cache(maxsize=256)
def _tensor_map(ptr: int, dtype: str, outer: int, inner: int, lead: int, box_outer: int, box_inner: int):
    """The 128B-swizzled TMA map of a row-major [outer][inner] matrix (leading dimension ``lead``). A map
    holds only numbers (address, extents, strides, box), so one encoded for the same numbers is reused:
    repeated calls on the same buffers skip the validation and the driver's encode."""
    from cuda.core import Buffer
    from cuda.core._tensor_map import TensorMapDataType, TensorMapSwizzle
    from cuda.core.utils import StridedMemoryView

    from . import tensormap

    size = ITEMSIZE[dtype]
    if outer == 1:
        lead = -(-inner * size // 16) * 16 // size  # one row: its stride is never used, but must be legal
    spec = tensormap.TensorMapSpec(dtype, (inner, outer), (lead * size,), (box_inner, box_outer), swizzle="128B",
                                   address=ptr)
    tensormap.validate(spec, lint=False)
    nbytes = size * ((outer - 1) * lead + inner)
    view = StridedMemoryView.from_buffer(Buffer.from_handle(ptr, nbytes), shape=(outer, inner),
                                         strides=(lead, 1), dtype=np.dtype(f"uint{8 * size}"))
    return view.as_tensor_map(box_dim=(box_outer, box_inner), data_type=getattr(TensorMapDataType, _MAP_TYPES[dtype]),
                              swizzle=TensorMapSwizzle.SWIZZLE_128B)


def _operand_map(mtx: Matrix, box_outer: int, box_inner: int):
    outer, inner = (mtx.rows, mtx.cols) if mtx.row_major else (mtx.cols, mtx.rows)
    return _tensor_map(mtx.ptr, mtx.dtype, outer, inner, mtx.lead, box_outer, box_inner)


@functools.cache
def _kernel(cfg: GemmConfig, arch: str, hang_ns: int):
    return cfg.compile(arch).kernel(cfg.name_expression())


def launch(cfg: GemmConfig, a: Matrix, b: Matrix, c_ptr: int, ldc: int, *, stream, facts) -> None:
    """C[m, n] (row-major, leading dimension ldc) = A x B on raw, checked operands."""
    m, k, n = a.rows, a.cols, b.cols
    rec = cfg.record
    bm, bn = cfg.tile
    tiles = -(-m // bm) * -(-n // bn)
    grid = max(1, min(tiles, facts.sm_count)) if rec.persistent else tiles
    if rec.operands == "tma":
        map_a = _operand_map(a, 64, 64) if cfg.a_mn else _operand_map(a, bm, rec.bk)
        map_b = _operand_map(b, 64, 64) if cfg.b_mn else _operand_map(b, bn, rec.bk)
        size = ITEMSIZE[cfg.out_dtype]
        cfg = replace(cfg, align=align(c_ptr, ldc * size if m > 1 else 16))
        # C in boxes of 64 rows x 128 bytes (the kernel's staging chunks); unused when C is not 16-byte aligned
        map_c = _tensor_map(c_ptr, cfg.out_dtype, m, n, ldc, 64, 128 // size) if cfg.align == 16 else map_a
        args = (map_a, map_b, map_c, c_ptr, np.int32(m), np.int32(n), np.int32(k), np.int64(ldc))
    else:
        args = (a.ptr, np.int64(a.lead), b.ptr, np.int64(b.lead), c_ptr, np.int64(ldc), np.int32(m), np.int32(n),
                np.int32(k))
    kernel = _kernel(cfg, facts.arch, build.hang_timeout_ns())
    build.launch(kernel, *args, grid=grid, block=rec.threads, stream=stream, shmem=cfg.smem_bytes)


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
    arrays.check_device_array(a, "a")
    arrays.check_device_array(b, "b")
    facts = device.current()
    s = arrays.resolve_stream(stream, a)
    ma, mb = matrix(a, "a", stream=s), matrix(b, "b", stream=s)
    out_dtype = check_operands(ma, mb, out_dtype)
    cfg = configure(ma, mb, out_dtype, facts, kernel=kernel, stages=stages, tile=tile)
    dst, ldc = _output(out, ma, mb, out_dtype, s)
    m, k, n = ma.rows, ma.cols, mb.cols
    if m and n:
        if k == 0:
            _zero(dst.ptr, m, n, ldc, np.dtype(_np_dtype(out_dtype)).itemsize, s)
        else:
            launch(cfg, ma, mb, dst.ptr, ldc, stream=s, facts=facts)
    return dst.finish(s)


def _np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def _output(out, a: Matrix, b: Matrix, out_dtype: str, stream) -> tuple[arrays.Output, int]:
    """Where C goes, and its leading dimension."""
    m, n = a.rows, b.cols
    if out is None:
        like = arrays.DeviceArray(a.obj, a.ptr, m * n, (m, n), np.dtype(_np_dtype(out_dtype)), a.device_id)
        return arrays.empty_like(like, stream=stream), n
    c = matrix(out, "out", stream=stream)
    if (c.rows, c.cols) != (m, n):
        raise ArgumentError(f"out must be [{m} x {n}], got [{c.rows} x {c.cols}]")
    if c.dtype != out_dtype:
        raise ArgumentError(f"out must be {out_dtype}, got {c.dtype}")
    if not c.row_major:
        raise ArgumentError("out must be row-major (unit column stride)")
    return arrays.Output(c.ptr, out), max(c.lead, n)
