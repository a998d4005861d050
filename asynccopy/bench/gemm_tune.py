"""asynccopy.gemm.tune: time every candidate configuration of one GEMM shape on the live GPU and keep
the fastest as the record of its shape class (asynccopy.tuning), which asynccopy.gemm then uses.

Candidates: every kernel that takes the dtype (and the operands' alignment) on this GPU, each of its tiles,
its stage counts from 2 to what fits (and 1), for a split-k kernel the split its rule picks, half of it and
none, where the kernel pairs a tile in clusters (B's rows off 128-byte lines) that tile both paired and alone,
the tile a cluster pair may split k on (GemmKernel.pair_k_tile) as such a pair too, and where a tile's last
wave can be shared out (stream-K) that tile with it and without (pairs too). Each candidate's C is checked against the
first candidate's before it is timed (CUDA events, median; the same operands, so the figures compare
configurations, not inputs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .. import device, tuning
from ..errors import ArgumentError, AsyncCopyError, check_int
from ..gemm_kernels import DTYPES, KERNELS, GemmConfig, cluster_of, epi_bufs_of, itemsize, paired_config
from ..gemm_schedule import split_count, stream_k_plan, work_units
from ..matmul import check_operands, configure, launch, matrix, pair_k_config, stream_k_default, why_not
from ..matrix import alignment
from .harness import median, time_ms


def kernels_for(dtype: str, kernels=None) -> tuple[str, ...]:
    """The asynccopy kernels asked for (default: every one) that multiply ``dtype``."""
    for name in kernels or ():
        if name not in KERNELS:
            raise ArgumentError(f"unknown GEMM kernel {name!r}; choose one of: {', '.join(KERNELS)}")
        if dtype not in KERNELS[name].dtypes:
            raise ArgumentError(f"GEMM kernel {name!r} takes {', '.join(KERNELS[name].dtypes)}, not {dtype}")
    return tuple(name for name in (kernels or KERNELS) if dtype in KERNELS[name].dtypes)


@dataclass
class Trial:
    kernel: str
    tile: tuple[int, int]
    stages: int
    splits: int
    ms: float
    tflops: float
    paired: bool = False  # run as cluster pairs sharing B (GemmKernel.paired_b)
    epi_bufs: int = 2  # staging buffers of C a consumer (gemm_wgmma.cu's EPI_BUFS)
    stream_k: bool = False  # the last wave's tiles shared out among all blocks (gemm_schedule.stream_k_plan)
    pair_k: bool = False  # run as cluster pairs splitting each tile's k-blocks (GemmKernel.pair_k_tile)


@dataclass
class TuneResult:
    key: str
    best: Trial
    trials: list[Trial]

    def as_dict(self) -> dict:
        return asdict(self)


def candidates(base: GemmConfig, names, a, b, facts) -> list[GemmConfig]:
    """Every configuration worth timing for these operands (see the module's docstring)."""
    out = []
    for name in names:
        rec = KERNELS[name]
        if why_not(rec, a, b, facts) is not None:
            continue
        first = configure(a, b, base.out_dtype, facts, kernel=name)
        for tile in rec.tiles_for(first.align):
            fit = min(rec.max_stages(tile, facts.smem_per_block_optin, itemsize(base.dtype)), rec.max_stages_default)
            tiles_m, tiles_n, kb = -(-a.rows // tile[0]), -(-b.cols // tile[1]), -(-a.cols // rec.bk)
            tiles = tiles_m * tiles_n
            splits = {1}
            if rec.split_k:
                s = split_count(tiles, kb, facts.sm_count)
                splits |= {s, max(1, s // 2)}
            shared = rec.stream_k and stream_k_plan(tiles, kb, facts.sm_count)[0] > 0
            for stages in sorted({1, *range(2, fit + 1)}):
                for sp in sorted(splits):
                    # stream-K as the default would take it for this tile, and (one split) the other way too
                    default_sk = stream_k_default(rec, a, b, tile, sp, facts.sm_count)
                    alone = replace(first, tile=tile, stages=stages, splits=sp, defines=(), stream_k=default_sk)
                    out.append(alone)
                    if shared and sp == 1:
                        out.append(replace(alone, stream_k=not default_sk))
                    if rec.pairs_share_b(tile, a, b, sp):
                        # with the staging buffers that fit beside these stages, their last wave shared and not
                        paired = paired_config(alone, a, b, facts, stages)
                        out.append(replace(paired, stream_k=False))
                        pairs = work_units(tiles_m, tiles_n, "b")
                        if rec.stream_k and sp == 1 and stream_k_plan(pairs, kb, facts.sm_count // 2)[0] > 0:
                            out.append(replace(paired, stream_k=True))
                    if tile == rec.pair_k_tile and sp == 1 and kb >= 2:
                        out.append(pair_k_config(alone, facts, stages))
    return out


def tune(m: int, n: int, k: int, dtype: str = "bfloat16", *, layout: str = "nn", out_dtype: str | None = None,
         kernels=None, reps: int = 10, warmup: int = 3, progress=None, save: bool = True) -> TuneResult:
    """Time every candidate configuration of an m x n x k product on the live GPU and keep the fastest
    as the record of its shape class (PyTorch or CuPy makes the operands)."""
    for value, name in ((m, "m"), (n, "n"), (k, "k")):
        check_int(value, name, 1, 1 << 20)
    if dtype not in DTYPES:
        raise ArgumentError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if layout not in tuning.LAYOUTS:
        raise ArgumentError(f"layout must be one of {', '.join(tuning.LAYOUTS)}, got {layout!r}")
    names = kernels_for(dtype, kernels)  # names a kernel that is unknown or takes another dtype
    check_int(reps, "reps", 1, 100_000)
    facts = device.current()
    xp, stream = _framework(facts)
    a_obj, b_obj, c_obj = _operands(xp, m, n, k, dtype, layout, out_dtype or dtype)
    a, b = matrix(a_obj, "a", stream=stream), matrix(b_obj, "b", stream=stream)
    base = GemmConfig(names[0] if names else "wgmma", dtype, check_operands(a, b, out_dtype), (0, 0), 1,
                      not a.row_major, b.row_major)
    configs = candidates(base, names, a, b, facts)
    if not configs:
        raise ArgumentError(f"no GEMM kernel among {', '.join(names)} can take {dtype} {layout} operands here")
    c_ptr = _ptr(c_obj)
    trials, reference = [], None
    for i, cfg in enumerate(configs, 1):
        def run(_, cfg=cfg):
            launch(cfg, a, b, c_ptr, n, stream=stream, facts=facts)

        run(0)
        stream.sync()
        got = _as_float(xp, c_obj)
        if reference is None:
            reference = got
        err = float(((got - reference) ** 2).sum() ** 0.5 / max(float((reference ** 2).sum() ** 0.5), 1e-30))
        if not err < 2e-2:  # NaN fails too
            raise AsyncCopyError(f"{cfg.kernel} tile {cfg.tile} stages {cfg.stages} splits {cfg.splits}: C differs "
                                 f"from the first candidate's by {err:.2e}")
        ms = median(time_ms(run, stream, warmup=warmup, reps=reps))
        trials.append(Trial(cfg.kernel, tuple(cfg.tile), cfg.stages, cfg.splits, ms, 2 * m * n * k / ms / 1e9,
                            cluster_of(cfg)[1] == "b", epi_bufs_of(cfg), cfg.stream_k, cfg.pair_k))
        if progress:
            t = trials[-1]
            progress(f"[{i:3d}/{len(configs)}] {m}x{n}x{k} {t.kernel} tile {t.tile[0]}x{t.tile[1]} stages {t.stages}"
                     f"{f' splits {t.splits}' if t.splits > 1 else ''}{' paired' if t.paired else ''}"
                     f"{' stream-K' if t.stream_k else ''}{' pairs split k' if t.pair_k else ''}: {t.ms:.3f} ms, "
                     f"{t.tflops:.0f} TFLOP/s")
    best = min(trials, key=lambda t: t.ms)
    entry = tuning.key(facts, dtype, layout, m, n, k, alignment(a, b))
    if save:
        tuning.save(entry, {**asdict(best), "shape": [m, n, k]})
    return TuneResult(entry, best, trials)


def _framework(facts):
    from cuda.core import Device

    stream = Device(facts.device_id).create_stream()
    try:
        import torch

        if torch.cuda.is_available():
            return torch, stream
    except ImportError:
        pass
    try:
        import cupy

        return cupy, stream
    except ImportError:
        raise AsyncCopyError("gemm.tune needs PyTorch or CuPy to make its operands") from None


def _operands(xp, m, n, k, dtype, layout, out_dtype):
    name = xp.__name__
    if name == "torch":
        dt = getattr(xp, dtype)
        a = xp.randn(k, m, device="cuda").to(dt).T if layout[0] == "t" else xp.randn(m, k, device="cuda").to(dt)
        b = xp.randn(n, k, device="cuda").to(dt).T if layout[1] == "t" else xp.randn(k, n, device="cuda").to(dt)
        c = xp.empty(m, n, device="cuda", dtype=getattr(xp, out_dtype))
        xp.cuda.synchronize()
        return a, b, c
    import numpy as np

    if "bfloat16" in (dtype, out_dtype):
        raise AsyncCopyError("gemm.tune makes bfloat16 operands with PyTorch (CuPy has no bfloat16)")
    a = (xp.random.standard_normal((k, m)).T if layout[0] == "t" else xp.random.standard_normal((m, k))).astype(dtype)
    b = (xp.random.standard_normal((n, k)).T if layout[1] == "t" else xp.random.standard_normal((k, n))).astype(dtype)
    xp.cuda.Device().synchronize()
    return a, b, xp.empty((m, n), dtype=np.dtype(out_dtype))


def _ptr(obj) -> int:
    return int(obj.data_ptr()) if hasattr(obj, "data_ptr") else int(obj.data.ptr)


def _as_float(xp, obj):
    return obj.double() if xp.__name__ == "torch" else obj.astype("float64")
