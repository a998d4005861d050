"""Device facts: read live from cuda.core, or looked up for an arch when there is no GPU."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from .build import arch_of_cc, cc_of_arch
from .errors import DeviceError


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    cc: tuple[int, int]
    arch: str  # the cubin target: sm_90a on Hopper
    sm_count: int
    smem_per_block_optin: int  # bytes one block may use after opting in (static + dynamic)
    smem_per_sm: int  # bytes of shared memory per SM
    l2_bytes: int
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    device_id: int = -1  # -1: not a live device (facts from the arch table)

    def as_dict(self) -> dict:
        return asdict(self)


# Per-arch shared-memory limits (CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability"): used to validate configurations when compiling without a GPU.
_ARCH_LIMITS: dict[tuple[int, int], tuple[int, int]] = {
    # cc: (shared memory per block with opt-in, shared memory per SM), bytes
    (7, 0): (96 * 1024, 96 * 1024),
    (7, 5): (64 * 1024, 64 * 1024),
    (8, 0): (163 * 1024, 164 * 1024),
    (8, 6): (99 * 1024, 100 * 1024),
    (8, 7): (163 * 1024, 164 * 1024),
    (8, 9): (99 * 1024, 100 * 1024),
    (9, 0): (227 * 1024, 228 * 1024),
    (10, 0): (227 * 1024, 228 * 1024),
    (12, 0): (99 * 1024, 100 * 1024),
}


def smem_limits_of_arch(arch: str) -> tuple[int, int]:
    """(per block opt-in, per SM) shared-memory bytes of an arch, from the programming guide's table."""
    cc = cc_of_arch(arch)
    if cc in _ARCH_LIMITS:
        return _ARCH_LIMITS[cc]
    known = sorted(c for c in _ARCH_LIMITS if c <= cc)
    if not known:
        raise DeviceError(f"no shared-memory figures for {arch}; known: {sorted(_ARCH_LIMITS)}")
    return _ARCH_LIMITS[known[-1]]


def _no_gpu(reason: object) -> DeviceError:
    first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
    return DeviceError(f"no CUDA GPU available ({first})")


@functools.cache
def current(device_id: int | None = None) -> DeviceFacts:
    """Facts of the current (or given) GPU; DeviceError in one line when there is none."""
    try:
        from cuda.core import Device

        dev = Device(device_id)
        dev.set_current()
        p = dev.properties
        cc = (p.compute_capability_major, p.compute_capability_minor)
        return DeviceFacts(
            name=dev.name,
            cc=cc,
            arch=arch_of_cc(cc),
            sm_count=p.multiprocessor_count,
            smem_per_block_optin=p.max_shared_memory_per_block_optin,
            smem_per_sm=p.max_shared_memory_per_multiprocessor,
            l2_bytes=p.l2_cache_size,
            regs_per_sm=p.max_registers_per_multiprocessor,
            max_threads_per_sm=p.max_threads_per_multiprocessor,
            max_blocks_per_sm=p.max_blocks_per_multiprocessor,
            device_id=dev.device_id,
        )
    except DeviceError:
        raise
    except Exception as exc:  # no driver, no device, driver too old: one line, not a traceback
        raise _no_gpu(exc) from None


def has_gpu() -> bool:
    try:
        current()
    except DeviceError:
        return False
    return True


def require(cc: tuple[int, int], what: str, facts: DeviceFacts | None = None) -> DeviceFacts:
    """The current device's facts, or DeviceError if its compute capability is below ``cc``."""
    facts = facts or current()
    if facts.cc < cc:
        raise DeviceError(
            f"{what} needs compute capability {cc[0]}.{cc[1]} or newer; "
            f"{facts.name} is {facts.cc[0]}.{facts.cc[1]}"
        )
    return facts


def driver_version() -> str:
    """The CUDA driver's version (e.g. '13.0'), or why it is unknown."""
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"unavailable ({err.name})"
        return f"{v // 1000}.{v % 1000 // 10}"
    except Exception as exc:
        return f"unavailable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
