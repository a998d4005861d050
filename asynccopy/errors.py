"""The exceptions asynccopy raises. Each message names the problem in one line."""

from __future__ import annotations


class AsyncCopyError(RuntimeError):
    """Base class of every error asynccopy raises on purpose."""


class ArgumentError(AsyncCopyError, ValueError):
    """A bad argument: unknown mechanism, impossible configuration, wrong array."""


class DeviceError(AsyncCopyError):
    """No usable GPU, or one whose compute capability is too low for a mechanism."""


class CompileError(AsyncCopyError):
    """NVRTC rejected a kernel; the message carries the compiler log."""
