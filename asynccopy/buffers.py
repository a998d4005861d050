"""Device buffers of float32 on one stream: allocated, filled with random or constant values by
asynccopy's util kernels, and read back. The bench and the traced runs share them."""

from __future__ import annotations

import functools

import numpy as np

from . import arrays, build
from .device import DeviceFacts


@functools.cache
def _util():
    return build.compile(build.read_kernel("util.cu"), name="util")


def hold(stream, ns: int) -> None:
    """Queue a one-thread kernel that keeps ``stream`` busy for ``ns`` nanoseconds (util.cu, hold)."""
    build.launch(_util().kernel("hold"), np.uint64(max(0, int(ns))), grid=1, block=1, stream=stream)


class Scratch:
    """Device buffers of float32 on one stream, filled and copied with asynccopy's util kernels."""

    def __init__(self, stream, facts: DeviceFacts):
        self.stream = stream
        self.facts = facts

    def alloc(self, n: int):
        from cuda.core import Device

        return Device(self.facts.device_id).allocate(max(n, 1) * 4, stream=self.stream)

    def _grid(self, n: int) -> int:
        return max(1, min(self.facts.sm_count * 8, -(-n // 256)))

    def fill_random(self, buf, n: int, seed: int) -> None:
        build.launch(_util().kernel("fill_uniform"), int(buf.handle), np.uint64(n), np.uint64(seed),
                     grid=self._grid(n), block=256, stream=self.stream)

    def fill_value(self, buf, n: int, value: float) -> None:
        build.launch(_util().kernel("fill_value"), int(buf.handle), np.uint64(n), np.float32(value),
                     grid=self._grid(n), block=256, stream=self.stream)

    def to_host(self, buf, n: int) -> np.ndarray:
        """The first n floats of a device buffer, in order after the work queued on this stream."""
        return arrays.to_host(int(buf.handle), n * 4, self.stream).view(np.float32)
