"""Thread-block clusters from Python (compute capability 9.0): sizes checked, queried and launched.

A cluster's blocks are co-scheduled on one GPC and can read and write each other's shared memory.
Two ways to give a kernel its cluster shape, both through ``cuda.core``:
  * launch time: ``launch(kernel, ..., clusters=G, cluster=C)`` — ``LaunchConfig(grid=G, cluster=C)``,
    where the grid counts clusters;
  * compile time: a kernel declared ``__cluster_dims__(C, 1, 1)`` is launched with a plain grid of
    blocks (a multiple of C) and no cluster in its ``LaunchConfig`` (``launch(kernel, ..., blocks=N)``).
Sizes: up to 8 blocks is portable; 9 to 16 need the kernel's non-portable attribute, which
:func:`allow_non_portable` sets (``cuda.core`` can read it but not set it, so this goes through
``cuda.bindings``) and whether the size then fits is the driver's answer to
``max_potential_cluster_size`` for that block size and shared memory.
"""

from __future__ import annotations

from . import build, device
from .errors import ArgumentError

PORTABLE_MAX = 8  # blocks per cluster every CC 9.0 device supports
HARDWARE_MAX = 16  # with the non-portable attribute (H100 / H200)
MIN_CC = (9, 0)

_non_portable: set[tuple[int, int]] = set()


def check_size(size) -> int:
    """A cluster size (blocks, 1D) that some CC 9.0 device could run, else ArgumentError naming the limits."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ArgumentError(f"a cluster size is a positive number of blocks, got {size!r}")
    if size > HARDWARE_MAX:
        raise ArgumentError(f"a cluster of {size} blocks is not supported: the portable limit is {PORTABLE_MAX} "
                            f"blocks, and {HARDWARE_MAX} with the non-portable cluster size attribute")
    return size


def allow_non_portable(kernel, device_id: int) -> None:
    """Let ``kernel`` launch with clusters of up to 16 blocks (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)."""
    from cuda.bindings import driver

    handle = kernel.handle
    memo = (int(handle), device_id)
    if memo in _non_portable:
        return
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    if isinstance(handle, driver.CUkernel):
        device.check_driver(driver.cuKernelSetAttribute(attr, 1, handle, driver.CUdevice(device_id)),
                           "cuKernelSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")
    else:
        device.check_driver(driver.cuFuncSetAttribute(handle, attr, 1),
                           "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")
    _non_portable.add(memo)


def _config(*, block: int, shmem: int, grid: int = 1, cluster: int | None = None):
    from cuda.core import LaunchConfig

    return LaunchConfig(grid=grid, block=block, shmem_size=shmem, cluster=cluster)


def max_cluster_size(kernel, *, block: int, shmem: int = 0, stream, non_portable: bool = True) -> int:
    """The largest cluster of ``kernel`` this device can run with ``block`` threads and ``shmem`` bytes of
    dynamic shared memory per block (the driver's cuOccupancyMaxPotentialClusterSize)."""
    device.require(MIN_CC, "thread-block clusters")
    required = kernel.attributes.required_cluster_width
    if required:  # __cluster_dims__: the driver refuses this query (CUDA_ERROR_INVALID_CLUSTER_SIZE, H200)
        return int(required)
    dev_id = stream.device.device_id
    if shmem > 0:
        build.allow_dynamic_smem(kernel, shmem, dev_id)
    if non_portable:
        allow_non_portable(kernel, dev_id)
    return int(kernel.occupancy.max_potential_cluster_size(_config(block=block, shmem=shmem), stream=stream))


def max_active_clusters(kernel, cluster: int, *, block: int, shmem: int = 0, stream) -> int:
    """How many clusters of ``cluster`` blocks can be resident at once (cuOccupancyMaxActiveClusters)."""
    device.require(MIN_CC, "thread-block clusters")
    check_size(cluster)
    dev_id = stream.device.device_id
    if shmem > 0:
        build.allow_dynamic_smem(kernel, shmem, dev_id)
    if cluster > PORTABLE_MAX:
        allow_non_portable(kernel, dev_id)
    fixed = kernel.attributes.required_cluster_width  # compile-time dims: leave the config's cluster unset
    config = _config(grid=cluster, block=block, shmem=shmem, cluster=None if fixed else cluster)
    return int(kernel.occupancy.max_active_clusters(config, stream=stream))


def check_fits(kernel, cluster: int, *, block: int, shmem: int, stream, what: str = "kernel") -> None:
    """ArgumentError if clusters of ``cluster`` blocks of this shape cannot run here, naming the largest that can."""
    check_size(cluster)
    required = kernel.attributes.required_cluster_width
    if required and cluster != required:
        raise ArgumentError(f"{what}: compiled with __cluster_dims__({required}, 1, 1), asked for clusters of {cluster}")
    largest = max_cluster_size(kernel, block=block, shmem=shmem, stream=stream)
    if cluster > largest:
        limit = (f"the portable limit is {PORTABLE_MAX}, {HARDWARE_MAX} with the non-portable attribute (set)"
                 if largest >= PORTABLE_MAX else "shared memory or threads per SM limit it")
        raise ArgumentError(f"{what}: a cluster of {cluster} blocks ({block} threads, {shmem} B of shared memory "
                            f"each) does not fit this device: at most {largest} ({limit})")


def launch(kernel, *args, block: int, stream, shmem: int = 0, clusters: int | None = None,
           cluster: int | None = None, blocks: int | None = None) -> None:
    """Launch with launch-time cluster dimensions (``clusters`` x ``cluster`` blocks) or, for a kernel
    with compile-time ``__cluster_dims__``, a plain grid of ``blocks``."""
    device.require(MIN_CC, "thread-block clusters")
    required = kernel.attributes.required_cluster_width
    if cluster is not None:
        if required:
            raise ArgumentError(f"this kernel fixes its cluster at compile time (__cluster_dims__({required}, 1, 1)): "
                                f"launch it with blocks=, not cluster=")
        check_size(cluster)
        if clusters is None or clusters < 1:
            raise ArgumentError(f"a cluster launch needs clusters >= 1, got {clusters!r}")
        if cluster > PORTABLE_MAX:
            allow_non_portable(kernel, stream.device.device_id)
        build.launch(kernel, *args, grid=clusters, block=block, stream=stream, shmem=shmem, cluster=cluster)
        return
    if not required:
        raise ArgumentError("this kernel has no compile-time cluster dimensions: give cluster= and clusters=")
    if blocks is None or blocks < 1 or blocks % required:
        raise ArgumentError(f"a kernel with __cluster_dims__({required}, 1, 1) needs a grid that is a positive "
                            f"multiple of {required} blocks, got {blocks!r}")
    if required > PORTABLE_MAX:
        allow_non_portable(kernel, stream.device.device_id)
    build.launch(kernel, *args, grid=blocks, block=block, stream=stream, shmem=shmem)
