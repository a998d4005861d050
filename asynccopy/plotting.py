"""matplotlib, headless, or a clear error: the one import every PNG of the package goes through."""

from __future__ import annotations

from .errors import ArgumentError


def pyplot():
    """matplotlib.pyplot on the Agg backend; ArgumentError naming the missing package otherwise."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ArgumentError("drawing a PNG needs matplotlib: pip install matplotlib") from None
    return plt
