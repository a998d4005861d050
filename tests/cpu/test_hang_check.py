"""The hang-check switch (ASYNCCOPY_HANG_TIMEOUT_MS): parsed strictly, reaching every kernel when set,
absent from every kernel when not."""

import re

import pytest

from asynccopy import build, stream
from asynccopy.errors import ArgumentError


@pytest.mark.parametrize("value, ns", [("", 0), ("0", 0), ("100", 100_000_000), ("2.5", 2_500_000), ("0.0", 0)])
def test_switch_values(monkeypatch, value, ns):
    monkeypatch.setenv("ASYNCCOPY_HANG_TIMEOUT_MS", value)
    assert build.hang_timeout_ns() == ns


@pytest.mark.parametrize("value", ["-5", "soon", "1e9", "nan"])
def test_bad_switch_values_are_named(monkeypatch, value):
    monkeypatch.setenv("ASYNCCOPY_HANG_TIMEOUT_MS", value)
    with pytest.raises(ArgumentError, match=rf"ASYNCCOPY_HANG_TIMEOUT_MS must be a number of milliseconds in "
                                            rf"\(0, 3600000\], got '{re.escape(value)}'"):
        build.hang_timeout_ns()


def _ws_sass(monkeypatch, tmp_path, value):
    if value is None:
        monkeypatch.delenv("ASYNCCOPY_HANG_TIMEOUT_MS", raising=False)
    else:
        monkeypatch.setenv("ASYNCCOPY_HANG_TIMEOUT_MS", value)
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    build.clear_memory_cache()
    cfg = stream.StreamConfig.make("ws_ldgsts", 2, producers=1)
    module = cfg.compile("sm_90a")
    return module


def test_switch_bounds_the_waits_and_names_them(monkeypatch, tmp_path):
    on = _ws_sass(monkeypatch, tmp_path, "50")
    sass = on.sass()
    assert "BPT.TRAP" in sass and "CALL" in sass  # printf (vprintf) and trap on timeout
    assert b"stream_ws_ldgsts" in on.cubin and b"barrier wait timed out" in on.cubin
    off = _ws_sass(monkeypatch, tmp_path, None)
    assert "BPT.TRAP" not in off.sass() and b"barrier wait timed out" not in off.cubin
    assert off.cubin != on.cubin


def test_every_waiting_kernel_names_its_waits():
    # every barrier wait in the package's kernels goes through a named, bounded wait (asynccopy/debug.cuh)
    from pathlib import Path

    kernels = Path(build.kernel_dir())
    raw = re.compile(r"\.(wait|arrive_and_wait|consumer_wait|wait_parity)\(|mbarrier_try_wait_parity(_cluster)?\(")
    for path in sorted(kernels.glob("*.cu")):
        text = path.read_text()
        assert not raw.search(text), f"{path.name} waits without the hang check: {raw.search(text).group(0)}"
        for call in re.findall(r"mbarrier_wait_parity(?:_cluster)?\(([^;]*)\);", text):
            assert "{" in call, f"{path.name}: a wait without a WaitSite: {call}"
