"""The hang check on the GPU: with ASYNCCOPY_HANG_TIMEOUT_MS set, a deadlocked barrier wait prints the
kernel, the barrier and the phase, and the launch fails instead of hanging. Each case runs in a child
process: the trap ends that process's CUDA context."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.cc(8, 0)  # mbarriers (hang_demo.cu) and ws_ldgsts

CHILD = textwrap.dedent(
    """
    import numpy as np
    from cuda.core import Device
    from asynccopy import build, stream
    dev = Device(); dev.set_current(); s = dev.create_stream()
    what = {what!r}
    if what == "demo":
        k = build.compile(build.read_kernel("hang_demo.cu"), name="hang_demo").kernel("wrong_arrival_count")
        build.launch(k, np.uint32(1), grid=2, block=64, stream=s)
    else:  # a package kernel built with one arrival too many expected on its full barriers
        cfg = stream.StreamConfig.make("ws_ldgsts", 2, producers=1)
        mod = build.compile(build.read_kernel("stream_ws.cu"), name_expressions=(cfg.name_expression(),),
                            defines={{"ASYNCCOPY_FAULT_FULL_ARRIVALS": 1}}, name="ws_fault")
        n = 4096 * 8
        x, y = dev.allocate(n * 4, stream=s), dev.allocate(n * 4, stream=s)
        build.launch(mod.kernel(cfg.name_expression()), int(x.handle), int(y.handle), np.uint64(n), np.int32(0),
                     grid=2, block=cfg.block, stream=s, shmem=cfg.smem_bytes)
    s.sync()
    print("CHILD FINISHED")
    """
)


def _run(what: str, tmp_path, timeout_ms: str = "200"):
    env = dict(os.environ, ASYNCCOPY_HANG_TIMEOUT_MS=timeout_ms, ASYNCCOPY_CACHE_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "-c", CHILD.format(what=what)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_wrong_arrival_count_traps_with_a_message(tmp_path):
    done = _run("demo", tmp_path)
    assert done.returncode != 0 and "CHILD FINISHED" not in done.stdout
    out = done.stdout + done.stderr
    assert "asynccopy: barrier wait timed out after" in out, out[-2000:]
    assert "kernel wrong_arrival_count, barrier bar[0], waiting for phase parity 0" in out, out[-2000:]


def test_a_package_kernel_with_a_wrong_count_names_its_barrier(tmp_path):
    done = _run("ws", tmp_path)
    assert done.returncode != 0 and "CHILD FINISHED" not in done.stdout
    out = done.stdout + done.stderr
    # the consumers wait on full[0] first; the producer's wait on empty[] times out a little later
    assert re.search(r"kernel stream_ws_ldgsts, barrier (full|empty)\[[01]\], waiting for phase parity [01]", out), \
        out[-2000:]
