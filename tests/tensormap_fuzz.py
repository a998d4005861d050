"""Tensor-map configurations as adversarial as we can make them, for the validator-versus-driver
agreement test (tests/gpu/test_tma.py) and its CPU twin: every field at, below and above each of its
limits, every interleave x swizzle x dtype x rank, zero and huge strides, misaligned addresses."""

from __future__ import annotations

from asynccopy.dtypes import DTYPES
from asynccopy.tensormap import INTERLEAVES, L2_PROMOTIONS, SWIZZLE_SPAN, SWIZZLES, TensorMapSpec

DIM_EDGES = (0, 1, 2, 3, 7, 16, 255, 256, 257, 1000, 65535, 65536, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32,
             2**32 + 1)
BOX_EDGES = (0, 1, 2, 3, 4, 8, 15, 16, 17, 32, 64, 127, 128, 129, 255, 256, 257)
STRIDE_EDGES = (0, 8, 16, 24, 32, 48, 2**39, 2**40 - 32, 2**40 - 16, 2**40, 2**40 + 16, 2**41)
ELEM_STRIDE_EDGES = (0, 1, 2, 3, 7, 8, 9)


def _choice(rng, seq):
    return seq[int(rng.integers(0, len(seq)))]


def _base(rng, address: int) -> dict:
    """A configuration that is often valid: a dense tensor, a box that fits it, aligned fields."""
    dtype = _choice(rng, list(DTYPES))
    elem = DTYPES[dtype][0]
    rank = int(rng.integers(1, 6))
    interleave = _choice(rng, INTERLEAVES) if rank >= 3 and rng.random() < 0.3 else "none"
    swizzle = _choice(rng, SWIZZLES)
    if interleave == "none":
        span = SWIZZLE_SPAN.get(swizzle, 256 * elem)
        box0 = max(1, min(256, span // elem, int(16 // elem * rng.integers(1, 9))))
    else:
        box0 = int(rng.integers(1, 65))
    dims = [int(rng.integers(max(box0, 1), max(box0, 1) * 4 + 1))] + [int(rng.integers(1, 300)) for _ in range(rank - 1)]
    box = [box0] + [int(rng.integers(1, min(d, 32) + 1)) for d in dims[1:]]
    align = 32 if interleave == "32B" else 16
    strides, s = [], -(-dims[0] * elem // align) * align + align * int(rng.integers(0, 3))
    for d in dims[1:]:
        strides.append(s)
        s *= d
    es = [1] + [int(rng.integers(1, 9)) if rng.random() < 0.2 else 1 for _ in box[1:]]
    fill = "nan" if DTYPES[dtype][1] and rng.random() < 0.3 else "zero"
    return dict(dtype=dtype, dims=dims, strides=strides, box=box, element_strides=es, interleave=interleave,
                swizzle=swizzle, l2_promotion=_choice(rng, L2_PROMOTIONS), oob_fill=fill,
                address=address + 16 * int(rng.integers(0, 64)))


def _mutate(rng, f: dict) -> None:
    """Push one field to an edge of its range."""
    rank = len(f["dims"])
    i = int(rng.integers(0, max(1, min(rank, len(f["box"]), len(f["element_strides"])))))
    if not rank or not f["box"] or not f["element_strides"]:
        return
    elem = DTYPES[f["dtype"]][0]
    what = _choice(rng, ("dim", "stride", "box", "box0_span", "es", "address", "interleave", "swizzle", "fill",
                         "dtype", "rank"))
    if what == "dim" and i < len(f["dims"]):
        f["dims"][i] = _choice(rng, DIM_EDGES)
    elif what == "stride" and f["strides"]:
        j = int(rng.integers(0, len(f["strides"])))
        f["strides"][j] = _choice(rng, STRIDE_EDGES) if rng.random() < 0.6 else f["strides"][j] + _choice(rng, (-16, 8, 16))
    elif what == "box" and i < len(f["box"]):
        f["box"][i] = _choice(rng, BOX_EDGES)
    elif what == "box0_span":  # the innermost box row around 16 bytes and around the swizzle span
        span = SWIZZLE_SPAN.get(f["swizzle"], 32)
        f["box"][0] = max(0, _choice(rng, (16, span, 2 * span, 32)) // elem + _choice(rng, (-1, 0, 1)))
    elif what == "es" and i < len(f["element_strides"]):
        f["element_strides"][i] = _choice(rng, ELEM_STRIDE_EDGES)
    elif what == "address":
        f["address"] += _choice(rng, (1, 4, 8, 16, 24))
    elif what == "interleave":
        f["interleave"] = _choice(rng, INTERLEAVES)
    elif what == "swizzle":
        f["swizzle"] = _choice(rng, SWIZZLES)
    elif what == "fill":
        f["oob_fill"] = "nan"
    elif what == "dtype":
        f["dtype"] = _choice(rng, list(DTYPES))
    elif what == "rank":  # a list one entry short or long, or a rank outside 1..5
        key = _choice(rng, ("dims", "strides", "box", "element_strides"))
        if rng.random() < 0.5 and f[key]:
            f[key].pop()
        else:
            f[key].append(f[key][-1] if f[key] else 16)


def spec(rng, address: int) -> TensorMapSpec:
    """A random configuration: a third left as built, the rest with one to three fields at an edge."""
    f = _base(rng, address)
    for _ in range(int(rng.choice([0, 1, 1, 2, 3], p=[0.34, 0.3, 0.1, 0.16, 0.1]))):
        _mutate(rng, f)
    return TensorMapSpec(f["dtype"], tuple(f["dims"]), tuple(f["strides"]), tuple(f["box"]),
                         tuple(f["element_strides"]), f["interleave"], f["swizzle"], f["l2_promotion"], f["oob_fill"],
                         f["address"])


def encodable(s: TensorMapSpec) -> bool:
    """Whether cuda.bindings can pass the fields at all (each a u32/u64, rank 1..5 with matching lists):
    outside that the driver is never asked, and the validator must refuse."""
    r = s.rank
    lists_ok = (1 <= r <= 5 and len(s.strides) == r - 1 and len(s.box) == r and len(s.element_strides or ()) == r)
    in_range = all(0 <= v < 2**64 for v in (*s.dims, *s.strides)) and all(0 <= v < 2**32 for v in (*s.box,
                                                                                                   *(s.element_strides or ())))
    return lists_ok and in_range
