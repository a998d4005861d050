"""What the commands share: argument types, the kernel-cost flags, writing JSON / CSV."""

from __future__ import annotations

import argparse

from ..errors import AsyncCopyError
from ..model import KernelCosts


def ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.lower().replace(",", "x").split("x") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape like 64x64, got {text!r}") from None


def add_cost_flags(parser) -> None:
    """The kernel's own costs, for the simulator (asynccopy.model.simulate; `bench --plan` measures them)."""
    parser.add_argument("--issue-ns", type=float, default=0.0,
                        help="time to issue one tile's copy (the computing threads', or the producer warp's)")
    parser.add_argument("--barrier-ns", type=float, default=0.0, help="fixed cost between two computes")
    parser.add_argument("--producer-warp", action="store_true",
                        help="a producer warp issues the copies, beside the compute (ws_*, tma_1d_pipeline, tma_2d)")
    parser.add_argument("--handoff-ns", type=float, default=0.0,
                        help="with --producer-warp: from a buffer's release to the producer's refill")
    parser.add_argument("--issue-first", action="store_true",
                        help="the computing threads refill the buffer just computed before waiting for the next tile "
                             "(cuda::pipeline's order)")


def costs(args) -> KernelCosts:
    """The cost flags as one validated KernelCosts (the flags' own rules named with the flags)."""
    if args.handoff_ns and not args.producer_warp:
        raise AsyncCopyError("--handoff-ns is the producer warp's: add --producer-warp")
    if args.issue_first and args.producer_warp:
        raise AsyncCopyError("--issue-first is the computing threads' order: a producer warp refills on release")
    if getattr(args, "compute_ns", None) is None and (args.issue_ns or args.barrier_ns or args.producer_warp
                                                      or args.issue_first):
        raise AsyncCopyError("the kernel's costs feed the simulator: give --compute-ns too")
    return KernelCosts(args.issue_ns, args.barrier_ns, args.producer_warp, args.handoff_ns, args.issue_first)


PNG_FORMATS = ("png", "svg", "pdf")


def check_png(path: str) -> None:
    """A picture file the user named: its folder must exist and matplotlib must know its format."""
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise AsyncCopyError(f"cannot write {path}: the folder {folder} does not exist")
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in PNG_FORMATS:
        raise AsyncCopyError(f"cannot write {path}: the picture format comes from the extension, one of "
                             f"{', '.join('.' + f for f in PNG_FORMATS)}")


def check_output(path: str | None, suffixes: tuple[str, ...]) -> None:
    """A --json / --csv file the user named: an existing folder and the right extension."""
    import os

    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise AsyncCopyError(f"cannot write {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise AsyncCopyError(f"cannot write {path}: it is a folder")
    if not path.lower().endswith(suffixes):
        raise AsyncCopyError(f"cannot write {path}: expected a file ending in {' or '.join(suffixes)}")


def add_output_flags(parser) -> None:
    parser.add_argument("--json", help="write every row (with samples) as JSON")
    parser.add_argument("--csv", help="write every row as CSV")


def check_outputs(args) -> None:
    check_output(args.json, (".json",))
    check_output(args.csv, (".csv",))


def write(args, payload: dict) -> None:
    from ..bench import report

    for path in (args.json, args.csv):
        if path:
            report.write(path, payload)
            print(f"wrote {path}")
