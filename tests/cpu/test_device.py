"""asynccopy.device without a GPU: arch names, the table, exact lookup, live names, DeviceFacts as a dict,
the compute-capability check and the driver-result check."""

import json
from dataclasses import replace

import pytest

from asynccopy import device
from asynccopy.device import DeviceFacts
from asynccopy.errors import ArgumentError, DeviceError

KiB = 1024


# ---------------------------------------------------------------------------------------------
# Arch names


@pytest.mark.parametrize(
    "given, want",
    [("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("9.0", "sm_90a"), ((9, 0), "sm_90a"), ((8, 0), "sm_80"),
     ("sm_80", "sm_80"), ("8.6", "sm_86"), (" SM_89 ", "sm_89"), ("10.0", "sm_100a"), ("sm_100f", "sm_100f"),
     # digits name a target as given: plain sm_90 (no arch-specific features) is a target of its own
     (90, "sm_90"), ("sm_90", "sm_90")],
)
def test_parse_arch(given, want):
    assert device.parse_arch(given) == want


@pytest.mark.parametrize("bad", ["hopper", "sm_9", "", "sm_90b", "9.x", "sm_"])
def test_parse_arch_rejects_nonsense_as_an_argument_error(bad):
    with pytest.raises(ArgumentError, match=r"arch must look like 'sm_90a', 'sm_80' or '9.0', got"):
        device.parse_arch(bad)


@pytest.mark.parametrize("cc, arch", [((7, 0), "sm_70"), ((8, 0), "sm_80"), ((8, 9), "sm_89"), ((9, 0), "sm_90a"),
                                      ((10, 0), "sm_100a"), ((12, 0), "sm_120a")])
def test_arch_of_cc_and_back(cc, arch):
    assert device.arch_of_cc(cc) == arch
    assert device.cc_of_arch(arch) == cc


@pytest.mark.parametrize("arch, cc", [("sm_90", (9, 0)), ("sm_86", (8, 6)), ("9.0", (9, 0)), ("sm_100f", (10, 0))])
def test_cc_of_arch_reads_any_spelling(arch, cc):
    assert device.cc_of_arch(arch) == cc


@pytest.mark.parametrize("arch, per_block, per_sm", [
    ("sm_70", 96, 96), ("sm_75", 64, 64), ("sm_80", 163, 164), ("sm_86", 99, 100), ("sm_89", 99, 100),
    ("sm_90a", 227, 228), ("sm_120", 99, 100),
    ("sm_103a", 227, 228),  # not in the table: the nearest compute capability below it (10.0)
])
def test_shared_memory_of_an_arch(arch, per_block, per_sm):
    assert device.smem_limits_of_arch(arch) == (per_block * KiB, per_sm * KiB)


def test_shared_memory_of_an_arch_below_the_table_is_a_device_error():
    with pytest.raises(DeviceError, match=r"no shared-memory figures for sm_60; known compute capabilities: 7.0, 7.5"):
        device.smem_limits_of_arch("sm_60")


# ---------------------------------------------------------------------------------------------
# The table


TABLE = ["V100", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "L40S", "RTX4090"]


def test_the_table_holds_its_devices_in_order():
    assert list(device.KNOWN) == TABLE
    for name, facts in device.KNOWN.items():
        assert facts.name == name and not facts.live and facts.device_id == -1
        assert facts.latency_ns > 0 and facts.latency_source and facts.bandwidth > 0


@pytest.mark.parametrize("name, cc, sms, bandwidth_gbps, per_block_kib", [
    ("V100", (7, 0), 80, 900, 96), ("A100-40GB", (8, 0), 108, 1555, 163), ("H100-SXM", (9, 0), 132, 3350, 227),
    ("H200", (9, 0), 132, 4800, 227), ("L40S", (8, 9), 142, 864, 99),
])
def test_table_figures(name, cc, sms, bandwidth_gbps, per_block_kib):
    d = device.KNOWN[name]
    assert (d.cc, d.sm_count, d.bandwidth, d.smem_per_block_optin) == (cc, sms, bandwidth_gbps * 1e9,
                                                                       per_block_kib * KiB)
    assert d.arch == device.arch_of_cc(cc)
    assert (d.smem_per_block_optin, d.smem_per_sm) == device.smem_limits_of_arch(d.arch)


@pytest.mark.parametrize("name, kib", [("A100-40GB", 16), ("H100-SXM", 32), ("H200", 48)])
def test_latency_comes_from_cccls_bytes_in_flight(name, kib):
    # Little's law backwards: bandwidth x latency / SMs = CCCL's bytes in flight per SM
    d = device.KNOWN[name]
    assert d.bytes_in_flight_per_sm == pytest.approx(kib * KiB)
    assert d.latency_source.startswith(f"CCCL: {kib} KiB per SM")


def test_a_derived_part_keeps_its_source_parts_latency():
    assert device.KNOWN["A100-80GB"].latency_ns == device.KNOWN["A100-40GB"].latency_ns
    assert "on the 40 GB part" in device.KNOWN["A100-80GB"].latency_source
    assert device.KNOWN["V100"].latency_source == "assumed (no CCCL figure)"


def test_reserved_shared_memory_per_block():
    assert device.KNOWN["V100"].reserved_smem_per_block == 0
    assert device.KNOWN["A100-40GB"].reserved_smem_per_block == 1 * KiB
    assert device.KNOWN["H200"].reserved_smem_per_block == 1 * KiB


# ---------------------------------------------------------------------------------------------
# lookup: table names only, exactly (case and spaces aside)


@pytest.mark.parametrize("name, want", [("H200", "H200"), ("h200", "H200"), ("  a100-40gb ", "A100-40GB"),
                                        ("H100-PCIe", "H100-PCIe"), ("rtx4090", "RTX4090")])
def test_lookup_by_table_name(name, want):
    assert device.lookup(name) is device.KNOWN[want]


@pytest.mark.parametrize("name", ["NVIDIA H200", "H20", "H2OO", "A100", "NVIDIA A100-SXM4-80GB", "MI300X", "H100"])
def test_lookup_is_exact(name):
    # a live device's name is not a table name (asynccopy.device.current() matches those itself)
    with pytest.raises(ArgumentError, match=rf"unknown device '{name}'; known: V100, A100-40GB, A100-80GB, "
                                            rf"H100-SXM, H100-PCIe, H200, L40S, RTX4090"):
        device.lookup(name)


def test_lookup_needs_a_string():
    with pytest.raises(ArgumentError, match=r"a device is named by a string, got 9"):
        device.lookup(9)


@pytest.mark.parametrize("live, entry", [
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200"), ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA A100-PCIE-40GB", "A100-40GB"), ("Tesla V100-SXM2-16GB", "V100"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 4090", "RTX4090"),
])
def test_a_live_name_finds_its_table_entry(live, entry):
    assert device._table_entry_for(live) is device.KNOWN[entry]


def test_a_live_device_not_in_the_table_takes_the_h200_figures_and_says_so():
    got = device._table_entry_for("NVIDIA B200")
    assert got.bandwidth == device.KNOWN["H200"].bandwidth and got.latency_ns == device.KNOWN["H200"].latency_ns
    assert got.latency_source == "assumed: H200 figures (device not in the table)"
    assert device.KNOWN["H200"].latency_source == "CCCL: 48 KiB per SM"  # the table itself is untouched


# ---------------------------------------------------------------------------------------------
# DeviceFacts as a dict


def _live(name="NVIDIA H200", **changes):
    return replace(device.KNOWN["H200"], name=name, device_id=0, **changes)


@pytest.mark.parametrize("facts", [device.KNOWN["H200"], device.KNOWN["V100"], _live(), _live(sm_count=114)],
                         ids=["H200", "V100", "live", "live-114-SMs"])
def test_as_dict_and_from_dict_round_trip_through_json(facts):
    data = facts.as_dict()
    assert data["arch"] == facts.arch and data["cc"] == facts.cc
    back = DeviceFacts.from_dict(json.loads(json.dumps(data)))  # cc comes back as a list
    assert back == facts and back.cc == facts.cc and isinstance(back.cc, tuple) and back.live == facts.live


def test_an_older_file_without_memory_figures_takes_the_table_entry_of_its_name():
    data = _live(name="NVIDIA A100-SXM4-80GB", sm_count=108).as_dict()
    for key in ("bandwidth", "latency_ns", "latency_source"):
        del data[key]
    got = DeviceFacts.from_dict(data)
    a100 = device.KNOWN["A100-80GB"]
    assert (got.bandwidth, got.latency_ns, got.latency_source) == (a100.bandwidth, a100.latency_ns, a100.latency_source)
    assert got.name == "NVIDIA A100-SXM4-80GB" and got.sm_count == 108 and got.device_id == 0


@pytest.mark.parametrize("broken", [{"sm_count": None}, {"cc": None}, {"unexpected": 1}])
def test_from_dict_names_a_bad_description(broken):
    data = device.KNOWN["H200"].as_dict()
    for key, value in broken.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    if "unexpected" in broken:  # unknown keys (a later version's) are ignored
        assert DeviceFacts.from_dict(data) == device.KNOWN["H200"]
        return
    with pytest.raises(ArgumentError, match=r"not a device description: "):
        DeviceFacts.from_dict(data)


# ---------------------------------------------------------------------------------------------
# Checks


def test_require_names_the_device_and_both_compute_capabilities():
    a100 = device.KNOWN["A100-80GB"]
    with pytest.raises(DeviceError, match=r"^TMA needs compute capability 9.0 or newer; A100-80GB is 8.0$"):
        device.require((9, 0), "TMA", a100)
    assert device.require((8, 0), "LDGSTS", a100) is a100


def test_no_gpu_is_one_line(monkeypatch):
    import cuda.core

    class NoDevice:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected\nsecond line")

    monkeypatch.setattr(cuda.core, "Device", NoDevice)
    device.current.cache_clear()
    try:
        with pytest.raises(DeviceError) as info:
            device.current()
        assert str(info.value) == "no CUDA GPU available (CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected)"
        assert not device.has_gpu()
    finally:
        device.current.cache_clear()


def test_check_driver_returns_the_values_or_names_the_call():
    from cuda.bindings import driver

    assert device.check_driver((driver.CUresult.CUDA_SUCCESS, 7, "x"), "cuThing") == (7, "x")
    with pytest.raises(DeviceError, match=r"^cuThing\(3\) failed: CUDA_ERROR_INVALID_VALUE$"):
        device.check_driver((driver.CUresult.CUDA_ERROR_INVALID_VALUE, None), "cuThing(3)")


def test_driver_version_is_a_version_or_says_why_not():
    import re

    v = device.driver_version()
    assert re.fullmatch(r"\d+\.\d+|unavailable \(.+\)", v), v
