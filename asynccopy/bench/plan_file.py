"""Saved `bench --plan --json` runs: the sweep, the calibration it was checked with, and its memory curve, read back
to check the model again without a GPU (`asynccopy model-check`, asynccopy.bench.model_check)."""

from __future__ import annotations

import json
from pathlib import Path

from .. import mechanism
from ..errors import ArgumentError
from ..model import memory
from ..model.costs import Overheads
from .stream_bench import Row, StreamBench


def load_memory(path):
    """The memory calibration a `bench --plan --json` file was checked with (asynccopy.model.memory.Fit),
    or None for a file from before calibrations, or one checked with a fixed latency."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"cannot read {path}: {exc}") from None
    saved = data.get("model", {}).get("memory") if isinstance(data, dict) and isinstance(data.get("model"), dict) else None
    return memory.Fit.from_dict(saved) if isinstance(saved, dict) else None


def load(path) -> tuple[StreamBench, dict[int, float], dict[str, Overheads]]:
    """A `bench --plan --json` file's sweep and calibration, to check the model again without a GPU."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ArgumentError(f"{path} holds a JSON {type(data).__name__}, not a `bench --plan --json` object")
    model = data.pop("model", None)
    if not isinstance(model, dict) or not isinstance(model.get("compute_ns"), dict):
        raise ArgumentError(f"{path} holds no model calibration: write it with `asynccopy bench --plan --json`")
    if not isinstance(model.get("overheads", {}), dict):
        raise ArgumentError(f"{path}: 'overheads' must map each variant to its costs")
    try:
        result = StreamBench(rows=[Row(**r) for r in data.pop("rows")], **data)
        compute = {int(k): float(v) for k, v in model["compute_ns"].items()}
        kind = {r.label: mechanism.get(r.mechanism) for r in result.rows}
        # files from before issue_first: the variant's mechanism says its order
        overheads = {label: Overheads(**{"issue_first": kind[label].issue_first if label in kind else False, **o})
                     for label, o in model.get("overheads", {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArgumentError(f"{path} is not a `bench --plan --json` file of this version: {exc}") from None
    base = mechanism.baseline()
    if not any(r.mechanism == base and r.intensity == 0 for r in result.rows):
        raise ArgumentError(f"{path} has no {base} row at intensity 0: the model's latency is fitted to it")
    return result, compute, overheads
