"""Scratch memory a kernel keeps between launches, one block of it per (device, stream), as cuBLAS keeps its
workspaces (PyTorch holds one per handle and stream): gemm_wgmma's stream-K flags and partial sums, and
attention_wgmma's key-split counters and partial O, max and sum (both kernels leave every flag they use at 0).

Kept per stream because two launches that run at once must not share it; launches on one stream are ordered,
so each finds the previous one's flags lowered again (the kernel lowers every flag it raises). A new or
larger block is zeroed on the stream before its first use. ``clear()`` hands them all back, and runs at exit."""

from __future__ import annotations

import atexit

from . import device

FLAG_BYTES = 4 * 4096  # the flags' region, first in the block: 4-byte flags, two a block of a grid up to 2048
# the flags' last two: a persistent attention grid's next unit and its blocks done taking units (attention_wgmma's
# unit_counter); a key split's counters stay below them
UNIT_COUNTER_OFFSET = FLAG_BYTES - 8
SPLIT_FLAGS = UNIT_COUNTER_OFFSET // 4


_blocks: dict[tuple[int, int], object] = {}


def stream_k(device_id: int, stream, partial_bytes: int) -> tuple[int, int]:
    """(flags, partials): device pointers to the zeroed flags and to ``partial_bytes`` of partial sums, in the
    block this stream keeps on this device (made, or grown, on the stream)."""
    from cuda.bindings import driver
    from cuda.core import Device

    key = (device_id, int(stream.handle))
    need = FLAG_BYTES + partial_bytes
    buf = _blocks.get(key)
    if buf is None or buf.size < need:
        new = Device(device_id).allocate(need, stream=stream)
        device.check_driver(driver.cuMemsetD32Async(int(new.handle), 0, FLAG_BYTES // 4, int(stream.handle)),
                            "cuMemsetD32Async")
        if buf is not None:
            buf.close(stream)  # after the launches queued on this stream that use it
        _blocks[key] = buf = new
    base = int(buf.handle)
    return base, base + FLAG_BYTES


def clear() -> None:
    """Hand every stream's block back, each once its device is idle, on the device's default stream: the stream a
    block was made on may be gone by now (a side stream a program let go), and the driver's free on a destroyed
    stream crashes the process (cuMemFreeAsync, seen at interpreter exit on an H100, 2026-12-07). A block that
    cannot be freed (no context left) is kept alive to the end, so that its finaliser never runs that free."""
    import ctypes

    from cuda.core import Device

    while _blocks:
        (device_id, _), buf = _blocks.popitem()
        try:
            dev = Device(device_id)
            dev.set_current()
            dev.sync()
            buf.close(dev.default_stream)
        except Exception:  # no CUDA left to free it with: never free it
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(buf))


atexit.register(clear)  # before the interpreter's teardown frees the blocks on their own streams
