"""The model check on a synthetic sweep (asynccopy.bench.model_check): the calibration, the planner's pick
and the best measured stage count per variant, the simulator's error, the plot, and saved runs."""

import json
from dataclasses import replace

import pytest

from asynccopy.bench import model_check, model_plot, plan_file, report
from asynccopy.bench.stream_bench import Row, StreamBench
from asynccopy.errors import ArgumentError
from asynccopy.model.costs import Overheads

KiB = 1024


def _row(mech, stages, k, ms, op="LDGSTS", label=None):
    gbps = 2 * 4 * (1 << 28) / (ms * 1e-3) / 1e9
    return Row(mech, label or mech, stages, None, None, op, k, ms, gbps, 100 * gbps / 4000.0)


# ldgsts's measured times (ms) by stage count: the fastest is 4 stages at both intensities (0.551 and 0.741);
# the slowest is 2 stages at intensity 0 and 8 stages at intensity 8
LDGSTS_MS = {0: {2: 0.68, 3: 0.552, 4: 0.551, 8: 0.553}, 8: {2: 0.75, 3: 0.749, 4: 0.741, 8: 0.853}}
COMPUTE = {0: 150.0, 8: 1400.0}  # ns per tile, from a traced `sync`


def _synthetic_bench():
    # an older file's device: no memory figures (the table's H200 entry gives them)
    dev = {"name": "NVIDIA H200", "cc": [9, 0], "arch": "sm_90a", "sm_count": 132, "smem_per_block_optin": 227 * 1024,
           "smem_per_sm": 228 * 1024, "l2_bytes": 60 << 20, "regs_per_sm": 65536, "max_threads_per_sm": 2048,
           "max_blocks_per_sm": 32, "device_id": 0}
    rows = [_row("sync", 1, 0, 0.736, "LDG")]
    for k, by_stages in LDGSTS_MS.items():
        rows += [_row("ldgsts", s, k, ms) for s, ms in by_stages.items()]
    return StreamBench(dev, 1 << 28, 4096, 256, 1, 0.504, 4261.0, rows), dict(COMPUTE)


def test_the_calibration_reproduces_sync_with_the_runs_bandwidth():
    bench, compute = _synthetic_bench()
    calibrated, _ = model_check.check(bench, compute)
    # the fitted latency makes the model reproduce sync at intensity 0
    assert model_check.predicted_ms(calibrated, 1, compute[0], bench) == pytest.approx(0.736, rel=1e-6)
    assert calibrated.bandwidth == pytest.approx(4261e9) and calibrated.latency_source == "fitted to sync at intensity 0"
    assert calibrated.name == "NVIDIA H200" and calibrated.sm_count == 132
    # ~1333 ns at 4261 GB/s: an SM needs ~43 KiB in flight, i.e. 3 prefetched 16 KiB tiles (Little's law)
    assert 32 * KiB < calibrated.bytes_in_flight_per_sm <= 48 * KiB


def test_model_check_on_synthetic_rows():
    bench, compute = _synthetic_bench()
    calibrated, checked = model_check.check(bench, compute)
    got = [(r.label, r.intensity, r.best_stages, r.best_ms, r.recommended, r.measured_at_recommended_ms)
           for r in checked]
    # best: the fastest measured stage count. planned: memory-bound at intensity 0, Little's law's 4 stages
    # (see the calibration above); at intensity 8 a tile's 1400 ns of compute outlasts the ~1333 ns latency:
    # one tile in flight, 2 stages, is enough
    assert got == [("ldgsts", 0, 4, 0.551, 4, 0.551), ("ldgsts", 8, 4, 0.741, 2, 0.75)]
    assert [r.ratio for r in checked] == pytest.approx([1.0, 0.75 / 0.741])
    for r in checked:  # the largest relative error of the simulator over the measured stage counts
        want = max(abs(model_check.predicted_ms(calibrated, s, compute[r.intensity], bench) - ms) / ms
                   for s, ms in LDGSTS_MS[r.intensity].items())
        assert r.worst_error == pytest.approx(want) and r.worst_error > 0.05


def test_a_variants_own_costs_change_its_model():
    bench, compute = _synthetic_bench()
    ov = Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)
    calibrated, checked = model_check.check(bench, compute, {"ldgsts": ov})
    _, plain = model_check.check(bench, compute)
    assert checked[1].worst_error != pytest.approx(plain[1].worst_error)
    for r in checked:  # its own compute (1500 ns at 8, not sync's 1400) and its issue and barrier costs
        want = max(abs(model_check.predicted_ms(calibrated, s, ov.compute_ns(r.intensity), bench, ov, r.intensity) - ms)
                   / ms for s, ms in LDGSTS_MS[r.intensity].items())
        assert r.worst_error == pytest.approx(want)


def test_only_multi_stage_variants_at_traced_intensities_are_checked():
    bench, compute = _synthetic_bench()
    bench.rows.append(_row("ldgsts", 2, 4, 0.6))  # intensity 4 has no traced compute time
    bench.rows.append(_row("sync_double", 2, 0, 0.7, "LDG"))  # a fixed stage count has nothing to plan
    _, checked = model_check.check(bench, {0: 150.0})
    assert [(r.label, r.intensity) for r in checked] == [("ldgsts", 0)]


def test_model_plot(tmp_path):
    pytest.importorskip("matplotlib")
    bench, compute = _synthetic_bench()
    ov = {"ldgsts": Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)}
    path = model_plot.plot(bench, compute, str(tmp_path / "m.png"), ov)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("m.png")


def test_model_plot_needs_matplotlib(monkeypatch, tmp_path):
    import sys

    bench, compute = _synthetic_bench()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ArgumentError, match="drawing a PNG needs matplotlib"):
        model_plot.plot(bench, compute, str(tmp_path / "m.png"))


# ---------------------------------------------------------------------------------------------
# Saved runs


def _save(tmp_path, name="run.json", overheads=None):
    bench, compute = _synthetic_bench()
    payload = bench.as_dict()
    payload["model"] = {"latency_ns": 1300.0, "compute_ns": compute,
                        "overheads": {k: v.as_dict() for k, v in (overheads or {}).items()}}
    report.write(tmp_path / name, payload)
    return tmp_path / name, bench, compute


