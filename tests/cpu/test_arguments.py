"""asynccopy.gemm's and asynccopy.attention's arguments without a GPU: each bad one gets one ArgumentError that names it
before anything runs (an odd stride, an out that overlaps an input or itself, a kernel that is no name, a stream of
the wrong kind), and the extents and strides that are fine (an empty array's, a column's) are taken."""

import re
import sys

import numpy as np
import pytest

import asynccopy
from asynccopy import arrays, dtypes, matmul
from asynccopy import sdpa as att
from asynccopy.errors import ArgumentError, AsyncCopyError
from asynccopy.matmul import Matrix

BASE = 1 << 32


class Layout:
    """A CUDA array as asynccopy.arrays.device_layout reads one: address, shape, element strides, dtype, device."""

    __cuda_array_interface__ = {"shape": (1, 1), "typestr": "<f2", "data": (BASE, False), "version": 3}

    def __init__(self, shape, strides=None, dtype="float16", ptr=BASE, device_id=0):
        self.layout = (ptr, tuple(shape), tuple(strides) if strides is not None else att._contiguous_strides(shape),
                       dtype, device_id)


@pytest.fixture
def layouts(monkeypatch):
    """matrix() reads Layout objects (no GPU): arrays.device_layout gives back what they hold."""
    monkeypatch.setattr(arrays, "device_layout", lambda obj, name, *, stream, torch_streams=None: obj.layout)


def _m(rows, cols, *, dtype="float16", ptr=BASE, strides=None, device_id=0):
    row_stride, col_stride = strides if strides is not None else (cols, 1)
    return Matrix(None, ptr, rows, cols, row_stride, col_stride, dtype, device_id)


def _output(out, a, b, out_dtype="float16"):
    """matmul._output's check of ``out`` for A x B: (where C goes, its leading dimension)."""
    dst, ldc = matmul._output(out, a, b, out_dtype, None)
    return dst.ptr, ldc


# ---------------------------------------------------------------------------------------------
# gemm


@pytest.mark.parametrize("shape, strides", [
    ((64, 1), (-1, 1)),   # a reversed column (CuPy's b[::-1]): was taken, its leading dimension -1
    ((1, 64), (64, -1)),  # a reversed row: was taken as column-major with leading dimension -1
    ((8, 64), (-64, 1)),  # was "leading dimension -64 is shorter than its rows"
    ((64, 1), (0, 0)),    # an expanded scalar: was taken, every row reading one element
    ((8, 64), (0, 1)),    # an expanded row: was "leading dimension 0 is shorter than its rows"
])
def test_a_broadcast_or_reversed_operand_is_named(layouts, shape, strides):
    with pytest.raises(ArgumentError, match=re.escape(f"b has element strides {strides} for shape {shape}: a broadcast "
                                                      f"(stride 0) or reversed (negative stride) view")):
        matmul.matrix(Layout(shape, strides), "b", stream=None)


def test_out_is_checked_against_the_product_and_a_contiguous_column_is_row_major(layouts):
    a, b = _m(100, 64), _m(64, 1, ptr=BASE + (1 << 20))
    out = BASE + (1 << 21)
    # torch.empty(100, 1): strides (1, 1); was refused as "out must be row-major"
    assert _output(Layout((100, 1), (1, 1), ptr=out), a, b) == (out, 1)
    assert _output(Layout((100, 1), (1, 100), ptr=out), a, b) == (out, 1)
    assert _output(Layout((100, 1), (8, 1), ptr=out), a, b) == (out, 8)  # a column of a wider matrix
    assert _output(Layout((1, 1), (5, 3), ptr=out), _m(1, 64), b) == (out, 1)
    with pytest.raises(ArgumentError, match=r"out has element strides \(0, 0\) for shape \(100, 1\): a broadcast"):
        _output(Layout((100, 1), (0, 0), ptr=out), a, b)  # was taken, C written 100 elements long into one
    # the checks that were there name their problem as before
    b = _m(64, 32, ptr=BASE + (1 << 20))
    with pytest.raises(ArgumentError, match=r"out must be \[100 x 32\], got \[100 x 31\]"):
        _output(Layout((100, 31), ptr=out), a, b)
    with pytest.raises(ArgumentError, match=r"out must be float16, got float32"):
        _output(Layout((100, 32), dtype="float32", ptr=out), a, b)
    with pytest.raises(ArgumentError, match=r"out must be row-major \(unit column stride\)"):
        _output(Layout((100, 32), (1, 100), ptr=out), a, b)
    with pytest.raises(ArgumentError, match=r"out must be row-major"):
        _output(Layout((1, 32), (32, 2), ptr=out), _m(1, 64), b)
    assert _output(Layout((100, 32), (40, 1), ptr=out), a, b) == (out, 40)  # padded rows


