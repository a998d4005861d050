"""Element types by name: the tensor-map data types of compute capability 9.0, their sizes, and the
names people write for them ("bf16", "fp32", NumPy dtypes)."""

from __future__ import annotations

import numpy as np

# name -> (bytes per element, floating point)
DTYPES: dict[str, tuple[int, bool]] = {
    "uint8": (1, False), "uint16": (2, False), "uint32": (4, False), "int32": (4, False),
    "uint64": (8, False), "int64": (8, False), "float16": (2, True), "float32": (4, True),
    "float64": (8, True), "bfloat16": (2, True), "float32_ftz": (4, True), "tfloat32": (4, True),
    "tfloat32_ftz": (4, True),
}

_ALIASES = {"bf16": "bfloat16", "f16": "float16", "fp16": "float16", "half": "float16", "f32": "float32",
            "fp32": "float32", "float": "float32", "f64": "float64", "fp64": "float64", "double": "float64",
            "tf32": "tfloat32", "u8": "uint8", "u16": "uint16", "u32": "uint32", "i32": "int32", "u64": "uint64",
            "i64": "int64"}


def dtype_name(dtype) -> str:
    """The type name of a NumPy dtype or a name ('bfloat16', 'bf16', 'tfloat32', ...); an unknown
    one comes back as its own text (callers check it against DTYPES and name the known ones). A PyTorch dtype
    (torch.float32) is named as NumPy's."""
    if not isinstance(dtype, str) and type(dtype).__module__ == "torch":
        dtype = str(dtype).removeprefix("torch.")
    if isinstance(dtype, str):
        dtype = _ALIASES.get(dtype.lower(), dtype)
        if dtype in DTYPES:
            return dtype
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        return str(dtype)
    return dt.name  # numpy names, and "bfloat16" from ml_dtypes


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a type name: bfloat16 from ml_dtypes (an error saying so where it is missing)."""
    if name != "bfloat16":
        return np.dtype(name)
    try:
        import ml_dtypes
    except ImportError:
        from .errors import AsyncCopyError

        raise AsyncCopyError("a bfloat16 result needs the ml_dtypes package (pip install ml_dtypes)") from None
    return np.dtype(ml_dtypes.bfloat16)
