"""The GEMM bench's arithmetic and its command's checks, without a GPU."""

import pytest

from asynccopy import cli
from asynccopy.bench import gemm_bench
from asynccopy.bench.gemm_bench import GemmBench, GemmRow


def _row(impl, ms, stages=None, shape=(4096, 4096, 4096)):
    m, n, k = shape
    return GemmRow(m, n, k, impl, "", stages, ms, 2 * m * n * k / (ms * 1e-3) / 1e12)


def test_rows_are_relative_to_the_same_shapes_cublas():
    rows = [_row("cuBLAS", 0.20), _row("wgmma", 0.25, 4), _row("wgmma", 0.22, 3), _row("Triton", 0.4, 3),
            _row("cuBLAS", 1.0, shape=(128, 8192, 8192)), _row("wgmma", 2.0, 4, shape=(128, 8192, 8192))]
    gemm_bench._relative_to_cublas(rows)
    assert [round(r.pct_cublas) for r in rows] == [100, 80, 91, 50, 100, 50]
    lines = gemm_bench.summary(GemmBench({}, "bfloat16", rows))
    assert lines[0].startswith("128x8192x8192: cuBLAS 17, wgmma 9 (50%) s4")
    assert "wgmma 625 (91%) s3" in lines[1] and "Triton 344 (50%) s3" in lines[1]  # the best of each


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "64x64"], r"a GEMM shape is MxNxK, got '64x64'"),
    (["--shapes", "0x64x64"], r"each GEMM dimension must be in \[1, 1048576\], got 0"),
    (["--dtype", "int8"], r"--dtype must be one of bfloat16, float16, float32, got 'int8'"),
    (["--kernels", "dma"], r"unknown GEMM kernel 'dma'; choose one of: wgmma, mma, simt"),
    (["--stages", "0"], r"each of --stages must be in \[1, 32\], got 0"),
])
def test_the_command_names_a_bad_argument_before_anything_runs(argv, message, capsys):
    import re

    try:
        rc = cli.main(["bench", "gemm", *argv])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    assert rc == 2
    assert re.search(message, capsys.readouterr().err)
