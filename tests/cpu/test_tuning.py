"""GEMM tuning records without a GPU: shape classes, keys, the file (kept, reread, damaged), and
asynccopy.gemm's configuration following a record only where its kernel can take the operands."""

import json

import pytest

import asynccopy
from asynccopy import device, matmul, tuning
from asynccopy.errors import ArgumentError
from asynccopy.gemm_kernels import epi_bufs_of
from asynccopy.matmul import Matrix

H200 = device.lookup("H200")


def _m(rows, cols, *, dtype="bfloat16", ptr=1 << 30):
    return Matrix(None, ptr, rows, cols, cols, 1, dtype, 0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_shape_class_is_each_extents_power_of_two_bucket():
    assert tuning.shape_class(1, 2, 3) == (0, 1, 2)
    assert tuning.shape_class(513, 1000, 1024) == (10, 10, 10)
    assert tuning.shape_class(1025, 8192, 8193) == (11, 13, 14)
    assert tuning.layout_of(False, True) == "nn" and tuning.layout_of(True, False) == "tt"
    assert tuning.key(H200, "bfloat16", "nt", 1000, 1024, 600) == "H200|cc90|bfloat16|nt|m10n10k10|a16"
    assert tuning.key(H200, "bfloat16", "nt", 1000, 1024, 600, align=4).endswith("|m10n10k10|a4")


def test_a_record_is_kept_in_the_cache_directory_and_read_back(cache):
    entry = tuning.key(H200, "bfloat16", "nn", 4096, 4096, 4096)
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 128], "stages": 5, "splits": 1})
    on_disk = json.loads((cache / tuning.FILE).read_text())
    assert on_disk[entry]["stages"] == 5
    tuning._known.clear()  # a new process
    assert tuning.lookup(H200, "bfloat16", False, True, 4000, 3000, 2100) == on_disk[entry]
    assert tuning.lookup(H200, "float16", False, True, 4000, 3000, 2100) is None


def test_a_damaged_file_is_no_record(cache):
    (cache / tuning.FILE).write_text("{not json")
    tuning._known.clear()
    assert tuning.records() == {}
    tuning.save("k", {"kernel": "wgmma"})  # and tuning again rewrites it
    assert json.loads((cache / tuning.FILE).read_text()) == {"k": {"kernel": "wgmma"}}


def test_gemm_follows_a_record_only_where_it_fits(cache):
    a, b = _m(4096, 4096), _m(4096, 4096)
    default = matmul.configure(a, b, "bfloat16", H200)
    assert (default.tile, default.stages) == ((128, 256), 3)
    entry = tuning.key(H200, "bfloat16", "nn", 4096, 4096, 4096)
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 128], "stages": 5, "splits": 1})
    tuned = matmul.configure(a, b, "bfloat16", H200)
    assert (tuned.kernel, tuned.tile, tuned.stages) == ("wgmma", (128, 128), 5)
    # the caller's own choice wins over the record
    assert matmul.configure(a, b, "bfloat16", H200, stages=2).tile == (128, 256)
    # a record that cannot be taken here (7 stages of 48 KiB do not fit; a kernel that takes no bf16) is ignored
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 7, "splits": 1})
    assert matmul.configure(a, b, "bfloat16", H200).stages == 3
    tuning.save(entry, {"kernel": "simt", "tile": [128, 128], "stages": 3})
    assert matmul.configure(a, b, "bfloat16", H200).kernel == "wgmma"
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 128], "stages": 4, "splits": 8})
    assert matmul.configure(a, b, "bfloat16", H200).splits == 8


def test_a_record_is_kept_per_operand_alignment(cache):
    # k = 4092: rows of 8184 bytes, 8-byte aligned; no TMA: the mma kernel with 8-byte copies
    a, b = _m(4096, 4092), _m(4092, 4096)
    assert matmul.alignment(a, b) == 8
    default = matmul.configure(a, b, "bfloat16", H200)
    assert default.kernel == "mma" and default.align == 8
    # a record of 16-byte-aligned operands of the same shape class is not this one's
    tuning.save(tuning.key(H200, "bfloat16", "nn", 4096, 4096, 4096), {"kernel": "mma", "tile": [128, 128],
                                                                        "stages": 2, "splits": 1})
    assert matmul.configure(a, b, "bfloat16", H200).stages == default.stages
    tuning.save(tuning.key(H200, "bfloat16", "nn", 4096, 4096, 4092, align=8),
                {"kernel": "mma", "tile": [128, 128], "stages": 2, "splits": 1})
    assert matmul.configure(a, b, "bfloat16", H200).stages == 2


