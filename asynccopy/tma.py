"""TMA from Python (kernels/tma.cu): single box loads and stores through tensor maps, a 1D bulk
round trip, and tensor maps edited on the device. Compute capability 9.0; every function checks."""

from __future__ import annotations

import functools

import numpy as np

from . import arrays, build, device, tensormap
from .errors import ArgumentError, check_int

_RANKS = range(1, 6)
_WALK_BOXES = ((16, 32), (8, 64), (64, 64))


def _facts():
    return device.require((9, 0), "TMA")


@functools.cache
def _module(arch: str, hang_ns: int) -> build.Module:  # a new build when the hang switch changes
    names = ([f"tma_load_dump<{r}>" for r in _RANKS] + [f"tma_store_box<{r}>" for r in _RANKS] + ["bulk_scale"]
             + [f"tma_walk<{r}, {c}>" for r, c in _WALK_BOXES])
    return build.compile(build.read_kernel("tma.cu"), arch=arch, name_expressions=names, name="tma")


def module(arch: str) -> build.Module:
    """The compiled tma.cu for an arch of compute capability 9.0 or newer (no GPU needed)."""
    if device.cc_of_arch(arch) < (9, 0):
        raise ArgumentError(f"TMA needs compute capability 9.0; {device.parse_arch(arch)} is below it")
    return _module(device.parse_arch(arch), build.hang_timeout_ns())


def _coords(coords, spec: tensormap.TensorMapSpec) -> list[np.int32]:
    """Array-order coordinates → five int32 kernel arguments, innermost first, checked."""
    inner_first = tuple(int(c) for c in coords)[::-1]
    tensormap.check_coords(spec, inner_first)
    return [np.int32(c) for c in inner_first + (0,) * (5 - spec.rank)]


