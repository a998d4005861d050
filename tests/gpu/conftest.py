"""GPU tests: skipped, with the reason, where there is no CUDA device."""

import importlib

import numpy as np
import pytest

from asynccopy import device
from asynccopy.errors import DeviceError


@pytest.fixture(scope="session")
def facts():
    try:
        return device.current()
    except DeviceError as exc:
        pytest.skip(f"no CUDA device: {exc}")


@pytest.fixture(autouse=True)
def _needs_gpu(facts):
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
def xp(request):
    return _framework(request.param)


@pytest.fixture(scope="session")
def any_xp():
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
