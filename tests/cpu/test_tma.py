"""asynccopy.tma without a GPU: the TMA building blocks compile for Hopper (and only there) with their
instructions, and box coordinates become the kernels' five int32 arguments."""

import numpy as np
import pytest

from asynccopy import tensormap, tma
from asynccopy.errors import ArgumentError


def test_tma_building_blocks_compile_with_their_instructions():
    module = tma.module("sm_90a")
    sass = module.sass()
    for op in ("UTMALDG", "UTMASTG", "UBLKCP", "FENCE.VIEW.ASYNC.S", "SYNCS"):
        assert op in sass, f"no {op} in tma.cu's SASS"
    names = set(module.symbol_mapping)
    assert {f"tma_load_dump<{r}>" for r in range(1, 6)} | {f"tma_store_box<{r}>" for r in range(1, 6)} <= names
    assert {"bulk_scale", "tma_walk<16, 32>", "tma_walk<8, 64>", "tma_walk<64, 64>"} <= names
    assert tma.module("9.0") is module  # one build per arch, whatever its spelling


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "8.9"])
def test_tma_needs_hopper(arch):
    with pytest.raises(ArgumentError, match=r"TMA needs compute capability 9.0; sm_8\d is below it"):
        tma.module(arch)


def test_coordinates_go_innermost_first_and_are_checked():
    spec = tensormap.TensorMapSpec.from_numpy_order("float32", (50, 40), box=(16, 32))
    got = tma._coords((44, -8), spec)
    assert got == [-8, 44, 0, 0, 0] and all(isinstance(c, np.int32) for c in got)
    with pytest.raises(tensormap.TensorMapError, match=r"coordinate 0 \(innermost\) x 4 bytes = 8 must be a multiple "
                                                       r"of 16"):
        tma._coords((0, 2), spec)


@pytest.mark.parametrize("kwargs, message", [({"chunk": 6}, r"chunk must be a positive multiple of 4 floats"),
                                             ({"chunk": 0}, r"chunk must be in \[4, 1048576\], got 0"),
                                             ({"blocks_per_sm": 0}, r"blocks_per_sm must be in \[1, 64\], got 0")])
def test_scale_bulk_checks_its_arguments_before_looking_for_a_gpu(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        tma.scale_bulk(np.zeros(16, np.float32), **kwargs)
    with pytest.raises(ArgumentError, match=r"x is a host \(NumPy\) array"):
        tma.scale_bulk(np.zeros(16, np.float32))


def test_a_store_reaching_the_end_of_a_row_off_16_bytes_is_refused():
    # 301 bf16 = 602 bytes a row (rows 608 bytes apart): the H200 writes 3 elements past a box reaching the end
    spec = tensormap.TensorMapSpec("bfloat16", (301, 40), (608,), (64, 16))
    why = tma.row_end_overrun(spec, (256, 0))
    assert why.startswith("a TMA store of this box reaches the end of a row of 301 bfloat16 (602 bytes")
    assert "3 element(s) past the row's end" in why
    assert tma.row_end_overrun(spec, (236, 8)) is None  # elements 236..299: short of the row's last, 300
    assert tma.row_end_overrun(spec, (237, 0)) is not None  # 237..300: the last one included
    # rows of a multiple of 16 bytes: a box hanging off the end is clipped exactly
    assert tma.row_end_overrun(tensormap.TensorMapSpec("uint16", (96, 40), (192,), (64, 16)), (48, 30)) is None
