"""Attention forward from Python on asynccopy's pipelined kernels (kernels/attention_*.cu), with PyTorch's
``scaled_dot_product_attention`` semantics, so that one can be swapped for the other:

    out = asynccopy.attention(q, k, v)                       # q [b, hq, lq, d], k, v [b, hkv, lk, d]
    out, lse = asynccopy.attention(q, k, v, causal=True, return_lse=True)
    out = asynccopy.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (b, s, h, d) memory

Semantics (PyTorch's documented reference implementation of SDPA): scale 1 / sqrt(head_dim) unless given;
``causal`` is ``is_causal``: the mask ``tril(ones(lq, lk))``, aligned to the top left, so query i sees
keys j <= i whatever lq and lk are (``torch.nn.attention.bias.causal_upper_left`` says the same); no row is
ever fully masked. Grouped-query attention as ``enable_gqa``: query head h reads key/value head
h // (hq // hkv). ``lse`` is float32 [b, hq, lq], the natural log of sum_j exp(scale q_i . k_j) over the
keys each row sees (the logsumexp PyTorch's flash backend returns for the backward pass).

Data flows one way: arrays → Tensor4 views → checks on shapes, dtypes and strides alone (pure Python, one
clear error: :func:`check_inputs`, testable without a GPU) → an AttentionConfig (kernel record, dtype,
head dim, stages, causal; kept per problem) → compile (cached) → launch on the caller's stream
(asynccopy.attention_launch: worked out once per configuration and problem) → out of the caller's kind.
Each kernel is one record in KERNELS (asynccopy.attention_kernels): its source and template, what it takes,
its tile, its stage counts, the instructions its SASS must show.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from . import arrays, device
from .attention_kernels import (
    CONSUMERS_KNOB,
    DTYPES,
    KERNELS,
    KEYS_KNOB,
    AttentionConfig,
    AttentionKernel,
)
from .attention_launch import launch
from .attention_schedule import consumers_for_problem, with_persistence, with_turns
from .dtypes import dtype_name, numpy_dtype
from .errors import ArgumentError, check_float, check_int, check_name
from .matrix import ITEMSIZE

__all__ = ["DTYPES", "KERNELS", "AttentionConfig", "AttentionKernel", "Problem", "Tensor4", "attention",
           "check_inputs", "check_out", "configure", "launch", "tensor4", "why_not"]

AXES = ("batch", "heads", "seq", "head_dim")
ROW_ALIGN = 16  # bytes: the kernels copy rows in 16-byte chunks
MAX_SEQ = 2**31 - 1024  # int32 positions in the kernels, a tile past the end included


# ---------------------------------------------------------------------------------------------
# Arrays and their checks


@dataclass(frozen=True)
class Tensor4:
    """A caller's array as the checks see it: its shape and element strides (any length: the checks say
    when it is not 4-D), dtype name, address and device."""

    name: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements
    dtype: str
    ptr: int = 1 << 30
    device_id: int = 0
    obj: object = None


@dataclass(frozen=True)
class Problem:
    batch: int
    heads: int  # query heads
    kv_heads: int
    q_len: int
    k_len: int
    head_dim: int
    dtype: str

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.kv_heads


def _contiguous_strides(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for extent in reversed(shape):
        out.append(acc)
        acc *= extent
    return tuple(reversed(out))


def tensor4(obj, name: str, *, stream, torch_streams: dict[int, int] | None = None) -> Tensor4:
    """``obj`` viewed through DLPack / __cuda_array_interface__ (ordered after its producer's stream onto
    ``stream``), not yet checked beyond being a CUDA array. ``torch_streams``: see arrays.torch_stream."""
    ptr, shape, strides, dt, device_id = arrays.device_layout(obj, name, stream=stream, torch_streams=torch_streams)
    shape = tuple(map(int, shape))
    strides = tuple(map(int, strides)) if strides is not None else _contiguous_strides(shape)
    return Tensor4(name, shape, strides, dtype_name(dt), int(ptr), int(device_id), obj)


def _check_rows(t: Tensor4) -> None:
    """The rules every array of a kernel follows: 4-D, bf16 / f16, head_dim contiguous, rows 16-byte aligned."""
    if len(t.shape) != 4:
        raise ArgumentError(f"{t.name} must be 4-D (batch, heads, seq, head_dim), got {len(t.shape)} dimensions "
                            f"(shape {t.shape})")
    if t.dtype not in DTYPES:
        raise ArgumentError(f"{t.name} must be {' or '.join(DTYPES)}, got {t.dtype}")
    if 0 in t.shape:  # no element: nothing is read or written, whatever its strides (CuPy's are 0 there)
        return
    if t.shape[3] > 1 and t.strides[3] != 1:
        raise ArgumentError(f"{t.name}'s head_dim must be contiguous (element stride 1), got stride {t.strides[3]} "
                            f"(shape {t.shape}, strides {t.strides})")
    size = ITEMSIZE[t.dtype]
    if t.ptr % ROW_ALIGN:
        raise ArgumentError(f"{t.name}'s data pointer {t.ptr:#x} is not {ROW_ALIGN}-byte aligned (an offset view?); "
                            f"the kernels copy 16-byte chunks of each row")
    for axis in range(3):
        if t.shape[axis] > 1 and t.strides[axis] < 0:
            raise ArgumentError(f"{t.name}'s {AXES[axis]} stride {t.strides[axis]} is negative (a reversed view)")
        if t.shape[axis] > 1 and (t.strides[axis] * size) % ROW_ALIGN:
            raise ArgumentError(f"{t.name}'s {AXES[axis]} stride {t.strides[axis]} elements ({t.strides[axis] * size} "
                                f"bytes) is not a multiple of {ROW_ALIGN} bytes; the kernels copy 16-byte chunks of "
                                f"each row (make it contiguous)")


def check_inputs(q: Tensor4, k: Tensor4, v: Tensor4) -> Problem:
    """The problem q, k, v pose, once each is checked and they are checked against each other."""
    for t in (q, k, v):
        _check_rows(t)
    for t in (k, v):
        if t.dtype != q.dtype:
            raise ArgumentError(f"q, k and v must have one dtype, got q {q.dtype} and {t.name} {t.dtype}")
        if t.device_id != q.device_id:
            raise ArgumentError(f"q is on device {q.device_id} and {t.name} on device {t.device_id}")
        if t.shape[0] != q.shape[0]:
            raise ArgumentError(f"{t.name}'s batch {t.shape[0]} differs from q's {q.shape[0]}")
        if t.shape[3] != q.shape[3]:
            raise ArgumentError(f"{t.name}'s head_dim {t.shape[3]} differs from q's {q.shape[3]}")
    if k.shape != v.shape:
        raise ArgumentError(f"k and v must have one shape, got k {k.shape} and v {v.shape}")
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    if hkv < 1 or hq % hkv:
        raise ArgumentError(f"k and v's heads ({hkv}) must divide q's heads ({hq}) (grouped-query attention)")
    if lk < 1:
        raise ArgumentError(f"k and v need at least one key: their seq is {lk}")
    return Problem(b, hq, hkv, lq, lk, d, q.dtype)


def check_out(out: Tensor4, p: Problem, device_id: int = 0, inputs: tuple[Tensor4, ...] = ()) -> None:
    """``out`` as a kernel writes it: q's shape and dtype, rows as the inputs', no element twice, apart from inputs."""
    _check_rows(out)
    want = (p.batch, p.heads, p.q_len, p.head_dim)
    if out.shape != want:
        raise ArgumentError(f"out must have q's shape {want}, got {out.shape}")
    if out.dtype != p.dtype:
        raise ArgumentError(f"out must be {p.dtype} (q's dtype), got {out.dtype}")
    if out.device_id != device_id:
        raise ArgumentError(f"q is on device {device_id} and out on device {out.device_id}")
    if arrays.self_overlapping(out.shape, out.strides):
        raise ArgumentError(f"out overlaps itself (a broadcast view? strides {out.strides} for shape {out.shape})")
    spans = [(t.name, arrays.span(t.ptr, t.shape, t.strides, ITEMSIZE[t.dtype])) for t in (out, *inputs)]
    arrays.check_apart("out", spans[0][1], spans[1:])


# ---------------------------------------------------------------------------------------------
# Choosing a configuration


def why_not(rec: AttentionKernel, p: Problem, facts) -> str | None:
    """Why ``rec`` cannot take this problem on this device (None: it can)."""
    if facts.cc < rec.min_cc:
        return f"needs compute capability {rec.min_cc[0]}.{rec.min_cc[1]}; {facts.name} is {facts.cc[0]}.{facts.cc[1]}"
    if p.dtype not in rec.dtypes:
        return f"takes {', '.join(rec.dtypes)}, not {p.dtype}"
    if p.head_dim not in rec.head_dims:
        return (f"takes head_dim {' or '.join(map(str, rec.head_dims))}, got {p.head_dim}"
                + (" (256 would need more registers a thread than there are)" if p.head_dim == 256 else ""))
    if rec.fit(p.head_dim, facts.smem_per_block_optin, ITEMSIZE[p.dtype]) < 1:
        return (f"needs {rec.stage_bytes(p.head_dim) // 1024} KiB of shared memory a stage; {facts.name} allows a "
                f"block {facts.smem_per_block_optin // 1024} KiB")
    if max(p.heads, p.batch) > 65535:
        return f"launches (query tiles, heads, batch) blocks: heads and batch must be <= 65535, got {p.heads}, {p.batch}"
    if max(p.q_len, p.k_len) > MAX_SEQ:
        return f"counts positions in 32 bits: q_len and k_len must be <= {MAX_SEQ}, got {p.q_len}, {p.k_len}"
    return None


def configure(p: Problem, facts, *, kernel: str | None = None, stages=None, causal: bool = False) -> AttentionConfig:
    """The configuration for this problem: the kernel asked for (or the first that can take it) and its
    stage count (the caller's, else the record's default for the head dim, within what fits)."""
    if kernel is not None and kernel not in KERNELS:
        raise ArgumentError(f"unknown attention kernel {kernel!r}; choose one of: {', '.join(KERNELS)}")
    names = [kernel] if kernel is not None else list(KERNELS)
    reasons = {name: why_not(KERNELS[name], p, facts) for name in names}
    usable = [name for name in names if reasons[name] is None]
    if not usable:
        raise ArgumentError("no attention kernel can take these inputs here: "
                            + "; ".join(f"{name} {why}" for name, why in reasons.items()))
    size = ITEMSIZE[p.dtype]
    if kernel is None and stages is not None and isinstance(stages, int):
        # the first that can run that many stages here (another may, where the first cannot)
        deep = [n for n in usable if stages <= KERNELS[n].fit(p.head_dim, facts.smem_per_block_optin, size)]
        usable = deep or usable
    rec = KERNELS[usable[0]]
    limit = facts.smem_per_block_optin
    wide = rec.keys_for(p.head_dim, causal)
    fit, fit_narrow = rec.fit(p.head_dim, limit, size, keys=wide), rec.fit(p.head_dim, limit, size)
    launch = _consumers(rec, p, facts, causal)
    if stages is not None:
        stages = check_int(stages, "stages", 1, rec.max_stages)
        if stages > fit_narrow:
            raise ArgumentError(f"{stages} stages of {rec.stage_bytes(p.head_dim, size) // 1024} KiB (head_dim "
                                f"{p.head_dim}) do not fit the {limit // 1024} KiB of shared memory "
                                f"a block may use on {facts.name}; at most {fit_narrow}")
    else:
        stages = min(fit or fit_narrow, rec.default_stages[rec.head_dims.index(p.head_dim)])
    # a deeper pipeline than the wide key tile leaves room for takes the narrow one
    cfg = AttentionConfig(rec.name, p.dtype, p.head_dim, stages, bool(causal),
                          defines=launch + (() if stages <= fit else _narrow(rec)) + rec.head_knobs_for(p.head_dim))
    # the record's knobs for the mask, where the build fits a block and as many blocks an SM as they were measured with
    knobs, blocks = rec.knobs_for(p.head_dim, causal)
    mask = cfg.with_defines(knobs)
    if mask.fits(limit) and facts.smem_per_sm // (mask.smem_bytes + rec.smem_reserve) >= blocks:
        cfg = mask
    return with_persistence(with_turns(cfg, p.q_len, p.k_len), limit, p.q_len, p.k_len)


_configured = functools.lru_cache(maxsize=1024)(configure)  # attention()'s, per problem, device and arguments


def _narrow(rec: AttentionKernel) -> tuple[tuple[str, object], ...]:
    """The knob that gives ``rec`` its narrow key tile (tile[1] keys)."""
    return ((KEYS_KNOB, rec.tile[1]),)


def _consumers(rec: AttentionKernel, p: Problem, facts, causal: bool) -> tuple[tuple[str, object], ...]:
    """The knob for the consumer count the launch model gives this problem, where it is not the record's."""
    c = consumers_for_problem(rec, p.head_dim, p.q_len, p.k_len, p.heads, p.batch, bool(causal), facts.sm_count,
                              p.kv_heads)
    return () if c == rec.consumers_for(p.head_dim) else ((CONSUMERS_KNOB, c),)


