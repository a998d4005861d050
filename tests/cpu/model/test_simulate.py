"""The pipeline simulator (asynccopy.model.simulate) against timelines worked out by hand, and the kernel
costs it takes (KernelCosts)."""

import math

import pytest

from asynccopy.errors import ArgumentError
from asynccopy.model import KernelCosts, Simulation
from asynccopy.model import simulate as sim_mod  # the module: asynccopy.model does not re-export the function


def _sim(stages, tiles=10, costs=None, **kw):
    # 100 B tiles at 10 B/ns: 10 ns on the SM's share of the bandwidth; no stores
    args = dict(tile_bytes=100, compute_ns=50, latency_ns=100, bandwidth_per_sm=10.0, out_bytes=0)
    args.update(kw)
    if costs is not None:
        args["costs"] = costs
    return sim_mod.simulate(stages, tiles, **args)


def _events(s):
    return [(e.issued, e.ready, e.compute_start, e.compute_end) for e in sorted(s.events, key=lambda e: e.tile)]


def test_one_stage_is_latency_plus_compute():
    s = _sim(1)
    assert s.total_ns == pytest.approx(150 * 10)  # issue, 100 ns latency, 50 ns compute, repeat
    assert s.overlap == 0.0
    assert _events(s)[:2] == [(0, 100, 100, 150), (150, 250, 250, 300)]


def test_two_stages_with_latency_above_compute_are_latency_bound():
    s = _sim(2)
    assert s.total_ns == pytest.approx(100 * 10 + 50)  # one tile in flight: a new one every 100 ns
    assert s.overlap == pytest.approx(0.9)  # every compute but the last has the next copy in flight


def test_three_stages_hide_the_latency():
    s = _sim(3)
    assert s.total_ns == pytest.approx(100 + 50 * 10)  # after the first tile, compute-bound


def test_bandwidth_bound_when_bytes_dominate():
    s = _sim(8, tiles=50, latency_ns=0, bandwidth_per_sm=1.0, compute_ns=10, out_bytes=100)
    assert s.ns_per_tile == pytest.approx(200, rel=0.05)  # 100 bytes in + 100 out per tile at 1 B/ns


def test_blocks_share_the_bandwidth():
    one = _sim(4, tiles=40, latency_ns=0, bandwidth_per_sm=1.0, compute_ns=1, out_bytes=0)
    two = _sim(4, tiles=40, latency_ns=0, bandwidth_per_sm=1.0, compute_ns=1, out_bytes=0, blocks=2)
    assert two.total_ns == pytest.approx(2 * one.total_ns, rel=0.05)
    assert two.blocks == 2 and len(two.events) == 80


# Three stages, 20 tiles, no costs, worked out by hand: tiles 0 and 1 leave at 0 and land at 100 (latency);
# from then on tile k is issued as tile k - 2's compute starts (50 k) and lands a latency later (100 + 50 k),
# just as tile k - 1's compute ends: every compute starts at 100 + 50 k, and the last ends at 100 + 50 x 20.
HAND = [(0, 100, 100, 150), (0, 100, 150, 200)] + [(50 * k, 100 + 50 * k, 100 + 50 * k, 150 + 50 * k)
                                                   for k in range(2, 20)]


@pytest.mark.parametrize("costs", [None, KernelCosts(), KernelCosts(0.0, 0.0, False, 0.0, False, None),
                                   KernelCosts(solo_issue_ns=0.0), sim_mod.NO_COSTS], ids=str)
def test_no_costs_leave_the_model_as_it_was(costs):
    s = _sim(3, tiles=20, costs=costs)
    assert _events(s) == pytest.approx(HAND)
    assert s.total_ns == pytest.approx(1100) and s.ns_per_tile == pytest.approx(55)


def test_issuing_threads_pay_the_issue_before_their_compute():
    s = sim_mod.simulate(2, 3, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                         costs=KernelCosts(issue_ns=10))
    # tile 0 leaves as its issue starts (0) and lands at 50; each compute but the last is preceded by
    # 10 ns of issuing the next copy, which leaves as that issue starts
    got = [v for e in s.events for v in (e.issued, e.ready, e.compute_start, e.compute_end)]
    assert got == pytest.approx([0, 50, 60, 160, 50, 100, 170, 270, 160, 210, 270, 370], abs=1e-6)


def test_a_copy_is_not_ready_before_its_issue_ends():
    s = sim_mod.simulate(2, 2, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                         costs=KernelCosts(issue_ns=80))
    assert s.events[0].ready == pytest.approx(80)  # 80 ns of issuing outlast the 50 ns of latency


def test_the_barrier_cost_sits_between_two_computes():
    s = sim_mod.simulate(3, 4, tile_bytes=1, compute_ns=100, latency_ns=10, bandwidth_per_sm=1e9, out_bytes=0,
                         costs=KernelCosts(barrier_ns=7))
    starts = [e.compute_start for e in sorted(s.events, key=lambda e: e.tile)]
    # the first copy lands at 10 with the warps already waiting for it (the barrier is inside its latency);
    # then the data is there first, and every compute follows the previous one by 100 + 7
    assert starts == pytest.approx([10, 117, 224, 331])


