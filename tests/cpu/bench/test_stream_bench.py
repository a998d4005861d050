"""The stream suite's arithmetic on synthetic rows (balanced intensity, speedups, the summary) and the
configurations it sweeps (asynccopy.bench.stream_bench; running it needs a GPU: tests/gpu/bench)."""

from dataclasses import replace

import pytest

from asynccopy import device, mechanism
from asynccopy.bench import stream_bench
from asynccopy.bench.stream_bench import Row, StreamBench
from asynccopy.errors import ArgumentError


def _row(mech, stages, k, ms, op="LDGSTS", label=None, producers=0):
    gbps = 2 * 4 * (1 << 28) / (ms * 1e-3) / 1e9
    return Row(mech, label or mech, stages, None, None, op, k, ms, gbps, 100 * gbps / 4000.0, producers=producers)


def _bench(rows, base="sync"):
    rows = [Row(**vars(r)) for r in rows]
    sync = {r.intensity: r.ms for r in rows if r.mechanism == base}
    for r in rows:
        r.speedup_vs_sync = sync[r.intensity] / r.ms if r.intensity in sync else None
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
    assert stream_bench.balanced_intensity(ROWS) == 8  # 1.45 / 0.70 = 2.07, nearest to 2 (1.43 at 4, 3.14 at 16)


def test_balanced_intensity_needs_sync_rows_at_zero_and_above():
    assert stream_bench.balanced_intensity([r for r in ROWS if r.mechanism != "sync"]) is None
    assert stream_bench.balanced_intensity([r for r in ROWS if not (r.mechanism == "sync" and r.intensity)]) is None
    assert stream_bench.balanced_intensity([r for r in ROWS if not (r.mechanism == "sync" and not r.intensity)]) is None


def test_summary_names_each_copy_instruction():
    lines = stream_bench.summary(_bench(ROWS))
    assert lines[0] == "device-to-device copy: 4000 GB/s (0.500 ms for 1.00 GiB read + the same written)"
    assert lines[1:5] == [
        "intensity 0, best LDGSTS: ldgsts stages=4: 3905 GB/s = 97.6% of the copy bandwidth",
        "intensity 0, best UBLKCP: barrier stages=4: 3977 GB/s = 99.4% of the copy bandwidth",
        "intensity 0, best UTMALDG: tma_2d stages=3: 3940 GB/s = 98.5% of the copy bandwidth",  # tensor copies too
        "intensity 0, best LDG   : sync_double stages=2: 3254 GB/s = 81.3% of the copy bandwidth",
    ]
    assert lines[5:] == [
        "balanced intensity 8: sync 1.450 ms = 2.07 x its intensity-0 time",
        "  best multi-stage LDGSTS: ldgsts stages=4: 0.750 ms, 1.93x sync",  # stages=1 (1.40 ms) is not multi-stage
        "  best multi-stage UBLKCP: barrier stages=4: 0.700 ms, 2.07x sync",
        "  best multi-stage UTMALDG: tma_2d stages=3: 0.690 ms, 2.10x sync",
        "  sync_double (ordinary loads staged through registers, two buffers): 0.800 ms, 1.81x sync",
    ]


def test_summary_compares_the_best_warp_specialized_variant_with_the_best_other():
    lines = stream_bench.summary(_bench(ROWS + [_row("ws_tma", 3, 8, 0.68, "UBLKCP", "ws_tma p1", 1),
                                                _row("ws_ldgsts", 3, 8, 0.71, "LDGSTS", "ws_ldgsts p2", 2)]))
    assert "  best multi-stage UBLKCP: ws_tma p1 stages=3: 0.680 ms, 2.13x sync" in lines
    assert ("  best warp-specialized: ws_tma p1 stages=3: 0.680 ms vs best other tma_2d stages=3: 0.690 ms (1.015x)"
            in lines)


def test_summary_without_a_balanced_intensity_has_only_the_copy_lines():
    lines = stream_bench.summary(_bench([r for r in ROWS if r.intensity == 0]))
    assert len(lines) == 5 and not any("balanced" in line for line in lines)


