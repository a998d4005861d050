"""The bench's arithmetic on synthetic rows: balanced intensity, speedups, summary, reporters."""

import csv
import json

import pytest

from asynccopy.bench import report, stream_bench
from asynccopy.bench.stream_bench import Row, StreamBench


def _row(mech, stages, k, ms, op="LDGSTS", label=None):
    gbps = 2 * 4 * (1 << 28) / (ms * 1e-3) / 1e9
    return Row(mech, label or mech, stages, None, None, op, k, ms, gbps, 100 * gbps / 4000.0)


def _bench(rows):
    sync = {r.intensity: r.ms for r in rows if r.mechanism == "sync"}
    for r in rows:
        r.speedup_vs_sync = sync[r.intensity] / r.ms
    return StreamBench({}, 1 << 28, 4096, 256, 1, 0.5, 4000.0, rows)


ROWS = [
    _row("sync", 1, 0, 0.70, "LDG"), _row("sync", 1, 4, 1.00, "LDG"), _row("sync", 1, 8, 1.45, "LDG"),
    _row("sync", 1, 16, 2.20, "LDG"),
    _row("sync_double", 2, 0, 0.66, "LDG"), _row("sync_double", 2, 8, 0.80, "LDG"),
    _row("ldgsts", 4, 0, 0.55), _row("ldgsts", 4, 8, 0.75), _row("ldgsts", 1, 8, 1.40),
    _row("barrier", 4, 8, 0.70, "UBLKCP"), _row("barrier", 4, 0, 0.54, "UBLKCP"),
    _row("tma_2d", 3, 0, 0.545, "UTMALDG"), _row("tma_2d", 3, 8, 0.69, "UTMALDG"),
]


def test_balanced_intensity_is_where_sync_doubles():
    assert stream_bench.balanced_intensity(ROWS) == 8  # 1.45 / 0.70 = 2.07, nearest to 2


def test_balanced_intensity_needs_sync_rows():
    assert stream_bench.balanced_intensity([r for r in ROWS if r.mechanism != "sync"]) is None


def test_summary_names_each_copy_instruction():
    lines = stream_bench.summary(_bench([Row(**vars(r)) for r in ROWS]))
    text = "\n".join(lines)
    assert "intensity 0, best LDGSTS: ldgsts stages=4" in text
    assert "intensity 0, best UBLKCP: barrier stages=4" in text
    assert "balanced intensity 8: sync 1.450 ms = 2.07 x its intensity-0 time" in text
    assert "best multi-stage LDGSTS: ldgsts stages=4: 0.750 ms, 1.93x sync" in text  # stages=1 is not multi-stage
    assert "best multi-stage UBLKCP: barrier stages=4: 0.700 ms, 2.07x sync" in text
    assert "sync_double (register-staged, ordinary loads): 0.800 ms, 1.81x sync" in text
    assert "intensity 0, best UTMALDG: tma_2d stages=3" in text  # TMA tensor copies are not left out
    assert "best multi-stage UTMALDG: tma_2d stages=3: 0.690 ms" in text
    assert text.index("best LDGSTS") < text.index("best UBLKCP") < text.index("best UTMALDG") < text.index("best LDG ")


def test_table_and_files(tmp_path):
    rows = ROWS[:3]
    text = report.table(rows, [("label", "mechanism", ""), ("ms", "ms", ".3f"), ("speedup_vs_sync", "x sync", ".2f")])
    lines = text.splitlines()
    assert lines[0].split() == ["mechanism", "ms", "x", "sync"] and lines[2].split() == ["sync", "0.700", "-"]
    payload = {"rows": rows, "copy_gbps": 4000.0}
    report.write(tmp_path / "r.json", payload)
    assert json.loads((tmp_path / "r.json").read_text())["rows"][1]["intensity"] == 4
    report.write(tmp_path / "r.csv", payload)
    got = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert [g["intensity"] for g in got] == ["0", "4", "8"] and "samples_ms" not in got[0]


def test_configs_filter_and_fit():
    cfgs = stream_bench.configs(["sync", "ldgsts"], (1, 2, 16), smem_limit=227 * 1024, where="sm_90a")
    labels = {(c.label(), c.stages) for c in cfgs}
    assert ("sync", 1) in labels and ("ldgsts vec16 .cg", 2) in labels
    assert not any(s == 16 for _, s in labels)  # 16 x 16 KiB does not fit in 227 KiB


def _synthetic_bench():
    dev = {"name": "NVIDIA H200", "cc": [9, 0], "arch": "sm_90a", "sm_count": 132, "smem_per_block_optin": 227 * 1024,
           "smem_per_sm": 228 * 1024, "l2_bytes": 60 << 20, "regs_per_sm": 65536, "max_threads_per_sm": 2048,
           "max_blocks_per_sm": 32, "device_id": 0}
    rows = [_row("sync", 1, 0, 0.736, "LDG")]
    for s, ms in ((2, 0.68), (3, 0.552), (4, 0.551), (8, 0.553)):
        rows.append(_row("ldgsts", s, 0, ms))
    for s, ms in ((2, 0.75), (3, 0.749), (4, 0.741), (8, 0.853)):
        rows.append(_row("ldgsts", s, 8, ms))
    return StreamBench(dev, 1 << 28, 4096, 256, 1, 0.504, 4261.0, rows), {0: 150.0, 8: 1400.0}


