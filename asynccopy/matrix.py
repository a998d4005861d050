"""Matrices from any CUDA array: a 2D view (PyTorch, CuPy, JAX, ... through DLPack or
``__cuda_array_interface__``) checked to be row-major or column-major, with its address, extents, element
strides and dtype; and the alignment of a set of them, which decides how wide a kernel may copy."""

from __future__ import annotations

from dataclasses import dataclass

from . import arrays
from .errors import ArgumentError

ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass
class Matrix:
    """A checked 2D CUDA array: where it is, its shape, its element strides and which way it is major."""

    obj: object
    ptr: int
    rows: int
    cols: int
    row_stride: int  # elements
    col_stride: int
    dtype: str
    device_id: int

    @property
    def row_major(self) -> bool:
        """Rows contiguous. A vector is both layouts; it is called the one whose elements are adjacent,
        so that a column [k, 1] with unit row stride (a transposed row) is column-major, not a matrix
        of one-element rows."""
        if self.cols == 1 and self.rows > 1:
            return self.row_stride != 1
        return self.col_stride == 1 or self.cols == 1

    @property
    def lead(self) -> int:
        """The leading dimension: the stride of the non-contiguous index."""
        return self.row_stride if self.row_major else self.col_stride


def matrix(obj, name: str, *, stream, torch_streams: dict[int, int] | None = None) -> Matrix:
    """``obj`` as a 2D CUDA matrix, row-major or column-major (a transposed view), else ArgumentError.
    ``torch_streams``: see arrays.torch_stream."""
    ptr, shape, strides, dtype, device_id = arrays.device_layout(obj, name, stream=stream, torch_streams=torch_streams)
    if len(shape) != 2:
        raise ArgumentError(f"{name} must be a 2D matrix, got {len(shape)} dimensions (shape {shape})")
    rows, cols = shape
    strides = tuple(strides) if strides is not None else (cols, 1)
    m = Matrix(obj, ptr, rows, cols, strides[0], strides[1], dtype, device_id)
    if rows and cols and ((rows > 1 and m.row_stride <= 0) or (cols > 1 and m.col_stride <= 0)):
        raise ArgumentError(f"{name} has element strides {strides} for shape {shape}: a broadcast (stride 0) or "
                            f"reversed (negative stride) view; make it contiguous")
    if rows > 1 and cols > 1 and m.col_stride != 1 and m.row_stride != 1:
        raise ArgumentError(f"{name} must be row-major or column-major (a transposed view); got element strides "
                            f"{strides} for shape {shape}")
    if rows > 1 and cols > 1 and m.lead < (cols if m.row_major else rows):
        raise ArgumentError(f"{name}'s leading dimension {m.lead} is shorter than its "
                            f"{'rows' if m.row_major else 'columns'} ({cols if m.row_major else rows}): overlapping")
    return m


def align(*values: int) -> int:
    """The largest power of two up to 16 dividing every value."""
    align = 16
    for value in values:
        while value % align:
            align //= 2
    return align


def alignment(*mats: Matrix) -> int:
    """The largest power of two up to 16 bytes dividing every operand's address and leading dimension."""
    values = []
    for mtx in mats:
        outer = mtx.rows if mtx.row_major else mtx.cols
        values += [mtx.ptr, mtx.lead * ITEMSIZE[mtx.dtype] if outer > 1 else 16]
    return align(*values)
