"""Device facts and the harness's helpers on the GPU."""

import numpy as np
import pytest

import asynccopy
from asynccopy import device
from asynccopy.bench.harness import Scratch
from asynccopy.errors import DeviceError


def test_facts_are_live(facts):
    assert facts.device_id >= 0 and facts.sm_count > 0 and facts.l2_bytes > 0
    assert facts.smem_per_block_optin >= 48 * 1024 and facts.smem_per_sm >= facts.smem_per_block_optin
    assert facts.arch == asynccopy.build.arch_of_cc(facts.cc)


def test_too_old_device_is_named(facts):
    with pytest.raises(DeviceError, match=rf"TMA needs compute capability 99.0 or newer; {facts.name} is"):
        device.require((99, 0), "TMA")


def test_fill_kernels(facts):
    from cuda.core import Device

    s = Device().create_stream()
    scratch = Scratch(s, facts)
    n = 1_000_003
    buf = scratch.alloc(n)
    scratch.fill_random(buf, n, seed=7)
    a = scratch.to_host(buf, n)
    scratch.fill_random(buf, n, seed=8)
    b = scratch.to_host(buf, n)
    assert a.min() >= -1 and a.max() < 1 and abs(a.mean()) < 0.01 and 0.3 < a.std() < 0.7
    assert (a != b).mean() > 0.99
    scratch.fill_value(buf, n, float("nan"))
    assert np.isnan(scratch.to_host(buf, n)).all()
    buf.close()


def test_example_custom_pipeline_runs():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples" / "custom_pipeline.py"
    spec = importlib.util.spec_from_file_location("custom_pipeline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
