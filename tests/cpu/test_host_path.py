"""What asynccopy.gemm and asynccopy.attention do on the host each call, without a GPU: cuda.core's Device, Stream,
LaunchConfig and launch, PyTorch, the kernels and the tensor maps are stood in for, so that what a call asks and
launches can be counted. What follows from the kind of call (the configuration, the kernel, its launch shape and its
shared-memory opt-in) is worked out once and kept; what may change between calls (PyTorch's current stream and so
the stream and its device, $ASYNCCOPY_HANG_TIMEOUT_MS, the addresses, C's alignment) is read again each call, and
PyTorch is asked for its current stream once a call."""

import sys
import types
import weakref
from dataclasses import replace

import cuda.core
import pytest

import asynccopy
from asynccopy import arrays, attention_launch, build, device, gemm_launch, matmul, memo, workspace

H100 = replace(device.lookup("H100-SXM"), device_id=0)
A, B, C = 1 << 32, 1 << 33, 1 << 34  # addresses: 16-byte aligned, on 128-byte lines
SIDE = 0x6000  # streams from this handle on live on device 1


class _TorchDevice:
    type = "cuda"
    index = 0


class _TorchDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class Tensor:
    """A CUDA PyTorch tensor as asynccopy.arrays reads one: its attributes, never DLPack."""

    is_cuda = True
    device = _TorchDevice()

    def __init__(self, shape, ptr, strides=None, dtype="float16"):
        self.shape, self.dtype, self._ptr = tuple(shape), _TorchDtype(dtype), ptr
        contiguous = [1]
        for extent in reversed(self.shape[1:]):
            contiguous.insert(0, contiguous[0] * extent)
        self._strides = tuple(strides) if strides is not None else tuple(contiguous)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides

    def __dlpack__(self, stream=None):
        raise AssertionError("a CUDA PyTorch tensor on the current stream is read from its attributes")


Tensor.__module__ = "torch"


class Torch(types.ModuleType):
    """torch as far as the entry points use it: the current stream (``asked`` counts the questions), empty."""

    float16, float32, bfloat16 = "float16", "float32", "bfloat16"

    def __init__(self):
        super().__init__("torch")
        self.current, self.asked, self._next = 0x5000, 0, 1 << 40
        self.cuda = types.SimpleNamespace(current_stream=self._current_stream)

    def _current_stream(self, device):
        self.asked += 1
        return types.SimpleNamespace(cuda_stream=self.current)

    def empty(self, shape, dtype, device):
        self._next += 1 << 30
        return Tensor(shape, self._next, dtype=dtype)


class Stream:
    """A cuda.core Stream by its handle."""

    def __init__(self, handle):
        self.handle = handle

    @staticmethod
    def from_handle(handle):
        return Stream(handle)

    @property
    def device(self):
        return types.SimpleNamespace(device_id=1 if self.handle >= SIDE else 0)


class Device:
    device_id = 0
    default_stream = Stream(0)

    def __init__(self, device_id=None):
        pass

    def set_current(self):
        pass


@pytest.fixture
def host(monkeypatch, tmp_path):
    """The stand-ins; returns what they saw: ``torch`` (its questions), ``configs`` (LaunchConfigs made),
    ``kernels`` ((configuration, hang bound) of each kernel asked for), ``opt_ins`` ((bytes, device) of each
    shared-memory opt-in), ``launches`` ((stream handle, LaunchConfig, kernel, arguments) of each launch)."""
    seen = types.SimpleNamespace(torch=Torch(), configs=[], kernels=[], opt_ins=[], launches=[])

    class LaunchConfig:
        def __init__(self, grid, block, shmem_size, cluster):
            self.grid, self.block, self.shmem_size, self.cluster = grid, block, shmem_size, cluster
            seen.configs.append(self)

    def kernel(cfg, arch, hang_ns):
        seen.kernels.append((cfg, hang_ns))
        return f"kernel {len(seen.kernels)}"

    monkeypatch.setitem(sys.modules, "torch", seen.torch)
    for name, value in (("Device", Device), ("Stream", Stream), ("LaunchConfig", LaunchConfig),
                        ("launch", lambda stream, config, k, *args: seen.launches.append((stream.handle, config, k, args)))):
        monkeypatch.setattr(cuda.core, name, value)
    monkeypatch.setattr(device, "current", lambda device_id=None: H100)
    monkeypatch.setattr(build, "allow_dynamic_smem", lambda k, nbytes, device_id: seen.opt_ins.append((nbytes, device_id)))
    for module in (gemm_launch, attention_launch):
        monkeypatch.setattr(module, "_kernel", kernel)
        monkeypatch.setattr(module, "_tensor_map", lambda *numbers: ("map",) + numbers)  # a map: the numbers it holds
        monkeypatch.setattr(module, "_plans", memo.Memo())
    monkeypatch.setattr(matmul, "_configs", memo.Memo())
    monkeypatch.setattr(arrays, "_streams", {})
    # the stream's workspace (the persistent grid's unit counter, the key split's partials): two addresses
    monkeypatch.setattr(workspace, "stream_k", lambda device_id, stream, partial_bytes: (1 << 35, (1 << 35) + 4096))
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))  # no tuning record of this machine's
    monkeypatch.delenv("ASYNCCOPY_HANG_TIMEOUT_MS", raising=False)
    return seen


