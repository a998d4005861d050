"""The command line without a GPU: fixtures that hide the local GPU, or show a table device as if it were
one, in this process (safe on a GPU machine too: no command of these tests reaches a real device)."""

import os
import sys
from dataclasses import replace

import pytest

from asynccopy import device
from asynccopy.errors import DeviceError


@pytest.fixture
def no_gpu(monkeypatch):
    def current(device_id=None):
        raise DeviceError("no CUDA GPU available (hidden by the test)")

    monkeypatch.setattr(device, "current", current)


@pytest.fixture
def fake_a100(monkeypatch):
    """An A100 (compute capability 8.0) as the local GPU."""
    facts = replace(device.KNOWN["A100-80GB"], name="NVIDIA A100-SXM4-80GB", device_id=0)
    monkeypatch.setattr(device, "current", lambda device_id=None: facts)
    return facts


def hidden_gpu_env():
    """The environment of a child process that sees no GPU, whether or not the machine has one."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")


def run_cli(*argv, **kwargs):
    import subprocess

    return subprocess.run([sys.executable, "-m", "asynccopy", *argv], capture_output=True, text=True,
                          env=hidden_gpu_env(), timeout=300, **kwargs)
