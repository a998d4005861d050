"""The planner, the simulator and the device table against hand-computed cases (no GPU needed)."""

import pytest

from asynccopy import devices, planner, simulate
from asynccopy.errors import ArgumentError


def test_seed_a100_example_cannot_double_buffer():
    # seed 000 §5.2 / §7.3: 128x128 fp32 A and B tiles double-buffered need 256 KiB; an A100 SM has 164 KiB
    p = planner.plan(["A:128x128:f32", "B:128x128:f32"], threads=256, device="A100-40GB", max_stages=4)
    assert p.stage_bytes == 128 * 1024 and p.recommended == 1
    assert p.impossible == ("2 stages need 256 KiB of shared memory; A100-40GB allows 163 KiB per block "
                            "(164 KiB per SM): no double buffering at this tile size")
    half = planner.plan(["A:64x64:f32", "B:64x64:f32"], threads=256, device="A100-40GB", max_stages=4)
    assert half.impossible is None and half.row(2).smem_per_block == 64 * 1024


def test_stage_that_does_not_fit_at_all():
    p = planner.plan(["A:256x256:f32"], threads=256, device="H200")
    assert p.recommended == 0 and p.impossible == "one stage of 256 KiB does not fit: H200 allows 227 KiB per block"


def test_fallback_below_compute_capability_8():
    p = planner.plan(["A:64x64:f32", "B:64x64:f32"], threads=256, device="V100", max_stages=3)
    assert p.recommended == 1 and "no LDGSTS" in p.reasons[0] and "more stages bring nothing" in p.reasons[0]


