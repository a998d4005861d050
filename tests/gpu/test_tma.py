"""TMA on the GPU: tensor loads of rank 1-5 with out-of-bounds fill, stores, swizzled layouts against
the model byte for byte, the 1D bulk round trip, tensor maps edited on the device, and the validator
against the driver on random configurations."""

import numpy as np
import pytest

from asynccopy import swizzle, tensormap, tma
from asynccopy.errors import ArgumentError

pytestmark = pytest.mark.cc(9, 0)  # TMA


def _host(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-4, 4, size=shape).astype(dtype)
    return rng.integers(1, 250, size=shape).astype(dtype)  # never 0: zero fill must show


def _expected_box(host, box, coords, fill):
    """The box at coords (array order) with out-of-bounds elements = fill."""
    out = np.full(box, fill, dtype=host.dtype)
    src, dst = [], []
    for c, b, d in zip(coords, box, host.shape):
        lo, hi = max(c, 0), min(c + b, d)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - c, hi - c))
    out[tuple(dst)] = host[tuple(src)]
    return out


# shape, box, coords: each hangs off the tensor somewhere (end, start or both)
RANK_CASES = {
    1: ((200,), (64,), (160,)),
    2: ((50, 40), (16, 32), (44, -8)),
    3: ((6, 20, 24), (4, 8, 16), (-1, 15, 16)),
    4: ((3, 5, 7, 16), (2, 4, 4, 16), (2, -2, 5, 0)),
    5: ((2, 3, 4, 5, 16), (2, 2, 3, 4, 16), (1, 2, -1, 3, 8)),
}


@pytest.mark.parametrize("dtype, fill", [(d, f) for f in ("zero", "nan") for d in ("float32", "float16", "uint8")
                                         if f == "zero" or d != "uint8"])  # NaN fill is for floating point only
@pytest.mark.parametrize("rank", sorted(RANK_CASES))
def test_tensor_load_of_every_rank_with_out_of_bounds_fill(any_xp, rng, rank, dtype, fill):
    shape, box, coords = RANK_CASES[rank]
    if dtype == "uint8":  # 16-byte rows, and box rows starting on 16-byte boundaries
        shape, box = shape[:-1] + (shape[-1] * 2,), box[:-1] + (box[-1] * 2,)
        coords = coords[:-1] + (coords[-1] * 2,)
    host = _host(rng, shape, dtype)
    x = any_xp.from_numpy(host)
    got = tma.load_box(x, box, coords, oob_fill=fill).view(dtype)[: int(np.prod(box))].reshape(box)
    want = _expected_box(host, box, coords, np.nan if fill == "nan" else 0)
    np.testing.assert_array_equal(got, want)  # NaN == NaN for assert_array_equal


SWIZZLE_CASES = [
    # mode, dtype, rows, inner elements: box rows exactly the span (narrower rows are padded to the
    # span by TMA, which the validator refuses: see tensormap.validate)
    ("128B", "uint16", 64, 64), ("128B", "float32", 16, 32), ("128B", "uint8", 24, 128),
    ("64B", "uint16", 32, 32), ("64B", "float32", 8, 16), ("64B", "uint8", 40, 64),
    ("32B", "uint16", 16, 16), ("32B", "float32", 12, 8), ("32B", "uint8", 8, 32),
]


