"""asynccopy.gemm on the GPU against float64: random and edge shapes, all four layouts (each operand
row-major or a transposed view), bf16 and f16 in, bf16 / f16 / f32 out, outputs poisoned first."""

import numpy as np
import pytest

import asynccopy

pytestmark = pytest.mark.cc(9, 0)

# (m, k, n): ones, edges of the 128 x 256 x 64 tiles, odd sizes, long and skinny
SHAPES = [(1, 1, 1), (1, 64, 1), (7, 13, 5), (128, 64, 256), (129, 65, 257), (300, 1000, 200), (1000, 17, 999),
          (2048, 512, 1024), (64, 4096, 64), (3000, 200, 130)]
TOL = {"bfloat16": 8e-3, "float16": 1.5e-3, "float32": 2e-5}  # rounding of C; f32 accumulation below that


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


def _operand(torch, rows, cols, column_major, dtype, rng):
    """A [rows, cols] CUDA matrix whose leading dimension is padded to 8 elements (TMA's 16 bytes), as a
    row-major array or as the transposed view of one; and its exact values in float64."""
    inner, outer = (rows, cols) if column_major else (cols, rows)
    padded = -(-inner // 8) * 8
    store = torch.randn(outer, padded, device="cuda").to(dtype)
    view = store[:, :inner]
    t = view.T if column_major else view
    return t, t.double().cpu().numpy()


@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])  # a, b: n = row-major, t = a transposed view
@pytest.mark.parametrize("dtype, out_dtype", [("bfloat16", None), ("float16", None), ("bfloat16", "float32")])
def test_gemm_matches_float64(torch, rng, m, k, n, layout, dtype, out_dtype):
    tdt = getattr(torch, dtype)
    torch.manual_seed(int(rng.integers(1 << 31)))
    a, ha = _operand(torch, m, k, layout[0] == "t", tdt, rng)
    b, hb = _operand(torch, k, n, layout[1] == "t", tdt, rng)
    out_name = out_dtype or dtype
    out = torch.full((m, n), float("nan"), device="cuda", dtype=getattr(torch, out_name))
    got = asynccopy.gemm(a, b, out=out, out_dtype=out_dtype)
    assert got is out
    c = out.double().cpu().numpy()
    ref = ha @ hb
    assert not np.isnan(c).any(), f"{np.isnan(c).sum()} of {m * n} outputs never written"
    err = np.linalg.norm(c - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err < TOL[out_name], f"relative error {err:.2e}"


def test_gemm_returns_a_new_array_of_the_callers_kind_on_its_stream(torch):
    a = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 520, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        c = asynccopy.gemm(a, b)
    s.synchronize()
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16 and tuple(c.shape) == (300, 520)
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < TOL["bfloat16"]


@pytest.mark.parametrize("stages, tile", [(1, 128), (2, 256), (3, 128), (7, 128)])
def test_every_stage_count_and_tile_computes_the_same_product(torch, stages, tile):
    a = torch.randn(515, 700, device="cuda", dtype=torch.float16)[:, :693]
    b = torch.randn(693, 384, device="cuda", dtype=torch.float16)
    c = asynccopy.gemm(a, b, stages=stages, tile=tile, out_dtype="float32")
    ref = a.double() @ b.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < TOL["float32"]


def test_k_zero_gives_zeros(torch):
    a = torch.empty(5, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.empty(0, 7, device="cuda", dtype=torch.bfloat16)
    out = torch.full((5, 7), float("nan"), device="cuda", dtype=torch.bfloat16)
    asynccopy.gemm(a, b, out=out)
    assert (out == 0).all()


def test_cupy_half(rng):
    cp = pytest.importorskip("cupy")
    a = cp.asarray(rng.standard_normal((200, 136)).astype(np.float16))
    b = cp.asarray(rng.standard_normal((136, 72)).astype(np.float16))
    c = asynccopy.gemm(a, b)
    assert isinstance(c, cp.ndarray) and c.dtype == cp.float16
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    assert np.linalg.norm(cp.asnumpy(c) - ref) / np.linalg.norm(ref) < TOL["float16"]
