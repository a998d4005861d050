"""The wgmma attention kernel's trace without a GPU: the buffer layout the kernel writes (the same
constants on both sides), its decoding into per-consumer tile events, the medians, the model's prediction
and the picture; and `asynccopy trace attention`'s checks before a GPU is looked for."""

import re

import numpy as np
import pytest

from asynccopy import attention_trace as at
from asynccopy import build, cli, device

H200 = device.lookup("H200")


def test_the_layout_is_the_kernels():
    src = build.read_kernel("attention_wgmma.cu")
    consts = dict(re.findall(r"(TRACE_TILES|PRODUCER_EVENTS|CONSUMER_EVENTS) = (\d+)", src))
    assert int(consts["TRACE_TILES"]) == at.MAX_TILES
    assert int(consts["PRODUCER_EVENTS"]) == len(at.PRODUCER_EVENTS)
    assert int(consts["CONSUMER_EVENTS"]) == len(at.CONSUMER_EVENTS)
    # per tile the producer's events and each consumer warpgroup's (2 or 3 of them: AttentionConfig.consumers)
    assert "TILE_WORDS_OF = PRODUCER_EVENTS + C * CONSUMER_EVENTS" in src
    assert "TRACE_STRIDE_OF = ac::trace::HEADER + TRACE_TILES * TILE_WORDS_OF<C>" in src
    assert (at.tile_words(2), at.tile_words(3), at.stride(3)) == (12, 17, 4 + 64 * 17)
    # the events in the kernel's order
    assert "K_ISSUED = 0, V_ISSUED = 1" in src
    assert "K_READY = 0, S_DONE = 1, SOFTMAX_DONE = 2, V_READY = 3, PV_DONE = 4" in src
    assert at.CONSUMER_EVENTS == ("k_ready", "s_done", "softmax_done", "v_ready", "pv_done")


def _buffer(blocks=2, tiles=5, tick_ns=0.5, consumers=2):
    """A trace as the kernel would leave it: ticks of 0.5 ns; per tile 1000 ticks apart; the consumers' events
    in order; block 1 never started."""
    raw = np.zeros(at.buffer_words(blocks, consumers), dtype=np.uint64)
    rec = raw[: at.stride(consumers)]
    rec[:4] = [10_000, 5_000, 10_000 + int(tick_ns * 100_000), 105_000]
    for j in range(tiles):
        base = at.HEADER + j * at.tile_words(consumers)
        t = 6_000 + 1000 * j
        rec[base:base + 2] = [t, t + 10]
        for w in range(consumers):
            c = base + 2 + w * len(at.CONSUMER_EVENTS)
            rec[c:c + 5] = [t + 400 + w, t + 500 + w, t + 600 + w, t + 610 + w, t + 900 + w]
    rec[at.HEADER + (tiles - 1) * at.tile_words(consumers) + 2 + 4] = 0  # consumer 0 never finished the last tile
    return raw


def test_decode_gives_each_consumers_tiles_in_ns():
    (b,) = at.decode(_buffer(), 2, 2)
    assert b.block == 0 and sorted(b.k_issued) == [0, 1, 2, 3, 4]
    assert [t.tile for t in b.consumers[0]] == [0, 1, 2, 3] and [t.tile for t in b.consumers[1]] == [0, 1, 2, 3, 4]
    t = b.consumers[0][1]  # ticks of 0.5 ns since the block's start, the block started at ns 0
    assert t.k_ready == pytest.approx((6_000 + 1000 + 400 - 5_000) * 0.5)
    assert t.pv_done - t.k_ready == pytest.approx(500 * 0.5)
    med = at.summary(b)
    assert med["qk_ns"] == pytest.approx(50) and med["softmax_ns"] == pytest.approx(50)
    assert med["load_ns"] == pytest.approx(200, abs=1) and med["tile_ns"] == pytest.approx(250)
    assert med["pv_ns"] == pytest.approx(145)  # from V there (610), later than the softmax's end (600)
    with pytest.raises(Exception, match="the trace is empty"):
        at.decode(np.zeros(at.buffer_words(1, 2), dtype=np.uint64), 1, 2)
    with pytest.raises(Exception, match="a trace of 3 blocks has"):
        at.decode(_buffer(), 3, 2)
    (c,) = at.decode(_buffer(consumers=3), 2, 3)  # head dim 64: three consumer warpgroups a block
    assert [len(x) for x in c.consumers] == [4, 5, 5] and c.consumers[2][1].k_ready == pytest.approx(
        (6_000 + 1000 + 400 + 2 - 5_000) * 0.5)


