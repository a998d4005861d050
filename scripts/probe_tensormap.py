"""Probe cuTensorMapEncodeTiled at the edges the documentation leaves open (printed, not asserted)."""
from cuda.core import Device

from asynccopy import tensormap
from asynccopy.tensormap import TensorMapSpec

dev = Device()
dev.set_current()
buf = dev.allocate(1 << 20, stream=dev.default_stream)
base = TensorMapSpec("float32", (64, 64), (256,), (32, 32), address=int(buf.handle))
for label, spec in [
    ("dim 2^31", tensormap.with_fields(base, dims=(64, 2**31))),
    ("dim 2^31+1", tensormap.with_fields(base, dims=(64, 2**31 + 1))),
    ("dim 2^32", tensormap.with_fields(base, dims=(64, 2**32))),
    ("box > dims", tensormap.with_fields(base, dims=(16, 8))),
    ("stride < row", tensormap.with_fields(base, strides=(16,))),
    ("es[0] = 9, rank 1", TensorMapSpec("float32", (64,), (), (32,), (9,), address=int(buf.handle))),
    ("interleave 16B inner 64B",
     TensorMapSpec("float16", (32, 8, 8), (64, 512), (32, 8, 8), interleave="16B", address=int(buf.handle))),
]:
    err, _ = tensormap.driver_encode(spec)
    print(f"{label:28s} driver: {err.name}")
buf.close()

buf = dev.allocate(1 << 20, stream=dev.default_stream)
a = int(buf.handle)
F = "float32"
probes = [
    ("r1 dims64 box32", TensorMapSpec(F, (64,), (), (32,), address=a)),
    ("r1 dims65 box32", TensorMapSpec(F, (65,), (), (32,), address=a)),
    ("r1 dims66 box32", TensorMapSpec(F, (66,), (), (32,), address=a)),
    ("r1 dims256 box64", TensorMapSpec(F, (256,), (), (64,), address=a)),
    ("r1 dims256 box128", TensorMapSpec(F, (256,), (), (128,), address=a)),
    ("r1 dims256 box32 sw128", TensorMapSpec(F, (256,), (), (32,), swizzle="128B", address=a)),
    ("r1 dims256 box16 sw64", TensorMapSpec(F, (256,), (), (16,), swizzle="64B", address=a)),
    ("r1 dims256 box32 l2_64", TensorMapSpec(F, (256,), (), (32,), l2_promotion="64B", address=a)),
    ("r2 d(65,10) box(32,4)", TensorMapSpec(F, (65, 10), (272,), (32, 4), address=a)),
    ("r2 d(256,10) box(64,4)", TensorMapSpec(F, (256, 10), (1024,), (64, 4), address=a)),
    ("r2 d(256,10) box(128,2)", TensorMapSpec(F, (256, 10), (1024,), (128, 2), address=a)),
    ("r2 d(256,10) box(256,1)", TensorMapSpec(F, (256, 10), (1024,), (256, 1), address=a)),
    ("r2 u8 box(256,256)", TensorMapSpec("uint8", (256, 256), (256,), (256, 256), address=a)),
    ("r3 u8 box(256,256,2)", TensorMapSpec("uint8", (256, 256, 8), (256, 65536), (256, 256, 2), address=a)),
    ("r3 u8 box(256,256,4)", TensorMapSpec("uint8", (256, 256, 8), (256, 65536), (256, 256, 4), address=a)),
    ("r3 u8 box(256,256,8)", TensorMapSpec("uint8", (256, 256, 8), (256, 65536), (256, 256, 8), address=a)),
    ("r2 i64 box(66,6)", TensorMapSpec("int64", (258, 223), (2064,), (66, 6), address=a)),
    ("r2 i64 box(32,6)", TensorMapSpec("int64", (258, 223), (2064,), (32, 6), address=a)),
    ("r2 i64 box(34,6)", TensorMapSpec("int64", (258, 223), (2064,), (34, 6), address=a)),
]
for label, spec in probes:
    err, _ = tensormap.driver_encode(spec)
    print(f"{label:28s} driver: {err.name}")
