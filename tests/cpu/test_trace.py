"""Trace records decoded on the CPU (synthetic), and the trace switch in the kernels' SASS."""

import re
from dataclasses import replace

import numpy as np
import pytest

from asynccopy import device, mechanism, stream, trace
from asynccopy.bench import trace_cost
from asynccopy.errors import ArgumentError, DeviceError
from asynccopy.model.simulate import TileEvents


def _record(raw, block, gt0, c0, gt1, c1, events):
    base = block * trace.STRIDE
    raw[base:base + 4] = [gt0, c0, gt1, c1]
    for (tile, event), tick in events.items():
        raw[base + trace.HEADER + tile * len(trace.EVENTS) + trace.EVENTS.index(event)] = tick


def test_decode_converts_ticks_to_nanoseconds_on_one_axis():
    raw = np.zeros(trace.buffer_words(2), dtype=np.uint64)
    # block 0: 2 ticks per ns (1000 ns over 2000 ticks), starting at globaltimer 5000
    _record(raw, 0, 5000, 100, 6000, 2100, {(0, "issued"): 100, (0, "ready"): 300, (0, "compute_start"): 310,
                                            (0, "compute_end"): 500, (0, "released"): 520})
    # block 1 starts 100 ns later, 1 tick per ns; tile 1 lacks compute times: left out
    _record(raw, 1, 5100, 0, 5600, 500, {(0, "issued"): 0, (0, "ready"): 40, (0, "compute_start"): 40,
                                          (0, "compute_end"): 90, (1, "issued"): 50})
    b0, b1 = trace.decode(raw, 2)
    t = b0.tiles[0]
    assert (t.issued, t.ready, t.compute_start, t.compute_end) == (0.0, 100.0, 105.0, 200.0)
    assert b0.released == {0: 210.0} and b0.ns_per_tick == 0.5
    assert [x.tile for x in b1.tiles] == [0] and b1.tiles[0].ready == 140.0


def test_decode_refuses_an_empty_trace():
    with pytest.raises(ArgumentError, match=r"the trace is empty: was the kernel built with trace=True"):
        trace.decode(np.zeros(trace.buffer_words(3), dtype=np.uint64), 3)
    with pytest.raises(ArgumentError, match=r"a trace of 3 blocks has 972 words, got 10"):
        trace.decode(np.zeros(10, dtype=np.uint64), 3)


def _tiles(spans):
    return [TileEvents(0, k, *s) for k, s in enumerate(spans)]


def test_overlap_of_the_next_copy_with_a_compute():
    pipelined = _tiles([(0, 10, 10, 30), (5, 32, 32, 50), (31, 52, 52, 70)])  # tile 1 issued during compute 0
    assert trace.overlapping(pipelined) == [0, 1]
    serial = _tiles([(0, 10, 10, 30), (31, 40, 40, 60), (61, 70, 70, 90)])  # issued after each compute
    assert trace.overlapping(serial) == []


def test_as_simulation_starts_at_zero():
    block = trace.BlockTrace(0, _tiles([(100, 110, 110, 130), (120, 132, 132, 150)]), {}, 1.0)
    sim = trace.as_simulation(block, 2)
    assert [(e.issued, e.ready, e.compute_start, e.compute_end) for e in sim.events] == [(0, 10, 10, 30),
                                                                                         (20, 32, 32, 50)]
    assert (sim.stages, sim.blocks, sim.tiles, sim.total_ns) == (2, 1, 2, 50)
    assert block.tiles[0].issued == 100  # the block's own trace is left as it was


@pytest.mark.parametrize("name", list(mechanism.MECHANISMS))  # every one can be traced (ws_* once could not)
def test_trace_switch_adds_clock_reads_only_when_on(name):
    cfg = stream.StreamConfig.make(name)
    off = cfg.compile("sm_90a").sass()
    on = replace(cfg, trace=True).compile("sm_90a").sass()
    assert not re.search(r"SR_CLOCKLO|SR_GLOBALTIMER", off)
    assert "SR_CLOCKLO" in on and "SR_GLOBALTIMER" in on


@pytest.mark.parametrize("args, kwargs, message", [
    (("ldgsts",), {"producers": 2}, r"mechanism 'ldgsts' takes no producers option"),
    (("ldgsts", 2), {"intensity": -1}, r"intensity must be in \[0, 2\^31\), got -1"),
    (("ldgsts", 2), {"blocks_per_sm": 0}, r"blocks_per_sm must be >= 1, got 0"),
    (("sync", 2), {}, r"mechanism 'sync' has exactly 1 stage\(s\); got stages=2"),
])
def test_a_traced_run_checks_its_arguments_before_any_device_use(args, kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        trace.run(*args, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"rounds": 0}, r"rounds must be"), ({"reps": 0}, r"reps must be"), ({"intensity": -1}, r"intensity must be"),
])
def test_the_traces_cost_checks_its_arguments_before_any_device_use(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        trace_cost.cost_per_tile("ldgsts", 2, **kwargs)


def test_a_traced_run_of_a_newer_mechanism_names_the_device(monkeypatch):
    monkeypatch.setattr(device, "current", lambda device_id=None: replace(device.KNOWN["A100-80GB"], device_id=0))
    with pytest.raises(DeviceError, match=r"mechanism 'tma_2d' needs compute capability 9.0 or newer; "
                                                 r"A100-80GB is 8.0"):
        trace.run("tma_2d", 2)
