"""The memory curve (asynccopy.model.memory): its algebra, its fit with the held-out split, its points from
traces, its cache, and what it changes in the simulator and the planner (no GPU needed).

The calibration data here is made by the simulator from a known curve (a closed loop: the points the
calibration would measure on a GPU behaving as the curve says must give the curve back)."""

import json
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest

from asynccopy import device
from asynccopy.bench import memory_calibration
from asynccopy.errors import ArgumentError
from asynccopy.model import memory, planner, simulate
from asynccopy.model.memory import MemoryCurve, Point
from asynccopy.model.simulate import KernelCosts

KiB = 1024
H200 = device.lookup("H200")
TRUE = MemoryCurve(900.0, 16.0, 2.5)


def test_the_curve_is_littles_law_at_low_load_and_its_ceiling_at_high_load():
    assert TRUE.latency_at(0) == pytest.approx(900.0)
    assert TRUE.rate_at(64) == pytest.approx(64 / 900.0, rel=1e-6)  # a few bytes: f / L0
    assert TRUE.rate_at(1e9) == pytest.approx(16.0, rel=1e-3)  # the ceiling
    rates = [TRUE.rate_at(f) for f in (4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB)]
    assert rates == sorted(rates) and all(r < 16.0 for r in rates)
    # p = 1: a queue from the first byte, latency = L0 + f / R
    assert MemoryCurve(900.0, 16.0, 1.0).latency_at(16 * KiB) == pytest.approx(900.0 + 16 * KiB / 16.0)
    for fraction in (0.5, 0.9, 0.99):
        assert TRUE.rate_at(TRUE.bytes_for(fraction)) == pytest.approx(fraction * 16.0, rel=1e-9)
    # a sharper knee reaches 90% of the rate with fewer bytes in flight
    assert MemoryCurve(900.0, 16.0, 8.0).bytes_for(0.9) < TRUE.bytes_for(0.9) < MemoryCurve(900.0, 16.0, 1.5).bytes_for(0.9)


@pytest.mark.parametrize("args, word", [((0.0, 16.0), "latency_ns"), ((900.0, float("inf")), "rate"),
                                        ((900.0, 16.0, 0.5), "knee"), ((900.0, 16.0, True), "knee")])
def test_a_curve_names_its_bad_parameter(args, word):
    with pytest.raises(ArgumentError, match=word):
        MemoryCurve(*args)


