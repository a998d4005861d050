"""`asynccopy plan | simulate | trace | model-check` without a GPU (asynccopy.cli.model)."""

import re

import pytest

from asynccopy import cli
from asynccopy.bench import report
from asynccopy.bench.stream_bench import Row, StreamBench
from asynccopy.model.costs import Overheads


def _per_tile(out):
    return float(re.search(r"per SM: (\d+) ns per tile", out).group(1))


def test_plan_command_names_the_seed_example(capsys):
    assert cli.main(["plan", "--device", "A100-40GB", "--operand", "A:128x128:f32", "--operand", "B:128x128:f32",
                     "--threads", "256", "--max-stages", "3"]) == 0
    out = capsys.readouterr().out
    assert "impossible: 2 stages need 256 KiB of shared memory; A100-40GB allows 163 KiB per block" in out
    assert "recommended: 1 stage(s)" in out


def test_plan_without_a_device_or_a_gpu_plans_for_the_h200_and_says_so(no_gpu, capsys):
    assert cli.main(["plan", "--operand", "t:4096:f32", "--blocks-per-sm", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "no local GPU: planning for the H200 (pass --device to choose)"
    assert lines[1].startswith("H200 (CC 9.0, 132 SMs") and "recommended: 4 stage(s)" in lines


def test_plan_without_a_device_plans_for_the_local_gpu(fake_a100, capsys):
    assert cli.main(["plan", "--operand", "t:4096:f32", "--blocks-per-sm", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the 80 GB part: 2039 GB/s at the 40 GB part's latency need 21.5 KiB in flight, two prefetched 16 KiB tiles
    assert lines[0].startswith("NVIDIA A100-SXM4-80GB (CC 8.0, 108 SMs") and "recommended: 3 stage(s)" in lines


def test_plan_names_a_live_name_that_is_not_a_table_name(capsys):
    assert cli.main(["plan", "--device", "NVIDIA H200", "--operand", "t:4096:f32"]) == 2
    assert "asynccopy plan: unknown device 'NVIDIA H200'; known: V100" in capsys.readouterr().err


def test_simulate_command_draws_a_timeline(capsys, tmp_path):
    png = tmp_path / "t.png"
    assert cli.main(["simulate", "--stages", "3", "--compute-ns", "800", "--device", "H200", "--tiles", "8",
                     "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("H200: 36.4 GB/s per SM, latency 1352 ns, tile 16384 B in + out, compute 800 ns per tile\n")
    assert "load[2] |" in out and "compute |" in out and f"wrote {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_takes_the_latency_and_bandwidth_asked_for(capsys):
    assert cli.main(["simulate", "--stages", "1", "--compute-ns", "100", "--device", "H200", "--tiles", "4",
                     "--latency-ns", "900", "--bandwidth-gbps", "1320", "--tile-bytes", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("H200: 10.0 GB/s per SM, latency 900 ns, tile 1000 B in + out")
    # one stage: latency 900 (the 100 ns transfer inside it) + 100 compute per tile; the last store 100 ns after
    assert _per_tile(out) == (4 * 1000 + 100) // 4


def test_simulate_without_a_device_or_a_gpu_fails_in_one_line(no_gpu, capsys):
    assert cli.main(["simulate", "--stages", "2", "--compute-ns", "100"]) == 2
    assert capsys.readouterr().err == "asynccopy simulate: no CUDA GPU available (hidden by the test)\n"


def test_simulate_and_plan_take_the_kernels_own_costs(capsys):
    base = ["simulate", "--stages", "2", "--compute-ns", "3000", "--device", "H200", "--tiles", "8"]
    assert cli.main(base) == 0
    plain = _per_tile(capsys.readouterr().out)
    assert cli.main(base + ["--issue-ns", "300"]) == 0
    issuing = _per_tile(capsys.readouterr().out)
    assert issuing > plain + 250  # compute-bound: the computing threads pay 300 ns per tile to issue
    assert cli.main(base + ["--barrier-ns", "100"]) == 0
    assert _per_tile(capsys.readouterr().out) > plain + 80
    latency_bound = ["simulate", "--stages", "2", "--compute-ns", "300", "--device", "H200", "--tiles", "8"]
    outs = []
    for extra in ([], ["--issue-first"]):
        assert cli.main(latency_bound + extra) == 0
        outs.append(_per_tile(capsys.readouterr().out))
    assert outs[1] < outs[0]  # refilling before the wait keeps both buffers in flight
    assert cli.main(["plan", "--device", "H200", "--operand", "t:4096:f32", "--threads", "288", "--compute-ns", "1200",
                     "--blocks-per-sm", "1", "--producer-warp", "--issue-ns", "50", "--handoff-ns", "300"]) == 0
    out = capsys.readouterr().out
    assert "recommended: 3 stage(s)" in out and "2 stage(s) would take" in out


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--stages", "2", "--compute-ns", "100", "--device", "H200", "--handoff-ns", "50"],
     "--handoff-ns is the producer warp's: add --producer-warp"),
    (["simulate", "--stages", "2", "--compute-ns", "100", "--device", "H200", "--issue-first", "--producer-warp"],
     "--issue-first is the computing threads' order: a producer warp refills on release"),
    (["simulate", "--stages", "2", "--compute-ns", "100", "--device", "H200", "--issue-ns", "-5"],
     "issue_ns must be a finite number of ns >= 0, got -5.0"),
    (["plan", "--device", "H200", "--operand", "t:4096:f32", "--issue-ns", "50"],
     "the kernel's costs feed the simulator: give --compute-ns too"),
    (["plan", "--device", "H200", "--operand", "t:4096:f32", "--producer-warp"],
     "the kernel's costs feed the simulator: give --compute-ns too"),
])
def test_cost_flags_are_checked(capsys, argv, message):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"asynccopy {argv[0]}: {message}\n"


@pytest.mark.parametrize("argv, message", [
    (["trace", "--mechanism", "ldgsts", "--producers", "2"], "mechanism 'ldgsts' takes no producers option"),
    (["trace", "--mechanism", "dma"], "unknown mechanism 'dma'"),
    (["trace", "--intensity", "-1"], r"intensity must be in [0, 2^31), got -1"),
])
def test_trace_checks_the_variant_before_any_gpu_use(capsys, argv, message):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def _synthetic_run(tmp_path, overheads=True):
    dev = {"name": "NVIDIA H200", "cc": [9, 0], "sm_count": 132, "smem_per_block_optin": 227 * 1024,
           "smem_per_sm": 228 * 1024, "l2_bytes": 60 << 20, "regs_per_sm": 65536, "max_threads_per_sm": 2048,
           "max_blocks_per_sm": 32, "device_id": 0}

    def row(mech, s, k, ms, op="LDGSTS"):
        return Row(mech, mech, s, None, None, op, k, ms, 8 * (1 << 28) / (ms * 1e-3) / 1e9, 50.0)

    rows = [row("sync", 1, 0, 0.736, "LDG")] + [row("ldgsts", s, 0, ms) for s, ms in ((2, 0.68), (4, 0.551))]
    payload = StreamBench(dev, 1 << 28, 4096, 256, 1, 0.504, 4261.0, rows).as_dict()
    ov = Overheads(150.0, 1500.0, 8, 120.0, 20.0, False, issue_lo_ns=60.0)
    payload["model"] = {"latency_ns": 1300.0, "compute_ns": {0: 150.0},
                        "overheads": {"ldgsts": ov.as_dict()} if overheads else {}}
    report.write(tmp_path / "run.json", payload)
    return tmp_path / "run.json"


def test_model_check_replays_a_saved_run(tmp_path, capsys):
    path = _synthetic_run(tmp_path)
    assert cli.main(["model-check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "model: bandwidth 4261 GB/s (measured copy), latency " in out and "(fitted to sync at intensity 0)" in out
    assert "  ldgsts                150 /   1500  issue    60 /   120  between    20" in out
    assert "all pairs: planned stage count within 5% of the best 1 of 1; simulator within 10% of every measured" in out
    assert cli.main(["model-check", str(path), "--sync-only"]) == 0
    out = capsys.readouterr().out
    assert "issue" not in out and "planned stage count within 5% of the best 1 of 1" in out


def test_model_check_draws_the_model(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "m.png"
    assert cli.main(["model-check", str(_synthetic_run(tmp_path)), "--png", str(png)]) == 0
    assert f"wrote {png}" in capsys.readouterr().out and png.read_bytes()[:4] == b"\x89PNG"


def test_model_check_needs_a_calibrated_file(tmp_path, capsys):
    import json

    path = _synthetic_run(tmp_path)
    data = json.loads(path.read_text())
    del data["model"]  # the sweep alone
    path.write_text(json.dumps(data))
    assert cli.main(["model-check", str(path)]) == 2
    assert "holds no model calibration: write it with `asynccopy bench --plan --json`" in capsys.readouterr().err


def test_calibrate_without_a_gpu_is_one_line(no_gpu, capsys):
    assert cli.main(["calibrate"]) == 2
    assert capsys.readouterr().err.startswith("asynccopy calibrate: no CUDA GPU available")
    assert cli.main(["calibrate", "--show", "--recalibrate"]) == 2
    assert "--show measures nothing" in capsys.readouterr().err


def test_calibrate_shows_the_cached_curve_and_plan_uses_it(fake_a100, tmp_path, monkeypatch, capsys):
    from asynccopy.model import memory

    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    assert cli.main(["calibrate", "--show"]) == 2
    assert "no memory curve is cached for this GPU: run `asynccopy calibrate`" in capsys.readouterr().err
    curve = memory.MemoryCurve(1200.0, 12.0, 1.2)
    points = [memory.Point(f"r{f} tile={f}", f * 1024, curve.latency_at(f * 1024)) for f in (4, 8, 16, 32, 64, 128)]
    memory.save(memory.fit(points, lambda p: p.regime.startswith("r16 "), source="synthetic",
                           device_key=memory.device_key(fake_a100)))
    out = tmp_path / "cal.json"
    assert cli.main(["calibrate", "--show", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "memory curve: unloaded latency 1200 ns" in text and "held out: 1 regime(s)" in text
    saved = __import__("json").loads(out.read_text())
    assert [r["regime"] for r in saved["rows"] if r["held_out"]] == ["r16 tile=16"]
    # the planner of the local GPU now models its memory with the curve
    assert cli.main(["plan", "--operand", "t:4096:f32", "--blocks-per-sm", "1"]) == 0
    assert "calibrated memory curve: unloaded latency 1200 ns" in capsys.readouterr().out
