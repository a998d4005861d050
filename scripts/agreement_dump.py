"""Dump validator vs driver decisions on random tensor-map configurations (for finding rules)."""
import json
import os
import sys

import numpy as np
from cuda.bindings import driver
from cuda.core import Device

sys.path.insert(0, os.getcwd())
from asynccopy import tensormap  # noqa: E402
from tests.gpu.test_tma import _break_one_rule, _random_valid  # noqa: E402

dev = Device()
dev.set_current()
buf = dev.allocate(1 << 20, stream=dev.default_stream)
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
rows = []
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3000):
    spec = _random_valid(rng, int(buf.handle))
    broken = rng.random() < 0.5
    if broken:
        spec = _break_one_rule(rng, spec)
    try:
        tensormap.validate(spec, lint=False, safety=False)
        why = None
    except tensormap.TensorMapError as exc:
        why = str(exc)
    err, _ = tensormap.driver_encode(spec)
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in spec.__dict__.items()}
    d.update(ours=why is None, why=why, driver=err == driver.CUresult.CUDA_SUCCESS, broken=broken,
             address=spec.address - int(buf.handle))
    rows.append(d)
out = os.environ.get("OUT", ".")
with open(os.path.join(out, "agreement.json"), "w") as f:
    json.dump(rows, f)
bad = [r for r in rows if r["ours"] != r["driver"]]
print(f"{len(bad)} of {len(rows)} disagree; driver accepted {sum(r['driver'] for r in rows)}")
