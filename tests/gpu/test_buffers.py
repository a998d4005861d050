"""Device buffers filled and read back by asynccopy's util kernels (asynccopy.buffers)."""

import numpy as np
import pytest

from asynccopy.buffers import Scratch


@pytest.fixture
def scratch(facts):
    from cuda.core import Device

    s = Device(facts.device_id).create_stream()
    yield Scratch(s, facts)
    s.close()


def test_fill_kernels(scratch):
    n = 1_000_003  # not a multiple of the grid's threads
    buf = scratch.alloc(n)
    try:
        scratch.fill_random(buf, n, seed=7)
        a = scratch.to_host(buf, n)
        scratch.fill_random(buf, n, seed=8)
        b = scratch.to_host(buf, n)
        scratch.fill_random(buf, n, seed=7)
        assert np.array_equal(scratch.to_host(buf, n), a)  # a seed gives its numbers again
        assert a.dtype == np.float32 and a.shape == (n,)
        assert a.min() >= -1 and a.max() < 1 and abs(a.mean()) < 0.01 and 0.3 < a.std() < 0.7
        assert (a != b).mean() > 0.99
        scratch.fill_value(buf, n, float("nan"))
        assert np.isnan(scratch.to_host(buf, n)).all()
        scratch.fill_value(buf, n, 2.5)
        assert (scratch.to_host(buf, n) == 2.5).all()
    finally:
        buf.close()


def test_to_host_reads_the_first_n(scratch):
    buf = scratch.alloc(1000)
    try:
        scratch.fill_value(buf, 1000, 1.0)
        scratch.fill_value(buf, 10, 3.0)  # only the first 10 change
        got = scratch.to_host(buf, 12)
        assert got.tolist() == [3.0] * 10 + [1.0] * 2
    finally:
        buf.close()


def test_an_empty_buffer_is_still_a_buffer(scratch):
    buf = scratch.alloc(0)
    try:
        assert buf.size >= 4 and scratch.to_host(buf, 0).size == 0
    finally:
        buf.close()
