"""asynccopy: asynchronous global → shared data movement on NVIDIA GPUs, usable and measured from Python."""

from . import device
from .build import compile, disassemble
from .device import DeviceFacts
from .errors import ArgumentError, AsyncCopyError, CompileError, DeviceError
from .matmul import gemm
from .mechanism import MECHANISMS, Mechanism, mechanisms, register
from .model import KernelCosts, Operand, plan
from .sdpa import attention
from .stream import StreamConfig, reference, run

__version__ = "0.1.0"


def _tune(m, n, k, dtype="bfloat16", **kwargs):
    """asynccopy.gemm.tune(m, n, k, dtype): time every candidate configuration of this shape on the live
    GPU and keep the fastest as the record of its shape class, which asynccopy.gemm then uses
    (asynccopy.bench.gemm_tune; keyword arguments: layout, out_dtype, kernels, reps, warmup, progress, save)."""
    from .bench.gemm_tune import tune

    return tune(m, n, k, dtype, **kwargs)


gemm.tune = _tune

__all__ = [
    "ArgumentError", "AsyncCopyError", "CompileError", "DeviceError", "DeviceFacts", "gemm", "KernelCosts", "MECHANISMS",
    "Mechanism", "attention", "Operand", "StreamConfig", "compile", "device", "disassemble", "mechanisms", "plan", "reference",
    "register", "run",
]