def test_an_items_costs_from_the_block_marks_and_tile_events():
    (b,) = at.decode(_buffer(tiles=12, consumers=3), 2, 3)
    assert (b.start, b.end) == (0.0, pytest.approx(50_000))  # the header's clock pair, on the launch's axis
    got = at.item_costs([b])
    # consumer 0 never finished tile 11: 11 tiles; 1000 ticks of 0.5 ns a tile; K issued 1000 ticks after the
    # start, there 400 after that; the last P V 500 ticks after its K; the end mark far after it
    assert got["tiles"] == 11 and got["steady_tile"] == pytest.approx(500)
    assert got["start_to_k_issue"] == pytest.approx(500) and got["start_to_k_ready"] == pytest.approx(700)
    assert got["last_tile"] == pytest.approx(250)
    assert got["epilogue"] == pytest.approx(50_000 - (6_000 + 10_000 + 902 - 5_000) * 0.5)
    assert got["span"] == pytest.approx(50_000) and got["fixed"] == pytest.approx(50_000 - 11 * 500)
    assert np.isnan(got["gap"])  # one block: no earlier end to start after
    later = at.AttentionBlockTrace(1, b.k_issued, b.v_issued, b.consumers, b.end + 64, 2 * b.end)
    assert at.item_costs([b, later])["gap"] == pytest.approx(64)
    with pytest.raises(Exception, match="no traced block finished 4 tiles"):
        at.item_costs(at.decode(_buffer(tiles=3), 2, 2))


def test_the_model_and_the_picture(tmp_path):
    pytest.importorskip("matplotlib")
    (b,) = at.decode(_buffer(tiles=12, consumers=3), 2, 3)
    sim = at.simulated(b, 2, 128, H200)
    assert len(sim.events) == b.tiles() and all(e.compute_end - e.compute_start == pytest.approx(250)
                                                for e in sim.events)
    path = at.timeline_png(b, str(tmp_path / "t.png"), stages=2, head_dim=128, facts=H200)
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--head-dim", "96"], "--head-dim must be one of 64, 128, got 96"),
    (["--dtype", "float32"], "--dtype must be one of bfloat16, float16, got 'float32'"),
    (["--seq", "0"], r"--seq must be in \[1, 16777216\], got 0"),
    (["--stages", "9"], r"--stages must be in \[1, 8\], got 9"),
    (["--png", "t.txt"], "the picture format comes from the extension"),
    (["--variant", "fast"], "unknown wgmma variant 'fast'; known: .*overlap.*pingpong"),
])
def test_trace_attention_names_a_bad_flag_first(argv, message, capsys):
    assert cli.main(["trace", "attention", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_traced_variant_is_the_builds_macros():
    from asynccopy.attention_kernels import VARIANTS

    assert at.check_variant(None, 128) == ()
    assert at.check_variant("overlap", 128) == VARIANTS["wgmma"]["overlap"]
    with pytest.raises(Exception, match="'persistent' cannot be traced: a traced build follows one item a block"):
        at.check_variant("persistent", 128)
    with pytest.raises(Exception, match="unknown wgmma variant 'rows32'"):  # an mma variant, not wgmma's
        at.check_variant("rows32", 64)
