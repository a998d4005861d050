"""asynccopy: asynchronous global → shared data movement on NVIDIA GPUs, usable and measured from Python."""

from . import device
from .build import compile, disassemble
from .device import DeviceFacts
from .errors import ArgumentError, AsyncCopyError, CompileError, DeviceError
from .matmul import gemm
from .mechanism import MECHANISMS, Mechanism, mechanisms, register
from .model import KernelCosts, Operand, plan
from .stream import StreamConfig, reference, run

__version__ = "0.1.0"

__all__ = [
    "ArgumentError", "AsyncCopyError", "CompileError", "DeviceError", "DeviceFacts", "gemm", "KernelCosts", "MECHANISMS",
    "Mechanism", "Operand", "StreamConfig", "compile", "device", "disassemble", "mechanisms", "plan", "reference",
    "register", "run",
]
