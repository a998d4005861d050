"""asynccopy.workspace on the GPU: a stream's block of flags and partials outlives the stream it was made on and is
freed cleanly when the process ends."""

import subprocess
import sys
import textwrap

# A block made on a stream that another library owns and destroys before the process ends (PyTorch's and CuPy's side
# streams reach asynccopy through Stream.from_handle, which holds no reference): freed at exit on that stream, the
# driver reports the destroyed stream or crashes (an H100, 2026-12-07: signal 11 in cuMemFreeAsync under
# Py_FinalizeEx). workspace.clear() runs at exit instead, on the device's default stream once the device is idle.
PROGRAM = textwrap.dedent("""
    from cuda.bindings import driver
    from cuda.core import Device, Stream
    from asynccopy import workspace
    dev = Device(0)
    dev.set_current()
    for _ in range(3):  # three streams another library made and destroyed, each leaving a block behind
        err, handle = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
        assert err == driver.CUresult.CUDA_SUCCESS, err
        flags, partials = workspace.stream_k(0, Stream.from_handle(int(handle)), 1 << 20)
        assert partials - flags == workspace.FLAG_BYTES
        assert driver.cuStreamSynchronize(handle)[0] == driver.CUresult.CUDA_SUCCESS
        assert driver.cuStreamDestroy(handle)[0] == driver.CUresult.CUDA_SUCCESS
    print("made")
""")



def test_a_block_made_on_a_closed_stream_is_freed_cleanly_at_exit():
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "made" in run.stdout
    assert "failed during resource destruction" not in run.stderr, run.stderr[-2000:]
