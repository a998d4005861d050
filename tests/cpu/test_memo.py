"""The per-call memos of the public entry points (asynccopy.memo) and what they key on."""

from dataclasses import replace

import pytest

from asynccopy import device, matmul, memo, tuning
from asynccopy.matrix import Matrix

H200 = replace(device.lookup("H200"), device_id=0)


def _m(rows, cols, *, ptr=1 << 30, lead=None):
    return Matrix(None, ptr, rows, cols, lead or cols, 1, "bfloat16", 0)


def test_a_value_is_made_once_and_an_error_is_not_kept():
    made = []
    box = memo.Memo(most=2)

    def make():
        made.append(1)
        return len(made)

    assert box.get("a", make) == 1 and box.get("a", make) == 1 and made == [1]
    with pytest.raises(ZeroDivisionError):
        box.get("b", lambda: 1 // 0)
    assert len(box) == 1  # the failure left nothing behind
    box.get("b", make)
    box.get("c", make)  # a third key empties the full memo first
    assert len(box) == 1 and box.get("a", make) == 4


def test_the_key_of_a_matrix_holds_what_a_configuration_reads():
    a = _m(300, 512)
    assert memo.matrix_key(a) == memo.matrix_key(replace(a, ptr=a.ptr + 4096))  # another buffer, same lines
    for other in (replace(a, ptr=a.ptr + 16), replace(a, ptr=a.ptr + 64), replace(a, row_stride=520),
                  replace(a, rows=301), replace(a, dtype="float16"), replace(a, device_id=1)):
        assert memo.matrix_key(other) != memo.matrix_key(a)
    # which the configuration does read: B's rows off 128-byte lines give pairs sharing B
    b = _m(3000, 5000, lead=5000)
    on_lines = matmul.configure(_m(3000, 3000), replace(b, row_stride=5120), "bfloat16", H200)
    off_lines = matmul.configure(_m(3000, 3000), b, "bfloat16", H200)
    assert on_lines.defines != off_lines.defines
    assert memo.matrix_key(b) != memo.matrix_key(replace(b, row_stride=5120))


def test_saving_a_tuning_record_moves_the_generation(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path))
    before = tuning.generation()
    tuning.save(tuning.key(H200, "bfloat16", "nn", 64, 64, 64), {"kernel": "wgmma", "tile": [128, 64], "stages": 2})
    assert tuning.generation() != before
    monkeypatch.setenv("ASYNCCOPY_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert tuning.generation() != before