def test_load_gives_back_the_sweep_and_its_calibration(tmp_path):
    ov = Overheads(150.0, 1500.0, 8, 120.0, 20.0, False, issue_lo_ns=60.0)
    path, bench, compute = _save(tmp_path, overheads={"ldgsts": ov})
    result, got_compute, got_ov = plan_file.load(path)
    assert got_compute == compute and got_ov == {"ldgsts": ov}
    assert result.rows == bench.rows and result.device == bench.device and result.copy_gbps == bench.copy_gbps
    assert model_check.check(result, got_compute, got_ov)[1] == model_check.check(bench, compute, {"ldgsts": ov})[1]


def test_a_calibration_from_before_issue_first_takes_the_mechanisms_order(tmp_path):
    bench, compute = _synthetic_bench()
    bench.rows += [_row("pipeline", s, 0, ms) for s, ms in ((2, 0.57), (4, 0.56))]
    payload = bench.as_dict()
    old = {"compute_lo": 150.0, "compute_hi": 1500.0, "intensity_hi": 8, "issue_ns": 120.0, "barrier_ns": 20.0,
           "producer": False, "handoff_ns": 0.0}  # the fields of the previous version
    payload["model"] = {"compute_ns": compute, "overheads": {"pipeline": old, "ldgsts": old}}
    report.write(tmp_path / "old.json", payload)
    _, _, ov = plan_file.load(tmp_path / "old.json")
    assert ov["pipeline"].issue_first and not ov["ldgsts"].issue_first and ov["pipeline"].issue_lo_ns is None


def _write(tmp_path, data):
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _valid(tmp_path):
    path, _, _ = _save(tmp_path, "valid.json")
    return json.loads(path.read_text())


def test_load_names_an_unreadable_file(tmp_path):
    with pytest.raises(ArgumentError, match=r"cannot read .*missing.json"):
        plan_file.load(tmp_path / "missing.json")
    with pytest.raises(ArgumentError, match=r"cannot read .*bad.json"):
        plan_file.load(_write(tmp_path, "{not json"))


def test_load_names_json_of_the_wrong_shape(tmp_path):
    with pytest.raises(ArgumentError, match=r"bad.json holds a JSON list, not a `bench --plan --json` object"):
        plan_file.load(_write(tmp_path, [1, 2]))


def test_load_names_a_sweep_without_a_calibration(tmp_path):
    data = _valid(tmp_path)
    del data["model"]
    with pytest.raises(ArgumentError, match=r"holds no model calibration: write it with `asynccopy bench --plan --json`"):
        plan_file.load(_write(tmp_path, data))
    data["model"] = {"compute_ns": {"0": 1.0}, "overheads": [1, 2]}
    with pytest.raises(ArgumentError, match=r"'overheads' must map each variant to its costs"):
        plan_file.load(_write(tmp_path, data))


def test_load_names_another_suites_file(tmp_path):
    path = _write(tmp_path, {"rows": [{"cluster": 2}], "model": {"compute_ns": {}}})
    with pytest.raises(ArgumentError, match=r"is not a `bench --plan --json` file of this version"):
        plan_file.load(path)


def test_load_names_an_unknown_mechanism(tmp_path):
    data = _valid(tmp_path)
    data["rows"][1]["mechanism"] = "dma"
    with pytest.raises(ArgumentError, match=r"not a `bench --plan --json` file of this version: unknown mechanism 'dma'"):
        plan_file.load(_write(tmp_path, data))


def test_load_names_a_run_without_its_baseline_row(tmp_path):
    data = _valid(tmp_path)
    data["rows"] = [r for r in data["rows"] if r["mechanism"] != "sync"]
    with pytest.raises(ArgumentError, match=r"bad.json has no sync row at intensity 0: the model's latency is fitted to it"):
        plan_file.load(_write(tmp_path, data))


# ---------------------------------------------------------------------------------------------
# With the memory curve


def _curve_fit():
    from asynccopy.model import memory

    curve = memory.MemoryCurve(1000.0, 16.0, 2.0)
    regimes = [f"tma_1d_pipeline tile={t} threads=256 stages={s} blocks=1" for t in (1024, 4096) for s in (1, 2, 4, 8)]
    points = [memory.Point(r, int(r.split("tile=")[1].split()[0]) * 4 * int(r.split("stages=")[1].split()[0]),
                           curve.latency_at(int(r.split("tile=")[1].split()[0]) * 4 * int(r.split("stages=")[1].split()[0])))
              for r in regimes] + [memory.Point("ldgsts tile=4096 threads=256 stages=4 blocks=1", 48 * KiB,
                                                curve.latency_at(48 * KiB))]
    return memory.fit(points, lambda p: " tile=1024 " not in p.regime, source="synthetic")


def test_the_memory_curve_replaces_the_fitted_latency():
    bench, compute = _synthetic_bench()
    fit = _curve_fit()
    dev, rows = model_check.check(bench, compute, memory=fit.curve)
    assert dev.latency_ns == fit.curve.latency_ns and dev.latency_source.startswith("memory curve")
    _, fixed = model_check.check(bench, compute)
    assert [r.worst_error for r in rows] != pytest.approx([r.worst_error for r in fixed])
    for r in rows:  # the simulator's error is the curve's model's
        want = max(abs(model_check.predicted_ms(dev, s, compute[r.intensity], bench, None, r.intensity, fit.curve) - ms)
                   / ms for s, ms in LDGSTS_MS[r.intensity].items())
        assert r.worst_error == pytest.approx(want)


def test_picks_the_sweep_did_not_run_are_listed_for_measuring():
    bench, compute = _synthetic_bench()
    _, rows = model_check.check(bench, compute)
    assert model_check.unmeasured_picks(bench, rows) == {}
    rows[1].recommended, rows[1].measured_at_recommended_ms, rows[1].ratio = 6, None, None
    assert model_check.unmeasured_picks(bench, rows) == {("ldgsts", 6): [8]}
    plan_ok, sim10, sim25, n = model_check.summary_counts(rows)
    assert n == 2 and plan_ok == 1  # an unmeasured pick is not counted as within 5%


