"""The planner (asynccopy.model.planner) against hand-computed cases (no GPU needed)."""

import pytest

from asynccopy import device
from asynccopy.errors import ArgumentError
from asynccopy.model import KernelCosts, Operand, Plan, planner
from asynccopy.model.memory import MemoryCurve


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


def test_registers_may_differ_by_stage_count():
    # a kernel's builds for different stage counts take different registers (H200, tile 8192 x 256 threads:
    # ldgsts vec16 192 at 3 stages, 230 at 2 and 4; vec4 128 at 2-3): each row holds the blocks its own build
    # allows, and a stage count without a figure those the shared memory allows
    p = planner.plan(["t:8192:f32"], threads=256, device="H200", max_stages=3, blocks_per_sm=2,
                     regs_per_thread={2: 128, 3: 236})
    assert [(r.blocks_per_sm, r.limiter) for r in p.rows] == [(2, "requested"), (2, "requested"), (1, "registers")]
    with pytest.raises(ArgumentError, match="regs_per_thread"):
        planner.plan(["t:8192:f32"], threads=256, device="H200", regs_per_thread={2: 300})
    with pytest.raises(ArgumentError, match="a stage count of regs_per_thread"):
        planner.plan(["t:8192:f32"], threads=256, device="H200", regs_per_thread={0: 128})


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


def test_memory_bound_blocks_taking_turns_do_not_make_one_buffer_enough():
    # 2 blocks per SM, 32 KiB tiles, little compute: the simulator puts 1 stage at the best (one block loads
    # while the other computes), but the tile's bytes take longer than its work on the SM's share of the
    # bandwidth; on the H200 (2026-12-01, bench --plan --tile 8192 --blocks-per-sm 2) 1 stage was 10-14% slower
    # than 4 there, so the Little's-law rule decides, not the one-buffer shortcut.
    p = planner.plan(["tile:8192:f32"], threads=256, device="H200", blocks_per_sm=2, compute_ns=200, max_stages=8,
                     memory=None)
    assert p.row(1).ns_per_tile <= 1.05 * min(r.ns_per_tile for r in p.rows if r.fits)  # the shortcut's condition holds
    assert p.recommended >= 3 and "memory-bound" in " ".join(p.reasons)
    assert "load << compute" not in " ".join(p.reasons)
    # compute-bound at 2 blocks: one buffer each still suffices where a second saves under 5%
    slow = planner.plan(["tile:64:f32"], threads=32, device="H200", blocks_per_sm=2, compute_ns=100_000, max_stages=4,
                        memory=None)
    assert slow.recommended == 1 and "load << compute" in " ".join(slow.reasons)


def test_operand_parsing():
    assert planner.Operand.parse("A:128x32:bf16") == Operand("A", (128, 32), "bfloat16")
    assert planner.Operand.parse("64x64:f32") == Operand("tile", (64, 64), "float32")
    assert planner.Operand.parse("64x64:f32").nbytes == 64 * 64 * 4 and Operand("x", (3, 5), "uint8").nbytes == 15
    with pytest.raises(ArgumentError, match=r"operand must look like NAME:128x32:bf16, got 'A:128-32:f32'"):
        planner.Operand.parse("A:128-32:f32")
    with pytest.raises(ArgumentError, match=r"operand A: unknown dtype 'f7'"):
        planner.Operand.parse("A:8x8:f7")



