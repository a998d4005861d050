"""Scratch memory a kernel keeps between launches, one block of it per (device, stream), as cuBLAS keeps its
workspaces (PyTorch holds one per handle and stream): gemm_wgmma's stream-K flags and partial sums, and
attention_wgmma's key-split counters and partial O, max and sum (both kernels leave every flag they use at 0).

Kept per stream because two launches that run at once must not share it; launches on one stream are ordered,
so each finds the previous one's flags lowered again (the kernel lowers every flag it raises). A new or
larger block is zeroed on the stream before its first use. ``clear()`` hands them all back; at exit they are kept (the
driver takes them back with the process)."""

from __future__ import annotations

import atexit
import threading

from . import device

FLAG_BYTES = 4 * 4096  # the flags' region, first in the block: 4-byte flags, two a block of a grid up to 2048
# the flags' last two: a persistent attention grid's next unit and its blocks done taking units (attention_wgmma's
# unit_counter); a key split's counters stay below them
UNIT_COUNTER_OFFSET = FLAG_BYTES - 8
SPLIT_FLAGS = UNIT_COUNTER_OFFSET // 4


_blocks: dict[tuple[int, int, int], object] = {}
_lock = threading.Lock()
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: one handle, a different stream in each host thread


def _key(device_id: int, handle: int) -> tuple[int, int, int]:
    """A block's key: the device and the stream; the per-thread default stream's one handle is a stream per host
    thread, whose launches may run at once, so the thread is part of its key."""
    return device_id, handle, threading.get_ident() if handle == PER_THREAD_STREAM else 0


def stream_k(device_id: int, stream, partial_bytes: int) -> tuple[int, int]:
    """(flags, partials): device pointers to the zeroed flags and to ``partial_bytes`` of partial sums, in the
    block this stream keeps on this device (made, or grown, on the stream)."""
    from cuda.bindings import driver
    from cuda.core import Device

    key = _key(device_id, int(stream.handle))
    need = FLAG_BYTES + partial_bytes
    with _lock:
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
    """Hand every stream's block back, each once its device is idle, on the device's default stream (the stream a
    block was made on may be gone by now: a side stream another library let go, on which the driver's free crashes;
    see _keep_at_exit). The calling thread's current device is restored."""
    if not _blocks:
        return
    from cuda.core import Device

    with _lock:
        before = Device()  # the calling thread's current device
        try:
            while _blocks:
                (device_id, _, _), buf = _blocks.popitem()
                dev = Device(device_id)
                dev.set_current()
                dev.sync()
                buf.close(dev.default_stream)
        finally:
            before.set_current()


def _keep_at_exit() -> None:
    """At interpreter exit the blocks are never freed: the teardown would free each on the stream it was made on, and
    a stream another library owns (PyTorch's and CuPy's side streams reach us through Stream.from_handle, which holds
    no reference) may be destroyed by then, where cuMemFreeAsync crashes the process (signal 11 under Py_FinalizeEx
    on an H100, 2026-12-07; "cuMemFreeAsync failed during resource destruction" elsewhere). Freeing them here instead
    would wait for the device (a hung kernel would hang the exit) and may revive a context another library's exit
    released; the driver takes the memory back with the process."""
    if not _blocks:  # nothing was made (a process without a GPU imports nothing of CUDA here)
        return
    import ctypes

    for buf in _blocks.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(buf))


atexit.register(_keep_at_exit)
