"""A built-in table of GPUs for planning without the GPU at hand.

Figures are datasheet values (SM counts, memory bandwidth) and the CUDA programming guide's
per-compute-capability limits; they are leads, not measurements. ``latency_ns`` is the loaded
memory latency the planner assumes (Little's law: bytes in flight = bandwidth x latency). Where
CCCL's transform tuning gives bytes in flight per SM (16 KiB A100, 32 KiB H100, 48 KiB H200), the
latency is derived from it: latency = bytes per SM x SMs / bandwidth; elsewhere it is an assumption,
marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ArgumentError

KiB = 1024


@dataclass(frozen=True)
class KnownDevice:
    name: str
    cc: tuple[int, int]
    sm_count: int
    smem_per_sm: int
    smem_per_block_optin: int
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    l2_bytes: int
    bandwidth: float  # bytes per second, datasheet
    latency_ns: float  # loaded memory latency the planner assumes
    latency_source: str

    @property
    def bytes_in_flight_per_sm(self) -> float:
        """What one SM must keep in flight for the device to reach its bandwidth (Little's law)."""
        return self.bandwidth * self.latency_ns * 1e-9 / self.sm_count

    @property
    def reserved_smem_per_block(self) -> int:
        """Shared memory the system keeps per resident block (1 KiB from compute capability 8.0 on)."""
        return 1 * KiB if self.cc >= (8, 0) else 0


def _cccl(bytes_per_sm: int, sms: int, bandwidth: float) -> float:
    return bytes_per_sm * sms / bandwidth * 1e9


KNOWN: dict[str, KnownDevice] = {
    d.name: d
    for d in (
        KnownDevice("V100", (7, 0), 80, 96 * KiB, 96 * KiB, 65536, 2048, 32, 6 << 20, 900e9, 600.0,
                    "assumed (no CCCL figure)"),
        KnownDevice("A100-40GB", (8, 0), 108, 164 * KiB, 163 * KiB, 65536, 2048, 32, 40 << 20, 1555e9,
                    _cccl(16 * KiB, 108, 1555e9), "CCCL: 16 KiB per SM"),
        KnownDevice("A100-80GB", (8, 0), 108, 164 * KiB, 163 * KiB, 65536, 2048, 32, 40 << 20, 2039e9,
                    _cccl(16 * KiB, 108, 1555e9), "CCCL: 16 KiB per SM (on the 40 GB part)"),
        KnownDevice("H100-SXM", (9, 0), 132, 228 * KiB, 227 * KiB, 65536, 2048, 32, 50 << 20, 3350e9,
                    _cccl(32 * KiB, 132, 3350e9), "CCCL: 32 KiB per SM"),
        KnownDevice("H100-PCIe", (9, 0), 114, 228 * KiB, 227 * KiB, 65536, 2048, 32, 50 << 20, 2000e9,
                    _cccl(32 * KiB, 132, 3350e9), "CCCL: 32 KiB per SM (on the SXM part)"),
        KnownDevice("H200", (9, 0), 132, 228 * KiB, 227 * KiB, 65536, 2048, 32, 60 << 20, 4800e9,
                    _cccl(48 * KiB, 132, 4800e9), "CCCL: 48 KiB per SM"),
        KnownDevice("L40S", (8, 9), 142, 100 * KiB, 99 * KiB, 65536, 1536, 24, 96 << 20, 864e9, 1000.0,
                    "assumed (no CCCL figure)"),
        KnownDevice("RTX4090", (8, 9), 128, 100 * KiB, 99 * KiB, 65536, 1536, 24, 72 << 20, 1008e9, 1000.0,
                    "assumed (no CCCL figure)"),
    )
}

# (substrings that must all appear in a device's upper-cased name, table name), most specific first
_MATCH = [(("H200",), "H200"), (("H100", "PCIE"), "H100-PCIe"), (("H100",), "H100-SXM"), (("A100", "80"), "A100-80GB"),
          (("A100",), "A100-40GB"), (("V100",), "V100"), (("L40S",), "L40S"), (("4090",), "RTX4090")]


def lookup(name: str) -> KnownDevice:
    """A known device by table name (``"H200"``, ``"A100-40GB"``) or a live device's name."""
    for known in KNOWN.values():
        if known.name.upper() == name.strip().upper():
            return known
    upper = name.upper()
    for needles, table_name in _MATCH:
        if all(n in upper for n in needles):
            return KNOWN[table_name]
    raise ArgumentError(f"unknown device {name!r}; known: {', '.join(KNOWN)}")


def from_facts(facts) -> KnownDevice:
    """A live device (asynccopy.device.DeviceFacts) as a planning device: limits from the device,
    bandwidth and latency from the table entry its name matches (H200 figures when none does)."""
    try:
        ref = lookup(facts.name)
        source = ref.latency_source
    except ArgumentError:
        ref, source = KNOWN["H200"], "assumed: H200 figures (device not in the table)"
    return KnownDevice(facts.name, facts.cc, facts.sm_count, facts.smem_per_sm, facts.smem_per_block_optin,
                       facts.regs_per_sm, facts.max_threads_per_sm, facts.max_blocks_per_sm, facts.l2_bytes,
                       ref.bandwidth, ref.latency_ns, source)
