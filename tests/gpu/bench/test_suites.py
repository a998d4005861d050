"""Each bench suite run small on the GPU (asynccopy.bench): every configuration is checked before it is
timed, and the rows come back complete. No timing is asserted beyond what any GPU must meet."""

import math

import pytest

from asynccopy import stas
from asynccopy.bench import chunks_bench, harness, stas_bench, stream_bench

MIB = 1 << 20


def test_the_harness_times_a_copy_past_l2(facts):
    lines = []
    ws = harness.workspace(facts, 16 * MIB, seed=5, warmup=1, reps=3, progress=lines.append)
    try:
        assert ws.n == 4 * MIB and ws.rotation.sets >= 2  # 32 MiB in + out per set: L2 needs more than one
        assert (ws.rotation.sets - 1) * 2 * 16 * MIB >= 3 * facts.l2_bytes
        assert 0 < ws.copy_ms and 10 < ws.copy_gbps < 20_000
        samples = harness.time_ms(lambda i: ws.rotation.pair(i)[0].copy_to(ws.rotation.pair(i)[1], stream=ws.stream),
                                  ws.stream, warmup=1, reps=4)
        assert len(samples) == 4 and all(s > 0 for s in samples)
        host = ws.scratch.to_host(ws.rotation.outputs[0], 16)
        assert not any(math.isnan(v) for v in host)  # the copies overwrote the NaN poison
    finally:
        ws.close()
    assert lines[0].startswith(f"device {facts.name}: 0.02 GiB in + out per run") and "device-to-device copy" in lines[1]


def test_stream_suite(facts):
    cfgs = stream_bench.configs(["sync", "ldgsts"], (2,), arch=facts.arch)[:2]  # sync, ldgsts vec16 .cg 2 stages
    assert [c.label() for c in cfgs] == ["sync", "ldgsts vec16 .cg"]
    lines = []
    result = stream_bench.run(cfgs, (0, 2), size_bytes=16 * MIB, reps=3, warmup=1, seed=3, progress=lines.append)
    assert [(r.mechanism, r.stages, r.intensity) for r in result.rows] == [("sync", 1, 0), ("sync", 1, 2),
                                                                          ("ldgsts", 2, 0), ("ldgsts", 2, 2)]
    for r in result.rows:
        assert r.ms > 0 and len(r.samples_ms) == 3 and r.gbps == pytest.approx(2 * 4 * result.n / (r.ms * 1e-3) / 1e9)
        assert r.copy_op == ("LDG" if r.mechanism == "sync" else "LDGSTS")
    sync = {r.intensity: r.ms for r in result.rows if r.mechanism == "sync"}
    assert all(r.speedup_vs_sync == pytest.approx(sync[r.intensity] / r.ms) for r in result.rows)
    assert result.device["name"] == facts.name and result.n == 4 * MIB and result.tile == 4096
    assert len([x for x in lines if x.startswith("[")]) == 2
    assert stream_bench.summary(result)[0].startswith("device-to-device copy: ")


@pytest.mark.cc(9, 0)
def test_chunks_suite():
    result = chunks_bench.run((4096, 16384), size_bytes=16 * MIB, reps=3, warmup=1, seed=4, progress=lambda _: None)
    assert [(r.chunk_bytes, r.mechanism) for r in result.rows] == [
        (4096, "ldgsts"), (4096, "tma_1d_pipeline"), (16384, "ldgsts"), (16384, "tma_1d_pipeline")]
    assert result.pair == chunks_bench.DEFAULT_PAIR
    assert [r.blocks_per_sm for r in result.rows] == [4, 4, 1, 1] and all(r.gbps > 0 for r in result.rows)
    gbps = {(r.chunk_bytes, r.mechanism): r.gbps for r in result.rows}
    ahead = [gbps[(c, "tma_1d_pipeline")] >= gbps[(c, "ldgsts")] for c in (4096, 16384)]
    assert chunks_bench.crossover(result.rows) == (4096 if all(ahead) else 16384 if ahead[1] else None)


@pytest.mark.cc(9, 0)
def test_stas_suite():
    result = stas_bench.run((2,), (65536,), reps=2, warmup=1, progress=lambda _: None)
    assert [(r.cluster, r.message_bytes, r.via) for r in result.rows] == [(2, 65536, "dsmem"), (2, 65536, "global")]
    dsmem, glob = result.rows
    assert dsmem.clusters == glob.clusters >= 60 and dsmem.rounds == glob.rounds >= 20  # the same work for both
    assert all(r.gbps > 0 and len(r.samples_ms) == 2 for r in result.rows)
    (speedup,) = stas_bench.speedups(result)
    assert speedup["ratio"] == pytest.approx(dsmem.gbps / glob.gbps)


@pytest.mark.cc(9, 0)
def test_stas_suite_with_small_messages_sizes_both_rings_alike():
    # at 1 KiB messages the st.async ring keeps more clusters resident than the global ring (528 and 396 of 2 on
    # an H200): both get as many as both can hold (the global ring spins on flags and refuses more)
    result = stas_bench.run((2,), (1024,), reps=2, warmup=1, progress=lambda _: None)
    dsmem, glob = result.rows
    assert dsmem.clusters == glob.clusters and dsmem.rounds == glob.rounds
    r = stas.prepare(2, 1024, 1, via="global", keep_last=False)
    try:
        assert dsmem.clusters <= r.clusters  # what the global ring alone could hold
    finally:
        r.close()


@pytest.mark.cc(9, 0)
def test_stas_suite_skips_a_cluster_that_does_not_fit_and_goes_on():
    lines = []
    result = stas_bench.run((16, 2), (65536,), slots=2, reps=1, warmup=1, progress=lines.append)
    ran = {r.cluster for r in result.rows}
    assert 2 in ran
    if 16 not in ran:  # 16 blocks of 128 KiB of buffers each need 16 SMs of one GPC
        assert "skipped (" in lines[0]

