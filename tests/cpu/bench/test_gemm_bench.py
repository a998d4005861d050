"""The GEMM bench's arithmetic and its command's checks, without a GPU."""

import pytest

from asynccopy import cli, device, matmul
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
    (["--rounds", "0"], r"--rounds must be in \[1, 1000\], got 0"),
    (["--plan", "--stages", "3"], r"--plan checks the model's stage count against a sweep: give --stages two or more"),
    (["--layout", "nx"], r"argument --layout: invalid choice: 'nx'"),
])
def test_the_command_names_a_bad_argument_before_anything_runs(argv, message, capsys):
    import re

    try:
        rc = cli.main(["bench", "gemm", *argv])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    assert rc == 2
    assert re.search(message, capsys.readouterr().err)


def test_the_bench_names_a_bad_layout_before_looking_for_a_gpu():
    from asynccopy.errors import ArgumentError

    with pytest.raises(ArgumentError, match=r"layout must be one of nn, nt, tn, tt, got 'xt'"):
        gemm_bench.run(layout="xt")


def test_the_plan_check_sets_the_models_stage_count_against_the_sweep():
    from asynccopy import device, gemm_kernels

    facts = device.lookup("H200")
    shape = (8192, 8192, 8192)
    # the measured shape of the H200 run: 2 stages starve the tensor cores, 3 are the best, 4 a little slower
    rows = [_row("wgmma", ms, s, shape) for s, ms in ((2, 2.35), (3, 1.36), (4, 1.45))]
    rows += [_row("cuBLAS", 1.37, shape=shape), _row("mma", 3.8, 4, shape)]  # one stage count: nothing to check
    for r in rows:
        r.config = "tile 128x256 stream-K" if r.impl == "wgmma" else ""
    plans = gemm_bench.plan_check(GemmBench(facts.as_dict(), "bfloat16", rows), memory=None)
    assert len(plans) == 1
    p = plans[0]
    rec = gemm_kernels.KERNELS["wgmma"]
    per_sm = gemm_kernels.k_blocks_per_sm(rec, (128, 256), *shape, facts.sm_count)
    # 2048 tiles / 132 SMs: 15 whole tiles each and a 1 / 132 share of the last 68 tiles' k-blocks (16 tiles without)
    assert per_sm == 15 * 128 + -(-68 * 128 // 132) and p.k_block_ns == pytest.approx(1.36e6 / per_sm)
    assert gemm_kernels.k_blocks_per_sm(rec, (128, 256), *shape, facts.sm_count, stream_k=False) == 16 * 128
    for r in rows:
        r.config = "tile 128x256" if r.impl == "wgmma" else ""
    dp = gemm_bench.plan_check(GemmBench(facts.as_dict(), "bfloat16", rows), memory=None)[0]
    assert dp.k_block_ns == pytest.approx(1.36e6 / (16 * 128))  # the rows' own configuration, not the default's
    want = gemm_kernels.plan_stages(rec, (128, 256), "bfloat16", facts, k_block_ns=p.k_block_ns, memory=None)
    assert p.planned == want.recommended and 3 <= p.planned <= 4  # never the starving 2
    assert p.best_stages == 3 and p.ratio == pytest.approx({3: 1.0, 4: 1.45 / 1.36}[p.planned])


def test_the_gemm_plan_covers_a_loads_latency_with_k_blocks_in_flight():
    from asynccopy import device, gemm_kernels

    facts = device.lookup("H200")
    rec = gemm_kernels.KERNELS["wgmma"]
    slow = gemm_kernels.plan_stages(rec, (128, 128), "bfloat16", facts, k_block_ns=4 * facts.latency_ns, memory=None)
    fast = gemm_kernels.plan_stages(rec, (128, 128), "bfloat16", facts, k_block_ns=facts.latency_ns / 4, memory=None)
    assert slow.recommended == 2  # a k-block's compute outlasts a load: double buffering is enough
    assert fast.recommended >= 5  # four k-blocks per latency: 4 or more in flight, as many as fit
    assert fast.recommended <= rec.max_stages((128, 128), facts.smem_per_block_optin)


def test_the_plot_has_a_panel_per_shape(tmp_path):
    pytest.importorskip("matplotlib")
    from asynccopy import plotting

    rows = [_row("cuBLAS", 0.20), _row("wgmma", 0.25, 4), _row("wgmma", 0.22, 3),
            _row("cuBLAS", 1.0, shape=(128, 8192, 8192)), _row("wgmma", 2.0, 4, shape=(128, 8192, 8192))]
    path = tmp_path / "gemm.png"
    assert gemm_bench.plot(GemmBench({"name": "H200"}, "bfloat16", rows), str(path)) == str(path)
    assert path.stat().st_size > 1000
    plt = plotting.pyplot()
    fig, axes = plotting.panel_grid(plt, 5, 3)
    assert axes.shape == (2, 3)  # 5 panels, 3 a row; the sixth is blanked by finish_panels
    for ax in list(axes.flat)[:5]:
        ax.plot([1, 2], [3, 4], label="wgmma")
    plotting.finish_panels(plt, fig, axes, 5, "t", str(tmp_path / "p.png"), xlabel="stages")
    assert not axes.flat[5].axison and axes.flat[4].axison and axes.flat[0].get_xlabel() == "stages"


def test_a_kernel_row_names_its_tile_split_and_pairs():
    from asynccopy.bench.gemm_bench import config_label
    from asynccopy.matmul import Matrix

    facts = device.lookup("H200")

    def m(rows, cols):
        return Matrix(None, 1 << 30, rows, cols, cols, 1, "bfloat16", 0)

    assert config_label(matmul.configure(m(3000, 7000), m(7000, 5000), "bfloat16", facts)) == "tile 128x256 pairs"
    assert config_label(matmul.configure(m(2048, 2048), m(2048, 2048), "bfloat16", facts)) == "tile 128x256"
    assert config_label(matmul.configure(m(4096, 4096), m(4096, 4096), "bfloat16", facts)) == "tile 128x256 pairs"
    assert config_label(matmul.configure(m(8192, 8192), m(8192, 8192), "bfloat16", facts)) == \
        "tile 128x256 pairs stream-K"
    assert config_label(matmul.configure(m(8192, 8192), m(8192, 8192), "bfloat16", facts, tile=(128, 128))) == \
        "tile 128x128 stream-K"
    split = matmul.configure(m(256, 16384), m(16384, 256), "bfloat16", facts)
    assert split.splits > 1 and config_label(split) == f"tile {split.tile[0]}x{split.tile[1]} x{split.splits}"
