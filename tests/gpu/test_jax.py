"""JAX arrays in and out: the results are right, come back as JAX arrays, and the work is ordered
after JAX's own producer of the input and finished before JAX reads the result (no stream of ours
that JAX does not know about is left running)."""

import os

import numpy as np
import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX takes 75% of the GPU's memory otherwise

import asynccopy
from asynccopy import stream


@pytest.fixture(scope="module")
def jnp():
    jnp = pytest.importorskip("jax.numpy")
    import jax

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    return jnp


def test_run_follows_jax_producer_and_hands_back_a_finished_jax_array(jnp, rng):
    import jax

    host = rng.uniform(-1, 1, size=4096 * 40 + 5).astype(np.float32)
    x = jnp.sin(jnp.asarray(host))  # still running on JAX's stream when run() is called
    y = asynccopy.run(x, "ldgsts", stages=3, intensity=0)
    assert isinstance(y, jax.Array)
    z = y * 2.0  # JAX reads the result at once, on its own stream
    np.testing.assert_array_equal(np.asarray(z), 2.0 * np.asarray(x))  # JAX's sin, finished before we read it
    w = asynccopy.run(x, "tma_1d_pipeline" if asynccopy.device.current().cc >= (9, 0) else "cg", stages=3, intensity=2)
    assert stream.matches_reference(np.asarray(w), np.asarray(x), 2, 4096)


@pytest.mark.cc(9, 0)
def test_tma_box_load_of_a_jax_array(jnp, rng):
    from asynccopy import tma

    host = rng.integers(1, 60000, size=(40, 64)).astype(np.uint16)
    x = jnp.asarray(host)
    got = tma.load_box(x, (16, 64), (32, 0)).view(np.uint16)[: 16 * 64].reshape(16, 64)
    want = np.zeros((16, 64), np.uint16)
    want[:8] = host[32:]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gemm_of_jax_arrays(jnp, rng, dtype):
    import jax

    a = jnp.asarray(rng.standard_normal((300, 200)).astype(np.float32)).astype(dtype)
    b = jnp.sin(jnp.asarray(rng.standard_normal((200, 136)).astype(np.float32))).astype(dtype)  # still running
    c = asynccopy.gemm(a, b)
    assert isinstance(c, jax.Array) and c.dtype == a.dtype and c.shape == (300, 136)
    d = np.asarray((c * 2).astype(jnp.float32)) / 2  # JAX reads the result at once, on its own stream
    ref = np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(b.astype(jnp.float32), np.float64)
    tol = {"bfloat16": 8e-3, "float16": 1.5e-3, "float32": 2e-5}[dtype]
    assert np.linalg.norm(d - ref) / np.linalg.norm(ref) < tol


@pytest.mark.parametrize("kernel", [pytest.param("mma"), pytest.param("wgmma", marks=pytest.mark.cc(9, 0))])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_attention_of_jax_arrays(jnp, rng, dtype, kernel):
    import jax

    b, h, hkv, lq, lk, d = 1, 4, 2, 130, 200, 64
    q = jnp.asarray(rng.standard_normal((b, h, lq, d)).astype(np.float32)).astype(dtype)
    k = jnp.asarray(rng.standard_normal((b, hkv, lk, d)).astype(np.float32)).astype(dtype)
    v = jnp.sin(jnp.asarray(rng.standard_normal((b, hkv, lk, d)).astype(np.float32))).astype(dtype)  # still running
    out, lse = asynccopy.attention(q, k, v, causal=True, kernel=kernel, return_lse=True)
    assert isinstance(out, jax.Array) and out.dtype == q.dtype and out.shape == q.shape
    assert isinstance(lse, jax.Array) and lse.dtype == jnp.float32 and lse.shape == (b, h, lq)
    got = np.asarray((out * 2).astype(jnp.float32), np.float64) / 2  # JAX reads the result at once
    q64, k64, v64 = (np.asarray(x.astype(jnp.float32), np.float64) for x in (q, k, v))
    k64, v64 = np.repeat(k64, h // hkv, 1), np.repeat(v64, h // hkv, 1)
    s = np.einsum("bhqd,bhkd->bhqk", q64, k64) / np.sqrt(d)
    s = np.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    ref_lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    p = np.exp(s - ref_lse[..., None])
    ref = p @ v64
    assert np.abs(got - ref).max() < {"bfloat16": 3e-2, "float16": 4e-3}[dtype]
    assert np.abs(np.asarray(lse, np.float64) - ref_lse).max() < 1e-3
