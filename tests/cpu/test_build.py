"""The build layer without a GPU: compiling for named archs, the compile cache, SASS, errors."""

import os

import pytest

import asynccopy
from asynccopy import build
from asynccopy.errors import ArgumentError, CompileError

TINY = r"""
#include <asynccopy/ldgsts.cuh>
extern "C" __global__ void copy16(const float* in, float* out) {
    __shared__ __align__(16) float s[4 * 32];
    asynccopy::cp_async<16, true>(s + 4 * threadIdx.x, in + 4 * threadIdx.x);
    asynccopy::commit_group();
    asynccopy::wait_group<0>();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    build.clear_memory_cache()
    yield tmp_path
    build.clear_memory_cache()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_user_source_compiles_with_our_headers(arch):
    module = asynccopy.compile(TINY, arch=arch, name="tiny")
    assert module.arch == arch
    assert module.cubin[:4] == b"\x7fELF"
    assert "LDGSTS" in module.sass()


def test_second_compile_is_served_from_disk_then_memory(fresh_cache):
    first = asynccopy.compile(TINY, arch="sm_90a")
    assert first.source == "compiled"
    assert len(list(fresh_cache.glob("*.cubin"))) == 1
    build.clear_memory_cache()
    second = asynccopy.compile(TINY, arch="sm_90a")
    assert second.source == "disk cache" and second.cubin == first.cubin
    third = asynccopy.compile(TINY, arch="sm_90a")
    assert third.source == "memory cache"


def test_key_changes_with_arch_options_and_source(fresh_cache):
    asynccopy.compile(TINY, arch="sm_90a")
    assert asynccopy.compile(TINY, arch="sm_80").source == "compiled"
    assert asynccopy.compile(TINY, arch="sm_90a", defines={"X": 1}).source == "compiled"
    assert asynccopy.compile(TINY + "\n// edit\n", arch="sm_90a").source == "compiled"
    assert len(list(fresh_cache.glob("*.cubin"))) == 4


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip_payload", "foreign"])
def test_damaged_cache_entry_is_recompiled(fresh_cache, damage):
    good = asynccopy.compile(TINY, arch="sm_90a")
    (entry,) = fresh_cache.glob("*.cubin")
    blob = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(blob[: len(blob) // 2])
    elif damage == "garbage":
        entry.write_bytes(os.urandom(len(blob)))
    elif damage == "flip_payload":
        entry.write_bytes(blob[:-1] + bytes([blob[-1] ^ 0xFF]))
    else:  # another program's valid entry stored under this key's file name
        build.clear_memory_cache()
        asynccopy.compile(TINY + "\n// other\n", arch="sm_90a")
        (other_entry,) = [p for p in fresh_cache.glob("*.cubin") if p != entry]
        entry.write_bytes(other_entry.read_bytes())
    build.clear_memory_cache()
    again = asynccopy.compile(TINY, arch="sm_90a")
    assert again.source == "compiled" and again.cubin == good.cubin
    build.clear_memory_cache()
    assert asynccopy.compile(TINY, arch="sm_90a").source == "disk cache"  # rewritten whole


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", "off")
    build.clear_memory_cache()
    assert build.cache_dir() is None
    assert asynccopy.compile(TINY, arch="sm_90a").source == "compiled"
    build.clear_memory_cache()
    assert asynccopy.compile(TINY, arch="sm_90a").source == "compiled"


def test_compile_error_carries_the_nvrtc_log():
    with pytest.raises(CompileError, match=r"(?s)NVRTC failed to compile broken for sm_90a.*undefined_thing"):
        asynccopy.compile("__global__ void k() { undefined_thing(); }", arch="sm_90a", name="broken")


def test_the_arch_may_be_spelled_any_way_parse_arch_takes(fresh_cache):
    modules = [asynccopy.compile(TINY, arch=arch) for arch in ("9.0", (9, 0), "90a", "SM_90A")]
    assert [m.arch for m in modules] == ["sm_90a"] * 4
    assert [m.source for m in modules] == ["compiled"] + ["memory cache"] * 3
    assert len(list(fresh_cache.glob("*.cubin"))) == 1  # one cache entry whatever the spelling


def test_a_nonsense_arch_is_an_argument_error_before_nvrtc_runs():
    with pytest.raises(ArgumentError, match="arch must look like 'sm_90a'"):
        asynccopy.compile(TINY, arch="hopper")


def test_read_kernel_takes_a_package_name_or_a_path_of_your_own(tmp_path):
    assert "stream_ldgsts" in build.read_kernel("stream.cu")
    own = tmp_path / "mine.cu"
    own.write_text("// mine\n")
    assert build.read_kernel(own) == "// mine\n" and build.read_kernel(str(own)) == "// mine\n"


def test_toolchain_versions_are_known():
    tc = build.toolchain()
    assert tc["nvrtc"].count(".") == 1 and tc["cccl"] != "unknown" and tc["cuda_runtime_headers"] != "unknown"


def test_a_modules_kernels_say_their_registers():
    """Registers a thread, read from the cubin (what bounds the blocks an SM holds), by name expression."""
    from asynccopy import stream

    cfg = stream.StreamConfig.make("ldgsts", 2, tile=8192, threads=256, vec=16, cache="ca")
    module = cfg.compile("sm_90a")
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    regs = module.registers(cfg.name_expression())
    assert 0 < regs <= 255 and f"REG:{regs} " in usage
    assert module.registers(cfg.name_expression(4)) > 0  # every compiled stage count has its own
    with pytest.raises(CompileError, match="has no kernel"):
        module.registers("no_such_kernel")