def test_littles_law_on_the_h200_tile_stream():
    # 16 KiB tiles, one block per SM: the H200 needs 48 KiB in flight per SM -> 3 prefetched tiles -> 4 stages
    p = planner.plan(["tile:4096:f32"], threads=256, device="H200", blocks_per_sm=1, max_stages=8)
    assert p.needed_bytes_per_sm == pytest.approx(48 * 1024)
    assert p.recommended == 4
    assert [r.bytes_in_flight_per_sm // 1024 for r in p.rows[:4]] == [0, 16, 32, 48]
    assert "Little's law" in p.reasons[0]


def test_more_blocks_per_sm_need_fewer_stages():
    p = planner.plan(["tile:4096:f32"], threads=256, device="H200", blocks_per_sm=4, max_stages=8)
    assert p.recommended == 2  # 4 blocks x 1 prefetched tile x 16 KiB = 64 KiB >= 48 KiB


@pytest.mark.parametrize(
    "kwargs, blocks, limiter",
    [
        ({"operands": ["t:4096:f32"], "threads": 256}, 8, "threads"),          # 2048 threads per SM
        ({"operands": ["t:4096:f32"], "threads": 256, "regs_per_thread": 128}, 2, "registers"),  # 128*256 = 32768
        ({"operands": ["t:4096:f32"], "threads": 256, "regs_per_thread": 255}, 1, "registers"),  # rounds up to 256
        ({"operands": ["t:16384:f32"], "threads": 128}, 3, "shared memory"),   # 228 // (64 + 1) KiB
        ({"operands": ["t:256:f32"], "threads": 32}, 32, "blocks"),
    ],
)
def test_occupancy_limiters(kwargs, blocks, limiter):
    p = planner.plan(kwargs.pop("operands"), device="H200", max_stages=1, **kwargs)
    assert (p.row(1).blocks_per_sm, p.row(1).limiter) == (blocks, limiter)


def test_compute_time_picks_the_smallest_sufficient_stage_count():
    # compute-bound: one prefetched tile hides the load
    slow = planner.plan(["tile:4096:f32"], threads=256, device="H200", blocks_per_sm=1, compute_ns=3000, max_stages=6)
    assert slow.recommended == 2 and slow.row(1).ns_per_tile > 1.3 * slow.row(2).ns_per_tile
    # load >> compute: bandwidth needs more tiles in flight
    fast = planner.plan(["tile:4096:f32"], threads=256, device="H200", blocks_per_sm=1, compute_ns=50, max_stages=8)
    assert fast.recommended >= 3
    assert fast.row(fast.recommended).ns_per_tile <= 1.02 * min(r.ns_per_tile for r in fast.rows)
    # load << compute: even the second buffer saves under 5%
    tiny = planner.plan(["tile:64:f32"], threads=32, device="H200", blocks_per_sm=1, compute_ns=100_000, max_stages=4)
    assert tiny.recommended == 1 and "load << compute" in " ".join(tiny.reasons)


def test_memory_bound_keeps_littles_law_in_flight():
    # H200 table figures, 16 KiB tiles, 1 block/SM, compute 600 ns < the ~900 ns a tile's bytes take: memory-bound.
    # The simulator alone would stop at 3 stages (its bandwidth is a hard ceiling); measured on the H200 (run of
    # 2026-11-29) 3 stages were 7% slower than 4+ at this compute time. Little's law asks for 48 KiB -> 4 stages.
    p = planner.plan(["tile:4096:f32"], threads=256, device="H200", blocks_per_sm=1, compute_ns=600, max_stages=8)
    assert p.row(3).ns_per_tile <= 1.02 * min(r.ns_per_tile for r in p.rows)  # what the simulator alone would pick
    assert p.recommended == 4
    assert "memory-bound" in " ".join(p.reasons) and "Little's law" in " ".join(p.reasons)
    # compute-bound: the rule stays out of the way
    assert planner.plan(["tile:4096:f32"], threads=256, device="H200", blocks_per_sm=1, compute_ns=1600,
                        max_stages=8).recommended == 2


def test_operand_parsing():
    assert planner.Operand.parse("A:128x32:bf16") == planner.Operand("A", (128, 32), "bfloat16")
    assert planner.Operand.parse("64x64:f32").nbytes == 64 * 64 * 4
    with pytest.raises(ArgumentError, match=r"operand must look like NAME:128x32:bf16, got 'A:128-32:f32'"):
        planner.Operand.parse("A:128-32:f32")
    with pytest.raises(ArgumentError, match=r"operand A: unknown dtype 'f7'"):
        planner.Operand.parse("A:8x8:f7")


def test_device_table():
    assert devices.lookup("NVIDIA H200").name == "H200"
    assert devices.lookup("NVIDIA H100 PCIe").name == "H100-PCIe"
    assert devices.lookup("NVIDIA A100-SXM4-80GB").name == "A100-80GB"
    assert devices.lookup("a100-40gb").name == "A100-40GB"
    for name in ("V100", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "L40S", "RTX4090"):
        d = devices.KNOWN[name]
        assert d.latency_ns > 0 and d.latency_source
    assert devices.KNOWN["A100-40GB"].bytes_in_flight_per_sm == pytest.approx(16 * 1024)
    with pytest.raises(ArgumentError, match=r"unknown device 'MI300X'; known: V100, A100-40GB"):
        devices.lookup("MI300X")


# ---------------------------------------------------------------------------------------------
# The simulator

def _sim(stages, tiles=10, **kw):
    args = dict(tile_bytes=100, compute_ns=50, latency_ns=100, bandwidth_per_sm=10.0, out_bytes=0)
    args.update(kw)
    return simulate.simulate(stages, tiles, **args)


def test_one_stage_is_latency_plus_compute():
    s = _sim(1)
    assert s.total_ns == pytest.approx(150 * 10)  # issue, 100 ns latency, 50 ns compute, repeat
    assert s.overlap == 0.0


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


def test_issuing_threads_pay_the_issue_before_their_compute():
    s = simulate.simulate(2, 3, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                          issue_ns=10)
    # tile 0 leaves as its issue starts (0) and lands at 50; each compute but the last is preceded by
    # 10 ns of issuing the next copy, which leaves as that issue starts
    got = [v for e in s.events for v in (e.issued, e.ready, e.compute_start, e.compute_end)]
    assert got == pytest.approx([0, 50, 60, 160, 50, 100, 170, 270, 160, 210, 270, 370], abs=1e-6)


def test_a_copy_is_not_ready_before_its_issue_ends():
    s = simulate.simulate(2, 2, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                          issue_ns=80)
    assert s.events[0].ready == pytest.approx(80)  # 80 ns of issuing outlast the 50 ns of latency


def test_a_producer_warp_refills_a_buffer_after_its_release_and_the_handoff():
    s = simulate.simulate(2, 4, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                          issue_ns=10, producer=True, handoff_ns=5)
    # both buffers filled one copy after the other (0, 10); tile 2 leaves at tile 0's release (150) + 5
    got = [v for e in s.events for v in (e.issued, e.compute_start, e.compute_end)]
    assert got == pytest.approx([0, 50, 150, 10, 150, 250, 155, 250, 350, 255, 350, 450], abs=1e-6)
    assert s.total_ns == pytest.approx(450)


def test_a_slow_producer_sets_the_pace():
    s = simulate.simulate(4, 40, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                          issue_ns=300, producer=True)
    assert s.ns_per_tile == pytest.approx(300, rel=0.02)


def test_issue_first_refills_the_buffer_just_computed_before_waiting():
    # cuda::pipeline's order: both buffers filled first (0, 10), tile 2 issued into tile 0's buffer as
    # soon as tile 0 is computed (150), its 10 ns of issue before the wait for tile 1
    s = simulate.simulate(2, 4, tile_bytes=1, compute_ns=100, latency_ns=50, bandwidth_per_sm=1e9, out_bytes=0,
                          issue_ns=10, issue_first=True)
    got = [v for e in s.events for v in (e.issued, e.compute_start, e.compute_end)]
    assert got == pytest.approx([0, 50, 150, 10, 160, 260, 150, 270, 370, 260, 370, 470], abs=1e-6)
    with pytest.raises(ArgumentError, match="issue_first is the computing threads' order"):
        simulate.simulate(2, 4, tile_bytes=1, compute_ns=1, latency_ns=1, bandwidth_per_sm=1.0, producer=True,
                          issue_first=True)


def test_one_stage_is_the_plain_loop_whose_costs_the_latency_holds():
    plain = _sim(1, tiles=6)
    assert _sim(1, tiles=6, issue_ns=40, barrier_ns=30).total_ns == plain.total_ns
    # a producer's issue and handoff are not: 150 ns of issuing outlast the 100 ns of latency
    assert _sim(1, tiles=6, issue_ns=150, producer=True).total_ns > plain.total_ns
    assert _sim(1, tiles=6, handoff_ns=20, producer=True).total_ns > plain.total_ns


def test_no_costs_leave_the_model_as_it_was():
    plain = _sim(3, tiles=20)
    assert _sim(3, tiles=20, issue_ns=0, barrier_ns=0).total_ns == plain.total_ns


def test_planner_counts_the_kernels_own_costs():
    # 400 ns of issuing per tile by the computing threads: busy 900 ns per tile, not 500
    p = planner.plan(["t:4096:f32"], threads=256, device="H200", compute_ns=500, blocks_per_sm=1, max_stages=6,
                     issue_ns=400)
    assert p.busy_ns == 900
    assert p.row(4).ns_per_tile > planner.plan(["t:4096:f32"], threads=256, device="H200", compute_ns=500,
                                               blocks_per_sm=1, max_stages=6).row(4).ns_per_tile


def test_timeline_text_has_a_row_per_buffer():
    text = simulate.timeline_text(_sim(3), width=40)
    lines = text.splitlines()
    assert lines[1].startswith("load[0] |") and lines[3].startswith("load[2] |") and lines[4].startswith("compute |")
    assert "█" in lines[1] and "▓" in lines[4]


def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = simulate.timeline_png(_sim(2), str(tmp_path / "t.png"))
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("t.png")


@pytest.mark.parametrize("bad, message", [({"stages": 0}, r"stages must be an integer >= 1, got 0"),
                                          ({"tiles": 4.0}, r"tiles must be an integer >= 1, got 4.0"),
                                          ({"bandwidth_per_sm": 0}, r"bandwidth_per_sm must be > 0, got 0"),
                                          ({"issue_ns": -5}, r"issue_ns must be >= 0, got -5")])
def test_simulator_rejects_nonsense(bad, message):
    args = dict(stages=2, tiles=4, tile_bytes=10, compute_ns=1, latency_ns=1, bandwidth_per_sm=1.0)
    args.update(bad)
    with pytest.raises(ArgumentError, match=message):
        simulate.simulate(args.pop("stages"), args.pop("tiles"), **args)


def test_tile_stream_asks_the_planner_when_no_stage_count_is_given():
    from asynccopy import stream
    from asynccopy.device import DeviceFacts

    h200 = DeviceFacts("NVIDIA H200", (9, 0), "sm_90a", 132, 227 * 1024, 228 * 1024, 60 << 20, 65536, 2048, 32)
    cfg = stream.StreamConfig.make("ldgsts")
    assert stream.planned_stages(cfg, h200, blocks_per_sm=1) == 4
    assert stream.planned_stages(cfg, h200, blocks_per_sm=4) == 2
    big = stream.StreamConfig.make("ldgsts", tile=16384, threads=512)
    assert stream.planned_stages(big, h200, blocks_per_sm=1) == 2  # one 64 KiB tile in flight covers 48 KiB


def test_issuing_threads_compute_tiles_in_order():
    # many stages, issue cost above the latency: the first compute waits for every prologue issue
    s = simulate.simulate(8, 12, tile_bytes=4096, compute_ns=50, latency_ns=100, bandwidth_per_sm=20, issue_ns=100)
    starts = [e.compute_start for e in sorted(s.events, key=lambda e: e.tile)]
    assert starts == sorted(starts) and starts[0] >= 7 * 100


def test_plan_needs_an_operand():
    with pytest.raises(ArgumentError, match="plan needs at least one operand tile"):
        planner.plan([], threads=256, device="H200")


def test_png_needs_matplotlib(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ArgumentError, match="drawing a PNG needs matplotlib: pip install matplotlib"):
        simulate.timeline_png(_sim(2), str(tmp_path / "t.png"))


def test_near_the_bandwidth_the_planner_keeps_littles_law_in_flight():
    # H200 table: a 16 KiB tile read and written takes 901 ns of an SM's share of 4.8 TB/s; with 946 ns
    # of work the model calls 3 stages enough, but the memory system runs at 95% of its share
    p = planner.plan(["t:4096:f32"], threads=256, device="H200", compute_ns=946, blocks_per_sm=1, max_stages=8)
    assert p.recommended == 4 and p.row(4).coverage >= 1.0 > p.row(3).coverage
    assert "memory-bound or near it" in p.reasons[0]
    far = planner.plan(["t:4096:f32"], threads=256, device="H200", compute_ns=3000, blocks_per_sm=1, max_stages=8)
    assert far.recommended == 2 and not any("near it" in r for r in far.reasons)


def test_two_stages_need_the_refill_to_land_within_one_tiles_work():
    kw = dict(threads=288, device="H200", compute_ns=3000, blocks_per_sm=1, max_stages=8, producer=True)
    fast = planner.plan(["t:4096:f32"], issue_ns=200, handoff_ns=100, **kw)
    assert fast.recommended == 2 and fast.refill_ns == pytest.approx(fast.device.latency_ns + 300)
    # a producer that takes 1500 ns to issue a tile: release + 300 + 1500 + the latency > 3000 ns of work
    slow = planner.plan(["t:4096:f32"], issue_ns=1500, handoff_ns=300, **kw)
    assert slow.busy_ns < slow.refill_ns and slow.recommended == 3
    assert slow.reasons[0].startswith("2 stages leave no slack")


def test_one_stage_takes_the_producers_issue_time_alone():
    kw = dict(threads=288, device="H200", compute_ns=3000, blocks_per_sm=1, max_stages=4, producer=True)
    busy = planner.plan(["t:4096:f32"], issue_ns=2500, **kw)
    solo = planner.plan(["t:4096:f32"], issue_ns=2500, solo_issue_ns=200, **kw)
    assert solo.row(1).ns_per_tile < busy.row(1).ns_per_tile and solo.row(2).ns_per_tile == busy.row(2).ns_per_tile
    with pytest.raises(ArgumentError, match="issue_first is the computing threads' order"):
        planner.plan(["t:4096:f32"], threads=288, device="H200", producer=True, issue_first=True)
