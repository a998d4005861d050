"""The attention bench's arithmetic, shapes, kernel choices and reports, and its command's checks, without a GPU
(asynccopy.bench.attention_bench)."""

import re
from dataclasses import replace

import numpy as np
import pytest

from asynccopy import cli, device
from asynccopy.bench import attention_bench as ab
from asynccopy.bench import report
from asynccopy.bench.attention_bench import AttentionBench, AttentionRow
from asynccopy.errors import ArgumentError, DeviceError
from asynccopy.sdpa import KERNELS, Problem, configure

H200 = device.lookup("H200")


@pytest.fixture
def no_gpu(monkeypatch):
    """The local GPU hidden, if there is one: whatever needs a device fails, saying so."""
    def current(device_id=None):
        raise DeviceError("no CUDA GPU available (hidden by the test)")

    monkeypatch.setattr(device, "current", current)


# ---------------------------------------------------------------------------------------------
# The FLOP count


@pytest.mark.parametrize("q_len", [1, 2, 3, 7, 64, 65, 130])
@pytest.mark.parametrize("k_len", [1, 2, 5, 64, 100])
def test_pairs_count_the_entries_the_top_left_causal_mask_keeps(q_len, k_len):
    keep = np.tril(np.ones((q_len, k_len), dtype=np.int64))  # PyTorch's is_causal mask: query i sees keys j <= i
    assert ab.pairs(q_len, k_len, True) == keep.sum()
    assert ab.pairs(q_len, k_len, False) == q_len * k_len


def test_causal_pairs_when_the_lengths_differ():
    assert ab.pairs(1, 8192, True) == 1  # one query sees one key: not half of 8192
    assert ab.pairs(3, 5, True) == 1 + 2 + 3
    assert ab.pairs(5, 3, True) == 1 + 2 + 3 + 3 + 3  # the queries past k_len see every key
    assert ab.pairs(8192, 1, True) == 8192


def test_flops_are_four_b_h_d_per_pair_and_match_the_half_rule_within_its_s_plus_one_over_s():
    b, h, s, d = 4, 16, 8192, 128
    assert ab.flops((b, h, h, s, s, d), False) == 4 * b * h * s * s * d  # the issue's 4 B H S^2 D
    assert ab.flops((b, h, h, s, s, d), True) == 4 * b * h * d * s * (s + 1) // 2
    assert ab.flops((4, 32, 8, s, s, d), False) == 4 * 4 * 32 * s * s * d  # query heads count, not kv heads
    for shape in ab.DEFAULT_SHAPES:  # every default shape has q_len == k_len >= 1024
        half = 4 * shape[0] * shape[1] * shape[3] ** 2 * shape[5] / 2
        ratio = ab.flops(shape, True) / half
        assert ratio == pytest.approx(1 + 1 / shape[3]) and 1 < ratio <= 1.001


# ---------------------------------------------------------------------------------------------
# Shapes


def test_the_default_shapes_are_the_issues():
    square = {(s, d) for b, h, hkv, s, lk, d in ab.DEFAULT_SHAPES if (b, h, hkv) == (4, 16, 16) and s == lk}
    assert {(s, d) for s in (1024, 2048, 4096, 8192, 16384) for d in (64, 128)} <= square
    assert (4, 32, 8, 8192, 8192, 128) in ab.DEFAULT_SHAPES
    assert {8191, 3000} <= {s for _, _, _, s, _, _ in ab.DEFAULT_SHAPES}
    assert set(ab.QUICK_SHAPES) <= set(ab.DEFAULT_SHAPES) | {(4, 32, 8, 4096, 4096, 128)}
    assert all(ab.check_shape(s) == s for s in ab.DEFAULT_SHAPES + ab.QUICK_SHAPES)


def test_shapes_parse_in_their_two_forms_and_print_in_the_shortest():
    assert ab.parse_shapes("4:16:8192:128, 4:32:8:8192:4096:64,") == ((4, 16, 16, 8192, 8192, 128),
                                                                      (4, 32, 8, 8192, 4096, 64))
    assert ab.parse_shapes("1:1:1:1:1:64") == ((1, 1, 1, 1, 1, 64),)
    for shape in ab.DEFAULT_SHAPES + ((2, 4, 4, 100, 300, 64), (1, 8, 2, 77, 77, 128)):
        assert ab.parse_shapes(ab.shape_label(shape)) == (shape,)
    assert ab.shape_label((4, 16, 16, 8192, 8192, 128)) == "4:16:8192:128"
    assert ab.shape_label((4, 32, 8, 8192, 8192, 128)) == "4:32:8:8192:8192:128"
    assert ab.problem_label((4, 16, 16, 3000, 3000, 64, True)) == "4:16:3000:64 causal"


