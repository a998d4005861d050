"""scripts/attention_variants.py without a GPU: a variant's -D macros replace the problem's own knobs or (with '+')
go on top of them; a source copy of the kernel is built with the problem's knobs under its own name; bad arguments
are refused by name."""

from pathlib import Path

import pytest

from asynccopy import device
from asynccopy.errors import ArgumentError
from asynccopy.sdpa import KERNELS, Problem
from tests.cpu import scripts

H200 = device.lookup("H200")


def _script():
    return scripts.load("attention_variants")


def test_a_variant_replaces_the_problems_knobs_unless_it_starts_with_a_plus():
    av = _script()
    assert av.parse_variant("base:+") == ("base", (), {"extend": "1"})
    assert av.parse_variant("bare") == ("bare", (), {})
    name, macros, launch = av.parse_variant("r0:+ASYNCCOPY_ATTN_RING=0,stages=2")
    assert (name, macros, launch) == ("r0", (("ASYNCCOPY_ATTN_RING", "0"),), {"extend": "1", "stages": "2"})
    for bad in (":+X=1", "v:X", "v:X=", "v:=1"):
        with pytest.raises(ArgumentError, match="--variant"):
            av.parse_variant(bad)
    p = Problem(4, 16, 16, 2048, 2048, 64, "bfloat16")
    got = dict(av.configs(p, False, H200, "wgmma", [av.parse_variant(v) for v in
                                                     ("base:+", "bare", "r0:+ASYNCCOPY_ATTN_RING=0,stages=2")]))
    own = dict(got["base"].defines)
    assert own["ASYNCCOPY_ATTN_PERSISTENT"] == 1 and not got["bare"].persistent
    assert got["bare"].defines == ((av.VARIANT_TAG, 0),)  # built and launched apart from asynccopy.attention's own
    assert dict(got["r0"].defines) == {**own, "ASYNCCOPY_ATTN_RING": "0"} and got["r0"].stages == 2
    assert got["base"].stages == KERNELS["wgmma"].default_stages[0]


def test_a_source_copy_is_built_with_the_problems_knobs_under_its_own_name(tmp_path):
    av = _script()
    copy = tmp_path / "before.cu"
    copy.write_text((Path(av.__file__).parent.parent / "asynccopy" / "kernels" / "attention_wgmma.cu").read_text())
    try:
        av.add_source("before", str(copy), "wgmma")
        assert KERNELS["before"].source == str(copy.resolve()) and KERNELS["before"].template == \
            KERNELS["wgmma"].template
        p = Problem(1, 2, 2, 300, 300, 128, "bfloat16")
        (name, cfg), = av.configs(p, True, H200, "wgmma", [], ["before"])
        base = av.configs(p, True, H200, "wgmma", [av.parse_variant("base:+")])[0][1]
        assert name == "before" and cfg.kernel == "before" and cfg.defines == base.defines
        assert "attention_wgmma<" in cfg.name_expression()
        with pytest.raises(ArgumentError, match="already a kernel's name"):
            av.add_source("before", str(copy), "wgmma")
        with pytest.raises(ArgumentError, match="no such file"):
            av.add_source("other", str(tmp_path / "missing.cu"), "wgmma")
    finally:
        KERNELS.pop("before", None)


def test_warm_compiles_every_build_once_in_other_processes_into_the_cache_the_run_reads(tmp_path, monkeypatch):
    """--warm N (build.compile_many of the configurations' compile_job): the builds of every variant and source copy
    compiled in N spawned processes into the disk cache, each distinct build once; the timed run's own compile is
    then a cache hit. A build that cannot compile fails the warm-up."""
    from dataclasses import replace

    from asynccopy import build

    av = _script()
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "before.cu"  # another text than the kernel's (a cubin is cached by its source text)
    copy.write_text((Path(av.__file__).parent.parent / "asynccopy" / "kernels" / "attention_mma.cu").read_text()
                    + "// an earlier revision\n")
    try:
        av.add_source("before", str(copy), "mma")
        p = Problem(1, 2, 2, 300, 300, 64, "bfloat16")
        variants = [av.parse_variant(v) for v in ("base:+", "again:+", "bm64:+ASYNCCOPY_ATTN_MMA_MW=1,"
                                                                       "ASYNCCOPY_ATTN_MMA_BM=64")]
        cfgs = [cfg for _, cfg in av.configs(p, True, H200, "mma", variants, ["before"])]
        build.clear_memory_cache()
        # base and again build the same; the copy builds apart
        assert build.compile_many([c.compile_job("sm_90a") for c in cfgs], 2) == 3
        build.clear_memory_cache()
        assert [cfg.compile("sm_90a").source for cfg in cfgs] == ["disk cache", "memory cache", "disk cache",
                                                                  "disk cache"]
        assert len(list((tmp_path / "cache").glob("*.cubin"))) == 3
        bad = replace(cfgs[0], defines=(("ASYNCCOPY_ATTN_MMA_BM", 96),))
        with pytest.raises(build.CompileError, match="64 or 128 queries a block"):
            build.compile_many([bad.compile_job("sm_90a")], 1)
    finally:
        KERNELS.pop("before", None)


