"""asynccopy.mechanism: the records, what they say, register/unregister, and a test-only mechanism added as
one record and one kernel (tests/conftest.py, tests/data/stream_extra.cu) that the bench, the CLI, the
configuration checks and the compiler all pick up."""

import re

import pytest

import asynccopy
from asynccopy import cli, mechanism, stream
from asynccopy.bench import stream_bench
from asynccopy.errors import ArgumentError
from asynccopy.mechanism import CopyOp, Mechanism
from tests import sass as sass_of
from tests.conftest import EXTRA_NAME, extra_record

# What the package has, written out here (not read from the records): the records must say the same.
FAMILY_OF = {"sync": "sync", "sync_double": "sync", "ldgsts": "cp.async", "pipeline": "cp.async", "barrier": "cp.async",
             "cg": "cp.async", "primitives": "cp.async", "tma_1d": "tma", "tma_1d_pipeline": "tma", "tma_2d": "tma",
             "ws_pipeline": "warp-specialized", "ws_ldgsts": "warp-specialized", "ws_tma": "warp-specialized"}
HOPPER_ONLY = {"tma_1d", "tma_1d_pipeline", "tma_2d", "ws_tma"}
BENCH_VARIANTS = [
    ("sync", {}), ("sync_double", {}), ("ldgsts", {"vec": 16, "cache": "cg"}), ("ldgsts", {"vec": 16, "cache": "ca"}),
    ("ldgsts", {"vec": 8, "cache": "ca"}), ("ldgsts", {"vec": 4, "cache": "ca"}), ("pipeline", {}),
    ("barrier", {"vec": 16}), ("barrier", {"vec": 8}), ("cg", {}), ("primitives", {}), ("tma_1d", {}),
    ("tma_1d_pipeline", {}), ("tma_2d", {}), ("ws_pipeline", {"producers": 2}), ("ws_ldgsts", {"producers": 1}),
    ("ws_ldgsts", {"producers": 2}), ("ws_tma", {"producers": 1}), ("ws_tma", {"producers": 2}),
]


# ---------------------------------------------------------------------------------------------
# The records


def test_the_table_in_order_with_families_and_compute_capabilities():
    assert {m.name: m.family for m in mechanism.mechanisms()} == FAMILY_OF
    assert list(mechanism.MECHANISMS) == list(FAMILY_OF)
    for m in mechanism.mechanisms():
        assert m.min_cc == ((9, 0) if m.name in HOPPER_ONLY else (8, 0) if m.family != "sync" else (7, 0)), m.name
        assert set(m.template) <= set(mechanism.TEMPLATE_PARAMS) and m.family in mechanism.FAMILIES


def test_the_public_names():
    assert asynccopy.MECHANISMS is mechanism.MECHANISMS and asynccopy.Mechanism is Mechanism
    assert asynccopy.register is mechanism.register
    assert [m.name for m in asynccopy.mechanisms()] == list(FAMILY_OF)


def test_one_baseline_the_plain_synchronous_loop():
    assert mechanism.baseline() == "sync"
    assert [m.name for m in mechanism.mechanisms() if m.baseline] == ["sync"]
    assert mechanism.get("sync").fixed_stages == 1 and mechanism.get("sync").copy_ops == ()


def test_the_bench_sweeps_each_records_variants_in_the_tables_order():
    assert mechanism.variants() == BENCH_VARIANTS


def test_the_stage_count_from_which_the_compute_loop_is_uniform():
    # set for every multi-stage mechanism but ws_pipeline, whose partitioned cuda::pipeline divides itself
    got = {m.name: m.uniform_loop_from for m in mechanism.mechanisms()}
    assert got == {"sync": None, "sync_double": None, "ldgsts": 4, "pipeline": 2, "barrier": 3, "cg": 4,
                   "primitives": 4, "tma_1d": None, "tma_1d_pipeline": 2, "tma_2d": 2, "ws_pipeline": None,
                   "ws_ldgsts": 2, "ws_tma": 2}


