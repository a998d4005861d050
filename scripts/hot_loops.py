"""What a compiler makes of the kernels' default builds, without a GPU: each build's registers and stack, and for each
innermost loop that issues tensor-core or FFMA work (a key-tile or k-block loop) its instructions, local-memory
accesses (LDL / STL: spills), R2UR (values moved to the uniform datapath each time round) and uniform integer adds
(UIADD3: the loop's bookkeeping on the uniform datapath). A maintainer's tool: the NVRTC the GPU machine has can build
a hot loop differently from a newer one where registers are tight (docs/design.md, section 4, Toolchain), so check
both:

    python3 scripts/hot_loops.py                      # the NVRTC cuda.bindings finds
    python3 scripts/hot_loops.py --nvrtc-dir DIR      # DIR: another NVRTC's libnvrtc.so.13 and its builtins (a pip
                                                      #   wheel's nvidia/cu13/lib); the script runs again with them
    python3 scripts/hot_loops.py --only "attention wgmma 64"   # the builds whose name holds each of these words

The builds: the attention kernels at head dims 64 and 128, with and without the causal mask, as `asynccopy.attention`
configures B 4 x H 16 x 8192 (persistent grids, turns, key tiles included), and the GEMM kernels at 8192^3 bf16
(`simt`: float32) as `asynccopy.gemm` configures them on an H200.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

LOOP_OPCODES = ("HGMMA", "HMMA", "FFMA")


def builds(only: list[str]):
    """(name, configuration) of each default build whose name holds every word of ``only``."""
    from asynccopy import device, matmul, sdpa
    from asynccopy.matrix import Matrix

    h200 = device.lookup("H200")
    out = []
    for kernel in ("wgmma", "mma"):
        for d in (64, 128):
            for causal in (False, True):
                p = sdpa.Problem(4, 16, 16, 8192, 8192, d, "bfloat16")
                cfg = sdpa.configure(p, h200, kernel=kernel, causal=causal)
                out.append((f"attention {kernel} {d} {'causal' if causal else 'full'} s{cfg.stages}", cfg))
    for kernel, dtype in (("wgmma", "bfloat16"), ("mma", "bfloat16"), ("simt", "float32")):
        m = Matrix(None, 1 << 30, 8192, 8192, 8192, 1, dtype, 0)  # row-major, 16-byte aligned
        cfg = matmul.configure(m, m, dtype, h200, kernel=kernel)
        out.append((f"gemm {kernel} {cfg.tile[0]}x{cfg.tile[1]} s{cfg.stages}", cfg))
    return [(name, cfg) for name, cfg in out if all(word in name.split() for word in only)]


def report(name: str, module) -> list[str]:
    """Lines describing one build's resources and hot loops."""
    from asynccopy import build

    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    lines = [f"{name}: {regs.group(1) if regs else '?'} registers, {stack.group(1) if stack else '?'} bytes of stack"]
    for body in build.innermost_loops(module.sass(), LOOP_OPCODES):
        ops = [re.sub(r"^@!?U?P\w+\s+", "", op) for op in body]

        def count(prefix: str, ops=ops) -> int:
            return sum(op.startswith(prefix) for op in ops)

        issued = {op: count(op + " ") + count(op + ".") for op in LOOP_OPCODES}  # HMMA, not HMMA-like names
        work = ", ".join(f"{op} {n}" for op, n in issued.items() if n)
        lines.append(f"  loop of {len(body)} instructions ({work}): LDL {count('LDL')}, STL {count('STL')}, "
                     f"R2UR {count('R2UR')}, UIADD3 {count('UIADD3')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nvrtc-dir", help="a folder holding another NVRTC's libnvrtc.so.13 and builtins")
    parser.add_argument("--only", default="", help="words every build name shown must hold")
    args = parser.parse_args(argv)
    if args.nvrtc_dir:
        lib = Path(args.nvrtc_dir) / "libnvrtc.so.13"
        if not lib.exists():
            print(f"hot_loops.py: no libnvrtc.so.13 in {args.nvrtc_dir}", file=sys.stderr)
            return 2
        env = dict(os.environ, LD_PRELOAD=str(lib.resolve()),
                   LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(lib.parent.resolve()),
                                                                 os.environ.get("LD_LIBRARY_PATH")])))
        os.execve(sys.executable, [sys.executable, __file__, "--only", args.only], env)
    from asynccopy import build

    print(f"NVRTC {'.'.join(map(str, build.nvrtc_version()))}")
    chosen = builds(args.only.split())
    if not chosen:
        print(f"no build's name holds all of {args.only!r}", file=sys.stderr)
        return 2
    for name, cfg in chosen:
        print("\n".join(report(name, cfg.compile("sm_90a"))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
