"""Probe cuTensorMapEncodeTiled at the edges the documentation leaves open (printed, not asserted)."""
from cuda.bindings import driver
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
    ("interleave 16B inner 64B", TensorMapSpec("float16", (32, 8, 8), (64, 512), (32, 8, 8), interleave="16B", address=int(buf.handle))),
]:
    err, _ = tensormap.driver_encode(spec)
    print(f"{label:28s} driver: {err.name}")
buf.close()