def test_summary_lines_end_with_the_baselines_name(monkeypatch):
    # the baseline is the record's: a summary names it, never a fixed "sync"
    monkeypatch.setattr(mechanism, "baseline", lambda: "sync_double")
    rows = [_row("sync_double", 2, 0, 0.5, "LDG"), _row("sync_double", 2, 4, 1.0, "LDG"), _row("ldgsts", 4, 4, 0.8)]
    lines = stream_bench.summary(_bench(rows, base="sync_double"))
    assert "balanced intensity 4: sync_double 1.000 ms = 2.00 x its intensity-0 time" in lines
    assert "  best multi-stage LDGSTS: ldgsts stages=4: 0.800 ms, 1.25x sync_double" in lines
    assert not any(line.startswith("  sync_double (") for line in lines)  # the baseline is not compared with itself


def test_configs_sweep_every_records_variants_over_the_stages():
    cfgs = stream_bench.configs(stages=(1, 2))
    assert [(c.mechanism, c.stages) for c in cfgs[:4]] == [("sync", 1), ("sync_double", 2), ("ldgsts", 1),
                                                           ("ldgsts", 2)]
    per_variant = {}
    for c in cfgs:
        per_variant.setdefault(c.label(), []).append(c.stages)
    assert per_variant["ldgsts vec4 .ca"] == [1, 2] and per_variant["sync"] == [1] and per_variant["tma_1d"] == [1]
    assert set(per_variant) == {"sync", "sync_double", "ldgsts vec16 .cg", "ldgsts vec16 .ca", "ldgsts vec8 .ca",
                                "ldgsts vec4 .ca", "pipeline", "barrier vec16", "barrier vec8", "cg", "primitives",
                                "tma_1d", "tma_1d_pipeline", "tma_2d", "ws_pipeline p2", "ws_ldgsts p1", "ws_ldgsts p2",
                                "ws_tma p1", "ws_tma p2"}


def test_configs_filter_and_fit():
    cfgs = stream_bench.configs(["sync", "ldgsts"], (1, 2, 16), smem_limit=227 * 1024, where="sm_90a")
    labels = {(c.label(), c.stages) for c in cfgs}
    assert ("sync", 1) in labels and ("ldgsts vec16 .cg", 2) in labels and ("ldgsts vec4 .ca", 1) in labels
    assert {c.mechanism for c in cfgs} == {"sync", "ldgsts"}
    assert not any(s == 16 for _, s in labels)  # 16 x 16 KiB does not fit in 227 KiB


def test_configs_for_an_arch_leave_out_what_it_cannot_run():
    ampere = {c.mechanism for c in stream_bench.configs(stages=(2,), arch="sm_80")}
    assert ampere == set(mechanism.MECHANISMS) - {"tma_1d", "tma_1d_pipeline", "tma_2d", "ws_tma"}
    assert {c.mechanism for c in stream_bench.configs(stages=(2,), arch="sm_90a")} == set(mechanism.MECHANISMS)


def test_configs_name_an_unknown_mechanism():
    with pytest.raises(ArgumentError, match=r"unknown mechanism 'dma'; choose one of: sync"):
        stream_bench.configs(["ldgsts", "dma"])


def test_configs_skip_shapes_a_family_cannot_take_unless_asked_for_by_name():
    # 1024 threads leave no room for producer warps; a 128-float tile does not split over 64 producer threads
    for kwargs in ({"threads": 1024, "tile": 4096}, {"threads": 32, "tile": 128}):
        names = {c.mechanism for c in stream_bench.configs(stages=(2,), **kwargs)}
        assert "ldgsts" in names and "ws_pipeline" not in names
    with pytest.raises(ArgumentError, match=r"'ws_tma' adds 1 producer warp\(s\)"):
        stream_bench.configs(("ws_tma",), stages=(2,), threads=1024, tile=4096)


def test_running_needs_a_gpu(monkeypatch):
    def no_gpu(device_id=None):
        raise device.DeviceError("no CUDA GPU available (hidden by the test)")

    monkeypatch.setattr(device, "current", no_gpu)
    with pytest.raises(device.DeviceError, match="no CUDA GPU available"):
        stream_bench.run(stream_bench.configs(["sync"]), (0,))


def test_as_dict_keeps_the_rows_and_the_device():
    facts = replace(device.KNOWN["H200"], device_id=0)
    result = StreamBench(facts.as_dict(), 1 << 20, 4096, 256, 1, 0.5, 4000.0, ROWS[:2])
    data = result.as_dict()
    assert data["device"]["name"] == "H200" and data["rows"][1]["intensity"] == 4 and data["copy_gbps"] == 4000.0
    assert StreamBench(**{**data, "rows": [Row(**r) for r in data["rows"]]}) == result
