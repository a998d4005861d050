"""`asynccopy bench stream | stas | chunks` without a GPU (asynccopy.cli.bench): every flag that can be
checked before the GPU is, and a missing or too old GPU is one line."""

import pytest

from asynccopy import cli
from tests.cpu.cli.conftest import run_cli


@pytest.mark.parametrize("argv, message", [
    (["bench", "--plan", "--tiles-per-block", "2"], "--plan models the persistent grid: leave --tiles-per-block at 0"),
    (["bench", "stream", "--plan", "--tiles-per-block", "2"],
     "--plan models the persistent grid: leave --tiles-per-block at 0"),
    (["bench", "--png", "x.png"], "--png draws the model check: add --plan"),
])
def test_stream_flags_are_checked_before_any_device_use(argv, message, capsys):
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"asynccopy bench: {message}\n"


@pytest.mark.parametrize("argv, flag", [
    (["bench", "--chunks", "4096"], "--chunks"),  # a suite of its own now: `bench chunks --chunks ...`
    (["bench", "stream", "--cluster-sizes", "2"], "--cluster-sizes"),  # stas options only under `bench stas`
    (["bench", "chunks", "--mechanisms", "sync"], "--mechanisms"),
    (["bench", "stas", "--size-mib", "16"], "--size-mib"),
])
def test_each_suite_takes_its_own_options(argv, flag, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2 and f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_lists_are_checked_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "stream", "--stages", "1,two"])
    assert "expected comma-separated integers, got '1,two'" in capsys.readouterr().err


@pytest.mark.parametrize("suite", [[], ["stream"], ["stas"], ["chunks"]], ids=["bench", "stream", "stas", "chunks"])
def test_without_a_gpu_each_suite_fails_in_one_line(no_gpu, suite, capsys):
    assert cli.main(["bench", *suite]) == 2
    assert capsys.readouterr().err == "asynccopy bench: no CUDA GPU available (hidden by the test)\n"


@pytest.mark.parametrize("suite", ["stas", "chunks"])
def test_the_hopper_suites_name_an_older_gpu(fake_a100, suite, capsys):
    assert cli.main(["bench", suite]) == 2
    assert capsys.readouterr().err == (f"asynccopy bench: asynccopy bench {suite} needs compute capability 9.0 or "
                                       f"newer; NVIDIA A100-SXM4-80GB is 8.0\n")


def test_a_mechanism_asked_for_by_name_says_why_it_cannot_run(fake_a100, capsys):
    # every tma_1d configuration needs compute capability 9.0: on an A100 the sweep says so, naming it
    assert cli.main(["bench", "--mechanisms", "tma_1d"]) == 2
    assert ("mechanism 'tma_1d' needs compute capability 9.0; NVIDIA A100-SXM4-80GB (sm_80) is below it"
            in capsys.readouterr().err)


def test_a_mechanism_asked_for_by_name_whose_stages_do_not_fit_says_so(fake_a100, capsys):
    assert cli.main(["bench", "--mechanisms", "ldgsts", "--stages", "16", "--tile", "16384", "--threads", "1024"]) == 2
    assert "ldgsts with 16 stage(s) x tile 16384 floats needs 1024 KiB" in capsys.readouterr().err


def test_an_unknown_mechanism_is_named_before_the_sweep(fake_a100, capsys):
    assert cli.main(["bench", "--mechanisms", "ldgsts,dma"]) == 2
    assert "asynccopy bench: unknown mechanism 'dma'; choose one of: sync" in capsys.readouterr().err


def test_bench_in_a_process_without_a_gpu_fails_in_one_line():
    done = run_cli("bench")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("asynccopy bench: no CUDA GPU available"), done.stderr


@pytest.mark.parametrize("argv, message", [
    (["bench", "--recalibrate"], "--recalibrate and --fixed-latency choose the model of --plan: add --plan"),
    (["bench", "--fixed-latency"], "--recalibrate and --fixed-latency choose the model of --plan: add --plan"),
    (["bench", "--plan", "--recalibrate", "--fixed-latency"], "--fixed-latency models without the memory curve"),
])
def test_the_memory_model_flags_need_plan(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
