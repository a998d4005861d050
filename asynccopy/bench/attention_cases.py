"""The implementations `asynccopy bench attention` times on one problem, as harness Cases: rotating inputs in
one memory layout with a float64 reference on a slice of them, each PyTorch SDPA backend under
``torch.nn.attention.sdpa_kernel``, and each asynccopy kernel configuration (attention_bench.py runs them).

Every case checks its output against the reference once before it is timed and keeps the max abs error: an
asynccopy kernel beyond TOLERANCE stops the run (a bug of ours); an SDPA backend that refuses the problem or
returns a wrong result is skipped with a note.
"""

from __future__ import annotations

import math
import re
import warnings

from ..errors import ArgumentError, AsyncCopyError
from ..sdpa import attention
from .harness import Case, Skip, rotation_sets

BACKENDS = (("sdpa-flash", "FLASH_ATTENTION"), ("sdpa-cudnn", "CUDNN_ATTENTION"), ("sdpa-efficient", "EFFICIENT_ATTENTION"))
# max |out - float64| on standard-normal inputs, a fixed sanity bound (not a measured one): a few roundings of the
# output to the dtype, and far below the error of a wrong mask or tile (about 1). The accuracy rule proper (at
# most twice the best SDPA backend's error) is the GPU tests' (tests/gpu/test_attention.py); each row's error is
# in its max_abs_error.
TOLERANCE = {"bfloat16": 2.0**-4, "float16": 2.0**-6}
REF_ROWS = 128  # queries checked at each end of the sequence
MAX_SETS = 64


def is_backend(impl: str) -> bool:
    """An SDPA backend's row (the others are asynccopy kernels)."""
    return impl in {name for name, _ in BACKENDS}


def load_torch():
    try:
        import torch
        from torch.nn.attention import sdpa_kernel  # noqa: F401  (PyTorch 2.3 on)
    except ImportError:
        raise AsyncCopyError("bench attention needs PyTorch 2.3 or newer (torch.nn.attention.sdpa_kernel): the SDPA "
                             "backends are reached through it") from None
    return torch