@pytest.mark.parametrize("text, message", [
    ("4:16:8192", r"an attention shape is B:H:S:D or B:H:HKV:LQ:LK:D, got '4:16:8192'"),
    ("4:16:8:8192:128", r"an attention shape is B:H:S:D or B:H:HKV:LQ:LK:D, got '4:16:8:8192:128'"),
    ("4x16x1024x64", r"an attention shape is B:H:S:D or B:H:HKV:LQ:LK:D, got '4x16x1024x64'"),
    ("4:16:1k:64", r"got '4:16:1k:64'"),
    (" , ", r"--shapes names no shape \(each B:H:S:D or B:H:HKV:LQ:LK:D\)"),
    ("4:0:1024:64", r"a shape's heads must be in \[1, 65535\], got 0"),
    ("4:16:16:0:1024:64", r"a shape's q_len must be in \[1, 16777216\], got 0"),
    ("4:16:1024:2048", r"a shape's head_dim must be in \[1, 1024\], got 2048"),
    ("4:32:3:1024:1024:64", r"a shape's kv_heads must divide its heads \(grouped-query attention\), got 3 and 32 "
                            r"in 4:32:3:1024:1024:64"),
])
def test_a_bad_shape_is_named_with_the_rule(text, message):
    with pytest.raises(ArgumentError, match=message):
        ab.parse_shapes(text)


# ---------------------------------------------------------------------------------------------
# Kernels and stage counts


def test_every_record_of_the_kernel_table_is_taken_and_a_new_one_without_change(monkeypatch):
    assert ab.kernels_for() == tuple(KERNELS) and "mma" in ab.kernels_for()
    assert ab.kernels_for(("mma", "mma")) == ("mma",)
    monkeypatch.setitem(KERNELS, "later", replace(KERNELS["mma"], name="later", min_cc=(10, 0)))
    assert ab.kernels_for()[-1] == "later"
    p = Problem(4, 16, 16, 4096, 4096, 128, "bfloat16")
    configs, notes = ab.configs_for(p, False, None, None, H200)
    assert ("mma", configure(p, H200, kernel="mma")) in configs
    assert ("later", "needs compute capability 10.0; H200 is 9.0") in notes and "later" not in {n for n, _ in configs}


def test_a_stage_count_that_does_not_fit_is_skipped_with_configures_reason():
    rec = KERNELS["mma"]
    small = replace(H200, smem_per_block_optin=100 * 1024)  # room for 3 stages of 32 KiB at head dim 128
    fit = rec.fit(128, small.smem_per_block_optin)
    assert fit == 3
    p = Problem(4, 16, 16, 4096, 4096, 128, "bfloat16")
    configs, notes = ab.configs_for(p, True, ("mma",), (1, 2, 3, 4, 5, 3), small)
    assert [(n, c.stages, c.causal) for n, c in configs] == [("mma", 1, True), ("mma", 2, True), ("mma", 3, True)]
    assert len(notes) == 2
    assert notes[0][0] == "mma s4" and notes[0][1].startswith("4 stages of 32 KiB (head_dim 128) do not fit")
    assert "at most 3" in notes[0][1]
    assert notes[1] == ("mma s5", f"stages must be in [1, {rec.max_stages}], got 5")
    assert [c.stages for _, c in ab.configs_for(p, False, ("mma",), None, small)[0]] == [min(fit, rec.default_stages[1])]


def test_a_head_dim_no_kernel_takes_is_a_note_not_an_error():
    p = Problem(1, 2, 2, 512, 512, 256, "bfloat16")
    configs, notes = ab.configs_for(p, False, ("mma",), None, H200)
    assert configs == [] and notes[0][0] == "mma" and notes[0][1].startswith("takes head_dim 64 or 128, got 256")


def test_kernels_and_stages_are_checked_by_name():
    with pytest.raises(ArgumentError, match=r"^unknown attention kernel 'dma'; choose one of: .*mma"):
        ab.kernels_for(("mma", "dma"))
    with pytest.raises(ArgumentError, match=r"^--kernels names no kernel$"):
        ab.kernels_for(())
    top = max(rec.max_stages for rec in KERNELS.values())
    ab.check_stages(tuple(range(1, top + 1)))
    with pytest.raises(ArgumentError, match=rf"^each of --stages must be in \[1, {top}\], got {top + 1}$"):
        ab.check_stages((1, top + 1))
    with pytest.raises(ArgumentError, match=r"^--stages needs at least one stage count$"):
        ab.check_stages(())


def test_run_checks_its_arguments_before_it_looks_for_a_gpu(no_gpu):
    with pytest.raises(ArgumentError, match=r"^dtype must be one of bfloat16, float16, got 'float32'$"):
        ab.run(dtype="float32")
    with pytest.raises(ArgumentError, match=r"^layout must be one of bhsd, bshd, got 'sbhd'$"):
        ab.run(layout="sbhd")
    with pytest.raises(ArgumentError, match=r"a shape's kv_heads must divide its heads"):
        ab.run(shapes=((1, 4, 3, 64, 64, 64),))


# ---------------------------------------------------------------------------------------------
# Rows and reports


def _row(impl, ms, stages=None, shape=(4, 16, 16, 8192, 8192, 128), causal=False):
    return AttentionRow(*shape, causal, impl, stages, ms, ab.flops(shape, causal) / (ms * 1e-3) / 1e12)


def _bench():
    gqa = (4, 32, 8, 8192, 8192, 128)
    rows = [_row("sdpa-flash", 2.0), _row("sdpa-cudnn", 1.0), _row("sdpa-efficient", 4.0),
            _row("mma", 2.5, 2), _row("mma", 1.6, 3), _row("later", 0.8, 2),
            _row("sdpa-cudnn", 0.6, causal=True), _row("mma", 1.2, 3, causal=True),
            _row("mma", 3.0, 3, shape=gqa)]  # no backend ran on this one
    why = "RuntimeError: No available kernel"
    notes = [{"problem": "", "what": "sdpa-cudnn", "why": "PyTorch 2.1 has no SDPBackend.CUDNN_ATTENTION"},
             {"problem": "4:32:8:8192:8192:128", "what": "sdpa-flash", "why": why}]
    notes += [{"problem": f"4:16:{s}:256", "what": "mma", "why": "takes head_dim 64 or 128"} for s in (1, 2, 3, 4)]
    return AttentionBench(H200.as_dict(), "bfloat16", "bhsd", rows, notes)


def test_each_row_is_a_share_of_the_best_backend_on_its_own_problem():
    result = _bench()
    ab._relative_to_best(result.rows)
    assert [None if r.pct_best is None else round(r.pct_best, 1) for r in result.rows] == [
        50.0, 100.0, 25.0, 40.0, 62.5, 125.0, 100.0, 50.0, None]


def test_the_summary_gives_the_best_of_each_implementation_per_problem():
    result = _bench()
    ab._relative_to_best(result.rows)
    lines = ab.summary(result)
    full = 4 * 4 * 16 * 8192 * 8192 * 128
    assert round(full / 1e-3 / 1e12) == 2199  # sdpa-cudnn at 1 ms
    assert lines[0] == ("4:16:8192:128: sdpa-cudnn 2199 (100%), sdpa-flash 1100 (50%), sdpa-efficient 550 (25%), "
                        "later 2749 (125%) s2, mma 1374 (62%) s3 TFLOP/s")
    assert lines[1].startswith("4:16:8192:128 causal: sdpa-cudnn 1833 (100%), mma 916 (50%) s3")
    assert lines[2] == "4:32:8:8192:8192:128: mma 1466 s3 TFLOP/s"  # no backend: no share
    assert lines[3] == "asynccopy's best kernel against the best SDPA backend: 50% to 125% (median 88%) over 2 problem(s)"
    assert lines[4:] == ["skipped sdpa-cudnn: PyTorch 2.1 has no SDPBackend.CUDNN_ATTENTION",
                         "skipped sdpa-flash on 4:32:8:8192:8192:128: RuntimeError: No available kernel",
                         "skipped mma on 4 problems (4:16:1:256, 4:16:2:256, ...): takes head_dim 64 or 128"]


def test_the_rows_go_to_a_table_json_and_csv(tmp_path):
    result = _bench()
    ab._relative_to_best(result.rows)
    result.rows[0].samples_ms = [2.0, 2.1]
    table = report.table(result.rows, ab.COLUMNS).splitlines()
    assert table[0].split() == ["B", "H", "HKV", "LQ", "LK", "D", "causal", "impl", "stages", "ms", "TFLOP/s", "%",
                                "best", "max", "err", "config"]
    assert len(table) == 2 + len(result.rows)
    report.write(tmp_path / "a.csv", result.as_dict())
    header = (tmp_path / "a.csv").read_text().splitlines()[0].split(",")
    assert header[:9] == ["batch", "heads", "kv_heads", "q_len", "k_len", "head_dim", "causal", "impl", "stages"]
    assert "samples_ms" not in header and "max_abs_error" in header and "pct_best" in header
    report.write(tmp_path / "a.json", result.as_dict())
    assert '"samples_ms": [\n    2.0' in (tmp_path / "a.json").read_text()


def test_the_plot_has_a_panel_per_problem(tmp_path):
    pytest.importorskip("matplotlib")
    result = _bench()
    ab._relative_to_best(result.rows)
    path = tmp_path / "attention.png"
    assert ab.plot(result, str(path)) == str(path) and path.stat().st_size > 1000


# ---------------------------------------------------------------------------------------------
# The command


def test_the_suite_is_wired():
    args = cli.parser().parse_args(["bench", "attention", "--quick"])
    assert (args.suite, args.fn.__name__, args.layout, args.causal) == ("attention", "cmd_attention", "bhsd", "both")


def test_the_help_says_how_to_write_a_shape(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "attention", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "B:H:S:D" in out and "B:H:HKV:LQ:LK:D" in out and "transpose(1, 2)" in out and "--stages" in out


TOP = max(rec.max_stages for rec in KERNELS.values())


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "4:16:8192"], r"an attention shape is B:H:S:D or B:H:HKV:LQ:LK:D, got '4:16:8192'"),
    (["--shapes", ","], r"--shapes names no shape"),
    (["--shapes", "4:32:3:64:64:64"], r"a shape's kv_heads must divide its heads \(grouped-query attention\), got 3"),
    (["--shapes", "0:16:1024:64"], r"a shape's batch must be in \[1, 65535\], got 0"),
    (["--quick", "--shapes", "1:1:64:64"], r"--quick runs its own shapes: give --quick or --shapes, not both"),
    (["--reps", "0"], r"--reps must be in \[1, 100000\], got 0"),
    (["--warmup", "-1"], r"--warmup must be in \[0, 100000\], got -1"),
    (["--rounds", "0"], r"--rounds must be in \[1, 1000\], got 0"),
    (["--plan", "--stages", "2"], r"--plan checks the model's stage count against a sweep: give --stages two or more"),
    (["--dtype", "float32"], r"--dtype must be one of bfloat16, float16, got 'float32'"),
    (["--kernels", "dma"], r"unknown attention kernel 'dma'; choose one of: .*mma"),
    (["--kernels", ","], r"--kernels names no kernel"),
    (["--stages", "0"], rf"each of --stages must be in \[1, {TOP}\], got 0"),
    (["--stages", f"1,{TOP + 1}"], rf"each of --stages must be in \[1, {TOP}\], got {TOP + 1}"),
    (["--stages", ","], r"--stages needs at least one stage count"),
    (["--stages", "1,x"], r"expected comma-separated integers, got '1,x'"),
    (["--layout", "sbhd"], r"argument --layout: invalid choice: 'sbhd'"),
    (["--causal", "maybe"], r"argument --causal: invalid choice: 'maybe'"),
    (["--png", "/no/such/folder/a.png"], r"cannot write /no/such/folder/a.png: the folder /no/such/folder does not exist"),
    (["--png", "a.jpg"], r"cannot write a.jpg: the picture format comes from the extension"),
    (["--json", "rows.txt"], r"cannot write rows.txt: expected a file ending in .json"),
    (["--csv", "rows.json"], r"cannot write rows.json: expected a file ending in .csv"),
])
def test_the_command_names_a_bad_argument_before_any_gpu_is_looked_for(no_gpu, argv, message, capsys):
    try:
        rc = cli.main(["bench", "attention", *argv])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "no CUDA GPU" not in err, err


