"""GPU tests. One gate, with the reason in the skip:

* the ``facts`` fixture (every test gets it through the autouse ``_gate``) skips with
  "no CUDA device: ..." where there is no GPU;
* ``@pytest.mark.cc(9, 0)`` (on a test, a class, a module's ``pytestmark`` or a ``pytest.param``) skips
  with "needs compute capability 9.0; <device> is X.Y" on an older GPU;
* :func:`require_cc` does the same inside a test whose compute capability depends on its parameters
  (``require_cc(facts, mechanism.get(name).min_cc)``).

The marker is registered in tests/conftest.py.
"""

import importlib

import numpy as np
import pytest

from asynccopy import device
from asynccopy.errors import DeviceError


def require_cc(facts, cc) -> None:
    """Skip the running test unless the device's compute capability is at least ``cc`` = (major, minor)."""
    cc = tuple(cc)
    if len(cc) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in cc):
        raise ValueError(f"a compute capability is (major, minor), got {cc!r}")
    if tuple(facts.cc) < cc:
        pytest.skip(f"needs compute capability {cc[0]}.{cc[1]}; {facts.name} is {facts.cc[0]}.{facts.cc[1]}")


@pytest.fixture(scope="session")
def facts():
    try:
        return device.current()
    except DeviceError as exc:
        pytest.skip(f"no CUDA device: {exc}")


@pytest.fixture(autouse=True)
def _gate(request, facts):
    """Every GPU test needs a device; a `cc` marker asks for a compute capability too."""
    marker = request.node.get_closest_marker("cc")
    if marker is not None:
        if marker.kwargs or len(marker.args) != 2:
            raise ValueError(f"use @pytest.mark.cc(major, minor), got args {marker.args} kwargs {marker.kwargs}")
        require_cc(facts, marker.args)
    return facts


class Frameworks:
    """Fresh random inputs and poisoned outputs in CuPy or PyTorch, and the way back to NumPy."""

    def __init__(self, name):
        self.name = name
        self.mod = importlib.import_module(name)

    def rand(self, shape, rng):
        host = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        return self.from_numpy(host), host

    def from_numpy(self, host):
        if self.name == "cupy":
            return self.mod.asarray(host)
        return self.mod.from_numpy(host).cuda()

    def nan(self, shape):
        if self.name == "cupy":
            return self.mod.full(shape, np.nan, dtype=np.float32)
        return self.mod.full(shape, float("nan"), dtype=self.mod.float32, device="cuda")

    def to_numpy(self, a):
        if self.name == "cupy":
            return self.mod.asnumpy(a)
        return a.cpu().numpy()

    def sync(self):
        if self.name == "cupy":
            self.mod.cuda.Device().synchronize()
        else:
            self.mod.cuda.synchronize()


def _framework(name):
    try:
        return Frameworks(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")


@pytest.fixture(params=["cupy", "torch"])
def xp(request, facts):  # facts first: without a GPU, that is the reason to give
    return _framework(request.param)


@pytest.fixture(scope="session")
def any_xp(facts):
    """The first of CuPy, PyTorch that is installed."""
    for name in ("cupy", "torch"):
        try:
            return Frameworks(name)
        except ImportError:
            continue
    pytest.skip("needs CuPy or PyTorch")


@pytest.fixture
def rng():
    return np.random.default_rng()  # fresh inputs every run


def check_stream_output(got, host, intensity, tile):
    """Every element written; bit-exact at intensity 0, float64-referenced (rtol 1e-5) above."""
    from asynccopy import stream

    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} elements never written"
    if intensity == 0:
        np.testing.assert_array_equal(got, host)
    else:
        np.testing.assert_allclose(got, stream.reference(host, intensity, tile), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def torch():
    """PyTorch, where it is installed and has CUDA (else the test is skipped with the reason)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch
