"""Arrays in and out: any CUDA array speaking DLPack or ``__cuda_array_interface__``.

Inputs are viewed through ``cuda.core.utils.StridedMemoryView`` and checked (device, dtype,
contiguity, alignment) with an error that names the problem. Outputs are made as the same kind of
array as the input: CuPy and PyTorch through their own allocators, anything else (JAX, ...) as a
cuda.core buffer handed over by DLPack.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .device import cuda_core
from .errors import ArgumentError


@dataclass
class DeviceArray:
    """A checked view of a caller's array: where it is, how long, and the object itself."""

    obj: object
    ptr: int
    size: int  # elements
    shape: tuple[int, ...]
    dtype: np.dtype
    device_id: int


_kinds: dict[type, str] = {}  # type -> its framework (a call asks several times; the types are few)


def _kind(obj: object) -> str:
    cls = type(obj)
    kind = _kinds.get(cls)
    if kind is None:
        module = str(cls.__module__).split(".")[0]
        kind = _kinds[cls] = module if module in ("cupy", "torch", "jax", "jaxlib", "numpy") else "other"
    return kind


def check_writable(obj: object, name: str) -> None:
    """ArgumentError for an ``out=`` array the kernels must not write into: a JAX array (immutable, and JAX
    would not wait for our stream before reading it)."""
    if _kind(obj) in ("jax", "jaxlib"):
        raise ArgumentError(f"{name} is a JAX array, which is immutable: leave {name}= unset to get a new JAX array")


def _host_array(obj: object) -> str | None:
    """What kind of host array ``obj`` is, if it is one we can tell without a GPU."""
    if isinstance(obj, np.ndarray):
        return "a host (NumPy) array"
    kind = _kind(obj)
    if kind == "torch" and getattr(getattr(obj, "device", None), "type", "cuda") != "cuda":
        return f"a PyTorch tensor on {obj.device}"
    return None


