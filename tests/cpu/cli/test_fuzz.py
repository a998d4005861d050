"""Random values for every option of every command: each run ends with exit 0 and output, or a clear
error (exit 2) — never a traceback, never an unexpected exception (exit 1), never more than a few
seconds. Runs with no GPU visible, so the GPU commands stop at their argument checks or at the GPU."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from asynccopy import cli

VALUES = ["-1", "0", "1", "3", "17", "1000000000", "-5.5", "0.25", "nan", "inf", "-inf", "1e30", "garbage", "",
          "0x64", "64x64", "-4x64", "64x0", "2048x3", "1,2,3", "-1,0", "ldgsts,dma", "H2000", "H200", "A100-40GB",
          "sm_50", "sm_90a", "/nonexistent/dir/out.png", "out.txt", "A:0x128:f32", "A:128x128:f32", "bf16", "128B"]
SKIP = {("info", "--arch")}  # a valid arch compiles every kernel: minutes, not a fuzz case


def _commands():
    """(argv prefix, [(option, takes a value)]) of every leaf command, read off the parser."""
    import argparse

    out = []

    def walk(parser, prefix):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for name, sub in subs[0].choices.items():
                walk(sub, prefix + [name])
            return
        opts = [(a.option_strings[-1], a.nargs != 0) for a in parser._actions
                if a.option_strings and a.dest not in ("help", "version", "debug")]
        positionals = [a for a in parser._actions if not a.option_strings and a.dest != "help"]
        out.append((prefix, opts, positionals))

    walk(cli.parser(), [])
    return out


def _cases(rng, per_command=25):
    cases = []
    for prefix, opts, positionals in _commands():
        required = {"plan": ["--operand", "A:64x64:f32"], "simulate": ["--stages", "3", "--compute-ns", "800"],
                    "check": ["--dtype", "bf16", "--shape", "1024x1024", "--box", "64x64"]}.get(prefix[-1], [])
        for _ in range(per_command):
            argv = list(prefix) + [str(rng.choice(VALUES)) for _ in positionals] + list(required)
            for opt, takes in (opts[i] for i in rng.choice(len(opts), size=min(len(opts), 3), replace=False)) if opts else []:
                if (prefix[0], opt) in SKIP:
                    continue
                argv += [opt] + ([str(rng.choice(VALUES))] if takes else [])
            cases.append(argv)
    return cases


DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys, time
    from asynccopy import cli
    results = []
    for argv in json.loads(sys.stdin.read()):
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(argv)
            except SystemExit as e:  # argparse's own usage errors
                rc = e.code
        results.append([argv, rc, out.getvalue()[-300:], err.getvalue()[-600:], time.perf_counter() - t0])
    print(json.dumps(results))
""")


def test_random_options_never_crash(tmp_path):
    rng = np.random.default_rng()
    cases = _cases(rng)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "ASYNCCOPY_CACHE_DIR": "off"}
    done = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(cases), capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    bad = []
    for argv, rc, out, err, seconds in json.loads(done.stdout):
        why = ("a traceback" if "Traceback" in out + err else "an unexpected exception" if rc == 1
               else "no output" if rc == 0 and not out.strip() else f"{seconds:.1f} s" if seconds > 5 else
               "an error of several lines" if rc == 2 and len(err.strip().splitlines()) > 1
               else None)
        if why:
            bad.append(f"asynccopy {' '.join(argv)}: {why}: {(err or out).strip()[-300:]}")
    assert not bad, f"{len(bad)} of {len(cases)} runs:\n" + "\n".join(bad[:20])
