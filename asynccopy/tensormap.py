"""Tensor maps (TMA descriptors): a validator in pure Python that runs before any driver call and
names the rule a configuration breaks, and a builder on top of cuda.core.

Terms follow the driver (``cuTensorMapEncodeTiled``): dimension 0 is the *innermost* (contiguous)
one; ``global_strides`` has rank - 1 entries, the byte strides of dimensions 1..rank-1. Builders that
take a NumPy-order shape (outermost first) convert to this order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .dtypes import DTYPES, dtype_name
from .errors import ArgumentError


class TensorMapError(ArgumentError):
    """A tensor-map configuration that the driver (or the hardware) would reject or mishandle."""


# Tensor-map data types: asynccopy.dtypes.DTYPES (int8/int16 have none of their own: use uint8/uint16).


SWIZZLES = ("none", "32B", "64B", "128B")
SWIZZLE_SPAN = {"32B": 32, "64B": 64, "128B": 128}
SWIZZLE_REPEAT = {"none": 128, "32B": 256, "64B": 512, "128B": 1024}  # also the smem alignment each needs
INTERLEAVES = ("none", "16B", "32B")
L2_PROMOTIONS = ("none", "64B", "128B", "256B")
OOB_FILLS = ("zero", "nan")
MAX_DIM = 1 << 32  # driver 580 accepts 2^32 (cuda.h of CUDA 13.5 says 2^31; probed on an H200)
MAX_STRIDE = 1 << 40
MAX_BOX_BYTES = 228 * 1024  # the driver's box limit (driver 580): elem x prod(box_dim[i] // element_strides[i])
MAX_SMEM_BLOCK = 227 * 1024  # what one block of a CC 9.0 device can hold: a larger box is useless (safety)


@dataclass(frozen=True)
class TensorMapSpec:
    """Every field of a tiled tensor map, innermost dimension first."""

    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dims 1..rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...] | None = None
    interleave: str = "none"
    swizzle: str = "none"
    l2_promotion: str = "none"
    oob_fill: str = "zero"
    address: int = 0

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype][0]

    @property
    def box_bytes(self) -> int:
        """Bytes one load of the box delivers to shared memory (OOB-filled elements included)."""
        es = self.element_strides or (1,) * self.rank
        count = 1
        for i, (b, s) in enumerate(zip(self.box, es)):
            count *= b if (i == 0 and self.interleave == "none") else -(-b // s)
        return count * self.elem_bytes

    @staticmethod
    def from_numpy_order(dtype, shape, *, box, strides_bytes=None, element_strides=None, address=0,
                         **options) -> TensorMapSpec:
        """A spec from a NumPy-style description (outermost first, strides in bytes: one per dimension,
        the innermost one the element size, since TMA reads the innermost dimension contiguously)."""
        name = dtype_name(dtype)
        shape = tuple(int(d) for d in shape)
        elem = DTYPES[name][0] if name in DTYPES else 1
        if strides_bytes is None:
            strides_bytes, acc = [], elem
            for extent in reversed(shape):
                strides_bytes.append(acc)
                acc *= extent
            strides_bytes = tuple(reversed(strides_bytes))
        strides_bytes = tuple(int(s) for s in strides_bytes)
        if len(strides_bytes) != len(shape):
            raise TensorMapError(f"strides need one entry per dimension ({len(shape)}, outermost first, in bytes), "
                                 f"got {len(strides_bytes)}")
        if shape and shape[-1] > 1 and strides_bytes[-1] != elem:
            raise TensorMapError(f"the innermost dimension must be contiguous: its stride must be the element size "
                                 f"({elem} bytes), got {strides_bytes[-1]}")
        if isinstance(address, bool) or not 0 <= int(address) < 1 << 64:
            raise TensorMapError(f"global address must be in [0, 2^64), got {address}")
        es = tuple(element_strides[::-1]) if element_strides is not None else None
        return TensorMapSpec(name, shape[::-1], strides_bytes[::-1][1:], tuple(int(b) for b in box)[::-1], es,
                             address=int(address), **options)


def validate(spec: TensorMapSpec, *, lint: bool = True, safety: bool = True) -> TensorMapSpec:
    """Raise TensorMapError naming the first broken rule; return the spec when it is valid.

    The rules are those of ``cuTensorMapEncodeTiled`` on compute capability 9.0. With ``safety``,
    also what the driver accepts but the hardware then does unexpectedly (a swizzled box row narrower
    than the span is padded to it in shared memory); with ``lint``, what is merely a likely mistake
    (a box larger than the tensor). ``safety=False, lint=False``: exactly the driver's rules.
    """
    _fields(spec)
    _extents(spec)
    _box(spec)
    if safety:
        _safety(spec)
    if lint:
        for i, (b, d) in enumerate(zip(spec.box, spec.dims)):
            if b > d:
                raise TensorMapError(f"box_dim[{i}] = {b} is larger than the tensor's global_dim[{i}] = {d} "
                                     f"(the driver accepts it; every load would be partly out of bounds)")
    return spec


def _fields(spec: TensorMapSpec) -> None:
    """Rank, type, the enumerated fields and how many entries each list has."""
    r = spec.rank
    if not 1 <= r <= 5:
        raise TensorMapError(f"rank must be in [1, 5], got {r}")
    if spec.dtype not in DTYPES:
        raise TensorMapError(f"dtype {spec.dtype} has no tensor-map type; supported: {', '.join(DTYPES)}")
    for name, value, allowed in (("interleave", spec.interleave, INTERLEAVES), ("swizzle", spec.swizzle, SWIZZLES),
                                 ("l2_promotion", spec.l2_promotion, L2_PROMOTIONS), ("oob_fill", spec.oob_fill, OOB_FILLS)):
        if value not in allowed:
            raise TensorMapError(f"{name} must be one of {', '.join(allowed)} on compute capability 9.0, got {value!r}")
    if spec.interleave != "none" and r < 3:
        raise TensorMapError(f"interleave {spec.interleave} needs rank >= 3, got rank {r}")
    if len(spec.strides) != r - 1:
        raise TensorMapError(f"global_strides needs rank - 1 = {r - 1} entries (dims 1..{r - 1}), got {len(spec.strides)}")
    if len(spec.box) != r:
        raise TensorMapError(f"box_dim needs {r} entries, got {len(spec.box)}")
    if spec.element_strides is not None and len(spec.element_strides) != r:
        raise TensorMapError(f"element_strides needs {r} entries, got {len(spec.element_strides)}")
    if spec.oob_fill == "nan" and not DTYPES[spec.dtype][1]:
        raise TensorMapError(f"oob_fill nan needs a floating-point dtype, got {spec.dtype}")


def _extents(spec: TensorMapSpec) -> None:
    """The global address, extents and strides."""
    align = 32 if spec.interleave == "32B" else 16
    why = " (interleave 32B)" if align == 32 else ""
    if spec.address % align:
        raise TensorMapError(f"global address {spec.address:#x} must be {align}-byte aligned{why}")
    for i, d in enumerate(spec.dims):
        if not 1 <= d <= MAX_DIM:
            raise TensorMapError(f"global_dim[{i}] must be in [1, 2^32], got {d}")
    for i, s in enumerate(spec.strides, start=1):
        if s % align:
            raise TensorMapError(f"global_stride of dim {i} = {s} bytes must be a multiple of {align}{why}")
        if not 0 <= s < MAX_STRIDE:
            raise TensorMapError(f"global_stride of dim {i} = {s} bytes must be in [0, 2^40)")


def _box(spec: TensorMapSpec) -> None:
    """The box, its element strides, its innermost row against the swizzle span, and its size."""
    size = spec.elem_bytes
    es = spec.element_strides if spec.element_strides is not None else (1,) * spec.rank
    for i, b in enumerate(spec.box):
        if not 1 <= b <= 256:
            raise TensorMapError(f"box_dim[{i}] must be in [1, 256], got {b}")
    inner = spec.box[0] * size
    if inner % 16:
        raise TensorMapError(f"box_dim[0] (innermost) x {size} bytes = {inner} must be a multiple of 16")
    for i, e in enumerate(es):
        if not 1 <= e <= 8:
            raise TensorMapError(f"element_strides[{i}] must be in [1, 8], got {e}")
    if spec.interleave == "none" and spec.swizzle != "none" and inner > SWIZZLE_SPAN[spec.swizzle]:
        raise TensorMapError(f"box_dim[0] (innermost) x {size} bytes = {inner} exceeds the {spec.swizzle} swizzle "
                             f"span of {SWIZZLE_SPAN[spec.swizzle]} bytes")
    # The driver's own size check (an H200, driver 580, 36526 adversarial maps: no exception) counts the box
    # as elem x prod(box_dim[i] // element_strides[i]) over every dimension, floors included (a dimension
    # strided past its box counts 0), against 228 KiB.
    counted = size
    for b, e in zip(spec.box, es):
        counted *= b // e
    if counted > MAX_BOX_BYTES:
        raise TensorMapError(f"the box counts {counted} bytes (element size x the product of box_dim[i] // "
                             f"element_strides[i]); the driver allows at most {MAX_BOX_BYTES} (228 KiB)")


def _safety(spec: TensorMapSpec) -> None:
    """What the driver accepts but the documentation forbids, or the hardware then does wrongly."""
    inner = spec.box[0] * spec.elem_bytes
    if spec.box_bytes > MAX_SMEM_BLOCK:
        raise TensorMapError(f"one load of the box delivers {spec.box_bytes} bytes, more than the {MAX_SMEM_BLOCK // 1024} "
                             f"KiB of shared memory one block can have (the driver accepts it; no load can land)")
    if spec.interleave == "32B" and spec.swizzle != "32B":
        raise TensorMapError(f"interleave 32B needs swizzle 32B (cuTensorMapEncodeTiled's documentation; driver 580 "
                             f"does not check it), got {spec.swizzle}")
    if spec.interleave == "none" and spec.swizzle != "none" and inner < SWIZZLE_SPAN[spec.swizzle]:
        raise TensorMapError(
            f"box_dim[0] (innermost) x {spec.elem_bytes} bytes = {inner} is narrower than the {spec.swizzle} swizzle "
            f"span: TMA then pads every box row to {SWIZZLE_SPAN[spec.swizzle]} bytes in shared memory (seen on an "
            f"H200: such a load wrote past a buffer of the box's size); make the box row exactly the span")


def check_coords(spec: TensorMapSpec, coords: tuple[int, ...]) -> None:
    """Box coordinates (innermost first) for a tiled load or store: the box's rows must start on a
    16-byte boundary of the innermost dimension (seen on an H200: an unaligned start is an illegal
    instruction, which kills the context), and each coordinate must fit in int32."""
    if len(coords) != spec.rank:
        raise TensorMapError(f"coords needs {spec.rank} entries, got {len(coords)}")
    for i, c in enumerate(coords):
        if not -(1 << 31) <= c < (1 << 31):
            raise TensorMapError(f"coordinate {i} = {c} does not fit in int32")
    if spec.interleave == "none" and (coords[0] * spec.elem_bytes) % 16:
        raise TensorMapError(f"coordinate 0 (innermost) x {spec.elem_bytes} bytes = {coords[0] * spec.elem_bytes} "
                             f"must be a multiple of 16: a box row starts on a 16-byte boundary")


def check_smem_destination(offset: int, swizzle: str) -> None:
    """A tensor copy's shared-memory address (or its offset from a 1024-aligned base) must be 128-byte
    aligned, and aligned to the swizzle's repeat (256/512/1024 bytes) for the pattern to start at the
    box's first byte (else the data lands rotated: see asynccopy.swizzle)."""
    if swizzle not in SWIZZLE_REPEAT:
        raise TensorMapError(f"swizzle must be one of {', '.join(SWIZZLES)}, got {swizzle!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < MAX_SMEM_BLOCK:
        raise TensorMapError(f"a shared-memory offset is in [0, {MAX_SMEM_BLOCK}) bytes, got {offset!r}")
    need = SWIZZLE_REPEAT[swizzle]
    if offset % need:
        what = f"a {swizzle}-swizzled" if swizzle != "none" else "a"
        raise TensorMapError(f"{what} TMA shared-memory destination must be {need}-byte aligned; "
                             f"address offset {offset} is not")


# ---------------------------------------------------------------------------------------------
# Driver encodings, by name


def _driver_enums(spec: TensorMapSpec):
    from cuda.bindings import driver as d

    dtypes = {
        "uint8": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
        "uint16": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16,
        "uint32": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT32,
        "int32": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_INT32,
        "uint64": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT64,
        "int64": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_INT64,
        "float16": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        "float32": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        "float64": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        "bfloat16": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        "float32_ftz": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ,
        "tfloat32": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
        "tfloat32_ftz": d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ,
    }
    interleave = {"none": "NONE", "16B": "16B", "32B": "32B"}[spec.interleave]
    swizzle = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[spec.swizzle]
    l2 = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}[spec.l2_promotion]
    oob = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}[spec.oob_fill]
    return (dtypes[spec.dtype], getattr(d.CUtensorMapInterleave, f"CU_TENSOR_MAP_INTERLEAVE_{interleave}"),
            getattr(d.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}"),
            getattr(d.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
            getattr(d.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{oob}"))


def driver_encode(spec: TensorMapSpec):
    """``cuTensorMapEncodeTiled`` itself, with no check of ours: (CUresult, CUtensorMap).

    For comparing the validator with the driver; kernels take cuda.core descriptors (:func:`build`)."""
    from cuda.bindings import driver as d

    dtype, interleave, swizzle, l2, oob = _driver_enums(spec)
    es = spec.element_strides if spec.element_strides is not None else (1,) * spec.rank
    u32, u64 = d.cuuint32_t, d.cuuint64_t
    # rank 1 has no stride, but an empty list becomes a NULL pointer, which the driver refuses
    strides = spec.strides or (-(-spec.dims[0] * spec.elem_bytes // 16) * 16,)
    result = d.cuTensorMapEncodeTiled(dtype, u32(spec.rank), spec.address, [u64(x) for x in spec.dims],
                                      [u64(x) for x in strides], [u32(x) for x in spec.box],
                                      [u32(x) for x in es], interleave, swizzle, l2, oob)
    return result[0], result[1]


def build(array, box, *, swizzle: str = "none", oob_fill: str = "zero", l2_promotion: str = "none",
          element_strides=None, interleave: str = "none", lint: bool = True, stream=None):
    """A cuda.core TensorMapDescriptor for a CUDA array (any rank 1-5), validated first.

    ``box`` and ``element_strides`` are in the array's own (outermost-first) order. ``stream`` (a
    cuda.core Stream) is where the map will be used: the array's producer orders its work before it
    (DLPack's stream handshake; JAX refuses the handshake's "no stream" value)."""
    from cuda.core._tensor_map import TensorMapInterleave, TensorMapL2Promotion, TensorMapOOBFill, TensorMapSwizzle
    from cuda.core.utils import StridedMemoryView

    stream_ptr = -1 if stream is None else int(stream.handle) or 1  # DLPack: 1 is the legacy default stream
    view = (array if isinstance(array, StridedMemoryView)
            else StridedMemoryView.from_any_interface(array, stream_ptr=stream_ptr))
    itemsize = np.dtype(view.dtype).itemsize
    strides = view.strides
    strides_bytes = None if strides is None else tuple(s * itemsize for s in strides)
    spec = TensorMapSpec.from_numpy_order(view.dtype, view.shape, box=box, strides_bytes=strides_bytes,
                                          element_strides=element_strides, address=view.ptr, swizzle=swizzle,
                                          oob_fill=oob_fill, l2_promotion=l2_promotion, interleave=interleave)
    validate(spec, lint=lint)
    sw = {"none": TensorMapSwizzle.NONE, "32B": TensorMapSwizzle.SWIZZLE_32B, "64B": TensorMapSwizzle.SWIZZLE_64B,
          "128B": TensorMapSwizzle.SWIZZLE_128B}[swizzle]
    il = {"none": TensorMapInterleave.NONE, "16B": TensorMapInterleave.INTERLEAVE_16B,
          "32B": TensorMapInterleave.INTERLEAVE_32B}[interleave]
    l2 = {"none": TensorMapL2Promotion.NONE, "64B": TensorMapL2Promotion.L2_64B,
          "128B": TensorMapL2Promotion.L2_128B, "256B": TensorMapL2Promotion.L2_256B}[l2_promotion]
    oob = {"zero": TensorMapOOBFill.NONE, "nan": TensorMapOOBFill.NAN_REQUEST_ZERO_FMA}[oob_fill]
    desc = view.as_tensor_map(box_dim=tuple(box), element_strides=tuple(element_strides) if element_strides else None,
                              swizzle=sw, interleave=il, l2_promotion=l2, oob_fill=oob)
    return desc, spec


def with_fields(spec: TensorMapSpec, **changes) -> TensorMapSpec:
    return replace(spec, **changes)
