"""The command line without a GPU: `info --arch` compiles everything; `bench` says it needs a GPU."""

import os
import re
import subprocess
import sys

import pytest

from asynccopy import cli


def test_info_with_arch_needs_no_gpu(capsys):
    assert cli.main(["info", "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "compiling every kernel for sm_90a" in out
    for name in ("sync", "sync_double", "ldgsts", "pipeline", "barrier", "cg", "primitives"):
        assert f"stream.cu {name} " in out
    for name in ("tma_1d", "tma_1d_pipeline", "tma_2d"):
        assert f"stream_tma.cu {name} " in out
    assert "tma.cu (TMA building blocks)" in out


def test_info_for_ampere_skips_tma(capsys):
    assert cli.main(["info", "--arch", "sm_80"]) == 0
    assert "stream_tma.cu tma_1d: skipped (needs CC 9.0)" in capsys.readouterr().out


def test_tensormap_check(capsys):
    assert cli.main(["tensormap", "check", "--dtype", "bf16", "--shape", "1024x1024", "--box", "64x64",
                     "--swizzle", "128B"]) == 0
    assert "ok: rank 2 bfloat16" in capsys.readouterr().out
    assert cli.main(["tensormap", "check", "--dtype", "bf16", "--shape", "1024x1024", "--box", "64x96",
                     "--swizzle", "128B"]) == 2
    err = capsys.readouterr().err
    assert "box_dim[0] (innermost) x 2 bytes = 192 exceeds the 128B swizzle span of 128 bytes" in err


def test_swizzle_command(capsys):
    assert cli.main(["swizzle", "--mode", "128B", "--box", "64x64", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "64x64 bfloat16 box" in out and "column, 16 B per lane" in out


def test_mechanisms_lists_requirements(capsys):
    assert cli.main(["mechanisms"]) == 0
    out = capsys.readouterr().out
    assert "ldgsts" in out and "CC >= 8.0" in out and "vec 4/8/16" in out


def _hidden_gpu_env():
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""  # no device visible, whether or not the machine has one
    return env


def test_bench_without_gpu_fails_in_one_line():
    done = subprocess.run([sys.executable, "-m", "asynccopy", "bench"], capture_output=True, text=True,
                          env=_hidden_gpu_env(), timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("asynccopy bench: no CUDA GPU available"), done.stderr


def test_info_without_gpu_or_arch_fails_in_one_line():
    done = subprocess.run([sys.executable, "-m", "asynccopy", "info"], capture_output=True, text=True,
                          env=_hidden_gpu_env(), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("asynccopy info: no CUDA GPU available"), done.stderr


def test_plan_command_names_the_seed_example(capsys):
    assert cli.main(["plan", "--device", "A100-40GB", "--operand", "A:128x128:f32", "--operand", "B:128x128:f32",
                     "--threads", "256", "--max-stages", "3"]) == 0
    out = capsys.readouterr().out
    assert "impossible: 2 stages need 256 KiB of shared memory; A100-40GB allows 163 KiB per block" in out
    assert "recommended: 1 stage(s)" in out


def test_simulate_command_draws_a_timeline(capsys, tmp_path):
    png = tmp_path / "t.png"
    assert cli.main(["simulate", "--stages", "3", "--compute-ns", "800", "--device", "H200", "--tiles", "8",
                     "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "load[2] |" in out and "compute |" in out and png.exists()


def test_bench_plan_refuses_contiguous_runs(capsys):
    assert cli.main(["bench", "--plan", "--tiles-per-block", "2"]) == 2
    assert "--plan models the persistent grid: leave --tiles-per-block at 0" in capsys.readouterr().err


def test_simulate_and_plan_take_the_kernels_own_costs(capsys):
    base = ["simulate", "--stages", "2", "--compute-ns", "3000", "--device", "H200", "--tiles", "8"]
    assert cli.main(base) == 0
    plain = capsys.readouterr().out
    assert cli.main(base + ["--issue-ns", "300"]) == 0
    issuing = capsys.readouterr().out
    per_tile = [float(re.search(r"per SM: (\d+) ns per tile", out).group(1)) for out in (plain, issuing)]
    assert per_tile[1] > per_tile[0] + 250  # compute-bound: the computing threads pay 300 ns per tile to issue
    latency_bound = ["simulate", "--stages", "2", "--compute-ns", "300", "--device", "H200", "--tiles", "8"]
    outs = []
    for extra in ([], ["--issue-first"]):
        assert cli.main(latency_bound + extra) == 0
        outs.append(float(re.search(r"per SM: (\d+) ns per tile", capsys.readouterr().out).group(1)))
    assert outs[1] < outs[0]  # refilling before the wait keeps both buffers in flight
    assert cli.main(["plan", "--device", "H200", "--operand", "t:4096:f32", "--threads", "288", "--compute-ns", "1200",
                     "--blocks-per-sm", "1", "--producer-warp", "--issue-ns", "50", "--handoff-ns", "300"]) == 0
    out = capsys.readouterr().out
    assert "recommended: 3 stage(s)" in out and "2 stage(s) would take" in out


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--stages", "2", "--compute-ns", "100", "--device", "H200", "--handoff-ns", "50"],
     "--handoff-ns is the producer warp's"),
    (["simulate", "--stages", "2", "--compute-ns", "100", "--device", "H200", "--issue-first", "--producer-warp"],
     "--issue-first is the computing threads' order"),
    (["plan", "--device", "H200", "--operand", "t:4096:f32", "--issue-ns", "50"], "give --compute-ns too"),
    (["bench", "--png", "x.png"], "--png draws `bench stas` or `bench --plan`"),
])
def test_cost_and_png_flags_are_checked(capsys, argv, message):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_trace_takes_the_variant_options(capsys):
    assert cli.main(["trace", "--mechanism", "ldgsts", "--producers", "2"]) == 2  # checked before any GPU use
    assert "mechanism 'ldgsts' takes no producers option" in capsys.readouterr().err


def test_shapes_on_the_command_line_are_checked(capsys):
    with pytest.raises(SystemExit):
        cli.main(["swizzle", "--box", "64xabc"])
    assert "expected a shape like 64x64, got '64xabc'" in capsys.readouterr().err
    assert cli.main(["swizzle", "--box", "8x8x8"]) == 2
    assert "--box takes rows x cols (2D), got 8x8x8" in capsys.readouterr().err
