"""Every tile-stream kernel compiles for sm_80 and sm_90a; its SASS holds the copy its record claims, and
from its record's `uniform_loop_from` on every stage count compiles the same compute loop."""

import pathlib
import re

import pytest

from asynccopy import mechanism, stream
from asynccopy.errors import ArgumentError
from tests import sass as sass_of

ARCHS = ["sm_80", "sm_90a"]
VARIANTS = [pytest.param(name, opts, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in opts.items())}".rstrip("-"))
            for name, opts in mechanism.variants()]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name, opts", VARIANTS)
def test_kernel_compiles_and_sass_matches_its_mechanism(name, opts, arch):
    cfg = stream.StreamConfig.make(name, **opts)
    if not cfg.compiles_for(arch):
        with pytest.raises(ArgumentError, match=rf"mechanism '{name}' needs compute capability 9.0; {arch} is below it"):
            cfg.compile(arch)
        return
    module = cfg.compile(arch)
    functions = sass_of.by_function(module.sass())
    names = [cfg.name_expression()] if cfg.mech.fixed_stages else [cfg.name_expression(s) for s in stream.COMPILED_STAGES]
    assert len(functions) == len(names), f"expected {len(names)} kernels in the cubin, found {len(functions)}"
    expected = cfg.expected_sass(arch)
    for expr in names:
        body = functions[module.symbol_mapping[expr]]
        if expected is None:
            assert "LDGSTS" not in body and "UBLKCP" not in body, f"{expr}: a synchronous kernel holds an async copy"
            assert "LDG.E" in body
        else:
            assert expected in body, f"{expr} on {arch}: no {expected} in its SASS"
            if not cfg.mech.boundary_loads:  # some load a boundary tile's last < 4 floats with LDG
                assert not re.search(r"\bLDG\.E", body), f"{expr}: an asynchronous kernel also loads through registers"


def test_barrier_vec16_on_hopper_is_a_bulk_copy_and_ldgsts_elsewhere():
    # (a boundary tile's prefix, 4-byte aligned, is an LDGSTS copy everywhere)
    assert "UBLKCP" in stream.StreamConfig.make("barrier", 2, vec=16).compile("sm_90a").sass()
    ampere = stream.StreamConfig.make("barrier", 2, vec=16).compile("sm_80").sass()
    assert "LDGSTS" in ampere and "UBLKCP" not in ampere
    assert "UBLKCP" not in stream.StreamConfig.make("barrier", 2, vec=8).compile("sm_90a").sass()


def test_ldgsts_cache_mode_reaches_the_sass():
    cg = stream.StreamConfig.make("ldgsts", 2, vec=16, cache="cg").compile("sm_90a").sass()
    ca = stream.StreamConfig.make("ldgsts", 2, vec=16, cache="ca").compile("sm_90a").sass()
    assert "LDGSTS.E.BYPASS.128" in cg
    assert "LDGSTS.E.128" in ca and "BYPASS" not in ca


@pytest.mark.parametrize("vec, width", [(4, ""), (8, ".64"), (16, ".128")])
def test_ldgsts_copy_width_reaches_the_sass(vec, width):
    sass = stream.StreamConfig.make("ldgsts", 2, vec=vec, cache="ca").compile("sm_90a").sass()
    assert re.search(rf"LDGSTS\.E{re.escape(width)}(\.ZFILL)?\s", sass), f"no {vec}-byte LDGSTS"


@pytest.mark.parametrize("arch", ARCHS)
def test_warp_specialized_copies_complete_on_barriers(arch):
    # ws_ldgsts ties each producer thread's cp.async to the full mbarrier (cp.async.mbarrier.arrive.noinc);
    # ws_pipeline's partitioned cuda::pipeline does the same inside libcu++; consumers wait on mbarriers.
    for name in ("ws_ldgsts", "ws_pipeline"):
        sass = stream.StreamConfig.make(name, 3, producers=2).compile(arch).sass()
        assert "LDGSTS" in sass and "ARRIVES.LDGSTSBAR" in sass, f"{name} on {arch}"
    if arch == "sm_90a":
        sass = stream.StreamConfig.make("ws_tma", 3, producers=2).compile(arch).sass()
        assert "UBLKCP" in sass and "SYNCS.PHASECHK" in sass and "LDGSTS" not in sass