def test_planner_counts_the_kernels_own_costs():
    # 400 ns of issuing per tile by the computing threads: busy 900 ns per tile, not 500
    kw = dict(threads=256, device="H200", compute_ns=500, blocks_per_sm=1, max_stages=6)
    p = planner.plan(["t:4096:f32"], costs=KernelCosts(issue_ns=400), **kw)
    plain = planner.plan(["t:4096:f32"], **kw)
    assert (p.busy_ns, plain.busy_ns) == (900, 500)
    assert p.refill_ns == plain.refill_ns == pytest.approx(device.KNOWN["H200"].latency_ns)  # no producer
    assert p.row(4).ns_per_tile > plain.row(4).ns_per_tile
    assert p.row(1).ns_per_tile == plain.row(1).ns_per_tile  # one stage: the costs the latency already holds
    producer = planner.plan(["t:4096:f32"], costs=KernelCosts(issue_ns=400, barrier_ns=20, producer=True,
                                                             handoff_ns=50), **kw)
    assert producer.busy_ns == 520 and producer.refill_ns == pytest.approx(plain.refill_ns + 450)


def test_plan_takes_costs_as_one_record():
    with pytest.raises(ArgumentError, match=r"costs must be a KernelCosts, got dict"):
        planner.plan(["t:4096:f32"], threads=256, device="H200", costs={"issue_ns": 400})
    for old in ("issue_ns", "barrier_ns", "producer", "handoff_ns", "issue_first", "solo_issue_ns"):
        with pytest.raises(TypeError, match=old):
            planner.plan(["t:4096:f32"], threads=256, device="H200", **{old: 1})


def test_plan_needs_an_operand():
    with pytest.raises(ArgumentError, match="plan needs at least one operand tile"):
        planner.plan([], threads=256, device="H200")


def test_near_the_bandwidth_the_planner_keeps_littles_law_in_flight():
    # H200 table: a 16 KiB tile read and written takes 901 ns of an SM's share of 4.8 TB/s; with 946 ns
    # of work the model calls 3 stages enough, but the memory system runs at 95% of its share
    p = planner.plan(["t:4096:f32"], threads=256, device="H200", compute_ns=946, blocks_per_sm=1, max_stages=8)
    assert p.recommended == 4 and p.row(4).coverage >= 1.0 > p.row(3).coverage
    assert "memory-bound or near it" in p.reasons[0]
    far = planner.plan(["t:4096:f32"], threads=256, device="H200", compute_ns=3000, blocks_per_sm=1, max_stages=8)
    assert far.recommended == 2 and not any("near it" in r for r in far.reasons)


def test_two_stages_need_the_refill_to_land_within_one_tiles_work():
    kw = dict(threads=288, device="H200", compute_ns=3000, blocks_per_sm=1, max_stages=8)
    fast = planner.plan(["t:4096:f32"], costs=KernelCosts(issue_ns=200, producer=True, handoff_ns=100), **kw)
    assert fast.recommended == 2 and fast.refill_ns == pytest.approx(fast.device.latency_ns + 300)
    # a producer that takes 1500 ns to issue a tile: release + 300 + 1500 + the latency > 3000 ns of work
    slow = planner.plan(["t:4096:f32"], costs=KernelCosts(issue_ns=1500, producer=True, handoff_ns=300), **kw)
    assert slow.busy_ns < slow.refill_ns and slow.recommended == 3
    assert slow.reasons[0].startswith("2 stages leave no slack")


def test_one_stage_takes_the_producers_issue_time_alone():
    kw = dict(threads=288, device="H200", compute_ns=3000, blocks_per_sm=1, max_stages=4)
    busy = planner.plan(["t:4096:f32"], costs=KernelCosts(issue_ns=2500, producer=True), **kw)
    solo = planner.plan(["t:4096:f32"], costs=KernelCosts(issue_ns=2500, producer=True, solo_issue_ns=200), **kw)
    assert solo.row(1).ns_per_tile < busy.row(1).ns_per_tile and solo.row(2).ns_per_tile == busy.row(2).ns_per_tile



@pytest.mark.parametrize("given", ["H200", device.KNOWN["H200"]], ids=["name", "facts"])
def test_a_device_by_table_name_or_facts(given):
    p = planner.plan(["t:4096:f32"], threads=256, device=given, max_stages=2)
    assert isinstance(p, Plan) and p.device is device.KNOWN["H200"]