def _new(like: Tensor4, shape: tuple[int, ...], dtype: str, stream, torch_streams: dict[int, int] | None = None
         ) -> arrays.Output:
    src = arrays.DeviceArray(like.obj, like.ptr, math.prod(shape), shape, numpy_dtype(dtype), like.device_id)
    return arrays.empty_like(src, stream=stream, torch_streams=torch_streams)


def _check_flags(causal, scale, stages, return_lse, kernel) -> int | None:
    """The caller's stage count as an int, once the flags and kernel are checked."""
    for name, flag in (("causal", causal), ("return_lse", return_lse)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ArgumentError(f"{name} must be True or False, got {flag!r}")
    if scale is not None:
        check_float(scale, "scale")
    check_name(kernel, "kernel", KERNELS)
    return None if stages is None else check_int(stages, "stages", 1, max(rec.max_stages for rec in KERNELS.values()))


def attention(q, k, v, *, causal: bool = False, scale: float | None = None, kernel: str | None = None, out=None,
              return_lse: bool = False, stream=None, stages: int | None = None):
    """softmax(scale q k^T [+ causal mask]) v for 4-D CUDA arrays (PyTorch, CuPy, JAX, ...): q [batch,
    heads, q_len, head_dim], k and v [batch, kv_heads, k_len, head_dim], all bf16 or all f16, any strides
    with head_dim contiguous and rows 16-byte aligned (a (batch, seq, heads, head_dim) array viewed with
    ``transpose(1, 2)`` is taken as it is). PyTorch SDPA's semantics (see the module's docstring): scale
    1 / sqrt(head_dim) by default, ``causal`` aligned top-left, kv_heads dividing heads. Returns a new
    contiguous array of q's kind (or ``out``, q's shape and dtype, written in place); with ``return_lse``
    also (out, lse), lse float32 [batch, heads, q_len]. Queued on ``stream`` (default: the current stream
    of q's framework). ``kernel``: one of KERNELS (default: the first that can take the inputs here);
    ``stages``: the depth of the K/V pipeline (default: the kernel's, within the shared memory)."""
    for name, x in (("q", q), ("k", k), ("v", v)) + ((("out", out),) if out is not None else ()):
        arrays.check_device_array(x, name)
    stages = _check_flags(causal, scale, stages, return_lse, kernel)
    facts = device.current()
    seen: dict[int, int] = {}  # each device's current PyTorch stream, asked once this call (arrays.torch_stream)
    s = arrays.resolve_stream(stream, q, torch_streams=seen)
    tq, tk, tv = (tensor4(x, name, stream=s, torch_streams=seen) for name, x in (("q", q), ("k", k), ("v", v)))
    p = check_inputs(tq, tk, tv)
    cfg = _configured(p, facts, kernel=kernel, stages=stages, causal=bool(causal))
    scale = 1.0 / math.sqrt(p.head_dim) if scale is None else float(scale)
    shape = (p.batch, p.heads, p.q_len, p.head_dim)
    if out is None:
        dst = _new(tq, shape, p.dtype, s, seen)
        to = Tensor4("out", shape, _contiguous_strides(shape), p.dtype, dst.ptr, tq.device_id)
    else:
        arrays.check_writable(out, "out")
        to = tensor4(out, "out", stream=s, torch_streams=seen)
        check_out(to, p, tq.device_id, (tq, tk, tv))
        dst = arrays.Output(to.ptr, out)
    lse = _new(tq, shape[:3], "float32", s, seen) if return_lse else None
    launch(cfg, p, tq, tk, tv, to, lse.ptr if lse is not None else 0, scale, stream=s, facts=facts)
    return (dst.finish(s), lse.finish(s)) if lse is not None else dst.finish(s)
