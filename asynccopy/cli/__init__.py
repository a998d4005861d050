"""The `asynccopy` command: each subcommand's parser is built by its own module.

    info, mechanisms                       asynccopy.cli.info
    bench stream | stas | chunks           asynccopy.cli.bench
    plan, simulate, trace, model-check,    asynccopy.cli.model
    calibrate
    tensormap check, swizzle               asynccopy.cli.tma
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..errors import AsyncCopyError
from . import bench, info, model, tma


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the rule broken and where to read more, not the whole usage."""

    def error(self, message):
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="asynccopy", description="Asynchronous global -> shared data movement on "
                "NVIDIA GPUs: kernels, benchmarks, planner, TMA tools.")
    p.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    p.add_argument("--version", action="version", version=f"asynccopy {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for module in (info, bench, model, tma):
        module.add(sub)
    return p


def _with_default_suite(argv: list[str]) -> list[str]:
    """`asynccopy bench [flags]` runs the stream suite, the main job."""
    if argv and argv[0] == "bench" and (len(argv) == 1 or argv[1].startswith("-")) and argv[1:2] != ["-h"] \
            and argv[1:2] != ["--help"]:
        return ["bench", "stream", *argv[1:]]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(_with_default_suite(argv))
    try:
        return args.fn(args)
    except AsyncCopyError as exc:
        print(f"asynccopy {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `asynccopy mechanisms | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug of ours, or an error we did not foresee: one line, unless --debug
        if args.debug:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"asynccopy {args.command}: unexpected {type(exc).__name__}: {first} (--debug shows the traceback)",
              file=sys.stderr)
        return 1