def _points(curve=TRUE, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    flights = [4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    return [Point(f"r{i} tile={f}", f * KiB, curve.latency_at(f * KiB) * (1 + noise * rng.standard_normal()))
            for i, f in enumerate(flights)]


def _held(p):
    return p.regime.split()[0] in ("r3", "r8", "r11")


def test_the_fit_recovers_a_curve_from_noisy_points_and_checks_it_on_the_held_out_ones():
    fit = memory.fit(_points(noise=0.02), _held, source="synthetic")
    c = fit.curve
    assert c.latency_ns == pytest.approx(900.0, rel=0.05) and c.rate == pytest.approx(16.0, rel=0.05)
    assert c.bytes_for(0.9) == pytest.approx(TRUE.bytes_for(0.9), rel=0.15)
    assert [x.regime.split()[0] for x in fit.held_out] == ["r3", "r8", "r11"]
    assert len(fit.fitted) == 10 and fit.worst_held_out < 0.06 and fit.worst_fitted < 0.06
    text = "\n".join(fit.report())
    assert "fitted on: 10 regime(s)" in text and "held out: 3 regime(s)" in text


def test_the_held_out_points_do_not_move_the_fit():
    points = _points(noise=0.02)
    moved = [Point(p.regime, p.in_flight, p.latency_ns * (3.0 if _held(p) else 1.0)) for p in points]
    a, b = memory.fit(points, _held), memory.fit(moved, _held)
    assert a.curve == b.curve  # fitted on the same points
    # and the check on the held-out ones sees the change (3x the latency: the curve is 67% under)
    assert b.worst_held_out > 0.6 > 0.1 > a.worst_held_out


def test_a_calibration_that_holds_nothing_out_is_refused():
    with pytest.raises(ArgumentError, match="holds no regime out"):
        memory.fit(_points(), lambda p: False)
    with pytest.raises(ArgumentError, match="every calibration regime is held out"):
        memory.fit(_points(), lambda p: True)
    with pytest.raises(ArgumentError, match="at least 3 regimes"):
        memory.fit(_points()[:3], lambda p: p.regime.startswith("r0 "))
    same = [Point(f"r{i}", 16 * KiB, 1000.0 + i) for i in range(5)]
    with pytest.raises(ArgumentError, match="cannot be seen"):
        memory.fit(same, lambda p: p.regime == "r0")
    twice = _points()[:4] + [_points()[0]]
    with pytest.raises(ArgumentError, match="appears twice"):
        memory.fit(twice, lambda p: p.regime.startswith("r1 "))


def test_the_calibration_regimes_hold_out_whole_tiles_and_a_second_kernel():
    regimes = memory_calibration.regimes(H200.smem_per_block_optin, H200.smem_per_sm, "sm_90a")
    points = [Point(r.name, 1.0, 1.0) for r in regimes]
    fitted, held = memory.split(points, memory_calibration.held_out)
    assert fitted and held

    def tiles(ps):
        return {int(p.regime.split("tile=")[1].split()[0]) for p in ps if p.regime.startswith("tma_1d")}

    assert tiles(held) == set(memory_calibration.HELD_OUT_TILES)
    assert not tiles(fitted) & tiles(held)
    assert all(p.regime.startswith(memory_calibration.MAIN + " ") for p in fitted)
    assert any(p.regime.startswith("ldgsts ") for p in held)
    # every regime fits an H200 SM with its blocks, and the regimes span more than 16x in bytes in flight
    flights = [r.stages * r.tile * 4 * r.blocks_per_sm for r in regimes]
    assert max(flights) / min(flights) >= 16
    for r in regimes:
        assert r.blocks_per_sm * (r.stages * r.tile * 4 + 1024) <= H200.smem_per_sm


def _simulated_traces(regime, curve):
    """What traces of the regime would show on a GPU whose memory is ``curve`` (the simulator's events)."""
    producer = regime.mechanism == memory_calibration.MAIN
    costs = (KernelCosts(issue_ns=30.0, producer=True, handoff_ns=60.0) if producer
             else KernelCosts(issue_ns=150.0, barrier_ns=40.0))
    tb = regime.tile * 4
    sim = simulate.simulate(regime.stages, 64, tile_bytes=tb, compute_ns=100 + tb / 64, latency_ns=curve.latency_ns,
                            bandwidth_per_sm=32.0, blocks=regime.blocks_per_sm, costs=costs, memory=curve)
    return [SimpleNamespace(tiles=[e for e in sim.events if e.block == b]) for b in range(regime.blocks_per_sm)]


def test_points_from_traces_give_back_the_curve_that_made_them():
    regimes = memory_calibration.regimes(H200.smem_per_block_optin, H200.smem_per_sm, "sm_90a")
    points = [memory.point_from_traces(r.name, _simulated_traces(r, TRUE)[:1], tile_bytes=r.tile * 4,
                                       blocks_per_sm=r.blocks_per_sm) for r in regimes]
    # the bytes in flight at issue: the block's own outstanding tiles x its blocks per SM
    by = {p.regime: p for p in points}
    assert by["tma_1d_pipeline tile=4096 threads=256 stages=4 blocks=1"].in_flight == 4 * 16 * KiB  # refills all 4
    assert by["ldgsts vec=16 cache=cg tile=4096 threads=256 stages=4 blocks=1"].in_flight == 3 * 16 * KiB  # S - 1
    fit = memory.fit(points, memory_calibration.held_out)
    assert fit.curve.latency_ns == pytest.approx(TRUE.latency_ns, rel=0.01)
    assert fit.curve.rate == pytest.approx(TRUE.rate, rel=0.01)
    assert fit.worst_held_out < 0.01


def test_only_copies_the_consumer_waited_for_time_the_memory():
    # tile 1 was there before its consumer asked (ready = the end of the previous compute): not a latency
    tiles = [simulate.TileEvents(0, k, issued=100.0 * k, ready=100.0 * k + 1000, compute_start=100.0 * k + 1000,
                                 compute_end=100.0 * k + 1050) for k in range(12)]
    tiles[1].ready = tiles[0].compute_end
    p = memory.point_from_traces("r", [SimpleNamespace(tiles=tiles)], tile_bytes=1024, blocks_per_sm=1)
    assert p.samples == 11 and p.latency_ns == 1000.0
    # time-averaged: every copy's issue-to-data span (tile 1's too) x its bytes, over first issue to last compute
    assert p.mean_in_flight == pytest.approx((11 * 1000 + 950) * 1024 / (1100 + 1050))
    two = memory.point_from_traces("r", [SimpleNamespace(tiles=tiles)] * 2, tile_bytes=1024, blocks_per_sm=2)
    assert two.mean_in_flight == pytest.approx(2 * p.mean_in_flight)  # per SM: its blocks' together
    assert memory.Point(**asdict(p)) == p  # a cached calibration keeps it
    with pytest.raises(ArgumentError, match="only 1 traced copies"):
        memory.point_from_traces("r", [SimpleNamespace(tiles=tiles[:2])], tile_bytes=1024, blocks_per_sm=1)


def test_a_calibration_is_cached_per_device(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    assert memory.cached(H200) is None
    fit = memory.fit(_points(noise=0.01), _held, source="synthetic", device_key=memory.device_key(H200))
    path = memory.save(fit)
    again = memory.cached(H200)
    assert again.curve == fit.curve and again.held_out_regimes() == fit.held_out_regimes()
    assert [c.error for c in again.held_out] == pytest.approx([c.error for c in fit.held_out])
    assert memory.cached(device.lookup("H100-SXM")) is None  # another device's key
    data = json.loads(open(path).read())
    data[memory.device_key(H200)]["schema"] = 0  # another version's file is not read
    open(path, "w").write(json.dumps(data))
    assert memory.cached(H200) is None
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", "off")
    assert memory.save(fit) is None and memory.cached(H200) is None
    with pytest.raises(ArgumentError, match="device's key"):
        memory.save(memory.fit(_points(), _held))


def test_the_simulator_gives_each_copy_the_latency_of_the_bytes_in_flight():
    kw = dict(tile_bytes=16 * KiB, compute_ns=200.0, latency_ns=900.0, bandwidth_per_sm=1e6)
    hard = MemoryCurve(900.0, 1e6, 16.0)  # no queue: the fixed latency
    for s in (1, 2, 4, 8):
        assert (simulate.simulate(s, 64, memory=hard, **kw).ns_per_tile
                == pytest.approx(simulate.simulate(s, 64, **kw).ns_per_tile, rel=1e-3))
    # a queue: more bytes in flight each wait longer, and stages stop paying once the rate nears its ceiling
    soft = [simulate.simulate(s, 64, memory=TRUE, **kw).ns_per_tile for s in (2, 4, 8)]
    fixed = [simulate.simulate(s, 64, **kw).ns_per_tile for s in (2, 4, 8)]
    assert soft[0] > fixed[0] and soft[2] > fixed[2]
    assert soft[2] == pytest.approx(16 * KiB / TRUE.rate, rel=0.1)  # 8 stages: the curve's ceiling
    with pytest.raises(ArgumentError, match="MemoryCurve"):
        simulate.simulate(2, 8, memory="H200", **kw)


def test_the_planner_asks_the_curve_for_the_bytes_in_flight(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    fixed = planner.plan(["tile:4096:f32"], threads=256, device=H200, blocks_per_sm=1, max_stages=8)
    assert fixed.memory is None and fixed.needed_bytes_per_sm == pytest.approx(H200.bytes_in_flight_per_sm)
    soft = MemoryCurve(1200.0, 16.0, 1.2)
    curved = planner.plan(["tile:4096:f32"], threads=256, device=H200, blocks_per_sm=1, max_stages=8, memory=soft)
    assert curved.needed_bytes_per_sm == pytest.approx(soft.bytes_for(planner.COVERED_RATE))
    assert curved.recommended > fixed.recommended  # a soft knee: more bytes in flight for the same rate
    assert "calibrated memory curve" in curved.report()
    # "cached" (the default) finds the device's saved calibration
    memory.save(memory.fit(_points(soft), _held, device_key=memory.device_key(H200)))
    cached = planner.plan(["tile:4096:f32"], threads=256, device=H200, blocks_per_sm=1, max_stages=8)
    assert cached.memory is not None and cached.recommended == curved.recommended
    assert planner.plan(["tile:4096:f32"], threads=256, device=H200, max_stages=8, memory=None).memory is None
    with pytest.raises(ArgumentError, match="memory must be"):
        planner.plan(["tile:4096:f32"], threads=256, device=H200, memory="fast")


def test_one_stage_under_a_curve_keeps_the_kernels_own_costs():
    kw = dict(tile_bytes=16 * KiB, compute_ns=200.0, latency_ns=900.0, bandwidth_per_sm=32.0)
    costs = KernelCosts(issue_ns=300.0, barrier_ns=50.0)
    # the fixed latency is fitted to sync's one-stage loop: it holds the loop's issue and barrier already
    fixed = simulate.simulate(1, 32, costs=costs, **kw).ns_per_tile
    assert fixed == pytest.approx(simulate.simulate(1, 32, **kw).ns_per_tile)
    # a curve fitted to bulk copies does not: one stage pays the barrier on every tile, and its issue (which
    # the copy's latency covers, the copy leaving as its issue starts) whenever the issue outlasts the latency
    curved = simulate.simulate(1, 32, costs=costs, memory=TRUE, **kw).ns_per_tile
    bare = simulate.simulate(1, 32, memory=TRUE, **kw).ns_per_tile
    assert curved == pytest.approx(bare + 50.0, rel=1e-3)
    slow = KernelCosts(issue_ns=5000.0, barrier_ns=50.0)
    assert simulate.simulate(1, 32, costs=slow, memory=TRUE, **kw).ns_per_tile > 5000.0 > 3 * bare


def test_the_calibration_kernel_follows_the_gpu():
    a100 = device.lookup("A100-80GB")
    assert memory_calibration.main_kernel((9, 0))[0] == "tma_1d_pipeline"
    assert memory_calibration.main_kernel((8, 0)) == memory_calibration.LDGSTS
    regimes = memory_calibration.regimes(a100.smem_per_block_optin, a100.smem_per_sm, "sm_80")
    assert regimes and all(r.mechanism == "ldgsts" and dict(r.options) == {"vec": 16, "cache": "cg"} for r in regimes)
    points = [Point(r.name, 1.0, 1.0) for r in regimes]
    fitted, held = memory.split(points, lambda p: memory_calibration.held_out(p, "ldgsts"))
    assert fitted and held and {p.regime.split("tile=")[1].split()[0] for p in held} == {"2048", "8192"}


def test_traced_runs_span_the_l2_several_times():
    for r in memory_calibration.regimes(H200.smem_per_block_optin, H200.smem_per_sm, "sm_90a"):
        n = memory_calibration.tiles_per_block(r, H200.sm_count, H200.l2_bytes)
        moved = n * H200.sm_count * r.blocks_per_sm * r.tile * 4 * 2
        assert n >= 64 and moved >= memory_calibration.L2_PASSES * H200.l2_bytes


def test_the_calibration_fits_on_the_split_and_leaves_out_a_failing_regime(tmp_path, monkeypatch):
    from asynccopy import trace
    from asynccopy.errors import AsyncCopyError

    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    facts = replace_facts = H200
    monkeypatch.setattr(device, "require", lambda cc, what: replace_facts)
    monkeypatch.setattr(device, "current", lambda device_id=None: facts)
    by_name = {r.name: r for r in memory_calibration.regimes(H200.smem_per_block_optin, H200.smem_per_sm, "sm_90a")}
    broken = "tma_1d_pipeline tile=16384 threads=256 stages=2 blocks=1"

    def fake_run(mech, stages, *, intensity, tile, threads, tiles_per_block, blocks_per_sm, check_all, **opts):
        r = next(x for x in by_name.values() if (x.mechanism, x.stages, x.tile, x.blocks_per_sm) ==
                 (mech, stages, tile, blocks_per_sm))
        if r.name == broken:
            raise AsyncCopyError("the traced kernel computed wrong results")
        return None, _simulated_traces(r, TRUE)

    monkeypatch.setattr(trace, "run", fake_run)
    notes = []
    fit, fresh = memory_calibration.calibration(progress=notes.append)
    assert fresh and any("left out: the traced kernel computed wrong results" in n for n in notes)
    names = {c.regime for c in fit.fitted} | {c.regime for c in fit.held_out}
    assert broken not in names and len(names) == len(by_name) - 1
    # fitted only on the main kernel's regimes of the fitted tiles; the rest is the held-out check
    assert all(memory_calibration.held_out(Point(c.regime, 1.0, 1.0)) for c in fit.held_out)
    assert not any(memory_calibration.held_out(Point(c.regime, 1.0, 1.0)) for c in fit.fitted)
    assert fit.curve.latency_ns == pytest.approx(TRUE.latency_ns, rel=0.01) and fit.worst_held_out < 0.01
    assert memory.cached(H200).curve == fit.curve  # kept for the next call
    again, fresh = memory_calibration.calibration(progress=notes.append)
    assert not fresh and again.curve == fit.curve


def test_with_a_curve_a_refilling_kernels_stages_all_count_in_flight():
    producer = KernelCosts(issue_ns=30.0, producer=True, handoff_ns=60.0)
    fixed = planner.plan(["tile:4096:f32"], threads=256, device=H200, blocks_per_sm=1, costs=producer, memory=None)
    curved = planner.plan(["tile:4096:f32"], threads=256, device=H200, blocks_per_sm=1, costs=producer, memory=TRUE)
    in_loop = planner.plan(["tile:4096:f32"], threads=256, device=H200, blocks_per_sm=1, memory=TRUE)
    # as the calibration counts them: a producer keeps every buffer in flight; computing threads S - 1
    assert curved.row(4).bytes_in_flight_per_sm == 4 * 16 * KiB
    assert fixed.row(4).bytes_in_flight_per_sm == in_loop.row(4).bytes_in_flight_per_sm == 3 * 16 * KiB


def test_the_fit_on_a_recorded_h200_calibration():
    """The H200's own calibration (2026-12-01, `asynccopy calibrate`: 51 traced regimes) fitted again on its
    fitted regimes and checked on its held-out ones, as the calibration did."""
    import pathlib

    data = json.loads((pathlib.Path(__file__).parents[2] / "data" / "h200_memory_calibration.json").read_text())
    points = [Point(**p) for p in data["points"]]
    held = set(data["held_out"])
    assert held == {p.regime for p in points if memory_calibration.held_out(p)}  # the split the code makes
    fit = memory.fit(points, memory_calibration.held_out, source="recorded")
    # the same curve the GPU run fitted, from the same points
    saved = MemoryCurve.from_dict(data["curve"])
    assert fit.curve.latency_ns == pytest.approx(saved.latency_ns, rel=0.02)
    assert fit.curve.rate == pytest.approx(saved.rate, rel=0.02)
    # what it measured: latency grows with the bytes in flight, and the curve holds most held-out regimes
    # within 10% (19 of 24) and all within 25%
    assert 300 < fit.curve.latency_ns < 1500 and 5 < fit.curve.rate < 40
    within = sum(abs(c.error) <= 0.10 for c in fit.held_out)
    assert len(fit.held_out) == 24 and within >= 18 and fit.worst_held_out < 0.25
    # a fit that saw the held-out points too would not be this one: the split matters to the check
    everything = memory.fit_curve(points)
    assert (everything.latency_ns, everything.rate) != (fit.curve.latency_ns, fit.curve.rate)


def test_a_recorded_calibration_keeps_the_time_averaged_bytes_in_flight():
    """The H200 calibration of 2026-12-03 (`asynccopy calibrate`, 51 regimes) records each regime's time-averaged read
    bytes in flight per SM beside the count at a copy's issue. Little's law on it: past a few tiles in flight the SM's
    reads saturate near 17 B/ns (mean bytes / mean latency), under the 23.8 B/ns the curve's R reaches at issue."""
    import pathlib

    data = json.loads((pathlib.Path(__file__).parents[2] / "data" / "h200_memory_calibration_mean.json").read_text())
    fit = memory.Fit.from_dict(data)
    assert all(p.mean_in_flight > 0 for p in fit.points) and len(fit.points) == 51
    # a block's tiles are not all in flight all the time: the mean is under the count at issue for every
    # single-block bulk-copy regime
    single = [p for p in fit.points if p.regime.startswith("tma_1d_pipeline") and p.regime.endswith("blocks=1")]
    assert single and all(p.mean_in_flight < p.in_flight for p in single)
    deep = [p for p in fit.points if p.mean_in_flight >= 100 * 1024]
    rates = [p.mean_in_flight / p.latency_ns for p in deep]
    assert len(deep) >= 5 and all(14 < r < 20 for r in rates), rates
    assert fit.curve.rate > max(rates)