def test_held_out_pairs_are_those_whose_regime_the_curve_never_saw():
    bench, _ = _synthetic_bench()  # tile 4096, 256 threads, 1 block per SM
    assert model_check.in_calibration(bench, {"tma_1d_pipeline tile=4096 threads=256 stages=4 blocks=1"})
    assert model_check.in_calibration(bench, {"ldgsts vec=16 cache=cg tile=4096 threads=256 stages=2 blocks=1"})
    assert not model_check.in_calibration(bench, {"tma_1d_pipeline tile=4096 threads=256 stages=4 blocks=2"})
    assert not model_check.in_calibration(bench, {"tma_1d_pipeline tile=2048 threads=256 stages=4 blocks=1",
                                                  "tma_1d_pipeline tile=4096 threads=128 stages=4 blocks=1"})


def test_a_saved_run_keeps_its_memory_curve(tmp_path):
    from asynccopy.model import memory

    path, _, _ = _save(tmp_path)
    assert plan_file.load_memory(path) is None  # a file from before calibrations
    data = json.loads(path.read_text())
    fit = _curve_fit()
    data["model"]["memory"] = fit.as_dict()
    path.write_text(json.dumps(data))
    again = plan_file.load_memory(path)
    assert isinstance(again, memory.Fit) and again.curve == fit.curve
    assert again.held_out_regimes() == fit.held_out_regimes()
    plan_file.load(path)  # the sweep still loads


def test_an_unswept_pick_is_timed_beside_its_best_again():
    bench, compute = _synthetic_bench()
    _, rows = model_check.check(bench, compute)
    rows[1].recommended, rows[1].measured_at_recommended_ms, rows[1].ratio = 6, None, None
    picks = model_check.unmeasured_picks(bench, rows)
    assert model_check.with_best(picks, rows) == {("ldgsts", 6): [8], ("ldgsts", 4): [8]}
    # a later row of the same (variant, stages, intensity) is the one the check uses
    bench.rows.append(_row("ldgsts", 4, 8, 0.7))
    _, again = model_check.check(bench, compute)
    assert again[1].best_ms == 0.7


