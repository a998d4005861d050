"""The examples, run on the GPU (tests/cpu/test_examples.py compiles them)."""

import numpy as np
import pytest

from tests.cpu.test_examples import load


@pytest.mark.cc(8, 0)  # cp.async
def test_custom_pipeline_runs(any_xp):
    load("custom_pipeline").main()  # asserts its row sums against a float64 reference


@pytest.fixture
def rand_bf16():
    """The example's random bf16 CUDA matrices (PyTorch, or CuPy with ml_dtypes)."""
    try:
        return load("wgmma_gemm").framework()[0]
    except ImportError as exc:
        pytest.skip(f"needs PyTorch, or CuPy with ml_dtypes (bfloat16): {exc}")


def _host64(x):
    """A CUDA matrix (PyTorch or CuPy) as a float64 NumPy array."""
    return x.double().cpu().numpy() if hasattr(x, "cpu") else x.astype(np.float64).get()


@pytest.mark.cc(9, 0)  # TMA and wgmma (sm_90a)
def test_wgmma_gemm_runs(rand_bf16):
    load("wgmma_gemm").main()  # asserts C against a float64 reference


@pytest.mark.cc(9, 0)
@pytest.mark.parametrize("stages", [1, 3])
# (m, n, k, bn): several tiles each way; k = 64, one slice of k (fewer than the stages); a single tile
@pytest.mark.parametrize("m, n, k, bn", [(256, 384, 512, 128), (256, 384, 512, 64), (128, 256, 64, 256),
                                         (64, 64, 128, 64)])
def test_wgmma_gemm_matches_float64(rand_bf16, m, n, k, bn, stages):
    a, w = rand_bf16((m, k)), rand_bf16((n, k))  # fresh random inputs; C is a new array
    c = _host64(load("wgmma_gemm").gemm(a, w, stages=stages, bn=bn))
    assert c.shape == (m, n)
    assert not np.isnan(c).any(), f"{np.isnan(c).sum()} of {m * n} outputs are NaN"
    want = _host64(a) @ _host64(w).T
    err = np.linalg.norm(c - want) / np.linalg.norm(want)
    assert err < 1e-2, f"relative error {err:.2e}"
