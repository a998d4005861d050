"""Every tensor-map rule: a failing case and the text of its error (no GPU needed)."""

import pytest

from asynccopy import tensormap
from asynccopy.tensormap import TensorMapError, TensorMapSpec

GOOD = TensorMapSpec("float32", dims=(1024, 512), strides=(4096,), box=(32, 64), address=0x7F0000000000)
GOOD3 = TensorMapSpec("float16", dims=(8, 64, 64), strides=(16, 1024), box=(8, 16, 16), address=0x7F0000000000)


def test_good_specs_pass():
    assert tensormap.validate(GOOD) is GOOD
    tensormap.validate(tensormap.with_fields(GOOD3, interleave="16B"))
    tensormap.validate(tensormap.with_fields(GOOD3, interleave="32B", swizzle="32B", strides=(32, 1024)))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"dims": (4,) * 6, "strides": (16,) * 5, "box": (4,) * 6}, r"rank must be in \[1, 5\], got 6"),
        ({"dtype": "complex64"}, r"dtype complex64 has no tensor-map type; supported: uint8"),
        ({"swizzle": "256B"}, r"swizzle must be one of none, 32B, 64B, 128B on compute capability 9.0, got '256B'"),
        ({"interleave": "8B"}, r"interleave must be one of none, 16B, 32B"),
        ({"oob_fill": "inf"}, r"oob_fill must be one of zero, nan"),
        ({"l2_promotion": "512B"}, r"l2_promotion must be one of none, 64B, 128B, 256B"),
        ({"interleave": "16B"}, r"interleave 16B needs rank >= 3, got rank 2"),
        ({"address": 0x7F0000000008}, r"global address 0x7f0000000008 must be 16-byte aligned"),
        ({"strides": ()}, r"global_strides needs rank - 1 = 1 entries"),
        ({"box": (32,)}, r"box_dim needs 2 entries, got 1"),
        ({"element_strides": (1,)}, r"element_strides needs 2 entries, got 1"),
        ({"dims": (0, 512)}, r"global_dim\[0\] must be in \[1, 2\^32\], got 0"),
        ({"dims": (1024, 2**32 + 1)}, r"global_dim\[1\] must be in \[1, 2\^32\], got 4294967297"),
        ({"strides": (4100,)}, r"global_stride of dim 1 = 4100 bytes must be a multiple of 16"),
        ({"strides": (2**40,)}, r"global_stride of dim 1 = 1099511627776 bytes must be in \[0, 2\^40\)"),
        ({"box": (0, 64)}, r"box_dim\[0\] must be in \[1, 256\], got 0"),
        ({"box": (32, 257)}, r"box_dim\[1\] must be in \[1, 256\], got 257"),
        ({"box": (5, 64)}, r"box_dim\[0\] \(innermost\) x 4 bytes = 20 must be a multiple of 16$"),
        ({"element_strides": (1, 9)}, r"element_strides\[1\] must be in \[1, 8\], got 9"),
        ({"element_strides": (0, 1)}, r"element_strides\[0\] must be in \[1, 8\], got 0"),
        ({"swizzle": "64B"}, r"box_dim\[0\] \(innermost\) x 4 bytes = 128 exceeds the 64B swizzle span of 64 bytes"),
        ({"dtype": "int32", "oob_fill": "nan"}, r"oob_fill nan needs a floating-point dtype, got int32"),
        ({"dims": (16, 512)}, r"box_dim\[0\] = 32 is larger than the tensor's global_dim\[0\] = 16"),
        ({"dtype": "float64", "dims": (256, 512), "box": (256, 256)},
         r"the box counts 524288 bytes \(element size x the product of box_dim\[i\] // element_strides\[i\]\); the "
         r"driver allows at most 233472 \(228 KiB\)"),
        ({"swizzle": "128B", "box": (16, 64)},
         r"box_dim\[0\] \(innermost\) x 4 bytes = 64 is narrower than the 128B swizzle span: TMA then pads"),
    ],
)
def test_rule_is_named(changes, message):
    with pytest.raises(TensorMapError, match=message):
        tensormap.validate(tensormap.with_fields(GOOD, **changes))


