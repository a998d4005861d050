"""CPU time of one asynccopy.gemm / asynccopy.attention call against PyTorch's (a maintainer's tool for the host path:
`asynccopy bench` times the GPU between events, which hides it).

    python scripts/host_time.py                                  # 256^3 GEMM, attention (1, 2, 128, 64), bf16
    python scripts/host_time.py --gemm 1024x1024x1024 --attention 4x16x1024x128 --calls 1000 --profile

Each case is called ``--calls`` times back to back on PyTorch's current stream, on small shapes so that the GPU keeps
up: the time from the first call to the last one's return, divided by the calls, is what one call costs the CPU (the
queue is not waited for inside the loop). ``--rounds`` rounds of that, their median and least shown; the GPU time of
a call (CUDA events around a round, synchronized) is shown beside it: where it exceeds the CPU time the queue was
full and the CPU figure waited on the GPU. Cases: asynccopy.gemm with and without ``out=`` against torch.matmul,
asynccopy.attention with and without ``out=`` against torch.nn.functional.scaled_dot_product_attention. The first
call of each case (compiles, configures) is left out. ``--profile``: cProfile of the asynccopy cases, by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time


def _shape(text: str, n: int) -> tuple[int, ...]:
    parts = tuple(int(x) for x in text.lower().split("x"))
    if len(parts) != n or min(parts) < 1:
        raise SystemExit(f"a shape of {n} positive extents joined by 'x', got {text!r}")
    return parts


def cases(torch, gemm_shape, attention_shape, dtype) -> dict:
    """name -> a call without arguments; asynccopy's and PyTorch's on the same arrays."""
    import asynccopy

    m, n, k = gemm_shape
    a, b = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.empty(m, n, device="cuda", dtype=dtype)
    q = torch.randn(*attention_shape, device="cuda", dtype=dtype)
    kv = torch.randn(*attention_shape, device="cuda", dtype=dtype)
    o = torch.empty_like(q)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {
        "asynccopy.gemm(a, b, out=c)": lambda: asynccopy.gemm(a, b, out=c),
        "torch.matmul(a, b, out=c)": lambda: torch.matmul(a, b, out=c),
        "asynccopy.gemm(a, b)": lambda: asynccopy.gemm(a, b),
        "torch.matmul(a, b)": lambda: torch.matmul(a, b),
        "asynccopy.attention(q, k, v, out=o)": lambda: asynccopy.attention(q, kv, kv, out=o),
        "asynccopy.attention(q, k, v)": lambda: asynccopy.attention(q, kv, kv),
        "torch SDPA(q, k, v)": lambda: sdpa(q, kv, kv),
    }


def time_case(torch, fn, calls: int, rounds: int) -> tuple[list[float], list[float]]:
    """(CPU us a call, GPU us a call) of each round."""
    fn()
    torch.cuda.synchronize()
    cpu, gpu = [], []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        cpu.append((t1 - t0) / calls * 1e6)
        gpu.append(start.elapsed_time(end) / calls * 1e3)
    return cpu, gpu


def profile(fn, calls: int, top: int) -> str:
    fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gemm", default="256x256x256", help="MxNxK (default 256x256x256)")
    p.add_argument("--attention", default="1x2x128x64", help="batch x heads x seq x head_dim of q, k and v")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--calls", type=int, default=500, help="calls a round (default 500)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default=None, help="cases whose name holds this text")
    p.add_argument("--profile", action="store_true", help="cProfile of the asynccopy cases")
    p.add_argument("--top", type=int, default=30, help="rows of each profile")
    args = p.parse_args(argv)

    import asynccopy
    from asynccopy import device

    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available() or not device.has_gpu():
        print("host_time: needs a CUDA GPU and PyTorch with CUDA", file=sys.stderr)
        return 2
    import cuda.core

    facts = device.current()
    print(f"{facts.name}; torch {torch.__version__}, cuda.core {cuda.core.__version__}, asynccopy "
          f"{getattr(asynccopy, '__version__', '?')}, Python {sys.version.split()[0]}; {args.calls} calls a round, "
          f"{args.rounds} rounds; gemm {args.gemm}, attention {args.attention}, {args.dtype}")
    chosen = cases(torch, _shape(args.gemm, 3), _shape(args.attention, 4), getattr(torch, args.dtype))
    chosen = {name: fn for name, fn in chosen.items() if args.only is None or args.only in name}
    print(f"{'case':<38} {'CPU us/call':>12} {'least':>8} {'GPU us/call':>12}")
    for name, fn in chosen.items():
        cpu, gpu = time_case(torch, fn, args.calls, args.rounds)
        print(f"{name:<38} {statistics.median(cpu):>12.1f} {min(cpu):>8.1f} {statistics.median(gpu):>12.1f}")
    if args.profile:
        for name, fn in chosen.items():
            if name.startswith("asynccopy"):
                print(f"\n{name}, {args.calls} calls:\n{profile(fn, args.calls, args.top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