def check_device_array(obj: object, name: str) -> None:
    """ArgumentError if ``obj`` is a host array or no array at all."""
    host = _host_array(obj)
    if host:
        raise ArgumentError(f"{name} is {host}; pass a CUDA array (CuPy, PyTorch on cuda, JAX on a GPU, ...)")
    if not (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")):
        raise ArgumentError(
            f"{name} must be a CUDA array speaking DLPack or __cuda_array_interface__, got {type(obj).__name__}"
        )


def device_view(obj: object, name: str, *, stream):
    """``obj`` (DLPack / __cuda_array_interface__) as a cuda.core StridedMemoryView ordered after its
    producer onto ``stream``, and its element type's name (bf16 / half spelled bfloat16 / float16); one
    clear ArgumentError for what is not a CUDA device array."""
    from cuda.core.utils import StridedMemoryView

    check_device_array(obj, name)
    try:
        smv = StridedMemoryView.from_any_interface(obj, stream_ptr=int(stream.handle) or 1)
    except Exception as exc:
        raise ArgumentError(f"{name} could not be viewed as a CUDA array: {str(exc).splitlines()[0]}") from None
    if not smv.is_device_accessible or smv.device_id < 0:
        raise ArgumentError(f"{name} lives in host memory; pass a CUDA device array")
    try:
        dtype = np.dtype(smv.dtype).name
    except TypeError:
        dtype = str(smv.dtype)
    return smv, {"bf16": "bfloat16", "half": "float16"}.get(dtype, dtype)


_TORCH_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32"}


def torch_layout(obj: object, stream, torch_streams: dict[int, int] | None = None
                 ) -> tuple[int, tuple[int, ...], tuple[int, ...], str, int] | None:
    """(address, shape, element strides, dtype name, device) of a CUDA PyTorch tensor read from its attributes, where
    that is all DLPack would give: a bf16 / f16 / f32 tensor, and ``stream`` is its device's
    current PyTorch stream, so nothing needs ordering (DLPack would make ``stream`` wait for that one). None otherwise:
    device_view's DLPack path then (and its errors). ``torch_streams``: see :func:`torch_stream`."""
    if _kind(obj) != "torch" or not getattr(obj, "is_cuda", False):
        return None
    dtype = _TORCH_DTYPES.get(str(obj.dtype))
    if dtype is None:
        return None
    device = obj.device
    if torch_stream(device, torch_streams) != int(stream.handle):
        return None
    return obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dtype, device.index


def torch_stream(device, torch_streams: dict[int, int] | None = None) -> int:
    """The handle of the current PyTorch stream of ``device`` (a CUDA torch.device). ``torch_streams``: what one call
    has read so far (device index -> handle), filled here, so that a call asks PyTorch once a device (its current
    stream cannot change during the call; asking costs microseconds); None: asked every time."""
    index = device.index
    if torch_streams is not None:
        handle = torch_streams.get(index)
        if handle is not None:
            return handle
    import torch

    handle = torch.cuda.current_stream(device).cuda_stream
    if torch_streams is not None:
        torch_streams[index] = handle
    return handle


def device_layout(obj: object, name: str, *, stream, torch_streams: dict[int, int] | None = None
                  ) -> tuple[int, tuple[int, ...], tuple[int, ...] | None, str, int]:
    """(address, shape, element strides or None, dtype name, device) of a CUDA array ordered onto ``stream``:
    torch_layout's where it applies, else device_view's."""
    fast = torch_layout(obj, stream, torch_streams)
    if fast is not None:
        return fast
    smv, dtype = device_view(obj, name, stream=stream)
    return smv.ptr, tuple(smv.shape), smv.strides, dtype, smv.device_id


_streams: dict[tuple[int, int], object] = {}  # (device, handle) -> its cuda.core Stream (a handle wraps cheaply once)


def _from_handle(device_id: int, handle: int):
    got = _streams.get((device_id, handle))
    if got is None:
        if len(_streams) > 256:
            _streams.clear()
        got = _streams[(device_id, handle)] = cuda_core().Stream.from_handle(handle)
    return got


def resolve_stream(stream: object, like: object | None = None, *, torch_streams: dict[int, int] | None = None):
    """A cuda.core Stream from ``stream``: a cuda.core Stream, an object with ``__cuda_stream__``
    (CuPy, PyTorch, ...), or a raw ``cudaStream_t`` as int. ``None``: the current stream of the
    input's framework (CuPy, PyTorch), else the device's default stream. ``torch_streams``: see :func:`torch_stream`."""
    core = cuda_core()
    if stream is not None and not isinstance(stream, core.Stream):
        _check_stream(stream)  # before the driver: a wrong kind is named, not a driver error
    dev = core.Device()
    dev.set_current()
    if stream is None and like is not None:
        check_device_array(like, "the array")
        kind = _kind(like)
        if kind == "torch":
            stream = torch_stream(like.device, torch_streams)
        elif kind == "cupy":
            import cupy

            stream = cupy.cuda.get_current_stream().ptr
    if stream is None:
        return dev.default_stream
    if isinstance(stream, core.Stream):
        return stream
    if isinstance(stream, int):
        return _from_handle(dev.device_id, stream)
    if hasattr(stream, "__cuda_stream__"):
        return dev.create_stream(stream)
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream without the protocol
        if isinstance(getattr(stream, attr, None), int):
            return _from_handle(dev.device_id, getattr(stream, attr))
    raise ArgumentError(f"stream must be a cuda.core Stream, an object with __cuda_stream__, or an int, "
                        f"got {type(stream).__name__}")


def _check_stream(stream: object) -> None:
    """ArgumentError for a ``stream`` that resolve_stream cannot take: neither __cuda_stream__ nor a handle (an int
    in [0, 2**64), or a ``cuda_stream`` / ``ptr`` attribute holding one)."""
    if hasattr(stream, "__cuda_stream__"):
        return
    handle = stream if isinstance(stream, int) else next(
        (getattr(stream, a) for a in ("cuda_stream", "ptr") if isinstance(getattr(stream, a, None), int)), None)
    if handle is None or isinstance(stream, bool):
        raise ArgumentError(f"stream must be a cuda.core Stream, an object with __cuda_stream__, or an int, "
                            f"got {type(stream).__name__}")
    if not 0 <= handle < 1 << 64:
        raise ArgumentError(f"stream must be a cudaStream_t handle in [0, 2**64), got {handle}")


def span(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int, bool]:
    """The bytes [first, end) a strided array's elements lie in ((0, 0) when it has none), and whether they fill
    them (dense: no gaps, no repeats); a negative stride only on an axis of extent 1."""
    if 0 in shape:
        return 0, 0, True
    end = ptr + itemsize * (1 + sum((e - 1) * s for e, s in zip(shape, strides)))
    return ptr, end, end - ptr == itemsize * math.prod(shape)


def self_overlapping(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two indices of a strided array may reach one element: sorted by stride, an axis of extent > 1 that does
    not step past all that the smaller ones reach (a broadcast view, or axes interleaved)."""
    if 0 in shape:
        return False
    reach = 0
    for stride, extent in sorted(zip(strides, shape)):
        if extent > 1:
            if stride <= reach:
                return True
            reach += (extent - 1) * stride
    return False


def check_apart(name: str, out: tuple[int, int, bool], inputs) -> None:
    """ArgumentError when output ``name`` (its span) shares elements with an input ((name, span) pairs): the kernels
    would overwrite what they read. As PyTorch's check of out=: spans that meet where both are dense, or that start
    at one address; views with gaps that meet (columns of one buffer, side by side) are taken as apart."""
    for other, (lo, hi, dense) in inputs:
        if lo < out[1] and out[0] < hi and ((dense and out[2]) or lo == out[0]):
            raise ArgumentError(f"{name} overlaps {other} (an input): the kernels would overwrite {other} while they "
                                f"read it; pass a separate {name}")


def _layout(obj: object, name: str):
    """(ptr, shape, element strides or None, dtype) read in pure Python where the array allows it
    (``__cuda_array_interface__``), else through a StridedMemoryView (DLPack)."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        dtype = np.dtype(cai["typestr"])
        shape = tuple(int(d) for d in cai["shape"])
        strides = cai.get("strides")
        if strides is not None:
            strides = tuple(int(b) // dtype.itemsize if int(b) % dtype.itemsize == 0 else -1 for b in strides)
        return int(cai["data"][0]), shape, strides, dtype, bool(cai["data"][1])
    from cuda.core.utils import StridedMemoryView

    try:
        smv = StridedMemoryView.from_any_interface(obj, stream_ptr=-1)
    except Exception as exc:
        raise ArgumentError(f"{name} could not be viewed as a CUDA array: {str(exc).splitlines()[0]}") from None
    if not smv.is_device_accessible or smv.device_id < 0:
        raise ArgumentError(f"{name} lives in host memory; pass a CUDA device array")
    return smv.ptr, tuple(smv.shape), smv.strides, smv.dtype, smv.readonly


def view(obj: object, name: str, *, stream=None, dtype=np.float32, align: int = 16, writable: bool = False) -> DeviceArray:
    """Check that ``obj`` is a contiguous, ``align``-byte aligned CUDA array of ``dtype``; order it
    after its producer's stream onto ``stream`` (a cuda.core Stream; None: no ordering)."""
    check_device_array(obj, name)
    ptr, shape, strides, got, readonly = _layout(obj, name)
    want = np.dtype(dtype)
    if got != want:
        raise ArgumentError(f"{name} must be {want.name}, got {got}")
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if strides is not None and size > 1:
        expect, acc = [], 1
        for extent in reversed(shape):
            expect.append(acc)
            acc *= extent
        expect.reverse()
        if any(s != e for s, e, d in zip(strides, expect, shape) if d > 1):
            raise ArgumentError(f"{name} must be C-contiguous; got shape {shape} with element strides {tuple(strides)}")
    if ptr % align:
        raise ArgumentError(
            f"{name}'s data pointer {ptr:#x} is not {align}-byte aligned (a sliced view?); "
            f"asynccopy copies {align}-byte vectors"
        )
    if writable and readonly:
        raise ArgumentError(f"{name} is read-only")
    device_id = 0
    if stream is not None:  # establish stream order (DLPack / CAI producer stream → ours) and find the device
        from cuda.core.utils import StridedMemoryView

        # 0 (the NULL stream) is ambiguous in DLPack; the legacy default stream is 1 there
        smv = StridedMemoryView.from_any_interface(obj, stream_ptr=int(stream.handle) or 1)
        device_id = smv.device_id
    return DeviceArray(obj, ptr, size, shape, want, device_id)


@dataclass
class Output:
    """A new array of the caller's kind: where the kernel writes, and what the caller gets back."""

    ptr: int
    obj: object
    jax: bool = False
    jax_dtype: str | None = None  # the dtype JAX gets when the buffer travels under another (bfloat16 as uint16)

    def finish(self, stream):
        if not self.jax:
            return self.obj
        import jax
        import jax.numpy as jnp

        stream.sync()  # JAX reads on its own streams: the result must be complete before handover
        arr = jnp.from_dlpack(self.obj)
        return jax.lax.bitcast_convert_type(arr, self.jax_dtype) if self.jax_dtype else arr


def output(out, src: DeviceArray, *, stream) -> Output:
    """Where a result of src's shape goes: ``out`` (checked: a writable CUDA array of as many elements,
    of src's dtype) or, when it is None, a new array of src's kind."""
    if out is None:
        return empty_like(src, stream=stream)
    o = view(out, "out", stream=stream, dtype=src.dtype, writable=True)
    if o.size != src.size:
        raise ArgumentError(f"out has {o.size} elements, x has {src.size}")
    return Output(o.ptr, out)


def empty_like(src: DeviceArray, *, stream, torch_streams: dict[int, int] | None = None) -> Output:
    """A new uninitialized array of src's kind, shape and dtype, usable in order on ``stream``. ``torch_streams``: see
    :func:`torch_stream`."""
    kind = _kind(src.obj)
    if kind == "cupy":
        import cupy

        external = getattr(cupy.cuda.Stream, "from_external", None)
        cp_stream = external(stream) if external else cupy.cuda.ExternalStream(int(stream.handle))
        with cupy.cuda.Device(src.device_id), cp_stream:
            arr = cupy.empty(src.shape, dtype=src.dtype)
        return Output(int(arr.data.ptr), arr)
    if kind == "torch":
        import torch

        device, dtype = src.obj.device, getattr(torch, _dtype_name(src.dtype))
        if int(stream.handle) == torch_stream(device, torch_streams):
            arr = torch.empty(src.shape, dtype=dtype, device=device)
        else:  # the caching allocator ties memory to the stream it was allocated on: the one we write it on
            with torch.cuda.stream(torch.cuda.ExternalStream(int(stream.handle), device=device)):
                arr = torch.empty(src.shape, dtype=dtype, device=device)
        return Output(int(arr.data_ptr()), arr)
    from cuda.core import Device
    from cuda.core.utils import StridedMemoryView

    jax = kind in ("jax", "jaxlib")
    # DLPack (cuda.core's export) has no bfloat16: JAX gets the bits as uint16 and reinterprets them
    bits = jax and src.dtype.name == "bfloat16"
    buf = Device(src.device_id).allocate(max(src.size, 1) * src.dtype.itemsize, stream=stream)
    smv = StridedMemoryView.from_buffer(buf, shape=src.shape, dtype=np.dtype(np.uint16) if bits else src.dtype)
    return Output(int(smv.ptr), smv, jax=jax, jax_dtype="bfloat16" if bits else None)


@functools.cache
def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name  # a property computed in Python each time (a microsecond)


def to_host(ptr: int, nbytes: int, stream) -> np.ndarray:
    """nbytes from device memory at ptr, in order after the work queued on stream (a cuda.core Stream)."""
    from cuda.bindings import driver

    from .device import check_driver

    out = np.empty(max(nbytes, 1), dtype=np.uint8)
    if nbytes:
        check_driver(driver.cuMemcpyDtoHAsync(out.ctypes.data, ptr, nbytes, int(stream.handle)), "cuMemcpyDtoHAsync")
    stream.sync()
    return out[:nbytes]


def to_device(host: np.ndarray, ptr: int, stream) -> None:
    """Copy a contiguous host array to device memory at ptr, in order on stream (synchronized)."""
    from cuda.bindings import driver

    from .device import check_driver

    host = np.ascontiguousarray(host)
    if host.nbytes:
        check_driver(driver.cuMemcpyHtoDAsync(ptr, host.ctypes.data, host.nbytes, int(stream.handle)),
                     "cuMemcpyHtoDAsync")
    stream.sync()  # the host array may go away after we return
