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


def panel_grid(plt, panels: int, most_cols: int):
    """A figure of ``panels`` panels (4 x 3 inches each), at most ``most_cols`` a row: (fig, axes array)."""
    cols = max(1, min(most_cols, panels))
    rows = max(1, -(-panels // cols))
    return plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), dpi=110, squeeze=False)


def finish_panels(plt, fig, axes, used: int, title: str, path: str, *, xlabel: str) -> str:
    """Label, grid and legend the first ``used`` panels (TFLOP/s against ``xlabel``), blank the rest, title
    the figure, save it to ``path`` and close it; returns the path."""
    for ax in list(axes.flat)[:used]:
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("TFLOP/s", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[used:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
