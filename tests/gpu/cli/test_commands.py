"""The command line on the GPU, end to end, each suite small (no timing is asserted)."""

import json
import re

import pytest

from asynccopy import cli


def test_info(facts, capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"device: {facts.name} (CC {facts.cc[0]}.{facts.cc[1]}, {facts.arch}), {facts.sm_count} SMs")
    assert re.search(r"^driver: CUDA \d+\.\d+$", out, re.M) and "stream.cu ldgsts" in out


@pytest.mark.cc(8, 0)
def test_quick_stream_bench_writes_rows(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert cli.main(["bench", "stream", "--quick", "--mechanisms", "sync,ldgsts", "--size-mib", "16",
                     "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "x sync" in out and "device-to-device copy" in out and "balanced intensity" in out
    rows = json.loads(path.read_text())["rows"]
    # --quick: stages 1, 2, 4, 8 and intensities 0, 2, 8; every ldgsts variant; sync once per intensity
    assert {(r["mechanism"], r["stages"]) for r in rows} == {("sync", 1)} | {("ldgsts", s) for s in (1, 2, 4, 8)}
    assert {r["intensity"] for r in rows} == {0, 2, 8} and len({r["label"] for r in rows}) == 5
    assert len(rows) == 3 * (1 + 4 * 4) and all(len(r["samples_ms"]) == 10 for r in rows)


@pytest.mark.cc(8, 0)
def test_bench_alone_is_the_stream_suite(tmp_path, capsys):
    path = tmp_path / "rows.csv"
    assert cli.main(["bench", "--mechanisms", "sync,pipeline", "--stages", "1,2", "--intensities", "0,1",
                     "--size-mib", "16", "--reps", "2", "--warmup", "1", "--csv", str(path)]) == 0
    lines = path.read_text().splitlines()
    assert lines[0].startswith("mechanism,label,stages") and len(lines) == 1 + 2 * 3


@pytest.mark.cc(9, 0)
def test_chunks_suite(tmp_path, capsys):
    path = tmp_path / "chunks.json"
    assert cli.main(["bench", "chunks", "--chunks", "4096,16384", "--size-mib", "16", "--reps", "2", "--warmup", "1",
                     "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tma_1d_pipeline (>= ldgsts from \d+ B chunks on|never overtakes ldgsts for good here)", out)
    data = json.loads(path.read_text())
    assert [(r["chunk_bytes"], r["mechanism"]) for r in data["rows"]] == [
        (4096, "ldgsts"), (4096, "tma_1d_pipeline"), (16384, "ldgsts"), (16384, "tma_1d_pipeline")]


@pytest.mark.cc(9, 0)
def test_stas_suite(tmp_path, capsys):
    png = tmp_path / "stas.png"
    assert cli.main(["bench", "stas", "--cluster-sizes", "2", "--message-bytes", "65536", "--reps", "2",
                     "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"cluster 2: st.async is [\d.]+x to [\d.]+x the global-memory ring's throughput", out)
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.cc(8, 0)
def test_trace_command(capsys):
    assert cli.main(["trace", "--mechanism", "ldgsts", "--stages", "3", "--tiles", "16", "--intensity", "8"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ldgsts vec16 .cg stages=3 intensity=8, block 0: 16 tiles traced", out)
    assert "measured:" in out and "simulated (median measured compute" in out
    assert cli.main(["trace", "--mechanism", "ldgsts", "--tiles", "4", "--block", "100000"]) == 2
    assert "--block 100000: the trace holds blocks 0.." in capsys.readouterr().err


def test_plan_and_simulate_use_the_local_gpu(facts, capsys):
    assert cli.main(["plan", "--operand", "t:4096:f32"]) == 0
    assert capsys.readouterr().out.startswith(f"{facts.name} (CC {facts.cc[0]}.{facts.cc[1]}, {facts.sm_count} SMs")
    assert cli.main(["simulate", "--stages", "2", "--compute-ns", "500", "--tiles", "4"]) == 0
    assert capsys.readouterr().out.startswith(f"{facts.name}: ")