def test_the_simulator_runs_the_blocks_that_fit_at_each_stage_count():
    """A recorded H200 run at tile 8192 floats and 2 blocks per SM (2026-12-02): at 4 stages (128 KiB a block)
    one block fits an SM, and the grid's 264 blocks run in two waves. The producer-paced ws_pipeline then takes
    half the pace: measured 0.81 ms at 4 stages against 0.56 at 3. Simulated as the SM holds them: 4 stages within
    5%, and slower than 3 by about as much (3 stages sit at the bandwidth floor, 10% under the measurement)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile8192_2blocks.json"
    result, compute, overheads = plan_file.load(data)
    fit = plan_file.load_memory(data)
    dev = model_check.calibrated_device(result, compute, fit.curve)
    threads = result.threads + 32  # the one producer warp
    assert [model_check.resident_blocks(result, dev, s, threads) for s in (1, 2, 3, 4)] == [2, 2, 2, 1]
    measured = {r.stages: r.ms for r in result.rows if r.label == "ws_pipeline p2" and r.intensity == 0}
    ov = overheads["ws_pipeline p2"]
    got = {s: model_check.predicted_ms(dev, s, ov.compute_ns(0), result, ov, 0, fit.curve, threads) for s in (3, 4)}
    assert abs(got[4] - measured[4]) / measured[4] < 0.05, (got, measured)
    assert got[4] / got[3] > 1.4 and measured[4] / measured[3] > 1.4, (got, measured)


def test_the_planner_counts_the_blocks_the_kernels_registers_allow():
    """A fresh H200 run at tile 8192 floats x 2 blocks of 256 threads per SM (2026-12-02), held out from the memory
    curve's fit, whose rows carry each kernel's registers a thread (the run's own NVRTC). The LDGSTS kernels take
    192-230 registers: one block an SM, where the shared memory holds two; cg takes 80: two. Counted so, the
    planner's picks reach 46 of 48 within 5% of the best; counted as the shared memory alone allows, 44."""
    from dataclasses import replace
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile8192_2blocks_regs.json"
    result, compute, overheads = plan_file.load(data)
    curve = plan_file.load_memory(data).curve
    regs = model_check.registers(result)
    assert regs["ldgsts vec16 .ca"][2] > 128 >= regs["cg"][2]
    dev = model_check.calibrated_device(result, compute, curve)
    assert model_check.resident_blocks(result, dev, 2, 256, regs["ldgsts vec16 .ca"][2]) == 1
    assert model_check.resident_blocks(result, dev, 2, 256, regs["cg"][2]) == 2
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[0] >= 46
    blind = replace(result, rows=[replace(r, regs=None) for r in result.rows])
    _, rows = model_check.check(blind, compute, overheads, curve)
    assert model_check.summary_counts(rows)[0] <= 44


def test_stores_yield_to_copies_and_the_compute_at_zero_holds_no_store_stall():
    """The recorded H200 run at tile 8192 floats x 2 blocks per SM (held out from the memory curve's fit). One stage
    of ldgsts (one block an SM: its registers) measured 0.60 ms at intensity 0; with its tile's results served
    before the next tile's copy the simulator said 18% more, reads first (the stores posted to the L2) within 10%.
    The TMA producer kernels' compute at intensity 0, traced at 4 stages where they are memory-bound, holds their
    stores' wait (1.13-1.17 us a tile against sync's 0.56): no more than sync's, their one stage at intensity 2 comes
    within 10% (12-13% over before). Both together: the simulator within 10% for 39 of 48 pairs (22 before)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile8192_2blocks_regs.json"
    result, compute, overheads = plan_file.load(data)
    curve = plan_file.load_memory(data).curve
    dev = model_check.calibrated_device(result, compute, curve)
    regs = model_check.registers(result)
    capped = model_check.unstalled(overheads, compute)
    assert overheads["ws_tma p1"].compute_lo > 2 * compute[0] and capped["ws_tma p1"].compute_lo == compute[0]
    assert capped["ldgsts vec16 .cg"] == overheads["ldgsts vec16 .cg"]  # its traced 0.26 us is under sync's

    def error(label, k):
        ov, row = capped[label], next(r for r in result.rows if r.label == label and r.intensity == k and r.stages == 1)
        threads = result.threads + 32 * row.producers
        return model_check.predicted_ms(dev, 1, ov.compute_ns(k), result, ov, k, curve, threads, regs[label][1]) / row.ms - 1

    assert abs(error("ldgsts vec16 .cg", 0)) < 0.10
    assert abs(error("ws_tma p1", 2)) < 0.10 and abs(error("ws_tma p2", 2)) < 0.10
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] >= 41


def test_a_recorded_run_on_another_tile_and_thread_count_stays_within_its_figures():
    """The recorded H200 run at tile 2048 floats x 128 threads (held out from the memory curve's fit; the model with
    stores yielding to copies and the compute at intensity 0 capped at sync's, 2026-12-02): the planner within 5% of
    the best for 44 of 48 pairs, the simulator within 10% of every measured stage count for 31 (26 before both; 30
    since a bulk-copy producer's issue holds no waits: ws_tma p2 at intensity 8, 9% under at 3-8 stages and within 1%
    at 2 on an issue of 851 ns that was its consumers' period, is 15% under at 3-8 on its 258 ns at intensity 0)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile2048_128threads.json"
    result, compute, overheads = plan_file.load(data)
    assert (result.tile, result.threads, result.blocks_per_sm) == (2048, 128, 1)
    _, rows = model_check.check(result, compute, overheads, plan_file.load_memory(data).curve)
    planner, within10, within25, pairs = model_check.summary_counts(rows)
    assert pairs == 48 and planner >= 44 and within10 >= 30 and within25 >= 47


def test_at_small_tiles_the_planner_keeps_the_curves_bytes_in_flight_where_it_costs_no_occupancy():
    """The recorded H200 run at tile 1024 floats x 256 threads, one block per SM (2026-12-03): 8 stages (32 KiB in
    flight) were the best or within 5% of it for every pair, where the simulator put 3-5 within 2% of its best; the
    planner's picks from the simulator alone were within 5% for 37 of 48 pairs. Keeping the curve's bytes in flight
    where a deeper pipeline keeps the blocks per SM: 48 of 48."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile1024.json"
    result, compute, overheads = plan_file.load(data)
    assert (result.tile, result.threads, result.blocks_per_sm) == (1024, 256, 1)
    _, rows = model_check.check(result, compute, overheads, plan_file.load_memory(data).curve)
    assert model_check.summary_counts(rows)[0] >= 46
    assert all(r.recommended == 8 for r in rows if r.label.startswith("ldgsts"))


@pytest.mark.parametrize("name, regime, planner_at_least", [
    ("h200_plan_tile2048_2blocks_rule.json", (2048, 256, 2), 46),
    ("h200_plan_tile4096_128threads_2blocks_rule.json", (4096, 128, 2), 48),
])
def test_two_fresh_held_out_regimes_meet_the_planners_goal(name, regime, planner_at_least):
    """Fresh H200 runs (2026-12-03) of two two-block regimes the memory curve never saw, with the free-buffer rule's
    picks in the sweep: the planner within 5% of the best for 46 and 48 of 48 pairs (the goal is 95%, 46 of 48)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    assert (result.tile, result.threads, result.blocks_per_sm) == regime
    fit = plan_file.load_memory(data)
    assert not model_check.in_calibration(result, {c.regime for c in fit.fitted})
    _, rows = model_check.check(result, compute, overheads, fit.curve)
    assert not model_check.unmeasured_picks(result, rows)
    planner, _, _, pairs = model_check.summary_counts(rows)
    assert pairs == 48 and planner >= planner_at_least


@pytest.mark.parametrize("name, regime, planner_at_least, simulator_at_least", [
    ("h100_plan_tile1024_64threads_2blocks.json", (1024, 64, 2), 41, 37),
    ("h100_plan_tile2048_128threads_1blocks.json", (2048, 128, 1), 44, 38),
    ("h100_plan_tile4096_128threads_2blocks.json", (4096, 128, 2), 45, 39),
    ("h100_plan_tile4096_512threads_1blocks.json", (4096, 512, 1), 48, 40),
    ("h100_plan_tile8192_256threads_2blocks.json", (8192, 256, 2), 46, 40),
])
def test_another_gpu_calibrated_on_itself_held_out_regimes(name, regime, planner_at_least, simulator_at_least):
    """Fresh H100 runs (2026-12-07, `bench stream --plan --quick` after `asynccopy calibrate` on that H100; its curve:
    546 ns unloaded, 16.7 B/ns an SM) of five regimes the curve was not fitted on: the model made on the H200 holds
    on a GPU it never saw as it does there (planner 224 of 240 within 5%, simulator 194 of 240 within 10%). Each
    pick was measured; a run whose regime is among the fitted ones is not held out (the sixth recorded run)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    assert (result.tile, result.threads, result.blocks_per_sm) == regime and "H100" in result.device["name"]
    fit = plan_file.load_memory(data)
    assert "H100" in fit.curve.source and not model_check.in_calibration(result, {c.regime for c in fit.fitted})
    _, rows = model_check.check(result, compute, overheads, fit.curve)
    assert not model_check.unmeasured_picks(result, rows)
    planner, simulator, _, pairs = model_check.summary_counts(rows)
    assert pairs == 48 and planner >= planner_at_least and simulator >= simulator_at_least
    inside = Path(__file__).parents[2] / "data" / "h100_plan_tile1024_256threads_1blocks.json"
    assert model_check.in_calibration(plan_file.load(inside)[0], {c.regime for c in plan_file.load_memory(inside).fitted})


def test_one_stage_latency_follows_the_intensity_between_the_measured_ones():
    one = model_check.OneStage({0: 1000.0, 8: 600.0}, blocks=1, compute_ns={0: 100.0, 8: 900.0})
    assert one.at(0) == 1000.0 and one.at(8) == 600.0 and one.at(2) == pytest.approx(900.0)
    assert one.at(24) == 600.0 and one.at(-1) == 1000.0  # the nearest measured one outside them
    assert one.compute_at(4) == pytest.approx(500.0) and model_check.OneStage({0: 1.0}, 1).compute_at(4) == 0.0


def test_a_one_stage_loop_computes_no_faster_than_the_baseline():
    bench, compute = _synthetic_bench()
    dev = model_check.calibrated_device(bench, compute)
    one = model_check.baseline_one_stage(bench, compute)
    assert one.compute_ns == {0: compute[0]}
    sync_ms = model_check.predicted_ms(dev, 1, compute[0], bench, one_stage=one)
    assert model_check.predicted_ms(dev, 1, compute[0] / 3, bench, one_stage=one) == sync_ms  # floored at sync's
    assert model_check.predicted_ms(dev, 1, 3 * compute[0], bench, one_stage=one) > sync_ms  # more work stays
    assert model_check.predicted_ms(dev, 1, compute[0] / 3, bench) < sync_ms  # without the calibration: its own


def test_the_one_stage_loop_takes_the_baselines_latency_at_its_residency_only():
    bench, compute = _synthetic_bench()
    fit = _curve_fit()
    dev = model_check.calibrated_device(bench, compute, fit.curve)
    one = model_check.baseline_one_stage(bench, compute)
    assert one.blocks == 1 and set(one.latency_ns) == {0}  # sync ran at intensity 0 only
    sync_ms = next(r.ms for r in bench.rows if r.mechanism == "sync")
    assert model_check.predicted_ms(dev, 1, compute[0], bench, one_stage=one) == pytest.approx(sync_ms, rel=1e-6)
    curve_ms = model_check.predicted_ms(dev, 1, compute[0], bench, memory=fit.curve)
    assert model_check.predicted_ms(dev, 1, compute[0], bench, memory=fit.curve, one_stage=one) != pytest.approx(curve_ms)
    elsewhere = model_check.OneStage(one.latency_ns, blocks=2)  # a residency the baseline did not run at
    assert model_check.predicted_ms(dev, 1, compute[0], bench, memory=fit.curve, one_stage=elsewhere) == curve_ms
    assert model_check.predicted_ms(dev, 2, compute[0], bench, memory=fit.curve, one_stage=one) == \
        model_check.predicted_ms(dev, 2, compute[0], bench, memory=fit.curve)  # more stages keep the curve


@pytest.mark.parametrize("name, with_it, without_it", [
    ("h200_plan_tile16384_512threads.json", 41, 11),
    ("h200_plan_tile2048_2blocks_rule.json", 34, 8),
    ("h200_plan_default.json", 43, 43),
])
def test_one_stage_loops_on_the_baselines_latency(monkeypatch, name, with_it, without_it):
    """Recorded H200 runs (2026-12-02/03). A one-stage loop's copy latency falls as the compute grows (the SMs drift
    out of phase and the computing ones leave the memory to the loading ones): sync's fitted latency at tile 16384 x
    512 threads 3192 / 2730 / 2070 ns at intensities 0 / 2 / 8. The memory curve (fitted where every SM loads all the
    time) plus the kernel's barrier put the one-stage variants 7-49% over there; on the baseline's latency at each
    intensity the simulator is within 10% of every stage count for 36 of 48 pairs (11 on the curve), 24 (8) at tile
    2048 x 2 blocks, and the default regime does not lose (44, 43). Since a late copy holds a multi-stage loop's
    barrier and two-stage loops of computing threads take the baseline's chain: 41, 34 and 44 (43 since a bulk-copy
    producer's issue holds no waits: ws_tma p2 at 2 stages and intensity 8, -7% on the issue that held them, -11% on
    the one at intensity 0)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    curve = plan_file.load_memory(data).curve
    one = model_check.baseline_one_stage(result, compute)
    if "16384" in name:
        lat = [one.latency_ns[k] for k in sorted(one.latency_ns)]
        assert lat == sorted(lat, reverse=True) and lat[0] > 1.4 * lat[-1]
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] >= with_it
    never = model_check.OneStage(one.latency_ns, blocks=0)  # at no residency: the curve at one stage too
    monkeypatch.setattr(model_check, "baseline_one_stage", lambda *a: never)
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] <= without_it


