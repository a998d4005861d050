"""The command line without a GPU: `info --arch` compiles everything; `bench` says it needs a GPU."""

import os
import subprocess
import sys

from asynccopy import cli


def test_info_with_arch_needs_no_gpu(capsys):
    assert cli.main(["info", "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "compiling every kernel for sm_90a" in out
    for name in ("sync", "sync_double", "ldgsts", "pipeline", "barrier", "cg", "primitives"):
        assert f"stream.cu {name} " in out


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
