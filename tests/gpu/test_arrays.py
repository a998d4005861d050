"""PyTorch tensors read from their attributes (asynccopy.arrays.torch_layout) against DLPack's view of them."""

import pytest

from asynccopy import arrays
from asynccopy.errors import ArgumentError


def _views(torch):
    base = torch.randn(40, 72, device="cuda")
    return [base, base.bfloat16(), base.half().t(), base[3:17, 8:40], base.bfloat16()[5:6], base[:, 9],
            base.half().view(4, 10, 9, 8).transpose(1, 2), base[:0], torch.randn((), device="cuda"),
            torch.randn(6, 8, device="cuda", requires_grad=True)]


def test_the_attributes_give_what_dlpack_gives(torch, facts):
    stream = arrays.resolve_stream(None, torch.empty(1, device="cuda"))
    for x in _views(torch):
        got = arrays.torch_layout(x, stream)
        smv, dtype = arrays.device_view(x, "x", stream=stream)
        strides = tuple(smv.strides) if smv.strides is not None else tuple(x.stride())
        assert got is not None
        assert got[0] == smv.ptr or x.numel() == 0
        assert (got[1], got[2], got[3], got[4]) == (tuple(smv.shape), strides, dtype, smv.device_id), x.shape


def test_dlpack_still_orders_what_the_attributes_cannot(torch, facts):
    from cuda.core import Device

    x = torch.randn(8, 8, device="cuda")
    current = arrays.resolve_stream(None, x)
    other = Device(facts.device_id).create_stream()
    try:
        assert arrays.torch_layout(x, other) is None  # another stream: DLPack's export orders it after x's
    finally:
        other.close()
    assert arrays.torch_layout(x, current) is not None
    assert arrays.torch_layout(torch.ones(4, device="cuda", dtype=torch.int32), current) is None  # DLPack's errors
    assert arrays.torch_layout(torch.ones(4), current) is None  # host memory
    with pytest.raises(ArgumentError, match="on cpu"):
        arrays.device_layout(torch.ones(4), "x", stream=current)
