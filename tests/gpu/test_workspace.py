"""asynccopy.workspace on the GPU: a stream's block of flags and partials outlives the stream it was made on and is
freed cleanly when the process ends."""

import subprocess
import sys
import textwrap

# A block made on a stream that is destroyed before the process ends: freed at exit by the block's own stream,
# the driver reports the destroyed stream (or crashes: an H100, 2026-12-07, signal 11 in cuMemFreeAsync under
# Py_FinalizeEx). workspace.clear() runs at exit instead, on the device's default stream once the device is idle.
PROGRAM = textwrap.dedent("""
    from cuda.core import Device
    from asynccopy import workspace
    dev = Device(0)
    dev.set_current()
    for _ in range(3):  # three streams, each with its block, each closed while its block is kept
        s = dev.create_stream()
        flags, partials = workspace.stream_k(0, s, 1 << 20)
        assert partials - flags == workspace.FLAG_BYTES
        s.sync()
        s.close()
    print("made")
""")


def test_a_block_made_on_a_closed_stream_is_freed_cleanly_at_exit():
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "made" in run.stdout
    assert "failed during resource destruction" not in run.stderr, run.stderr[-2000:]
