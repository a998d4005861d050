"""asynccopy.dtypes: the element types by name, their sizes, and the names people write for them."""

import numpy as np
import pytest

from asynccopy import dtypes, tensormap
from asynccopy.dtypes import DTYPES, dtype_name


@pytest.mark.parametrize("given, want", [
    ("bf16", "bfloat16"), ("BF16", "bfloat16"), ("fp16", "float16"), ("half", "float16"), ("f32", "float32"),
    ("fp32", "float32"), ("float", "float32"), ("double", "float64"), ("tf32", "tfloat32"), ("u8", "uint8"),
    ("i32", "int32"), ("u64", "uint64"), ("i64", "int64"), ("tfloat32_ftz", "tfloat32_ftz"), ("float32", "float32"),
    (np.float16, "float16"), (np.dtype("uint8"), "uint8"), (np.int64, "int64"), ("<f4", "float32"),
])
def test_names_and_numpy_types(given, want):
    assert dtype_name(given) == want


@pytest.mark.parametrize("given, want", [("f7", "f7"), ("complex64", "complex64"), (np.complex64, "complex64"),
                                         ("int8", "int8")])
def test_a_type_without_a_tensor_map_type_comes_back_as_its_own_name(given, want):
    # callers check the name against DTYPES and name the known ones (int8 has no tensor-map type: use uint8)
    assert dtype_name(given) == want and want not in DTYPES


def test_sizes_and_kinds():
    assert {k: v[0] for k, v in DTYPES.items()} == {
        "uint8": 1, "uint16": 2, "uint32": 4, "int32": 4, "uint64": 8, "int64": 8, "float16": 2, "float32": 4,
        "float64": 8, "bfloat16": 2, "float32_ftz": 4, "tfloat32": 4, "tfloat32_ftz": 4}
    floats = {k for k, (_, is_float) in DTYPES.items() if is_float}
    assert floats == {"float16", "float32", "float64", "bfloat16", "float32_ftz", "tfloat32", "tfloat32_ftz"}


def test_every_alias_names_a_known_type():
    for alias, name in dtypes._ALIASES.items():
        assert name in DTYPES, alias
        assert dtype_name(alias.upper()) == name


def test_tensormap_uses_the_same_table():
    assert tensormap.DTYPES is DTYPES and tensormap.dtype_name is dtype_name
