"""The timing harness every suite runs on: CUDA-event medians, inputs rotated past L2, the same run's
device-to-device copy bandwidth, and one sweep loop (prepare and check a case, then time each of its
points, with progress).

validate → compile → check correctness → time (warm-up, CUDA events, median) → rows: a suite builds
its :class:`Case` list and turns :func:`sweep`'s samples into its own rows.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..buffers import Scratch, hold
from ..device import DeviceFacts
from ..errors import ArgumentError

HOLD_LIMIT_S = 0.2  # the longest head start given to the host (util.cu, hold)


def time_ms(fn, stream, *, warmup: int = 3, reps: int = 20) -> list[float]:
    """Run fn(i) warmup + reps times on stream; the reps' durations by CUDA events, in ms.

    The reps are queued behind a kernel that holds the stream for longer than the host takes to queue
    them (measured on the warm-up calls), so a launch whose host side is slower than its kernel is still
    timed by its kernel alone, with the GPU never idle between two events."""
    from cuda.core import EventOptions

    timing = EventOptions(timing_enabled=True)
    host = []
    for i in range(warmup):
        t0 = time.perf_counter()
        fn(i)
        host.append(time.perf_counter() - t0)
    if host:
        hold(stream, 1e9 * min(HOLD_LIMIT_S, 2 * reps * min(host) + 50e-6))
    marks = []
    for i in range(reps):
        start = stream.record(options=timing)
        fn(warmup + i)
        marks.append((start, stream.record(options=timing)))
    marks[-1][1].sync()
    return [end - start for start, end in marks]


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def default_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Inputs past L2, and the copy they are compared with


def rotation_sets(set_bytes: int, l2_bytes: int, most: int | None = None) -> int:
    """How many sets of ``set_bytes`` to rotate through so that the bytes between two uses of one set exceed
    3 x the L2 (one set where one is that large already), at most ``most``."""
    if set_bytes >= 3 * l2_bytes:
        return 1
    sets = math.ceil(3 * l2_bytes / max(set_bytes, 1)) + 1
    return max(1, min(sets, most) if most else sets)


@dataclass
class Rotation:
    """``sets`` pairs of (in, out) buffers of n floats, rotated so that repeated runs miss in L2."""

    n: int
    inputs: list
    outputs: list

    @property
    def sets(self) -> int:
        return len(self.inputs)

    def pair(self, i: int):
        return self.inputs[i % self.sets], self.outputs[i % self.sets]

    def close(self) -> None:
        for buf in self.inputs + self.outputs:
            buf.close()


def make_rotation(scratch: Scratch, n: int, *, seed: int) -> Rotation:
    """Enough buffer pairs that the bytes touched between two uses of one pair exceed 3 x L2
    (random inputs, NaN-poisoned outputs)."""
    pair_bytes = 2 * 4 * n
    l2 = scratch.facts.l2_bytes
    sets = rotation_sets(pair_bytes, l2)
    inputs = [scratch.alloc(n) for _ in range(sets)]
    outputs = [scratch.alloc(n) for _ in range(sets)]
    for k, buf in enumerate(inputs):
        scratch.fill_random(buf, n, seed + k)
    for buf in outputs:
        scratch.fill_value(buf, n, float("nan"))
    return Rotation(n, inputs, outputs)


def copy_bandwidth(rot: Rotation, stream, *, warmup: int = 3, reps: int = 20) -> tuple[float, float]:
    """(median ms, GB/s counting bytes read + written) of a device-to-device copy of n floats."""

    def copy(i: int) -> None:
        src, dst = rot.pair(i)
        src.copy_to(dst, stream=stream)

    ms = median(time_ms(copy, stream, warmup=warmup, reps=reps))
    return ms, 2 * 4 * rot.n / (ms * 1e-3) / 1e9


@dataclass
class Workspace:
    """A stream of its own, scratch buffers, rotating inputs of ``n`` floats and the same run's
    device-to-device copy rate: what a suite that streams through memory measures against."""

    facts: DeviceFacts
    stream: object
    scratch: Scratch
    rotation: Rotation
    seed: int
    copy_ms: float
    copy_gbps: float

    @property
    def n(self) -> int:
        return self.rotation.n

    def close(self) -> None:
        self.rotation.close()
        self.stream.close()


def workspace(facts: DeviceFacts, size_bytes: int, *, seed: int | None = None, warmup: int = 3, reps: int = 20,
              progress: Callable[[str], None] = default_progress) -> Workspace:
    from cuda.core import Device

    seed = int(time.time_ns() % (1 << 31)) if seed is None else seed
    n = size_bytes // 4
    s = Device(facts.device_id).create_stream()
    scratch = Scratch(s, facts)
    rot = make_rotation(scratch, n, seed=seed)
    progress(f"device {facts.name}: {n * 4 / 2**30:.2f} GiB in + out per run, {rot.sets} rotating set(s)")
    copy_ms, copy_gbps = copy_bandwidth(rot, s, warmup=warmup, reps=reps)
    progress(f"device-to-device copy: {copy_ms:.3f} ms, {copy_gbps:.0f} GB/s (read + write)")
    return Workspace(facts, s, scratch, rot, seed, copy_ms, copy_gbps)


# ---------------------------------------------------------------------------------------------
# The sweep loop


class Skip(Exception):
    """Raised by a case's prepare(): the case cannot run here (the message says why); the sweep goes on."""


@dataclass
class Case:
    """One configuration of a suite: prepare() compiles and checks it (or raises Skip), run(point, i)
    queues one run of a point (i rotates the inputs), verify() checks what the timed runs left (it
    raises on a wrong result), finish() frees what prepare() made (always called)."""

    label: str
    points: Sequence
    prepare: Callable[[], None]
    run: Callable[[object, int], None]
    verify: Callable[[], None] = lambda: None
    finish: Callable[[], None] = lambda: None
    describe: Callable[[dict], str] | None = None  # samples by point -> the progress line's figures
    tag: object = None  # what the suite needs to turn the samples into its rows (its configuration)


