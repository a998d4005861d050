"""`asynccopy bench attention` run small on the GPU (asynccopy.bench.attention_bench): our kernels and the SDPA
backends this PyTorch has, each checked against float64 before it is timed, the rows complete. No timing is
asserted beyond what any GPU must meet."""

import csv
import json
import math

import pytest

from asynccopy import cli
from asynccopy.bench import attention_bench as ab
from asynccopy.bench.attention_cases import is_backend
from asynccopy.sdpa import Problem

pytestmark = pytest.mark.cc(8, 0)

SHAPE = (2, 4, 2, 300, 300, 64)  # grouped-query, a length no tile divides


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_a_tiny_run_times_our_kernels_and_a_backend(torch, facts, layout):
    lines = []
    result = ab.run((SHAPE,), causal=(False, True), layout=layout, reps=2, warmup=1, progress=lines.append)
    want = {name for name, _ in ab.configs_for(Problem(*SHAPE, "bfloat16"), False, None, None, facts)[0]}
    assert "mma" in want
    for causal in (False, True):
        at = [r for r in result.rows if r.causal == causal]
        assert {r.impl for r in at if not is_backend(r.impl)} == want
        assert any(is_backend(r.impl) for r in at), f"no SDPA backend ran (notes: {result.notes})"
        best = min(r.ms for r in at if is_backend(r.impl))
        for r in at:
            assert (r.batch, r.heads, r.kv_heads, r.q_len, r.k_len, r.head_dim) == SHAPE
            assert len(r.samples_ms) == 2 and r.ms > 0 and math.isfinite(r.tflops) and r.tflops > 0
            assert r.tflops == pytest.approx(ab.flops(SHAPE, causal) / (r.ms * 1e-3) / 1e12)
            assert r.pct_best == pytest.approx(100 * best / r.ms)
            assert 0 <= r.max_abs_error < ab.TOLERANCE["bfloat16"], r
            assert (r.stages is None) == is_backend(r.impl)
    assert result.layout == layout and result.device["name"] == facts.name
    assert lines[0].startswith(f"problem 1/2: 2:4:2:300:300:64, bfloat16 {layout}, ") and "input set(s)" in lines[0]
    summary = ab.summary(result)
    assert summary[0].startswith("2:4:2:300:300:64: ") and summary[1].startswith("2:4:2:300:300:64 causal: ")
    assert summary[2].startswith("asynccopy's best kernel against the best SDPA backend: ")


def test_a_stage_sweep_from_the_command_writes_json_and_csv(torch, tmp_path, capsys):
    js, cs = tmp_path / "a.json", tmp_path / "a.csv"
    argv = ["bench", "attention", "--shapes", "1:2:256:64", "--causal", "yes", "--kernels", "mma", "--stages", "1,2",
            "--reps", "2", "--warmup", "1", "--json", str(js), "--csv", str(cs)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "1:2:256:64 causal: " in out and f"wrote {js}" in out
    rows = json.loads(js.read_text())["rows"]
    assert sorted(r["stages"] for r in rows if r["impl"] == "mma") == [1, 2]
    assert all(r["causal"] and len(r["samples_ms"]) == 2 for r in rows)
    with cs.open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