def test_empty_operands_and_out_take_any_strides(layouts):
    # CuPy and NumPy give an empty array zero strides
    for shape in ((64, 0), (0, 64), (0, 0)):
        assert matmul.matrix(Layout(shape, (0, 0)), "a", stream=None).rows == shape[0]
    # M = 0 with CuPy's empty out: was "out must be row-major"
    a, b = _m(0, 64, strides=(0, 0)), _m(64, 32, ptr=BASE + (1 << 20))
    assert _output(Layout((0, 32), (0, 0), ptr=BASE + (1 << 21)), a, b)[0] == BASE + (1 << 21)


def test_an_out_on_another_device_is_named(layouts):
    a, b = _m(8, 64), _m(64, 32, ptr=BASE + (1 << 20))
    with pytest.raises(ArgumentError, match=r"a is on device 0 and out on device 1"):  # was launched
        _output(Layout((8, 32), ptr=BASE + (1 << 21), device_id=1), a, b)


def test_a_gemm_out_that_overlaps_an_input_is_named(layouts):
    a, b = _m(8, 64), _m(64, 64, ptr=BASE + (1 << 20))
    for name, at, strides in (
        ("a", 0, None),                 # out=a of a square product: was launched, a overwritten while read
        ("a", 16 * 2, None),            # a view into a
        ("a", 0, (128, 1)),             # a's address, rows padded
        ("b", 1 << 20, None),           # out=b
        ("b", (1 << 20) + 60 * 128, None),  # b's last rows
    ):
        with pytest.raises(ArgumentError, match=rf"out overlaps {name} \(an input\): the kernels would overwrite {name}"):
            _output(Layout((8, 64), strides, ptr=BASE + at), a, b)
    # just past an input, or just before: apart
    assert _output(Layout((8, 64), ptr=BASE + 8 * 64 * 2), a, b) == (BASE + 1024, 64)
    assert _output(Layout((8, 64), ptr=BASE + (1 << 20) + 64 * 64 * 2), a, b)[1] == 64
    assert _output(Layout((8, 64), ptr=BASE - 8 * 64 * 2), a, b)[1] == 64
    # columns of one buffer side by side (x = buf[:, :64], out = buf[:, 64:]): apart, as PyTorch takes them
    x = _m(8, 64, strides=(128, 1))
    assert _output(Layout((8, 64), (128, 1), ptr=BASE + 64 * 2), x, b) == (BASE + 128, 128)


class _FakeCudaArray:
    """Passes the 'is it a CUDA array' check without a GPU (never viewed: the checks before it fail)."""

    __cuda_array_interface__ = {"shape": (64, 64), "typestr": "<f2", "data": (BASE, False), "version": 3}


@pytest.mark.parametrize("kernel", [["wgmma"], 3, ("mma",)])
def test_a_kernel_that_is_no_name_is_named_before_any_gpu_work(kernel):
    # was TypeError: unhashable type: 'list' (the configuration's memo key), or "unknown GEMM kernel 3"
    dev = _FakeCudaArray()
    with pytest.raises(ArgumentError, match=rf"kernel must be a name \(wgmma, mma, simt\), got {type(kernel).__name__}"):
        asynccopy.gemm(dev, dev, kernel=kernel)
    with pytest.raises(ArgumentError, match=rf"kernel must be a name \(wgmma, mma\), got {type(kernel).__name__}"):
        asynccopy.attention(dev, dev, dev, kernel=kernel)


