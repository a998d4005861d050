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


def check_int(value, name: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int in [lo, hi] (either bound optional), else ArgumentError naming it and the range."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ArgumentError(f"{name} must be {_range(lo, hi)}, got {value}")
    return value


def check_float(value, name: str, lo: float | None = None, hi: float | None = None, *, above: bool = False) -> float:
    """``value`` as a finite float >= lo (> lo with ``above``) and <= hi, else ArgumentError."""
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ArgumentError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    if (lo is not None and (value <= lo if above else value < lo)) or (hi is not None and value > hi):
        bound = f"> {lo:g}" if above and hi is None else _range(lo, hi)
        raise ArgumentError(f"{name} must be {bound}, got {value:g}")
    return value


def check_name(value, name: str, choices) -> None:
    """ArgumentError unless ``value`` is None or a string (whether it is one of ``choices`` is the caller's check,
    which says why a known name cannot run)."""
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"{name} must be a name ({', '.join(choices)}), got {type(value).__name__}")


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"in [{lo}, {hi}]"
    return f">= {lo}" if lo is not None else f"<= {hi}"