def _gemm_operands():
    return Tensor((256, 256), A), Tensor((256, 256), B), Tensor((256, 256), C)


def test_a_gemm_call_asks_pytorch_for_its_stream_once(host):
    a, b, c = _gemm_operands()
    asynccopy.gemm(a, b, out=c)  # the stream, then a, b and out are read on it
    assert host.torch.asked == 1
    got = asynccopy.gemm(a, b)  # and the new C is made on it
    assert host.torch.asked == 2 and isinstance(got, Tensor)


def test_a_gemm_launch_is_worked_out_once_and_each_call_brings_its_addresses(host):
    a, b, c = _gemm_operands()
    for _ in range(3):
        asynccopy.gemm(a, b, out=c)
    assert len(host.configs) == 1 and len(host.kernels) == 1 and len(host.opt_ins) == 1 and len(host.launches) == 3
    assert {id(config) for _, config, _, _ in host.launches} == {id(host.configs[0])}
    stream, config, kernel, args = host.launches[-1]
    assert stream == host.torch.current and config.shmem_size == host.opt_ins[0][0] > 48 * 1024
    assert [args[i][1] for i in range(3)] == [A, B, C]  # the maps of a, b and C (address first)
    asynccopy.gemm(Tensor((256, 256), A + 1024), b, out=Tensor((256, 256), C + (1 << 20)))  # other buffers
    assert [host.launches[-1][3][i][1] for i in range(3)] == [A + 1024, B, C + (1 << 20)] and len(host.configs) == 1


def test_what_may_change_between_gemm_calls_is_read_each_call(host, monkeypatch):
    a, b, c = _gemm_operands()
    asynccopy.gemm(a, b, out=c)
    host.torch.current = SIDE  # another current stream, on device 1: launched there, opted in there
    asynccopy.gemm(a, b, out=c)
    assert host.launches[-1][0] == SIDE and host.opt_ins[-1][1] == 1 and len(host.kernels) == 1
    monkeypatch.setenv("ASYNCCOPY_HANG_TIMEOUT_MS", "5")  # the bounded build, then the unbounded one again
    asynccopy.gemm(a, b, out=c)
    assert host.kernels[-1][1] == 5_000_000 and host.launches[-1][2] == "kernel 2"
    monkeypatch.delenv("ASYNCCOPY_HANG_TIMEOUT_MS")
    asynccopy.gemm(a, b, out=c)
    assert host.launches[-1][2] == "kernel 1" and len(host.kernels) == 2
    # C's rows 520 bytes apart: off 16 bytes, stored from the registers (a build of ALIGN 8), no map of C
    asynccopy.gemm(a, b, out=Tensor((256, 256), C, strides=(260, 1)))
    cfg, args = host.kernels[-1][0], host.launches[-1][3]
    assert cfg.align == 8 and args[2] == args[0] and args[3] == C and int(args[7]) == 260


def _qkv():
    return tuple(Tensor((1, 2, 128, 64), ptr) for ptr in (A, B, C))


