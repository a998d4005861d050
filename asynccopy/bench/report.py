"""Reporters: a fixed-width table for the terminal, JSON and CSV files for everything else."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, is_dataclass
from pathlib import Path


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    return format(value, fmt) if fmt else str(value)


def table(rows: list, columns: list[tuple[str, str, str]]) -> str:
    """Rows (dataclasses or dicts) as a table; columns are (field, header, format spec)."""
    dicts = [asdict(r) if is_dataclass(r) else dict(r) for r in rows]
    cells = [[_cell(d.get(key), fmt) for key, _, fmt in columns] for d in dicts]
    headers = [h for _, h, _ in columns]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def write(path: str | Path, payload: dict, rows_key: str = "rows") -> None:
    """Write ``payload`` as JSON, or its rows as CSV when the path ends in .csv."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        rows = [asdict(r) if is_dataclass(r) else dict(r) for r in payload[rows_key]]
        keys = [k for k in rows[0] if not isinstance(rows[0][k], (list, dict))] if rows else []
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    else:
        path.write_text(json.dumps(payload, indent=1, default=lambda o: asdict(o) if is_dataclass(o) else str(o)))