def test_issue_example_bf16_box_past_the_128B_span():
    spec = TensorMapSpec("bfloat16", dims=(4096, 64), strides=(8192,), box=(300 // 1, 8))
    with pytest.raises(TensorMapError, match=r"box_dim\[0\] must be in \[1, 256\], got 300"):
        tensormap.validate(spec)
    spec = TensorMapSpec("bfloat16", dims=(4096, 64), strides=(8192,), box=(96, 8), swizzle="128B")
    tensormap.validate(tensormap.with_fields(spec, box=(64, 8)))  # exactly the span
    with pytest.raises(TensorMapError, match=r"box_dim\[0\] \(innermost\) x 2 bytes = 192 exceeds the 128B swizzle span"):
        tensormap.validate(spec)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"interleave": "32B", "swizzle": "128B", "strides": (32, 1024)},
         r"interleave 32B needs swizzle 32B \(cuTensorMapEncodeTiled's documentation; driver 580 does not check it\)"),
        ({"interleave": "32B", "swizzle": "32B", "strides": (48, 1024)},
         r"global_stride of dim 1 = 48 bytes must be a multiple of 32 \(interleave 32B\)"),
        ({"interleave": "32B", "swizzle": "32B", "strides": (32, 1024), "address": 0x7F0000000010},
         r"global address 0x7f0000000010 must be 32-byte aligned \(interleave 32B\)"),
    ],
)
def test_interleave_rules(changes, message):
    with pytest.raises(TensorMapError, match=message):
        tensormap.validate(tensormap.with_fields(GOOD3, **changes))


def test_lint_and_safety_can_be_turned_off():
    big_box = tensormap.with_fields(GOOD, dims=(16, 512))
    assert tensormap.validate(big_box, lint=False) is big_box
    narrow = tensormap.with_fields(GOOD, swizzle="128B", box=(16, 64))
    with pytest.raises(TensorMapError, match="narrower than the 128B swizzle span"):
        tensormap.validate(narrow, lint=False)
    assert tensormap.validate(narrow, lint=False, safety=False) is narrow


