"""A model of TMA's shared-memory swizzles and a bank-conflict counter.

The model: TMA writes a box densely (innermost dimension contiguous, ``row_bytes`` per row) and
then permutes 16-byte chunks by XOR on the *shared-memory address*: with the 32B / 64B / 128B modes,
address bits [4, 4+k) are XORed with bits [7, 7+k) for k = 1 / 2 / 3. The pattern repeats every
256 / 512 / 1024 bytes of address, so it depends on where the destination sits inside that repeat:
:func:`smem_offset` takes the destination's offset from a repeat-aligned address as ``base``.

Banks: 32 banks of 4 bytes. A warp's request of 4-byte accesses is served in one phase of 32 lanes,
8-byte accesses in 2 phases of 16 lanes, 16-byte accesses in 4 phases of 8 lanes; within a phase,
lanes that touch different 4-byte words of one bank serialize (same word: a broadcast).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tensormap import DTYPES, SWIZZLE_REPEAT, SWIZZLE_SPAN, TensorMapError, dtype_name

_XOR_BITS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}


def elem_bytes(dtype) -> int:
    name = dtype_name(dtype)
    if name not in DTYPES:
        raise TensorMapError(f"dtype {name} has no tensor-map type; supported: {', '.join(DTYPES)}")
    return DTYPES[name][0]


def check_mode(mode: str) -> str:
    if mode not in _XOR_BITS:
        raise TensorMapError(f"swizzle mode must be one of {', '.join(_XOR_BITS)}, got {mode!r}")
    return mode


def swizzle_address(address, mode: str):
    """The shared-memory address a byte at ``address`` (unswizzled) lands at. Works on arrays."""
    bits = _XOR_BITS[check_mode(mode)]
    if bits == 0:
        return address
    mask = ((1 << bits) - 1) << 4
    return address ^ ((address >> 3) & mask)


def check_base(base, mode: str) -> int:
    """A destination's offset past a repeat boundary: TMA writes to 128-byte aligned addresses, and the
    pattern repeats every 256 / 512 / 1024 bytes (128 without a swizzle)."""
    repeat = SWIZZLE_REPEAT[check_mode(mode)]
    if isinstance(base, bool) or not isinstance(base, (int, np.integer)) or not 0 <= base < repeat or base % 128:
        raise TensorMapError(f"base (the destination's offset past a {repeat}-byte boundary) must be a multiple "
                             f"of 128 in [0, {repeat}) for swizzle {mode}, got {base!r}")
    return int(base)


def check_box(rows, cols, elem: int, mode: str) -> tuple[int, int]:
    """A 2D box TMA can load: 1..256 rows and columns, rows of whole 16-byte chunks, within the span."""
    for what, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 256:
            raise TensorMapError(f"box {what} must be in [1, 256], got {v!r}")
    row_bytes = cols * elem
    if row_bytes % 16:
        raise TensorMapError(f"a box row of {cols} x {elem} bytes = {row_bytes} is not a whole number of 16-byte chunks")
    if mode != "none" and row_bytes > SWIZZLE_SPAN[mode]:
        raise TensorMapError(f"box row of {cols} x {elem} bytes = {row_bytes} exceeds the {mode} swizzle span of "
                             f"{SWIZZLE_SPAN[mode]} bytes")
    return int(rows), int(cols)


def smem_offset(box_offset, mode: str, base: int = 0):
    """Byte offset from the destination of the byte at ``box_offset`` in the dense box, for a
    destination ``base`` bytes past a repeat-aligned address (0 when it is aligned)."""
    return swizzle_address(np.asarray(box_offset) + base, mode) - base


def box_layout(shape_rows_cols: tuple[int, int], elem_bytes: int, mode: str, base: int = 0) -> np.ndarray:
    """[rows, cols] array: the smem byte offset of every element of a 2D box (row-major, dense)."""
    rows, cols = shape_rows_cols
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return smem_offset(r * cols * elem_bytes + c * elem_bytes, mode, base)


def apply(box: np.ndarray, mode: str, base: int = 0) -> np.ndarray:
    """The bytes a swizzled TMA load of ``box`` (any rank, dense) leaves in shared memory, from the
    destination on (length: the box's bytes rounded up to whole 16-byte chunks)."""
    raw = np.ascontiguousarray(box).view(np.uint8).reshape(-1)
    out = np.zeros(-(-raw.size // 16) * 16, dtype=np.uint8)
    out[smem_offset(np.arange(raw.size), mode, base)] = raw
    return out


def undo(smem: np.ndarray, nbytes: int, mode: str, base: int = 0) -> np.ndarray:
    """The dense box bytes back from a swizzled shared-memory image (what a TMA store writes)."""
    smem = np.asarray(smem, dtype=np.uint8).reshape(-1)
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or not 0 <= nbytes:
        raise TensorMapError(f"nbytes must be a byte count >= 0, got {nbytes!r}")
    need = -(-int(nbytes) // 16) * 16
    if smem.size < need:
        raise TensorMapError(f"the shared-memory image has {smem.size} bytes; a box of {nbytes} bytes spans {need}")
    return np.asarray(smem, dtype=np.uint8)[smem_offset(np.arange(nbytes), mode, base)]


# ---------------------------------------------------------------------------------------------
# Bank conflicts


def wavefronts(addresses, width: int = 4) -> int:
    """Shared-memory wavefronts a warp needs for one request: ``addresses`` are the 32 lanes' byte
    addresses (None for an inactive lane), each an access of ``width`` bytes (4, 8 or 16)."""
    if width not in (1, 2, 4, 8, 16):
        raise TensorMapError(f"access width must be 1, 2, 4, 8 or 16 bytes, got {width}")
    lanes_per_phase = 32 if width <= 4 else 128 // width
    addresses = list(addresses)
    total = 0
    for start in range(0, len(addresses), lanes_per_phase):
        words_by_bank: dict[int, set[int]] = {}
        for a in addresses[start:start + lanes_per_phase]:
            if a is None:
                continue
            for word in range(a // 4, (a + max(width, 4) - 1) // 4 + 1) if width > 4 else [a // 4]:
                words_by_bank.setdefault(word % 32, set()).add(word)
        if words_by_bank:
            total += max(len(w) for w in words_by_bank.values())
    return total


def ideal_wavefronts(width: int, lanes: int = 32) -> int:
    return max(1, lanes * width // 128)


@dataclass
class ConflictReport:
    access: str
    width: int
    swizzled: int  # wavefronts per warp request, swizzled layout
    unswizzled: int
    ideal: int


def conflict_report(rows: int, cols: int, dtype, mode: str, base: int = 0) -> list[ConflictReport]:
    """Wavefronts of a warp reading a [rows, cols] box along a row and down a column, element-wise
    and in 16-byte vectors, with and without the swizzle."""
    elem = elem_bytes(dtype)
    rows, cols = check_box(rows, cols, elem, mode)
    base = check_base(base, mode)
    swz = box_layout((rows, cols), elem, mode, base)
    raw = box_layout((rows, cols), elem, "none", 0)
    vec_elems = max(1, 16 // elem)
    reports = []
    patterns = [
        ("row, one element per lane", elem, lambda lay: [lay[0, i % cols] for i in range(32)]),
        ("column, one element per lane", elem, lambda lay: [lay[i % rows, 0] if i < rows else None for i in range(32)]),
        ("row, 16 B per lane", 16, lambda lay: [lay[0, (i * vec_elems) % cols] for i in range(32)]),
        ("column, 16 B per lane", 16, lambda lay: [lay[i % rows, 0] if i < rows else None for i in range(32)]),
    ]
    for name, width, lanes in patterns:
        reports.append(ConflictReport(name, width, wavefronts(lanes(swz), width), wavefronts(lanes(raw), width),
                                      ideal_wavefronts(width, min(32, rows) if "column" in name else 32)))
    return reports


def describe(rows: int, cols: int, dtype, mode: str, base: int = 0, show_rows: int = 16) -> str:
    """Text: which 16-byte chunk of each box row lands where, and the conflict counts."""
    check_mode(mode)
    name = dtype_name(dtype)
    elem = elem_bytes(name)
    rows, cols = check_box(rows, cols, elem, mode)
    base = check_base(base, mode)
    if isinstance(show_rows, bool) or not isinstance(show_rows, (int, np.integer)) or show_rows < 1:
        raise TensorMapError(f"rows to show must be >= 1, got {show_rows!r}")
    row_bytes = cols * elem
    lines = [f"{rows}x{cols} {name} box, {row_bytes} B per row, swizzle {mode}, destination {base} B past a "
             f"{SWIZZLE_REPEAT[mode]}-byte boundary",
             "shared-memory chunk (16 B) holding each box chunk, per row:"]
    chunks = -(-row_bytes // 16)
    for r in range(min(rows, show_rows)):
        offs = [int(smem_offset(r * row_bytes + 16 * c, mode, base)) for c in range(chunks)]
        lines.append(f"  row {r:3d}: " + " ".join(f"{o // 16:4d}" for o in offs))
    if rows > show_rows:
        lines.append(f"  ... ({rows - show_rows} more rows; the pattern repeats every {SWIZZLE_REPEAT[mode]} bytes)")
    lines.append("warp request            width  wavefronts swizzled  unswizzled  ideal")
    for rep in conflict_report(rows, cols, name, mode, base):
        lines.append(f"  {rep.access:28s} {rep.width:3d} B  {rep.swizzled:10d}  {rep.unswizzled:10d}  {rep.ideal:5d}")
    return "\n".join(lines)
