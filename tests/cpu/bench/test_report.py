"""The reporters: a fixed-width table, JSON and CSV files (asynccopy.bench.report)."""

import csv
import json

from asynccopy.bench import report
from asynccopy.bench.stream_bench import Row


def _rows():
    return [Row("sync", "sync", 1, None, None, "LDG", k, ms, 2.0 / ms, 50.0, samples_ms=[ms, ms])
            for k, ms in ((0, 0.7), (4, 1.0), (8, 1.45))]


def test_table_right_aligns_columns_and_prints_none_as_a_dash():
    text = report.table(_rows(), [("label", "mechanism", ""), ("ms", "ms", ".3f"), ("speedup_vs_sync", "x sync", ".2f")])
    assert text.splitlines() == [
        "mechanism     ms  x sync",
        "---------  -----  ------",
        "     sync  0.700       -",
        "     sync  1.000       -",
        "     sync  1.450       -",
    ]


def test_table_takes_dicts_too():
    assert report.table([{"a": 1, "b": "xyz"}], [("a", "A", "d"), ("b", "long header", "")]).splitlines() == [
        "A  long header", "-  -----------", "1          xyz"]


def test_json_keeps_everything(tmp_path):
    path = tmp_path / "deep" / "r.json"  # the folder is made
    report.write(path, {"rows": _rows(), "copy_gbps": 4000.0})
    data = json.loads(path.read_text())
    assert data["copy_gbps"] == 4000.0 and [r["intensity"] for r in data["rows"]] == [0, 4, 8]
    assert data["rows"][2]["samples_ms"] == [1.45, 1.45]


def test_csv_has_a_row_per_row_and_leaves_lists_out(tmp_path):
    report.write(tmp_path / "r.csv", {"rows": _rows(), "copy_gbps": 4000.0})
    got = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert [g["intensity"] for g in got] == ["0", "4", "8"] and [g["ms"] for g in got] == ["0.7", "1.0", "1.45"]
    assert "samples_ms" not in got[0] and got[0]["speedup_vs_sync"] == ""


def test_csv_of_no_rows_is_empty(tmp_path):
    report.write(tmp_path / "r.csv", {"rows": []})
    assert (tmp_path / "r.csv").read_text().strip() == ""