@pytest.mark.parametrize("name, cc, vec, want", [
    ("ldgsts", (8, 0), 16, "LDGSTS"), ("ldgsts", (9, 0), 4, "LDGSTS"), ("barrier", (9, 0), 16, "UBLKCP"),
    ("barrier", (9, 0), 8, "LDGSTS"), ("barrier", (8, 6), 16, "LDGSTS"), ("barrier", (10, 0), 16, "UBLKCP"),
    ("tma_2d", (9, 0), None, "UTMALDG"), ("ws_tma", (9, 0), None, "UBLKCP"), ("sync", (9, 0), None, None),
    ("sync_double", (8, 0), None, None),
])
def test_the_copy_instruction_a_record_claims(name, cc, vec, want):
    assert mechanism.get(name).copy_op(cc, vec) == want


def test_the_last_matching_copy_op_applies():
    m = Mechanism("x", "", "cp.async", (8, 0), "stream.cu", "k", (),
                  (CopyOp("A"), CopyOp("B", (9, 0)), CopyOp("C", (9, 0), vec=8)))
    assert [m.copy_op(cc, v) for cc, v in [((8, 0), 8), ((9, 0), 16), ((9, 0), 8), ((10, 0), 8)]] == ["A", "B", "C", "C"]


@pytest.mark.parametrize("name, text", [
    ("sync", "CC >= 7.0, 1 stage(s)"),
    ("ldgsts", "CC >= 8.0, 1..16 stages, vec 4/8/16 (default 16), cache ca/cg (default cg)"),
    ("barrier", "CC >= 8.0, 1..16 stages, vec 4/8/16 (default 16)"),
    ("ws_tma", "CC >= 9.0, 1..16 stages, producers 1..8 warps (default 1)"),
    ("tma_1d", "CC >= 9.0, 1 stage(s)"),
])
def test_describe(name, text):
    assert mechanism.get(name).describe() == text


def test_get_names_the_known_ones():
    with pytest.raises(ArgumentError, match=r"unknown mechanism 'dma'; choose one of: sync, sync_double, ldgsts, "
                                            r"pipeline, barrier, cg, primitives, tma_1d, tma_1d_pipeline, tma_2d, "
                                            r"ws_pipeline, ws_ldgsts, ws_tma$"):
        mechanism.get("dma")


# ---------------------------------------------------------------------------------------------
# register / unregister


def _record(**changes):
    fields = dict(name="extra", api="", family="cp.async", min_cc=(8, 0), source="stream.cu", kernel="k",
                  template=("threads",))
    fields.update(changes)
    return Mechanism(**fields)


@pytest.mark.parametrize("what, message", [
    ("not a record", r"register takes a Mechanism, got str"),
    (_record(name="ldgsts"), r"a mechanism named 'ldgsts' exists already"),
    (_record(baseline=True), r"'sync' is the baseline; a registered mechanism cannot be another"),
    (_record(family="dma"), r"family must be one of sync, cp.async, tma, warp-specialized, got 'dma'"),
    (_record(template=("threads", "width", "depth")),
     r"template parameter\(s\) width, depth unknown; known: threads, tile, stages, vec, bypass_l1, producers"),
])
def test_register_refuses_a_bad_record_and_changes_nothing(what, message):
    before = dict(mechanism.MECHANISMS)
    with pytest.raises(ArgumentError, match=message):
        mechanism.register(what)
    assert mechanism.MECHANISMS == before


def test_unregister_of_an_unknown_name_does_nothing():
    before = dict(mechanism.MECHANISMS)
    mechanism.unregister("no such mechanism")
    assert mechanism.MECHANISMS == before


# ---------------------------------------------------------------------------------------------
# The test-only mechanism: one record and one kernel


def test_the_extra_mechanism_is_registered_for_one_test_only(extra_mechanism):
    assert mechanism.get(EXTRA_NAME) is extra_mechanism and EXTRA_NAME in asynccopy.MECHANISMS
    assert mechanism.variants()[-1] == (EXTRA_NAME, {})
    assert [m.name for m in mechanism.mechanisms()][-1] == EXTRA_NAME


def test_the_fixture_left_nothing_behind():
    # runs after the test above (file order): its teardown unregistered the mechanism
    assert EXTRA_NAME not in mechanism.MECHANISMS and mechanism.variants() == BENCH_VARIANTS
    with pytest.raises(ArgumentError, match=rf"unknown mechanism '{EXTRA_NAME}'"):
        stream.StreamConfig.make(EXTRA_NAME)


