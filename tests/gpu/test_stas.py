"""The STAS ring and its global-memory twin on the GPU: every word of every round, every cluster size."""

import numpy as np
import pytest

from asynccopy import cluster, stas
from asynccopy.errors import ArgumentError


@pytest.fixture(autouse=True)
def _hopper(facts):
    if facts.cc < (9, 0):
        pytest.skip("st.async and clusters need CC 9.0")


def _largest():
    from cuda.core import Device

    kernel = stas._kernel(stas.RingConfig.make(2, 4096), stas.device.current().arch)
    return cluster.max_cluster_size(kernel, block=256, shmem=2 * 4096, stream=Device().create_stream())


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


def test_launch_checks_the_kind_of_cluster():
    from cuda.core import Device

    s = Device().create_stream()
    arch = stas.device.current().arch
    fixed = stas._kernel(stas.RingConfig.make(4, 512, compile_time_cluster=True), arch)
    assert fixed.attributes.required_cluster_width == 4
    with pytest.raises(ArgumentError, match=r"fixes its cluster at compile time \(__cluster_dims__\(4, 1, 1\)\)"):
        cluster.launch(fixed, block=256, stream=s, clusters=1, cluster=4)
    with pytest.raises(ArgumentError, match=r"needs a grid that is a positive multiple of 4 blocks, got 6"):
        cluster.launch(fixed, block=256, stream=s, blocks=6)
    runtime = stas._kernel(stas.RingConfig.make(4, 512), arch)
    with pytest.raises(ArgumentError, match=r"no compile-time cluster dimensions: give cluster= and clusters="):
        cluster.launch(runtime, block=256, stream=s, blocks=8)


def test_cluster_queries_and_a_size_that_does_not_fit():
    from cuda.core import Device

    s = Device().create_stream()
    kernel = stas._kernel(stas.RingConfig.make(2, 4096), stas.device.current().arch)
    small = cluster.max_cluster_size(kernel, block=256, shmem=8192, stream=s)
    assert cluster.PORTABLE_MAX <= small <= cluster.HARDWARE_MAX
    assert cluster.max_active_clusters(kernel, 2, block=256, shmem=8192, stream=s) >= 60
    # a block that fills an SM's shared memory: clusters are limited by SMs per GPC
    big = 200 * 1024
    largest = cluster.max_cluster_size(kernel, block=256, shmem=big, stream=s)
    assert 1 <= largest <= small
    if largest < cluster.HARDWARE_MAX:
        with pytest.raises(ArgumentError, match=rf"a cluster of {largest + 1} blocks .* does not fit this device: "
                                                rf"at most {largest}"):
            cluster.check_fits(kernel, largest + 1, block=256, shmem=big, stream=s)
    with pytest.raises(ArgumentError, match=r"the portable limit is 8 blocks, and 16 with the non-portable"):
        cluster.check_fits(kernel, 17, block=256, shmem=big, stream=s)
