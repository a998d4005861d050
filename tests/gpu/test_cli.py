"""The command line on the GPU: info and a small bench run end to end (no timing is asserted)."""

import json

from asynccopy import cli


def test_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "device:" in out and "stream.cu ldgsts" in out


def test_small_bench_writes_rows(tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert cli.main(["bench", "--mechanisms", "sync,ldgsts", "--stages", "1,2", "--intensities", "0,1",
                     "--size-mib", "16", "--reps", "2", "--warmup", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "x sync" in out and "device-to-device copy" in out
    rows = json.loads(path.read_text())["rows"]
    assert {(r["mechanism"], r["stages"], r["intensity"]) for r in rows} >= {("sync", 1, 0), ("ldgsts", 2, 1)}
