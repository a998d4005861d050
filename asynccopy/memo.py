"""Choices the public entry points make once per kind of call: asynccopy.gemm's configuration for operands of one
shape, layout, alignment and dtype, and the clusters its kernel can keep resident. A call in a loop then spends its
time on the launch, not on choosing it again (H200's host: asynccopy.gemm took 222-342 us of CPU a call, 40-52 of them
in configure; 72-134 since)."""

from __future__ import annotations

from collections.abc import Callable, Hashable


class Memo:
    """A dictionary of values made on first use, emptied when it holds ``most`` (the keys are few in practice: one
    per shape a program uses)."""

    def __init__(self, most: int = 4096):
        self._values: dict = {}
        self._most = most

    def get(self, key: Hashable, make: Callable[[], object]):
        try:
            return self._values[key]
        except KeyError:
            pass
        value = make()  # an exception is not kept: the next call raises it again
        if len(self._values) >= self._most:
            self._values.clear()
        self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


def matrix_key(m) -> tuple:
    """What a configuration may read of an asynccopy.matrix.Matrix: its extents, strides and dtype, its device, and its
    address's offset from a 128-byte line (which decides the alignment classes and the pairs sharing B)."""
    return m.rows, m.cols, m.row_stride, m.col_stride, m.dtype, m.device_id, m.ptr % 128
