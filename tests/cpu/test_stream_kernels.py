"""Every tile-stream kernel compiles for sm_80 and sm_90a; its SASS holds the copy it claims."""

import re

import pytest

from asynccopy import stream
from asynccopy.bench.stream_bench import DEFAULT_VARIANTS
from asynccopy.errors import ArgumentError

ARCHS = ["sm_80", "sm_90a"]
VARIANTS = [pytest.param(name, opts, id=f"{name}-{'-'.join(f'{k}{v}' for k, v in opts.items())}".rstrip("-"))
            for name, opts in DEFAULT_VARIANTS]


def _sass_by_function(sass: str) -> dict[str, str]:
    """SASS text per function (cuobjdump prints `Function : <mangled name>` before each)."""
    parts = re.split(r"\n\s*Function : (\S+)", sass)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name, opts", VARIANTS)
def test_kernel_compiles_and_sass_matches_its_mechanism(name, opts, arch):
    cfg = stream.StreamConfig.make(name, **opts)
    if not cfg.compiles_for(arch):
        with pytest.raises(ArgumentError, match=rf"mechanism '{name}' needs compute capability 9.0; {arch} is below it"):
            cfg.compile(arch)
        return
    module = cfg.compile(arch)
    functions = _sass_by_function(module.sass())
    names = [cfg.name_expression()] if cfg.mech.fixed_stages else [cfg.name_expression(s) for s in stream.COMPILED_STAGES]
    assert len(functions) == len(names), f"expected {len(names)} kernels in the cubin, found {len(functions)}"
    expected = cfg.expected_sass(arch)
    for expr in names:
        mangled = module.symbol_mapping[expr]
        body = functions[mangled]
        if expected is None:
            assert "LDGSTS" not in body and "UBLKCP" not in body, f"{expr}: a synchronous kernel holds an async copy"
            assert "LDG.E" in body
        else:
            assert expected in body, f"{expr} on {arch}: no {expected} in its SASS"
            if not cfg.mech.boundary_loads:  # some load a boundary tile's last < 4 floats with LDG
                assert not re.search(r"\bLDG\.E", body), f"{expr}: an asynchronous kernel also loads through registers"


def test_barrier_vec16_on_hopper_is_a_bulk_copy_and_ldgsts_elsewhere():
    cfg = stream.StreamConfig.make("barrier", 2, vec=16)
    assert cfg.expected_sass("sm_90a") == "UBLKCP"
    assert cfg.expected_sass("sm_80") == "LDGSTS"
    assert stream.StreamConfig.make("barrier", 2, vec=8).expected_sass("sm_90a") == "LDGSTS"


def test_ldgsts_cache_mode_reaches_the_sass():
    cg = stream.StreamConfig.make("ldgsts", 2, vec=16, cache="cg").compile("sm_90a").sass()
    ca = stream.StreamConfig.make("ldgsts", 2, vec=16, cache="ca").compile("sm_90a").sass()
    assert "LDGSTS.E.BYPASS.128" in cg
    assert "LDGSTS.E.128" in ca and "BYPASS" not in ca


@pytest.mark.parametrize("vec, width", [(4, ""), (8, ".64"), (16, ".128")])
def test_ldgsts_copy_width_reaches_the_sass(vec, width):
    sass = stream.StreamConfig.make("ldgsts", 2, vec=vec, cache="ca").compile("sm_90a").sass()
    assert re.search(rf"LDGSTS\.E{re.escape(width)}(\.ZFILL)?\s", sass), f"no {vec}-byte LDGSTS"


def test_tma_building_blocks_compile_with_their_instructions():
    from asynccopy import tma

    sass = tma.module("sm_90a").sass()
    for op in ("UTMALDG", "UTMASTG", "UBLKCP", "FENCE.VIEW.ASYNC.S", "SYNCS"):
        assert op in sass, f"no {op} in tma.cu's SASS"
    with pytest.raises(ArgumentError, match=r"TMA needs compute capability 9.0; sm_80 is below it"):
        tma.module("sm_80")


def test_tma_2d_tile_rule():
    with pytest.raises(ArgumentError, match=r"tma_2d loads a tile as a box of rows of 64 floats"):
        stream.StreamConfig.make("tma_2d", 2, tile=32768, threads=512)


def test_producer_warp_counts_against_the_block_limit():
    with pytest.raises(ArgumentError, match=r"'tma_1d_pipeline' adds 1 producer warp\(s\): threads \+ 32 must be <= 1024"):
        stream.StreamConfig.make("tma_1d_pipeline", 2, threads=1024, tile=4096)
    assert stream.StreamConfig.make("tma_1d_pipeline", 2).block == 256 + 32


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