def test_an_attention_call_asks_pytorch_once_and_its_launch_is_worked_out_once(host):
    q, k, v = _qkv()
    for _ in range(3):
        out = asynccopy.attention(q, k, v)  # q, k, v read on the stream, and out made on it
    assert host.torch.asked == 3 and isinstance(out, Tensor)
    assert len(host.configs) == 1 and len(host.kernels) == 1 and len(host.opt_ins) == 1 and len(host.launches) == 3
    args = host.launches[-1][3]
    assert [args[i][1] for i in range(4)] == [A, B, C, out.data_ptr()]  # maps of q, k, v and out


def test_what_may_change_between_attention_calls_is_read_each_call(host, monkeypatch):
    q, k, v = _qkv()
    asynccopy.attention(q, k, v)
    host.torch.current = SIDE
    asynccopy.attention(q, k, v)
    assert host.launches[-1][0] == SIDE and host.opt_ins[-1][1] == 1 and len(host.kernels) == 1
    monkeypatch.setenv("ASYNCCOPY_HANG_TIMEOUT_MS", "5")
    asynccopy.attention(q, k, v)
    assert host.kernels[-1][1] == 5_000_000 and host.launches[-1][2] == "kernel 2"
    asynccopy.attention(q, k, v, scale=0.5)  # the scale is an argument of the call (times log2 e)
    assert float(host.launches[-1][3][9]) == pytest.approx(0.5 * attention_launch.LOG2E) and len(host.kernels) == 2


def test_a_launch_opts_in_once_a_stream_and_keeps_no_stream(monkeypatch):
    launched, opted = [], []
    monkeypatch.setattr(cuda.core, "LaunchConfig", lambda **shape: shape)
    monkeypatch.setattr(cuda.core, "launch", lambda stream, config, kernel, *args: launched.append((stream.handle, config)))
    monkeypatch.setattr(build, "allow_dynamic_smem", lambda k, nbytes, device_id: opted.append(device_id))
    run = build.Launch("kernel", grid=4, block=128, shmem=100_000)
    first, side = Stream(0x5000), Stream(SIDE)
    for stream in (first, first, side, first):
        run(stream)
    assert opted == [0, 1, 0] and [h for h, _ in launched] == [0x5000, 0x5000, SIDE, 0x5000]
    assert all(config is launched[0][1] for _, config in launched) and launched[0][1]["shmem_size"] == 100_000
    gone = weakref.ref(first)
    del first, stream
    assert gone() is None  # the caller's stream is not kept alive by the launch
    run(Stream(0x5000))  # a new Stream object: its device asked again
    assert opted == [0, 1, 0, 0]


def test_a_pairs_resident_clusters_are_asked_on_each_device(host, monkeypatch):
    """The clusters a kernel keeps resident depend on the device (its SMs): one kernel (the same build on two GPUs of
    one arch, an H100 SXM and an H100 PCIe) gets its grid from each device's own answer, not from the first's."""
    made, asked = {}, []
    monkeypatch.setattr(gemm_launch, "_kernel", lambda cfg, arch, hang_ns: made.setdefault((cfg, arch, hang_ns), "kernel"))
    monkeypatch.setattr(gemm_launch, "_resident", memo.Memo())
    monkeypatch.setattr(gemm_launch.clusters, "max_active_clusters", lambda kernel, size, *, block, shmem, stream:
                        asked.append(stream.device.device_id) or {0: 66, 1: 57}[stream.device.device_id])
    pcie = replace(device.lookup("H100-PCIe"), device_id=1)
    first, side = Stream(0x5000), Stream(SIDE)
    ma, mb = (matmul.matrix(Tensor((4096, 4096), ptr), name, stream=first) for name, ptr in (("a", A), ("b", B)))
    cfg = replace(matmul.configure(ma, mb, "float16", H100), defines=matmul.PAIRED, stream_k=False)
    gemm_launch.launch(cfg, ma, mb, C, 4096, stream=first, facts=H100)
    gemm_launch.launch(cfg, ma, mb, C, 4096, stream=side, facts=pcie)
    gemm_launch.launch(cfg, ma, mb, C, 4096, stream=side, facts=pcie)
    assert len(made) == 1 and asked == [0, 1]
    assert [(config.grid, config.cluster) for config in host.configs] == [(66, 2), (57, 2)]
    assert [launch[1].grid for launch in host.launches] == [66, 57, 57]
