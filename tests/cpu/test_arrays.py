"""asynccopy.arrays without a GPU: a caller's array is checked through __cuda_array_interface__, and a bad
one is named."""

import sys
import types

import numpy as np
import pytest

from asynccopy import arrays
from asynccopy.errors import ArgumentError

PTR = 0x7F0000000000


class FakeCudaArray:
    """Just enough of __cuda_array_interface__ v3 to be validated without a GPU."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=PTR, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "strides": strides, "data": (ptr, readonly), "version": 3,
        }


@pytest.mark.parametrize(
    "obj, message",
    [
        (np.zeros(8, np.float32), r"x is a host \(NumPy\) array; pass a CUDA array"),
        ([1.0, 2.0], r"x must be a CUDA array speaking DLPack or __cuda_array_interface__, got list"),
        (FakeCudaArray((8,), "<f8"), r"x must be float32, got float64"),
        (FakeCudaArray((8,), "<i4"), r"x must be float32, got int32"),
        (FakeCudaArray((4, 8), strides=(4, 16)), r"x must be C-contiguous; got shape \(4, 8\) with element strides \(1, 4\)"),
        (FakeCudaArray((8,), strides=(8,)), r"x must be C-contiguous; got shape \(8,\) with element strides \(2,\)"),
        (FakeCudaArray((8,), strides=(6,)), r"x must be C-contiguous; got shape \(8,\) with element strides \(-1,\)"),
        (FakeCudaArray((8,), ptr=PTR + 4), r"x's data pointer 0x7f0000000004 is not 16-byte aligned"),
    ],
)
def test_bad_array_is_named(obj, message):
    with pytest.raises(ArgumentError, match=message):
        arrays.view(obj, "x")


def test_readonly_output_is_refused():
    with pytest.raises(ArgumentError, match=r"out is read-only"):
        arrays.view(FakeCudaArray((8,), readonly=True), "out", writable=True)
    assert arrays.view(FakeCudaArray((8,), readonly=True), "x").size == 8  # an input may be read-only


@pytest.mark.parametrize("shape, strides, size", [
    ((4, 8), (32, 4), 32),     # C-contiguous, strides given
    ((4, 8), None, 32),        # no strides: C-contiguous by definition
    ((1, 8), (4096, 4), 8),    # a dimension of one may have any stride
    ((8, 1), (4, 4), 8),
    ((), None, 1),             # a scalar
    ((0, 8), (4, 4), 0),       # empty
])
def test_good_fake_array_passes(shape, strides, size):
    a = arrays.view(FakeCudaArray(shape, strides=strides), "x")
    assert (a.size, a.shape, a.ptr, a.dtype) == (size, shape, PTR, np.dtype(np.float32))


def test_dtype_and_alignment_are_the_callers_choice():
    a = arrays.view(FakeCudaArray((8,), "<u2", ptr=PTR + 8), "x", dtype=np.uint16, align=8)
    assert a.dtype == np.uint16 and a.ptr == PTR + 8
    with pytest.raises(ArgumentError, match=r"x's data pointer 0x7f0000000008 is not 16-byte aligned"):
        arrays.view(FakeCudaArray((8,), "<u2", ptr=PTR + 8), "x", dtype=np.uint16)


def test_the_kind_of_an_array_is_its_framework():
    assert arrays._kind(np.zeros(1)) == "numpy"
    assert arrays._kind(FakeCudaArray((1,))) == "other"


def test_a_call_asks_pytorch_for_a_devices_current_stream_once(monkeypatch):
    asked = []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(
        current_stream=lambda device: asked.append(device.index) or types.SimpleNamespace(cuda_stream=0x50 + device.index))
    monkeypatch.setitem(sys.modules, "torch", torch)
    cuda0, cuda1 = types.SimpleNamespace(index=0), types.SimpleNamespace(index=1)
    seen = {}  # one call's
    assert [arrays.torch_stream(d, seen) for d in (cuda0, cuda0, cuda1, cuda0)] == [0x50, 0x50, 0x51, 0x50]
    assert asked == [0, 1] and seen == {0: 0x50, 1: 0x51}
    assert arrays.torch_stream(cuda0) == 0x50 and arrays.torch_stream(cuda0) == 0x50  # no call's record: asked each time
    assert asked == [0, 1, 0, 0]
