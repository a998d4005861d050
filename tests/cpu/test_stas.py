"""The STAS ring without a GPU: argument checks, the kernels' SASS, the expected words."""

import re
from dataclasses import replace

import numpy as np
import pytest

from asynccopy import device, stas
from asynccopy.errors import ArgumentError, DeviceError


def test_ring_kernels_hold_stas_and_the_cluster_barrier():
    m = stas.module("sm_90a", fixed=(2,))
    sass = m.sass()
    functions = dict(re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S))
    for vec, op in ((4, r"STAS\s"), (8, r"STAS\.64"), (16, r"STAS\.128")):
        for slots in stas.SLOTS:
            body = functions[m.symbol_mapping[f"stas_ring<256, {vec}, {slots}>"]]
            assert re.search(op, body), f"no {op} for vec {vec}"
            assert "UCGABAR_ARV" in body and "UCGABAR_WAIT" in body  # cluster.sync: barrier.cluster
            assert "SYNCS.ARRIVE.TRANS64.RED" in body  # the remote arrive on a neighbour's ready barrier
            assert "SYNCS.PHASECHK" in body
    fixed = functions[m.symbol_mapping["stas_ring_fixed<2, 256, 16, 2>"]]
    assert "STAS.128" in fixed
    glob = functions[m.symbol_mapping["global_ring<256, 2>"]]
    assert "STAS" not in glob and "LDG.E.STRONG.GPU" in glob  # ld.acquire.gpu polls the flags


def test_ring_needs_hopper():
    with pytest.raises(ArgumentError, match=r"st.async and clusters need compute capability 9.0; sm_80 is below it"):
        stas.module("sm_80")


@pytest.mark.parametrize("kwargs, message", [
    (dict(cluster=1, message_bytes=256), r"a ring needs at least 2 blocks per cluster, got 1"),
    (dict(cluster=17, message_bytes=256), r"a cluster of 17 blocks is not supported: the portable limit is 8"),
    (dict(cluster=0, message_bytes=256), r"a cluster size is a positive number of blocks, got 0"),
    (dict(cluster=2, message_bytes=100), r"message_bytes must be a positive multiple of 16, got 100"),
    (dict(cluster=2, message_bytes=256, vec=2), r"vec \(st.async width\) must be 4, 8 or 16 bytes, got 2"),
    (dict(cluster=2, message_bytes=256, slots=3), r"slots must be 1, 2 or 4 receive buffers, got 3"),
    (dict(cluster=2, message_bytes=256, via="pcie"), r"via must be one of dsmem, global, got 'pcie'"),
    (dict(cluster=2, message_bytes=256, via="global", compile_time_cluster=True),
     r"compile_time_cluster applies to the st.async ring"),
])
def test_ring_arguments_are_checked(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        stas.RingConfig.make(**kwargs)


def test_ring_names():
    assert stas.RingConfig.make(4, 512).name_expression() == "stas_ring<256, 16, 2>"
    assert stas.RingConfig.make(4, 512, compile_time_cluster=True, vec=8, slots=1).name_expression() == \
        "stas_ring_fixed<4, 256, 8, 1>"
    assert stas.RingConfig.make(4, 512, via="global").name_expression() == "global_ring<256, 2>"
    assert stas.RingConfig.make(4, 512, slots=2).shmem == 1024 and stas.RingConfig.make(4, 512, via="global").shmem == 0


def test_expected_words_follow_the_kernel_formula():
    # ring_word is kernels/stas.cu's hash; two fixed values pin it (computed by hand from the formula)
    def ref(seed, c, src, r):
        m = 0xFFFFFFFF
        h = seed ^ (c * 0x27D4EB2F & m) ^ ((src + 1) * 0xC2B2AE3D & m) ^ (r * 0x85EBCA77 & m)
        h ^= h >> 16
        h = h * 0x7FEB352D & m
        h ^= h >> 15
        h = h * 0x846CA68B & m
        h ^= h >> 16
        return h

    for args in [(0, 0, 0, 0), (123456789, 7, 15, 3999), (0xFFFFFFFF, 65535, 1, 1)]:
        assert int(stas.ring_word(*args)) == ref(*args)
    msg = stas.expected_message(9, 1, 2, 3, 8)
    assert msg.dtype == np.uint32 and msg[5] == (ref(9, 1, 2, 3) ^ (5 * 0x9E3779B1 & 0xFFFFFFFF))
    bad = stas.expected_message(9, 1, 2, 3, 8, corrupt=True)
    assert (bad != msg).sum() == 1 and bad[0] == msg[0] ^ 1


@pytest.mark.parametrize("rounds", [0, 1 << 31, 2.0])
def test_ring_rounds_are_checked_before_any_device_use(rounds):
    with pytest.raises(ArgumentError, match=r"rounds must be an integer in \[1, 2\^31\), got"):
        stas.prepare(2, 256, rounds)


@pytest.mark.parametrize("corrupt", [-1, 1 << 32, 2.0])
def test_corrupt_round_is_checked_before_any_device_use(corrupt):
    ring = stas.Ring(stas.RingConfig.make(2, 256), 1, 10, stream=None)
    with pytest.raises(ArgumentError, match=r"corrupt_round must be a round index in \[0, 2\^32 - 1\), got"):
        ring.launch(corrupt_round=corrupt)
    ring.rounds = 0  # rounds can change between launches: checked again
    with pytest.raises(ArgumentError, match=r"rounds must be an integer in \[1, 2\^31\), got 0"):
        ring.launch()


def _fake_gpu(monkeypatch, table_name):
    monkeypatch.setattr(device, "current", lambda device_id=None: replace(device.KNOWN[table_name], device_id=0))


def test_a_ring_needs_a_hopper(monkeypatch):
    _fake_gpu(monkeypatch, "A100-80GB")
    with pytest.raises(DeviceError, match=r"^the STAS ring needs compute capability 9.0 or newer; A100-80GB is 8.0$"):
        stas.prepare(2, 256, 10)


def test_receive_buffers_must_fit_a_blocks_shared_memory(monkeypatch):
    _fake_gpu(monkeypatch, "H200")
    with pytest.raises(ArgumentError, match=r"^4 x 65536 B receive buffers do not fit the 227 KiB of shared memory a "
                                            r"block may use$"):
        stas.prepare(2, 65536, 10, slots=4)


def test_labels_and_bytes_per_launch():
    assert stas.RingConfig.make(2, 256, vec=8, slots=4).label() == "st.async v8 x4"
    assert stas.RingConfig.make(2, 256, via="global", slots=1).label() == "global+flags x1"
    ring = stas.Ring(stas.RingConfig.make(4, 1024), clusters=3, rounds=10, stream=None)
    assert ring.blocks == 12 and ring.bytes_per_launch == 12 * 10 * 1024


def test_expected_last_is_each_blocks_left_neighbours_last_message():
    cfg = stas.RingConfig.make(3, 64)
    result = stas.RingResult(cfg, clusters=2, rounds=5, errors=0, last=None)
    last = stas.expected_last(result, seed=11)
    assert last.shape == (6, 16)
    for b in range(6):
        cid, rank = divmod(b, 3)
        np.testing.assert_array_equal(last[b], stas.expected_message(11, cid, (rank + 2) % 3, 4, 16))
    corrupted = stas.expected_last(result, seed=11, corrupt_round=4)
    assert [int((corrupted[b] != last[b]).sum()) for b in range(6)] == [0, 1, 0, 0, 1, 0]  # rank 1 hears rank 0
    assert np.array_equal(stas.expected_last(result, seed=11, corrupt_round=3), last)  # not the last round
