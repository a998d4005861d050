"""Run one tile-stream config once (for ncu): python scripts/profile_one.py MECH STAGES INTENSITY [MiB]"""
import sys

from cuda.core import Device

from asynccopy import device, stream
from asynccopy.bench.harness import Scratch

name, stages, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mib = int(sys.argv[4]) if len(sys.argv) > 4 else 256
facts = device.current()
s = Device().create_stream()
sc = Scratch(s, facts)
n = (mib << 20) // 4
x, y = sc.alloc(n), sc.alloc(n)
sc.fill_random(x, n, 1)
cfg = stream.StreamConfig.make(name, stages)
for _ in range(2):
    stream.launch(cfg, int(x.handle), int(y.handle), n, k, stream=s, facts=facts)
s.sync()
