"""`asynccopy model-check --png` and `bench --plan --png`: the model check's figure, the measured time of every
variant against its stage count beside the simulator's (asynccopy.bench.model_check)."""

from __future__ import annotations

from ..model.costs import Overheads
from ..model.memory import MemoryCurve
from . import model_check
from .stream_bench import StreamBench


def plot(result: StreamBench, compute_ns: dict[int, float], path: str,
         overheads: dict[str, Overheads] | None = None, memory: MemoryCurve | None = None) -> str:
    """Measured (solid, dots) and predicted (dashed) time against the stage count, a panel per variant
    and a colour per intensity; the planner's stage count circled."""
    from ..plotting import pyplot

    plt = pyplot()
    _, rows = model_check.check(result, compute_ns, overheads, memory)
    model = model_check.Predictor(result, compute_ns, overheads, memory)
    planned = {(r.label, r.intensity): r.recommended for r in rows}
    labels = list(dict.fromkeys(r.label for r in rows))
    intensities = sorted({r.intensity for r in rows})
    cols = min(4, len(labels))
    nrows = -(-len(labels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), dpi=110, squeeze=False)
    colors = plt.get_cmap("viridis")([i / max(1, len(intensities) - 1) * 0.9 for i in range(len(intensities))])
    for ax, label in zip(axes.flat, labels):
        for color, k in zip(colors, intensities):
            pts = sorted((r.stages, r.ms) for r in result.rows if r.label == label and r.intensity == k)
            if not pts:
                continue
            stages = [s for s, _ in pts]
            ax.plot(stages, [ms for _, ms in pts], "-o", color=color, ms=3, label=f"intensity {k}")
            ax.plot(stages, [model.ms(label, k, s) for s in stages], "--", color=color, lw=1)
            at = dict(pts).get(planned.get((label, k)))
            if at is not None:
                ax.plot([planned[(label, k)]], [at], "o", mfc="none", mec="red", ms=8)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("stages", fontsize=8)
        ax.set_ylabel("ms", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("measured (solid) vs simulated (dashed); red circle: the planner's stage count", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
