"""The STAS ring and its global-memory twin on the GPU: every word of every round, every cluster size."""

import functools

import numpy as np
import pytest

from asynccopy import cluster, device, stas
from asynccopy.errors import ArgumentError

pytestmark = pytest.mark.cc(9, 0)  # st.async and clusters


@functools.cache
def _largest():
    """The largest cluster of the default ring (256 threads, 2 x 4 KiB slots) this GPU runs."""
    from cuda.core import Device

    s = Device().create_stream()
    try:
        kernel = stas._kernel(stas.RingConfig.make(2, 4096), device.current().arch)
        return cluster.max_cluster_size(kernel, block=256, shmem=2 * 4096, stream=s)
    finally:
        s.close()


@pytest.mark.parametrize("size", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("vec", [4, 8, 16])
@pytest.mark.parametrize("slots", [1, 2, 4])
def test_ring_delivers_every_word(size, vec, slots):
    if size > _largest():
        pytest.skip(f"clusters of {size} do not fit this device")
    seed = int(np.random.default_rng().integers(1 << 31))
    r = stas.ring(size, 1040, 37, vec=vec, slots=slots, seed=seed)  # 1040 B: not a multiple of 256 x vec
    assert r.errors == 0
    np.testing.assert_array_equal(r.last, stas.expected_last(r, seed))


@pytest.mark.parametrize("size", [2, 4, 16])
@pytest.mark.parametrize("slots", [1, 2, 4])
def test_global_ring_delivers_every_word(size, slots):
    if size > _largest():
        pytest.skip(f"clusters of {size} do not fit this device")
    seed = int(np.random.default_rng().integers(1 << 31))
    r = stas.ring(size, 4096, 23, via="global", slots=slots, seed=seed)
    assert r.errors == 0
    np.testing.assert_array_equal(r.last, stas.expected_last(r, seed))


@pytest.mark.parametrize("via", ["dsmem", "global"])
def test_a_corrupted_word_is_counted_once_per_cluster(via):
    r = stas.ring(4, 256, 9, via=via, seed=5, corrupt_round=8, clusters=3)
    assert r.errors == 3  # rank 0 of each of the 3 clusters flipped one bit of one word
    want = stas.expected_last(r, 5, corrupt_round=8)
    np.testing.assert_array_equal(r.last, want)
    assert (want != stas.expected_last(r, 5)).sum() == 3


def test_large_messages_and_many_rounds():
    seed = 77
    r = stas.ring(2, 64 * 1024, 200, seed=seed)
    assert r.errors == 0 and r.clusters >= 60
    np.testing.assert_array_equal(r.last, stas.expected_last(r, seed))


def test_compile_time_cluster_dims():
    r = stas.ring(4, 512, 11, compile_time_cluster=True, seed=3, clusters=5)
    assert r.errors == 0
    np.testing.assert_array_equal(r.last, stas.expected_last(r, 3))


def test_the_global_ring_refuses_more_clusters_than_can_be_resident():
    r = stas.prepare(2, 4096, 3, via="global")
    active = r.clusters
    r.close()
    with pytest.raises(ArgumentError, match=rf"the global-memory ring spins on flags between blocks: at most {active} "
                                            rf"clusters of 2 can be resident at once, got clusters={active + 1}"):
        stas.prepare(2, 4096, 3, via="global", clusters=active + 1)


def test_errors_add_up_over_launches_until_reset():
    r = stas.prepare(2, 256, 5, clusters=2)
    try:
        r.launch(seed=1, corrupt_round=0)
        r.launch(seed=2, corrupt_round=4)
        r.stream.sync()
        assert r.errors() == 4  # 2 clusters x 2 launches
        r.reset_errors()
        r.launch(seed=3)
        r.stream.sync()
        assert r.errors() == 0
    finally:
        r.close()