def test_a_multi_stage_loop_shares_the_sms_compute_among_the_blocks_it_holds():
    bench, compute = _synthetic_bench()
    dev = model_check.calibrated_device(bench, compute)
    c = compute[8]
    for stages in (2, 4):  # one block an SM: traced beside a second block, it has the SM to itself
        assert model_check.predicted_ms(dev, stages, c, bench, compute_blocks=2) == \
            pytest.approx(model_check.predicted_ms(dev, stages, c / 2, bench))
        same = model_check.predicted_ms(dev, stages, c, bench)
        assert model_check.predicted_ms(dev, stages, c, bench, compute_blocks=1) == same
    # one stage: the blocks take turns (one computes while the other waits for its copy), the traced compute stays
    assert model_check.predicted_ms(dev, 1, c, bench, compute_blocks=2) == model_check.predicted_ms(dev, 1, c, bench)
    # 64 threads: two warps a block, one a sub-partition with one block or two: no faster alone
    from dataclasses import replace
    small = replace(bench, threads=64)
    assert model_check.predicted_ms(dev, 4, c, small, compute_blocks=2) == model_check.predicted_ms(dev, 4, c, small)


def test_deep_pipelines_that_hold_fewer_blocks_than_their_trace_compute_faster(monkeypatch):
    """The recorded H200 run at tile 4096 floats x 128 threads x 2 blocks per SM (2026-12-03, held out from the curve's
    fit). At 8 stages (128 KiB a block) one block fits an SM where the variants were traced at 4 with two; one block
    alone ran at 1.18x the per-SM time of two, and the simulator, computing at the traced pace, was 20-60% over at 8
    stages. With the SM's compute shared by the blocks it holds: within 10% for 23 of 48 pairs (15 without), within
    25% for 32 (19); 24 within 10% since a late copy holds a multi-stage loop's barrier."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile4096_128threads_2blocks_rule.json"
    result, compute, overheads = plan_file.load(data)
    curve = plan_file.load_memory(data).curve
    dev = model_check.calibrated_device(result, compute, curve)
    regs = model_check.registers(result)["cg"]
    assert model_check.overhead_stages(result, "cg") == 4
    assert model_check.resident_blocks(result, dev, 4, 128, regs[4]) == 2 == model_check.traced_blocks(
        result, dev, "cg", 128, regs, overheads["cg"], model_check.baseline_one_stage(result, compute))
    assert model_check.resident_blocks(result, dev, 8, 128, regs[8]) == 1
    _, rows = model_check.check(result, compute, overheads, curve)
    _, within10, within25, _ = model_check.summary_counts(rows)
    assert within10 >= 24 and within25 >= 32
    monkeypatch.setattr(model_check, "traced_blocks", lambda *a: None)  # every stage count at the traced pace
    _, rows = model_check.check(result, compute, overheads, curve)
    _, within10, within25, _ = model_check.summary_counts(rows)
    assert within10 <= 15 and within25 <= 19


@pytest.mark.parametrize("name, with_it, without_it", [
    ("h200_plan_tile4096_64threads_2blocks.json", (31, 43), (13, 25)),
    ("h200_plan_tile4096_128threads_2blocks.json", (30, 46), (24, 38)),
])
def test_fewer_blocks_than_traced_share_the_issue_among_fewer(monkeypatch, name, with_it, without_it):
    """Recorded H200 runs at tile 4096 floats x 2 blocks an SM. At 8 stages one block fits an SM where the variants
    were traced at 4 with two: the producers' traced issue (1.9-4.7 us a tile: a wait on the memory system's admission,
    which both blocks' issues shared) charged to one block alone put those stage counts 41-145% over; measured, one
    block at 8 stages ran no slower than two at 4. With the issue shared by the blocks an SM holds (model_check.
    shared_issue): within 10% of every measured stage count for 31 and 30 of 48 pairs (13 and 24 without), within 25%
    for 43 and 46 (25 and 38)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    curve = plan_file.load_memory(data).curve
    _, rows = model_check.check(result, compute, overheads, curve)
    _, within10, within25, _ = model_check.summary_counts(rows)
    assert within10 >= with_it[0] and within25 >= with_it[1]
    monkeypatch.setattr(model_check, "shared_issue", lambda ov, resident, traced: ov)
    _, rows = model_check.check(result, compute, overheads, curve)
    _, within10, within25, _ = model_check.summary_counts(rows)
    assert within10 <= without_it[0] and within25 <= without_it[1]


