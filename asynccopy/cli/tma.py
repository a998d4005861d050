"""`asynccopy tensormap check` and `asynccopy swizzle`: TMA descriptors and layouts, no GPU needed."""

from __future__ import annotations

from ..errors import AsyncCopyError
from . import common


def add(sub) -> None:
    tmap = sub.add_parser("tensormap", help="tensor maps (TMA descriptors)")
    tsub = tmap.add_subparsers(dest="tensormap_command", required=True)
    check = tsub.add_parser("check", help="validate a tensor map before any driver sees it (no GPU needed)")
    check.add_argument("--dtype", required=True, help="float32, bf16, float16, uint8, ...")
    check.add_argument("--shape", type=common.shape, required=True, help="array shape, outermost first: 1024x1024")
    check.add_argument("--box", type=common.shape, required=True, help="box, outermost first: 64x64")
    check.add_argument("--strides", type=common.shape, default=None, help="byte strides, outermost first (default: dense)")
    check.add_argument("--element-strides", type=common.shape, default=None)
    check.add_argument("--address", default="0", help="global address (default 0, i.e. aligned)")
    check.add_argument("--swizzle", default="none", help="none, 32B, 64B, 128B")
    check.add_argument("--interleave", default="none", help="none, 16B, 32B")
    check.add_argument("--oob-fill", default="zero", help="zero or nan")
    check.add_argument("--l2-promotion", default="none", help="none, 64B, 128B, 256B")
    check.add_argument("--smem-offset", type=int, default=None, help="also check a shared destination offset")
    check.add_argument("--no-lint", action="store_true", help="only the driver's own rules")
    check.set_defaults(fn=cmd_tensormap_check)

    swz = sub.add_parser("swizzle", help="a TMA swizzle's shared-memory layout and its bank conflicts")
    swz.add_argument("--mode", default="128B", help="none, 32B, 64B, 128B")
    swz.add_argument("--box", type=common.shape, default=(64, 64), help="rows x cols")
    swz.add_argument("--dtype", default="bf16")
    swz.add_argument("--base", type=int, default=0, help="destination offset inside the swizzle repeat (bytes)")
    swz.add_argument("--rows", type=int, default=16, help="rows of the layout to print")
    swz.set_defaults(fn=cmd_swizzle)


def cmd_tensormap_check(args) -> int:
    from .. import tensormap

    try:
        address = int(args.address, 0)
    except ValueError:
        raise AsyncCopyError(f"--address must be an integer (decimal, or 0x... hex), got {args.address!r}") from None
    spec = tensormap.TensorMapSpec.from_numpy_order(
        args.dtype, args.shape, box=args.box, strides_bytes=args.strides, element_strides=args.element_strides,
        address=address, swizzle=args.swizzle, interleave=args.interleave, oob_fill=args.oob_fill,
        l2_promotion=args.l2_promotion)
    tensormap.validate(spec, lint=not args.no_lint)
    if args.smem_offset is not None:
        tensormap.check_smem_destination(args.smem_offset, spec.swizzle)
    print(f"ok: rank {spec.rank} {spec.dtype}, global dims (innermost first) {spec.dims}, strides {spec.strides} B, "
          f"box {spec.box} = {spec.box_bytes} B per load, swizzle {spec.swizzle}: shared destination "
          f"{tensormap.SWIZZLE_REPEAT[spec.swizzle]}-byte aligned")
    return 0


def cmd_swizzle(args) -> int:
    from .. import swizzle

    if len(args.box) != 2:
        raise AsyncCopyError(f"--box takes rows x cols (2D), got {'x'.join(map(str, args.box))}")
    print(swizzle.describe(args.box[0], args.box[1], args.dtype, args.mode, args.base, args.rows))
    return 0