@pytest.mark.parametrize("swizzle, need", [("none", 128), ("32B", 256), ("64B", 512), ("128B", 1024)])
def test_smem_destination_alignment(swizzle, need):
    tensormap.check_smem_destination(0, swizzle)
    tensormap.check_smem_destination(need * 3, swizzle)
    with pytest.raises(TensorMapError, match=rf"must be {need}-byte aligned; address offset {need // 2} is not"):
        tensormap.check_smem_destination(need // 2, swizzle)


def test_numpy_order_conversion():
    spec = TensorMapSpec.from_numpy_order("bf16", (8, 1024, 512), box=(1, 64, 64), swizzle="128B")
    assert spec.dtype == "bfloat16" and spec.dims == (512, 1024, 8) and spec.strides == (1024, 1024 * 1024)
    assert spec.box == (64, 64, 1) and spec.box_bytes == 64 * 64 * 2
    tensormap.validate(spec)
    padded = TensorMapSpec.from_numpy_order("float32", (100, 30), box=(16, 16), strides_bytes=(128, 4))
    assert padded.strides == (128,)


def test_box_bytes_with_element_strides():
    spec = TensorMapSpec("float32", dims=(64, 64), strides=(256,), box=(16, 16), element_strides=(1, 2))
    assert spec.box_bytes == 16 * 8 * 4  # dimension 1 is traversed every other element


@pytest.mark.parametrize(
    "spec, coords, message",
    [
        (TensorMapSpec("uint8", (80, 50), (80,), (64, 16)), (-8, 44),
         r"coordinate 0 \(innermost\) x 1 bytes = -8 must be a multiple of 16: a box row starts on a 16-byte boundary"),
        (GOOD, (2, 0), r"coordinate 0 \(innermost\) x 4 bytes = 8 must be a multiple of 16"),
        (GOOD, (0,), r"coords needs 2 entries, got 1"),
        (GOOD, (0, 2**31), r"coordinate 1 = 2147483648 does not fit in int32"),
    ],
)
def test_bad_coordinates(spec, coords, message):
    with pytest.raises(TensorMapError, match=message):
        tensormap.check_coords(spec, coords)


def test_good_coordinates():
    tensormap.check_coords(GOOD, (-4, -3))
    tensormap.check_coords(TensorMapSpec("uint8", (80, 50), (80,), (64, 16)), (-16, 44))


def test_box_size_counts_element_strides_as_the_driver_does():
    # The driver counts 8 x 192 x 5 x 3 x 6 x (3 // 2) = 138240 bytes and accepts the map, although one
    # load delivers ceil(3 / 2) = 2 of the last dimension, 276480 bytes: more than a block can hold, which
    # the safety layer refuses. Limit 228 KiB, floors included (an H200, driver 580).
    spec = TensorMapSpec("uint64", (400, 50, 50, 50, 50), (3200, 160000, 8000000, 400000000),
                         (192, 5, 3, 6, 3), (1, 1, 1, 1, 2))
    tensormap.validate(spec, safety=False)
    with pytest.raises(TensorMapError, match=r"one load of the box delivers 276480 bytes, more than the 227 KiB"):
        tensormap.validate(spec)
    with pytest.raises(TensorMapError, match=r"the box counts 276480 bytes"):
        tensormap.validate(tensormap.with_fields(spec, element_strides=(1, 1, 1, 1, 1), box=(192, 5, 3, 6, 2)),
                           safety=False)
    at_limit = TensorMapSpec("bfloat16", (116, 259, 218, 286), (272, 70448, 15357664), (32, 8, 19, 24))
    tensormap.validate(at_limit, safety=False, lint=False)  # 233472 bytes exactly: the driver accepted it
    strided_out = tensormap.with_fields(spec, box=(192, 5, 3, 6, 1), element_strides=(1, 1, 1, 1, 2))
    tensormap.validate(strided_out, lint=False)  # 1 // 2 = 0: the driver counts nothing for that dimension


def test_interleaved_boxes_need_whole_16_byte_rows_and_strides_may_be_zero():
    spec = TensorMapSpec("float32", (8, 20, 30), (32, 640), (4, 8, 8), interleave="16B")
    tensormap.validate(spec, lint=False)
    with pytest.raises(TensorMapError, match=r"box_dim\[0\] \(innermost\) x 4 bytes = 12 must be a multiple of 16"):
        tensormap.validate(tensormap.with_fields(spec, box=(3, 8, 8)), lint=False)
    tensormap.validate(tensormap.with_fields(spec, strides=(0, 640)), lint=False)  # the driver accepts 0


def test_on_adversarial_configurations_the_validator_names_a_rule_or_accepts_what_the_driver_can_be_asked():
    # the CPU twin of scripts/tensormap_agreement.py (which asks the driver): no other exception, and nothing
    # that cuda.bindings could not even pass (a list of the wrong length, a field out of its integer type) accepted
    import numpy as np

    from tests import tensormap_fuzz

    rng = np.random.default_rng(20261201)
    verdicts = {True: 0, False: 0}
    for _ in range(4000):
        spec = tensormap_fuzz.spec(rng, 0x7F0000000000)
        try:
            tensormap.validate(spec, lint=False, safety=False)
        except TensorMapError:
            verdicts[False] += 1
            continue
        verdicts[True] += 1
        assert tensormap_fuzz.encodable(spec), f"accepted, but the driver cannot be asked: {spec}"
    assert min(verdicts.values()) > 1000, f"a lopsided sample: {verdicts}"  # both verdicts well exercised
