"""The timing harness: device buffers, fresh random inputs, CUDA-event medians, rotation past L2,
and the device-to-device copy bandwidth that every figure is compared against."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

import numpy as np

from .. import arrays, build, device


@functools.cache
def _util():
    return build.compile(build.read_kernel("util.cu"), name="util")


class Scratch:
    """Device buffers of float32 on one stream, filled and copied with asynccopy's util kernels."""

    def __init__(self, stream, facts: device.DeviceFacts):
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


def time_ms(fn, stream, *, warmup: int = 3, reps: int = 20) -> list[float]:
    """Run fn(i) warmup + reps times on stream; the reps' durations by CUDA events, in ms."""
    from cuda.core import EventOptions

    timing = EventOptions(timing_enabled=True)
    for i in range(warmup):
        fn(i)
    marks = []
    for i in range(reps):
        start = stream.record(options=timing)
        fn(warmup + i)
        marks.append((start, stream.record(options=timing)))
    marks[-1][1].sync()
    return [end - start for start, end in marks]


def median(samples: list[float]) -> float:
    return statistics.median(samples)


@dataclass
class Rotation:
    """``sets`` pairs of (in, out) buffers of n floats, rotated so that repeated runs miss in L2."""

    n: int
    inputs: list
    outputs: list

    @property
    def sets(self) -> int:
        return len(self.inputs)

    def pair(self, i: int):
        return self.inputs[i % self.sets], self.outputs[i % self.sets]


def make_rotation(scratch: Scratch, n: int, *, seed: int) -> Rotation:
    """Enough buffer pairs that the bytes touched between two uses of one pair exceed 3 x L2."""
    pair_bytes = 2 * 4 * n
    sets = max(1, math.ceil(3 * scratch.facts.l2_bytes / pair_bytes) + 1) if pair_bytes < 3 * scratch.facts.l2_bytes else 1
    inputs = [scratch.alloc(n) for _ in range(sets)]
    outputs = [scratch.alloc(n) for _ in range(sets)]
    for k, buf in enumerate(inputs):
        scratch.fill_random(buf, n, seed + k)
    for buf in outputs:
        scratch.fill_value(buf, n, float("nan"))
    return Rotation(n, inputs, outputs)


def rotating(facts: device.DeviceFacts, n: int, *, seed: int) -> tuple[object, Scratch, Rotation]:
    """A new stream on the device, its Scratch, and rotating (in, out) buffers of n floats (random in, NaN out)."""
    from cuda.core import Device

    s = Device(facts.device_id).create_stream()
    scratch = Scratch(s, facts)
    return s, scratch, make_rotation(scratch, n, seed=seed)


def copy_bandwidth(rot: Rotation, stream, *, warmup: int = 3, reps: int = 20) -> tuple[float, float]:
    """(median ms, GB/s counting bytes read + written) of a device-to-device copy of n floats."""

    def copy(i: int) -> None:
        src, dst = rot.pair(i)
        src.copy_to(dst, stream=stream)

    ms = median(time_ms(copy, stream, warmup=warmup, reps=reps))
    return ms, 2 * 4 * rot.n / (ms * 1e-3) / 1e9
