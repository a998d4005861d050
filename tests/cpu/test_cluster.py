"""asynccopy.cluster without a GPU: cluster sizes are checked against the portable and hardware limits."""

import pytest

from asynccopy import cluster
from asynccopy.errors import ArgumentError


@pytest.mark.parametrize("size", [1, 2, 8, 9, 16])
def test_sizes_some_hopper_can_run(size):
    assert cluster.check_size(size) == size


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4", None])
def test_a_size_is_a_positive_number_of_blocks(bad):
    with pytest.raises(ArgumentError, match=rf"a cluster size is a positive number of blocks, got {bad!r}"):
        cluster.check_size(bad)


def test_above_the_hardware_limit_names_both_limits():
    with pytest.raises(ArgumentError, match=r"^a cluster of 17 blocks is not supported: the portable limit is 8 blocks, "
                                            r"and 16 with the non-portable cluster size attribute$"):
        cluster.check_size(17)
    assert (cluster.PORTABLE_MAX, cluster.HARDWARE_MAX, cluster.MIN_CC) == (8, 16, (9, 0))