def test_a_late_copy_holds_the_barrier_of_a_multi_stage_loop():
    """The barrier's wait for the slowest warp is spent under a copy that lands after the warps reached their wait:
    a two-stage loop whose copy takes 500 ns and compute 100 runs at the latency, not the latency plus the barrier;
    one stage synchronizes before it issues and keeps it on every tile's path."""
    two = sim_mod.simulate(2, 20, tile_bytes=1, compute_ns=100, latency_ns=500, bandwidth_per_sm=1e9, out_bytes=0,
                           costs=KernelCosts(barrier_ns=80))
    starts = [e.compute_start for e in sorted(two.events, key=lambda e: e.tile)]
    assert starts[-1] - starts[-2] == pytest.approx(500)
    fast = sim_mod.simulate(2, 20, tile_bytes=1, compute_ns=1000, latency_ns=500, bandwidth_per_sm=1e9, out_bytes=0,
                            costs=KernelCosts(barrier_ns=80))
    starts = [e.compute_start for e in sorted(fast.events, key=lambda e: e.tile)]
    assert starts[-1] - starts[-2] == pytest.approx(1080)  # the data there first: the barrier follows the compute
    one = sim_mod.simulate(1, 20, tile_bytes=1, compute_ns=100, latency_ns=500, bandwidth_per_sm=1e9, out_bytes=0,
                           costs=KernelCosts(barrier_ns=80), memory=_Fixed(500))
    starts = [e.compute_start for e in sorted(one.events, key=lambda e: e.tile)]
    assert starts[-1] - starts[-2] == pytest.approx(680)  # compute, latency, barrier: one after the other


class _Fixed:
    """A memory curve with one latency (one stage keeps its barrier only where the latency does not hold it)."""

    def __init__(self, latency_ns):
        self.latency_ns = latency_ns

    def latency_at(self, _bytes):
        return self.latency_ns


def test_a_producer_warp_refills_a_buffer_after_its_release_and_the_handoff():
    s = sim_mod.simulate(2, 4, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                         costs=KernelCosts(issue_ns=10, producer=True, handoff_ns=5))
    # both buffers filled one copy after the other (0, 10); tile 2 leaves at tile 0's release (150) + 5
    got = [v for e in s.events for v in (e.issued, e.compute_start, e.compute_end)]
    assert got == pytest.approx([0, 50, 150, 10, 150, 250, 155, 250, 350, 255, 350, 450], abs=1e-6)
    assert s.total_ns == pytest.approx(450)


def test_a_slow_producer_sets_the_pace():
    s = sim_mod.simulate(4, 40, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                         costs=KernelCosts(issue_ns=300, producer=True))
    assert s.ns_per_tile == pytest.approx(300, rel=0.02)


def test_issue_first_refills_the_buffer_just_computed_before_waiting():
    # cuda::pipeline's order: both buffers filled first (0, 10), tile 2 issued into tile 0's buffer as
    # soon as tile 0 is computed (150), its 10 ns of issue before the wait for tile 1
    s = sim_mod.simulate(2, 4, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                         costs=KernelCosts(issue_ns=10, issue_first=True))
    got = [v for e in s.events for v in (e.issued, e.compute_start, e.compute_end)]
    assert got == pytest.approx([0, 50, 150, 10, 160, 260, 150, 270, 370, 260, 370, 470], abs=1e-6)


def test_one_stage_is_the_plain_loop_whose_costs_the_latency_holds():
    plain = _sim(1, tiles=6)
    assert plain.total_ns == pytest.approx(6 * 150)
    assert _sim(1, tiles=6, costs=KernelCosts(issue_ns=40, barrier_ns=30)).total_ns == pytest.approx(6 * 150)
    # a producer's issue and handoff are not: 150 ns of issuing outlast the 100 ns of latency
    assert _sim(1, tiles=6, costs=KernelCosts(issue_ns=150, producer=True)).total_ns > plain.total_ns
    assert _sim(1, tiles=6, costs=KernelCosts(handoff_ns=20, producer=True)).total_ns > plain.total_ns


def test_issuing_threads_compute_tiles_in_order():
    # many stages, issue cost above the latency: the first compute waits for every prologue issue
    s = sim_mod.simulate(8, 12, tile_bytes=4096, compute_ns=50, latency_ns=100, bandwidth_per_sm=20,
                         costs=KernelCosts(issue_ns=100))
    starts = [e.compute_start for e in sorted(s.events, key=lambda e: e.tile)]
    assert starts == sorted(starts) and starts[0] >= 7 * 100


def test_stores_can_end_the_run():
    # a store takes the bandwidth after the last compute: the run ends when the last one is done
    s = _sim(1, tiles=1, out_bytes=1000)  # 1000 B at 10 B/ns = 100 ns after the compute's end (150)
    assert s.events[0].compute_end == 150 and s.total_ns == pytest.approx(250)