@pytest.mark.parametrize("name, regime, held_out, planner_at_least, within10_at_least", [
    ("h200_plan_tile8192_512threads.json", (8192, 512, 1), True, 48, 43),
    ("h200_plan_tile8192_256threads.json", (8192, 256, 1), True, 47, 46),
    ("h200_plan_tile16384_256threads.json", (16384, 256, 1), False, 48, 43),
    ("h200_plan_tile2048_512threads.json", (2048, 512, 1), True, 48, 35),
    ("h200_plan_tile4096_64threads_2blocks.json", (4096, 64, 2), True, 48, 31),
])
def test_fresh_runs_after_the_one_stage_and_shared_compute_changes(name, regime, held_out, planner_at_least,
                                                                   within10_at_least):
    """Fresh H200 runs (2026-12-04, `bench --plan --quick`, the recorded curve installed) made after one-stage loops
    took the baseline's latency and multi-stage loops shared the SM's compute: planner within 5% of the best for 48,
    47 and 48 of 48 pairs; simulator within 10% of every measured stage count 42, 38 and 34 as the run printed it,
    41, 43 and 41 with the one-stage compute floored at the baseline's (added after these runs), 43, 46 and 43 with a
    one-stage producer's handoff at the run's least (added later still). Tile 2048 x 512
    threads, run with the floor: planner 48, simulator 26 (compute-bound short tiles 10-19% over at 2-8 stages).
    Tile 4096 x 64 threads x 2 blocks: planner 48, simulator 13 (within 25%: 18 as run, 23 once the compute is
    shared by warps a sub-partition rather than by blocks; the producer kernels' traced issue of 2-4.7 us a tile
    puts 8 stages, one block an SM, 41-145% over; 31 since that issue is shared by the blocks an SM holds). Tile 2048
    x 512 threads: 35 since a late copy holds a multi-stage loop's barrier and two-stage loops of computing threads take
    the baseline's chain."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    assert (result.tile, result.threads, result.blocks_per_sm) == regime
    fit = plan_file.load_memory(data)
    assert model_check.in_calibration(result, {c.regime for c in fit.fitted}) is not held_out
    _, rows = model_check.check(result, compute, overheads, fit.curve)
    assert not model_check.unmeasured_picks(result, rows)
    planner, within10, _, pairs = model_check.summary_counts(rows)
    assert pairs == 48 and planner >= planner_at_least and within10 >= within10_at_least


def test_a_one_stage_producer_hands_off_at_the_runs_least_handoff():
    bench, compute = _synthetic_bench()
    dev = model_check.calibrated_device(bench, compute)
    slow = Overheads(150.0, 1500.0, 8, 400.0, 50.0, True, handoff_ns=600.0, issue_lo_ns=400.0)
    quick = Overheads(150.0, 1500.0, 8, 150.0, 50.0, True, handoff_ns=80.0, issue_lo_ns=150.0)
    computing = Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)
    one = model_check.baseline_one_stage(bench, compute, {"slow": slow, "quick": quick, "ldgsts": computing})
    assert one.handoff_ns == 80.0 and model_check.baseline_one_stage(bench, compute).handoff_ns is None

    def ms(stages, ov, one_stage=one):
        return model_check.predicted_ms(dev, stages, compute[0], bench, ov, 0, one_stage=one_stage)

    from dataclasses import replace
    assert ms(1, slow) == ms(1, replace(slow, handoff_ns=80.0)) < ms(1, slow, replace(one, handoff_ns=None))
    assert ms(1, replace(slow, handoff_ns=30.0)) < ms(1, slow)  # a shorter own handoff stays its own
    assert ms(2, slow) == ms(2, slow, replace(one, handoff_ns=None))  # more stages keep the traced handoff


@pytest.mark.parametrize("name, with_it, without_it", [
    ("h200_plan_tile8192_256threads.json", 46, 43),
    ("h200_plan_tile16384_512threads.json", 40, 36),
    ("h200_plan_tile1024_64threads_2blocks.json", 30, 30),
])
def test_one_stage_producers_on_the_runs_least_handoff(monkeypatch, name, with_it, without_it):
    """Recorded H200 runs (2026-12-02/04). One-stage producer loops ran at sync's pace (0.95-1.07x at tiles of 4096
    floats and more) while their handoffs, traced at 4 stages and intensity 0, read 500-635 ns for ws_ldgsts at tile
    8192 (the TMA producers of the same runs 79-92) and put those loops 12-29% over. At the run's least handoff the
    simulator is within 10% of every stage count for 46 of 48 pairs at tile 8192 x 256 (43 before), 40 at 16384 x 512
    (36), and the short tile, whose handoffs were all small, does not lose (26 and 26 then; 31 and 31 since a late copy
    holds a multi-stage loop's barrier; 30 and 30 since a bulk-copy producer's issue holds no waits)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    curve = plan_file.load_memory(data).curve
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] >= with_it
    own = model_check.baseline_one_stage
    monkeypatch.setattr(model_check, "baseline_one_stage", lambda r, c, o=None: own(r, c))
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] <= without_it


