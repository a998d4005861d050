"""The STAS suite's arithmetic on synthetic rows (asynccopy.bench.stas_bench; running it needs a GPU)."""

from dataclasses import replace

import pytest

from asynccopy import device
from asynccopy.bench import stas_bench
from asynccopy.bench.stas_bench import StasBench, StasRow
from asynccopy.errors import DeviceError


def _row(cluster, message, via, gbps):
    return StasRow(cluster, message, via, via, 16, 2, 60, 100, 1.0, gbps, 10.0 if via == "dsmem" else 30.0, [1.0])


ROWS = [_row(2, 1024, "dsmem", 900.0), _row(2, 1024, "global", 300.0), _row(4, 1024, "dsmem", 800.0),
        _row(4, 1024, "global", 400.0), _row(2, 4096, "dsmem", 1200.0)]  # the last has no global twin


def test_speedups_pair_each_dsmem_row_with_its_global_twin():
    got = stas_bench.speedups(StasBench({}, ROWS))
    assert [(s["cluster"], s["message_bytes"], s["ratio"]) for s in got] == [(2, 1024, 3.0), (4, 1024, 2.0)]
    assert got[0]["dsmem_gbps"] == 900.0 and got[0]["global_gbps"] == 300.0
    assert (got[0]["dsmem_us_per_round"], got[0]["global_us_per_round"]) == (10.0, 30.0)


@pytest.mark.parametrize("blocks, message, rounds", [
    (120, 1024, 4000),      # 1 GiB / 120 KiB = 8738 rounds: capped
    (120, 65536, 136),      # 1 GiB / 7.5 MiB
    (240, 1 << 20, 20),     # at least 20
])
def test_rounds_aim_at_a_gib_received_per_launch(blocks, message, rounds):
    assert stas_bench.rounds_for(blocks, message) == rounds


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = stas_bench.plot(StasBench({"name": "H200"}, ROWS), str(tmp_path / "s.png"))
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("s.png")


def test_the_suite_needs_a_hopper(monkeypatch):
    monkeypatch.setattr(device, "current", lambda device_id=None: replace(device.KNOWN["A100-40GB"], device_id=0))
    with pytest.raises(DeviceError, match=r"^asynccopy bench stas needs compute capability 9.0 or newer; A100-40GB is 8.0$"):
        stas_bench.run((2,), (1024,))