def test_model_check_on_synthetic_rows():
    from asynccopy.bench import model_check

    bench, compute = _synthetic_bench()
    calibrated, checked = model_check.check(bench, compute)
    # the fitted latency makes the model reproduce sync at intensity 0
    assert model_check.predicted_ms(calibrated, 1, compute[0], bench) == pytest.approx(0.736, rel=0.02)
    assert calibrated.bandwidth == pytest.approx(4261e9) and calibrated.latency_source.startswith("fitted")
    assert [(r.label, r.intensity) for r in checked] == [("ldgsts", 0), ("ldgsts", 8)]
    for r in checked:
        assert r.best_stages in (4, 2, 3, 8) and r.worst_error >= 0


def test_model_plot(tmp_path):
    from asynccopy.bench import model_check

    pytest.importorskip("matplotlib")
    bench, compute = _synthetic_bench()
    ov = {"ldgsts": model_check.Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)}
    path = model_check.plot(bench, compute, str(tmp_path / "m.png"), ov)
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("m.png")


def _trace(tiles):
    from asynccopy import trace
    from asynccopy.simulate import TileEvents

    return [trace.BlockTrace(0, [TileEvents(0, k, *t) for k, t in enumerate(tiles)], {}, 1.0)]


def test_overheads_of_threads_that_issue_their_own_copies():
    from asynccopy.bench import model_check

    # 2 stages: tile k + 1 is issued 10 ns before tile k's compute starts; computes are 15 ns apart
    starts = [1000 + 115 * k for k in range(6)]
    hi = _trace([(starts[k - 1] - 10 if k else 0, s - 1, s, s + 100) for k, s in enumerate(starts)])
    lo = _trace([(10 * k - 13 if k else 0, 0, 10 * k, 10 * k + 40) for k in range(4)])  # issues 3 ns at intensity 0
    ov = model_check.overheads_from_traces(lo, hi, stages=2, intensity_hi=24, producer=False)
    assert (ov.compute_lo, ov.compute_hi, ov.issue_ns, ov.barrier_ns) == (40, 100, 10, 5)
    assert ov.issue_lo_ns == 3 and ov.issue_at(12) == 6.5
    assert ov.compute_ns(12) == 70 and not ov.producer


def test_overheads_of_a_producer_warp():
    from asynccopy.bench import model_check

    # 3 stages: the producer fills them 30 ns apart; then computes 20 ns apart
    starts = [500 + 120 * k for k in range(8)]
    hi = _trace([(30 * k if k < 3 else s - 200, s - 1, s, s + 100) for k, s in enumerate(starts)])
    ov = model_check.overheads_from_traces(hi, hi, stages=3, intensity_hi=8, producer=True)
    assert (ov.issue_ns, ov.barrier_ns, ov.producer) == (30, 20, True)
    assert ov.handoff_ns == 120 * 3 - 200 - 100  # tile k + 3 issued 200 ns before its compute, 3 computes on


def test_overheads_of_a_producer_that_falls_behind():
    from asynccopy.bench import model_check

    # 2 stages; the producer issues a tile every 300 ns (100 at intensity 0), never waiting for a
    # buffer: its spacing is its cost, and it was never idle when a buffer came free (no handoff)
    def run(spacing, compute):
        return _trace([(spacing * k, spacing * k + 50, spacing * k + 60, spacing * k + 60 + compute) for k in range(20)])

    ov = model_check.overheads_from_traces(run(100, 20), run(300, 100), stages=2, intensity_hi=24, producer=True,
                                           issue_first=False)
    assert (ov.issue_lo_ns, ov.issue_ns, ov.handoff_ns, ov.barrier_ns) == (100, 300, 0, 200)
    assert ov.issue_at(12) == 200 and ov.costs(12)["issue_ns"] == 200 and ov.costs(24)["issue_ns"] == 300
    assert ov.costs(0) == {"issue_ns": 100, "barrier_ns": 200, "producer": True, "handoff_ns": 0, "issue_first": False}


def test_handoff_is_measured_where_the_producer_waits_briefly():
    from asynccopy.bench import model_check

    # 2 stages; the producer refills a buffer 30 ns after its release at intensity 0, 500 ns after it
    # at the top (it waited a whole compute there): the two-stage critical path sees the first
    def run(period, compute, handoff):
        tiles = []
        for k in range(12):
            start = period * k + 60
            issued = (0, 10)[k] if k < 2 else period * (k - 2) + 60 + compute + handoff
            tiles.append((issued, start - 1, start, start + compute))
        return _trace(tiles)

    ov = model_check.overheads_from_traces(run(200, 100, 30), run(1100, 1000, 500), stages=2, intensity_hi=24,
                                           producer=True)
    assert ov.issue_ns == ov.issue_lo_ns == 10 and ov.handoff_ns == 30