@pytest.mark.parametrize("name, regime, planner_at_least, within10_at_least", [
    ("h200_plan_tile8192_256threads_tracecost.json", (8192, 256, 1), 47, 45),
    ("h200_plan_tile8192_2blocks_tracecost.json", (8192, 256, 2), 47, 42),
    ("h200_plan_tile2048_512threads_tracecost.json", (2048, 512, 1), 48, 42),
    ("h200_plan_tile1024_128threads_2blocks.json", (1024, 128, 2), 46, 39),
    ("h200_plan_tile8192_512threads_tracecost.json", (8192, 512, 1), 48, 42),
    ("h200_plan_tile16384_512threads_tracecost.json", (16384, 512, 1), 47, 43),
    ("h200_plan_tile8192_128threads_tracecost.json", (8192, 128, 1), 45, 44),
    ("h200_plan_tile16384_256threads_tracecost.json", (16384, 256, 1), 48, 43),
])
def test_fresh_runs_with_the_traces_own_cost(name, regime, planner_at_least, within10_at_least):
    """Fresh H200 runs (2026-12-04, `bench --plan --quick`, the recorded curve installed, every regime held out from
    its fit) after a one-stage producer took the run's least handoff and bench --plan timed the trace's own cost per
    tile. Tile 8192 x 256 x 1 meets both goals (planner 47 of 48, simulator 45); 8192 x 256 x 2 the planner's (47;
    simulator 42, 45 without the trace's cost); 2048 x 512 x 1 the planner's (48; simulator 38, 27 without);
    1024 x 128 x 2 the planner's (46; simulator 18); 8192 x 512 x 1 (48; 42: two-stage producers at intensity 8
    12-18% under) and 16384 x 512 x 1 (47; 43, 41 without the trace's cost) the planner's. A later pair of runs
    (2026-12-04, same build): 8192 x 128 x 1 the simulator's (44; planner 45: computing-thread LDGSTS and `cg` at
    intensity 8 run 8-10% faster at two stages than at the four planned) and 16384 x 256 x 1, a regime the curve
    was fitted on (its pairs therefore not held out), the planner's (48; simulator 43). Since a late copy holds a
    multi-stage loop's barrier and two-stage loops of computing threads take the baseline's chain: 2048 x 512 42,
    1024 x 128 x 2 39, the others unchanged."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    assert (result.tile, result.threads, result.blocks_per_sm) == regime
    fit = plan_file.load_memory(data)
    fitted_on = regime == (16384, 256, 1)  # one of the curve's fitted regimes
    assert model_check.in_calibration(result, {c.regime for c in fit.fitted}) == fitted_on
    assert sum(o.trace_ns != 0 for o in overheads.values()) == len(overheads) == 16  # timed for every variant
    _, rows = model_check.check(result, compute, overheads, fit.curve)
    assert not model_check.unmeasured_picks(result, rows)
    planner, within10, _, pairs = model_check.summary_counts(rows)
    assert pairs == 48 and planner >= planner_at_least and within10 >= within10_at_least


def test_short_tiles_are_simulated_without_the_traces_own_cost(monkeypatch):
    """At tile 2048 x 512 threads (H200, fresh) the traced costs summed to the traced launch's period, 5-14% over the
    untraced loop's (ldgsts vec16: 932 against 836 ns a tile, the trace's cost timed at 95): without taking it off
    the simulator was within 10% for 27 of 48 pairs, 38 with (36 and 42 since a late copy holds a multi-stage loop's
    barrier and two-stage loops of computing threads take the baseline's chain)."""
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / "h200_plan_tile2048_512threads_tracecost.json"
    result, compute, overheads = plan_file.load(data)
    assert 90 < overheads["ldgsts vec16 .cg"].trace_ns < 100
    curve = plan_file.load_memory(data).curve
    monkeypatch.setattr(Overheads, "untraced", lambda self: self)
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] <= 36


def test_a_two_stage_loop_of_computing_threads_runs_the_baselines_chain():
    one = model_check.OneStage({0: 1300.0, 8: 900.0}, blocks=1)
    from asynccopy.model.memory import MemoryCurve
    curve = MemoryCurve(500.0, 20.0, 1.0)  # 500 + bytes / 20
    assert one.chain_latency(None, 16 * KiB) == 1300.0  # the baseline's at intensity 0, whatever the intensity
    assert one.chain_latency(curve, 8 * KiB) == 1300.0  # the baseline's, the longer (the curve's 909.6)
    assert one.chain_latency(curve, 32 * KiB) == pytest.approx(500 + 32 * KiB / 20)  # the curve's, the longer
    # a producer warp refills on release and cuda::pipeline refills before it waits: two copies a block in flight
    assert model_check.one_copy_in_flight(None) and model_check.one_copy_in_flight(
        Overheads(100.0, 900.0, 8, 100.0, 50.0, False))
    assert not model_check.one_copy_in_flight(Overheads(100.0, 900.0, 8, 100.0, 50.0, True))
    assert not model_check.one_copy_in_flight(Overheads(100.0, 900.0, 8, 100.0, 50.0, False, issue_first=True))
    bench, compute = _synthetic_bench()
    fit = _curve_fit()
    dev = model_check.calibrated_device(bench, compute, fit.curve)
    base = model_check.baseline_one_stage(bench, compute)
    slow = model_check.OneStage({0: 5 * base.at(0)}, blocks=base.blocks)  # a chain far above the curve
    loop = Overheads(150.0, 1500.0, 8, 100.0, 50.0, False)
    producer = Overheads(150.0, 1500.0, 8, 100.0, 50.0, True, handoff_ns=50.0)

    def ms(stages, ov, one):
        return model_check.predicted_ms(dev, stages, compute[0], bench, ov, 0, fit.curve, one_stage=one)

    assert ms(2, loop, slow) > 2 * ms(2, loop, None)  # two stages of computing threads: the chain's latency
    assert ms(2, producer, slow) == ms(2, producer, None)  # a producer keeps the curve
    assert ms(3, loop, slow) == ms(3, loop, None)  # so do more stages


