"""Tuning records for asynccopy.gemm: the fastest configuration of a shape class, measured on the live GPU
(asynccopy.bench.gemm_tune measures them; asynccopy.matmul.configure reads them).

    asynccopy.gemm.tune(4096, 4096, 4096, "bfloat16")       # tries every candidate, keeps the best
    c = asynccopy.gemm(a, b)                                 # a shape of that class now runs the best one

A record is kept per (device, dtype, layout, shape class, operand alignment) in ``<cache dir>/gemm-tuning.json`` (the compile
cache's directory: ``ASYNCCOPY_CACHE_DIR`` moves it, ``off`` keeps records in this process only). A shape
class puts each of m, n, k in its power-of-two bucket (513..1024 is one), so 1000 x 1000 x 1000 uses what
1024^3 measured. asynccopy.gemm consults the records only where the caller names no kernel, tile or stages,
and only a record whose kernel can take the operands."""

from __future__ import annotations

import json
import os
import threading

from . import build

FILE = "gemm-tuning.json"
LAYOUTS = ("nn", "nt", "tn", "tt")  # a, b: n = row-major, t = a transposed view (column-major)
_lock = threading.Lock()
_known: dict[str, dict[str, dict]] = {}  # per records file ("" without a cache directory): its records
_saved = 0  # records saved by this process so far (generation)


def shape_class(m: int, n: int, k: int) -> tuple[int, int, int]:
    """Each extent's power-of-two bucket: the bit length of extent - 1 (1 -> 0, 2 -> 1, 513..1024 -> 10)."""
    return tuple((max(1, int(x)) - 1).bit_length() for x in (m, n, k))


def layout_of(a_mn: bool, b_mn: bool) -> str:
    """'n' for an operand in its natural row-major layout, 't' for a transposed view."""
    return ("t" if a_mn else "n") + ("n" if b_mn else "t")


def key(facts, dtype: str, layout: str, m: int, n: int, k: int, align: int = 16) -> str:
    """A record's key. ``align``: the operands' alignment (asynccopy.matrix.alignment, at most 16): the
    same shape with rows off 16 bytes takes other kernels (no TMA) and other copy widths."""
    mb, nb, kb = shape_class(m, n, k)
    return f"{facts.name}|cc{facts.cc[0]}{facts.cc[1]}|{dtype}|{layout}|m{mb}n{nb}k{kb}|a{min(16, int(align))}"


def _path():
    directory = build.cache_dir()
    return None if directory is None else directory / FILE


def _records(path) -> dict[str, dict]:
    """The records of one file, read once per process (the caller holds the lock)."""
    name = "" if path is None else str(path)
    if name not in _known:
        _known[name] = {}
        if path is not None:
            try:
                data = json.loads(path.read_text())
                if isinstance(data, dict):
                    _known[name].update({k: v for k, v in data.items() if isinstance(v, dict)})
            except (OSError, ValueError):
                pass  # no file yet, or a damaged one: tuning again rewrites it
    return _known[name]


def records() -> dict[str, dict]:
    """Every record of the current cache directory: its file's and this process's own."""
    with _lock:
        return dict(_records(_path()))


def lookup(facts, dtype: str, a_mn: bool, b_mn: bool, m: int, n: int, k: int, align: int = 16) -> dict | None:
    return records().get(key(facts, dtype, layout_of(a_mn, b_mn), m, n, k, align))


def generation() -> tuple:
    """What the records a lookup sees depend on: the records saved in this process and where the cache directory is
    (its environment), so that a configuration chosen from them can be kept until either changes."""
    env = os.environ
    return _saved, env.get("ASYNCCOPY_CACHE_DIR"), env.get("XDG_CACHE_HOME"), env.get("HOME")


def save(entry_key: str, record: dict) -> None:
    """Keep a record in this process and, where there is a cache directory, in its file."""
    global _saved
    path = _path()
    with _lock:
        known = _records(path)
        known[entry_key] = record
        _saved += 1
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
            os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
        except OSError as exc:
            import warnings

            warnings.warn(f"asynccopy: cannot write the GEMM tuning records in {path.parent} "
                          f"({exc.strerror or exc}); they last for this process only", stacklevel=2)
