"""The tensor-map validator against the driver's cuTensorMapEncodeTiled on random adversarial
configurations (tests/tensormap_fuzz.py): a maintainer's tool for a new driver or a new rule.

    python3 scripts/tensormap_agreement.py [COUNT] [OUT.json] [SEED]

Prints every disagreement in full and a summary; OUT.json gets every configuration with both verdicts
(what the rules in asynccopy/tensormap.py are fitted and checked on). Needs a GPU driver.
"""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import tensormap_fuzz  # noqa: E402

from asynccopy import device, tensormap  # noqa: E402


def main(count: int, out: str | None, seed: int) -> int:
    from cuda.bindings import driver
    from cuda.core import Device

    device.current()
    buf = Device().allocate(1 << 20, stream=Device().default_stream)
    rng = np.random.default_rng(seed)
    rows, disagree = [], 0
    for _ in range(count):
        spec = tensormap_fuzz.spec(rng, int(buf.handle))
        try:
            tensormap.validate(spec, lint=False, safety=False)
            ours, why = True, ""
        except tensormap.TensorMapError as exc:
            ours, why = False, str(exc)
        theirs, name = None, "not encodable"
        if tensormap_fuzz.encodable(spec):
            err, _ = tensormap.driver_encode(spec)
            theirs, name = err == driver.CUresult.CUDA_SUCCESS, err.name
        rows.append({**asdict(spec), "ours": ours, "why": why, "driver": name})
        if theirs is not None and ours != theirs:
            disagree += 1
            print(f"validator {'accepts' if ours else 'refuses (' + why + ')'}, driver {name}: {spec}")
    buf.close()
    asked = sum(r["driver"] != "not encodable" for r in rows)
    accepted = sum(r["driver"] == "CUDA_SUCCESS" for r in rows)
    print(f"{count} configurations, {asked} asked of the driver, {accepted} accepted by it, {disagree} disagreements")
    if out:
        Path(out).write_text(json.dumps(rows))
    return 1 if disagree else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(int(args[0]) if args else 10000, args[1] if len(args) > 1 else None,
                  int(args[2]) if len(args) > 2 else 0))
