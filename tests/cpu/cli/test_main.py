"""`asynccopy` itself (asynccopy.cli): the parser built per command module, the default suite, --version,
--debug, and what an error looks like: one line on stderr, exit 2 for ours, 1 for an unexpected one."""

import os
import sys

import pytest

from asynccopy import __version__, cli
from asynccopy.cli import bench, info, model, tma
from tests.cpu.cli.conftest import hidden_gpu_env


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"asynccopy {__version__}"


def test_every_command_is_built_by_its_module():
    sub = next(a for a in cli.parser()._actions if a.dest == "command")
    owners = {name: p._defaults["fn"].__module__ for name, p in sub.choices.items() if "fn" in p._defaults}
    assert owners == {"info": info.__name__, "mechanisms": info.__name__, "plan": model.__name__,
                      "simulate": model.__name__, "trace": model.__name__, "model-check": model.__name__,
                      "calibrate": model.__name__,
                      "swizzle": tma.__name__}
    assert set(sub.choices) == set(owners) | {"bench", "tensormap"}  # the two with subcommands of their own


@pytest.mark.parametrize("argv, suite, fn", [
    (["bench"], "stream", bench.cmd_stream),
    (["bench", "--quick", "--mechanisms", "sync,ldgsts"], "stream", bench.cmd_stream),
    (["bench", "stream", "--quick"], "stream", bench.cmd_stream),
    (["bench", "stas", "--cluster-sizes", "2,4"], "stas", bench.cmd_stas),
    (["bench", "chunks", "--chunks", "4096"], "chunks", bench.cmd_chunks),
])
def test_bench_alone_is_the_stream_suite(argv, suite, fn):
    args = cli.parser().parse_args(cli._with_default_suite(argv))
    assert (args.command, args.suite, args.fn) == ("bench", suite, fn)


def test_bench_help_is_the_bench_commands_own(capsys):
    for flag in ("-h", "--help"):
        with pytest.raises(SystemExit):
            cli.main(["bench", flag])
        out = capsys.readouterr().out
        assert "{stream,stas,chunks,gemm,attention}" in out and "--quick" not in out  # not `bench stream`'s help


def test_a_bad_argument_is_argparses_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["nonsense"])
    assert done.value.code == 2 and "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_our_error_is_one_line_and_exit_2(capsys):
    assert cli.main(["plan", "--device", "MI300X", "--operand", "t:4096:f32"]) == 2
    err = capsys.readouterr().err
    assert err == "asynccopy plan: unknown device 'MI300X'; known: V100, A100-40GB, A100-80GB, H100-SXM, H100-PCIe, " \
                  "H200, L40S, RTX4090\n"


def _explode(args):
    raise ZeroDivisionError("a bug of ours\nwith a second line")


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(info, "cmd_mechanisms", _explode)
    assert cli.main(["mechanisms"]) == 1
    assert capsys.readouterr().err == ("asynccopy mechanisms: unexpected ZeroDivisionError: a bug of ours (--debug shows "
                                       "the traceback)\n")


def test_debug_shows_the_traceback_of_an_unexpected_error(monkeypatch):
    monkeypatch.setattr(info, "cmd_mechanisms", _explode)
    with pytest.raises(ZeroDivisionError, match="a bug of ours"):
        cli.main(["--debug", "mechanisms"])


def test_an_interrupt_is_exit_130(monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(info, "cmd_mechanisms", interrupted)
    assert cli.main(["mechanisms"]) == 130


def test_a_reader_that_leaves_early_is_no_error(tmp_path):
    # `asynccopy mechanisms | head -1`: stdout is a pipe whose reader has gone
    import subprocess

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "asynccopy", "mechanisms"], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=hidden_gpu_env(), timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")