def test_a_store_does_not_hold_the_next_copy_back():
    # One stage, 500 B tiles (50 ns at 10 B/ns) and 1000 B of results (100 ns): tile k's results are stored at its
    # compute's end, as tile k + 1's copy leaves. The copy is served first (a posted write waits in the L2 for the
    # bandwidth the reads leave), so it lands its 100 ns latency later; behind the store it would take 150.
    s = _sim(1, tiles=4, tile_bytes=500, out_bytes=1000)
    assert [e.ready - e.issued for e in sorted(s.events, key=lambda e: e.tile)] == [100, 100, 100, 100]
    assert s.total_ns == pytest.approx(4 * 150 + 100)  # the last store after the last compute


def test_stores_still_take_their_share_of_the_bandwidth():
    # reads first, but the run cannot end before every byte read and written went through the bandwidth
    s = _sim(8, tiles=50, latency_ns=0, bandwidth_per_sm=1.0, compute_ns=10, out_bytes=300)
    assert s.total_ns >= 50 * 400 and s.ns_per_tile == pytest.approx(400, rel=0.02)


# ---------------------------------------------------------------------------------------------
# KernelCosts


def test_costs_at_one_stage():
    c = KernelCosts(issue_ns=40, barrier_ns=30)
    assert c.at_stages(2) is c and c.at_stages(8) is c
    assert c.at_stages(1) == KernelCosts(issue_ns=0, barrier_ns=0)
    p = KernelCosts(issue_ns=300, barrier_ns=30, producer=True, handoff_ns=20, solo_issue_ns=100)
    assert p.at_stages(1) == KernelCosts(issue_ns=100, barrier_ns=0, producer=True, handoff_ns=20, solo_issue_ns=100)
    assert KernelCosts(issue_ns=300, producer=True).at_stages(1).issue_ns == 300  # no solo time: the issue time


@pytest.mark.parametrize("kwargs, message", [
    ({"issue_ns": -5}, r"issue_ns must be a finite number of ns >= 0, got -5"),
    ({"barrier_ns": math.inf}, r"barrier_ns must be a finite number of ns >= 0, got inf"),
    ({"handoff_ns": math.nan, "producer": True}, r"handoff_ns must be a finite number of ns >= 0, got nan"),
    ({"solo_issue_ns": True}, r"solo_issue_ns must be a finite number of ns >= 0, got True"),
    ({"issue_ns": "5"}, r"issue_ns must be a finite number of ns >= 0, got '5'"),
    ({"producer": True, "issue_first": True}, r"issue_first is the computing threads' order: a producer warp already"),
    ({"handoff_ns": 5}, r"handoff_ns is a producer warp's delay from a buffer's release to its refill: set producer"),
])
def test_costs_check_themselves(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        KernelCosts(**kwargs)


@pytest.mark.parametrize("bad, message", [({"stages": 0}, r"stages must be an integer >= 1, got 0"),
                                          ({"tiles": 4.0}, r"tiles must be an integer >= 1, got 4.0"),
                                          ({"blocks": True}, r"blocks must be an integer >= 1, got True"),
                                          ({"bandwidth_per_sm": 0}, r"bandwidth_per_sm must be a finite number > 0, got 0"),
                                          ({"tile_bytes": math.inf}, r"tile_bytes must be a finite number > 0, got inf"),
                                          ({"latency_ns": -1}, r"latency_ns must be a finite number >= 0, got -1"),
                                          ({"compute_ns": None}, r"compute_ns must be a finite number >= 0, got None"),
                                          ({"costs": {"issue_ns": 5}}, r"costs must be a KernelCosts, got dict")])
def test_simulator_rejects_nonsense(bad, message):
    args = dict(stages=2, tiles=4, tile_bytes=10, compute_ns=1, latency_ns=1, bandwidth_per_sm=1.0)
    args.update(bad)
    with pytest.raises(ArgumentError, match=message):
        sim_mod.simulate(args.pop("stages"), args.pop("tiles"), **args)


# ---------------------------------------------------------------------------------------------
# Drawing


def test_timeline_text_has_a_row_per_buffer():
    text = sim_mod.timeline_text(_sim(3), width=40)
    lines = text.splitlines()
    assert lines[0].startswith("3 stage(s), 1 block(s) per SM: 60 ns per tile")
    assert lines[1].startswith("load[0] |") and lines[3].startswith("load[2] |") and lines[4].startswith("compute |")
    assert "█" in lines[1] and "▓" in lines[4] and len(lines) == 6


def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = sim_mod.timeline_png(_sim(2), str(tmp_path / "t.png"))
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("t.png")


def test_png_needs_matplotlib(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ArgumentError, match="drawing a PNG needs matplotlib: pip install matplotlib"):
        sim_mod.timeline_png(_sim(2), str(tmp_path / "t.png"))


def test_the_package_exports_the_types_not_the_function():
    import asynccopy.model as model

    assert model.Simulation is Simulation and model.KernelCosts is KernelCosts
    assert model.simulate is sim_mod  # the attribute is the submodule