class Inputs:
    """Rotating sets of q, k, v and out in one layout, and the float64 reference on a slice of set 0."""

    def __init__(self, torch, shape: tuple, causal: bool, dtype: str, layout: str, l2_bytes: int):
        b, h, hkv, lq, lk, d = shape
        self.dtype = dtype
        tdt = getattr(torch, dtype)
        per_set = tdt.itemsize * b * d * (2 * h * lq + 2 * hkv * lk)
        self.sets = rotation_sets(per_set, l2_bytes, MAX_SETS)

        def new(heads, seq):
            if layout == "bhsd":
                return torch.randn(b, heads, seq, d, device="cuda", dtype=tdt)
            return torch.randn(b, seq, heads, d, device="cuda", dtype=tdt).transpose(1, 2)

        self.q = [new(h, lq) for _ in range(self.sets)]
        self.k = [new(hkv, lk) for _ in range(self.sets)]
        self.v = [new(hkv, lk) for _ in range(self.sets)]
        self.out = [torch.empty_like(q) for q in self.q]  # keeps q's strides: the same layout
        self.shape, self.heads, self.group = shape, h, h // hkv
        self.at = (b - 1, sorted({0, h - 1}))
        rows = sorted(set(range(min(REF_ROWS, lq))) | set(range(max(0, lq - REF_ROWS), lq)))
        self.rows = torch.tensor(rows, device="cuda")
        self.ref = self._reference(torch, causal, 1.0 / math.sqrt(d))

    def _reference(self, torch, causal: bool, scale: float):
        """softmax(scale q k^T, top-left causal mask) v in float64 on the slice (SDPA's definition)."""
        bi, heads = self.at
        kv = [x // self.group for x in heads]
        q = self.q[0][bi, heads][:, self.rows].double()
        k, v = self.k[0][bi, kv].double(), self.v[0][bi, kv].double()
        s = q @ k.transpose(-1, -2) * scale
        if causal:
            keys = torch.arange(k.shape[1], device="cuda")
            s = s.masked_fill(keys[None, None, :] > self.rows[None, :, None], float("-inf"))
        return torch.softmax(s, -1) @ v

    def error(self, out) -> float:
        bi, heads = self.at
        return (out[bi, heads][:, self.rows].double() - self.ref).abs().max().item()  # NaN if any is NaN


_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?$")  # where in ATen PyTorch's warning was raised


def _attempt(fn, stream):
    """fn() once, synchronized; Skip with PyTorch's reasons (its warnings, else the error) if it refuses."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = fn()
            stream.sync()
            return got
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
            why = [_TRIGGERED.sub("", str(w.message).strip().splitlines()[0]) for w in caught if str(w.message).strip()]
            why = [w for w in dict.fromkeys(why) if w and not w.endswith(":")]  # not "... not used because:"
            first = str(exc).strip().splitlines()[0].split(". ")[0] if str(exc).strip() else ""
            raise Skip("; ".join(why)[:300] if why else f"{type(exc).__name__}: {first}") from None


def backend_case(torch, ins: Inputs, impl: str, backend, causal: bool, stream, label: str, note) -> Case:
    """``note(what, why)`` is told why the backend is skipped, if it is."""
    from torch.nn.attention import sdpa_kernel

    state = {"kv": None, "config": "enable_gqa" if ins.group > 1 else "", "err": 0.0}

    def call(i):
        k, v = state["kv"][i] if state["kv"] else (ins.k[i], ins.v[i])
        gqa = {"enable_gqa": True} if ins.group > 1 and not state["kv"] else {}
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(ins.q[i], k, v, is_causal=causal, **gqa)

    def prepare() -> None:
        reasons = []
        for repeat in (False, True) if ins.group > 1 else (False,):
            if repeat:  # this backend refuses enable_gqa: k and v as many heads as q, made outside the timing
                state["kv"] = [(k.repeat_interleave(ins.group, 1), v.repeat_interleave(ins.group, 1))
                               for k, v in zip(ins.k, ins.v)]
                state["config"] = f"k/v repeated to {ins.heads} heads"
            try:
                got = _attempt(lambda: call(0), stream)
                break
            except Skip as why:
                reasons.append(str(why))
        else:
            why = reasons[0] if len(set(reasons)) == 1 else f"{reasons[0]}; with k/v repeated: {reasons[1]}"
            note(impl, why)
            raise Skip(why)
        state["err"] = err = ins.error(got)
        if not err < TOLERANCE[ins.dtype]:
            note(impl, f"wrong result, max abs error {err:.2e} against float64 (bound {TOLERANCE[ins.dtype]:.1e})")
            raise Skip(f"wrong result, max abs error {err:.2e}")

    return Case(f"{label} {impl}", (None,), prepare, lambda p, i: call(i % ins.sets),
                finish=lambda: state.update(kv=None), tag=(impl, None, state))


def kernel_case(ins: Inputs, name: str, cfg, causal: bool, stream, label: str, note) -> Case:
    """One asynccopy configuration: through asynccopy.attention, or (a compile-time variant, cfg.defines)
    through the same checks and launch with that configuration."""
    state = {"config": f"tile {cfg.tile[0]}x{cfg.tile[1]}", "err": 0.0}

    def call(i):
        if cfg.defines:
            _launch_variant(cfg, ins.q[i], ins.k[i], ins.v[i], ins.out[i], stream)
        else:
            attention(ins.q[i], ins.k[i], ins.v[i], causal=causal, kernel=cfg.kernel, stages=cfg.stages,
                      out=ins.out[i], stream=stream)

    def prepare() -> None:
        ins.out[0].fill_(float("nan"))
        try:
            call(0)
            stream.sync()
        except ArgumentError as exc:  # a rule of the kernel's the problem alone does not show (strides, ...)
            note(f"{name} s{cfg.stages}", str(exc))
            raise Skip(str(exc)) from None
        state["err"] = err = ins.error(ins.out[0])
        tol = TOLERANCE[cfg.dtype]
        if not err < tol:  # NaN (an output never written) fails too
            raise AsyncCopyError(f"{label} {name} s{cfg.stages}: max abs error {err:.2e} against float64 "
                                 f"(at most {tol:.1e})")

    return Case(f"{label} {name} s{cfg.stages}", (None,), prepare, lambda p, i: call(i % ins.sets),
                tag=(name, cfg.stages, state))


def _launch_variant(cfg, q, k, v, out, stream) -> None:
    """attention() with a given configuration (a compile-time variant): the same views, checks and launch."""
    import math

    from .. import device, sdpa

    tq, tk, tv, to = (sdpa.tensor4(x, n, stream=stream) for n, x in (("q", q), ("k", k), ("v", v), ("out", out)))
    p = sdpa.check_inputs(tq, tk, tv)
    sdpa.check_out(to, p, tq.device_id, (tq, tk, tv))
    sdpa.launch(cfg, p, tq, tk, tv, to, 0, 1.0 / math.sqrt(p.head_dim), stream=stream, facts=device.current())


def backends(torch) -> tuple[list, list[tuple[str, str]]]:
    """The SDPA backends this PyTorch has, as (impl, SDPBackend), and a (what, why) note for each it lacks."""
    from torch.nn.attention import SDPBackend

    missing = [(impl, f"PyTorch {torch.__version__} has no SDPBackend.{attr}") for impl, attr in BACKENDS
               if not hasattr(SDPBackend, attr)]
    return [(impl, getattr(SDPBackend, attr)) for impl, attr in BACKENDS if hasattr(SDPBackend, attr)], missing