@pytest.mark.parametrize("mode, dtype, rows, cols", SWIZZLE_CASES)
@pytest.mark.parametrize("base_repeats", [0, 1, 3])
def test_swizzled_load_matches_the_model(any_xp, rng, mode, dtype, rows, cols, base_repeats):
    repeat = tensormap.SWIZZLE_REPEAT[mode]
    base = (128 * base_repeats) % repeat
    host = _host(rng, (rows * 3, cols * 2), dtype)
    x = any_xp.from_numpy(host)
    box = (rows, cols)
    got = tma.load_box(x, box, (rows, 0), swizzle=mode, base=base)
    data = np.ascontiguousarray(host[rows:2 * rows, :cols])
    want = swizzle.apply(data, mode, base)
    if not np.array_equal(got[: want.size], want):
        padded = np.zeros((rows, tensormap.SWIZZLE_SPAN[mode] // data.itemsize), dtype=data.dtype)
        padded[:, :cols] = data
        alt = swizzle.apply(padded, mode, base)
        hint = "it matches rows padded to the span" if np.array_equal(got[: alt.size], alt[: got.size]) else \
            "nor rows padded to the span"
        bad = np.flatnonzero(got[: want.size] != want)
        pytest.fail(f"{bad.size} of {want.size} bytes differ from the model (first at byte {bad[0]}); {hint}")


@pytest.mark.parametrize("mode", ["none", "128B"])
def test_tensor_store_writes_the_box_and_nothing_else(any_xp, rng, mode):
    cols = 64  # uint16: 128 bytes per row, the 128B span
    target = np.full((40, 96), 0xBEEF, dtype=np.uint16)
    x = any_xp.from_numpy(target.copy())
    data = _host(rng, (16, cols), np.uint16)
    coords = (30, 48)  # rows 30..45 and columns 48..111: hangs off both edges
    tma.store_box(x, (16, cols), coords, swizzle.apply(data, mode), swizzle=mode)
    any_xp.sync()
    got = any_xp.to_numpy(x)
    want = target.copy()
    want[30:40, 48:96] = data[:10, :48]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n, chunk", [(4, 4096), (4096, 4096), (1_000_004, 4096), (3 * 1024 * 1024, 8192), (131_072, 512)])
def test_bulk_round_trip_doubles(any_xp, rng, n, chunk):
    x, host = any_xp.rand(n, rng)
    y = tma.scale_bulk(x, chunk=chunk)
    any_xp.sync()
    np.testing.assert_array_equal(any_xp.to_numpy(y), host * np.float32(2))


def test_bulk_round_trip_needs_whole_16_byte_chunks(any_xp, rng):
    x, _ = any_xp.rand(10, rng)
    with pytest.raises(tma.ArgumentError, match=r"x needs a multiple of 4 elements, got 10"):
        tma.scale_bulk(x)


@pytest.mark.parametrize("box", [(16, 32), (8, 64)])
def test_device_edited_maps_match_host_encoded_ones(any_xp, rng, box):
    big = _host(rng, (300, 256), np.float32)
    shapes = [(100, 64), (7, 40), (64, 128), (33, 12), (250, 200)]
    tensors, hosts = [], []
    for r, c in shapes:
        h = _host(rng, (r, c), np.float32)
        hosts.append(h)
        tensors.append(any_xp.from_numpy(h))
    # a view with padded rows: row stride 256 floats, 72 columns
    padded = any_xp.from_numpy(big)[5:105, 8:80]
    tensors.append(padded)
    hosts.append(big[5:105, 8:80])
    got = tma.walk(tensors, box)
    for i, (t, h) in enumerate(zip(tensors, hosts)):
        want = _expected_box(h, box, (0, 0), 0)
        np.testing.assert_array_equal(got[i], want, err_msg=f"tensor {i} ({h.shape})")
        host_map = tma.load_box(t, box, (0, 0)).view(np.float32).reshape(box)
        np.testing.assert_array_equal(host_map, got[i])


# ---------------------------------------------------------------------------------------------
# The validator against cuTensorMapEncodeTiled

def test_validator_and_driver_agree_on_adversarial_configurations():
    """10,000 configurations of tests/tensormap_fuzz.py (every field at, below and above its limits, every
    interleave x swizzle x dtype x rank): the validator's driver rules decide as cuTensorMapEncodeTiled does.
    Each disagreement is printed in full."""
    from cuda.bindings import driver
    from cuda.core import Device

    from tests import tensormap_fuzz

    buf = Device().allocate(1 << 20, stream=Device().default_stream)
    rng = np.random.default_rng()
    disagreements, asked, accepted, total = [], 0, 0, 10_000
    for _ in range(total):
        spec = tensormap_fuzz.spec(rng, int(buf.handle))
        try:
            tensormap.validate(spec, lint=False, safety=False)  # the driver's rules alone
            ours, why = True, ""
        except tensormap.TensorMapError as exc:
            ours, why = False, str(exc)
        if not tensormap_fuzz.encodable(spec):  # cuda.bindings cannot even pass it: ours must refuse
            if ours:
                disagreements.append(f"validator accepts a map the driver cannot be given: {spec}")
            continue
        err, _ = tensormap.driver_encode(spec)
        theirs = err == driver.CUresult.CUDA_SUCCESS
        asked += 1
        accepted += theirs
        if ours != theirs:
            disagreements.append(f"validator {'accepts' if ours else 'refuses (' + why + ')'}, driver says {err.name}: "
                                 f"{spec}")
    buf.close()
    for line in disagreements:
        print(line)
    assert not disagreements, f"{len(disagreements)} of {total} disagree:\n" + "\n".join(disagreements[:20])
    print(f"validator and driver agree on {asked} configurations asked of the driver ({accepted} accepted)")
    assert 0.3 * asked < accepted < 0.8 * asked, f"the sample is lopsided: {accepted} of {asked} accepted"


def test_a_store_that_would_write_past_a_rows_end_is_refused(any_xp, rng):
    # 301 two-byte columns of rows 304 apart: a box reaching column 300 would also write columns 301-303
    target = np.full((40, 304), 0xBEEF, dtype=np.uint16)
    whole = any_xp.from_numpy(target.copy())
    data = _host(rng, (16, 64), np.uint16)
    with pytest.raises(ArgumentError, match="reaches the end of a row of 301"):
        tma.store_box(whole[:, :301], (16, 64), (0, 256), data.view(np.uint8))  # the image is bytes
    tma.store_box(whole[:, :301], (16, 64), (0, 200), data.view(np.uint8))  # columns 200..263: inside the row
    any_xp.sync()
    want = target.copy()
    want[:16, 200:264] = data
    np.testing.assert_array_equal(any_xp.to_numpy(whole), want)
