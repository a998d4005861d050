"""asynccopy.workspace without a GPU: which launches share a block."""

import threading

from asynccopy import workspace


def test_the_per_thread_default_stream_is_a_block_per_thread():
    """One handle (CU_STREAM_PER_THREAD) is a different stream in each host thread, whose launches may run at once:
    they must not share flags. Other handles (a stream each; the legacy default stream, which serialises) share one
    block per device and handle."""
    here = workspace._key(0, workspace.PER_THREAD_STREAM)
    there = []
    t = threading.Thread(target=lambda: there.append(workspace._key(0, workspace.PER_THREAD_STREAM)))
    t.start()
    t.join()
    assert here != there[0] and here == workspace._key(0, workspace.PER_THREAD_STREAM)
    other = []
    t = threading.Thread(target=lambda: other.append(workspace._key(0, 0x5000)))
    t.start()
    t.join()
    assert other[0] == workspace._key(0, 0x5000) != workspace._key(1, 0x5000)