def test_producer_warps_are_checked():
    cfg = stream.StreamConfig.make("ws_ldgsts", 2, threads=256, producers=3, tile=3 * 1024)
    assert cfg.block == 256 + 96 and cfg.label() == "ws_ldgsts p3"
    assert cfg.name_expression() == "stream_ws_ldgsts<3, 256, 3072, 2>"
    assert stream.StreamConfig.make("ws_tma", 2).producers == 1  # the default split
    with pytest.raises(ArgumentError, match=r"producers must be a number of warps in \[1, 8\], got 9"):
        stream.StreamConfig.make("ws_ldgsts", 2, producers=9)
    with pytest.raises(ArgumentError, match=r"mechanism 'ldgsts' takes no producers option"):
        stream.StreamConfig.make("ldgsts", 2, producers=1)
    with pytest.raises(ArgumentError, match=r"the tile's 1024 16-byte chunks must split evenly over 96 producer"):
        stream.StreamConfig.make("ws_ldgsts", 2, producers=3)
    with pytest.raises(ArgumentError, match=r"adds 8 producer warp\(s\): threads \+ 256 must be <= 1024"):
        stream.StreamConfig.make("ws_tma", 2, threads=1024, tile=4096, producers=8)


def test_contiguous_tile_runs_are_a_compile_time_switch():
    persistent = stream.StreamConfig.make("tma_1d_pipeline", 2, tile=8192)
    runs = stream.StreamConfig.make("tma_1d_pipeline", 2, tile=8192, tiles_per_block=2)
    assert runs.label() == "tma_1d_pipeline 2/block" and persistent.label() == "tma_1d_pipeline"
    a, b = persistent.compile("sm_90a"), runs.compile("sm_90a")
    assert a.cubin != b.cubin and "UBLKCP" in b.sass()
    with pytest.raises(ArgumentError, match=r"tiles_per_block must be 0 \(a persistent grid\) or a run length"):
        stream.StreamConfig.make("ldgsts", 2, tiles_per_block=-1)


def _compute_loop(body: str) -> str:
    """The innermost loop with the compute's FMAs (a backward branch around >= 16 FFMAs), addresses and
    branch targets blanked."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", body)]
    best = None
    for at, text in ins:
        m = re.search(r"BRA .*0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < at:
            loop = [t for a, t in ins if int(m.group(1), 16) <= a <= at]
            if sum("FFMA" in t for t in loop) >= 16 and (best is None or len(loop) < len(best)):
                best = loop
    assert best is not None, "no compute loop found"
    return "\n".join(re.sub(r"0x[0-9a-f]+", "X", t) for t in best)


# Stage counts whose kernels must run the very same compute loop. A stage count used to change the
# division in stage_of / phase_of (shift, multiply-high, ...), hence the register allocation and
# ptxas's schedule of the compute: some stage counts ran it 5-18% slower (NOTES 15, 22). ws_pipeline
# keeps its own division inside libcu++'s partitioned pipeline and is left out.
SAME_LOOP = {"tma_1d_pipeline": range(2, 9), "tma_2d": range(2, 9), "ws_tma": range(2, 9),
             "ws_ldgsts": range(2, 9), "pipeline": range(2, 9), "barrier": range(3, 9), "ldgsts": range(4, 9),
             "cg": range(4, 9), "primitives": range(4, 9)}


@pytest.mark.parametrize("name, opts", [v for v in VARIANTS if v.values[0] in SAME_LOOP])
def test_every_stage_count_runs_the_same_compute_loop(name, opts):
    cfg = stream.StreamConfig.make(name, **opts)
    module = cfg.compile("sm_90a")
    functions = _sass_by_function(module.sass())
    loops = {s: _compute_loop(functions[module.symbol_mapping[cfg.name_expression(s)]]) for s in SAME_LOOP[name]}
    first = min(loops)
    differ = [s for s in loops if loops[s] != loops[first]]
    assert not differ, f"{cfg.label()}: stages {differ} compile the compute loop differently from stages {first}"


def test_stage_multipliers_divide_exactly_below_the_tile_limit():
    """pipeline.cuh's stage_of / phase_of: i / S == umulhi(i, m[S]) for every tile counter a launch allows."""
    import pathlib

    src = (pathlib.Path(stream.__file__).parent / "kernels/include/asynccopy/pipeline.cuh").read_text()
    table = re.search(r"stage_magic\[9\] = \{([^}]*)\}", src).group(1)
    magic = [int(v.strip().rstrip("u"), 16 if "x" in v else 10) for v in table.split(",")]
    limit = stream.MAX_TILES_PER_BLOCK + 8  # a kernel asks for tile k + STAGES - 1 at most
    for s in range(2, 9):
        excess = s * magic[s] - (1 << 32)
        assert 0 <= excess and limit * excess < (1 << 32), f"{s} stages: multiplier {magic[s]:#x} is not exact"
        for i in (0, 1, s - 1, s, limit - 1, 12345677):
            assert (i * magic[s]) >> 32 == i // s