def test_contiguous_tile_runs_are_a_compile_time_switch():
    persistent = stream.StreamConfig.make("tma_1d_pipeline", 2, tile=8192)
    runs = stream.StreamConfig.make("tma_1d_pipeline", 2, tile=8192, tiles_per_block=2)
    a, b = persistent.compile("sm_90a"), runs.compile("sm_90a")
    assert a.cubin != b.cubin and "UBLKCP" in b.sass()


UNIFORM = [v for v in VARIANTS if mechanism.get(v.values[0]).uniform_loop_from is not None]


# A stage count used to change the division in stage_of / phase_of (shift, multiply-high, ...), hence the
# register allocation and ptxas's schedule of the compute: some stage counts ran it 5-18% slower (NOTES
# 15, 22). A record's uniform_loop_from says from which stage count on they must all compile the same loop.
@pytest.mark.parametrize("name, opts", UNIFORM)
def test_every_stage_count_from_the_records_on_runs_the_same_compute_loop(name, opts):
    cfg = stream.StreamConfig.make(name, **opts)
    module = cfg.compile("sm_90a")
    functions = sass_of.by_function(module.sass())
    first = cfg.mech.uniform_loop_from
    stages = range(first, max(stream.COMPILED_STAGES) + 1)
    assert len(stages) >= 2, f"{name}: uniform_loop_from={first} leaves nothing to compare"
    loops = {s: sass_of.compute_loop(functions[module.symbol_mapping[cfg.name_expression(s)]]) for s in stages}
    differ = [s for s in loops if loops[s] != loops[first]]
    assert not differ, f"{cfg.label()}: stages {differ} compile the compute loop differently from stages {first}"


@pytest.mark.parametrize("name, opts", [v for v in UNIFORM if mechanism.get(v.values[0]).uniform_loop_from > 1])
def test_uniform_loop_from_is_the_smallest_such_stage_count(name, opts):
    # the stage count below the record's compiles another loop (else the record could say less)
    cfg = stream.StreamConfig.make(name, **opts)
    module = cfg.compile("sm_90a")  # the test above's module, from the cache
    first = cfg.mech.uniform_loop_from
    functions = sass_of.by_function(module.sass())
    loop = {s: sass_of.compute_loop(functions[module.symbol_mapping[cfg.name_expression(s)]]) for s in (first - 1, first)}
    assert loop[first - 1] != loop[first], f"{cfg.label()}: {first - 1} stages compile the same loop as {first}"


def test_uniform_loop_variants_cover_every_multi_stage_mechanism_but_ws_pipeline():
    names = {v.values[0] for v in UNIFORM}
    assert names == {m.name for m in mechanism.mechanisms() if m.fixed_stages is None} - {"ws_pipeline"}


def test_stage_multipliers_divide_exactly_below_the_tile_limit():
    """pipeline.cuh's stage_of / phase_of: i / S == umulhi(i, m[S]) for every tile counter a launch allows."""
    src = (pathlib.Path(stream.__file__).parent / "kernels/include/asynccopy/pipeline.cuh").read_text()
    table = re.search(r"stage_magic\[9\] = \{([^}]*)\}", src).group(1)
    magic = [int(v.strip().rstrip("u"), 16 if "x" in v else 10) for v in table.split(",")]
    limit = stream.MAX_TILES_PER_BLOCK + 8  # a kernel asks for tile k + STAGES - 1 at most
    for s in range(2, 9):
        excess = s * magic[s] - (1 << 32)
        assert 0 <= excess and limit * excess < (1 << 32), f"{s} stages: multiplier {magic[s]:#x} is not exact"
        for i in (0, 1, s - 1, s, limit - 1, 12345677):
            assert (i * magic[s]) >> 32 == i // s
