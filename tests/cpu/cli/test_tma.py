"""`asynccopy tensormap check` and `asynccopy swizzle` (asynccopy.cli.tma): no GPU needed."""

import pytest

from asynccopy import cli


def test_tensormap_check(capsys):
    assert cli.main(["tensormap", "check", "--dtype", "bf16", "--shape", "1024x1024", "--box", "64x64",
                     "--swizzle", "128B"]) == 0
    assert capsys.readouterr().out == ("ok: rank 2 bfloat16, global dims (innermost first) (1024, 1024), strides "
                                       "(2048,) B, box (64, 64) = 8192 B per load, swizzle 128B: shared destination "
                                       "1024-byte aligned\n")
    assert cli.main(["tensormap", "check", "--dtype", "bf16", "--shape", "1024x1024", "--box", "64x96",
                     "--swizzle", "128B"]) == 2
    err = capsys.readouterr().err
    assert err == ("asynccopy tensormap: box_dim[0] (innermost) x 2 bytes = 192 exceeds the 128B swizzle span of "
                   "128 bytes\n")


def test_tensormap_check_lint_and_destination(capsys):
    base = ["tensormap", "check", "--dtype", "f32", "--shape", "16x16", "--box", "32x16"]
    assert cli.main(base) == 2
    assert "box_dim[1] = 32 is larger than the tensor's global_dim[1] = 16" in capsys.readouterr().err
    assert cli.main(base + ["--no-lint"]) == 0
    capsys.readouterr()
    assert cli.main(base + ["--no-lint", "--swizzle", "64B", "--smem-offset", "256"]) == 2
    assert "a 64B-swizzled TMA shared-memory destination must be 512-byte aligned" in capsys.readouterr().err
    assert cli.main(base + ["--no-lint", "--address", "0x7f0000000008"]) == 2
    assert "global address 0x7f0000000008 must be 16-byte aligned" in capsys.readouterr().err


def test_swizzle_command(capsys):
    assert cli.main(["swizzle", "--mode", "128B", "--box", "64x64", "--dtype", "bf16", "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "64x64 bfloat16 box" in out and "column, 16 B per lane" in out
    assert "row   1:    9    8   11   10   13   12   15   14" in out


def test_shapes_on_the_command_line_are_checked(capsys):
    with pytest.raises(SystemExit):
        cli.main(["swizzle", "--box", "64xabc"])
    assert "expected a shape like 64x64, got '64xabc'" in capsys.readouterr().err
    assert cli.main(["swizzle", "--box", "8x8x8"]) == 2
    assert capsys.readouterr().err == "asynccopy swizzle: --box takes rows x cols (2D), got 8x8x8\n"