def test_without_a_cache_directory_records_last_for_the_process(monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", "off")
    tuning.save("only-here", {"kernel": "mma"})
    assert tuning.records()["only-here"] == {"kernel": "mma"}


@pytest.mark.parametrize("args, kwargs, message", [
    ((0, 8, 8), {}, r"m must be in \[1, 1048576\], got 0"),
    ((8, 8, 8, "int8"), {}, r"dtype must be one of bfloat16, float16, float32, got 'int8'"),
    ((8, 8, 8), {"layout": "xx"}, r"layout must be one of nn, nt, tn, tt, got 'xx'"),
    ((8, 8, 8), {"kernels": ["dma"]}, r"unknown GEMM kernel 'dma'"),
    ((8, 8, 8), {"kernels": ["simt"]}, r"GEMM kernel 'simt' takes float32, not bfloat16"),
    ((8, 8, 8), {"reps": 0}, r"reps must be in \[1, 100000\], got 0"),
])
def test_tune_names_a_bad_argument_before_looking_for_a_gpu(args, kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        asynccopy.gemm.tune(*args, **kwargs)


def test_tuning_tries_the_paired_tile_both_ways_and_gemm_follows_the_record(cache):
    from asynccopy.bench import gemm_tune

    # B's rows 6000 bytes apart: the 128 x 256 tile pairs by default at 4 stages; tuning times it paired and alone
    a, b = _m(3000, 4096), _m(4096, 3000)
    base = matmul.configure(a, b, "bfloat16", H200)
    assert base.defines == matmul.PAIRED and base.stages == 4
    configs = gemm_tune.candidates(base, ("wgmma",), a, b, H200)
    paired = [c for c in configs if matmul.cluster_of(c)[1] == "b"]
    assert paired and all(c.tile == (128, 256) and c.splits == 1 for c in paired)
    assert {matmul.cluster_of(c)[1] for c in configs} == {None, "b", "k"}
    assert {c.stages for c in paired} == {c.stages for c in configs if c.tile == (128, 256) and not c.defines}
    # on the lines: paired with the four staging buffers where they fit beside the stage count
    sq = _m(4096, 4096)
    on = [c for c in gemm_tune.candidates(base, ("wgmma",), sq, sq, H200) if matmul.cluster_of(c)[1] == "b"]
    assert {(c.stages, epi_bufs_of(c)) for c in on} == {(1, 4), (2, 4), (3, 4), (4, 2)}
    entry = tuning.key(H200, "bfloat16", "nn", 3000, 3000, 4096)
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 1, "paired": False})
    assert matmul.configure(a, b, "bfloat16", H200).defines == ()  # the record ran alone
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 1, "paired": True})
    assert matmul.configure(a, b, "bfloat16", H200).defines == matmul.PAIRED  # a record from before the buffers
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 1, "paired": True,
                        "epi_bufs": 4})
    assert epi_bufs_of(matmul.configure(a, b, "bfloat16", H200)) == 4
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 2})
    assert matmul.configure(a, b, "bfloat16", H200).defines == ()  # no pairs with split k
    # a paired record of a shape whose default splits k: the record's one split, paired as it was timed
    a, b = _m(256, 8192), _m(8192, 1000)
    assert matmul.configure(a, b, "bfloat16", H200, tile=(128, 256)).splits > 1
    tuning.save(tuning.key(H200, "bfloat16", "nn", 256, 1000, 8192),
                {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 1, "paired": True})
    tuned = matmul.configure(a, b, "bfloat16", H200)
    assert (tuned.splits, tuned.stages, tuned.defines) == (1, 3, matmul.PAIRED)


def test_tuning_tries_pairs_splitting_k_and_gemm_follows_the_record(cache):
    from asynccopy.bench import gemm_tune

    a, b = _m(128, 8192), _m(8192, 8192)
    base = matmul.configure(a, b, "bfloat16", H200)
    assert base.pair_k and base.stages == 6  # the default: 64 tiles of 128 x 128, each split between a pair
    configs = gemm_tune.candidates(base, ("wgmma",), a, b, H200)
    pairs = [c for c in configs if c.pair_k]
    # the pair-k tile at every stage count it takes alone, one split, no stream-K
    assert {c.stages for c in pairs} == {c.stages for c in configs if c.tile == (128, 128) and not c.defines}
    assert all(c.tile == (128, 128) and c.splits == 1 and not c.stream_k for c in pairs)
    entry = tuning.key(H200, "bfloat16", "nn", 128, 8192, 8192)
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 128], "stages": 5, "splits": 1, "pair_k": True})
    tuned = matmul.configure(a, b, "bfloat16", H200)
    assert tuned.pair_k and tuned.stages == 5
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 64], "stages": 8, "splits": 1, "pair_k": False})
    tuned = matmul.configure(a, b, "bfloat16", H200)
    assert not tuned.pair_k and tuned.tile == (128, 64)


def test_tuning_tries_stream_k_both_ways_where_a_last_wave_can_be_shared_and_gemm_follows_the_record(cache):
    from asynccopy.bench import gemm_tune

    a, b = _m(8192, 8192), _m(8192, 8192)  # 2048 tiles of 128 x 256: stream-K by default at that tile
    base = matmul.configure(a, b, "bfloat16", H200)
    assert base.tile == (128, 256) and base.stream_k
    configs = gemm_tune.candidates(base, ("wgmma",), a, b, H200)
    for tile in matmul.KERNELS["wgmma"].tiles:
        at = [c for c in configs if c.tile == tile and c.splits == 1 and not c.defines]
        tiles = -(-8192 // tile[0]) * -(-8192 // tile[1])
        shared = matmul.stream_k_plan(tiles, 128, H200.sm_count)[0] > 0
        assert {c.stream_k for c in at} == ({True, False} if shared else {False})
        # each stage count once each way; the default's choice among them
        assert len(at) == len({c.stages for c in at}) * (2 if shared else 1)
    entry = tuning.key(H200, "bfloat16", "nn", 8192, 8192, 8192)
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 1, "paired": False,
                        "stream_k": False})
    assert not matmul.configure(a, b, "bfloat16", H200).stream_k  # the record ran without it
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 128], "stages": 4, "splits": 1, "stream_k": True})
    tuned = matmul.configure(a, b, "bfloat16", H200)
    assert (tuned.tile, tuned.stages, tuned.stream_k) == ((128, 128), 4, True)
    tuning.save(entry, {"kernel": "wgmma", "tile": [128, 256], "stages": 3, "splits": 1})  # an older record
    assert matmul.configure(a, b, "bfloat16", H200).stream_k  # the default's rule then
