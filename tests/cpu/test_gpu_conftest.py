"""The GPU tests' one gate (tests/gpu/conftest.py), run here on fake devices: no device skips everything
with the reason; the `cc` marker and require_cc skip, naming the device, below a compute capability."""

from dataclasses import replace

import pytest

from asynccopy import device
from tests.gpu.conftest import require_cc

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

A100 = replace(device.KNOWN["A100-80GB"], name="NVIDIA A100-SXM4-80GB", device_id=0)

CONFTEST = """
from dataclasses import replace
import pytest
from asynccopy import device
from asynccopy.errors import DeviceError
from tests.conftest import pytest_configure  # the marker's registration
from tests.gpu.conftest import _gate, facts  # the gate, and the real facts fixture

def pytest_sessionstart(session):
    if {fake!r} == "none":
        def current(device_id=None):
            raise DeviceError("no CUDA GPU available (hidden by the test)")
    else:
        fake = replace(device.KNOWN[{fake!r}], name="NVIDIA " + {fake!r}, device_id=0)
        def current(device_id=None):
            return fake
    device.current = current
"""

TESTS = """
import pytest
from tests.gpu.conftest import require_cc

pytestmark = pytest.mark.cc(8, 0)

def test_module_level(facts):
    assert facts.device_id == 0

@pytest.mark.cc(9, 0)
def test_hopper():
    pass

@pytest.mark.parametrize("cc", [pytest.param((9, 0), marks=pytest.mark.cc(9, 0)), (8, 0)])
def test_param_marks(cc):
    pass

@pytest.mark.parametrize("need", [(8, 0), (9, 0)])
def test_require_cc(facts, need):
    require_cc(facts, need)

@pytest.mark.cc(9)
def test_bad_marker():
    pass
"""


@pytest.fixture
def gpu_suite(pytester, monkeypatch):
    import asynccopy.device

    real = asynccopy.device.current
    monkeypatch.setattr(asynccopy.device, "current", real)  # restored after the inner session replaced it

    def run(fake):
        pytester.makeconftest(CONFTEST.format(fake=fake))
        pytester.makepyfile(test_gated=TESTS)
        return pytester.runpytest_inprocess("-rs", "--strict-markers", "-p", "no:cacheprovider")

    return run


def _skips(result):
    """{reason: count} from the -rs summary ("SKIPPED [n] where: reason")."""
    import re

    out = {}
    for line in result.outlines:
        m = re.match(r"SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", line)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1))
    return out


def test_no_device_skips_every_test_with_the_reason(gpu_suite):
    result = gpu_suite("none")
    result.assert_outcomes(skipped=7)
    assert _skips(result) == {"no CUDA device: no CUDA GPU available (hidden by the test)": 7}


def test_an_older_device_skips_what_needs_more_and_runs_the_rest(gpu_suite):
    result = gpu_suite("A100-80GB")
    # run: module_level, param_marks[cc1], require_cc[need0]; skipped: hopper, param_marks[cc0], require_cc[need1];
    # the malformed marker is an error, not a skip
    result.assert_outcomes(passed=3, skipped=3, errors=1)
    assert _skips(result) == {"needs compute capability 9.0; NVIDIA A100-80GB is 8.0": 3}
    result.stdout.fnmatch_lines(["*ValueError: use @pytest.mark.cc(major, minor), got args (9,)*"])


def test_a_new_enough_device_runs_everything(gpu_suite):
    result = gpu_suite("H200")
    result.assert_outcomes(passed=6, errors=1)


def test_require_cc_on_its_own():
    require_cc(A100, (8, 0))
    require_cc(A100, (7, 5))
    with pytest.raises(pytest.skip.Exception, match=r"^needs compute capability 8.6; NVIDIA A100-SXM4-80GB is 8.0$"):
        require_cc(A100, (8, 6))
    with pytest.raises(ValueError, match=r"a compute capability is \(major, minor\), got \(9, '0'\)"):
        require_cc(A100, (9, "0"))
