"""asynccopy.workspace on the GPU: a stream's block of flags and partials outlives the stream it was made on, the
process still ends cleanly, and clear() hands every block back."""

import subprocess
import sys
import textwrap

# A block made on a stream that another library owns and destroys before the process ends (PyTorch's and CuPy's side
# streams reach asynccopy through Stream.from_handle, which holds no reference): freed at exit on that stream, the
# driver reports the destroyed stream or crashes (an H100, 2026-12-07: signal 11 in cuMemFreeAsync under
# Py_FinalizeEx). At exit the blocks are kept instead (workspace._keep_at_exit: the driver takes them back with the
# process); without that hook this program died of signal 11 (checked on an H100).
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



def test_a_block_made_on_a_destroyed_stream_does_not_break_the_exit():
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "made" in run.stdout
    assert "failed during resource destruction" not in run.stderr, run.stderr[-2000:]


def test_clear_hands_every_block_back_and_keeps_the_current_device(facts):
    from cuda.core import Device

    from asynccopy import workspace

    dev = Device(facts.device_id)
    dev.set_current()
    s = dev.create_stream()
    flags, _ = workspace.stream_k(facts.device_id, s, 4096)
    assert workspace.stream_k(facts.device_id, s, 4096)[0] == flags  # kept per stream
    workspace.clear()
    assert not workspace._blocks and Device().device_id == facts.device_id
    s.close()
