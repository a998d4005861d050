"""`asynccopy info` and `asynccopy mechanisms` without a GPU (asynccopy.cli.info)."""

from asynccopy import cli

STREAM_CU = ("sync", "sync_double", "ldgsts", "pipeline", "barrier", "cg", "primitives")
HOPPER = ("tma_1d", "tma_1d_pipeline", "tma_2d")


def test_info_with_arch_needs_no_gpu_and_compiles_everything(no_gpu, capsys):
    assert cli.main(["info", "--arch", "9.0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device: none asked for; compiling for sm_90a\n")
    assert "compiling every kernel for sm_90a:" in out and "skipped" not in out
    for name in STREAM_CU:
        assert f"stream.cu {name} " in out
    for name in HOPPER:
        assert f"stream_tma.cu {name} " in out
    for name in ("ws_pipeline", "ws_ldgsts", "ws_tma"):
        assert f"stream_ws.cu {name} " in out
    assert "tma.cu (TMA building blocks)" in out and "stas.cu (st.async ring)" in out and "util.cu" in out


def test_info_for_ampere_skips_what_needs_hopper(no_gpu, capsys):
    assert cli.main(["info", "--arch", "sm_80"]) == 0
    out = capsys.readouterr().out
    for name in HOPPER:
        assert f"stream_tma.cu {name}: skipped (needs CC 9.0)" in out
    assert "stream_ws.cu ws_tma: skipped (needs CC 9.0)" in out
    assert "stream_ws.cu ws_ldgsts " in out and "tma.cu (TMA" not in out and "stas.cu" not in out


def test_info_on_the_local_gpu_describes_it_and_compiles_for_its_arch(fake_a100, capsys):
    assert cli.main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("device: NVIDIA A100-SXM4-80GB (CC 8.0, sm_80), 108 SMs, 163 KiB shared memory per block "
                        "(opt-in), 164 KiB per SM, 40 MiB L2")
    assert lines[1].startswith("driver: CUDA ") and lines[2].startswith("toolchain: NVRTC ")
    assert "compiling every kernel for sm_80:" in lines


def test_info_names_the_cache_or_says_it_is_off(no_gpu, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("asynccopy.cli.info._units", lambda arch: [])  # the compiles are the tests' above
    assert cli.main(["info", "--arch", "sm_90a"]) == 0
    assert f"compile cache: {tmp_path}\n" in capsys.readouterr().out
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", "off")
    assert cli.main(["info", "--arch", "sm_90a"]) == 0
    assert "compile cache: off (ASYNCCOPY_CACHE_DIR=off)\n" in capsys.readouterr().out


def test_info_without_gpu_or_arch_fails_in_one_line(no_gpu, capsys):
    assert cli.main(["info"]) == 2
    assert capsys.readouterr().err == "asynccopy info: no CUDA GPU available (hidden by the test)\n"


def test_info_names_a_bad_arch(capsys):
    assert cli.main(["info", "--arch", "hopper"]) == 2
    assert "asynccopy info: arch must look like 'sm_90a', 'sm_80' or '9.0', got 'hopper'" in capsys.readouterr().err


def test_mechanisms_are_listed_by_family_with_what_each_needs(capsys):
    assert cli.main(["mechanisms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    groups, current = {}, None
    for line in lines:
        if not line.startswith(" "):
            current = line.rstrip(":")
            groups[current] = []
        elif not line.startswith("   "):  # a mechanism's line; its API line is indented further
            groups[current].append(line.split()[0])
    assert groups == {"sync": ["sync", "sync_double"], "cp.async": ["ldgsts", "pipeline", "barrier", "cg", "primitives"],
                      "tma": ["tma_1d", "tma_1d_pipeline", "tma_2d"],
                      "warp-specialized": ["ws_pipeline", "ws_ldgsts", "ws_tma"]}
    at = lines.index(next(x for x in lines if x.split()[:1] == ["ldgsts"]))
    assert lines[at].split(None, 1)[1] == "CC >= 8.0, 1..16 stages, vec 4/8/16 (default 16), cache ca/cg (default cg)"
    assert lines[at + 1].strip() == "inline PTX cp.async + commit_group / wait_group<N>"
