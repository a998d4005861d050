"""Thread-block clusters on the GPU (asynccopy.cluster): the kind of cluster a kernel takes, the driver's
answers on sizes, and a size that does not fit."""

import pytest

from asynccopy import cluster, device, stas
from asynccopy.errors import ArgumentError

pytestmark = pytest.mark.cc(9, 0)


@pytest.fixture
def s():
    from cuda.core import Device

    stream = Device().create_stream()
    yield stream
    stream.close()


def test_launch_checks_the_kind_of_cluster(s):
    arch = device.current().arch
    fixed = stas._kernel(stas.RingConfig.make(4, 512, compile_time_cluster=True), arch)
    assert fixed.attributes.required_cluster_width == 4
    with pytest.raises(ArgumentError, match=r"fixes its cluster at compile time \(__cluster_dims__\(4, 1, 1\)\)"):
        cluster.launch(fixed, block=256, stream=s, clusters=1, cluster=4)
    with pytest.raises(ArgumentError, match=r"needs a grid that is a positive multiple of 4 blocks, got 6"):
        cluster.launch(fixed, block=256, stream=s, blocks=6)
    runtime = stas._kernel(stas.RingConfig.make(4, 512), arch)
    with pytest.raises(ArgumentError, match=r"no compile-time cluster dimensions: give cluster= and clusters="):
        cluster.launch(runtime, block=256, stream=s, blocks=8)


def test_cluster_queries_and_a_size_that_does_not_fit(s):
    kernel = stas._kernel(stas.RingConfig.make(2, 4096), device.current().arch)
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