def load_box(array, box, coords, *, swizzle: str = "none", oob_fill: str = "zero", base: int = 0,
             dump_bytes: int | None = None, stream=None) -> np.ndarray:
    """The bytes one TMA load of the box at ``coords`` (array order, may hang off the tensor or be
    negative) leaves in shared memory, read back from ``base`` bytes past a 1024-byte boundary."""
    facts = _facts()
    if base % 128 or not 0 <= base < 1024:
        raise ArgumentError(f"base must be a multiple of 128 in [0, 1024) (TMA needs a 128-byte aligned "
                            f"destination), got {base}")
    s = arrays.resolve_stream(stream, array)
    desc, spec = tensormap.build(array, box, swizzle=swizzle, oob_fill=oob_fill, lint=False, stream=s)
    nbytes = spec.box_bytes
    dump = dump_bytes if dump_bytes is not None else -(-nbytes // 16) * 16
    kernel = module(facts.arch).kernel(f"tma_load_dump<{spec.rank}>")
    from cuda.core import Device

    out = Device(facts.device_id).allocate(max(dump, 1), stream=s)
    build.launch(kernel, desc, *_coords(coords, spec), np.uint32(nbytes), np.uint32(base), np.uint32(dump),
                 int(out.handle), grid=1, block=256, stream=s, shmem=base + dump)
    host = arrays.to_host(int(out.handle), dump, s)
    out.close()
    return host


def row_end_overrun(spec: tensormap.TensorMapSpec, inner_first) -> str | None:
    """Why a TMA store of spec's box at ``inner_first`` (innermost coordinate first) would write outside the
    tensor, or None. On the H200 a store whose box reaches the end of a row that does not end on a
    16-byte boundary writes on to that boundary: the bytes after the row's last element (another
    array's, in a column slice) are overwritten."""
    row = spec.dims[0] * spec.elem_bytes
    if row % 16 == 0 or int(inner_first[0]) + spec.box[0] < spec.dims[0]:
        return None
    extra = (16 - row % 16) // spec.elem_bytes
    return (f"a TMA store of this box reaches the end of a row of {spec.dims[0]} {spec.dtype} ({row} bytes, not a "
            f"multiple of 16): the hardware writes on to the next 16-byte boundary, {extra} element(s) past the "
            f"row's end (measured on the H200). Store boxes that end before the row's end, or use rows of a "
            f"multiple of 16 bytes")


def store_box(array, box, coords, image: np.ndarray, *, swizzle: str = "none", stream=None) -> None:
    """Place ``image`` (the shared-memory bytes, e.g. ``swizzle.apply(box_data, mode)``) in shared
    memory and TMA-store the box at ``coords`` into ``array``; out-of-bounds parts are not written. A box
    that would reach the end of a row not ending on a 16-byte boundary is refused (row_end_overrun)."""
    facts = _facts()
    s = arrays.resolve_stream(stream, array)
    desc, spec = tensormap.build(array, box, swizzle=swizzle, lint=False, stream=s)
    image = np.ascontiguousarray(image, dtype=np.uint8).reshape(-1)
    if image.size < spec.box_bytes:
        raise ArgumentError(f"image has {image.size} bytes; the box needs {spec.box_bytes}")
    overrun = row_end_overrun(spec, _coords(coords, spec))
    if overrun:
        raise ArgumentError(overrun)
    from cuda.core import Device

    dev = Device(facts.device_id)
    img = dev.allocate(image.size, stream=s)
    arrays.to_device(image, int(img.handle), s)
    kernel = module(facts.arch).kernel(f"tma_store_box<{spec.rank}>")
    build.launch(kernel, desc, *_coords(coords, spec), int(img.handle), np.uint32(image.size),
                 grid=1, block=256, stream=s, shmem=image.size)
    s.sync()
    img.close()


def scale_bulk(x, *, chunk: int = 4096, blocks_per_sm: int = 1, out=None, stream=None):
    """y = 2 x through 1D bulk copies global → shared → global (a demonstration of both directions,
    the bulk async-groups and the proxy fence). x: contiguous float32, a multiple of 4 elements.
    ``out``: where y goes (default: a new array of x's kind)."""
    chunk = check_int(chunk, "chunk", 4, 1 << 20)
    if chunk % 4:
        raise ArgumentError(f"chunk must be a positive multiple of 4 floats (16-byte bulk copies), got {chunk}")
    blocks_per_sm = check_int(blocks_per_sm, "blocks_per_sm", 1, 64)
    arrays.check_device_array(x, "x")
    facts = _facts()
    s = arrays.resolve_stream(stream, x)
    src = arrays.view(x, "x", stream=s)
    if src.size % 4:
        raise ArgumentError(f"bulk copies move multiples of 16 bytes: x needs a multiple of 4 elements, got {src.size}")
    dst = arrays.output(out, src, stream=s)
    smem = 3 * chunk * 4
    if smem + 1024 > facts.smem_per_block_optin:
        raise ArgumentError(f"chunk {chunk} needs {smem // 1024} KiB of shared memory (3 buffers); "
                            f"{facts.name} allows {facts.smem_per_block_optin // 1024} KiB")
    if src.size:
        grid = max(1, min(facts.sm_count * blocks_per_sm, -(-src.size // chunk)))
        build.launch(module(facts.arch).kernel("bulk_scale"), src.ptr, dst.ptr, np.uint64(src.size), np.uint32(chunk),
                     grid=grid, block=256, stream=s, shmem=smem)
    return dst.finish(s)


_TENSOR2D = np.dtype([("address", "<u8"), ("rows", "<u4"), ("cols", "<u4"), ("row_stride", "<u8")])


def walk(tensors, box=(16, 32), *, stream=None) -> np.ndarray:
    """Load the top-left ``box`` of each 2D float32 tensor through one host-encoded template edited on
    the device (address, extents, row stride): returns [len(tensors), *box] float32."""
    facts = _facts()
    if tuple(box) not in _WALK_BOXES:
        raise ArgumentError(f"box must be one of {', '.join(f'{r}x{c}' for r, c in _WALK_BOXES)}, got {box}")
    if not tensors:
        raise ArgumentError("walk needs at least one tensor")
    s = arrays.resolve_stream(stream, tensors[0])
    records = np.zeros(len(tensors), dtype=_TENSOR2D)
    for i, t in enumerate(tensors):
        v = _matrix(t, f"tensors[{i}]", s)
        tensormap.validate(tensormap.TensorMapSpec("float32", (v[2], v[1]), (v[3],), (box[1], box[0]), address=v[0]),
                           lint=False)
        records[i] = v
    template, _ = tensormap.build(tensors[0], box, lint=False, stream=s)
    from cuda.core import Device

    dev = Device(facts.device_id)
    n = len(tensors)
    workspace, table, out = dev.allocate(128 * n, stream=s), dev.allocate(records.nbytes, stream=s), \
        dev.allocate(4 * n * box[0] * box[1], stream=s)
    arrays.to_device(records, int(table.handle), s)
    # the maps are written on the device by tensormap.cp_fenceproxy, which compute-sanitizer's initcheck
    # counts as a read of its global destination: zeroed first, the workspace is never read uninitialized
    from cuda.bindings import driver

    device.check_driver(driver.cuMemsetD8Async(int(workspace.handle), 0, 128 * n, int(s.handle)), "cuMemsetD8Async")
    kernel = module(facts.arch).kernel(f"tma_walk<{box[0]}, {box[1]}>")
    build.launch(kernel, template, int(workspace.handle), int(table.handle), int(out.handle),
                 grid=n, block=128, stream=s)
    host = arrays.to_host(int(out.handle), 4 * n * box[0] * box[1], s).view(np.float32).reshape(n, *box)
    for buf in (workspace, table, out):
        buf.close()
    return host.copy()


def _matrix(t, name: str, s):
    """(address, rows, cols, row stride in bytes) of a 2D float32 CUDA array with unit column stride."""
    from cuda.core.utils import StridedMemoryView

    smv = StridedMemoryView.from_any_interface(t, stream_ptr=int(s.handle) or 1)
    if len(smv.shape) != 2 or np.dtype(smv.dtype) != np.float32:
        raise ArgumentError(f"{name} must be a 2D float32 array, got shape {tuple(smv.shape)} {smv.dtype}")
    rows, cols = smv.shape
    strides = smv.strides or (cols, 1)
    if strides[1] != 1:
        raise ArgumentError(f"{name} must have contiguous rows (column stride 1), got element strides {strides}")
    return smv.ptr, rows, cols, strides[0] * 4