def test_issue_first_kernels_time_their_issue_where_the_data_is_there():
    from asynccopy.bench import model_check

    # cuda::pipeline's order: `issued` of tile k + 1, then the wait for tile k, then its compute; at
    # intensity 0 the wait (300 ns) falls inside that span, at the top the data is there (10 ns)
    def run(period, wait):
        return _trace([(period * (k - 1) + 50 if k else 0, period * k + 49, period * k + 50 + wait,
                        period * k + 100 + wait) for k in range(10)])

    ov = model_check.overheads_from_traces(run(400, 300), run(400, 10), stages=2, intensity_hi=24, producer=False,
                                           issue_first=True)
    assert ov.issue_lo_ns == ov.issue_ns == 10 and ov.issue_first


def test_an_old_calibration_without_issue_at_intensity_0_keeps_one_issue_time():
    from asynccopy.bench import model_check

    ov = model_check.Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)
    assert ov.issue_at(0) == ov.issue_at(8) == 120.0 and not ov.issue_first


def test_overheads_need_enough_traced_tiles():
    from asynccopy.bench import model_check
    from asynccopy.errors import ArgumentError

    few = _trace([(0, 1, 2, 3), (1, 4, 5, 6)])
    with pytest.raises(ArgumentError, match="trace more tiles per block"):
        model_check.overheads_from_traces(few, few, stages=4, intensity_hi=8, producer=False)


def test_model_check_command_replays_a_saved_run(tmp_path, capsys):
    from asynccopy import cli
    from asynccopy.bench import model_check

    bench, compute = _synthetic_bench()
    payload = bench.as_dict()
    ov = model_check.Overheads(150.0, 1500.0, 8, 120.0, 20.0, False)
    payload["model"] = {"latency_ns": 1300.0, "compute_ns": compute, "overheads": {"ldgsts": ov.as_dict()}}
    report.write(tmp_path / "run.json", payload)
    result, got_compute, got_ov = model_check.load(tmp_path / "run.json")
    assert got_compute == compute and got_ov == {"ldgsts": ov} and len(result.rows) == len(bench.rows)
    assert cli.main(["model-check", str(tmp_path / "run.json")]) == 0
    out = capsys.readouterr().out
    assert "ldgsts" in out and "issue   120" in out and "planned stage count within 5% of the best" in out
    assert cli.main(["model-check", str(tmp_path / "run.json"), "--sync-only"]) == 0
    assert "issue" not in capsys.readouterr().out


def test_model_check_command_needs_a_calibrated_file(tmp_path, capsys):
    from asynccopy import cli

    bench, _ = _synthetic_bench()
    report.write(tmp_path / "sweep.json", bench.as_dict())
    assert cli.main(["model-check", str(tmp_path / "sweep.json")]) == 2
    assert "holds no model calibration" in capsys.readouterr().err


def test_model_check_load_names_unreadable_and_foreign_files(tmp_path):
    from asynccopy.bench import model_check
    from asynccopy.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"cannot read .*missing.json"):
        model_check.load(tmp_path / "missing.json")
    (tmp_path / "stas.json").write_text(json.dumps({"rows": [{"cluster": 2}], "model": {"compute_ns": {}}}))
    with pytest.raises(ArgumentError, match=r"is not a `bench --plan --json` file of this version"):
        model_check.load(tmp_path / "stas.json")


def test_model_plot_needs_matplotlib(monkeypatch, tmp_path):
    import sys

    from asynccopy.bench import model_check
    from asynccopy.errors import ArgumentError

    bench, compute = _synthetic_bench()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ArgumentError, match="drawing a PNG needs matplotlib"):
        model_check.plot(bench, compute, str(tmp_path / "m.png"))


def test_a_calibration_from_before_issue_first_takes_the_mechanisms_order(tmp_path):
    from asynccopy.bench import model_check

    bench, compute = _synthetic_bench()
    bench.rows += [_row("pipeline", s, 0, ms) for s, ms in ((2, 0.57), (4, 0.56))]
    payload = bench.as_dict()
    old = {"compute_lo": 150.0, "compute_hi": 1500.0, "intensity_hi": 8, "issue_ns": 120.0, "barrier_ns": 20.0,
           "producer": False, "handoff_ns": 0.0}  # the fields of the previous version
    payload["model"] = {"compute_ns": compute, "overheads": {"pipeline": old, "ldgsts": old}}
    report.write(tmp_path / "old.json", payload)
    _, _, ov = model_check.load(tmp_path / "old.json")
    assert ov["pipeline"].issue_first and not ov["ldgsts"].issue_first and ov["pipeline"].issue_lo_ns is None

