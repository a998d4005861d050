"""The memory calibration on the GPU (asynccopy.bench.memory_calibration): traced regimes give points whose
latency grows with the bytes in flight, the curve is fitted on some and checked on the others, and it is
cached for the device and found again."""

import pytest

from asynccopy.bench import memory_calibration
from asynccopy.model import memory, planner

pytestmark = pytest.mark.cc(9, 0)


def test_a_small_calibration_fits_checks_and_caches_the_curve(facts, tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    # fewer regimes than the full calibration: tiles 1024 and 4096 fitted, 2048 held out, one ldgsts regime
    monkeypatch.setattr(memory_calibration, "TILES", (1024, 2048, 4096))
    monkeypatch.setattr(memory_calibration, "STAGES", (1, 2, 4, 8))
    monkeypatch.setattr(memory_calibration, "BLOCKS", (1,))
    monkeypatch.setattr(memory_calibration, "SECOND_REGIMES", ((4096, 4, 1),))
    fit, fresh = memory_calibration.calibration(progress=lambda text: None)
    assert fresh and fit.fitted and fit.held_out
    assert {c.regime for c in fit.held_out} >= {"ldgsts vec=16 cache=cg tile=4096 threads=256 stages=4 blocks=1"}
    by = {p.regime: p for p in fit.points}
    one = by["tma_1d_pipeline tile=1024 threads=256 stages=1 blocks=1"]
    many = by["tma_1d_pipeline tile=4096 threads=256 stages=8 blocks=1"]
    assert one.in_flight == 4096 and many.in_flight >= 7 * 16384  # the producer keeps its buffers in flight
    assert 200 < one.latency_ns < many.latency_ns  # queues lengthen the latency
    c = fit.curve
    assert 200 < c.latency_ns < 5000 and 1 < c.rate < 100  # B/ns per SM
    assert fit.worst_fitted < 0.5
    again, fresh = memory_calibration.calibration(progress=lambda text: None)
    assert not fresh and again.curve == fit.curve
    assert planner.plan(["tile:4096:f32"], threads=256, device=facts).memory == fit.curve
    assert memory.cached(facts).curve == fit.curve