@pytest.mark.parametrize("given, message", [
    ("NVIDIA H200", r"unknown device 'NVIDIA H200'; known: V100"),  # a live name is not a table name
    (132, r"device must be a table name \(V100, A100-40GB, .*RTX4090\), DeviceFacts or None, got int"),
])
def test_a_bad_device_is_named(given, message):
    with pytest.raises(ArgumentError, match=message):
        planner.plan(["t:4096:f32"], threads=256, device=given)


def test_without_a_device_the_planner_asks_for_the_local_gpu(monkeypatch):
    a100 = device.KNOWN["A100-40GB"]
    monkeypatch.setattr(device, "current", lambda device_id=None: a100)
    assert planner.plan(["t:4096:f32"], threads=256, max_stages=4).device is a100


def test_threads_are_checked():
    with pytest.raises(ArgumentError, match=r"threads must be a multiple of 32 in \[32, 1024\], got 100"):
        planner.plan(["t:4096:f32"], threads=100, device="H200")


def test_the_report_names_the_device_its_figures_and_the_choice():
    text = planner.plan(["A:64x64:bf16", "B:64x64:bf16"], threads=128, device="H200", max_stages=3).report()
    lines = text.splitlines()
    assert lines[0] == ("H200 (CC 9.0, 132 SMs, 227 KiB shared memory per block, 228 KiB per SM, 4800 GB/s, "
                        "assumed latency 1352 ns: CCCL: 48 KiB per SM)")
    assert lines[1] == "per stage: A 64x64 bfloat16, B 64x64 bfloat16 = 16.0 KiB; 128 threads per block"
    assert lines[2] == "to keep the memory busy an SM needs 48.0 KiB in flight"
    assert "recommended: 2 stage(s)" in lines


def test_with_a_memory_curve_buffers_that_cost_no_occupancy_keep_its_bytes_in_flight():
    # H200-like curve (542 ns unloaded, 23.8 B/ns per SM: 113 KiB for 90% of its rate) and a tile-1024 loop's costs.
    # The simulator puts 3 stages within 2% of the best; measured on the H200 (2026-12-03, bench --plan --tile 1024)
    # 8 stages were 4-15% faster than the 3-5 planned so. Deeper buffers at one block per SM cost no occupancy.
    curve = MemoryCurve(542.0, 23.8, 1.0)
    costs = KernelCosts(issue_ns=94, barrier_ns=94)
    p = planner.plan(["tile:1024:f32"], threads=256, device="H200", blocks_per_sm=1, compute_ns=370, max_stages=8,
                     costs=costs, memory=curve)
    assert p.row(3).ns_per_tile <= 1.02 * min(r.ns_per_tile for r in p.rows)  # what the simulator alone would pick
    assert p.recommended == 8 and "cost no occupancy" in " ".join(p.reasons)
    # the fixed latency keeps the simulator's answer
    fixed = planner.plan(["tile:1024:f32"], threads=256, device="H200", blocks_per_sm=1, compute_ns=370,
                         max_stages=8, costs=costs, memory=None)
    assert fixed.recommended < 8 and "cost no occupancy" not in " ".join(fixed.reasons)
    # two blocks of 32 KiB tiles: 3 stages keep both blocks and the curve's bytes; 4 would leave one block an SM
    two = planner.plan(["tile:8192:f32"], threads=256, device="H200", blocks_per_sm=2, compute_ns=3000, max_stages=8,
                       costs=costs, memory=curve)
    assert [two.row(s).blocks_per_sm for s in (2, 3, 4)] == [2, 2, 1]
    assert two.recommended == 3 and two.row(3).coverage >= 1.0
    # one buffer where a second saves under 5% stays one
    tiny = planner.plan(["tile:64:f32"], threads=32, device="H200", blocks_per_sm=1, compute_ns=100_000, max_stages=4,
                        memory=curve)
    assert tiny.recommended == 1