@dataclass
class Timed:
    case: Case
    point: object
    samples: list[float] = field(repr=False)

    @property
    def ms(self) -> float:
        return median(self.samples)


def settle(run: Callable[[int], None], stream, seconds: float) -> int:
    """Run ``run`` back to back for about ``seconds`` (synchronising every few calls): the GPU's clock
    under a heavy load falls within a fraction of a second to what its power cap sustains (H200, bf16
    8192^3: 1.35 -> 1.55 ms a product in its first 60 ms), so the first case timed would otherwise run
    faster than those after it. Returns the calls made."""
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(4):
            run(calls)
            calls += 1
        stream.sync()
    return calls


def _settle_on(case: Case, stream, seconds: float, progress: Callable[[str], None]) -> None:
    calls = settle(lambda i: case.run(case.points[0], i), stream, seconds)
    progress(f"settled the clock: {calls} runs of {case.label} in {seconds:.1f} s")


def sweep(cases: list[Case], stream, *, warmup: int = 3, reps: int = 20, rounds: int = 1,
          progress: Callable[[str], None] = default_progress, settle_s: float = 0.0) -> list[Timed]:
    """Prepare, time and finish every case in order; a line of progress per case. ``rounds`` > 1: prepare
    them all, then time them in turn, round after round (the reps split over the rounds, one more warm-up
    run at each case's turn; at most one round per rep), so that a clock that drifts as the GPU warms weighs on
    every case alike. ``settle_s``: the first case's work run that long first (:func:`settle`)."""
    if rounds > 1:
        return _sweep_rounds(cases, stream, warmup=warmup, reps=reps, rounds=rounds, progress=progress,
                             settle_s=settle_s)
    out: list[Timed] = []
    for i, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        head = f"[{i:3d}/{len(cases)}] {case.label}"
        try:
            try:
                case.prepare()
            except Skip as why:
                progress(f"{head}: skipped ({why})")
                continue
            if settle_s > 0 and not out:  # the first case that runs, before its timing
                _settle_on(case, stream, settle_s, progress)
            got = {p: time_ms(lambda r, p=p, run=case.run: run(p, r), stream, warmup=warmup, reps=reps)
                   for p in case.points}
            case.verify()
        finally:
            case.finish()
        out += [Timed(case, p, samples) for p, samples in got.items()]
        figures = case.describe(got) if case.describe else " ".join(f"{median(s):.3f}" for s in got.values()) + " ms"
        progress(f"{head}: {figures}  ({time.perf_counter() - t0:.1f} s)")
    return out


def _sweep_rounds(cases: list[Case], stream, *, warmup: int, reps: int, rounds: int,
                  progress: Callable[[str], None], settle_s: float = 0.0) -> list[Timed]:
    ready: list[Case] = []
    try:
        for i, case in enumerate(cases, 1):
            head = f"[{i:3d}/{len(cases)}] {case.label}"
            try:
                case.prepare()
            except Skip as why:
                progress(f"{head}: skipped ({why})")
                case.finish()
                continue
            except BaseException:
                case.finish()
                raise
            ready.append(case)
            progress(f"{head}: ready")
        got = {id(c): {p: [] for p in c.points} for c in ready}
        if settle_s > 0 and ready:
            _settle_on(ready[0], stream, settle_s, progress)
        rounds = min(rounds, reps)
        for r in range(rounds):
            t0 = time.perf_counter()
            per = reps // rounds + (r < reps % rounds)  # the reps in all: the first rounds take the remainder
            for case in ready:
                for p in case.points:
                    got[id(case)][p] += time_ms(lambda i, p=p, run=case.run: run(p, i), stream,
                                                warmup=warmup if r == 0 else 1, reps=per)
            progress(f"round {r + 1}/{rounds}: {len(ready)} case(s) timed ({time.perf_counter() - t0:.1f} s)")
        for case in ready:
            case.verify()
    finally:
        for case in ready:
            case.finish()
    out: list[Timed] = []
    for case in ready:
        samples = got[id(case)]
        out += [Timed(case, p, s) for p, s in samples.items()]
        figures = case.describe(samples) if case.describe else " ".join(f"{median(s):.3f}" for s in samples.values()) + " ms"
        progress(f"{case.label}: {figures}")
    return out


def parse_variant(text: str, launch_keys: tuple[str, ...] = ()) -> tuple[str, tuple[tuple[str, str], ...],
                                                                         dict[str, str]]:
    """A maintainer script's compile-time variant, NAME[:[+]MACRO=VALUE,...] (scripts/gemm_variants.py,
    scripts/attention_variants.py): (name, -D macros, launch settings). A leading '+' on the macros keeps the
    configuration's own knobs (launch["extend"] = "1"); a key in ``launch_keys`` is the launch's, not a macro."""
    name, _, macros = text.partition(":")
    if not name:
        raise ArgumentError(f"--variant {text!r}: a variant needs a name (NAME[:MACRO=VALUE,...])")
    pairs, launch = [], {}
    if macros.startswith("+"):
        macros, launch["extend"] = macros[1:], "1"
    for item in filter(None, macros.split(",")):
        key, eq, value = item.partition("=")
        if not key or not eq or not value:
            raise ArgumentError(f"--variant {text!r}: {item!r} is not MACRO=VALUE")
        if key in launch_keys:
            launch[key] = value
        else:
            pairs.append((key, value))
    return name, tuple(pairs), launch
