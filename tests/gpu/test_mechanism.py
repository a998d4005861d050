"""The test-only mechanism (one record and one kernel: tests/conftest.py, tests/data/stream_extra.cu) on
the GPU: bit-exact against stream.reference, traced, and swept by the bench like any other."""

import pytest

import asynccopy
from asynccopy import trace
from asynccopy.bench import stream_bench
from tests.conftest import EXTRA_NAME
from tests.gpu.conftest import check_stream_output

pytestmark = pytest.mark.cc(8, 0)  # its record's min_cc: cp.async


@pytest.mark.parametrize("stages", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("intensity", [0, 3])
def test_it_matches_the_reference(extra_mechanism, any_xp, facts, rng, stages, intensity):
    for n in (1, 1003, 4096, 3 * 4096 + 5, facts.sm_count * 4096 * 3 + 4096 + 2):
        x, host = any_xp.rand(n, rng)
        out = any_xp.nan(n)
        y = asynccopy.run(x, EXTRA_NAME, stages=stages, intensity=intensity, out=out)
        assert y is out
        any_xp.sync()
        check_stream_output(any_xp.to_numpy(y), host, intensity, 4096)


def test_other_shapes_and_contiguous_runs(extra_mechanism, any_xp, facts, rng):
    n = facts.sm_count * 8192 * 2 + 77
    x, host = any_xp.rand(n, rng)
    for kwargs in ({"tile": 8192, "threads": 512, "blocks_per_sm": 2}, {"tiles_per_block": 3}):
        y = asynccopy.run(x, EXTRA_NAME, stages=3, intensity=2, out=any_xp.nan(n), **kwargs)
        any_xp.sync()
        check_stream_output(any_xp.to_numpy(y), host, 2, kwargs.get("tile", 4096))


def test_its_rule_is_checked_before_the_launch(extra_mechanism, any_xp, rng):
    x, _ = any_xp.rand(4096, rng)
    with pytest.raises(asynccopy.ArgumentError, match=r"every thread copies 16-byte chunks in pairs"):
        asynccopy.run(x, EXTRA_NAME, stages=2, tile=1024, threads=256)


def test_it_can_be_traced(extra_mechanism):
    cfg, blocks = trace.run(EXTRA_NAME, 4, intensity=8, tiles_per_block=16)
    assert cfg.mechanism == EXTRA_NAME and len(blocks[0].tiles) == 16
    assert len(trace.overlapping(blocks[0].tiles)) >= 12


def test_the_bench_checks_and_times_it(extra_mechanism, facts):
    cfgs = stream_bench.configs(["sync", EXTRA_NAME], (2, 4), arch=facts.arch)
    assert [(c.mechanism, c.stages) for c in cfgs] == [("sync", 1), (EXTRA_NAME, 2), (EXTRA_NAME, 4)]
    result = stream_bench.run(cfgs, (0, 4), size_bytes=16 << 20, reps=3, warmup=1, seed=9, progress=lambda _: None)
    rows = [r for r in result.rows if r.mechanism == EXTRA_NAME]
    assert [(r.stages, r.intensity, r.copy_op) for r in rows] == [(2, 0, "LDGSTS"), (2, 4, "LDGSTS"), (4, 0, "LDGSTS"),
                                                                  (4, 4, "LDGSTS")]
    assert all(r.speedup_vs_sync is not None and r.ms > 0 for r in rows)  # (each checked element by element first)