def test_a_copy_of_the_mma_kernel_launches_as_the_mma_kernel(tmp_path):
    """A source copy of attention_mma.cu (its template) takes the mma kernel's rows a warp, block height and Q's
    buffer from the knobs, as the kernel builds them: a copy built with another MW than the launch assumes would
    run half its rows with the wrong block."""
    av = _script()
    copy = tmp_path / "mma_before.cu"
    copy.write_text((Path(av.__file__).parent.parent / "asynccopy" / "kernels" / "attention_mma.cu").read_text())
    try:
        av.add_source("mma_before", str(copy), "mma")
        for d, causal in ((64, False), (128, True)):
            p = Problem(1, 2, 2, 300, 300, d, "bfloat16")
            (_, cfg), = av.configs(p, causal, H200, "mma", [], ["mma_before"])
            base = av.configs(p, causal, H200, "mma", [av.parse_variant("base:+")])[0][1]
            assert (cfg.threads, cfg.tile, cfg.smem_bytes) == (base.threads, base.tile, base.smem_bytes)
            assert cfg.compile_job("sm_90a")[1]["defines"] == base.compile_job("sm_90a")[1]["defines"]
    finally:
        KERNELS.pop("mma_before", None)


def test_a_copy_from_before_a_knob_builds_and_launches_without_it(tmp_path, monkeypatch):
    """A source copy takes only the problem's knobs its file reads: a copy of attention_mma.cu from before its block
    height was a knob (ASYNCCOPY_ATTN_MMA_BM) launches causal head dim 128 as 128 queries a block, as it builds,
    with Q's shared memory (a knob it reads) beside the stages (at 2 stages, where the launch sets both knobs)."""
    import dataclasses

    av = _script()
    monkeypatch.setitem(KERNELS, "mma", dataclasses.replace(KERNELS["mma"], default_stages=(3, 2)))
    text = (Path(av.__file__).parent.parent / "asynccopy" / "kernels" / "attention_mma.cu").read_text()
    copy = tmp_path / "mma_old.cu"
    copy.write_text(text.replace("ASYNCCOPY_ATTN_MMA_BM", "ASYNCCOPY_ATTN_MMA_ROWS_A_BLOCK"))
    try:
        av.add_source("mma_old", str(copy), "mma")
        p = Problem(1, 2, 2, 300, 300, 128, "bfloat16")
        (_, cfg), = av.configs(p, True, H200, "mma", [], ["mma_old"])
        assert "ASYNCCOPY_ATTN_MMA_BM" not in dict(cfg.defines) and dict(cfg.defines)["ASYNCCOPY_ATTN_MMA_QSMEM"] == 1
        assert (cfg.tile[0], cfg.threads, cfg.smem_bytes) == (128, 256, 2 * 2 * 64 * 128 * 2 + 128 * 128 * 2)
    finally:
        KERNELS.pop("mma_old", None)


def test_warm_compiles_what_the_run_launches(tmp_path, monkeypatch):
    """A build without knobs carries the tag the run launches it with, so --warm compiles that very build."""
    from asynccopy import build

    av = _script()
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path / "cache"))
    p = Problem(1, 2, 2, 300, 300, 64, "bfloat16")
    (_, bare), = av.configs(p, False, H200, "mma", [av.parse_variant("bare")])
    assert dict(bare.defines) == {av.VARIANT_TAG: 0}  # as kernel_case launches it: not asynccopy.attention's build
    build.clear_memory_cache()
    assert build.compile_many([bare.compile_job("sm_90a")], 1) == 1
    build.clear_memory_cache()
    assert bare.compile("sm_90a").source == "disk cache"


def test_a_negative_warm_count_is_refused_by_name():
    with pytest.raises(ArgumentError, match=r"--warm -1: a number of processes, 0 for none"):
        _script().main(["--warm", "-1"])
