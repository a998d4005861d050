"""Device facts, one type for all of them: a live GPU's (read through cuda.core) and a built-in table's.

:class:`DeviceFacts` holds what the planner, the launches and the validators need: compute capability,
SMs, shared memory, registers, threads, L2, and the memory system (bandwidth, and the loaded latency the
planner assumes). ``current()`` reads the live GPU and takes the memory figures from the table entry its
name matches; ``lookup("H200")`` gives a table entry for planning without the GPU at hand.

Table figures are datasheet values (SMs, bandwidth) and the CUDA programming guide's per-compute-
capability limits: leads, not measurements. ``latency_ns`` is the loaded latency the planner assumes
(Little's law: bytes in flight = bandwidth x latency). Where CCCL's transform tuning gives bytes in
flight per SM (16 KiB A100, 32 KiB H100, 48 KiB H200) the latency is derived from it (bytes per SM x
SMs / bandwidth); elsewhere it is an assumption, marked as such.

Also here: arch names (``sm_90a``) and the one check of a driver call's result.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields, replace

from .errors import ArgumentError, DeviceError

KiB = 1024

# ---------------------------------------------------------------------------------------------
# Arch names


def arch_of_cc(cc: tuple[int, int]) -> str:
    """The cubin target for a compute capability: ``sm_90a`` on Hopper, ``sm_80`` on Ampere, ...

    From 9.0 on, the arch-specific ``a`` target is used: wgmma and setmaxnreg exist only there, and a
    cubin built for the exact arch loses nothing on it.
    """
    major, minor = cc
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def parse_arch(arch: str | int | tuple[int, int]) -> str:
    """Normalize ``"sm_90a"``, ``"90a"``, ``"9.0"``, ``90`` or ``(9, 0)`` to ``"sm_90a"``-style names."""
    if isinstance(arch, tuple):
        return arch_of_cc(arch)
    text = str(arch).strip().lower()
    if text.startswith("sm_"):
        text = text[3:]
    if "." in text:
        major, _, minor = text.partition(".")
        if major.isdigit() and minor.isdigit():
            return arch_of_cc((int(major), int(minor)))
    digits = text.rstrip("af")
    if not digits.isdigit() or len(digits) < 2:
        raise ArgumentError(f"arch must look like 'sm_90a', 'sm_80' or '9.0', got {arch!r}")
    return f"sm_{text}"


def cc_of_arch(arch: str) -> tuple[int, int]:
    digits = parse_arch(arch)[3:].rstrip("af")
    return int(digits[:-1]), int(digits[-1])


# ---------------------------------------------------------------------------------------------
# The facts


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    cc: tuple[int, int]
    sm_count: int
    smem_per_sm: int  # bytes of shared memory per SM
    smem_per_block_optin: int  # bytes one block may use after opting in (static + dynamic)
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    l2_bytes: int
    bandwidth: float  # bytes per second (datasheet, or measured where a caller replaced it)
    latency_ns: float  # the loaded memory latency the planner assumes
    latency_source: str
    device_id: int = -1  # -1: not a live device (a table entry)
    tensor_tflops: float = 0.0  # dense bf16 / f16 with f32 accumulation, datasheet (0: unknown)
    fp32_tflops: float = 0.0  # FFMA on the CUDA cores, datasheet (0: unknown)

    @property
    def arch(self) -> str:
        """The cubin target: ``sm_90a`` on Hopper."""
        return arch_of_cc(self.cc)

    @property
    def live(self) -> bool:
        return self.device_id >= 0

    @property
    def bytes_in_flight_per_sm(self) -> float:
        """What one SM must keep in flight for the device to reach its bandwidth (Little's law)."""
        return self.bandwidth * self.latency_ns * 1e-9 / self.sm_count

    @property
    def reserved_smem_per_block(self) -> int:
        """Shared memory the system keeps per resident block (1 KiB from compute capability 8.0 on)."""
        return 1 * KiB if self.cc >= (8, 0) else 0

    def as_dict(self) -> dict:
        return {**asdict(self), "arch": self.arch}

    @staticmethod
    def from_dict(data: dict) -> DeviceFacts:
        """Facts saved with :meth:`as_dict` (older files lack the memory figures: the table's are used)."""
        known = {f.name for f in fields(DeviceFacts)}
        try:
            values = {k: v for k, v in data.items() if k in known}
            values["cc"] = tuple(values["cc"])
            if "bandwidth" not in values:
                ref = _table_entry_for(str(values["name"]))
                values.update(bandwidth=ref.bandwidth, latency_ns=ref.latency_ns, latency_source=ref.latency_source,
                              tensor_tflops=ref.tensor_tflops, fp32_tflops=ref.fp32_tflops)
            return DeviceFacts(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"not a device description: {exc}") from None


def _cccl(bytes_per_sm: int, sms: int, bandwidth: float) -> float:
    return bytes_per_sm * sms / bandwidth * 1e9


def _entry(name, cc, sms, smem_sm, smem_block, threads, blocks, l2, bandwidth, latency, source,
           tflops=(0.0, 0.0)) -> DeviceFacts:
    """tflops: the datasheet's (dense bf16 tensor, fp32 FFMA) rates."""
    return DeviceFacts(name, cc, sms, smem_sm, smem_block, 65536, threads, blocks, l2, bandwidth, latency, source,
                       tensor_tflops=tflops[0], fp32_tflops=tflops[1])


KNOWN: dict[str, DeviceFacts] = {
    d.name: d
    for d in (
        _entry("V100", (7, 0), 80, 96 * KiB, 96 * KiB, 2048, 32, 6 << 20, 900e9, 600.0, "assumed (no CCCL figure)"),
        _entry("A100-40GB", (8, 0), 108, 164 * KiB, 163 * KiB, 2048, 32, 40 << 20, 1555e9,
               _cccl(16 * KiB, 108, 1555e9), "CCCL: 16 KiB per SM", (312.0, 19.5)),
        _entry("A100-80GB", (8, 0), 108, 164 * KiB, 163 * KiB, 2048, 32, 40 << 20, 2039e9,
               _cccl(16 * KiB, 108, 1555e9), "CCCL: 16 KiB per SM (on the 40 GB part)", (312.0, 19.5)),
        _entry("H100-SXM", (9, 0), 132, 228 * KiB, 227 * KiB, 2048, 32, 50 << 20, 3350e9,
               _cccl(32 * KiB, 132, 3350e9), "CCCL: 32 KiB per SM", (989.4, 66.9)),
        _entry("H100-PCIe", (9, 0), 114, 228 * KiB, 227 * KiB, 2048, 32, 50 << 20, 2000e9,
               _cccl(32 * KiB, 132, 3350e9), "CCCL: 32 KiB per SM (on the SXM part)", (756.5, 51.2)),
        _entry("H200", (9, 0), 132, 228 * KiB, 227 * KiB, 2048, 32, 60 << 20, 4800e9,
               _cccl(48 * KiB, 132, 4800e9), "CCCL: 48 KiB per SM", (989.4, 66.9)),
        _entry("L40S", (8, 9), 142, 100 * KiB, 99 * KiB, 1536, 24, 96 << 20, 864e9, 1000.0, "assumed (no CCCL figure)",
               (362.1, 91.6)),
        _entry("RTX4090", (8, 9), 128, 100 * KiB, 99 * KiB, 1536, 24, 72 << 20, 1008e9, 1000.0,
               "assumed (no CCCL figure)", (165.2, 82.6)),
    )
}

# A live device's name (upper-cased) -> table entry: every substring must appear; most specific first.
_LIVE_NAMES = [(("H200",), "H200"), (("H100", "PCIE"), "H100-PCIe"), (("H100",), "H100-SXM"),
               (("A100", "80"), "A100-80GB"), (("A100",), "A100-40GB"), (("V100",), "V100"), (("L40S",), "L40S"),
               (("4090",), "RTX4090")]

# Shared memory per compute capability (the programming guide's table), for checks without a GPU:
# cc -> (per block with opt-in, per SM), bytes.
_SMEM_OF_CC: dict[tuple[int, int], tuple[int, int]] = {
    (7, 0): (96 * KiB, 96 * KiB), (7, 5): (64 * KiB, 64 * KiB), (8, 0): (163 * KiB, 164 * KiB),
    (8, 6): (99 * KiB, 100 * KiB), (8, 7): (163 * KiB, 164 * KiB), (8, 9): (99 * KiB, 100 * KiB),
    (9, 0): (227 * KiB, 228 * KiB), (10, 0): (227 * KiB, 228 * KiB), (12, 0): (99 * KiB, 100 * KiB),
}


def lookup(name: str) -> DeviceFacts:
    """A table entry by its exact name, case aside (``"H200"``, ``"a100-40gb"``)."""
    if not isinstance(name, str):
        raise ArgumentError(f"a device is named by a string, got {name!r}")
    for known in KNOWN.values():
        if known.name.upper() == name.strip().upper():
            return known
    raise ArgumentError(f"unknown device {name!r}; known: {', '.join(KNOWN)}")


def _table_entry_for(live_name: str) -> DeviceFacts:
    """The table entry a live device's name (``"NVIDIA H200"``) matches; the H200's when none does."""
    upper = live_name.upper()
    for needles, table_name in _LIVE_NAMES:
        if all(n in upper for n in needles):
            return KNOWN[table_name]
    return replace(KNOWN["H200"], latency_source="assumed: H200 figures (device not in the table)")


def smem_limits_of_arch(arch: str) -> tuple[int, int]:
    """(per block with opt-in, per SM) shared-memory bytes of an arch, from the programming guide's table."""
    cc = cc_of_arch(arch)
    known = sorted(c for c in _SMEM_OF_CC if c <= cc)
    if not known:
        raise DeviceError(f"no shared-memory figures for {arch}; known compute capabilities: "
                          f"{', '.join(f'{a}.{b}' for a, b in _SMEM_OF_CC)}")
    return _SMEM_OF_CC[cc] if cc in _SMEM_OF_CC else _SMEM_OF_CC[known[-1]]


# ---------------------------------------------------------------------------------------------
# The live GPU


@functools.cache
def cuda_core():
    """The cuda.core module, imported on first use: ``import asynccopy`` goes without it (a tenth of a second), and the
    entry points, called in a loop, do not import it again each call."""
    import cuda.core

    return cuda.core


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
        name = dev.name
        ref = _table_entry_for(name)
        return DeviceFacts(
            name=name,
            cc=(p.compute_capability_major, p.compute_capability_minor),
            sm_count=p.multiprocessor_count,
            smem_per_sm=p.max_shared_memory_per_multiprocessor,
            smem_per_block_optin=p.max_shared_memory_per_block_optin,
            regs_per_sm=p.max_registers_per_multiprocessor,
            max_threads_per_sm=p.max_threads_per_multiprocessor,
            max_blocks_per_sm=p.max_blocks_per_multiprocessor,
            l2_bytes=p.l2_cache_size,
            bandwidth=ref.bandwidth,
            latency_ns=ref.latency_ns,
            latency_source=ref.latency_source,
            device_id=dev.device_id,
            tensor_tflops=ref.tensor_tflops,
            fp32_tflops=ref.fp32_tflops,
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


def check_driver(result, what: str):
    """The values of a cuda.bindings driver call after its CUresult, or DeviceError naming the call."""
    from cuda.bindings import driver

    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"{what} failed: {err.name}")
    return result[1:]