def test_it_is_listed_by_the_mechanisms_command_in_its_family(extra_mechanism, capsys):
    assert cli.main(["mechanisms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    family = lines.index("cp.async:")
    members = lines[family + 1:lines.index("tma:")]
    names = [line.split()[0] for line in members[::2]]
    assert names == ["ldgsts", "pipeline", "barrier", "cg", "primitives", EXTRA_NAME]
    at = members.index(next(m for m in members if m.split()[0] == EXTRA_NAME))
    assert members[at].split(None, 1)[1] == "CC >= 8.0, 1..16 stages"
    assert members[at + 1].strip() == extra_mechanism.api


def test_its_configurations_are_checked_by_its_own_rule(extra_mechanism):
    cfg = stream.StreamConfig.make(EXTRA_NAME)
    assert (cfg.stages, cfg.vec, cfg.cache, cfg.producers, cfg.block) == (4, None, None, 0, 256)
    assert cfg.name_expression() == "stream_extra_ldgsts<256, 4096, 4>" and cfg.label() == EXTRA_NAME
    with pytest.raises(ArgumentError, match=rf"{EXTRA_NAME}: every thread copies 16-byte chunks in pairs: tile must be "
                                            rf"a multiple of 8 x threads = 2048 floats, got 1024"):
        stream.StreamConfig.make(EXTRA_NAME, 2, tile=1024, threads=256)
    with pytest.raises(ArgumentError, match=rf"mechanism '{EXTRA_NAME}' takes no vec option"):
        stream.StreamConfig.make(EXTRA_NAME, 2, vec=16)


def test_the_bench_sweeps_it(extra_mechanism):
    everything = stream_bench.configs(stages=(1, 2, 4))
    assert [c.stages for c in everything if c.mechanism == EXTRA_NAME] == [1, 2, 4]
    assert [c.stages for c in stream_bench.configs([EXTRA_NAME, "sync"], (2, 3))] == [1, 2, 3]  # sync first: table order
    # a shape its rule refuses is left out of a full sweep, and named when asked for by name
    small = stream_bench.configs(stages=(2,), tile=1024, threads=256)
    assert "ldgsts" in {c.mechanism for c in small} and EXTRA_NAME not in {c.mechanism for c in small}
    with pytest.raises(ArgumentError, match=r"every thread copies 16-byte chunks in pairs"):
        stream_bench.configs([EXTRA_NAME], (2,), tile=1024, threads=256)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_it_compiles_with_the_sass_its_record_claims(extra_mechanism, arch):
    cfg = stream.StreamConfig.make(EXTRA_NAME)
    module = cfg.compile(arch)
    functions = sass_of.by_function(module.sass())
    assert len(functions) == len(stream.COMPILED_STAGES)
    assert cfg.expected_sass(arch) == "LDGSTS"
    for s in stream.COMPILED_STAGES:
        body = functions[module.symbol_mapping[cfg.name_expression(s)]]
        assert re.search(r"LDGSTS\.E\.128", body), f"{s} stages on {arch}: no 16-byte LDGSTS"
        assert "BYPASS" not in body, f"{s} stages on {arch}: cp.async.ca compiled to an L1 bypass"
        assert not re.search(r"\bLDG\.E", body), f"{s} stages on {arch}: a load through registers"


def test_it_can_be_traced(extra_mechanism):
    from dataclasses import replace

    cfg = stream.StreamConfig.make(EXTRA_NAME, 3)
    traced = replace(cfg, trace=True).compile("sm_90a").sass()
    assert "SR_CLOCKLO" in traced and "SR_GLOBALTIMER" in traced
    assert "SR_CLOCKLO" not in cfg.compile("sm_90a").sass()


def test_a_record_for_a_newer_gpu_is_left_out_of_an_older_ones_sweep():
    from dataclasses import replace

    mechanism.register(replace(extra_record(), name="extra_hopper", min_cc=(9, 0)))
    try:
        assert "extra_hopper" in {c.mechanism for c in stream_bench.configs(stages=(2,), arch="sm_90a")}
        assert "extra_hopper" not in {c.mechanism for c in stream_bench.configs(stages=(2,), arch="sm_80")}
        with pytest.raises(ArgumentError, match=r"mechanism 'extra_hopper' needs compute capability 9.0; sm_80"):
            stream.StreamConfig.make("extra_hopper", 2).compile("sm_80")
    finally:
        mechanism.unregister("extra_hopper")
    assert "extra_hopper" not in mechanism.MECHANISMS
