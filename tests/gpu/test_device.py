"""Device facts of the live GPU (asynccopy.device)."""

import re

import pytest

import asynccopy
from asynccopy import device
from asynccopy.device import DeviceFacts
from asynccopy.errors import ArgumentError, DeviceError


def test_facts_are_live(facts):
    assert facts.live and facts.device_id >= 0 and facts.sm_count > 0 and facts.l2_bytes > 0
    assert facts.smem_per_block_optin >= 48 * 1024 and facts.smem_per_sm >= facts.smem_per_block_optin
    assert facts.arch == device.arch_of_cc(facts.cc) and device.cc_of_arch(facts.arch) == facts.cc
    assert facts.max_threads_per_sm >= 1024 and facts.regs_per_sm >= 32768 and facts.max_blocks_per_sm >= 16
    assert asynccopy.DeviceFacts is DeviceFacts and isinstance(facts, DeviceFacts)


def test_the_memory_figures_are_the_table_entry_of_its_name(facts):
    entry = device._table_entry_for(facts.name)
    assert (facts.bandwidth, facts.latency_ns, facts.latency_source) == (entry.bandwidth, entry.latency_ns,
                                                                         entry.latency_source)
    if entry.name in device.KNOWN and entry is device.KNOWN[entry.name]:  # a GPU the table knows
        assert (facts.cc, facts.sm_count) == (entry.cc, entry.sm_count)


def test_the_table_asks_for_a_table_name_not_the_live_one(facts):
    if facts.name.strip().upper() in (n.upper() for n in device.KNOWN):
        pytest.skip(f"{facts.name} is spelled as its table entry")
    with pytest.raises(ArgumentError, match=r"unknown device"):
        device.lookup(facts.name)


def test_facts_are_read_once_and_round_trip(facts):
    assert device.current() is facts and device.has_gpu()
    assert DeviceFacts.from_dict(facts.as_dict()) == facts


def test_shared_memory_matches_the_arch_table(facts):
    per_block, per_sm = device.smem_limits_of_arch(facts.arch)
    assert (facts.smem_per_block_optin, facts.smem_per_sm) == (per_block, per_sm)


def test_too_old_device_is_named(facts):
    with pytest.raises(DeviceError, match=rf"^TMA needs compute capability 99.0 or newer; {re.escape(facts.name)} is "
                                          rf"{facts.cc[0]}.{facts.cc[1]}$"):
        device.require((99, 0), "TMA")
    assert device.require(facts.cc, "this device") is facts


def test_driver_version(facts):
    assert re.fullmatch(r"\d+\.\d+", device.driver_version())
