"""What every test session shares: its own compile cache, the `cc` marker the GPU tests are gated by
(tests/gpu/conftest.py), and a test-only tile-stream mechanism (one record and one kernel,
tests/data/stream_extra.cu) that a test registers and unregisters with the ``extra_mechanism`` fixture."""

import os
from pathlib import Path

import pytest

from asynccopy import mechanism
from asynccopy.mechanism import CopyOp, Mechanism

pytest_plugins = ("pytester",)  # tests/cpu/test_gpu_conftest.py runs the GPU gate on a fake device

DATA = Path(__file__).parent / "data"
EXTRA_KERNEL = DATA / "stream_extra.cu"
EXTRA_NAME = "test_ldgsts"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cc(major, minor): the test needs a GPU of at least this compute capability "
        "(tests/gpu/conftest.py skips it, naming the device, elsewhere)")


@pytest.fixture(scope="session", autouse=True)
def _compile_cache(tmp_path_factory):
    """Every test session compiles into its own cache directory (never the user's), or into
    $ASYNCCOPY_TEST_CACHE_DIR where it is set (several sessions on one machine share their compiles:
    scripts/sanitize.sh runs the suite once per tool)."""
    old = os.environ.get("ASYNCCOPY_CACHE_DIR")
    shared = os.environ.get("ASYNCCOPY_TEST_CACHE_DIR")
    os.environ["ASYNCCOPY_CACHE_DIR"] = shared or str(tmp_path_factory.mktemp("asynccopy-cache"))
    yield
    if old is None:
        os.environ.pop("ASYNCCOPY_CACHE_DIR", None)
    else:
        os.environ["ASYNCCOPY_CACHE_DIR"] = old


def _pairs_of_chunks(cfg):
    """The test kernel's own rule: each thread copies its 16-byte chunks two at a time."""
    if cfg.tile % (8 * cfg.threads):
        return (f"{cfg.mechanism}: every thread copies 16-byte chunks in pairs: tile must be a multiple of "
                f"8 x threads = {8 * cfg.threads} floats, got {cfg.tile}")
    return None


def extra_record() -> Mechanism:
    """The test-only mechanism's record: everything the package needs to know about it."""
    return Mechanism(EXTRA_NAME, "test only: cp.async.ca, two 16-byte chunks per thread and step", "cp.async", (8, 0),
                     EXTRA_KERNEL, "stream_extra_ldgsts", ("threads", "tile", "stages"), (CopyOp("LDGSTS"),),
                     rules=(_pairs_of_chunks,))


@pytest.fixture
def extra_mechanism():
    """The test-only mechanism, registered for one test (through the package's public name) and gone after."""
    import asynccopy

    assert EXTRA_NAME not in mechanism.MECHANISMS, "a previous test left the test-only mechanism registered"
    mech = asynccopy.register(extra_record())
    try:
        yield mech
    finally:
        mechanism.unregister(EXTRA_NAME)