def test_a_host_out_is_named_before_any_gpu_work():
    dev = _FakeCudaArray()
    with pytest.raises(ArgumentError, match=r"out is a host \(NumPy\) array"):
        asynccopy.gemm(dev, dev, out=np.zeros((64, 64), np.float16))


class _TorchDtype:
    """What a torch.dtype looks like to dtype_name: its type's module, and its text."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


_TorchDtype.__module__ = "torch"


def test_out_dtype_may_be_a_torch_dtype():
    a, b = _m(8, 64), _m(64, 32)
    assert matmul.check_operands(a, b, _TorchDtype("float32")) == "float32"  # was "got torch.float32"
    assert matmul.check_operands(a, b, _TorchDtype("bfloat16")) == "bfloat16"
    with pytest.raises(ArgumentError, match=r"out_dtype must be one of bfloat16, float16, float32, got float64"):
        matmul.check_operands(a, b, _TorchDtype("float64"))
    # a NumPy ValueError (not a type at all) is named too, not raised
    with pytest.raises(ArgumentError, match=r"out_dtype must be one of .*, got \('f4', -1\)"):
        matmul.check_operands(a, b, ("f4", -1))


def test_a_bfloat16_result_without_ml_dtypes_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes then raises ImportError
    monkeypatch.setattr(arrays, "empty_like", lambda src, *, stream, torch_streams=None: arrays.Output(BASE, None))
    a, b = _m(8, 64, dtype="bfloat16"), _m(64, 32, dtype="bfloat16")
    with pytest.raises(AsyncCopyError, match=r"a bfloat16 result needs the ml_dtypes package"):  # was ModuleNotFoundError
        matmul._output(None, a, b, "bfloat16", None)
    assert matmul._output(None, a, b, "float32", None)[1] == 32
    assert dtypes.numpy_dtype("float16") == np.float16


# ---------------------------------------------------------------------------------------------
# streams


@pytest.mark.parametrize("stream, message", [
    (-1, r"stream must be a cudaStream_t handle in \[0, 2\*\*64\), got -1"),  # was OverflowError from cuda.core
    (1 << 64, r"got 18446744073709551616"),
    (True, r"stream must be a cuda.core Stream, an object with __cuda_stream__, or an int, got bool"),  # was handle 1
    ("default", r"or an int, got str"),
    (1.5, r"or an int, got float"),
    (type("S", (), {"cuda_stream": -4})(), r"in \[0, 2\*\*64\), got -4"),
])
def test_a_stream_of_the_wrong_kind_is_named_before_the_driver(stream, message):
    with pytest.raises(ArgumentError, match=message):
        arrays.resolve_stream(stream)


# ---------------------------------------------------------------------------------------------
# attention


def _t(name, shape, strides=None, ptr=BASE, dtype="bfloat16"):
    strides = strides if strides is not None else att._contiguous_strides(shape)
    return att.Tensor4(name, tuple(shape), tuple(strides), dtype, ptr, 0)


def _qkv(lq=100, lk=300, b=2, d=128):
    return (_t("q", (b, 8, lq, d)), _t("k", (b, 2, lk, d), ptr=BASE + (1 << 24)),
            _t("v", (b, 2, lk, d), ptr=BASE + (1 << 25)))


@pytest.mark.parametrize("which, strides, message", [
    ("q", (8 * 100 * 128, 100 * 128, -128, 1), r"q's seq stride -128 is negative \(a reversed view\)"),
    ("k", (2 * 300 * 128, -300 * 128, 128, 1), r"k's heads stride -38400 is negative"),
    ("v", (-2 * 300 * 128, 300 * 128, 128, 1), r"v's batch stride -76800 is negative"),
])
def test_a_reversed_input_is_named(which, strides, message):
    # each was taken (a negative stride passes the 16-byte test: -256 % 16 == 0)
    q, k, v = _qkv()
    named = {"q": q, "k": k, "v": v}
    named[which] = _t(which, named[which].shape, strides, named[which].ptr)
    with pytest.raises(ArgumentError, match=message):
        att.check_inputs(named["q"], named["k"], named["v"])


def test_empty_inputs_take_any_strides():
    # CuPy's empty arrays have zero strides: were "q's head_dim must be contiguous (element stride 1), got stride 0"
    q = _t("q", (2, 8, 0, 128), (0, 0, 0, 0))
    assert att.check_inputs(q, *_qkv()[1:]).q_len == 0
    k, v = (_t(n, (0, 2, 300, 128), (0, 0, 0, 0)) for n in "kv")
    assert att.check_inputs(_t("q", (0, 8, 100, 128), (0, 0, 0, 0)), k, v).batch == 0
    p = att.check_inputs(q, *_qkv()[1:])
    att.check_out(_t("out", (2, 8, 0, 128), (0, 0, 0, 0), ptr=BASE), p, 0, (q,))


@pytest.mark.parametrize("strides", [
    (8 * 100 * 128, 128, 128, 1),        # heads and seq one stride: query i of head h+1 is query i+1 of head h
    (100 * 128, 100 * 128, 128, 1),      # batch and heads one stride
    (8 * 100 * 128, 100 * 128, 64, 1),   # rows overlapping rows
])
def test_an_out_whose_indices_meet_is_named(strides):
    p = att.check_inputs(*_qkv())
    with pytest.raises(ArgumentError, match=r"out overlaps itself"):  # each was written, blocks racing
        att.check_out(_t("out", (2, 8, 100, 128), strides, ptr=BASE + (1 << 30)), p)


def test_an_attention_out_that_overlaps_an_input_is_named():
    q, k, v = _qkv()
    p = att.check_inputs(q, k, v)
    for name, at in (("q", 0), ("q", 64 * 1024), ("k", 1 << 24), ("v", (1 << 25) + 256)):
        out = _t("out", q.shape, ptr=BASE + at)
        with pytest.raises(ArgumentError, match=rf"out overlaps {name} \(an input\)"):
            att.check_out(out, p, 0, (q, k, v))
    # (batch, seq, heads, head_dim) memory of q and out side by side: apart
    bshd = (100 * 8 * 128, 128, 8 * 128, 1)
    q2 = _t("q", q.shape, bshd)
    att.check_out(_t("out", q.shape, bshd, ptr=BASE + 2 * 100 * 8 * 128 * 2), att.check_inputs(q2, k, v), 0, (q2, k, v))
    # q and out packed in one (batch, seq, 2, heads, head_dim) buffer, each a view with gaps: apart; out=q there is not
    packed = (100 * 2 * 8 * 128, 128, 2 * 8 * 128, 1)
    q3 = _t("q", q.shape, packed)
    att.check_out(_t("out", q.shape, packed, ptr=BASE + 8 * 128 * 2), att.check_inputs(q3, k, v), 0, (q3, k, v))
    with pytest.raises(ArgumentError, match=r"out overlaps q"):
        att.check_out(_t("out", q.shape, packed), att.check_inputs(q3, k, v), 0, (q3, k, v))
    # exactly q's bytes after it ends: apart
    att.check_out(_t("out", q.shape, ptr=BASE + 2 * 8 * 100 * 128 * 2), p, 0, (q, k, v))


def test_numpy_stage_counts_are_ints():
    # np.int64(4): the first kernel that can run 4 stages is chosen as for 4 (configure looks for an int)
    stages = att._check_flags(False, None, np.int64(4), False, None)
    assert stages == 4 and type(stages) is int


def test_overlap_helpers():
    assert not arrays.self_overlapping((2, 8, 100, 128), att._contiguous_strides((2, 8, 100, 128)))
    assert not arrays.self_overlapping((2, 8, 100, 128), (100 * 8 * 128, 128, 8 * 128, 1))  # (b, s, h, d) memory
    assert not arrays.self_overlapping((1, 8, 1, 64), (0, 64, 0, 1))  # extent-1 axes: any stride
    assert arrays.self_overlapping((4, 4), (4, 0)) and not arrays.self_overlapping((0, 4), (0, 0))
    assert arrays.span(BASE, (2, 3), (3, 1), 2) == (BASE, BASE + 12, True)
    assert arrays.span(BASE, (2, 3), (4, 1), 2) == (BASE, BASE + 14, False)  # a gap between the rows
    assert arrays.span(BASE, (0, 3), (3, 1), 2)[:2] == (0, 0)