def test_without_a_gpu_the_command_fails_in_one_line(no_gpu, capsys):
    assert cli.main(["bench", "attention", "--quick", "--stages", "1,2", "--layout", "bshd"]) == 2
    assert capsys.readouterr().err == "asynccopy bench: no CUDA GPU available (hidden by the test)\n"


def test_the_plan_check_sets_the_models_kv_stage_count_against_the_sweep():
    from asynccopy import device
    from asynccopy.attention_kernels import plan_stages
    from asynccopy.bench import attention_plan

    facts = device.lookup("H200")
    rec = ab.KERNELS["wgmma"]
    # causal, 1000 queries x 1000 keys in tiles of 128 x 128: query tiles 0..7 see 1, 2, .., 8 key tiles
    assert attention_plan.key_tiles(rec, 1000, 1000, True, 128) == sum(range(1, 9))
    assert attention_plan.key_tiles(rec, 1000, 1000, False, 128) == 8 * 6  # 176-key tiles without the mask
    # head dim 64: three consumer warpgroups, 192 queries a block: query tiles 0..5 see 2, 3, 5, 6, 8, 8 key tiles
    assert attention_plan.key_tiles(rec, 1000, 1000, True, 64) == 2 + 3 + 5 + 6 + 8 + 8
    assert attention_plan.key_tiles(ab.KERNELS["mma"], 1000, 1000, False, 64) == 8 * 16
    base = dict(batch=4, heads=16, kv_heads=16, q_len=8192, k_len=8192, head_dim=128, causal=False, impl="wgmma")
    rows = [ab.AttentionRow(**base, stages=s, ms=ms, tflops=1.0) for s, ms in ((1, 2.0), (2, 1.2), (3, 1.21))]
    rows.append(ab.AttentionRow(**{**base, "impl": "sdpa-cudnn"}, stages=None, ms=1.1, tflops=1.0))
    plans = attention_plan.plan_check(ab.AttentionBench(facts.as_dict(), "bfloat16", "bhsd", rows), memory=None)
    assert len(plans) == 1
    p = plans[0]
    per_sm = 4 * 16 * 64 * 47 / 132  # 64 query tiles x 47 key tiles of 176 a (batch, head)
    assert p.tile_ns == pytest.approx(1.2e6 / per_sm) and p.best_stages == 2
    want = plan_stages(rec, 128, "bfloat16", facts, tile_ns=p.tile_ns, memory=None).recommended
    assert p.planned == want and p.ratio == pytest.approx({1: 2.0 / 1.2, 2: 1.0, 3: 1.21 / 1.2}[want])


def test_variants_run_beside_their_kernels_default_build():
    from asynccopy.attention_kernels import VARIANTS

    facts = device.lookup("H200")
    p = Problem(4, 16, 16, 8192, 8192, 64, "bfloat16")  # long enough for the kernel's own consumer count
    configs, _ = ab.configs_for(p, True, ["wgmma", "mma"], (1, 2), facts, ("serial", "pingpong"))
    labels = [(label, cfg.stages, cfg.defines) for label, cfg in configs]
    own = (("ASYNCCOPY_ATTN_PERSISTENT", 1),)  # the default build's knob, causal or not (with_persistence)
    assert ("wgmma", 1, own) in labels and ("wgmma", 2, own) in labels
    for st in (1, 2):  # K and V on their own barriers: every variant runs from one stage up
        assert ("wgmma+serial", st, own + VARIANTS["wgmma"]["serial"]) in labels
        assert ("wgmma+pingpong", st, own + VARIANTS["wgmma"]["pingpong"]) in labels
    assert not any(lab == "wgmma+overlap" for lab, _, _ in labels)  # only the variants asked for
    assert not any(lab.startswith("mma+") for lab, _, _ in labels)  # none of mma's variants asked for
    known = ("bm128, bm64, consumers2, consumers3, headmajor, keys128, keys176, obuffer, overlap, persistent, pingpong, "
             "plain, prefetch, qsmem, rows16, rows32, serial, suspend, xor")
    with pytest.raises(ArgumentError, match=rf"unknown variant 'fast'; known: {known}"):
        ab.variants_for(["fast"])
