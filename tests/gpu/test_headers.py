"""The public wrappers no package kernel uses, run: the smoke kernel copies its input bit-exactly."""

from pathlib import Path

import numpy as np
import pytest

from asynccopy import build

SMOKE = (Path(__file__).parent.parent / "data" / "wrappers_smoke.cu").read_text()


@pytest.mark.cc(9, 0)  # bulk copies
def test_unused_public_wrappers_run(facts):
    from cuda.core import Device

    from asynccopy.buffers import Scratch

    s = Device(facts.device_id).create_stream()
    scratch = Scratch(s, facts)
    x, y = scratch.alloc(1024), scratch.alloc(1024)
    try:
        scratch.fill_random(x, 1024, 7)
        scratch.fill_value(y, 1024, float("nan"))
        kernel = build.compile(SMOKE, name="wrappers_smoke").kernel("wrappers_smoke")
        build.launch(kernel, int(x.handle), int(y.handle), grid=1, block=256, stream=s)
        got, want = scratch.to_host(y, 1024), scratch.to_host(x, 1024)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    finally:
        x.close()
        y.close()
        s.close()
