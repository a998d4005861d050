"""How the memory system answers load: a copy's latency against the bytes in flight on its SM.

A fixed latency says that bandwidth grows linearly with the bytes in flight up to a hard ceiling
(Little's law with one latency). A real memory system bends earlier: as queues fill, the latency a copy
sees grows with the bytes already in flight, and the rate approaches its ceiling gradually. On the
H200, 8 KiB tiles wanted far more bytes in flight than the fixed latency predicted (a run from outside the
project, tile 2048 floats, 128 threads: a planner fitted at 16 KiB tiles chose 3 stages where 8 were 1.26x faster).

The curve, per SM, with f the read bytes in flight on the SM (this copy's included):

    latency(f) = (L0^p + (f / R)^p)^(1/p)          rate(f) = f / latency(f)

L0 is the unloaded latency (at few bytes in flight the rate is f / L0, Little's law), R the rate the
SM's reads approach (bytes per ns), p the sharpness of the bend (p = 1: latency = L0 + f / R, a queue
that grows from the first byte; large p: the fixed latency and its hard ceiling). The simulator gives
each copy the latency of the bytes in flight when it is issued; the planner asks the curve how many
bytes a near-full rate needs.

The curve is fitted to calibration points: one per *regime* (a kernel, tile, thread count, stage count
and blocks per SM run at intensity 0), each the median bytes in flight per SM at a copy's issue and the
median latency its copies saw (asynccopy.bench.memory_calibration measures them from traces). It is
fitted on some regimes and checked on the others (:func:`fit`): a curve that only reproduces the points
it was fitted on says nothing about the regime a user runs. A device's curve is cached on disk
(:func:`save`, :func:`cached`) beside the compile cache, per device.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ArgumentError

FILE = "memory-curves.json"
SCHEMA = 1
# what a cached calibration was measured with: raise it when the regimes or the way points are taken change, so
# that an older calibration is measured again rather than reused
CALIBRATION_VERSION = 1
MAX_KNEE = 16.0  # p above this is a hard knee already (the fit's bound)


@dataclass(frozen=True)
class MemoryCurve:
    """A copy's latency against the read bytes in flight on its SM (see the module docstring)."""

    latency_ns: float  # L0: the unloaded latency
    rate: float  # R: the rate the SM's reads approach, bytes per ns
    knee: float = 2.0  # p: the sharpness of the bend, >= 1
    source: str = ""

    def __post_init__(self):
        for name in ("latency_ns", "rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ArgumentError(f"a memory curve's {name} must be a finite number > 0, got {value!r}")
        if isinstance(self.knee, bool) or not isinstance(self.knee, (int, float)) or not 1 <= self.knee <= MAX_KNEE:
            raise ArgumentError(f"a memory curve's knee must be in [1, {MAX_KNEE:g}], got {self.knee!r}")

    def latency_at(self, in_flight: float) -> float:
        """The latency (ns) a copy sees with ``in_flight`` bytes on its SM, itself included."""
        p = self.knee
        return (self.latency_ns ** p + (max(0.0, in_flight) / self.rate) ** p) ** (1.0 / p)

    def rate_at(self, in_flight: float) -> float:
        """Bytes per ns an SM reads with ``in_flight`` bytes kept in flight."""
        return in_flight / self.latency_at(in_flight) if in_flight > 0 else 0.0

    def bytes_for(self, fraction: float) -> float:
        """The bytes in flight per SM at which the rate reaches ``fraction`` of its ceiling."""
        if not 0 < fraction < 1:
            raise ArgumentError(f"fraction must be in (0, 1), got {fraction!r}")
        p = self.knee
        return self.latency_ns * self.rate * (fraction ** -p - 1.0) ** (-1.0 / p)

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> MemoryCurve:
        try:
            return MemoryCurve(float(data["latency_ns"]), float(data["rate"]), float(data.get("knee", 2.0)),
                               str(data.get("source", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"not a memory curve: {data!r} ({exc})") from None


@dataclass(frozen=True)
class Point:
    """One calibration regime's measurement: median read bytes in flight per SM at a copy's issue, and the
    median latency (issue to data) its copies saw; and the read bytes in flight per SM averaged over the
    traced time (0: not recorded, a calibration from before it was)."""

    regime: str  # e.g. "tma_1d_pipeline tile=4096 threads=256 stages=4 blocks=1"
    in_flight: float  # bytes per SM
    latency_ns: float
    samples: int = 0
    mean_in_flight: float = 0.0  # bytes per SM, time-averaged (Little's law: the read rate x the mean latency)

    def __post_init__(self):
        if not isinstance(self.regime, str) or not self.regime:
            raise ArgumentError(f"a calibration point names its regime, got {self.regime!r}")
        for name in ("in_flight", "latency_ns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ArgumentError(f"calibration point {self.regime!r}: {name} must be a finite number > 0, "
                                    f"got {value!r}")
        m = self.mean_in_flight
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m < math.inf:
            raise ArgumentError(f"calibration point {self.regime!r}: mean_in_flight must be a finite number >= 0, "
                                f"got {m!r}")


@dataclass
class Check:
    """The curve against one point: predicted latency / measured - 1."""

    regime: str
    in_flight: float
    measured_ns: float
    predicted_ns: float

    @property
    def error(self) -> float:
        return self.predicted_ns / self.measured_ns - 1.0


@dataclass
class Fit:
    """A fitted curve, its check on the points it was fitted on and, separately, on the held-out ones."""

    curve: MemoryCurve
    fitted: list[Check]
    held_out: list[Check]
    device_key: str = ""
    points: list[Point] = field(default_factory=list, repr=False)

    @staticmethod
    def _worst(checks: list[Check]) -> float:
        return max((abs(c.error) for c in checks), default=0.0)

    @property
    def worst_fitted(self) -> float:
        return self._worst(self.fitted)

    @property
    def worst_held_out(self) -> float:
        return self._worst(self.held_out)

    def held_out_regimes(self) -> list[str]:
        return [c.regime for c in self.held_out]

    def report(self) -> list[str]:
        c = self.curve
        lines = [f"memory curve: unloaded latency {c.latency_ns:.0f} ns, reads approach {c.rate:.1f} B/ns per SM "
                 f"(x SMs), knee p = {c.knee:.2f}; 90% of that rate needs {c.bytes_for(0.9) / 1024:.0f} KiB in "
                 f"flight per SM ({c.source})"]
        for title, checks in (("fitted on", self.fitted), ("held out", self.held_out)):
            within = sum(abs(x.error) <= 0.1 for x in checks)
            lines.append(f"  {title}: {len(checks)} regime(s), latency within 10% for {within}, worst "
                         f"{100 * self._worst(checks):+.0f}%" if checks else f"  {title}: none")
            for x in sorted(checks, key=lambda x: x.in_flight):
                lines.append(f"    {x.regime:58s} {x.in_flight / 1024:7.1f} KiB  measured {x.measured_ns:6.0f} ns  "
                             f"curve {x.predicted_ns:6.0f} ns  {100 * x.error:+5.1f}%")
        return lines

    def as_dict(self) -> dict:
        return {"schema": SCHEMA, "calibration": CALIBRATION_VERSION, "curve": self.curve.as_dict(),
                "device_key": self.device_key,
                "points": [asdict(p) for p in self.points],
                "held_out": self.held_out_regimes()}

    @staticmethod
    def from_dict(data: dict) -> Fit:
        """A saved fit (its points and split), checked again: the curve is what was saved."""
        try:
            if data.get("schema") != SCHEMA:
                raise ArgumentError(f"memory calibration schema {data.get('schema')!r}, this version reads {SCHEMA}")
            points = [Point(**p) for p in data["points"]]
            held = set(data["held_out"])
            curve = MemoryCurve.from_dict(data["curve"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"not a memory calibration of this version: {exc}") from None
        fitted = [p for p in points if p.regime not in held]
        return Fit(curve, _checks(curve, fitted), _checks(curve, [p for p in points if p.regime in held]),
                   str(data.get("device_key", "")), points)


def _checks(curve: MemoryCurve, points: list[Point]) -> list[Check]:
    return [Check(p.regime, p.in_flight, p.latency_ns, curve.latency_at(p.in_flight)) for p in points]


def _knee(q: float) -> float:
    """The fit's unbounded knee parameter mapped into (1, MAX_KNEE)."""
    return 1.0 + (MAX_KNEE - 1.0) / (1.0 + math.exp(-q))


def _loss(theta: np.ndarray, f: np.ndarray, lat: np.ndarray) -> float:
    log_l0, log_r, q = theta
    p = _knee(q)
    # in logs: p * log latency = logaddexp(p log L0, p log(f / R))
    pred = np.logaddexp(p * log_l0, p * (np.log(f) - log_r)) / p
    return float(np.mean((pred - np.log(lat)) ** 2))


def _nelder_mead(fn, x0: np.ndarray, step: np.ndarray, iters: int = 600) -> np.ndarray:
    """Minimise fn from x0 (a small, dependency-free Nelder-Mead; the loss is smooth in 3 parameters)."""
    simplex = [x0] + [x0 + np.eye(len(x0))[i] * step[i] for i in range(len(x0))]
    values = [fn(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-12:
            break
        centre = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centre + (centre - worst)
        fr = fn(reflected)
        if fr < values[0]:
            expanded = centre + 2.0 * (centre - worst)
            fe = fn(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (worst - centre)
            fc = fn(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [fn(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


MIN_FIT_POINTS = 3  # three parameters


def fit_curve(points: list[Point], *, source: str = "") -> MemoryCurve:
    """The curve that best reproduces ``points``' latencies (least squares in logs, every regime weighed
    alike). Starts from the smallest latency measured and the highest rate."""
    if len(points) < MIN_FIT_POINTS:
        raise ArgumentError(f"a memory curve has 3 parameters: fitting it needs at least {MIN_FIT_POINTS} "
                            f"regimes, got {len(points)}")
    f = np.array([p.in_flight for p in points], dtype=float)
    lat = np.array([p.latency_ns for p in points], dtype=float)
    if np.ptp(np.log(f)) < math.log(2):
        raise ArgumentError("the calibration's regimes keep about the same bytes in flight (less than 2x "
                            "apart): the curve's bend cannot be seen; add stage counts or tile sizes")
    x0 = np.array([math.log(float(lat.min())), math.log(float((f / lat).max())), 0.0])
    best = None
    for q0 in (-2.0, 0.0, 2.0):  # three starts of the knee: the loss has one valley per knee regime
        x = _nelder_mead(lambda t: _loss(t, f, lat), np.array([x0[0], x0[1], q0]), np.array([0.3, 0.3, 1.0]))
        if best is None or _loss(x, f, lat) < _loss(best, f, lat):
            best = x
    log_l0, log_r, q = best
    p = _knee(q)
    return MemoryCurve(math.exp(log_l0), math.exp(log_r), min(MAX_KNEE, max(1.0, p)), source)


def split(points: list[Point], held_out) -> tuple[list[Point], list[Point]]:
    """Points fitted on and points held out. ``held_out`` is a predicate on a point (or a collection of
    regime names); at least one point must land on each side."""
    test = held_out if callable(held_out) else (lambda p, names=frozenset(held_out): p.regime in names)
    fitted = [p for p in points if not test(p)]
    held = [p for p in points if test(p)]
    if not held:
        raise ArgumentError("the calibration holds no regime out: a curve checked only on the points it was "
                            "fitted on says nothing about other regimes")
    if not fitted:
        raise ArgumentError("every calibration regime is held out: nothing is left to fit the curve on")
    return fitted, held


def fit(points: list[Point], held_out, *, source: str = "", device_key: str = "") -> Fit:
    """Fit the curve on the points ``held_out`` leaves (see :func:`split`), check it on both sides."""
    regimes = [p.regime for p in points]
    if len(set(regimes)) != len(regimes):
        dup = next(r for r in regimes if regimes.count(r) > 1)
        raise ArgumentError(f"calibration regime {dup!r} appears twice")
    fitted, held = split(points, held_out)
    curve = fit_curve(fitted, source=source)
    return Fit(curve, _checks(curve, fitted), _checks(curve, held), device_key, list(points))


# ---------------------------------------------------------------------------------------------
# Points from traces


def point_from_traces(regime: str, blocks, *, tile_bytes: int, blocks_per_sm: int,
                      min_wait_ns: float = 20.0) -> Point:
    """A regime's point from its decoded block traces (asynccopy.trace.BlockTrace, intensity 0).

    Each traced copy's latency is from its issue to its data being there; a tile's `ready` is recorded
    when its consumer's wait returns, so only copies the consumer waited for (ready later than its
    previous compute's end by ``min_wait_ns``) time the memory. The bytes in flight at a copy's issue are
    its block's tiles issued before it and not yet there, itself included, times the blocks per SM (the
    blocks of one SM run the same schedule). The time-averaged bytes in flight: each block's copies' issue-to-data
    spans over its traced time (first issue to last compute's end), summed over the blocks of an SM."""
    lat, flight = [], []
    held = span = 0.0
    for b in blocks:
        tiles = sorted(b.tiles, key=lambda t: t.tile)
        if tiles:
            held += sum(max(0.0, t.ready - t.issued) for t in tiles) * tile_bytes
            span += max(t.compute_end for t in tiles) - min(t.issued for t in tiles)
        by = {t.tile: t for t in tiles}
        for t in tiles:
            prev = by.get(t.tile - 1)
            prev_end = prev.compute_end if prev is not None else -math.inf
            if t.ready - prev_end < min_wait_ns or t.ready <= t.issued:
                continue
            outstanding = sum(1 for o in tiles if o.issued <= t.issued < o.ready)  # t itself among them
            lat.append(t.ready - t.issued)
            flight.append(outstanding * tile_bytes * blocks_per_sm)
    if len(lat) < 8:
        raise ArgumentError(f"{regime}: only {len(lat)} traced copies were waited for (the others were there before "
                            f"their consumer asked): this regime cannot time the memory; trace more tiles per block")
    mean = held / span * blocks_per_sm if span > 0 else 0.0
    return Point(regime, float(statistics.median(flight)), float(statistics.median(lat)), len(lat), float(mean))


# ---------------------------------------------------------------------------------------------
# The cache, per device


def device_key(facts) -> str:
    """What a calibration is kept under: the GPU's name, compute capability and SM count."""
    return f"{facts.name}|cc{facts.cc[0]}{facts.cc[1]}|{facts.sm_count}sm"


def _path():
    from .. import build

    directory = build.cache_dir()
    return None if directory is None else directory / FILE


def _read(path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save(result: Fit) -> str | None:
    """Keep a device's calibration in the cache directory; returns the file, or None where there is none."""
    if not result.device_key:
        raise ArgumentError("a calibration is saved under its device's key: fit it with device_key=")
    path = _path()
    if path is None:
        return None
    data = _read(path)
    data[result.device_key] = result.as_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return str(path)


def cached(facts) -> Fit | None:
    """The calibration saved for this device, or None (never calibrated, or from another version)."""
    path = _path()
    if path is None:
        return None
    entry = _read(path).get(device_key(facts))
    if not isinstance(entry, dict) or entry.get("calibration") != CALIBRATION_VERSION:
        return None
    try:
        return Fit.from_dict(entry)
    except ArgumentError:
        return None
