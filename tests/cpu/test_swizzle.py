"""The swizzle model and the bank-conflict counter on the CPU."""

import numpy as np
import pytest

from asynccopy import swizzle
from asynccopy.tensormap import TensorMapError


@pytest.mark.parametrize("mode, repeat", [("none", 128), ("32B", 256), ("64B", 512), ("128B", 1024)])
@pytest.mark.parametrize("base", [0, 128, 384])
def test_bijection_within_each_repeat(mode, repeat, base):
    offs = np.asarray(swizzle.smem_offset(np.arange(4 * repeat), mode, base))
    assert sorted(offs.tolist()) == list(range(4 * repeat))
    # only 16-byte chunks inside one 128-byte row of shared memory trade places
    assert ((offs + base) // 128 == (np.arange(4 * repeat) + base) // 128).all()


def test_sixteen_byte_chunks_move_whole():
    offs = np.asarray(swizzle.smem_offset(np.arange(1024), "128B"))
    assert (offs.reshape(-1, 16) - offs.reshape(-1, 16)[:, :1] == np.arange(16)).all()


@pytest.mark.parametrize(
    "mode, offset, want",
    [
        ("128B", 0, 0), ("128B", 128, 128 + 16), ("128B", 128 + 16, 128), ("128B", 7 * 128, 7 * 128 + 7 * 16),
        ("128B", 1024 + 128, 1024 + 128 + 16), ("64B", 128, 128 + 16), ("64B", 4 * 128, 4 * 128),
        ("32B", 128, 128 + 16), ("32B", 2 * 128, 2 * 128), ("none", 300, 300),
    ],
)
def test_known_values(mode, offset, want):
    assert int(swizzle.smem_offset(offset, mode)) == want


def test_base_offset_shifts_the_pattern():
    # a destination 128 B past a 1024-byte boundary: the box's first row is swizzled as row 1
    assert int(swizzle.smem_offset(0, "128B", base=128)) == 16
    assert int(swizzle.smem_offset(0, "128B", base=0)) == 0


def test_apply_and_undo_round_trip():
    box = np.random.default_rng(1).integers(0, 255, size=(16, 64), dtype=np.uint8)
    img = swizzle.apply(box, "64B", base=128)
    assert np.array_equal(swizzle.undo(img, box.size, "64B", base=128), box.reshape(-1))
    assert not np.array_equal(img[:box.size], box.reshape(-1))  # a round trip of two identities proves nothing
    offs = np.asarray(swizzle.smem_offset(np.arange(box.size), "64B", 128))
    assert np.array_equal(img[offs], box.reshape(-1))  # byte i of the box lands where smem_offset says
    assert np.array_equal(swizzle.apply(box, "none"), box.reshape(-1))


def test_column_read_of_swizzled_bf16_tile_is_conflict_free():
    reports = {r.access: r for r in swizzle.conflict_report(64, 64, "bf16", "128B")}
    col16 = reports["column, 16 B per lane"]
    assert col16.swizzled == col16.ideal == 4 and col16.unswizzled == 32
    assert reports["column, one element per lane"].unswizzled == 32


@pytest.mark.parametrize(
    "addresses, width, want",
    [
        (list(range(0, 128, 4)), 4, 1),       # consecutive words
        ([0] * 32, 4, 1),                     # broadcast
        ([i * 128 for i in range(32)], 4, 32),  # one bank, 32 words
        ([i * 64 for i in range(32)], 4, 16),
        (list(range(0, 512, 16)), 16, 4),     # 16-byte vectors: 4 phases of 8 lanes
        ([i * 128 for i in range(32)], 16, 32),
        ([None] * 31 + [0], 4, 1),
    ],
)
def test_wavefronts(addresses, width, want):
    assert swizzle.wavefronts(addresses, width) == want


def test_describe_prints_layout_and_counts():
    text = swizzle.describe(64, 64, "bf16", "128B", show_rows=2)
    assert "row   1:    9    8   11   10   13   12   15   14" in text
    assert "column, 16 B per lane" in text


def test_describe_rejects_rows_wider_than_the_span():
    with pytest.raises(TensorMapError, match=r"box row of 64 x 4 bytes = 256 exceeds the 128B swizzle span"):
        swizzle.describe(8, 64, "float32", "128B")


def test_unknown_mode():
    with pytest.raises(TensorMapError, match=r"swizzle mode must be one of none, 32B, 64B, 128B, got '16B'"):
        swizzle.smem_offset(0, "16B")


def test_wavefronts_checks_the_access_width():
    with pytest.raises(TensorMapError, match="access width must be 1, 2, 4, 8 or 16 bytes, got 3"):
        swizzle.wavefronts(range(32), width=3)