def _recorded(name):
    from pathlib import Path

    data = Path(__file__).parents[2] / "data" / name
    result, compute, overheads = plan_file.load(data)
    return result, compute, overheads, plan_file.load_memory(data).curve


@pytest.mark.parametrize("name, with_it, without_it", [
    ("h200_plan_default.json", 43, 34),
    ("h200_plan_tile2048_512threads_tracecost.json", 42, 29),
])
def test_two_stage_loops_of_computing_threads_on_the_baselines_chain(monkeypatch, name, with_it, without_it):
    """Recorded H200 runs (2026-12-03/04). A two-stage loop whose computing threads issue the next tile after their wait
    keeps one copy a block in flight: at intensity 0 its period measured the baseline's one-stage latency + 40-80 ns
    in every regime where it is latency-bound, while the curve's latency at the blocks' one tile each (the barrier
    inside it) was 7-11% under at tile 4096 x 256 threads and 2048 x 512. On the larger of the two the simulator is
    within 10% of every stage count for 44 and 42 of 48 pairs; on the curve's alone 34 and 29 (43 and 34 at tile 4096
    since a bulk-copy producer's issue holds no waits)."""
    result, compute, overheads, curve = _recorded(name)
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] >= with_it
    monkeypatch.setattr(model_check, "one_copy_in_flight", lambda ov: False)  # every two-stage loop on the curve
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] <= without_it


@pytest.mark.parametrize("name, with_it, without_it", [
    ("h200_plan_tile1024_128threads_2blocks.json", 42, 20),
    ("h200_plan_tile1024.json", 30, 4),
])
def test_a_late_copy_holds_the_barrier_on_recorded_runs(monkeypatch, name, with_it, without_it):
    """Recorded H200 runs at tile 1024 (2026-12-03/04). The two-stage loops of computing threads at intensity 0-2 ran
    at the curve's latency for the blocks' one tile each (722 ns a tile against 714 at 256 threads, 870 against 869 at
    128 threads x 2 blocks), where the simulator added the barrier traced with the data there (94-170 ns) after the
    copy landed: 11-18% over. With the barrier inside a late copy's latency: within 10% of every stage count for 39
    and 29 of 48 pairs, 18 and 4 without (42 and 30, 20 and 4 since a bulk-copy producer's issue holds no waits)."""
    from asynccopy.model import simulate

    result, compute, overheads, curve = _recorded(name)
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] >= with_it
    monkeypatch.setattr(simulate._Run, "_begin", lambda self, ready, b: max(ready, self.last_end[b]) + self.c.barrier_ns)
    _, rows = model_check.check(result, compute, overheads, curve)
    assert model_check.summary_counts(rows)[1] <= without_it


def test_a_bulk_copy_producers_issue_holds_no_waits():
    """A TMA producer's issue traced at the high intensity that reaches its consumers' compute + gap there is the
    spacing of its waits for their buffers: the check takes its issue at intensity 0 (one instruction a tile)."""
    waited = Overheads(150.0, 1300.0, 8, 4000.0, 250.0, True, handoff_ns=80.0, issue_lo_ns=250.0)
    busy = replace(waited, issue_ns=1000.0)  # under the period of 1550 ns: a producer that did not wait
    ops = {"tma": "UBLKCP", "tensor": "UTMALDG", "ldgsts": "LDGSTS"}
    out = model_check.bulk_issue({"tma": waited, "tensor": waited, "ldgsts": waited}, ops)
    assert out["tma"].issue_ns == out["tensor"].issue_ns == 250.0
    assert out["tma"].issue_at(8) == 250.0 and out["tma"].compute_hi == 1300.0
    assert out["ldgsts"] == waited  # an LDGSTS producer's issue is a tile's worth of instructions: kept
    assert model_check.bulk_issue({"tma": busy}, ops)["tma"] == busy
    threads = replace(waited, producer=False)  # computing threads' issue is not a producer's spacing
    assert model_check.bulk_issue({"tma": threads}, ops)["tma"] == threads


@pytest.mark.parametrize("name, sim_with, sim_without, plan_with, plan_without", [
    ("h200_plan_tile1024_128threads_2blocks.json", 42, 39, 46, 46),
    ("h200_plan_tile4096_512threads_2blocks.json", 30, 30, 48, 46),
])
def test_bulk_copy_producers_issue_on_recorded_runs(monkeypatch, name, sim_with, sim_without, plan_with,
                                                     plan_without):
    """Recorded H200 runs (development half). At tile 1024 x 128 threads x 2 blocks the TMA producers' issue traced at
    intensity 8 read 830-870 ns a tile against a period of 670-750 (250-270 at intensity 0), and their deep pipelines
    came out producer-paced, 13-20% over; at tile 4096 x 512 threads x 2 blocks tma_1d_pipeline and ws_tma p1 read
    3.9 and 4.7 us, and the planner gave them one stage where four are 1.3x faster (the simulator there: 25 within
    10% with it, 24 without; 30 and 30 since the issue is shared by the blocks an SM holds, model_check.shared_issue,
    which the planner does not see: it still needs this, 48 against 46)."""
    result, compute, overheads, curve = _recorded(name)
    _, rows = model_check.check(result, compute, overheads, curve)
    planner_ok, within10, _, _ = model_check.summary_counts(rows)
    assert within10 >= sim_with and planner_ok >= plan_with
    monkeypatch.setattr(model_check, "bulk_issue", lambda overheads, copy_ops: overheads)
    _, rows = model_check.check(result, compute, overheads, curve)
    planner_ok, within10, _, _ = model_check.summary_counts(rows)
    assert within10 <= sim_without and planner_ok <= plan_without
